"""Issue 29 S7: a JetStream request is what its whole subject says it is.

nats-server serves each API request through a subscription on its exact
subject (``$JS.API.STREAM.INFO.*``, a consumer's own
``$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>``, a stream's
``$JS.API.DIRECT.GET.<stream>[.>]``), and reaches them from
``$JS.<domain>.API.<...>`` only through its domain mappings. natsbroker used to
take any subject that *contained* ``.API.CONSUMER.MSG.NEXT.`` for a pull
request (and ``.API.DIRECT.GET.`` for a direct get), so a user allowed only
``$JS.API.STREAM.INFO.>`` -- or an account importing only that -- drained a
consumer with ``$JS.API.STREAM.INFO.API.CONSUMER.MSG.NEXT.S.C``.

Every API subject is sent with other API subjects, tokens and domains spliced
around it, to both servers, with distinct reply subjects; what each reply
subject receives (API error codes, status lines, delivered messages) must be
the same, and the consumer must not have delivered anything.
"""

import json
import time

import pytest

from tests.support.raw import Closed, Wire
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.timeout(240)

KINDS = ["nats-server", "natsbroker"]

CONF = """
jetstream { store_dir: "%(store)s", domain: hub }
accounts {
  X: {
    jetstream: enabled
    users: [
      {user: x, password: p}
      {user: info, password: p, permissions: {
        publish: {allow: ["$JS.API.STREAM.INFO.>"]}, subscribe: {allow: ["r.>"]}}}
      {user: nonext, password: p, permissions: {
        publish: {deny: ["$JS.API.CONSUMER.MSG.NEXT.>", "$JS.hub.API.CONSUMER.MSG.NEXT.>"]}}}
    ]
    exports: [ {service: "$JS.API.STREAM.INFO.>"} ]
  }
  Y: {
    users: [ {user: y, password: p} ]
    imports: [ {service: {account: X, subject: "$JS.API.STREAM.INFO.>"}} ]
  }
}
"""

# Every API request subject nats-server 2.15 serves (after ``$JS.API.``),
# with the names of the fixture's stream S and consumer C.
TARGETS = [
    "INFO", "STREAM.CREATE.S2", "STREAM.UPDATE.S", "STREAM.INFO.S", "STREAM.DELETE.S",
    "STREAM.PURGE.S", "STREAM.NAMES", "STREAM.LIST", "STREAM.MSG.GET.S",
    "STREAM.MSG.DELETE.S", "STREAM.SNAPSHOT.S", "STREAM.RESTORE.S2",
    "STREAM.LEADER.STEPDOWN.S", "STREAM.PEER.REMOVE.S", "CONSUMER.CREATE.S",
    "CONSUMER.CREATE.S.C2", "CONSUMER.DURABLE.CREATE.S.C2", "CONSUMER.INFO.S.C",
    "CONSUMER.DELETE.S.C", "CONSUMER.NAMES.S", "CONSUMER.LIST.S", "CONSUMER.PAUSE.S.C",
    "CONSUMER.UNPIN.S.C", "CONSUMER.RESET.S.C", "CONSUMER.LEADER.STEPDOWN.S.C",
    "CONSUMER.MSG.NEXT.S.C", "DIRECT.GET.S", "DIRECT.GET.S.s.a",
]
# The request subjects' fixed tokens (``STREAM.INFO`` of ``STREAM.INFO.S``).
HOSTS = sorted({".".join(t.split(".")[:3 if t.split(".")[1] in (
    "MSG", "DURABLE", "LEADER", "PEER") else 2]) for t in TARGETS if t != "INFO"} | {"INFO"})
NEXT = "CONSUMER.MSG.NEXT.S.C"
BODY = b'{"batch":2}'


def spliced(target):
    """``target`` (after ``$JS.API.``) hidden in other subjects: inside every
    other API request subject (bare and with its arguments), behind or before
    extra tokens, under a foreign or unmapped domain, and cut short. None of
    them is ``target`` itself."""
    out = []
    for host in HOSTS + TARGETS:
        out.append("$JS.API.%s.API.%s" % (host, target))
        out.append("$JS.hub.API.%s.API.%s" % (host, target))
        out.append("$JS.API.%s.$JS.API.%s" % (host, target))
    out += ["$JS.API.%s.x" % target, "$JS.API.x.%s" % target, "$JS.API.x.API.%s" % target,
            "$JS.x.API.%s" % target, "$JS.hub.API.x.%s" % target, "x.$JS.API.%s" % target,
            "$JS.API.API.%s" % target, "$JS.hub.API.%s.x" % target,
            "$JS.API.%s" % target.rsplit(".", 1)[0]]
    if target == "INFO":
        out.remove("$JS.API.INFO")  # its own cut-short form is itself
    return out


# -- a raw client with a user ------------------------------------------------


class Client(Wire):
    """A raw connection (as ``user``, if given): requests with numbered reply subjects,
    and every frame (and -ERR) received until the connection is quiet."""

    def __init__(self, port, user=None):
        super().__init__(port)
        self.errs = []
        auth = b',"user":"%s","pass":"p"' % user.encode() if user else b""
        self.sock.sendall(b'CONNECT {"verbose":false,"headers":true,"no_responders":true,'
                          b'"protocol":1%s}\r\nSUB r.> 1\r\nPING\r\n' % auth)
        assert self._line(time.monotonic() + 10) == b"PONG"
        self.n = 0

    def request(self, subject, body=BODY):
        self.n += 1
        self.sock.sendall(b"PUB %s r.%d %d\r\n%s\r\n" % (subject.encode(), self.n, len(body), body))
        return "r.%d" % self.n

    def quiet_frames(self, quiet=1.5, limit=60.0, count=None):
        """Every frame until ``quiet`` s pass with nothing (nats-server
        answers API requests from its own goroutines, in no set order)."""
        out = []
        end = time.monotonic() + limit
        while time.monotonic() < end and len(out) != count:
            try:
                line = self._line(min(end, time.monotonic() + quiet))
            except Closed:  # as quiet as it gets
                break
            if line is None:
                break
            if line == b"PING":
                self.sock.sendall(b"PONG\r\n")
                continue
            if line.startswith(b"-ERR"):
                self.errs.append(line.decode())
                continue
            if line in (b"PONG", b"+OK") or line.startswith(b"INFO"):
                continue
            out.append(self.frame_after(line, time.monotonic() + 10))
        return out


def outcome(frame):
    """What a reply says, without timings, ids or bodies that differ by design."""
    if frame.reply and frame.reply.startswith("$JS.ACK."):
        return "message %s" % frame.reply.split(".")[5]  # a pulled message: its stream seq
    if frame.header:
        lines = frame.header.decode(errors="replace").split("\r\n")
        keep = [l for l in lines[1:] if l.startswith(("Nats-Subject:", "Nats-Sequence:"))]
        return " | ".join([lines[0]] + keep)
    try:
        resp = json.loads(frame.payload)
    except ValueError:
        return "raw %r" % frame.payload[:40]
    err = resp.get("error")
    if err:
        return "%s error %s/%s" % (resp.get("type"), err.get("code"), err.get("err_code"))
    return "%s ok" % resp.get("type")


def answers(client, subjects):
    """{subject: sorted outcomes} for one request on each of ``subjects``;
    pulled messages (which come on their own subjects) under ``"pulled"``."""
    sent = {client.request(s): s for s in subjects}
    got = {s: [] for s in subjects}
    got["pulled"] = []
    for f in client.quiet_frames():
        key = "pulled" if f.reply and f.reply.startswith("$JS.ACK.") else sent.get(
            f.subject, "elsewhere")
        got.setdefault(key, []).append(outcome(f))
    return {s: sorted(v) for s, v in got.items()}


# -- the servers ---------------------------------------------------------------


def _setup(port):
    c = Client(port, "x")
    for subject, body in (
            ("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"], "allow_direct": True}),
            ("$JS.API.CONSUMER.CREATE.S.C", {"stream_name": "S", "config": {
                "durable_name": "C", "ack_policy": "explicit"}}),
            ("$JS.API.CONSUMER.CREATE.S.CTRL", {"stream_name": "S", "config": {
                "durable_name": "CTRL", "ack_policy": "explicit"}})):
        c.request(subject, json.dumps(body).encode())
        frames = c.quiet_frames(count=1)
        assert frames and "error" not in json.loads(frames[0].payload), frames
    for i in range(10):
        c.sock.sendall(b"PUB s.a r.p 1\r\n%d\r\n" % i)
    assert len(c.quiet_frames(count=10)) == 10
    c.close()


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    out = {}
    try:
        for kind in KINDS:
            d = tmp_path_factory.mktemp("s7-" + kind)
            conf = d / "server.conf"
            conf.write_text(CONF % {"store": d / "js"})
            s = ServerProcess(kind, ["-c", str(conf)]).start()
            out[kind] = s
            _setup(s.port)
        yield out
    finally:
        for s in out.values():
            s.stop()


def consumer_state(port, name="C"):
    c = Client(port, "x")
    c.request("$JS.API.CONSUMER.INFO.S.%s" % name, b"")
    frames = c.quiet_frames(count=1)
    c.close()
    info = json.loads(frames[0].payload)
    return info["delivered"]["stream_seq"], info["num_ack_pending"], info["num_pending"]


def differential(servers, user, subjects):
    """Send ``subjects`` as ``user`` to both servers: what each reply subject
    got, per server; and the consumer C must have delivered nothing."""
    got = {}
    for kind, s in servers.items():
        c = Client(s.port, user)
        got[kind] = answers(c, subjects)
        got[kind]["-ERR"] = sorted(set(c.errs))
        c.close()
        assert consumer_state(s.port) == (0, 0, 10), kind
    return got


def _assert_same(got):
    diff = {s: (got["nats-server"][s], got["natsbroker"][s])
            for s in got["nats-server"] if got["nats-server"][s] != got["natsbroker"][s]}
    assert not diff, json.dumps(diff, indent=1)[:6000]


# -- the tests -------------------------------------------------------------------


def test_spliced_api_subjects(servers):
    """Every API subject hidden in other subjects gets what nats-server gives
    (for a pull request or a direct get hidden in another request: nothing).
    One batch for all of them: each reply subject names its request."""
    subjects = [s for target in TARGETS for s in spliced(target)]
    got = differential(servers, "x", subjects)
    _assert_same(got)
    # The attack: nats-server answers nothing at all.
    for s in ("$JS.API.STREAM.INFO.API.CONSUMER.MSG.NEXT.S.C",
              "$JS.API.STREAM.INFO.S.API.CONSUMER.MSG.NEXT.S.C",
              "$JS.hub.API.STREAM.INFO.API.CONSUMER.MSG.NEXT.S.C"):
        assert got["natsbroker"][s] == [], s
    assert got["natsbroker"]["pulled"] == []


def test_user_allowed_only_stream_info_cannot_pull(servers):
    """A user allowed to publish only ``$JS.API.STREAM.INFO.>`` gets nothing
    from a pull request spliced into that space; the real subject is refused."""
    subjects = ["$JS.API.STREAM.INFO.%s.API.%s" % (h, NEXT) for h in ("", "S", "S.x")]
    subjects = [s.replace("..", ".") for s in subjects] + [
        "$JS.API.STREAM.INFO.API.DIRECT.GET.S", "$JS.API.STREAM.INFO.API.DIRECT.GET.S.s.a"]
    got = differential(servers, "info", subjects)
    _assert_same(got)
    assert all(v == [] for v in got["natsbroker"].values())
    # The real pull request: a permissions violation on both.
    got = differential(servers, "info", ["$JS.API." + NEXT])
    _assert_same(got)
    assert got["natsbroker"]["-ERR"] == [
        "-ERR 'Permissions Violation for Publish to \"$JS.API.%s\"'" % NEXT]


def test_user_denied_msg_next_cannot_pull(servers):
    """A user denied ``$JS.API.CONSUMER.MSG.NEXT.>`` (and the domain form)
    gets nothing from a pull request spliced into any other API subject."""
    subjects = [s for s in spliced(NEXT) if not s.startswith(
        ("$JS.API.CONSUMER.MSG.NEXT.", "$JS.hub.API.CONSUMER.MSG.NEXT."))]
    got = differential(servers, "nonext", subjects)
    _assert_same(got)
    assert not any(o.startswith("message") for v in got["natsbroker"].values() for o in v)


def test_import_of_stream_info_cannot_pull(servers):
    """Account Y imports only ``$JS.API.STREAM.INFO.>`` from X: a pull request
    spliced into it does not reach X's consumer (nats-server: nothing)."""
    subjects = ["$JS.API.STREAM.INFO.API.%s" % NEXT, "$JS.API.STREAM.INFO.S.API.%s" % NEXT,
                "$JS.API.STREAM.INFO.API.DIRECT.GET.S", "$JS.API.STREAM.INFO.x.API.%s" % NEXT]
    got = differential(servers, "y", subjects + ["$JS.API.STREAM.INFO.S"])
    _assert_same(got)
    assert all(got["natsbroker"][s] == [] for s in subjects)
    # The import itself works: X answers the control request (refusing the
    # pull request's body), next to Y's own "not enabled".
    assert got["natsbroker"]["$JS.API.STREAM.INFO.S"] == [
        "io.nats.jetstream.api.v1.stream_info_response error 400/10025",
        "io.nats.jetstream.api.v1.stream_info_response error 503/10039"]


def test_exact_pull_request_still_served(servers):
    """The control: the exact subject, and its domain form, pull as before."""
    for kind, s in servers.items():
        c = Client(s.port, "x")
        got = answers(c, ["$JS.API.CONSUMER.MSG.NEXT.S.CTRL"])
        c.close()
        assert got["pulled"] == ["message 1", "message 2"], (kind, got)
        c = Client(s.port, "x")
        got = answers(c, ["$JS.hub.API.CONSUMER.MSG.NEXT.S.CTRL"])
        c.close()
        assert got["pulled"] == ["message 3", "message 4"], (kind, got)
