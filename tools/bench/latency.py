"""Latency under a steady load: publish -> deliver and request -> reply,
p50 / p99 / p99.9 from HdrHistograms (the ``hdrhistogram`` package), both
servers, the same offered load on both.

For each server: the maximum pub -> 1 sub rate is measured first (the
``pubsub`` scenario); the steady load is half of the *lower* of the two
servers' maxima, so both serve the same load (half of nats-server's own
maximum is more than a Python load generator can time message by message).
Then, for ``duration`` seconds, all at once in separate processes:

* a paced publisher: every millisecond the messages due so far, each
  carrying its send time (``time.monotonic_ns``, comparable across
  processes) in the first 8 payload bytes;
* a subscriber that records receive time - send time of every message
  (the first second is left out as warm-up);
* a requester doing one request at a time (``PUB req <inbox>``, wait for the
  reply) and a responder echoing it: the round trip time of each.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import signal
import struct
import sys
import time
from pathlib import Path

import numpy as np
from hdrh.histogram import HdrHistogram

from .curves import NAMES, ROLES, Pair, machine, rss_bytes, server_cmds
from .loadgen import PING, PONG, BenchError, Conn, msg_frame, pub_frame
from .scenarios import SCENARIOS, run_scenario

SIZE = 128
PERCENTILES = (50.0, 90.0, 99.0, 99.9)
MAX_US = 60_000_000   # highest trackable latency: 60 s, in µs
TICK = 0.001
WARMUP_S = 1.0


def _hist() -> HdrHistogram:
    return HdrHistogram(1, MAX_US, 3)


def _summary(h: HdrHistogram) -> dict:
    d = {f"p{p:g}": h.get_value_at_percentile(p) for p in PERCENTILES}
    d.update(count=h.get_total_count(), max=h.get_max_value(), min=h.get_min_value(),
             mean=round(h.get_mean_value(), 1))
    return d


def _payload(stamp_ns: int) -> bytes:
    return struct.pack("<q", stamp_ns) + b"x" * (SIZE - 8)


def w_paced_publisher(port, subject, rate, count, q):
    try:
        conn = Conn(port, time.monotonic() + 600, idle=30)
        conn.handshake()
        head = f"PUB {subject} {SIZE}\r\n".encode()
        q.put(("ready", "pub", None))
        t0 = time.monotonic()
        sent = 0
        while sent < count:
            due = min(count, int(rate * (time.monotonic() - t0)) + 1) - sent
            if due > 0:
                frame = head + _payload(time.monotonic_ns()) + b"\r\n"
                conn.sendall(frame * due, "publishing")
                sent += due
            time.sleep(TICK)
        conn.sendall(PING, "final PING")
        conn.expect_pong("final PONG")
        q.put(("done", "pub", {"sent": sent, "seconds": time.monotonic() - t0}))
        conn.close()
    except BaseException as e:  # noqa: BLE001 - reported to the coordinator
        q.put(("error", "pub", f"publisher: {e}"))


def w_recording_subscriber(port, subject, count, q):
    """Record receive time - send time of every message (µs).  Frames have
    one fixed length; numpy reads the stamps of all whole frames in a read
    at once (a server PING in between is answered and skipped)."""
    try:
        conn = Conn(port, time.monotonic() + 600, idle=30)
        conn.handshake()
        conn.subscribe(subject, "1")
        flen = len(msg_frame(subject, "1", b"x" * SIZE))
        off = flen - SIZE - 2
        h = _hist()
        buf = bytearray()
        got = 0
        t_skip = time.monotonic_ns() + int(WARMUP_S * 1e9)
        q.put(("ready", "sub", None))
        while got < count:
            data = conn.recv_some(f"receiving ({got}/{count})")
            now = time.monotonic_ns()
            buf += data
            pos = 0
            while True:
                n = (len(buf) - pos) // flen
                if n == 0:
                    break
                frames = np.frombuffer(bytes(buf[pos:pos + n * flen]), np.uint8).reshape(n, flen)
                bad = np.flatnonzero(frames[:, 0] != ord("M"))
                if bad.size:
                    n = int(bad[0])
                    frames = frames[:n]
                stamps = frames[:, off:off + 8].copy().view("<i8").ravel()
                lat = (now - stamps[stamps >= t_skip]) // 1000
                vals, cnts = np.unique(np.clip(lat, 1, MAX_US), return_counts=True)
                for v, c in zip(vals.tolist(), cnts.tolist()):
                    h.record_value(v, c)
                got += n
                pos += n * flen
                if bad.size:
                    if len(buf) - pos < 6:
                        break
                    if bytes(buf[pos:pos + 6]) != b"PING\r\n":
                        raise BenchError(f"unexpected data: {bytes(buf[pos:pos + 60])!r}")
                    conn.sendall(PONG, "PONG")
                    pos += 6
            del buf[:pos]
        q.put(("done", "sub", {"hist": h.encode().decode(), **_summary(h)}))
        conn.close()
    except BaseException as e:  # noqa: BLE001
        q.put(("error", "sub", f"subscriber: {e}"))


def w_responder(port, subject, q, stop):
    try:
        conn = Conn(port, time.monotonic() + 600, abort=stop)
        conn.handshake()
        conn.subscribe(subject, "1")
        q.put(("ready", "rsp", None))
        while not stop.is_set():
            try:
                line = conn.readline("waiting for a request")
            except BenchError:
                if stop.is_set():
                    break
                raise
            if line == b"PING":
                conn.sendall(PONG, "PONG")
                continue
            parts = line.split()
            if parts[0] != b"MSG" or len(parts) != 5:
                raise BenchError(f"unexpected line {line[:100]!r}")
            body = conn.read_exact(int(parts[4]) + 2, "request body")
            conn.sendall(pub_frame(parts[3].decode(), body[:-2]), "reply")
        q.put(("done", "rsp", {}))
        conn.close()
    except BaseException as e:  # noqa: BLE001
        q.put(("error", "rsp", f"responder: {e}"))


def w_requester(port, subject, duration, q):
    try:
        conn = Conn(port, time.monotonic() + 600, idle=30)
        conn.handshake()
        inbox = "_INBOX.lat.r"
        conn.subscribe(inbox, "1")
        body = b"r" * SIZE
        frame = pub_frame(subject, body, reply=inbox)
        want = msg_frame(inbox, "1", body)
        h = _hist()
        q.put(("ready", "req", None))
        t_skip = time.monotonic() + WARMUP_S
        t_end = time.monotonic() + duration
        while True:
            t0 = time.monotonic_ns()
            conn.sendall(frame, "request")
            got = conn.read_exact(len(want), "reply")
            t1 = time.monotonic_ns()
            while got.startswith(b"PING\r\n"):
                conn.sendall(PONG, "PONG")
                got = got[6:] + conn.read_exact(6, "reply")
            if got != want:
                raise BenchError(f"unexpected reply {got[:100]!r}")
            now = time.monotonic()
            if now >= t_skip:
                h.record_value(min(MAX_US, max(1, (t1 - t0) // 1000)))
            if now >= t_end:
                break
        q.put(("done", "req", {"hist": h.encode().decode(), **_summary(h)}))
        conn.close()
    except BaseException as e:  # noqa: BLE001
        q.put(("error", "req", f"requester: {e}"))


def measure(port: int, rate: float, duration: float) -> dict:
    """One steady-load run against the server on ``port``."""
    ctx = mp.get_context("fork")
    q, stop = ctx.Queue(), ctx.Event()
    count = int(rate * duration)
    procs = [ctx.Process(target=w_recording_subscriber, args=(port, "lat.load", count, q)),
             ctx.Process(target=w_responder, args=(port, "lat.req", q, stop)),
             ctx.Process(target=w_requester, args=(port, "lat.req", duration, q))]
    pub = ctx.Process(target=w_paced_publisher, args=(port, "lat.load", rate, count, q))
    out: dict = {}
    try:
        for p in procs:
            p.daemon = True
            p.start()
        ready = set()
        deadline = time.monotonic() + 60 + 3 * duration
        while len(ready) < 3:
            what, who, payload = q.get(timeout=max(1, deadline - time.monotonic()))
            if what == "error":
                raise BenchError(payload)
            ready.add(who)
        pub.daemon = True
        pub.start()
        while not {"pub", "sub", "req"} <= out.keys():
            what, who, payload = q.get(timeout=max(1, deadline - time.monotonic()))
            if what == "error":
                raise BenchError(payload)
            if what == "done":
                out[who] = payload
    finally:
        stop.set()
        for p in procs + [pub]:
            if p.pid is not None:
                p.join(timeout=2)
                if p.is_alive():
                    p.terminate()
                    p.join(timeout=2)
    return {"offered msgs/s": rate, "published": out["pub"]["sent"],
            "publish_s": round(out["pub"]["seconds"], 3),
            "publish->deliver µs": out["sub"], "request->reply µs": out["req"]}


def max_rate(port: int, msgs: int) -> float:
    m = run_scenario(SCENARIOS["pubsub"], port, msgs, SIZE, 1, "process", 300, 30)
    return m["delivered msgs/s"]


def run_latency(out: Path | None = None, duration: float = 10.0, max_msgs: int = 500_000,
                cmds=None, progress=print, rate: float | None = None) -> dict:
    pair = Pair(cmds or server_cmds())
    res = {"machine_start": machine(), "duration_s": duration, "size": SIZE, "servers": {}}
    maxima = {}
    for role in ROLES:
        srv = pair.start(role)
        try:
            maxima[role] = max_rate(srv.port, max_msgs)
        finally:
            srv.close()
        progress(f"[latency] {NAMES[role]} max pub->sub {maxima[role]:,.0f} msgs/s")
    load = rate if rate is not None else 0.5 * min(maxima.values())
    for role in ROLES:
        srv = pair.start(role)
        try:
            r = measure(srv.port, load, duration)
            r["max msgs/s"] = maxima[role]
            r["rss"] = rss_bytes(srv.proc.pid)
        except BenchError as e:
            res["servers"][NAMES[role]] = {"error": str(e).splitlines()[0],
                                           "max msgs/s": maxima[role]}
            progress(f"[latency] {NAMES[role]} FAILED: {e}")
            continue
        finally:
            srv.close()
        res["servers"][NAMES[role]] = r
        pd, rr = r["publish->deliver µs"], r["request->reply µs"]
        progress(f"[latency] {NAMES[role]} at {load:,.0f} msgs/s: pub->deliver p50/p99/p99.9 "
                 f"{pd['p50']}/{pd['p99']}/{pd['p99.9']} µs; req->reply "
                 f"{rr['p50']}/{rr['p99']}/{rr['p99.9']} µs ({rr['count']:,} requests)")
    res["offered msgs/s"] = load
    res["versions"] = {NAMES[r]: v for r, v in pair.versions.items()}
    res["machine_end"] = machine()
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "latency.json").write_text(json.dumps(res, indent=1))
    failed = [n for n, r in res["servers"].items() if "error" in r]
    if failed:
        raise BenchError(f"latency run failed on {', '.join(failed)}")
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.bench.latency", description=__doc__)
    p.add_argument("--out", default=str(Path(__file__).parent / "report"))
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--rate", type=float, help="offered msgs/s (default: half the lower maximum)")
    a = p.parse_args(argv)
    # SIGTERM unwinds like Ctrl-C, so the servers are stopped on the way out.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        run_latency(Path(a.out), a.duration, rate=a.rate,
                    progress=lambda s: print(s, file=sys.stderr, flush=True))
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
