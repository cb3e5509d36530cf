"""Ordered consumers, pull requests and consumers across a server restart
(issue 29, client conformance 3), against nats-server and natsbroker alike.

Each test restarts its server on the same port and store directory, as an
operator would, and checks what the clients see with what nats-server 2.15.1
does:

* on shutdown every waiting pull request hears ``409 Server Shutdown`` with
  what it still had to receive (``Nats-Pending-Messages``/``-Bytes``), one per
  reply subject (nats-server's ``signalPullConsumers``). nats-jetstream's
  ordered consumer ``messages()`` pulls without heartbeats: without that 409
  it waits forever for a request that died with the server;
* ``mem_storage`` consumers (durable or not; ordered consumers of both clients
  are) are gone after a restart, file-backed ephemeral ones come back and
  their ``inactive_threshold`` runs again; so both ordered consumers make a new
  server-side consumer and their consumer sequence starts at 1 again.
"""

import asyncio
import json
import os
import subprocess
import time

import nats
import pytest

from tests.support.raw import Conversation
from tests.support.servers import ROOT, ServerProcess
from tests.support.wait import eventually_async
from tests.test_nats_core import _interpreter

pytestmark = pytest.mark.timeout(150)

KINDS = ["nats-server", "natsbroker"]
both = pytest.mark.parametrize("kind", KINDS)
CLIENT = os.path.join(ROOT, "tests", "nats_core", "ordered_restart.py")
DEADLINE = 20.0


class Restartable:
    """A JetStream server that comes back on the same port and store directory."""

    def __init__(self, kind, store):
        self.args = ["-js", "-sd", str(store)]
        self.kind = kind
        self.server = ServerProcess(kind, self.args).start()
        # Then the port it got, explicitly: a client reconnects to the address it
        # knows. (Chosen by the listener itself, not picked free beforehand: no
        # window in which another test's server can take it.)
        self.args += ["-p", str(self.server.port)]

    @property
    def url(self):
        return self.server.url

    def shut_down(self):
        self.server.__exit__(None, None, None)

    def restart(self):
        self.shut_down()
        self.server = ServerProcess(self.kind, self.args).start()


@pytest.fixture
def restartable(tmp_path):
    made = []

    def make(kind):
        made.append(Restartable(kind, tmp_path / "store"))
        return made[-1]
    yield make
    for r in made:
        r.shut_down()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


# -- nats-jetstream: stream.ordered_consumer().messages() ----------------------

@both
def test_nats_jetstream_ordered_messages_survive_restart(restartable, kind):
    py = _interpreter()
    srv = restartable(kind)
    proc = subprocess.Popen([py, CLIENT, srv.url], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        first = json.loads(proc.stdout.readline() or "null")
        assert first == {"event": "first", "consumer": "rd_1",
                         "got": [["ors.a", "m0", 1, 1], ["ors.a", "m1", 2, 2],
                                 ["ors.a", "m2", 3, 3]]}, proc.stderr.read()[-4000:]
        srv.restart()
        out, err = proc.communicate("restarted\n", timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # The pull request of rd_1 ended with the server (409 Server Shutdown);
    # pulled again, rd_1 is gone (503), so the client made rd_2 from stream
    # sequence 4: consumer sequences start again.
    assert out.strip().splitlines()[-1:] == [json.dumps(
        {"event": "after", "got": [["ors.a", "m3", 4, 1], ["ors.a", "m4", 5, 2],
                                   ["ors.a", "m5", 6, 3]], "consumer": "rd_2"})], err[-4000:]


# -- nats-py: js.subscribe(..., ordered_consumer=True) --------------------------

async def _nats_py_ordered(srv):
    loop = asyncio.get_running_loop()
    nc = await nats.connect(srv.url, max_reconnect_attempts=-1, reconnect_time_wait=0.1,
                            connect_timeout=DEADLINE)
    js = nc.jetstream(timeout=DEADLINE)
    await js.add_stream(name="ORP", subjects=["orp.>"], storage="file")
    for i in range(3):
        await js.publish("orp.a", b"m%d" % i)
    sub = await js.subscribe("orp.>", ordered_consumer=True, idle_heartbeat=0.5)

    async def read(n):
        got = []
        for _ in range(n):
            m = await sub.next_msg(timeout=DEADLINE)
            got.append([m.subject, m.data.decode(), m.metadata.sequence.stream,
                        m.metadata.sequence.consumer])
        return got

    out = {"first": await read(3)}
    await loop.run_in_executor(None, srv.restart)
    deadline = loop.time() + DEADLINE
    for i in range(3, 6):
        while True:
            try:
                await js.publish("orp.a", b"m%d" % i, timeout=2)
                break
            except Exception:
                if loop.time() > deadline:
                    raise
                await asyncio.sleep(0.1)
    out["after"] = await read(3)
    await sub.unsubscribe()
    await nc.close()
    return out


@both
def test_nats_py_ordered_consumer_survives_restart(restartable, kind):
    # The mem_storage consumer is gone after the restart: heartbeats stop, the
    # client makes a new one from stream sequence 4.
    assert run(_nats_py_ordered(restartable(kind))) == {
        "first": [["orp.a", "m0", 1, 1], ["orp.a", "m1", 2, 2], ["orp.a", "m2", 3, 3]],
        "after": [["orp.a", "m3", 4, 1], ["orp.a", "m4", 5, 2], ["orp.a", "m5", 6, 3]],
    }


# -- raw: what waiting pull requests hear at shutdown ----------------------------

def _hmsgs(data):
    """The (subject, header block) of every HMSG in ``data``."""
    out = []
    while b"HMSG " in data:
        data = data[data.index(b"HMSG "):]
        line, _, data = data.partition(b"\r\n")
        parts = line.split()
        hdr_len, total = int(parts[-2]), int(parts[-1])
        out.append((parts[1].decode(), data[:hdr_len].decode()))
        data = data[total + 2:]
    return out


async def _waiting(url, consumers):
    """Polls until each consumer has its ``num_waiting`` pull requests queued."""
    async def queued():
        got = {n: (await _api(url, "$JS.API.CONSUMER.INFO.SD.%s" % n))["num_waiting"]
               for n in consumers}
        return got if got == consumers else None
    return await eventually_async(queued, timeout=DEADLINE, interval=0.05, ignore=(),
                                  what="num_waiting %r" % (consumers,))


@both
def test_waiting_pull_requests_hear_server_shutdown(restartable, kind):
    srv = restartable(kind)
    run(_api(srv.url, "$JS.API.STREAM.CREATE.SD", {"name": "SD", "subjects": ["sd"]}))
    for name in ("d", "r3"):
        run(_api(srv.url, "$JS.API.CONSUMER.CREATE.SD.%s" % name,
                 {"stream_name": "SD", "config": {"durable_name": name, "num_replicas": 1}}))
    run(_publish(srv.url, "sd", b"stored"))  # one message: the first request gets it
    c = Conversation(srv.server.port)
    minute = 60 * 10**9
    c.send(b'CONNECT {"verbose":false,"headers":true,"protocol":1}\r\n'
           b"SUB r1 1\r\nSUB r2 2\r\nSUB r3 3\r\n")
    def pull(reply, body):
        body = json.dumps(body).encode()
        c.send(b"PUB $JS.API.CONSUMER.MSG.NEXT.SD.d %s %d\r\n%s\r\n" % (reply, len(body), body))

    # The first request has its message before the next one comes: nats-server
    # moves a request it served to the back of the queue, so which one is last
    # on r1 would otherwise depend on timing.
    pull(b"r1", {"batch": 3, "expires": minute})
    assert c.read_until(b"stored\r\n").startswith(b"MSG sd 1 $JS.ACK.SD.d.1.1.1.")
    pull(b"r1", {"batch": 7, "max_bytes": 1000, "expires": minute})
    pull(b"r2", {"batch": 2, "expires": minute})
    c.send(b"PUB $JS.API.CONSUMER.MSG.NEXT.SD.r3 r3 1\r\n5\r\n")  # a bare batch size
    assert run(_waiting(srv.url, {"d": 3, "r3": 1})) == {"d": 3, "r3": 1}
    srv.shut_down()
    deadline = time.time() + DEADLINE
    while not c.closed and time.time() < deadline:
        c._recv(1.0)
    pending = "NATS/1.0 409 Server Shutdown\r\nNats-Pending-Messages: %d\r\nNats-Pending-Bytes: %d\r\n\r\n"
    # One status per reply subject, for the last request on it (r3 had the
    # stored message too).
    assert sorted(_hmsgs(c.buf)) == [("r1", pending % (7, 1000)), ("r2", pending % (2, 0)),
                                     ("r3", pending % (4, 0))]


# -- which consumers come back -----------------------------------------------------

CONSUMERS = {
    "dur_file": {"durable_name": "dur_file", "ack_policy": "explicit"},
    "dur_mem": {"durable_name": "dur_mem", "ack_policy": "explicit", "mem_storage": True},
    "eph_file": {"name": "eph_file", "inactive_threshold": 600 * 10**9},
    "eph_mem": {"name": "eph_mem", "inactive_threshold": 600 * 10**9, "mem_storage": True},
    "eph_short": {"name": "eph_short", "inactive_threshold": 2 * 10**9},
    "dur_short": {"durable_name": "dur_short", "inactive_threshold": 2 * 10**9},
}


async def _api(url, subject, body=None):
    nc = await nats.connect(url, allow_reconnect=False, connect_timeout=DEADLINE)
    try:
        r = await nc.request(subject, json.dumps(body).encode() if body is not None else b"",
                             timeout=DEADLINE)
    finally:
        await nc.close()
    return json.loads(r.data)


async def _publish(url, subject, data):
    nc = await nats.connect(url, allow_reconnect=False, connect_timeout=DEADLINE)
    try:
        await nc.jetstream(timeout=DEADLINE).publish(subject, data)
    finally:
        await nc.close()


async def _names(url):
    return sorted((await _api(url, "$JS.API.CONSUMER.NAMES.CS", {}))["consumers"])


async def _consumers_across_restart(srv):
    await _api(srv.url, "$JS.API.STREAM.CREATE.CS", {"name": "CS", "subjects": ["cs"]})
    for name, cfg in CONSUMERS.items():
        r = await _api(srv.url, "$JS.API.CONSUMER.CREATE.CS.%s" % name,
                       {"stream_name": "CS", "config": cfg})
        assert "error" not in r, r
    srv.restart()
    out = {"after_restart": await _names(srv.url)}
    r = await _api(srv.url, "$JS.API.CONSUMER.INFO.CS.dur_mem")
    out["dur_mem"] = r.get("error")
    r = await _api(srv.url, "$JS.API.CONSUMER.INFO.CS.eph_file")
    out["eph_file"] = [r["config"].get(k) for k in ("name", "durable_name", "inactive_threshold")]
    # The inactivity timers of those that came back run again.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE
    while (names := await _names(srv.url)) != ["dur_file", "eph_file"] and loop.time() < deadline:
        await asyncio.sleep(0.2)
    out["later"] = names
    return out


@both
def test_which_consumers_come_back_after_restart(restartable, kind):
    assert run(_consumers_across_restart(restartable(kind))) == {
        "after_restart": ["dur_file", "dur_short", "eph_file", "eph_short"],
        "dur_mem": {"code": 404, "err_code": 10014, "description": "consumer not found"},
        "eph_file": ["eph_file", None, 600 * 10**9],
        "later": ["dur_file", "eph_file"],
    }
