"""Micro-benchmarks of the hot modules: the protocol parser and the Sublist.

Measures ops/s of

* ``parser``: ``Parser.feed`` on a realistic client byte stream (mostly PUB
  with 128-byte payloads, some PUB with reply, HPUB, SUB/UNSUB and PING), cut
  into different chunk sizes: 64 KiB (a busy socket read), 4 KiB, and uneven
  chunks of 100-1500 bytes (ops split across reads); plus a PUB-only stream
  like the ``pub`` scenario's;
* ``match``: ``Sublist.match`` with cache hits and with cache misses (more
  distinct subjects than the cache holds), literal and wildcard
  subscriptions, 1k / 10k / 100k subscriptions;
* ``sublist``: ``Sublist.insert`` + ``remove`` of N subscriptions, and the
  churn of one subscription (an inbox) while the match cache is full;
* ``path``: the whole PUB -> MSG path in process, without sockets: a real
  Broker with its plugins and real ClientProtocol connections whose
  transports count what they are given. A publisher's reads (64 KiB) go to
  ``dataReceived``; 0, 1 or 4 subscribers (``pub``, ``pubsub``, ``fanout``
  like tools.bench's scenarios), each message to the same subject (the
  PUB line repeats), or each with its own reply subject (every line
  differs: the parser's general path, and no runs).

The modules are imported normally, so whichever ``natsbroker`` comes first on
``sys.path`` is measured: run it as a script, with a compiled build first on
``PYTHONPATH``, to compare builds of the same source::

    .venv/bin/python tools/bench/micro.py                       # interpreted
    PYTHONPATH=/tmp/perf/cy .venv/bin/python tools/bench/micro.py   # compiled
    .venv/bin/python tools/bench/micro.py --only parser,match --json
    .venv/bin/python tools/bench/micro.py --only path   # the PUB -> MSG path

(``python -m tools.bench.micro`` from the repository root works too, but then
the source tree's ``natsbroker`` comes first.) The header says which files
were loaded and whether they are compiled extension modules.

Each case runs ``--repeat`` times (default 5) for about ``--time`` seconds
(default 0.3) of this process's CPU time (``--clock wall`` for wall time) and
the median rate is reported. Numbers from a shared machine
are noisy: compare builds in the same session, and repeat.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import json
import os
import random
import statistics
import sys
import time

from natsbroker.protocol import parser as parser_mod
from natsbroker.protocol.parser import Parser
from natsbroker.subjects import sublist as subjects_mod
from natsbroker.subjects.sublist import Sublist, Subscription

PAYLOAD = bytes(range(32, 32 + 64)) * 2  # 128 printable bytes
SIZES = (1_000, 10_000, 100_000)


def _build_kind(mod) -> str:
    f = mod.__file__ or ""
    if any(f.endswith(s) for s in importlib.machinery.EXTENSION_SUFFIXES):
        return "compiled"
    return "interpreted"


# -- timing ----------------------------------------------------------------

def measure(run, ops_per_call: int, seconds: float, repeat: int,
            clock=time.process_time) -> float:
    """Median ops/s of ``run()`` (one call = ``ops_per_call`` ops), each
    repeat calling it for about ``seconds`` of ``clock``."""
    # calibrate: calls per repeat
    t0 = clock()
    run()
    one = max(clock() - t0, 1e-6)
    calls = max(1, int(seconds / one))
    rates = []
    for _ in range(repeat):
        t0 = clock()
        for _ in range(calls):
            run()
        dt = clock() - t0
        rates.append(calls * ops_per_call / dt)
    return statistics.median(rates)


# -- parser ----------------------------------------------------------------

def client_stream(n_ops: int, seed: int = 1) -> tuple[bytes, int]:
    """A client's byte stream of ``n_ops`` ops: ~85% PUB (1/5 of them with a
    reply), 5% HPUB, 4% SUB, 3% UNSUB, 3% PING."""
    rnd = random.Random(seed)
    hdr = b"NATS/1.0\r\nNats-Msg-Id: 1234567890\r\n\r\n"
    parts = []
    for i in range(n_ops):
        x = rnd.random()
        subj = b"orders.eu.%d.created" % (i % 50)
        if x < 0.68:
            parts.append(b"PUB %s %d\r\n%s\r\n" % (subj, len(PAYLOAD), PAYLOAD))
        elif x < 0.85:
            parts.append(b"PUB %s _INBOX.Xk3j9aQz.%d %d\r\n%s\r\n"
                         % (subj, i, len(PAYLOAD), PAYLOAD))
        elif x < 0.90:
            parts.append(b"HPUB %s %d %d\r\n%s%s\r\n"
                         % (subj, len(hdr), len(hdr) + len(PAYLOAD), hdr, PAYLOAD))
        elif x < 0.94:
            parts.append(b"SUB orders.eu.%d.* %d\r\n" % (i % 50, i))
        elif x < 0.97:
            parts.append(b"UNSUB %d\r\n" % i)
        else:
            parts.append(b"PING\r\n")
    return b"".join(parts), n_ops


def pub_stream(n_ops: int) -> tuple[bytes, int]:
    frame = b"PUB bench.pub.1 %d\r\n%s\r\n" % (len(PAYLOAD), PAYLOAD)
    return frame * n_ops, n_ops


def chunk(data: bytes, how) -> list[bytes]:
    if isinstance(how, int):
        return [data[i:i + how] for i in range(0, len(data), how)]
    rnd = random.Random(7)
    out, i = [], 0
    while i < len(data):
        k = rnd.randint(*how)
        out.append(data[i:i + k])
        i += k
    return out


def parser_cases(n_ops: int = 20_000):
    mixed, nm = client_stream(n_ops)
    pubs, np_ = pub_stream(n_ops)
    cases = []
    for sname, data, nops in (("mixed", mixed, nm), ("pub-only", pubs, np_)):
        for cname, how in (("64KiB", 65536), ("4KiB", 4096), ("100-1500B", (100, 1500))):
            if sname == "pub-only" and cname == "4KiB":
                continue
            chunks = chunk(data, how)

            def run(chunks=chunks, nops=nops):
                p = Parser()
                feed = p.feed
                got = 0
                for c in chunks:
                    got += len(feed(c))
                if got != nops:
                    raise AssertionError(f"parsed {got} ops, expected {nops}")
            cases.append((f"parser {sname} stream, {cname} chunks", run, nops,
                          len(data)))
    return cases


# -- Sublist -----------------------------------------------------------------

def literal_subjects(n: int) -> list[bytes]:
    return [b"app.%d.%d.evt" % (i // 100, i % 100) for i in range(n)]


def build_sublist(n: int, wildcard: bool) -> tuple[Sublist, list[bytes]]:
    """``n`` subscriptions. Literal: ``app.<a>.<b>.evt``. Wildcard: the same
    count, a third each ``app.<a>.*.evt``, ``app.<a>.<b>.>`` and literal."""
    sl = Sublist()
    subjects = literal_subjects(n)
    owner = object()
    for i, s in enumerate(subjects):
        if wildcard and i % 3 == 0:
            pat = b"app.%d.*.evt" % (i // 100)
        elif wildcard and i % 3 == 1:
            pat = s.rsplit(b".", 1)[0] + b".>"
        else:
            pat = s
        sl.insert(Subscription(pat, b"%d" % i, owner))
    return sl, subjects


def match_cases(sizes=SIZES):
    cases = []
    for wildcard in (False, True):
        kind = "wildcard" if wildcard else "literal"
        for n in sizes:
            sl, subjects = build_sublist(n, wildcard)
            match = sl.match
            # hits: as many distinct subjects as the cache holds, all cached
            hot = subjects[:min(len(subjects), 1000)]
            for s in hot:
                match(s)

            def run_hit(hot=hot, match=match):
                for s in hot:
                    match(s)
            cases.append((f"match hit  {kind:8} {n:>7,} subs", run_hit, len(hot), None))
            # misses: each subject is dropped from the cache right before its
            # match (a dict pop, included in the time)
            rnd = random.Random(3)
            cold = rnd.sample(subjects, min(len(subjects), 5000))
            if len(cold) < 5000:
                cold = (cold * (5000 // len(cold) + 1))[:5000]
            def run_miss(cold=cold, match=match, cache=sl.cache):
                for s in cold:
                    cache.pop(s, None)
                    match(s)
            cases.append((f"match miss {kind:8} {n:>7,} subs", run_miss, len(cold), None))
    return cases


def sublist_cases(sizes=SIZES):
    cases = []
    owner = object()
    for n in sizes:
        subs = [Subscription(s, b"%d" % i, owner) for i, s in enumerate(literal_subjects(n))]

        def run_ins_rm(subs=subs):
            sl = Sublist()
            for s in subs:
                sl.insert(s)
            for s in subs:
                sl.remove(s)
        cases.append((f"insert+remove literal {n:>7,} subs", run_ins_rm, 2 * n, None))
    # churn with a full match cache: an inbox (literal) and a wildcard sub
    for kind, pat in (("literal", b"_INBOX.abc.1"), ("wildcard", b"app.3.*.evt")):
        sl, subjects = build_sublist(10_000, wildcard=False)
        for s in subjects[:1000]:
            sl.match(s)
        sub = Subscription(pat, b"x", owner)

        def run_churn(sl=sl, sub=sub, refill=subjects[300:400]):
            sl.insert(sub)
            sl.remove(sub)
            if kind == "wildcard":  # what it dropped comes back (as traffic would)
                for s in refill:
                    sl.match(s)
        cases.append((f"churn {kind} sub, 10,000 subs, cache full", run_churn, 2, None))
    return cases


# -- the PUB -> MSG path ----------------------------------------------------

class _CountingTransport:
    """Takes what a connection writes, and counts it."""

    disconnecting = False

    def __init__(self):
        self.written = 0

    def write(self, data):
        self.written += len(data)

    def writeSequence(self, seq):
        for data in seq:
            self.written += len(data)

    def registerProducer(self, producer, streaming):
        pass

    def unregisterProducer(self):
        pass

    def getPeer(self):
        return None

    def loseConnection(self):
        pass

    def abortConnection(self):
        pass


def path_cases(n_msgs: int = 20_000):
    from twisted.internet.task import Clock

    from natsbroker.auth.users import Authenticator
    from natsbroker.broker import Broker
    from natsbroker.config.model import ServerConfig
    from natsbroker.connection.client import ClientProtocol
    from natsbroker.discovery import plugins_for

    def connection(broker, auth):
        c = ClientProtocol(broker, auth)
        t = _CountingTransport()
        c.makeConnection(t)
        c.dataReceived(b'CONNECT {"verbose":false,"pedantic":false}\r\n')
        return c, t

    same = b"PUB bench.x %d\r\n%s\r\n" % (len(PAYLOAD), PAYLOAD) * n_msgs
    replies = b"".join(b"PUB bench.x _INBOX.Xk3j9aQz.%d %d\r\n%s\r\n" % (i, len(PAYLOAD), PAYLOAD)
                       for i in range(n_msgs))
    cases = []
    for name, nsubs in (("pub", 0), ("pubsub", 1), ("fanout(4)", 4)):
        for kind, data in (("same line", same), ("reply per msg", replies)):
            cfg = ServerConfig()
            broker = Broker(cfg, Clock())
            for p in plugins_for(cfg):
                broker.add_plugin(p)
                p.start(broker)
            auth = Authenticator(cfg)
            pub, _ = connection(broker, auth)
            sinks = []
            for i in range(nsubs):
                c, t = connection(broker, auth)
                c.dataReceived(b"SUB bench.x %d\r\n" % (i + 1))
                sinks.append(t)
            chunks = chunk(data, 65536)

            def run(pub=pub, chunks=chunks, sinks=sinks, nsubs=nsubs):
                before = [t.written for t in sinks]
                received = pub.dataReceived
                for c in chunks:
                    received(c)
                got = [t.written - b for t, b in zip(sinks, before)]
                if any(g < n_msgs * len(PAYLOAD) for g in got):
                    raise AssertionError(f"subscribers got {got} bytes")
            cases.append((f"path {name:9} {kind}", run, n_msgs, None))
    return cases


GROUPS = {"parser": parser_cases, "match": match_cases, "sublist": sublist_cases,
          "path": path_cases}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=",".join(GROUPS),
                    help="comma-separated groups: parser, match, sublist, path (default: all)")
    ap.add_argument("--time", type=float, default=0.3, help="seconds per repeat (0.3)")
    ap.add_argument("--repeat", type=int, default=5, help="repeats per case; median (5)")
    ap.add_argument("--sizes", default=",".join(str(s) for s in SIZES),
                    help="subscription counts for match/sublist (1000,10000,100000)")
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                    help="cpu: this process's CPU time (default; less disturbed by "
                         "other load on a shared machine), wall: perf_counter")
    ap.add_argument("--json", action="store_true", help="JSON results on stdout")
    a = ap.parse_args(argv)
    sizes = tuple(int(x) for x in a.sizes.split(","))

    info = {
        "python": sys.version.split()[0],
        "parser": f"{parser_mod.__file__} ({_build_kind(parser_mod)})",
        "subjects": f"{subjects_mod.__file__} ({_build_kind(subjects_mod)})",
        "clock": a.clock,
        "loadavg": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
    }
    log = sys.stderr if a.json else sys.stdout
    for k, v in info.items():
        print(f"# {k}: {v}", file=log)
    results = []
    for g in a.only.split(","):
        fn = GROUPS[g.strip()]
        cases = fn() if g.strip() in ("parser", "path") else fn(sizes)
        for name, run, nops, nbytes in cases:
            rate = measure(run, nops, a.time, a.repeat,
                           time.process_time if a.clock == "cpu" else time.perf_counter)
            r = {"case": name, "ops_per_s": rate}
            extra = ""
            if nbytes:
                r["mb_per_s"] = rate * nbytes / nops / 1e6
                extra = f"  ({r['mb_per_s']:,.0f} MB/s)"
            results.append(r)
            print(f"{name:44} {rate:>14,.0f} ops/s{extra}", file=log, flush=True)
    info["loadavg_end"] = round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None
    print(f"# loadavg (1 min) start {info['loadavg']:.2f}, end {info['loadavg_end']:.2f}",
          file=log)
    if a.json:
        json.dump({"info": info, "results": results}, sys.stdout, indent=1)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
