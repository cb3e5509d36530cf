"""Issue 29, conformance 2: every combination of a pull request's fields gets
nats-server's answer.

A raw ``$JS.API.CONSUMER.MSG.NEXT`` request with any mix of ``batch``,
``expires``, ``no_wait``, ``idle_heartbeat``, ``max_bytes`` and the priority
group fields (``group``, ``min_pending``, ``min_ack_pending``, ``id``,
``priority``) is sent to consumers of every priority policy (and one with
request limits) on both servers. The combinations are a fixed, seeded sample
of the full product (it has ~120,000; priority fields and heartbeats left
out more often than not, so that most requests reach the serving paths), plus the request nats-py sends after
its drain step (``{"batch": 4, "idle_heartbeat": 100000000, "no_wait":
true}``). Each request has its own reply subject; what it gets is compared as
its status lines (idle heartbeats, whose count is a matter of timing, left out).

The stream is empty: an answer depends only on the request and the consumer,
not on which request a message went to.
"""

import itertools
import json
import random

import pytest

from tests.support.servers import ServerProcess
from tests.test_security_js_api import Client

pytestmark = pytest.mark.timeout(180)

KINDS = ["nats-server", "natsbroker"]
MS = 1_000_000

FIELDS = {
    "batch": [None, 0, 1, 4, -1],
    "expires": [None, 0, 50 * MS, 1000 * MS, -1],
    "no_wait": [None, True, False],
    "idle_heartbeat": [None, 0, 100 * MS, 1000 * MS, -1],
    "max_bytes": [None, 0, 50, 1000],
    "group": [None, "g", "x", ""],
    "min_pending": [None, 1],
    "min_ack_pending": [None, 1],
    "id": [None, "abc"],
    "priority": [None, 0, 1, 10, -1],
}
SAMPLE = 300
FULL = 40  # messages in stream F
# What nats-py's fetch sends after its drain step found messages.
NATS_PY_DRAIN = {"batch": 4, "idle_heartbeat": 100 * MS, "no_wait": True}

CONSUMERS = {
    "PLAIN": {},
    "LIMITS": {"max_batch": 2, "max_expires": 500 * MS, "max_bytes": 100},
    "OVERFLOW": {"priority_policy": "overflow", "priority_groups": ["g"]},
    "PINNED": {"priority_policy": "pinned_client", "priority_groups": ["g"],
               "priority_timeout": 60_000 * MS},
    "PRIORITIZED": {"priority_policy": "prioritized", "priority_groups": ["g"]},
}


# How often a field is left out: the priority fields and heartbeats are
# refused by most consumers, so most requests leave them out to reach the
# serving paths too.
ABSENT = {"batch": 0.2, "expires": 0.3, "no_wait": 0.3, "idle_heartbeat": 0.7,
          "max_bytes": 0.5, "group": 0.3, "min_pending": 0.85, "min_ack_pending": 0.85,
          "id": 0.85, "priority": 0.7}


def requests():
    """The request bodies: a seeded sample of the product of FIELDS, the
    single-field ones, and nats-py's drain-step request."""
    rnd = random.Random(29)
    bodies = []
    for _ in range(SAMPLE):
        body = {}
        for name, values in FIELDS.items():
            if rnd.random() >= ABSENT[name]:
                body[name] = rnd.choice([v for v in values if v is not None])
        bodies.append(body)
    for name, values in FIELDS.items():
        bodies += [{name: v} for v in values if v is not None]
    bodies.append(NATS_PY_DRAIN)
    return list(dict.fromkeys(json.dumps(b).encode() for b in bodies))


def statuses(frames):
    """The status lines a request got, in order, without idle heartbeats."""
    out = []
    for f in frames:
        if f.header:
            line = f.header.split(b"\r\n", 1)[0].decode(errors="replace")
            if not line.startswith("NATS/1.0 100"):
                out.append(line)
        else:
            out.append("message")
    return out


# Requests on a stream with messages, each on a consumer of its own (so
# that which request a message goes to is not a matter of timing): a grid.
FULL_GRID = {
    "batch": [1, 4, 50],
    "expires": [None, 50 * MS],
    "no_wait": [None, True],
    "idle_heartbeat": [None, 10 * MS],
    "max_bytes": [None, 30, 50, 1000],
}


def full_requests():
    names = list(FULL_GRID)
    for combo in itertools.product(*(FULL_GRID[n] for n in names)):
        yield json.dumps({n: v for n, v in zip(names, combo) if v is not None}).encode()
    yield json.dumps(NATS_PY_DRAIN).encode()


def run(kind, tmp_path):
    """{(stream, consumer, body): status lines} from one server: on stream E
    (empty) every request goes to each of CONSUMERS; on stream F (FULL
    messages) each request of the grid to a new consumer of its own."""
    with ServerProcess(kind, ["-js", "-sd", str(tmp_path / kind)]) as s:
        c = Client(s.port)
        for stream in ("E", "F"):
            _api(c, "$JS.API.STREAM.CREATE.%s" % stream,
                 {"name": stream, "subjects": [stream.lower() + ".>"]})
        for i in range(FULL):
            c.sock.sendall(b"PUB f.a r.pub 5\r\nm%04d\r\n" % i)
        assert len(c.quiet_frames(count=FULL)) == FULL
        todo = []
        for name, extra in CONSUMERS.items():
            _consumer(c, "E", name, extra)
            todo += [("E", name, body) for body in requests()]
        for i, body in enumerate(full_requests()):
            _consumer(c, "F", "F%d" % i, {})
            todo.append(("F", "F%d" % i, body))
        sent = {}
        for stream, name, body in todo:
            # Its own inbox and sid: a message comes on its own subject.
            sid = len(sent) + 100
            c.sock.sendall(b"SUB in.%d %d\r\nPUB $JS.API.CONSUMER.MSG.NEXT.%s.%s in.%d %d\r\n"
                           b"%s\r\n" % (sid, sid, stream.encode(), name.encode(), sid,
                                         len(body), body))
            sent[sid] = (stream, name, body)
        got = {key: [] for key in sent.values()}
        for f in c.quiet_frames(quiet=2.0, limit=90):
            got[sent[f.sid]].append(f)
        c.close()
    return {key: statuses(frames) for key, frames in got.items()}


def _consumer(c, stream, name, extra):
    cfg = dict({"durable_name": name, "ack_policy": "explicit"}, **extra)
    _api(c, "$JS.API.CONSUMER.CREATE.%s.%s" % (stream, name),
         {"stream_name": stream, "config": cfg})


def _api(c, subject, body):
    c.request(subject, json.dumps(body).encode())
    resp = json.loads(c.quiet_frames(count=1)[0].payload)
    assert "error" not in resp, resp


def test_pull_request_fields(tmp_path):
    got = {kind: run(kind, tmp_path) for kind in KINDS}
    ref, ours = got["nats-server"], got["natsbroker"]
    diff = {"%s.%s %s" % (stream, name, body.decode()): (ref[key], ours[key])
            for key in ref for stream, name, body in [key] if ref[key] != ours[key]}
    assert not diff, "%d differ:\n%s" % (len(diff), json.dumps(diff, indent=1)[:8000])
    # The grid exercises what it is meant to: errors, timeouts and no-waits.
    seen = {line for lines in ours.values() for line in lines}
    for line in ("NATS/1.0 400 Bad Request - heartbeat value too large",
                 "NATS/1.0 404 No Messages", "NATS/1.0 408 Request Timeout",
                 "NATS/1.0 409 Exceeded MaxRequestBatch of 2",
                 "NATS/1.0 400 Bad Request - Priority Group missing"):
        assert line in seen, line
