"""The monitoring port's index page and live dashboard.

* ``/`` links every endpoint natsbroker serves, each answering 200, in
  nats-server's order for the ones nats-server's index names too; the two it
  links that natsbroker does not serve are named below with the reason.
* ``/gatewayz`` and ``/leafz`` (linked from the index) answer as nats-server's.
* ``/dashboard`` and its files: Content-Type, revalidation by ETag, a
  Content-Security-Policy; nothing but the listed files is reachable under
  ``/dashboard/`` however the path is spelt (raw request lines, no client-side
  normalisation); the client and WebSocket ports do not serve them.
* In headless Chromium (Playwright, the Debian chromium binary, as in
  tests/test_browser.py: never skipped unless NATSBROKER_SKIP_BROWSER=1) the
  dashboard draws while nats-py publishes and creates a stream and a consumer:
  the messages/s series the charts hold integrate to the messages published,
  the stream and consumer counts appear, and the page logs nothing. Without
  JetStream it says so; with the server gone it shows the error and retries.
"""

import asyncio
import html.parser
import json
import os
import socket

import nats
import pytest

from tests.support.clients import flushed
from tests.support.http import http
from tests.support.raw import dial
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.timeout(120)

CHROMIUM = os.environ.get("NATSBROKER_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
]
DEADLINE = 30.0  # seconds: chromium start-up on a loaded 2-core machine is slow

# What the index links: nats-server's endpoints that we serve, in its order, then ours.
SERVED = ["varz", "jsz", "connz", "accountz", "accstatz", "subsz", "routez", "leafz",
          "gatewayz", "raftz", "healthz", "metrics", "dashboard"]
# Links of nats-server's index that natsbroker does not serve, and why.
NOT_SERVED = {
    "debug/vars": "Go's expvar (Go runtime memory statistics)",
}


# -- helpers --------------------------------------------------------------------

def raw_get(port, target):
    """The whole answer to a request line sent exactly as given."""
    with dial(port, 10) as s:
        s.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        chunks = []
        s.settimeout(5)
        try:
            while chunk := s.recv(65536):
                chunks.append(chunk)
        except (socket.timeout, ConnectionResetError):
            pass
    return b"".join(chunks)


class _Links(html.parser.HTMLParser):
    """The href/src of every a, link and script, in document order."""

    def __init__(self):
        super().__init__()
        self.links = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("href", "src") and tag in ("a", "link", "script"):
                self.links.append(value)


def links(body):
    parser = _Links()
    parser.feed(body.decode("utf-8"))
    return parser.links


def endpoint_links(body):
    return [h[2:] for h in links(body) if h.startswith("./")]


@pytest.fixture(scope="module")
def ours(tmp_path_factory):
    conf = tmp_path_factory.mktemp("dash") / "ws.conf"
    conf.write_text("websocket { port: -1, no_tls: true }\n")
    with ServerProcess("natsbroker", ["-m", "-1", "-js", "-c", str(conf)]) as s:
        yield s


@pytest.fixture(scope="module")
def ref():
    with ServerProcess("nats-server", ["-m", "-1", "-js"]) as s:
        yield s


# -- the index ----------------------------------------------------------------------

def test_index_links_every_endpoint(ours):
    status, headers, body = http(ours.http_port, "/")
    assert (status, headers["content-type"]) == (200, "text/html; charset=utf-8")
    assert endpoint_links(body) == SERVED
    for name in SERVED:
        status, _, answer = http(ours.http_port, "/" + name)
        if name == "raftz":
            # (a server running no Raft group: nats-server's 404, test_raftz.py)
            assert (status, answer) == (404, b"No Raft nodes registered")
            continue
        assert status == 200, (name, status, answer[:200])
    assert body.count(b"class=last") == 1 and b"href=./dashboard class=last" in body


def test_index_follows_nats_server(ours, ref):
    theirs = endpoint_links(http(ref.http_port, "/")[2])
    assert set(theirs) - set(SERVED) == set(NOT_SERVED)
    # Ours in nats-server's order, then what nats-server does not have.
    assert [n for n in SERVED if n in theirs] == [n for n in theirs if n in SERVED]
    assert all(SERVED.index(n) > SERVED.index("gatewayz")
               for n in SERVED if n not in theirs)
    for name in NOT_SERVED:
        assert http(ours.http_port, "/" + name)[::2] == (404, b"404 page not found\n")


@pytest.mark.parametrize("path", [
    "/gatewayz", "/gatewayz?accs=1&subs=1", "/gatewayz?accs=bogus", "/gatewayz?subs=bogus",
    "/gatewayz?accs=bogus&subs=nope", "/gatewayz?gw_name=x&acc_name=y", "/gatewayz/",
    "/leafz", "/leafz?subs=1&acc=x", "/leafz?subs=bogus", "/leafz?subs=detail", "/leafz/",
])
def test_gatewayz_leafz_like_nats_server(ours, ref, path):
    status, headers, body = http(ours.http_port, path)
    rstatus, rheaders, rbody = http(ref.http_port, path)
    assert (status, headers["content-type"]) == (rstatus, rheaders["content-type"])
    if status != 200:
        assert body == rbody
        return
    doc, rdoc = json.loads(body), json.loads(rbody)
    assert list(doc) == list(rdoc)
    for volatile in ("server_id", "now"):
        doc.pop(volatile), rdoc.pop(volatile)
    assert doc == rdoc
    assert headers["access-control-allow-origin"] == "*"


# -- the dashboard's files --------------------------------------------------------------

def test_dashboard_page_and_files(ours):
    status, headers, page = http(ours.http_port, "/dashboard")
    assert (status, headers["content-type"]) == (200, "text/html; charset=utf-8")
    csp = headers["content-security-policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp
    files = [h for h in links(page) if h.startswith("dashboard/")]
    kinds = {"js": "text/javascript; charset=utf-8", "css": "text/css; charset=utf-8",
             "LICENSE": "text/plain; charset=utf-8"}
    assert sorted(f.rsplit(".", 1)[1] for f in files) == ["LICENSE", "css", "css", "js", "js"]
    for path in ["/dashboard"] + ["/" + f for f in files]:
        status, headers, body = http(ours.http_port, path)
        assert status == 200, path
        if path != "/dashboard":
            assert headers["content-type"] == kinds[path.rsplit(".", 1)[1]], path
        assert headers["cache-control"] == "no-cache"
        assert headers["x-content-type-options"] == "nosniff"
        etag = headers["etag"]
        assert http(ours.http_port, path, {"If-None-Match": etag})[::2] == (304, b"")
        assert http(ours.http_port, path, {"If-None-Match": '"other"'})[::2] == (200, body)
    uplot = http(ours.http_port, "/dashboard/uPlot.iife.min.js")[2]
    assert uplot.startswith(b"/*! https://github.com/leeoniya/uPlot (v1.6.32) */")
    assert b"MIT License" in http(ours.http_port, "/dashboard/uPlot.LICENSE")[2]


def test_dashboard_files_are_not_endpoints(ours):
    stats = json.loads(http(ours.http_port, "/varz")[2])["http_req_stats"]
    http(ours.http_port, "/dashboard")
    http(ours.http_port, "/dashboard/dashboard.js")
    after = json.loads(http(ours.http_port, "/varz")[2])["http_req_stats"]
    assert after["/dashboard"] == stats.get("/dashboard", 0) + 1
    assert not any(k.startswith("/dashboard/") for k in after)


@pytest.mark.parametrize("target", [
    b"/dashboard/../monitor.py", b"/dashboard/%2e%2e/monitor.py", b"/dashboard/..%2fmonitor.py",
    b"/dashboard/..%2f..%2fsetup.py", b"/dashboard/%2e%2e%2f%2e%2e%2fsetup.py",
    b"/dashboard/__init__.py", b"/dashboard/index.html", b"/dashboard/dashboard.html",
    b"/dashboard/vendor/uplot/LICENSE", b"/dashboard//etc/passwd", b"/dashboard/%2fetc%2fpasswd",
    b"/dashboard/dashboard.js/", b"/dashboard/dashboard.js%00", b"/dashboard/./dashboard.js",
    b"/dashboard/", b"/dashboard/DASHBOARD.JS", b"/../../../../etc/passwd",
    b"/dashboard/..\\__init__.py", b"/dashboard/%5c..%5c__init__.py",
])
def test_no_path_traversal(ours, target):
    answer = raw_get(ours.http_port, target)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 404 "), answer[:300]
    assert body == b"404 page not found\n"


def test_only_on_the_monitoring_port(ours):
    assert raw_get(ours.http_port, b"/dashboard/dashboard.js").startswith(b"HTTP/1.1 200 ")
    for port in (ours.port, ours.ws_port):
        answer = raw_get(port, b"/dashboard/dashboard.js")
        assert not answer.startswith(b"HTTP/1.1 200"), (port, answer[:300])
        assert b"natsDashboard" not in answer


# -- in a browser --------------------------------------------------------------------------

def _requirements():
    """Skip only when asked to; otherwise fail saying what is missing."""
    if os.environ.get("NATSBROKER_SKIP_BROWSER") == "1":
        pytest.skip("NATSBROKER_SKIP_BROWSER=1")
    missing = []
    if not os.access(CHROMIUM, os.X_OK):
        missing.append("%s is missing: apt-get install chromium (or set NATSBROKER_CHROMIUM)"
                       % CHROMIUM)
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        missing.append("Playwright for Python is missing: pip install -e '.[test]'")
    if missing:
        pytest.fail("browser test cannot run (NATSBROKER_SKIP_BROWSER=1 skips it):\n  "
                    + "\n  ".join(missing), pytrace=False)


class Page:
    """A headless Chromium page on a server's /dashboard, recording what it logs."""

    def __init__(self, server, interval_ms=250):
        self.url = "http://127.0.0.1:%d/dashboard?interval=%d" % (server.http_port, interval_ms)
        self.server = server
        self.console = []
        self.page_errors = []

    async def __aenter__(self):
        from playwright.async_api import async_playwright
        self._pw = await async_playwright().start()
        self.browser = await self._pw.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True, timeout=DEADLINE * 1000)
        self.page = await self.browser.new_page(viewport={"width": 1280, "height": 900})
        self.page.on("console", lambda m: self.console.append("%s: %s" % (m.type, m.text)))
        self.page.on("pageerror", lambda e: self.page_errors.append(str(e)))
        await self.page.goto(self.url, timeout=DEADLINE * 1000)
        return self

    async def __aexit__(self, *exc):
        await self.browser.close()
        await self._pw.stop()

    async def until(self, expression, what):
        try:
            # A function, not an expression: Playwright would eval() an expression
            # inside the page, which the page's Content-Security-Policy forbids.
            await self.page.wait_for_function("() => " + expression,
                                              timeout=DEADLINE * 1000, polling=50)
        except Exception as e:
            state = await self.page.evaluate(
                "JSON.stringify({samples: natsDashboard.samples, latest: natsDashboard.latest,"
                " lastError: natsDashboard.lastError})")
            raise AssertionError("%s: not within %ss (%s)\nstate: %s\nconsole: %s\n"
                                 "page errors: %s\nlog:\n%s"
                                 % (what, DEADLINE, e, state, self.console, self.page_errors,
                                    self.server.log()))

    async def eval(self, expression):
        return await self.page.evaluate(expression)

    async def text(self, element_id):
        return await self.page.text_content("#" + element_id)


async def _load(server, count, subject="load.x", payload=b"x" * 100):
    """Publish ``count`` messages in rounds (so several samples see traffic)
    and read them back; create a stream with a consumer in the middle."""
    nc = await nats.connect(server.url, allow_reconnect=False, connect_timeout=10)
    try:
        sub = await nc.subscribe("load.>")
        rounds = 20
        for i in range(rounds):
            for _ in range(count // rounds):
                await nc.publish(subject, payload)
            await flushed(nc)
            if i == rounds // 2:
                js = nc.jetstream(timeout=10)
                await js.add_stream(name="DASH", subjects=["dash.>"])
                await js.add_consumer("DASH", durable_name="watcher")
            await asyncio.sleep(0.1)
        received = 0
        while received < count:
            await sub.next_msg(timeout=10)
            received += 1
        return nc
    except BaseException:
        await nc.close()
        raise


async def _live(server):
    count = 4000
    async with Page(server) as p:
        await p.until("natsDashboard.samples >= 2", "first samples")
        try:
            nc = await _load(server, count)
        except Exception as e:
            raise AssertionError("the load failed: %r\nlog:\n%s" % (e, server.log())) from e
        try:
            await p.until("natsDashboard.latest.streams === 1"
                          " && natsDashboard.latest.consumers === 1", "stream and consumer counts")
            # A sample taken after the load: the rates cover all of it.
            after = await p.eval("natsDashboard.samples")
            await p.until("natsDashboard.samples >= %d" % (after + 2), "samples after the load")
            data = await p.eval("natsDashboard.data")
            charts = await p.eval("""Object.fromEntries(Object.entries(natsDashboard.charts)
                                       .map(([id, u]) => [id, u.data]))""")
            texts = {k: await p.text("v-" + k) for k in ("streams", "consumers", "connections")}
            status = await p.eval("document.getElementById('status').className")
        finally:
            await nc.close()
    return p, data, charts, texts, status, count


def test_dashboard_live(ours):
    _requirements()
    page, data, charts, texts, status, count = asyncio.run(
        asyncio.wait_for(_live(ours), 110))
    assert page.console == [] and page.page_errors == [], (page.console, page.page_errors)
    assert status == "status"  # not "status error"

    t, msgs_in = data["time"], data["msgs_in"]
    assert len(t) == len(msgs_in) >= 4 and t == sorted(t)
    # Rates times intervals add back up to the counter's growth: every message
    # published (plus the few JetStream API requests) and no more.
    published = sum(r * (t[i] - t[i - 1]) for i, r in enumerate(msgs_in) if r is not None)
    assert count <= round(published) <= count + 20, published
    delivered = sum(r * (t[i] - t[i - 1]) for i, r in enumerate(data["msgs_out"]) if r)
    assert count <= round(delivered) <= count + 20, delivered
    assert sum(r * (t[i] - t[i - 1]) for i, r in enumerate(data["bytes_in"]) if r) >= count * 100
    assert sum(1 for r in msgs_in if r) >= 2, msgs_in  # traffic seen in several samples

    # The charts hold exactly these series.
    assert charts["chart-msgs"] == [t, msgs_in, data["msgs_out"]]
    assert charts["chart-bytes"] == [t, data["bytes_in"], data["bytes_out"]]
    assert charts["chart-connections"] == [t, data["connections"]]
    assert charts["chart-subscriptions"] == [t, data["subscriptions"]]
    assert charts["chart-jetstream"] == [t, data["streams"], data["consumers"]]
    assert max(data["connections"]) >= 1 and max(data["subscriptions"]) >= 1
    assert data["streams"][0] == 0 and data["streams"][-1] == 1
    assert texts == {"streams": "1", "consumers": "1", "connections": "1"}


async def _without_jetstream(server):
    async with Page(server) as p:
        await p.until("natsDashboard.samples >= 2", "samples")
        return (p, await p.eval("natsDashboard.jetstream"), await p.text("v-streams"),
                await p.text("js-note"), await p.eval("natsDashboard.data.streams"))


def test_dashboard_without_jetstream():
    _requirements()
    with ServerProcess("natsbroker", ["-m", "-1"]) as server:
        page, jetstream, streams, note, series = asyncio.run(
            asyncio.wait_for(_without_jetstream(server), 110))
    assert page.console == [] and page.page_errors == [], (page.console, page.page_errors)
    assert (jetstream, streams, note) == (False, "off", "(JetStream is disabled)")
    assert set(series) == {None}


async def _server_gone(server):
    async with Page(server) as p:
        await p.until("natsDashboard.samples >= 1", "a sample")
        server.stop()
        await p.until("natsDashboard.errors >= 2", "errors after the server stopped")
        return (p, await p.text("status"),
                await p.eval("document.getElementById('status').className"))


def test_dashboard_shows_fetch_errors():
    _requirements()
    with ServerProcess("natsbroker", ["-m", "-1"]) as server:
        page, status, css = asyncio.run(asyncio.wait_for(_server_gone(server), 110))
    assert page.page_errors == []
    # Chromium itself logs each refused request; the page adds nothing of its own.
    assert page.console and all("net::ERR_" in m for m in page.console), page.console
    assert css == "status error" and status.startswith("error: ") and "retrying" in status
