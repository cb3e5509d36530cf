"""The dashboard's byte-rate axis (issue 29, conformance 8).

The Bytes/s chart labelled small ticks "1 B, 1 B, 1 B, 0 B": uPlot chose
fractional ticks (0.2, 0.4, ...) and the byte formatter rounded them. The
axis now takes only byte-sensible steps (1, 2, 5 ... bytes; 1, 2, 5 ... KiB,
MiB) and says bytes per second, so every tick label is distinct and is its
tick's exact value. Checked in headless Chromium (as tests/test_dashboard.py)
on an idle server (a 0..1 range) and under a load of a few KiB/s, with a
screenshot of the chart.
"""

import asyncio
import re

import nats
import pytest

from tests.support.clients import flushed
from tests.support.servers import ServerProcess
from tests.test_dashboard import Page, _requirements

pytestmark = pytest.mark.timeout(120)

UNITS = {"B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3, "TiB": 1024 ** 4}
LABEL = re.compile(r"^([0-9][0-9,]*(?:\.[0-9])?) (B|KiB|MiB|GiB|TiB)/s$")


def _value(label):
    m = LABEL.match(label)
    assert m, label
    return float(m.group(1).replace(",", "")) * UNITS[m.group(2)]


async def _axis(page):
    """(tick values, tick labels) of the Bytes/s chart's y axis as drawn."""
    await page.eval("natsDashboard.charts['chart-bytes'].redraw(false, true)")
    await page.until("natsDashboard.charts['chart-bytes'].axes[1]._values !== null", "axis drawn")
    return await page.eval("[natsDashboard.charts['chart-bytes'].axes[1]._splits,"
                           " natsDashboard.charts['chart-bytes'].axes[1]._values]")


def _check(splits, labels):
    assert len(labels) >= 2 and len(set(labels)) == len(labels), labels  # no "1 B, 1 B"
    for value, label in zip(splits, labels):
        assert _value(label) == value, (value, label)  # the label is the tick, unrounded


async def _trickle(server, stop):
    """A few KiB/s of traffic until ``stop`` is set."""
    nc = await nats.connect(server.url, allow_reconnect=False, connect_timeout=10)
    try:
        while not stop.is_set():
            await nc.publish("trickle", b"x" * 500)
            await flushed(nc)
            await asyncio.sleep(0.1)
    finally:
        await nc.close()


async def _scenario(server, shots):
    async with Page(server) as p:
        await p.until("natsDashboard.samples >= 3", "idle samples")
        idle = await _axis(p)
        chart = p.page.locator("#chart-bytes")
        await chart.screenshot(path=str(shots / "bytes-idle.png"))
        stop = asyncio.Event()
        load = asyncio.ensure_future(_trickle(server, stop))
        try:
            await p.until("natsDashboard.data.bytes_in.filter(v => v > 2048).length >= 3", "KiB/s samples")
            busy = await _axis(p)
            await chart.screenshot(path=str(shots / "bytes-busy.png"))
        finally:
            stop.set()
            await load
        # The legend's value at the cursor, for a few rates.
        legend = await p.eval("[0.4, 512, 1536, 3 * 1048576].map(v => {"
                              " const u = natsDashboard.charts['chart-bytes'];"
                              " return u.series[1].value(u, v); })")
    return p, idle, busy, legend


def test_byte_rate_axis_labels(tmp_path):
    _requirements()
    with ServerProcess("natsbroker", ["-m", "-1"]) as server:
        page, idle, busy, legend = asyncio.run(asyncio.wait_for(_scenario(server, tmp_path), 100))
    assert page.console == [] and page.page_errors == [], (page.console, page.page_errors)
    _check(*idle)
    assert idle[1][:2] == ["0 B/s", "1 B/s"], idle
    _check(*busy)
    assert any(label.endswith("KiB/s") for label in busy[1]), busy
    assert legend == ["0.4 B/s", "512 B/s", "1.5 KiB/s", "3 MiB/s"]
    for name in ("bytes-idle.png", "bytes-busy.png"):
        png = (tmp_path / name).read_bytes()
        assert png.startswith(b"\x89PNG") and len(png) > 2000, name
