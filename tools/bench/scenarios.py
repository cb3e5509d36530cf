"""Benchmark scenarios: which workers to run and how to turn their
timestamps into rates."""

from __future__ import annotations

import itertools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .loadgen import run_workers

_run_ids = itertools.count(1)


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    default_msgs: int
    # (count, size, fanout_subs, run_tag, opts) -> list of (worker kind, params)
    specs: Callable[[int, int, int, str, dict], list]
    # (count, fanout_subs, worker results) -> {metric: value}
    metrics: Callable[[int, int, list], dict]
    primary: str  # metric name shown first
    # JetStream scenarios: (role, fresh temp dir) -> (extra server args,
    # {file name in that dir: text}).  Such a scenario restarts the server
    # with a fresh store before every run.  None: core NATS, server without
    # extra args.
    server_args: Callable[[str, Path], tuple] | None = None
    # Unmeasured set-up run right before every run (warm-up and measured),
    # same signature as specs (js-pull/js-push: fill the stream).  The
    # server CPU time of a measured run does not include it.
    prepare: Callable[[int, int, int, str, dict], list] | None = None
    # Unmeasured check right after every run (warm-up and measured), same
    # signature (kv-put / obj-put: read everything back).  Runs after the
    # server CPU time of a measured run has been taken.
    verify: Callable[[int, int, int, str, dict], list] | None = None
    # What one unit of the count is (CPU table: server µs per unit).
    unit: str = "msg"
    # Core scenarios: how the clients connect, "tcp", "tls" or "ws" (see
    # transports.py; both servers are restarted with that transport's config
    # when the previous scenario used another one), or "perms": plain TCP,
    # both servers configured with a user with permissions (PERMS_CONF).
    transport: str = "tcp"

    @property
    def jetstream(self) -> bool:
        return self.server_args is not None


def _rate(n, t0, t1):
    return n / max(t1 - t0, 1e-9)


def _pub_specs(n, size, subs, tag, opts=None):
    return [("publisher", {"subject": f"bench.pub.{tag}", "size": size, "count": n})]


def _pub_metrics(n, subs, res):
    pub = res[-1]
    return {"published msgs/s": _rate(n, pub["t0"], pub["t1"]),
            "seconds": pub["t1"] - pub["t0"]}


def _sub_specs(k):
    def specs(n, size, subs, tag, opts=None):
        k_ = subs if k is None else k
        subject = f"bench.sub.{tag}"
        return ([("subscriber", {"subject": subject, "sid": str(i + 1), "size": size, "count": n})
                 for i in range(k_)]
                + [("publisher", {"subject": subject, "size": size, "count": n})])
    return specs


def _wildcard_sub_specs(n, size, subs, tag, opts=None):
    """pub -> 1 sub on a wildcard subject (``bench.sub.<tag>.*``)."""
    subject = f"bench.sub.{tag}.x"
    return [("subscriber", {"subject": f"bench.sub.{tag}.*", "msg_subject": subject, "sid": "1",
                            "size": size, "count": n}),
            ("publisher", {"subject": subject, "size": size, "count": n})]


def _sub_metrics(k):
    def metrics(n, subs, res):
        k_ = subs if k is None else k
        pub, sub_res = res[-1], res[:-1]
        t_end = max(r["t_end"] for r in sub_res)
        # delivered: until the last subscriber has its last byte;
        # published: the publisher's own rate (until the server PONGed it).
        return {"delivered msgs/s": _rate(k_ * n, pub["t0"], t_end),
                "published msgs/s": _rate(n, pub["t0"], pub["t1"]),
                "seconds": max(pub["t1"], t_end) - pub["t0"]}
    return metrics


def _rr_specs(n, size, subs, tag, opts=None):
    subject, inbox = f"bench.req.{tag}", f"_INBOX.bench.{tag}"
    p = {"subject": subject, "inbox": inbox, "size": size, "count": n}
    return [("responder", p), ("requester", p)]


def _rr_metrics(n, subs, res):
    req = res[-1]
    return {"round trips/s": _rate(n, req["t0"], req["t1"]),
            "seconds": req["t1"] - req["t0"]}


# -- JetStream -------------------------------------------------------------

JS_STREAM = "BENCH"
JS_WARMUP_STREAM = "WARMUP"  # warm-up runs use their own stream, deleted afterwards
JS_WINDOW = 1000             # publishes without PubAck in flight (--js-window)
# Default messages per run: ~3-4 s each on nats-server 2.15 (2-core VM, ext4).
JS_DEFAULT_MSGS = {"window": 250_000, "memory": 300_000, "sync": 20_000,
                   "pull": 100_000, "push": 100_000}
JS_BATCH = 100               # messages per pull request in js-pull-* (--js-batch)
JS_MAX_ACK_PENDING = 1000    # consumers' max_ack_pending (--js-max-ack-pending)


def _js_specs(storage, sync):
    def specs(n, size, subs, tag, opts=None):
        opts = opts or {}
        warm = opts.get("warmup", False)
        return [("js_publisher", {
            "stream": JS_WARMUP_STREAM if warm else JS_STREAM,
            "subjects": "warmup.>" if warm else "bench.>",
            "subject": "warmup.js" if warm else "bench.js",
            "storage": storage,
            "delete": warm,
            "inbox": f"_INBOX.bench.{tag}",
            "size": size, "count": n,
            "window": 1 if sync else opts.get("window", JS_WINDOW),
        })]
    return specs


def _js_metrics(metric):
    def metrics(n, subs, res):
        pub = res[-1]
        # client_cpu_s: the load generator's CPU time for the whole run
        # (JSON only) -- to check that it is not the bottleneck.
        return {metric: _rate(n, pub["t0"], pub["t1"]), "seconds": pub["t1"] - pub["t0"],
                "client_cpu_s": pub.get("cpu")}
    return metrics


def _js_fill_specs(storage):
    """Set-up of the consumer scenarios: the stream filled by one publisher
    (as in js-window-*, same checks), not deleted."""
    def specs(n, size, subs, tag, opts=None):
        spec = _js_specs(storage, False)(n, size, subs, tag, opts)
        spec[0][1]["delete"] = False  # the warm-up's consumer run deletes it
        return spec
    return specs


def _js_consumer_specs(pull):
    def specs(n, size, subs, tag, opts=None):
        opts = opts or {}
        warm = opts.get("warmup", False)
        return [("js_consumer", {
            "stream": JS_WARMUP_STREAM if warm else JS_STREAM,
            "consumer": "PULL" if pull else "PUSH",
            "subject": "warmup.js" if warm else "bench.js",
            "delete": warm,
            "inbox": f"_INBOX.bench.{tag}",
            "size": size, "count": n,
            "batch": opts.get("batch", JS_BATCH) if pull else 0,
            "max_ack_pending": opts.get("max_ack_pending", JS_MAX_ACK_PENDING),
        })]
    return specs


def _js_consumer_metrics(n, subs, res):
    c = res[-1]
    # consumed: until CONSUMER.INFO confirms that every ack was applied;
    # delivered: until the last message arrived (its ack not yet sent).
    return {"consumed msgs/s": _rate(n, c["t0"], c["t1"]),
            "delivered msgs/s": _rate(n, c["t0"], c["t_delivered"]),
            "seconds": c["t1"] - c["t0"],
            "client_cpu_s": c.get("cpu"), "pull_timeouts": c.get("pull_timeouts")}


def _js_args(role, tmp: Path):
    """Both servers: JetStream on, store in the fresh dir."""
    return ["-js", "-sd", str(tmp / "store")], {}


def _js_args_lazy_candidate(role, tmp: Path):
    """natsbroker with a config file asking for lazy sync (every 2 minutes, as
    nats-server's default); nats-server as in the other scenarios (its
    defaults are already lazy)."""
    if role != "candidate":
        return _js_args(role, tmp)
    conf = tmp / "js.conf"
    text = ("jetstream {\n"
            f"  store_dir: {json.dumps(str(tmp / 'store'))}\n"
            '  sync_interval: "2m"\n'
            "}\n")
    return ["-c", str(conf)], {conf.name: text}


# -- Key-Value / Object Store through nats-py -----------------------------------

KV_BUCKET = "BENCH"
KV_WARMUP_BUCKET = "WARMUP"
KV_DEFAULT_OPS = 10_000  # puts / gets per run (--kv-msgs)
OBJ_DEFAULT_MIB = 64     # object size in MiB (--obj-mib)


def _natspy_spec(op, count_key, direct=None, delete_when_warm=False):
    """One nats-py worker doing ``op`` on bucket BENCH (warm-up: WARMUP,
    deleted by the step with ``delete_when_warm``)."""
    def specs(n, size, subs, tag, opts=None):
        opts = opts or {}
        warm = opts.get("warmup", False)
        p = {"op": op, "bucket": KV_WARMUP_BUCKET if warm else KV_BUCKET,
             count_key: n, "size": size, "delete": warm and delete_when_warm}
        if direct is not None:
            p["direct"] = direct
        return [("natspy", p)]
    return specs


def _natspy_metrics(metric, per_unit):
    def metrics(n, subs, res):
        r = res[-1]
        # client_cpu_s: the nats-py worker's CPU time (its asyncio thread)
        # between t0 and t1 only -- close to "seconds" means client-bound.
        m = {metric: per_unit(r) / max(r["t1"] - r["t0"], 1e-9),
             "seconds": r["t1"] - r["t0"], "client_cpu_s": r.get("client_cpu")}
        if "direct_get" in r:
            m["direct_get"] = r["direct_get"]
        return m
    return metrics


def _kv(name, title, op, metric, direct=None, lazy=False):
    if op == "put":
        return Scenario(name, title, KV_DEFAULT_OPS,
                        _natspy_spec("kv_put", "count", direct),
                        _natspy_metrics(metric, lambda r: r["ops"]), metric,
                        server_args=_js_args_lazy_candidate if lazy else _js_args,
                        verify=_natspy_spec("kv_verify", "count", delete_when_warm=True),
                        unit="put")
    return Scenario(name, title, KV_DEFAULT_OPS,
                    _natspy_spec("kv_get", "count", delete_when_warm=True),
                    _natspy_metrics(metric, lambda r: r["ops"]), metric,
                    server_args=_js_args, prepare=_natspy_spec("kv_put", "count", direct),
                    unit="get")


def _obj(name, title, op, lazy=False):
    metric = "MB/s"
    mb = lambda r: r["bytes"] / 1e6  # noqa: E731
    if op == "put":
        return Scenario(name, title, OBJ_DEFAULT_MIB, _natspy_spec("obj_put", "mib"),
                        _natspy_metrics(metric, mb), metric,
                        server_args=_js_args_lazy_candidate if lazy else _js_args,
                        verify=_natspy_spec("obj_verify", "mib", delete_when_warm=True),
                        unit="MiB")
    return Scenario(name, title, OBJ_DEFAULT_MIB,
                    _natspy_spec("obj_get", "mib", delete_when_warm=True),
                    _natspy_metrics(metric, mb), metric, server_args=_js_args,
                    prepare=_natspy_spec("obj_put", "mib"), unit="MiB")


SCENARIOS: dict[str, Scenario] = {s.name: s for s in [
    Scenario("pub", "pub only (1 publisher, no subscribers)",
             6_000_000, _pub_specs, _pub_metrics, "published msgs/s"),
    Scenario("pubsub", "pub -> 1 sub",
             2_000_000, _sub_specs(1), _sub_metrics(1), "delivered msgs/s"),
    Scenario("fanout", "pub -> N subs (fan-out)",
             800_000, _sub_specs(None), _sub_metrics(None), "delivered msgs/s"),
    # With permissions (transports.PERMS_CONF): compare with pubsub / pubsub-wild.
    Scenario("pubsub-perms", "pub -> 1 sub, clients with publish/subscribe permissions",
             2_000_000, _sub_specs(1), _sub_metrics(1), "delivered msgs/s", transport="perms"),
    Scenario("pubsub-wild", "pub -> 1 sub on a wildcard subject (bench.sub.<tag>.*)",
             2_000_000, _wildcard_sub_specs, _sub_metrics(1), "delivered msgs/s"),
    Scenario("pubsub-perms-wild", "pubsub-wild, clients with permissions (subscribe deny "
             "entries: every delivery to the wildcard subscription is checked)",
             2_000_000, _wildcard_sub_specs, _sub_metrics(1), "delivered msgs/s",
             transport="perms"),
    Scenario("reqrep", "request-reply (1 requester, 1 at a time; 1 responder)",
             15_000, _rr_specs, _rr_metrics, "round trips/s"),
    # The same over TLS and WebSocket: compare each with pubsub / reqrep.
    Scenario("pubsub-tls", "pub -> 1 sub, over TLS",
             1_000_000, _sub_specs(1), _sub_metrics(1), "delivered msgs/s", transport="tls"),
    Scenario("pubsub-ws", "pub -> 1 sub, over WebSocket (ws://)",
             1_000_000, _sub_specs(1), _sub_metrics(1), "delivered msgs/s", transport="ws"),
    Scenario("reqrep-tls", "request-reply over TLS",
             15_000, _rr_specs, _rr_metrics, "round trips/s", transport="tls"),
    Scenario("reqrep-ws", "request-reply over WebSocket (ws://)",
             15_000, _rr_specs, _rr_metrics, "round trips/s", transport="ws"),
    Scenario("js-window-file", "JetStream publish, file storage, window of PubAcks in flight",
             JS_DEFAULT_MSGS["window"], _js_specs("file", False), _js_metrics("acked msgs/s"),
             "acked msgs/s", server_args=_js_args),
    Scenario("js-window-memory", "JetStream publish, memory storage, window of PubAcks in flight",
             JS_DEFAULT_MSGS["memory"], _js_specs("memory", False), _js_metrics("acked msgs/s"),
             "acked msgs/s", server_args=_js_args),
    Scenario("js-sync", "JetStream publish, file storage, one at a time (wait for each ack)",
             JS_DEFAULT_MSGS["sync"], _js_specs("file", True), _js_metrics("acks/s"),
             "acks/s", server_args=_js_args),
    Scenario("js-window-file-lazy", "js-window-file, natsbroker with sync_interval: 2m "
             "(nats-server: its default, also lazy)",
             JS_DEFAULT_MSGS["window"], _js_specs("file", False), _js_metrics("acked msgs/s"),
             "acked msgs/s", server_args=_js_args_lazy_candidate),
    Scenario("js-sync-lazy", "js-sync, natsbroker with sync_interval: 2m "
             "(nats-server: its default, also lazy)",
             JS_DEFAULT_MSGS["sync"], _js_specs("file", True), _js_metrics("acks/s"),
             "acks/s", server_args=_js_args_lazy_candidate),
    Scenario("js-pull", "JetStream pull consumer, file storage: fetch batches, ack each message",
             JS_DEFAULT_MSGS["pull"], _js_consumer_specs(True), _js_consumer_metrics,
             "consumed msgs/s", server_args=_js_args, prepare=_js_fill_specs("file")),
    Scenario("js-push", "JetStream push consumer, file storage: ack each message",
             JS_DEFAULT_MSGS["push"], _js_consumer_specs(False), _js_consumer_metrics,
             "consumed msgs/s", server_args=_js_args, prepare=_js_fill_specs("file")),
    Scenario("js-pull-memory", "js-pull, memory storage",
             JS_DEFAULT_MSGS["pull"], _js_consumer_specs(True), _js_consumer_metrics,
             "consumed msgs/s", server_args=_js_args, prepare=_js_fill_specs("memory")),
    Scenario("js-push-memory", "js-push, memory storage",
             JS_DEFAULT_MSGS["push"], _js_consumer_specs(False), _js_consumer_metrics,
             "consumed msgs/s", server_args=_js_args, prepare=_js_fill_specs("memory")),
    _kv("kv-put", "nats-py KV: create_key_value, await kv.put(key_i, value) one at a time",
        "put", "puts/s"),
    _kv("kv-put-lazy", "kv-put, natsbroker with sync_interval: 2m "
        "(nats-server: its default, also lazy)", "put", "puts/s", lazy=True),
    _kv("kv-get", "nats-py KV: await kv.get(key_i) one at a time (default bucket: "
        "STREAM.MSG.GET)", "get", "gets/s"),
    _kv("kv-get-direct", "kv-get on a bucket created with direct=True "
        "(nats-py uses DIRECT.GET)", "get", "gets/s", direct=True),
    _obj("obj-put", "nats-py Object Store: put of one object (128 KiB chunks, "
         "one PubAck at a time)", "put"),
    _obj("obj-put-lazy", "obj-put, natsbroker with sync_interval: 2m "
         "(nats-server: its default, also lazy)", "put", lazy=True),
    _obj("obj-get", "nats-py Object Store: get of that object (ordered push consumer)",
         "get"),
]}


def run_scenario(sc: Scenario, port: int, count: int, size: int, subs: int,
                 mode: str, timeout: float, idle: float | None = None,
                 opts: dict | None = None, transport: dict | None = None) -> dict:
    """One run of one scenario against the server on ``port``.
    ``opts``: scenario options (JetStream: window, warmup).  ``transport``:
    the clients' transport (``Transport.client``; None: plain TCP).
    Returns the metrics dict; raises BenchError on failure."""
    tag = f"{os.getpid()}.{next(_run_ids)}"
    specs = sc.specs(count, size, subs, tag, opts or {})
    results = run_workers(port, specs, mode, timeout, idle, transport)
    m = sc.metrics(count, subs, results)
    tls = next((r["tls"] for r in results if r.get("tls")), None)
    if tls:
        m["tls"] = tls  # negotiated version and cipher (JSON, progress line)
    if sc.server_args is None:
        # CPU time of the busiest load-generator worker (whole worker: connect,
        # TLS / WebSocket framing in Python), to compare with "seconds":
        # close to it = client-bound
        m["client_cpu_s"] = round(max(r.get("cpu") or 0 for r in results), 3)
    return m


def prepare_scenario(sc: Scenario, port: int, count: int, size: int, subs: int,
                     mode: str, timeout: float, idle: float | None = None,
                     opts: dict | None = None) -> None:
    """The scenario's unmeasured set-up run (if any) for a run with ``count``
    messages and the same ``opts``; raises BenchError on failure."""
    if sc.prepare is None:
        return
    tag = f"{os.getpid()}.{next(_run_ids)}"
    run_workers(port, sc.prepare(count, size, subs, tag, opts or {}), mode, timeout, idle)


def verify_scenario(sc: Scenario, port: int, count: int, size: int, subs: int,
                    mode: str, timeout: float, idle: float | None = None,
                    opts: dict | None = None) -> None:
    """The scenario's unmeasured check after a run (if any); raises
    BenchError on failure."""
    if sc.verify is None:
        return
    tag = f"{os.getpid()}.{next(_run_ids)}"
    run_workers(port, sc.verify(count, size, subs, tag, opts or {}), mode, timeout, idle)
