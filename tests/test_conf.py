"""Tests for natsbroker.config.syntax, the nats-server configuration file parser."""

import datetime
import os
import re
import textwrap

import pytest
from hypothesis import given, settings, strategies as st

from natsbroker.config.syntax import ConfError, ConfMap, parse_duration, parse_file, parse_size, parse_string

UTC = datetime.timezone.utc


def parse(text, **kw):
    return parse_string(textwrap.dedent(text), **kw)


def raises_at(text, line, col, match, filename="<string>"):
    """Assert that parsing ``text`` fails at ``line``:``col`` with ``match``."""
    with pytest.raises(ConfError) as info:
        parse_string(text)
    err = info.value
    assert (err.filename, err.line, err.col) == (filename, line, col), str(err)
    assert re.search(match, err.message), err.message
    return err


# -- key/value separators and comments -------------------------------------


@pytest.mark.parametrize(
    "text",
    ["port: 4222", "port = 4222", "port 4222", "port:4222", "port=4222", "port\t4222",
     '"port": 4222', "'port' = 4222", '"port" 4222', "  port  :  4222  "],
)
def test_key_value_separators(text):
    assert parse_string(text) == {"port": 4222}


def test_quoted_keys_may_contain_anything_but_their_quote():
    assert parse_string('"a b:c=d" = 1\n\'x"y\' 2') == {"a b:c=d": 1, 'x"y': 2}


def test_comments():
    cfg = parse(
        """\
        # hash comment
        // slash comment
        a = 1 # trailing hash
        b = 2 // trailing slash
        c = "# not a comment"
        d = http://example.com/x  # '//' inside a word is not a comment
        m {
          # inside a map
          x = 1 // after a value
        }
        l = [ # after '['
          1 // after an element
          # own line
          2
        ]
        """
    )
    assert cfg == {"a": 1, "b": 2, "c": "# not a comment", "d": "http://example.com/x",
                   "m": {"x": 1}, "l": [1, 2]}


def test_empty_and_comment_only_documents():
    assert parse_string("") == {}
    assert parse_string("\n  \n\t\n") == {}
    assert parse_string("# only\n// comments\n") == {}


def test_semicolons_and_commas_separate_entries():
    assert parse_string("a=1; b=2, c=3;\nd=4;") == {"a": 1, "b": 2, "c": 3, "d": 4}
    assert parse_string("m { a: 1; b: 2, c: 3 }") == {"m": {"a": 1, "b": 2, "c": 3}}


def test_crlf_line_endings():
    assert parse_string("a = 1\r\nb = [1\r\n2]\r\nc { d = x }\r\n") == {"a": 1, "b": [1, 2], "c": {"d": "x"}}


# -- strings ---------------------------------------------------------------


def test_double_quoted_string_escapes():
    cfg = parse_string(r'''s = "t\tn\nr\rq\"b\\u\u00e9x\x41 \ud83d\ude00"''')
    assert cfg["s"] == 't\tn\nr\rq"b\\u\u00e9xA \U0001F600'


def test_double_quoted_string_may_span_lines():
    assert parse_string('s = "a\nb"') == {"s": "a\nb"}


def test_single_quoted_strings_are_raw():
    assert parse_string(r"s = 'C:\dir\n $HOME \"'") == {"s": r"C:\dir\n $HOME \""}
    assert parse_string("s = 'multi\nline'") == {"s": "multi\nline"}


def test_unquoted_strings():
    cfg = parse(
        """\
        a = hello
        b = nats://user:pass@host:4222
        c = foo.>,  d = bar.*; e = /var/lib/js
        f = a\\tb
        g = [x, y]
        h { i: j }
        """
    )
    assert cfg == {"a": "hello", "b": "nats://user:pass@host:4222", "c": "foo.>", "d": "bar.*",
                   "e": "/var/lib/js", "f": "a\tb", "g": ["x", "y"], "h": {"i": "j"}}


def test_quoted_values_are_never_converted():
    cfg = parse_string("a = \"1k\"\nb = '2016-05-04T18:53:41Z'\nc = \"true\"\nd = \"$HOME\"")
    assert cfg == {"a": "1k", "b": "2016-05-04T18:53:41Z", "c": "true", "d": "$HOME"}


def test_block_string():
    cfg = parse_string("text = (\n  line one\n  (nested) line two\n)\nafter = 1\n")
    assert cfg == {"text": "\n  line one\n  (nested) line two\n", "after": 1}


# -- numbers, booleans, dates ----------------------------------------------


@pytest.mark.parametrize(
    "literal, expected",
    [("0", 0), ("4222", 4222), ("-1", -1), ("9223372036854775807", 2**63 - 1),
     ("1k", 1000), ("1K", 1000), ("8kb", 8192), ("3ki", 3072), ("4KiB", 4096),
     ("2m", 2_000_000), ("2MB", 2 * 1024**2), ("2mi", 2 * 1024**2), ("64MiB", 64 * 1024**2),
     ("2g", 2 * 1000**3), ("1G", 1000**3), ("22GB", 22 * 1024**3), ("1gi", 1024**3), ("1gib", 1024**3),
     ("1t", 1000**4), ("1tb", 1024**4), ("1Ti", 1024**4), ("1tib", 1024**4),
     ("1p", 1000**5), ("1PB", 1024**5), ("1pi", 1024**5), ("1pib", 1024**5),
     ("1e", 1000**6), ("1eb", 1024**6), ("1Ei", 1024**6), ("1eib", 1024**6),
     ("-1k", -1000)],
)
def test_integers_and_size_suffixes(literal, expected):
    value = parse_string(f"n = {literal}")["n"]
    assert value == expected and type(value) is int


@pytest.mark.parametrize("literal, expected", [("2.5", 2.5), ("-0.25", -0.25), ("10.0", 10.0)])
def test_floats(literal, expected):
    value = parse_string(f"f: {literal}")["f"]
    assert value == expected and type(value) is float


@pytest.mark.parametrize(
    "literal, expected",
    [("true", True), ("TRUE", True), ("yes", True), ("Yes", True), ("on", True), ("ON", True),
     ("false", False), ("False", False), ("no", False), ("NO", False), ("off", False), ("Off", False)],
)
def test_booleans(literal, expected):
    assert parse_string(f"b = {literal}")["b"] is expected


def test_datetime():
    assert parse_string("now = 2016-05-04T18:53:41Z") == {
        "now": datetime.datetime(2016, 5, 4, 18, 53, 41, tzinfo=UTC)
    }


@pytest.mark.parametrize(
    "literal",
    ["127.0.0.1", "127.0.0.1:4222", "0.0.0.0:-1", "1.2.3",  # lex.go's IP addresses
     "5ADISY_bfhkprstuvv", "3Gyz", "1kx", "10s", "1b"],  # start with a digit, then not a number
)
def test_number_like_strings(literal):
    assert parse_string(f"v = {literal}") == {"v": literal}


# -- arrays and maps -------------------------------------------------------


def test_arrays():
    cfg = parse(
        """\
        a = [1, 2, 3]
        b = [ "x", 'y', z ]
        c = [
          1
          two,
          3.5
        ]
        d = []
        e = [1, 2, ]
        f = [[1, 2], [], [[3]]]
        g = [{ x: 1 }, { y: [true] }]
        """
    )
    assert cfg == {"a": [1, 2, 3], "b": ["x", "y", "z"], "c": [1, "two", 3.5], "d": [],
                   "e": [1, 2], "f": [[1, 2], [], [[3]]], "g": [{"x": 1}, {"y": [True]}]}


@pytest.mark.parametrize("opener", ["cluster {", "cluster: {", "cluster = {", "cluster{", "'cluster' {"])
def test_map_forms(opener):
    cfg = parse_string(opener + "\n  port: 6222\n  routes = [nats://a:6222]\n}\n")
    assert cfg == {"cluster": {"port": 6222, "routes": ["nats://a:6222"]}}
    assert type(cfg["cluster"]) is ConfMap


def test_nested_maps():
    cfg = parse_string("a { b { c { d = 1 } }, e {} }\nf = {}")
    assert cfg == {"a": {"b": {"c": {"d": 1}}, "e": {}}, "f": {}}


def test_json_style_document():
    cfg = parse(
        """\
        {
          "http_port": 8227,
          "write_deadline": "1h",
          "cluster": {
            "port": 6222,
            "routes": ["nats://127.0.0.1:4222", "nats://127.0.0.1:4223"]
          }
        }
        """
    )
    assert cfg == {"http_port": 8227, "write_deadline": "1h",
                   "cluster": {"port": 6222, "routes": ["nats://127.0.0.1:4222", "nats://127.0.0.1:4223"]}}
    assert parse_string("{}") == {}


def test_duplicate_keys_later_wins():
    cfg = parse_string("a = 1\nb = 2\na = 3\nm { x = 1, x = 2 }")
    assert cfg == {"a": 3, "b": 2, "m": {"x": 2}}
    assert cfg.positions["a"] == ("<string>", 3, 1)
    assert cfg["m"].positions["x"] == ("<string>", 4, 12)


REALISTIC = """\
# server
listen: 127.0.0.1:4222
http_port = 8222
max_payload: 1MB
ping_interval: "2m"
authorization {
  users = [
    {user: alice, password: "$2a$11$abc", permissions: {publish: {allow: ["foo.>"]}, subscribe: ["bar", "baz.*"]}}
    {user: bob, password: s3cret}
  ]
}
jetstream { store_dir: "/tmp/js", max_memory_store: 1G }
"""


def test_realistic_config(tmp_path):
    path = tmp_path / "nats.conf"
    path.write_text(REALISTIC)
    cfg = parse_file(path)
    assert cfg == {
        "listen": "127.0.0.1:4222",
        "http_port": 8222,
        "max_payload": 1024 * 1024,
        "ping_interval": "2m",
        "authorization": {
            "users": [
                {"user": "alice", "password": "$2a$11$abc",
                 "permissions": {"publish": {"allow": ["foo.>"]}, "subscribe": ["bar", "baz.*"]}},
                {"user": "bob", "password": "s3cret"},
            ]
        },
        "jetstream": {"store_dir": "/tmp/js", "max_memory_store": 1_000_000_000},
    }
    assert parse_duration(cfg["ping_interval"]) == 120.0
    assert parse_size(cfg["max_payload"]) == 1048576
    f = str(path)
    assert cfg.positions["listen"] == (f, 2, 1)
    assert cfg.positions["jetstream"] == (f, 12, 1)
    alice = cfg["authorization"]["users"][0]
    assert alice.positions["permissions"] == (f, 8, 43)
    assert alice["permissions"]["publish"].positions["allow"] == (f, 8, 67)
    assert cfg["jetstream"].positions["max_memory_store"] == (f, 12, 35)


# -- positions -------------------------------------------------------------


def test_positions_of_keys():
    cfg = parse_string('a = 1\n  "b" {\n\tc: [ {d: 1} ]\n  }\n', filename="x.conf")
    assert cfg.positions == {"a": ("x.conf", 1, 1), "b": ("x.conf", 2, 3)}
    assert cfg["b"].positions == {"c": ("x.conf", 3, 2)}
    assert cfg["b"]["c"][0].positions == {"d": ("x.conf", 3, 8)}


def test_positions_count_characters_not_bytes():
    cfg = parse_string('s = "é€😀"; k = 1')
    assert cfg.positions["k"] == ("<string>", 1, 12)


# -- includes --------------------------------------------------------------


def test_include_relative_to_including_file(tmp_path, monkeypatch):
    monkeypatch.chdir("/")  # includes must not depend on the working directory
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "auth.conf").write_text("users = [{user: a}]\ninclude 'more/perms.conf'\n")
    (tmp_path / "conf.d" / "more").mkdir()
    (tmp_path / "conf.d" / "more" / "perms.conf").write_text("timeout: 2.5\n")
    (tmp_path / "limits.conf").write_text("max_payload = 2MB\nport = 1\n")
    (tmp_path / "main.conf").write_text(
        "port = 4222\n"
        "include limits.conf\n"
        "authorization {\n"
        '  include "conf.d/auth.conf"\n'
        "  token = x\n"
        "}\n"
    )
    cfg = parse_file(tmp_path / "main.conf")
    assert cfg == {"port": 1, "max_payload": 2 * 1024 * 1024,
                   "authorization": {"users": [{"user": "a"}], "timeout": 2.5, "token": "x"}}
    limits = os.path.join(str(tmp_path), "limits.conf")
    assert cfg.positions["port"] == (limits, 2, 1)  # the included (later) definition won
    assert cfg.positions["authorization"] == (str(tmp_path / "main.conf"), 3, 1)
    auth = cfg["authorization"]
    assert auth.positions["users"] == (os.path.join(str(tmp_path), "conf.d/auth.conf"), 1, 1)
    assert auth.positions["timeout"][1:] == (1, 1)
    assert auth.positions["timeout"][0].endswith(os.path.join("more", "perms.conf"))


def test_key_after_include_overrides_it(tmp_path):
    (tmp_path / "inc.conf").write_text("a = 1\nb = 2\n")
    (tmp_path / "main.conf").write_text("include ./inc.conf; b = 3\n")
    assert parse_file(tmp_path / "main.conf") == {"a": 1, "b": 3}


def test_include_variables_are_visible_after_the_include(tmp_path):
    (tmp_path / "passwords.conf").write_text("ALICE_PASS: $2a$10$hash\n")
    (tmp_path / "main.conf").write_text(
        "authorization {\n  include 'passwords.conf'\n  users = [{user: alice, password: $ALICE_PASS}]\n}\n"
    )
    cfg = parse_file(tmp_path / "main.conf")
    assert cfg["authorization"]["users"] == [{"user": "alice", "password": "$2a$10$hash"}]


def test_include_with_a_separator_is_an_ordinary_key():
    assert parse_string("include = 5\ninclude: x\n") == {"include": "x"}
    assert parse_string("'include' yes") == {"include": True}


def test_include_in_parse_string_is_relative_to_filename(tmp_path):
    (tmp_path / "inc.conf").write_text("a = 1")
    assert parse_string("include inc.conf", filename=str(tmp_path / "virtual.conf")) == {"a": 1}


def test_missing_include_reports_the_include_position(tmp_path):
    (tmp_path / "main.conf").write_text("a = 1\nm {\n  include   'nope.conf'\n}\n")
    with pytest.raises(ConfError) as info:
        parse_file(tmp_path / "main.conf")
    err = info.value
    assert (err.filename, err.line, err.col) == (str(tmp_path / "main.conf"), 3, 13)
    assert "nope.conf" in err.message


def test_error_inside_included_file_points_into_that_file(tmp_path):
    (tmp_path / "bad.conf").write_text("ok = 1\nbroken = [1, 2\n")
    (tmp_path / "main.conf").write_text("include bad.conf\n")
    with pytest.raises(ConfError) as info:
        parse_file(tmp_path / "main.conf")
    err = info.value
    assert (err.filename, err.line, err.col) == (os.path.join(str(tmp_path), "bad.conf"), 2, 10)
    assert "unterminated array" in err.message


def test_include_cycle_is_an_error(tmp_path):
    (tmp_path / "a.conf").write_text("x = 1\ninclude b.conf\n")
    (tmp_path / "b.conf").write_text("include a.conf\n")
    with pytest.raises(ConfError, match="include cycle") as info:
        parse_file(tmp_path / "a.conf")
    assert info.value.filename == os.path.join(str(tmp_path), "b.conf")


def test_parse_file_missing_raises_oserror(tmp_path):
    with pytest.raises(FileNotFoundError):
        parse_file(tmp_path / "missing.conf")


# -- variables -------------------------------------------------------------


def test_variables_from_earlier_keys_and_enclosing_blocks():
    cfg = parse(
        """\
        index = 22
        limits = { size: 1MB }
        nest {
          inner = $index
          index = 11
          foo = $index
          deeper { bar = $index, lim = $limits }
          list = [ $index, { x: $index } ]
        }
        bar = $index
        """
    )
    assert cfg["nest"] == {"inner": 22, "index": 11, "foo": 11,
                           "deeper": {"bar": 11, "lim": {"size": 1048576}}, "list": [11, {"x": 11}]}
    assert cfg["bar"] == 22


def test_variable_defined_later_falls_back_to_environment(monkeypatch):
    monkeypatch.setenv("LATER", "from-env")
    assert parse_string("a = $LATER\nLATER = 1") == {"a": "from-env", "LATER": 1}


def test_environment_variables_are_parsed_as_values(monkeypatch):
    monkeypatch.setenv("NB_PORT", "4222")
    monkeypatch.setenv("NB_NAME", "xyz")
    monkeypatch.setenv("NB_QUOTED", "'3 xyz'")
    monkeypatch.setenv("NB_SIZE", "1MB")
    monkeypatch.setenv("NB_BOOL", "on")
    monkeypatch.setenv("NB_LIST", "[1, two]")
    monkeypatch.setenv("NB_EMPTY", "")
    monkeypatch.setenv("NB_INDIRECT", "$NB_PORT")
    cfg = parse_string(
        "port: $NB_PORT\nname: $NB_NAME\nq: $NB_QUOTED\nsize: $NB_SIZE\nb: $NB_BOOL\n"
        "l: $NB_LIST\ne: $NB_EMPTY\ni: $NB_INDIRECT\n"
    )
    assert cfg == {"port": 4222, "name": "xyz", "q": "3 xyz", "size": 1048576, "b": True,
                   "l": [1, "two"], "e": "", "i": 4222}


def test_keys_shadow_environment(monkeypatch):
    monkeypatch.setenv("HOST", "env-host")
    assert parse_string("HOST = conf-host\nlisten = $HOST") == {"HOST": "conf-host", "listen": "conf-host"}


def test_unknown_variable_error_position(monkeypatch):
    monkeypatch.delenv("NB_SURELY_UNSET", raising=False)
    raises_at("a = 1\nm {\n  b = [1, $NB_SURELY_UNSET]\n}", 3, 11, r"unknown variable \$NB_SURELY_UNSET")


def test_unparsable_environment_variable(monkeypatch):
    monkeypatch.setenv("NB_BAD", "two words")
    raises_at("x = 1\ny = $NB_BAD", 2, 5, "environment variable 'NB_BAD'")


def test_self_referencing_environment_variable(monkeypatch):
    monkeypatch.setenv("NB_LOOP", "$NB_LOOP")
    raises_at("y = $NB_LOOP", 1, 5, "NB_LOOP")


def test_bcrypt_hashes_are_not_variables():
    assert parse_string("password: $2a$11$ooo/abc.def") == {"password": "$2a$11$ooo/abc.def"}


def test_dollar_only_in_whole_unquoted_values(monkeypatch):
    monkeypatch.setenv("NB_X", "1")
    assert parse_string("a = x$NB_X\nb = \"$NB_X\"") == {"a": "x$NB_X", "b": "$NB_X"}


# -- errors ----------------------------------------------------------------


@pytest.mark.parametrize(
    "text, line, col, match",
    [
        ('a = 1\nb = "abc', 2, 5, "unterminated string"),
        ("a = 'abc", 1, 5, "unterminated string"),
        ("a {\n  b = 1\n", 1, 3, r"unterminated map"),
        ("a = [1,\n 2", 1, 5, r"unterminated array"),
        ("a = (\ntext\n", 1, 5, "unterminated block"),
        ('"abc = 1', 1, 1, "unterminated quoted key"),
        ("a = 1\n: 2", 2, 1, "expected a key"),
        ("a = 1\n}", 2, 1, "expected a key"),
        ("a = 1\nb:\nc = 2", 2, 3, "missing value for key 'b'"),
        ("a = 1\nb", 2, 2, "missing value for key 'b'"),
        ("m { a = 1, b }", 1, 14, "missing value for key 'b'"),
        ("a = ,", 1, 5, "missing value"),
        ("a = hello world", 1, 11, r"expected a newline, ',' or ';'"),
        ("m { a = 1 b = 2 }", 1, 11, r"expected a newline, ',' or ';'"),
        ("a = [1 2]", 1, 8, r"expected ',' or '\]'"),
        ("a = [1; 2]", 1, 7, r"expected ',' or '\]'"),
        ("a = [, 1]", 1, 6, "unexpected ','"),
        ("a = [1,, 1]", 1, 8, "unexpected ','"),
        ('a = "bad \\q escape"', 1, 10, r"invalid escape sequence '\\q'"),
        ('a = "\\x4"', 1, 6, r"invalid \\x escape"),
        ('a = "\\u12G4"', 1, 6, r"invalid \\u escape"),
        ('a = "\\ud800"', 1, 6, "unpaired surrogate"),
        ("a = 1kbb", 1, 5, "invalid size suffix"),
        ("a = 99999999999999999999", 1, 5, "out of the 64-bit range"),
        ("a = 10000000000e", 1, 5, "out of the 64-bit range"),
        ("a = -foo", 1, 5, "invalid value '-foo'"),
        ("a = .5", 1, 5, "invalid value"),
        ("a = 1.", 1, 5, "invalid value"),
        ("a = 1k5", 1, 5, "invalid value"),
        ("a = 2016-05-04", 1, 5, "invalid value"),
        ("a = 2016-13-04T18:53:41Z", 1, 5, "invalid datetime"),
        ("a = $", 1, 5, "missing variable name"),
        ("include", 1, 8, "missing value for key 'include'"),
        ("include \n", 1, 9, "expected a file name"),
        ("include 'x", 1, 9, "unterminated include"),
        ("{ a = 1 } b = 2", 1, 11, "after the closing"),
    ],
)
def test_error_positions(text, line, col, match):
    raises_at(text, line, col, match)


def test_deep_nesting_is_a_conf_error():
    with pytest.raises(ConfError, match="nested too deeply"):
        parse_string("a = " + "[" * 5000)


def test_conf_error_attributes_and_str():
    err = raises_at("\n\n   x = [", 3, 8, "unterminated array")
    assert str(err) == "<string>:3:8: unterminated array: missing ']'"
    assert isinstance(err, Exception)
    with pytest.raises(ConfError) as info:
        parse_string("k: 'oops", filename="/etc/nats.conf")
    assert str(info.value) == "/etc/nats.conf:1:4: unterminated string"


# -- parse_size / parse_duration -------------------------------------------


@pytest.mark.parametrize(
    "value, expected",
    [(1024, 1024), (0, 0), ("1024", 1024), ("1MB", 1048576), ("64KB", 65536), ("64kb", 65536),
     ("1gb", 1024**3), ("1G", 10**9), ("2k", 2000), ("1ki", 1024), ("1KiB", 1024), ("3m", 3_000_000),
     ("1mib", 1024**2), ("1tb", 1024**4), ("1T", 10**12), ("1pb", 1024**5), ("1eb", 1024**6),
     (" 8MB ", 8 * 1024**2), ("-1", -1)],
)
def test_parse_size(value, expected):
    assert parse_size(value) == expected


@pytest.mark.parametrize("value", ["", "MB", "1.5MB", "1 M B", "1xb", "1kbb", "ten", "1_000", None, 1.5, True, [1]])
def test_parse_size_rejects_junk(value):
    with pytest.raises(ValueError):
        parse_size(value)


@pytest.mark.parametrize(
    "value, expected",
    [("2m", 120.0), ("1h30m", 5400.0), ("500ms", 0.5), ("1.5s", 1.5), ("10us", 1e-5), ("10µs", 1e-5),
     ("10μs", 1e-5), ("250ns", 2.5e-7), ("0", 0.0), ("-1.5h", -5400.0), ("+3s", 3.0), (".5s", 0.5),
     ("1.s", 1.0), ("1h0m0.25s", 3600.25), ("2h45m30.5s", 9930.5),
     (120, 120.0), (0.25, 0.25), (-3, -3.0)],
)
def test_parse_duration(value, expected):
    result = parse_duration(value)
    assert result == pytest.approx(expected, rel=1e-12) and type(result) is float


@pytest.mark.parametrize("value", ["", "120", "1", "s", "1x", "1H", "1.2.3s", ".s", "-", "1h 30m", " 1s", None, True, [1]])
def test_parse_duration_rejects_junk(value):
    with pytest.raises(ValueError):
        parse_duration(value)


# -- property: rendered trees parse back -----------------------------------

BARE_KEY = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.-]{0,8}", fullmatch=True).filter(lambda k: k.lower() != "include")
QUOTED_KEY = st.text(st.characters(blacklist_characters="\"'", blacklist_categories=("Cs",)), max_size=8)
BARE_STRING = st.from_regex(r"[A-Za-z_/][A-Za-z0-9_./:>*@-]{0,12}", fullmatch=True).filter(
    lambda s: s.lower() not in {"true", "false", "yes", "no", "on", "off"}
)
SCALARS = (
    st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.booleans()
    | st.integers(-(10**6), 10**6).map(lambda n: n / 100)
    | st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
    | BARE_STRING
)
TREES = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(BARE_KEY | QUOTED_KEY, children, max_size=4),
    max_leaves=20,
)
DOCUMENTS = st.dictionaries(BARE_KEY | QUOTED_KEY, TREES, max_size=6)


def quote(s):
    out = []
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch in "\t\n\r":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r"}[ch])
        elif ord(ch) < 0x20 or ch == "\x7f":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def render_key(key, data):
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", key) and key.lower() != "include" and data.draw(st.booleans()):
        return key
    return data.draw(st.sampled_from(['"{}"', "'{}'"])).format(key) if '"' not in key else f"'{key}'"


def render_value(value, data):
    if isinstance(value, bool):
        return data.draw(st.sampled_from(["true", "yes", "on", "TRUE"] if value else ["false", "no", "off", "Off"]))
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        styles = ["dq"]
        if "'" not in value:
            styles.append("sq")
        if re.fullmatch(r"[A-Za-z_/][A-Za-z0-9_./:>*@-]*", value) and value.lower() not in {
            "true", "false", "yes", "no", "on", "off"
        }:
            styles.append("bare")
        style = data.draw(st.sampled_from(styles))
        return {"dq": lambda: quote(value), "sq": lambda: f"'{value}'", "bare": lambda: value}[style]()
    if isinstance(value, list):
        sep = data.draw(st.sampled_from([", ", ",", "\n", ",\n"]))
        trailing = data.draw(st.sampled_from(["", sep if sep.strip() and value else ""]))
        return "[" + sep.join(render_value(v, data) for v in value) + trailing + "]"
    return "{" + render_entries(value, data) + "}"


def render_entries(mapping, data):
    parts = []
    for key, value in mapping.items():
        sep = data.draw(st.sampled_from([": ", " = ", " ", ":", "="]))
        if isinstance(value, dict) and data.draw(st.booleans()):
            sep = " "  # "key { ... }" without a separator
        entry = render_key(key, data) + sep + render_value(value, data)
        end = data.draw(st.sampled_from(["\n", ", ", "; ", " # comment\n", " // comment\n", ";\n"]))
        parts.append(entry + end)
    return "\n".join(parts) + ("\n" if parts else "")


def assert_same(parsed, expected):
    """Equality that also checks types (so True is not accepted for 1)."""
    if isinstance(expected, dict):
        assert isinstance(parsed, ConfMap) and set(parsed.positions) == set(parsed)
        assert set(parsed) == set(expected)
        for key in expected:
            assert_same(parsed[key], expected[key])
    elif isinstance(expected, list):
        assert type(parsed) is list and len(parsed) == len(expected)
        for p, e in zip(parsed, expected):
            assert_same(p, e)
    else:
        assert type(parsed) is type(expected) and parsed == expected


@settings(max_examples=100, deadline=None)
@given(DOCUMENTS, st.data())
def test_rendered_documents_parse_back(doc, data):
    text = render_entries(doc, data)
    if data.draw(st.booleans()):
        text = "{\n" + text + "}\n"
    assert_same(parse_string(text), doc)


@given(st.text(max_size=40))
def test_parser_only_raises_conf_error(text):
    try:
        parse_string(text)
    except ConfError as err:
        assert err.line >= 1 and err.col >= 1
