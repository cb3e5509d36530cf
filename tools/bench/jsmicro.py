"""JetStream consumption in one process: CPU time per consumed message.

A real Broker with the JetStream plugin (LevelDB store in a temporary
directory, durable commits) on a ``Clock``, one client connection over a
transport that keeps what it is sent. The stream is filled first (not
measured); then a pull consumer fetches batches and acks every message, or a
push consumer delivers and is acked: what is timed is the broker's work, i.e.
the client connection's ``dataReceived`` (pull requests, acks) and the turns
that commit and deliver (``clock.advance``), in the CPU time of the thread
that runs them (``thread_time``: LevelDB's compaction thread, whose work
lands at random in a run, is left out).
Without sockets and the load generator the numbers move far less with the
machine's load than tools.bench's, so two builds can be compared on a busy
machine: run it once per build (``NATSBROKER_PURE=1``, or another checkout on
``PYTHONPATH``).

    .venv/bin/python -m tools.bench.jsmicro [--msgs 50000] [--repeat 5]
"""

import argparse
import json
import re
import sys
import tempfile
import time

from twisted.internet.task import Clock

from .micro import _CountingTransport

PAYLOAD = b"x" * 128
_MSG = re.compile(rb"MSG \S+ \S+ (\$JS\.ACK\.\S+) \d+\r\n")


class _Transport(_CountingTransport):
    """Keeps what it is sent, for the acks to be found in it."""

    def __init__(self):
        super().__init__()
        self.out = []

    def write(self, data):
        self.out.append(data)

    def writeSequence(self, seq):
        self.out.extend(seq)

    def take(self):
        data, self.out = b"".join(self.out), []
        return data


def _api(subject, body):
    return b"PUB %s _R.api %d\r\n%s\r\n" % (subject, len(body), body)


def run_once(kind, n, batch, consumers=1):
    from natsbroker.auth.users import Authenticator
    from natsbroker.broker import Broker
    from natsbroker.config.model import JetStreamConfig, ServerConfig
    from natsbroker.connection.client import ClientProtocol
    from natsbroker.discovery import plugins_for

    with tempfile.TemporaryDirectory() as tmp:
        clock = Clock()
        cfg = ServerConfig(jetstream=JetStreamConfig(enabled=True, store_dir=tmp))
        broker = Broker(cfg, clock)
        plugins = list(plugins_for(cfg))
        for p in plugins:
            broker.add_plugin(p)
            p.start(broker)
        conn, t = ClientProtocol(broker, Authenticator(cfg)), _Transport()
        conn.makeConnection(t)
        clock_t = time.thread_time

        def turn(data):
            """CPU seconds of the broker taking ``data`` and the turn after it."""
            t0 = clock_t()
            conn.dataReceived(data)
            clock.advance(0)
            return clock_t() - t0

        conn.dataReceived(b'CONNECT {"verbose":false,"pedantic":false}\r\nSUB _R.> 1\r\n'
                          b"SUB _I.> 2\r\n")
        turn(_api(b"$JS.API.STREAM.CREATE.S",
                  json.dumps({"name": "S", "subjects": ["s.>"]}).encode()))
        t.take()
        pub = b"PUB s.x _R.ack %d\r\n%s\r\n" % (len(PAYLOAD), PAYLOAD)
        for i in range(0, n if kind != "pub" else 0, 1000):
            turn(pub * min(1000, n - i))
            t.take()
        if kind == "pub":
            # Publishing into a stream that has ``consumers`` durable pull
            # consumers with no request waiting: what each store costs them.
            for j in range(consumers):
                turn(_api(b"$JS.API.CONSUMER.DURABLE.CREATE.S.P%d" % j, json.dumps(
                    {"stream_name": "S", "config": {"durable_name": "P%d" % j,
                                                    "ack_policy": "explicit"}}).encode()))
            t.take()
            cpu = 0.0
            for i in range(0, n, batch):
                cpu += turn(pub * min(batch, n - i))
                t.take()
            for p in plugins:
                p.stop()
            return cpu / n * 1e6
        cfg_c = {"durable_name": "C", "ack_policy": "explicit", "max_ack_pending": 1000}
        if kind == "push":
            cfg_c["deliver_subject"] = "_I.push"
        got = 0
        create = _api(b"$JS.API.CONSUMER.CREATE.S.C",
                      json.dumps({"stream_name": "S", "config": cfg_c}).encode())
        if kind == "pull":
            turn(create)
            t.take()
            req = json.dumps({"batch": batch, "expires": 30_000_000_000}).encode()
            ask = b"PUB $JS.API.CONSUMER.MSG.NEXT.S.C _I.pull %d\r\n%s\r\n" % (len(req), req)
            cpu = 0.0
        else:
            # A push consumer starts delivering at its create: timed (the
            # API reply and the first deliveries come in one take).
            ask = None
            cpu = turn(create)
        while got < n:
            if ask is not None:
                cpu += turn(ask)
            acks = _MSG.findall(t.take())
            if not acks:
                raise AssertionError("%s delivery stalled at %d of %d" % (kind, got, n))
            got += len(acks)
            cpu += turn(b"".join(b"PUB %s 0\r\n\r\n" % a for a in acks))
        for p in plugins:
            p.stop()
        return cpu / n * 1e6


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m tools.bench.jsmicro", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--msgs", type=int, default=50_000)
    ap.add_argument("--batch", type=int, default=100, help="messages per pull request")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--kinds", default="pull,push",
                    help="pull, push (consumption) and/or pub (publishing, windows of "
                         "--batch messages, with --consumers idle pull consumers)")
    ap.add_argument("--consumers", type=int, default=1000,
                    help="durable pull consumers on the stream for --kinds pub")
    a = ap.parse_args(argv)
    for kind in a.kinds.split(","):
        runs = sorted(run_once(kind, a.msgs, a.batch, a.consumers) for _ in range(a.repeat))
        what = ("published message, %d consumers" % a.consumers if kind == "pub"
                else "consumed message")
        print("%-5s %.2f us CPU per %s (median of %d; runs %s)" % (
            kind, runs[len(runs) // 2], what, a.repeat, " ".join("%.2f" % r for r in runs)))
    from natsbroker import _build
    print("build:", json.dumps(_build.info()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
