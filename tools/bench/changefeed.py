"""What the change feed costs JetStream publishing: natsbroker with and
without a ``changefeed { }`` block, same scenario, alternating runs.

``python -m tools.bench.changefeed [--scenarios js-window-file,js-window-memory]
[--js-msgs N] [--repeat K] [--feed-cmd NAME=CMD ...] [--json]``

Both servers are natsbroker started from a config file that differs only in
the feed block; every run gets a fresh store (and feed directory), the warm-up
runs on the same process first, as in ``python -m tools.bench``.  The report
gives each side's median acked msgs/s with its spread (min-max), the server's
CPU time per message (all threads, and the reactor's main thread alone,
with the part spent in the kernel: the feed's writer thread works beside
it), and the overhead ``1 - feed / plain`` of the medians.
``--feed-cmd`` (repeatable) runs several feed servers, e.g. two source
trees, against the one plain server, all interleaved in each repeat: on a
shared machine, a comparison of separate sessions measures the load as much
as the feed. Servers run with this repository as their working directory,
and ``python -m natsbroker`` puts that first on ``sys.path``: a
``PYTHONPATH`` pointing at another tree is silently ignored. Run another tree
from its own directory, e.g. ``--feed-cmd "old=sh -c 'cd /path/to/tree &&
exec python -m natsbroker \"$@\"' sh"``.
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


def _reactor_cpu(srv: Server) -> tuple[float, float] | None:
    """CPU seconds (user, system) of the server's main thread (the
    reactor's): the feed's writer thread may take CPU the reactor does not
    wait for."""
    try:
        with open(f"/proc/{srv.proc.pid}/task/{srv.proc.pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    tck = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tck, int(fields[12]) / tck


def _figures(summary: dict, role: str, feeds: tuple) -> dict:
    """Where a feed side's overhead figures are: with one feed side, at the
    top level of the scenario's summary, as before ``--feed-cmd``."""
    return summary if feeds == ("feed",) else summary[role]


def run_one(srv: Server, sc, n: int, n_warm: int, args) -> dict:
    feed = srv.role.startswith("feed")
    srv.restart(server_args=_server_args(feed))
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
        m["reactor_cpu_us_per_msg"] = (sum(rcpu1) - sum(rcpu0)) * 1e6 / n
        m["reactor_sys_us_per_msg"] = (rcpu1[1] - rcpu0[1]) * 1e6 / n
    if feed:
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
    p.add_argument("--feed-cmd", action="append", default=[], metavar="NAME=CMD",
                   help="a feed server of its own command, run as side feed-NAME "
                   "(repeatable; default: one side, feed, of --cmd)")
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--idle-timeout", type=float, default=20.0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    out = sys.stderr if args.json else sys.stdout
    cmd = args.cmd or default_candidate_cmd()
    cmds = {"plain": cmd}
    for spec in args.feed_cmd:
        fname, sep, fcmd = spec.partition("=")
        if not sep or not fname or not fcmd:
            p.error("--feed-cmd takes NAME=CMD")
        cmds["feed-" + fname] = fcmd
    if len(cmds) == 1:
        cmds["feed"] = cmd
    roles = tuple(cmds)
    feeds = roles[1:]
    servers = {role: Server(role, "natsbroker" + ("" if role == "plain" else "+" + role),
                            cmds[role], store_parent=args.store_dir) for role in roles}
    width = max(len(r) for r in roles)
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
            runs = {role: [] for role in roles}
            for i in range(args.repeat):
                # Rotated: no side always runs first, or always after another.
                order = roles[i % len(roles):] + roles[:i % len(roles)]
                for role in order:
                    try:
                        m = run_one(servers[role], sc, n, n_warm, args)
                    except BenchError as e:
                        failed = True
                        print(f"  {name} {role} run {i + 1}: FAILED {e}", file=out)
                        servers[role].stop()
                        continue
                    runs[role].append(m)
                    print(f"  {name} {role:{width}} run {i + 1}: {m[sc.primary]:10,.0f} "
                          f"{sc.primary}  cpu {m.get('cpu_us_per_msg', 0):.2f} µs/msg (reactor "
                          f"{m.get('reactor_cpu_us_per_msg', 0):.2f}, of it sys "
                          f"{m.get('reactor_sys_us_per_msg', 0):.2f})", file=out, flush=True)
            results[name] = summary = {"msgs": n, "metric": sc.primary}
            for role in roles:
                rates = [m[sc.primary] for m in runs[role]]
                summary[role] = {"runs": rates, "median": statistics.median(rates) if rates else None}
                for key in ("cpu_us_per_msg", "reactor_cpu_us_per_msg", "reactor_sys_us_per_msg"):
                    vals = [m[key] for m in runs[role] if m.get(key) is not None]
                    summary[role][key] = statistics.median(vals) if vals else None
            plain = summary["plain"]["median"]
            for role in feeds:
                into = _figures(summary, role, feeds)
                feed = summary[role]["median"]
                into["overhead"] = 1 - feed / plain if plain and feed else None
                for key in ("cpu_us_per_msg", "reactor_cpu_us_per_msg"):
                    pc, fc = summary["plain"][key], summary[role][key]
                    into[key.replace("us_per_msg", "overhead")] = fc / pc - 1 if pc and fc else None
    finally:
        for srv in servers.values():
            srv.close(keep_log=failed)
    print(f"\n{'scenario':18} {'side':{width}} {'median':>10} {'min-max':>21} {'cpu µs/msg':>10} "
          f"{'reactor':>8} {'(sys)':>6}", file=out)
    for name, s in results.items():
        for role in roles:
            r = s[role]
            if not r["runs"]:
                continue
            spread = f"{min(r['runs']):,.0f}-{max(r['runs']):,.0f}"
            print(f"{name:18} {role:{width}} {r['median']:10,.0f} {spread:>21} "
                  f"{r['cpu_us_per_msg'] or 0:10.2f} {r['reactor_cpu_us_per_msg'] or 0:8.2f} "
                  f"{r['reactor_sys_us_per_msg'] or 0:6.2f}",
                  file=out)
        for role in feeds:
            o = _figures(s, role, feeds)
            if o.get("overhead") is not None:
                print(f"{name:18} overhead of the {role}: {o['overhead']:.1%} of the publish "
                      f"rate, {o['cpu_overhead'] or 0:+.1%} server CPU, "
                      f"{o['reactor_cpu_overhead'] or 0:+.1%} reactor CPU per message", file=out)
    print(f"load average now {os.getloadavg()[0]:.2f}", file=out)
    if args.json:
        json.dump(results, sys.stdout, indent=2)
        print()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
