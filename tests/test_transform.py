"""natsbroker.subjects.transform: nats-server's subject transforms.

Unit tests per mapping function, then differential tests against nats-server:
core-NATS account ``mappings`` (what a ``>`` subscriber receives), and the
errors nats-server prints when it refuses a mapping or an import transform.
"""

import asyncio
import os
import random
import re
import subprocess
import tempfile

import pytest
from hypothesis import given, settings, strategies as st

from natsbroker.subjects.transform import SubjectTransform, TransformError, fnv1a32, new_transform, validate_mapping
from tests.support.clients import flushed
from tests.support.servers import ServerProcess, nats_server_binary

T = SubjectTransform.compile


def m(src, dest, subject, strict=False):
    tr = T(src, dest, strict=strict)
    return tr.match(subject.encode()).decode()


def err(src, dest, strict=False):
    with pytest.raises(TransformError) as info:
        T(src, dest, strict=strict)
    return str(info.value)


# --- unit tests ----------------------------------------------------------------

def test_fnv1a32():
    assert fnv1a32(b"") == 0x811C9DC5
    assert fnv1a32(b"a") == 0xE40C292C
    assert fnv1a32(b"foobar") == 0xBF9CF968


def test_literal_and_no_match():
    tr = T("foo", "bar")
    assert tr.match(b"foo") == b"bar"
    assert tr.match(b"foo.x") is None
    assert tr.match(b"fo") is None
    assert T("foo.bar", "baz.qux").match(b"foo.bar") == b"baz.qux"


def test_legacy_dollar_and_wildcard_function():
    assert m("foo.*.bar.*.baz", "req.$2.$1", "foo.A.bar.B.baz") == "req.B.A"
    assert m("foo.*.bar.*.baz", "req.{{wildcard(2)}}.{{wildcard(1)}}", "foo.A.bar.B.baz") == "req.B.A"
    assert m("*", "foo.bar.$1", "foo") == "foo.bar.foo"
    assert m("a.*", "b.$01", "a.x") == "b.x"
    assert m("a.*", "b.{{wildcard(+1)}}", "a.x") == "b.x"
    # Go reads sti[0] (missing) as 0: the first *source* token.
    assert m("a.*", "b.$0", "a.x") == "b.a"
    assert m("a.*", "b.{{wildcard(-3)}}", "a.x") == "b.a"
    # $ followed by a non-number is a literal.
    assert m("a.*", "b.$x.$", "a.x") == "b.$x.$"
    assert T("a.*.lit", "b.$1").match(b"a.x.other") is None


def test_function_names_and_whitespace():
    assert m("a.*", "b.{{ Wildcard( 1 ) }}", "a.x") == "b.x"
    assert m("a.*", "b.{{splitFromLeft(1, 2)}}", "a.abcd") == "b.ab.cd"
    assert m("a.*", "b.{{ partition(3 ,  1 ) }}", "a.x") == m("a.*", "b.{{partition(3,1)}}", "a.x")
    # Only the word initials are case-insensitive (Go's [wW]ildcard).
    assert err("a.*", "b.{{WILDCARD(1)}}") == "invalid mapping destination: unknown function in {{WILDCARD(1)}}"
    # A token that only starts with {{ (or is too short) is a literal.
    assert m("a.*", "b.{{}}.x{{wildcard(1)}}.{{wildcard(1)}}x", "a.q") == "b.{{}}.x{{wildcard(1)}}.{{wildcard(1)}}x"


def test_full_wildcard():
    assert m("baz.>", "my.pre.>", "baz.1.2.3") == "my.pre.1.2.3"
    assert m("baz.*.>", "x.$1.y.>", "baz.1.2.3") == "x.1.y.2.3"
    assert m("baz.>", ">", "baz.1.2") == "1.2"
    assert m("", "prefix.>", "foo") == "prefix.foo"
    assert T("baz.>", "x.>").match(b"baz") is None
    tr = T(">", ">")
    assert tr.match(b"any.thing") == b"any.thing"
    assert tr.match(b"not..valid") == b"not..valid"  # Go's special case


def test_partition():
    # The docs' examples.
    tr = T("neworders.*", "neworders.{{wildcard(1)}}.{{partition(3,1)}}")
    got = [tr.match(b"neworders.customerid%d" % i) for i in range(1, 7)]
    assert got == [b"neworders.customerid%d.%d" % (i, p) for i, p in zip(range(1, 7), [0, 2, 1, 2, 1, 0])]
    tr = T("foo.*.*", "foo.{{wildcard(1)}}.{{wildcard(2)}}.{{partition(10,1,2)}}")
    for s, p in [("foo.1.a", 1), ("foo.1.b", 0), ("foo.2.b", 9), ("foo.2.a", 2)]:
        assert tr.match(s.encode()) == ("%s.%d" % (s, p)).encode()
    # Selected tokens are concatenated with no separator.
    assert m("a.*.*", "{{partition(1000,1,2)}}", "a.ab.c") == str(fnv1a32(b"abc") % 1000)
    assert m("a.*.*", "{{partition(1000,2,1)}}", "a.ab.c") == str(fnv1a32(b"cab") % 1000)
    # No indexes: the whole subject.
    assert m("a.*", "b.{{partition(1000)}}", "a.xyz") == "b.%d" % (fnv1a32(b"a.xyz") % 1000)
    assert m("a.>", "b.{{partition(97)}}.>", "a.x.y") == "b.%d.x.y" % (fnv1a32(b"a.x.y") % 97)
    # Literal source: indexes are dropped, the subject is hashed.
    assert m("lit", "b.{{partition(1000,1)}}", "lit") == "b.%d" % (fnv1a32(b"lit") % 1000)
    # n == 0 gives 0; a negative n is used as uint32.
    assert m("a.*", "{{partition(0,1)}}", "a.x") == "0"
    assert m("a.*", "{{partition(-1,1)}}", "a.x") == str(fnv1a32(b"x") % 0xFFFFFFFF)
    assert m("a.*", "{{partition(2147483647,1)}}", "a.x") == str(fnv1a32(b"x") % 2147483647)


def test_split():
    assert m("*", "{{split(1,-)}}", "-abc-def--ghi-") == "abc.def.ghi"
    assert m("*", "{{split(1,-)}}", "abc-def--ghi-") == "abc.def.ghi"
    assert m("*.*", "{{split(2,-)}}.{{splitfromleft(1,2)}}", "foo.-abc-def--ghij-") == "abc.def.ghij.fo.o"
    assert m("*", "{{split(1,ab)}}", "xabyabz") == "x.y.z"
    assert m("*", "{{split(1,-)}}", "nodelim") == "nodelim"
    # Go's quirks kept: these give empty tokens.
    assert m("*", "{{split(1,-)}}", "--x") == ".x"
    assert m("*", "x.{{split(1,-)}}", "---") == "x."
    # Empty delimiter: Go splits into UTF-8 characters.
    assert m("*", "{{split(1,)}}", "abé") == "a.b.é"


def test_split_and_slice_from():
    assert m("*", "{{splitfromleft(1,3)}}", "12345") == "123.45"
    assert m("*", "{{SplitFromRight(1,3)}}", "12345") == "12.345"
    assert m("*", "{{SliceFromLeft(1,3)}}", "1234567890") == "123.456.789.0"
    assert m("*", "{{SliceFromRight(1,3)}}", "1234567890") == "1.234.567.890"
    assert m("*", "{{SliceFromLeft(1,3)}}", "123456") == "123.456"
    assert m("*", "{{SliceFromRight(1,3)}}", "123456") == "123.456"
    for f in ("splitfromleft", "splitfromright", "slicefromleft", "slicefromright"):
        # Too small (or a size that is not positive): unchanged.
        assert m("*", "{{%s(1,5)}}" % f, "12345") == "12345"
        assert m("*", "{{%s(1,0)}}" % f, "12345") == "12345"
        assert m("*", "{{%s(1,-2)}}" % f, "12345") == "12345"


def test_left_right():
    assert m("*", "{{left(1,2)}}.{{right(1,2)}}", "abcde") == "ab.de"
    assert m("*", "{{Left(1,9)}}.{{Right(1,9)}}", "abc") == "abc.abc"
    assert m("*", "{{left(1,0)}}.{{right(1,-1)}}", "abc") == "abc.abc"


def test_random():
    tr = T("a.*", "b.{{random(5)}}.$1")
    seen = set()
    for _ in range(200):
        out = tr.match(b"a.x").split(b".")
        assert out[0] == b"b" and out[2] == b"x"
        seen.add(int(out[1]))
    assert seen <= set(range(5)) and len(seen) > 1
    assert m("lit", "b.{{random(0)}}", "lit") == "b.0"
    assert m("a.>", "{{random(3)}}.>", "a.b") in ("0.b", "1.b", "2.b")


def test_match_rejects_non_literal_subjects():
    tr = T("a.*", "b.$1")
    for s in (b"a.*", b"a.>", b"a.", b".a", b"a"):
        assert tr.match(s) is None
    assert T("a.>", "b.>").match(b"a.x..y") is None


def test_empty_dest_is_no_transform():
    assert T("foo", "") is None
    assert new_transform("foo.*", "") is None


def test_validation_errors():
    wio = "invalid mapping destination: wildcard index out of range in "
    assert err("a.*", "b.{{wildcard(2)}}") == wio + "{{wildcard(2)}}: [2]"
    assert err("a.*", "b.$2") == wio + "$2: [2]"
    assert err("a.>", "b.$1.>") == wio + "$1: [1]"
    assert err("c", "b.{{wildcard(1)}}") == wio + "{{wildcard(1)}}"
    assert err("c", "b.{{left(1,2)}}") == wio + "{{left(1,2)}}"
    for src, dest in [("a..b", "x"), ("a.>.b", "x"), ("e.>", "b"), ("f.*", "b.*"), ("x.*", "b.>"),
                      ("a", "b..c"), ("a", "b.>.c")]:
        assert err(src, dest) == "invalid subject", (src, dest)
    pre = "invalid mapping destination: "
    assert err("a.*", "b.{{foo(1)}}") == pre + "unknown function in {{foo(1)}}"
    assert err("a.*", "b.{{wildcard()}}") == pre + "not enough arguments passed to the function in {{wildcard()}}"
    assert err("a.*", "b.{{wildcard(1,2)}}") == pre + "too many arguments passed to the function in {{wildcard(1,2)}}"
    assert err("a.*", "b.{{wildcard(x)}}") == pre + "function argument is invalid or in the wrong format in {{wildcard(x)}}"
    assert err("a.*", "b.{{partition(x)}}").endswith("wrong format in {{partition(x)}}")
    assert err("a.*", "b.{{partition()}}").endswith("wrong format in {{partition()}}")
    assert err("a.*", "b.{{partition(2147483648,1)}}").endswith("wrong format in {{partition(2147483648,1)}}")
    assert err("a.*", "b.{{left(1,2147483648)}}").endswith("wrong format in {{left(1,2147483648)}}")
    assert err("a.*", "b.{{left(1)}}") == pre + "not enough arguments passed to the function in {{left(1)}}"
    assert err("a.*", "b.{{right(1,2,3)}}") == pre + "too many arguments passed to the function in {{right(1,2,3)}}"
    assert err("a.*", "b.{{split(1)}}") == pre + "not enough arguments passed to the function in {{split(1)}}"
    assert err("a.*", "b.{{split(1,a b)}}").endswith("wrong format in {{split(1,a b)}}")
    assert err("a.*", "b.{{random(1,2)}}") == pre + "not enough arguments passed to the function in {{random(1,2)}}"
    assert err("a.*", "b.{{wildcard(1)}}{{wildcard(1)}}").endswith("wrong format in {{wildcard(1)}}{{wildcard(1)}}")
    # Accepted.
    for src, dest in [("g", "b.{{partition(3)}}"), ("h", "b.{{partition(3,1)}}"), ("i", "b.{{random(3)}}"),
                      ("v.>", "b.{{partition(3)}}.>"), ("a.*", "b.{{split(1,.)}}"), ("a.*.*", "b.$2")]:
        T(src, dest)


def test_strict():
    pre = "invalid mapping destination: "
    assert err("a.*", "x.{{partition(4)}}", strict=True) == (
        pre + "the only mapping function allowed for import transforms is {{Wildcard()}} in {{partition(4)}}")
    assert err("a.*.*", "w.$2", strict=True) == pre + "not using all of the token wildcard(s) in w.$2"
    assert m("a.*.*", "x.$2.{{wildcard(1)}}", "a.p.q", strict=True) == "x.q.p"
    # A literal source is not checked in strict mode (as in Go).
    T("lit", "x.{{partition(4)}}", strict=True)


def test_validate_mapping():
    validate_mapping("a.*", "b.{{ wildcard(1) }}")
    validate_mapping("a.*", "")
    with pytest.raises(TransformError) as info:
        validate_mapping("m.*", "b c.$1")
    assert str(info.value) == "invalid mapping destination: invalid transform"
    with pytest.raises(TransformError) as info:
        validate_mapping("z.*", "b.>.c")
    assert str(info.value) == "invalid mapping destination: invalid transform in c"
    with pytest.raises(TransformError) as info:
        validate_mapping("a.*", "b..c")
    assert str(info.value) == "invalid mapping destination: invalid transform"
    with pytest.raises(TransformError) as info:
        SubjectTransform.compile_mapping("a.*", "b.{{wildcard(2)}}")
    assert "[2]" in str(info.value)
    assert SubjectTransform.compile_mapping("a.*", "b.$1").match(b"a.x") == b"b.x"


def test_reverse():
    r = T("a.*.*", "b.$2.$1").reverse()
    assert (r.src, r.dest) == ("b.*.*", "a.$2.$1")
    assert r.match(b"b.q.p") == b"a.p.q"
    r = T("a.*.>", "b.{{wildcard(1)}}.>").reverse()
    assert r.match(b"b.x.y.z") == b"a.x.y.z"
    assert T("foo", "bar").reverse().match(b"bar") == b"foo"
    assert T("a.*", "b.{{partition(3,1)}}").reverse() is None
    # As in Go: the placeholders keep their order, so a 3-cycle is not inverted.
    r = T("a.*.*.*", "b.$2.$3.$1").reverse()
    assert (r.src, r.dest) == ("b.*.*.*", "a.$2.$3.$1")


def test_transform_and_bytes_inputs():
    tr = T(b"a.*", b"b.$1")
    assert tr.transform(b"a.x") == b"b.x"
    assert tr.transform_tokens([b"a", b"y"]) == b"b.y"
    assert T("a.*", "é.$1").match("a.ü".encode()) == "é.ü".encode()


_TOKEN = st.text("abcXYZ019-_", min_size=1, max_size=8)


@settings(max_examples=200, deadline=None)
@given(st.lists(_TOKEN, min_size=1, max_size=5), st.data())
def test_wildcard_permutations_property(tokens, data):
    n = len(tokens)
    order = data.draw(st.permutations(range(1, n + 1)))
    src = "p." + ".".join(["*"] * n)
    dest = "q." + ".".join("$%d" % i for i in order)
    dest2 = "q." + ".".join("{{wildcard(%d)}}" % i for i in order)
    subject = ("p." + ".".join(tokens)).encode()
    want = ("q." + ".".join(tokens[i - 1] for i in order)).encode()
    assert T(src, dest).match(subject) == want
    assert T(src, dest2).match(subject) == want
    assert T(src + ".>", dest + ".>").match(subject + b".t.u") == want + b".t.u"
    rev = T(src, dest).reverse()
    if all(order[order[i] - 1] == i + 1 for i in range(n)):  # an involution
        assert rev.match(want) == subject
    # nats-server's reverse() keeps the placeholders' order (not the inverse).
    assert rev.dest == "p." + ".".join("$%d" % i for i in order)


# --- differential tests against nats-server ------------------------------------

# Non-overlapping sources (distinct first tokens), so at most one applies.
MAPPINGS = {
    "wc.*.*": "wc2.{{wildcard(2)}}.{{wildcard(1)}}",
    "leg.*.*.>": "leg2.$2.$1.>",
    "p1.*": "p1x.{{partition(5,1)}}.{{wildcard(1)}}",
    "p2.*.*": "p2x.{{partition(7,1,2)}}.$1.$2",
    "p3.*.*": "p3x.{{partition(1000,2,1)}}",
    "p4.>": "p4x.{{partition(13)}}.>",
    "p5.*": "p5x.{{ Partition( 3 , 1 ) }}",
    "p6.*.*": "p6x.{{partition(0,1)}}.{{partition(-1,2)}}",
    "p7.*": "p7x.{{partition(2147483647,1)}}",
    "sp.*": "spx.{{split(1,-)}}",
    "sp2.*": "sp2x.{{split(1,ab)}}",
    "sfl.*": "sflx.{{splitfromleft(1,3)}}",
    "sfr.*": "sfrx.{{SplitFromRight(1,3)}}",
    "slf.*": "slfx.{{slicefromleft(1,2)}}",
    "slr.*": "slrx.{{sliceFromRight(1,3)}}",
    "lf.*": "lfx.{{left(1,3)}}",
    "rt.*": "rtx.{{Right(1,3)}}",
    "z0.*": "z0x.$0.{{wildcard(-1)}}",
    "fw.>": "fwx.>",
    "fw2.*.>": ">",
    "mix.*.lit.*": "mixx.{{ wildcard(2) }}.c.{{partition(4,1,2)}}.$1",
    "lit.a": "litx.b",
    "rnd.*": "rndx.{{random(4)}}.$1",
    "dol.*": "dolx.$x.$1",
}


def _conf(text):
    fd, path = tempfile.mkstemp(suffix=".conf", prefix="transform-")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


def _mappings_block(mappings):
    return "mappings = {\n%s\n}\n" % "\n".join('  "%s": "%s"' % kv for kv in mappings.items())


def _subjects(rng):
    alpha = "abcdefghijklmnopqrstuvwxyzABC0123456789_"

    def tok(lo=1, hi=12, chars=alpha):
        return "".join(rng.choice(chars) for _ in range(rng.randint(lo, hi)))

    subjects = []
    for src in MAPPINGS:
        for _ in range(8):
            toks = []
            for t in src.split("."):
                if t == "*":
                    toks.append(tok())
                elif t == ">":
                    toks.extend(tok() for _ in range(rng.randint(1, 3)))
                else:
                    toks.append(t)
            subjects.append(".".join(toks))
        # Not matching: one token short.
        subjects.append(".".join(src.replace(">", "*").split(".")[:-1]) or "x")
    subjects += ["p1.%d" % i for i in range(60)]  # partition over many values
    subjects += ["p2.%s.%s" % (tok(), tok()) for _ in range(20)]
    subjects += ["sp.%s" % tok(1, 14, "ab-") for _ in range(25)]  # some give empty tokens
    subjects += ["sp2.%s" % tok(1, 14, "abx") for _ in range(10)]
    subjects += ["unmapped.%s" % tok() for _ in range(5)]
    return subjects


async def _deliveries(url, subjects):
    import nats
    nc = await nats.connect(url)
    got = {}
    done = asyncio.Event()

    async def cb(msg):
        if msg.subject == "done":
            done.set()
            return
        got.setdefault(int(msg.data), []).append(msg.subject)

    await nc.subscribe(">", cb=cb)
    await flushed(nc)
    for i, s in enumerate(subjects):
        await nc.publish(s, b"%d" % i)
    await nc.publish("done", b"")
    await asyncio.wait_for(done.wait(), 10)
    await nc.close()
    return got


def _expected(subject, transforms):
    for tr in transforms:
        out = tr.match(subject.encode())
        if out is not None:
            return out.decode()
    return subject


def test_differential_account_mappings():
    rng = random.Random(20240607)
    subjects = _subjects(rng)
    assert len(subjects) >= 200
    transforms = [SubjectTransform.compile_mapping(s, d) for s, d in MAPPINGS.items()]
    conf = _conf(_mappings_block(MAPPINGS))
    try:
        with ServerProcess("nats-server", ["-c", conf]) as server:
            got = asyncio.run(asyncio.wait_for(_deliveries(server.url, subjects), 15))
    finally:
        os.unlink(conf)

    mismatches = []
    for i, s in enumerate(subjects):
        want = _expected(s, transforms)
        have = got.get(i, [])
        if s.startswith("rnd."):
            ok = (len(have) == 1 and re.fullmatch(r"rndx\.[0-3]\.(.*)", have[0])
                  and have[0].split(".", 2)[2] == want.split(".", 2)[2])
            if not ok:
                mismatches.append((s, want, have))
            continue
        if "" in want.split("."):
            # The mapped subject is not a valid subject: nats-server drops it.
            if have:
                mismatches.append((s, want, have))
            continue
        if have != [want]:
            mismatches.append((s, want, have))
    assert not mismatches, mismatches[:20]
    # The sample exercised the interesting paths.
    assert any("" in _expected(s, transforms).split(".") for s in subjects if s.startswith("sp."))
    assert {got[i][0].split(".")[1] for i, s in enumerate(subjects) if s.startswith("p1.")} == set("01234")


def _config_errors(text):
    """Start nats-server on a config it refuses; return its stderr lines."""
    conf = _conf(text)
    try:
        proc = subprocess.run([nats_server_binary(), "-c", conf, "-p", "-1", "-a", "127.0.0.1"],
                              capture_output=True, text=True, timeout=30)
    finally:
        os.unlink(conf)
    assert proc.returncode != 0, proc.stderr
    return (proc.stdout + proc.stderr).splitlines()


BAD_MAPPINGS = {
    "a.*": "b.{{wildcard(2)}}",
    "b.*": "b.{{foo(1)}}",
    "c.*": "b.{{partition(x)}}",
    "d.*": "b.$2",
    "e.>": "b",
    "f.*": "b.*",
    "g.*": "b.{{WILDCARD(1)}}",
    "h.*": "b c.$1",
    "i.*": "b.{{wildcard()}}",
    "j.*": "b.{{wildcard(1,2)}}",
    "k.*": "b.{{split(1)}}",
    "l.*": "b.{{split(1,a b)}}",
    "m.*": "b.{{left(1,99999999999)}}",
    "n.*": "b.{{random(1,2)}}",
    "o.*": "b.{{partition(99999999999,1)}}",
    "p.>": "b.$1.>",
    "q.*": "b.>",
    "r.*": "b.>.c",
    "s.*": "b.{{wildcard(1)}}{{wildcard(1)}}",
    "t": "b.{{wildcard(1)}}",
    "u": "b.{{splitfromleft(1,2)}}",
    "v.*": "b..c",
    "w.*": "b.{{right(1)}}",
    "x.*": "b.{{slicefromleft(1,2,3)}}",
    "y.*": "b.{{partition()}}",
    "z.*": "b.{{random(x)}}",
    "aa.*": "b.{{wildcard(x)}}",
    "ab.*": "b.{{splitfromright(x,1)}}",
}


def test_differential_invalid_mappings():
    lines = _config_errors(_mappings_block(BAD_MAPPINGS))
    pat = re.compile(r'Error adding mapping for "(.*)" to "(.*)" : (.*)$')
    server = {}
    for line in lines:
        found = pat.search(line)
        if found:
            server[found.group(1)] = (found.group(2), found.group(3))
    assert set(server) == set(BAD_MAPPINGS), lines
    for src, dest in BAD_MAPPINGS.items():
        assert server[src][0] == dest
        with pytest.raises(TransformError) as info:
            SubjectTransform.compile_mapping(src, dest)
        assert str(info.value) == server[src][1], (src, dest)


BAD_IMPORTS = [
    ("st1.*.*", "z.{{partition(3,1)}}.$2"),
    ("st2.*.*", "w.$2"),
    ("st3.*", "w.{{left(1,2)}}"),
    ("st4.*", "w.{{wildcard(2)}}"),
    ("st5.*", "w.{{random(2)}}"),
]


def test_differential_strict_import_errors():
    exports = ", ".join('{stream: "%s"}' % s for s, _ in BAD_IMPORTS)
    imports = "\n".join('{stream: {account: A, subject: "%s"}, to: "%s"}' % i for i in BAD_IMPORTS)
    lines = _config_errors("accounts {\n A { exports = [ %s ] }\n B { imports = [\n%s\n] }\n}\n"
                           % (exports, imports))
    pat = re.compile(r'failed to create mapping transform for stream import subject '
                     r'from "(.*)" to "(.*)": (.*)$')
    server = {}
    for line in lines:
        found = pat.search(line)
        if found:
            server[(found.group(1), found.group(2))] = found.group(3)
    assert set(server) == set(BAD_IMPORTS), lines
    for src, dest in BAD_IMPORTS:
        with pytest.raises(TransformError) as info:
            T(src, dest, strict=True)
        assert str(info.value) == server[(src, dest)], (src, dest)
