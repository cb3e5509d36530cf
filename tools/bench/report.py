"""The benchmark report: one Markdown file plus plots from the JSON results of
a run (``curves.json``, ``latency.json``; ``throughput.json`` and
``cluster.txt`` from ``python -m tools.bench --json`` and
``tools.bench.cluster`` when present).

``python -m tools.bench.report --dir DIR`` writes ``DIR/REPORT.md`` and
``DIR/*.svg``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

REF, CAND = "nats-server", "natsbroker"
ROLE_NAME = {"reference": REF, "candidate": CAND}
COLORS = {REF: "tab:blue", CAND: "tab:orange"}
# A natsbroker point "bends" when, relative to its own first point, it keeps
# less than this fraction of what nats-server keeps at the same point.
BEND = 0.5
MIB = 1024 * 1024


def _val(point, role, key):
    r = point.get(role) or {}
    v = r.get(key)
    return v if isinstance(v, (int, float)) else None


def _fmt(v, key=""):
    if v is None:
        return "-"
    if key.startswith("rss"):
        return f"{v / MIB:,.1f} MiB" if v >= MIB or key == "rss" else f"{v / 1024:,.1f} KiB"
    if isinstance(v, float) and v < 100:
        return f"{v:,.2f}"
    return f"{v:,.0f}"


def _ratio(a, b):
    return a / b if a is not None and b else None


def _plot(path: Path, title, xlabel, series: dict, ylabel, logy=False):
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for name, (xs, ys) in series.items():
        pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
        if pts:
            ax.plot(*zip(*pts), marker="o", label=name,
                    color=COLORS.get(name.split(" ")[0]),
                    linestyle="--" if name.endswith("(after restart)") else "-")
    ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# What each curve shows: (metric, label, log y) per plot.
CURVE_PLOTS = {
    "subs": [("delivered msgs/s", "delivered msgs/s, pub -> the 1 matching sub", True),
             ("rss", "RSS (MiB)", True)],
    "conns": [("rss per conn", "RSS per connection (KiB)", True), ("rss", "RSS (MiB)", True)],
    "fanout": [("delivered msgs/s", "delivered msgs/s (all subscribers)", True)],
    "payload": [("MB/s", "delivered MB/s", True)],
    "streams": [("acked msgs/s", "acked msgs/s into one stream", True), ("rss", "RSS (MiB)", False),
                ("startup_s", "start-up time with the store full (s)", False)],
    "consumers": [("acked msgs/s", "acked msgs/s into the stream", True),
                  ("rss", "RSS (MiB)", False),
                  ("startup_s", "start-up time with the store full (s)", False)],
}
SCALE = {"rss": MIB, "rss per conn": 1024}
UNIT = {"subs": "subscription", "conns": "connection", "fanout": "subscriber",
        "payload": "payload byte", "streams": "stream", "consumers": "consumer"}


def bends(points, key):
    """x values where natsbroker's value, relative to its first point, falls
    below BEND x nats-server's relative value (throughput curves)."""
    out = []
    r0, c0 = _val(points[0], "reference", key), _val(points[0], "candidate", key)
    if not r0 or not c0:
        return out
    for p in points[1:]:
        r, c = _val(p, "reference", key), _val(p, "candidate", key)
        if r and c and (c / c0) < BEND * (r / r0):
            out.append(p["x"])
    return out


def curve_section(name: str, curve: dict, d: Path) -> tuple[list[str], dict]:
    pts = curve["points"]
    xs = [p["x"] for p in pts]
    lines = [f"### {name}: {curve['axis']}", ""]
    notes = {}
    for key, label, logy in CURVE_PLOTS[name]:
        div = SCALE.get(key, 1)
        series = {ROLE_NAME[r]: (xs, [None if _val(p, r, key) is None else _val(p, r, key) / div
                                      for p in pts]) for r in ("reference", "candidate")}
        fname = f"{name}-{key.replace(' ', '-').replace('/', 'per')}.svg"
        _plot(d / fname, f"{name}: {label}", curve["axis"], series, label, logy)
        lines.append(f"![{name} {key}]({fname})")
    lines.append("")
    keys = [k for k, _, _ in CURVE_PLOTS[name]]
    head = [curve["axis"]]
    for k in keys:
        head += [f"{k} {REF}", f"{k} {CAND}", "ratio"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    for p in pts:
        row = [f"{p['x']:,}"]
        for k in keys:
            r, c = _val(p, "reference", k), _val(p, "candidate", k)
            row += [_fmt(r, k), _fmt(c, k), _fmt(_ratio(c, r))]
        lines.append("| " + " | ".join(row) + " |")
    errs = [f"{p['x']:,} {ROLE_NAME[r]}: {p[r]['error']}" for p in pts
            for r in ("reference", "candidate") if "error" in (p.get(r) or {})]
    if errs:
        lines += ["", "Failed points: " + "; ".join(errs)]
    retried = [f"{p['x']:,} {ROLE_NAME[r]} ({p[r]['retried after']})" for p in pts
               for r in ("reference", "candidate") if "retried after" in (p.get(r) or {})]
    if retried:
        lines += ["", "Measured on the second attempt: " + "; ".join(retried)]
    lines.append("")
    primary = curve["primary"]
    ratios = [_ratio(_val(p, "candidate", primary), _val(p, "reference", primary)) for p in pts]
    notes["ratios"] = {p["x"]: r for p, r in zip(pts, ratios)}
    if primary != "rss per conn":
        notes["bends"] = bends(pts, primary)
    rss_key = "rss per conn" if name == "conns" else "rss"
    notes["rss_ratios"] = {p["x"]: _ratio(_val(p, "candidate", rss_key),
                                          _val(p, "reference", rss_key)) for p in pts}
    # Python's interpreter and libraries are a fixed ~45 MiB more at every
    # point; the growth per unit is what scales.
    first, last = pts[0], pts[-1]
    if name in ("subs", "conns", "streams", "consumers") and last["x"] > first["x"]:
        per = {}
        for r in ("reference", "candidate"):
            a, b = _val(first, r, "rss"), _val(last, r, "rss")
            per[r] = (b - a) / (last["x"] - first["x"]) if a and b else None
        notes["rss_growth"] = per
        notes["first"], notes["last"] = first["x"], last["x"]
    if name in ("streams", "consumers"):
        notes["startup"] = {p["x"]: (_val(p, "reference", "startup_s"),
                                     _val(p, "candidate", "startup_s")) for p in pts}
    return lines, notes


def latency_section(lat: dict, d: Path) -> tuple[list[str], dict]:
    srv = lat["servers"]
    lines = [f"Offered load {lat['offered msgs/s']:,.0f} msgs/s of {lat['size']} B on both "
             f"servers (half of the lower measured maximum; maxima: "
             + ", ".join(f"{n} {s['max msgs/s']:,.0f}" for n, s in srv.items())
             + f"), {lat['duration_s']:g} s each, first second left out. Latencies in µs "
             "(HdrHistogram, 3 significant digits).", ""]
    kinds = ("publish->deliver µs", "request->reply µs")
    pcts = ("p50", "p90", "p99", "p99.9", "max")
    lines.append("| measurement | server | count | " + " | ".join(pcts) + " |")
    lines.append("|---|---|---|" + "---|" * len(pcts))
    notes = {}
    for kind in kinds:
        for n in (REF, CAND):
            h = srv.get(n, {}).get(kind)
            if h:
                lines.append(f"| {kind[:-3]} | {n} | {h['count']:,} | "
                             + " | ".join(f"{h[p]:,}" for p in pcts) + " |")
        a, b = srv.get(CAND, {}).get(kind), srv.get(REF, {}).get(kind)
        if a and b:
            notes[kind] = {p: _ratio(a[p], b[p]) for p in ("p50", "p99", "p99.9")}
    lines += [f"Failed on {n}: {s['error']}" for n, s in srv.items() if "error" in s]
    lines.append("")
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, kind in zip(axes, kinds):
        for n in (REF, CAND):
            h = srv.get(n, {}).get(kind)
            if h:
                ax.plot(range(len(pcts) - 1), [h[p] for p in pcts[:-1]], marker="o",
                        label=n, color=COLORS[n])
        ax.set_xticks(range(len(pcts) - 1), pcts[:-1])
        ax.set_yscale("log")
        ax.set_title(kind)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(d / "latency.svg")
    plt.close(fig)
    lines += ["![latency](latency.svg)", ""]
    return lines, notes


def throughput_section(tp: dict) -> list[str]:
    pr = tp.get("params", {})
    lines = [f"Scenarios {', '.join(pr.get('scenarios', []))}; payload {pr.get('size')} B, "
             f"repeat {pr.get('repeat')} ({pr.get('stat')}); messages per run: "
             + ", ".join(f"{k} {v:,}" for k, v in pr.get("msgs", {}).items())
             + ". Details: tools/bench/README.md.", "",
             "| scenario | metric | nats-server | natsbroker | ratio |", "|---|---|---|---|---|"]
    for name, s in tp.get("scenarios", {}).items():
        for m, v in s["metrics"].items():
            lines.append(f"| {name} | {m} | {_fmt(v['reference'])} | {_fmt(v['candidate'])} "
                         f"| {_fmt(v['ratio'])} |")
    return lines + [""]


def _machine_line(m: dict) -> str:
    load = "/".join(f"{x:.2f}" for x in m["loadavg"]) if m.get("loadavg") else "n/a"
    return f"{m['platform']}, {m['cpus']} CPUs, Python {m['python']}, load average {load}"


def write_report(d: Path) -> Path:
    curves = json.loads((d / "curves.json").read_text()) if (d / "curves.json").exists() else None
    lat = json.loads((d / "latency.json").read_text()) if (d / "latency.json").exists() else None
    tp = (json.loads((d / "throughput.json").read_text())
          if (d / "throughput.json").exists() else None)
    cluster = (d / "cluster.txt").read_text() if (d / "cluster.txt").exists() else None
    first = (curves or lat or {}).get("machine_start") or {}
    versions = {**(curves or {}).get("versions", {}), **(lat or {}).get("versions", {})}
    out = ["# natsbroker vs nats-server: benchmark report", "",
           f"Run of {first.get('date', '?')} by `make bench` (tools/bench). "
           f"Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items())
           + (f" (INFO version; natsbroker tree {first['natsbroker_tree']})"
              if first.get("natsbroker_tree") else "") + ".", "",
           "Machine: " + (_machine_line(first) if first else "?") + ". "
           "The machine is a small VM shared with other people's test suites: single "
           "numbers swing by ±20% or more between runs; compare the two servers of the "
           "same point, not numbers across runs.", ""]
    for part in (curves, lat):
        if part and part.get("machine_end"):
            out.append(f"Load average at the end of the {'curves' if part is curves else 'latency'}"
                       f" run: {'/'.join(str(x) for x in part['machine_end']['loadavg'])}.")
    out += ["", "ratio = natsbroker / nats-server (rates: higher is better for natsbroker; "
            "RSS and times: lower is).", ""]
    notes = {}
    if curves:
        out += ["## Scale curves", "",
                "Fresh server processes for every point; RSS is VmRSS from "
                "/proc/<pid>/status. JetStream curves: natsbroker with its default (sync "
                "before every PubAck), nats-server with `sync_interval: always`, both on "
                "the same disk; start-up = process start until the client port answers "
                "PING and `$JS.API.INFO` answers (its stream/consumer counts are checked).",
                ""]
        for name, curve in curves["curves"].items():
            lines, notes[name] = curve_section(name, curve, d)
            out += lines
        out.append(f"Curves took {curves['duration_s']:.0f} s.")
        out.append("")
    if lat:
        out += ["## Latency under a steady load", ""]
        lines, notes["latency"] = latency_section(lat, d)
        out += lines
    if tp:
        out += ["## Throughput scenarios (`python -m tools.bench`)", ""] + throughput_section(tp)
    if cluster:
        out += ["## Cluster (`python -m tools.bench.cluster`)", "", "```", cluster.strip(),
                "```", ""]
    out += ["## Closing note: the ratios", ""] + closing(notes)
    path = d / "REPORT.md"
    path.write_text("\n".join(out) + "\n")
    return path


def _rl(d: dict) -> str:
    return ", ".join(f"{x:,}: {_fmt(r)}" for x, r in d.items())


def closing(notes: dict) -> list[str]:
    out = []
    for name, n in notes.items():
        if name == "latency":
            for kind, r in n.items():
                ok = r["p99"] is not None and r["p99"] <= 2
                out.append(f"* latency {kind[:-3]}: natsbroker / nats-server p50 "
                           f"{_fmt(r['p50'])}, p99 {_fmt(r['p99'])}, p99.9 {_fmt(r['p99.9'])}"
                           f" — aim p99 within 2x: {'met' if ok else 'not met'}.")
            continue
        line = f"* {name}: ratio per point {_rl(n['ratios'])}"
        if "bends" in n:
            line += ("; natsbroker bends where nats-server stays flat at "
                     + ", ".join(f"{x:,}" for x in n["bends"]) if n["bends"]
                     else "; no bend of natsbroker's curve beyond nats-server's")
        rss = [r for r in n["rss_ratios"].values() if r is not None]
        if rss:
            line += (f"; RSS ratio {min(rss):.2f}–{max(rss):.2f}"
                     f" ({'within' if max(rss) <= 2 else 'not within'} 2x)")
        g = n.get("rss_growth")
        if g and g["reference"] and g["candidate"]:
            line += (f"; RSS growth per {UNIT.get(name, 'unit')} ({n['first']:,} -> {n['last']:,}):"
                     f" nats-server {g['reference'] / 1024:,.2f} KiB, natsbroker"
                     f" {g['candidate'] / 1024:,.2f} KiB (ratio {g['candidate'] / g['reference']:.2f})")
        if "startup" in n:
            line += "; start-up s (nats-server/natsbroker) " + ", ".join(
                f"{x:,}: {_fmt(a)}/{_fmt(b)}" for x, (a, b) in n["startup"].items())
        out.append(line + ".")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.bench.report", description=__doc__)
    p.add_argument("--dir", default=str(Path(__file__).parent / "report"))
    a = p.parse_args(argv)
    print(write_report(Path(a.dir)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
