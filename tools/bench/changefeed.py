"""What the change feed costs JetStream publishing: natsbroker with and
without a ``changefeed { }`` block, same scenario, alternating runs.

``python -m tools.bench.changefeed [--scenarios js-window-file,js-window-memory]
[--js-msgs N] [--repeat K] [--json]``

Both servers are natsbroker started from a config file that differs only in
the feed block; every run gets a fresh store (and feed directory), the warm-up
runs on the same process first, as in ``python -m tools.bench``.  The report
gives each side's median acked msgs/s with its spread (min-max), the server's
CPU time per message (all threads, and the reactor's main thread alone: the
feed's writer thread works beside it), and the overhead ``1 - feed / plain``
of the medians.
The feed is checked after every run: its completed and open files must hold
a put record for every acknowledged message (a feed that silently dropped
records would look fast).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
from pathlib import Path

from .loadgen import BenchError
from .scenarios import SCENARIOS, run_scenario
from .servers import Server, default_candidate_cmd, fs_type

ROLES = ("plain", "feed")


def _server_args(feed: bool):
    def build(role, tmp: Path):
        text = "jetstream {\n  store_dir: %s\n}\n" % json.dumps(str(tmp / "store"))
        if feed:
            text += "changefeed {\n  dir: %s\n}\n" % json.dumps(str(tmp / "feed"))
        conf = tmp / "server.conf"
        return ["-c", str(conf)], {conf.name: text}
    return build


def _feed_puts(tmp: str) -> int:
    """Put records of stream BENCH in the feed files (completed or not)."""
    n = 0
    for name in glob.glob(os.path.join(tmp, "feed", "feed-*")):
        with open(name, "rb") as f:
            for line in f:
                if b'"stream":"BENCH"' in line and b'"op":"put"' in line:
                    n += 1
    return n


def _reactor_cpu(srv: Server) -> float | None:
    """CPU seconds of the server's main thread (the reactor's): the feed's
    writer thread may take CPU the reactor does not wait for."""
    try:
        with open(f"/proc/{srv.proc.pid}/task/{srv.proc.pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_one(srv: Server, sc, n: int, n_warm: int, args) -> dict:
    srv.restart(server_args=_server_args(srv.role == "feed"))
    opts = {"window": args.js_window}
    if n_warm:
        run_scenario(sc, srv.client_port(), n_warm, args.size, 0, "process", args.timeout,
                     args.idle_timeout, dict(opts, warmup=True))
    cpu0, rcpu0 = srv.cpu_seconds(), _reactor_cpu(srv)
    m = run_scenario(sc, srv.client_port(), n, args.size, 0, "process", args.timeout,
                     args.idle_timeout, opts)
    cpu1, rcpu1 = srv.cpu_seconds(), _reactor_cpu(srv)
    if cpu0 is not None and cpu1 is not None:
        m["cpu_us_per_msg"] = (cpu1 - cpu0) * 1e6 / n
    if rcpu0 is not None and rcpu1 is not None:
        m["reactor_cpu_us_per_msg"] = (rcpu1 - rcpu0) * 1e6 / n
    if srv.role == "feed":
        # The open file is flushed when the server stops.
        tmp = srv.tmpdir
        srv.proc.terminate()
        srv.proc.wait(10)
        got = _feed_puts(tmp)
        if got != n:
            raise BenchError(f"the feed holds {got} put records of BENCH, expected {n}")
    srv.stop()
    return m


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.bench.changefeed", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenarios", default="js-window-file,js-window-memory")
    p.add_argument("--js-msgs", type=int, default=None,
                   help="messages per measured run (default: the scenario's)")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--warmup", type=float, default=0.1)
    p.add_argument("--js-window", type=int, default=1000)
    p.add_argument("--size", type=int, default=128)
    p.add_argument("--store-dir", default=None)
    p.add_argument("--cmd", default=None, help="natsbroker command (default: this python "
                   "-m natsbroker)")
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--idle-timeout", type=float, default=20.0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    out = sys.stderr if args.json else sys.stdout
    cmd = args.cmd or default_candidate_cmd()
    servers = {role: Server(role, "natsbroker" + ("+feed" if role == "feed" else ""), cmd,
                            store_parent=args.store_dir) for role in ROLES}
    parent = args.store_dir or os.environ.get("TMPDIR") or "/tmp"
    print(f"natsbroker with and without the change feed; stores under {parent} "
          f"({fs_type(parent)}), load {os.getloadavg()[0]:.2f}", file=out)
    results = {}
    failed = False
    try:
        for name in args.scenarios.split(","):
            sc = SCENARIOS[name]
            n = args.js_msgs or sc.default_msgs
            n_warm = int(n * args.warmup)
            runs = {role: [] for role in ROLES}
            for i in range(args.repeat):
                order = ROLES if i % 2 == 0 else ROLES[::-1]
                for role in order:
                    try:
                        m = run_one(servers[role], sc, n, n_warm, args)
                    except BenchError as e:
                        failed = True
                        print(f"  {name} {role} run {i + 1}: FAILED {e}", file=out)
                        servers[role].stop()
                        continue
                    runs[role].append(m)
                    print(f"  {name} {role:5} run {i + 1}: {m[sc.primary]:10,.0f} {sc.primary}"
                          f"  cpu {m.get('cpu_us_per_msg', 0):.2f} µs/msg (reactor "
                          f"{m.get('reactor_cpu_us_per_msg', 0):.2f})", file=out, flush=True)
            results[name] = summary = {"msgs": n, "metric": sc.primary}
            for role in ROLES:
                rates = [m[sc.primary] for m in runs[role]]
                summary[role] = {"runs": rates, "median": statistics.median(rates) if rates else None}
                for key in ("cpu_us_per_msg", "reactor_cpu_us_per_msg"):
                    vals = [m[key] for m in runs[role] if m.get(key) is not None]
                    summary[role][key] = statistics.median(vals) if vals else None
            plain, feed = summary["plain"]["median"], summary["feed"]["median"]
            summary["overhead"] = 1 - feed / plain if plain and feed else None
            for key in ("cpu_us_per_msg", "reactor_cpu_us_per_msg"):
                pc, fc = summary["plain"][key], summary["feed"][key]
                summary[key.replace("us_per_msg", "overhead")] = fc / pc - 1 if pc and fc else None
    finally:
        for srv in servers.values():
            srv.close(keep_log=failed)
    print(f"\n{'scenario':18} {'side':6} {'median':>10} {'min-max':>21} {'cpu µs/msg':>10} "
          f"{'reactor':>8}", file=out)
    for name, s in results.items():
        for role in ROLES:
            r = s[role]
            if not r["runs"]:
                continue
            spread = f"{min(r['runs']):,.0f}-{max(r['runs']):,.0f}"
            print(f"{name:18} {role:6} {r['median']:10,.0f} {spread:>21} "
                  f"{r['cpu_us_per_msg'] or 0:10.2f} {r['reactor_cpu_us_per_msg'] or 0:8.2f}",
                  file=out)
        if s["overhead"] is not None:
            print(f"{name:18} overhead of the feed: {s['overhead']:.1%} of the publish rate, "
                  f"{s['cpu_overhead'] or 0:+.1%} server CPU, "
                  f"{s['reactor_cpu_overhead'] or 0:+.1%} reactor CPU per message", file=out)
    print(f"load average now {os.getloadavg()[0]:.2f}", file=out)
    if args.json:
        json.dump(results, sys.stdout, indent=2)
        print()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
