"""Benchmark scenarios: which workers to run and how to turn their
timestamps into rates."""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from typing import Callable

from .loadgen import run_workers

_run_ids = itertools.count(1)


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    default_msgs: int
    # (count, size, fanout_subs, run_tag) -> list of (worker kind, params)
    specs: Callable[[int, int, int, str], list]
    # (count, fanout_subs, worker results) -> {metric: value}
    metrics: Callable[[int, int, list], dict]
    primary: str  # metric name shown first


def _rate(n, t0, t1):
    return n / max(t1 - t0, 1e-9)


def _pub_specs(n, size, subs, tag):
    return [("publisher", {"subject": f"bench.pub.{tag}", "size": size, "count": n})]


def _pub_metrics(n, subs, res):
    pub = res[-1]
    return {"published msgs/s": _rate(n, pub["t0"], pub["t1"]),
            "seconds": pub["t1"] - pub["t0"]}


def _sub_specs(k):
    def specs(n, size, subs, tag):
        k_ = subs if k is None else k
        subject = f"bench.sub.{tag}"
        return ([("subscriber", {"subject": subject, "sid": str(i + 1), "size": size, "count": n})
                 for i in range(k_)]
                + [("publisher", {"subject": subject, "size": size, "count": n})])
    return specs


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


def _rr_specs(n, size, subs, tag):
    subject, inbox = f"bench.req.{tag}", f"_INBOX.bench.{tag}"
    p = {"subject": subject, "inbox": inbox, "size": size, "count": n}
    return [("responder", p), ("requester", p)]


def _rr_metrics(n, subs, res):
    req = res[-1]
    return {"round trips/s": _rate(n, req["t0"], req["t1"]),
            "seconds": req["t1"] - req["t0"]}


SCENARIOS: dict[str, Scenario] = {s.name: s for s in [
    Scenario("pub", "pub only (1 publisher, no subscribers)",
             6_000_000, _pub_specs, _pub_metrics, "published msgs/s"),
    Scenario("pubsub", "pub -> 1 sub",
             2_000_000, _sub_specs(1), _sub_metrics(1), "delivered msgs/s"),
    Scenario("fanout", "pub -> N subs (fan-out)",
             800_000, _sub_specs(None), _sub_metrics(None), "delivered msgs/s"),
    Scenario("reqrep", "request-reply (1 requester, 1 at a time; 1 responder)",
             15_000, _rr_specs, _rr_metrics, "round trips/s"),
]}


def run_scenario(sc: Scenario, port: int, count: int, size: int, subs: int,
                 mode: str, timeout: float, idle: float | None = None) -> dict:
    """One run of one scenario against the server on ``port``.
    Returns the metrics dict; raises BenchError on failure."""
    tag = f"{os.getpid()}.{next(_run_ids)}"
    specs = sc.specs(count, size, subs, tag)
    results = run_workers(port, specs, mode, timeout, idle)
    return sc.metrics(count, subs, results)
