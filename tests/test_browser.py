"""The official NATS JavaScript client in a real browser, over WebSocket.

A page in headless Chromium (driven by Playwright, the Debian chromium binary)
loads nats-core and kv (bundled by ``make test`` from tests/browser/ into
tests/browser/build/bundle.js) and, on the server's WebSocket port, subscribes,
publishes (with headers), answers and makes requests (one to a nats-py
responder on the TCP port), gets a no-responders error and reads a KV key that
nats-py put. The page reports into ``window.__results``; the test compares
exact values. Every expected value was observed from nats-server 2.15.1.

This test never skips by itself: without chromium, Playwright or the bundle it
fails, saying what to run. NATSBROKER_SKIP_BROWSER=1 skips it explicitly.
"""

import asyncio
import http.server
import json
import os
import threading

import nats
import pytest

from tests.support.servers import ROOT, ServerProcess

pytestmark = pytest.mark.timeout(90)

BROWSER_DIR = os.path.join(ROOT, "tests", "browser")
BUNDLE = os.path.join(BROWSER_DIR, "build", "bundle.js")
CHROMIUM = os.environ.get("NATSBROKER_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
]
DEADLINE = 20.0  # seconds: chromium start-up on a loaded 2-core machine is slow

BUCKET = "browser"
KEY = "color"

PAGE = b"""<!doctype html>
<html><head><meta charset="utf-8"><title>natsbroker browser test</title></head>
<body><script src="/bundle.js"></script></body></html>
"""


def _requirements():
    """Skip only when asked to; otherwise fail saying what is missing."""
    if os.environ.get("NATSBROKER_SKIP_BROWSER") == "1":
        pytest.skip("NATSBROKER_SKIP_BROWSER=1")
    missing = []
    if not os.access(CHROMIUM, os.X_OK):
        missing.append("%s is missing: apt-get install chromium (or set NATSBROKER_CHROMIUM)"
                       % CHROMIUM)
    if not os.path.exists(BUNDLE):
        missing.append("%s is missing: run `make test` (npm ci + esbuild in tests/browser)"
                       % BUNDLE)
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        missing.append("Playwright for Python is missing: pip install -e '.[test]'")
    if missing:
        pytest.fail("browser test cannot run (NATSBROKER_SKIP_BROWSER=1 skips it):\n  "
                    + "\n  ".join(missing), pytrace=False)


class _Handler(http.server.BaseHTTPRequestHandler):
    """``/`` is the page, ``/bundle.js`` the bundle; nothing else."""

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        if path == "/":
            body, ctype = PAGE, "text/html; charset=utf-8"
        elif path == "/bundle.js":
            with open(BUNDLE, "rb") as f:
                body, ctype = f.read(), "text/javascript; charset=utf-8"
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def http_url():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    try:
        yield "http://127.0.0.1:%d" % httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()
        t.join(10)


@pytest.fixture(params=["nats-server", "natsbroker"])
def server(request, tmp_path):
    _requirements()
    conf = tmp_path / "ws.conf"
    conf.write_text("websocket { port: -1, no_tls: true }\n"
                    "jetstream { store_dir: %s }\n" % json.dumps(str(tmp_path / "js")))
    with ServerProcess(request.param, ["-c", str(conf)]) as s:
        s.kind_name = request.param
        yield s


def ws_port(server):
    """The server's WebSocket port, from its ports file (ServerProcess.ws_port)."""
    if not server.ws_port:
        pytest.fail("%s reports no websocket port; log:\n%s" % (server.kind_name, server.log()),
                    pytrace=False)
    return server.ws_port


async def _put_key(nc):
    js = nc.jetstream(timeout=10)
    kv = await js.create_key_value(bucket=BUCKET, history=5)
    await kv.put(KEY, b"red")
    return await kv.put(KEY, b"blue")


async def _scenario(server, base_url):
    from playwright.async_api import async_playwright

    nc = await nats.connect(server.url, allow_reconnect=False, connect_timeout=10)
    try:
        assert await _put_key(nc) == 2

        async def echo(msg):
            await msg.respond(b"py:" + msg.data)
        await nc.subscribe("py.echo", cb=echo)
        from_page = await nc.subscribe("browser.out")
        await nc.flush()

        url = "%s/?ws=ws://127.0.0.1:%d&bucket=%s&key=%s" % (
            base_url, ws_port(server), BUCKET, KEY)
        console = []
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(
                executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True,
                timeout=DEADLINE * 1000)
            try:
                page = await browser.new_page()
                page.on("console", lambda m: console.append("console.%s: %s" % (m.type, m.text)))
                page.on("pageerror", lambda e: console.append("pageerror: %s" % e))
                await page.goto(url, timeout=DEADLINE * 1000)
                try:
                    await page.wait_for_function(
                        "window.__results !== undefined || window.__error !== undefined",
                        timeout=DEADLINE * 1000, polling=50)
                except Exception as e:
                    raise AssertionError("the page reported nothing in %ss (%s)\n%s\n%s log:\n%s"
                                         % (DEADLINE, e, "\n".join(console), server.kind_name,
                                            server.log()))
                error = await page.evaluate("window.__error || null")
                assert error is None, "the page failed: %s\n%s\n%s log:\n%s" % (
                    error, "\n".join(console), server.kind_name, server.log())
                results = await page.evaluate("window.__results")

                # The page's responder answers nats-py too (TCP -> WebSocket).
                reply = await nc.request("page.svc", b"from-python", timeout=10)
                msg = await from_page.next_msg(timeout=10)
                await page.evaluate("window.__nc.close()")
            finally:
                await browser.close()
        return results, reply.data, (msg.subject, msg.data)
    finally:
        await nc.close()


def test_browser_client(server, http_url):
    results, py_to_page, page_to_py = asyncio.run(
        asyncio.wait_for(_scenario(server, http_url), 60))
    assert results == {
        "connected": True,
        "messages": [
            {"subject": "browser.a", "data": "one", "header": None},
            {"subject": "browser.b", "data": "two", "header": "page"},
        ],
        "pageReply": "page:ping",
        "pyReply": "py:hi",
        "noResponders": "NoRespondersError:nobody.home",
        "kv": {"bucket": BUCKET, "key": KEY, "value": "blue", "revision": 2,
               "operation": "PUT"},
        "kvMissing": None,
    }
    assert py_to_page == b"page:from-python"
    assert page_to_py == ("browser.out", b"to python")
