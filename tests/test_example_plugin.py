"""The out-of-tree example plugin (examples/natsbroker-example-plugin),
installed as a third party installs it and run by ``natsbroker`` and by
``twistd natsbroker``: each feature checked from outside with nats-py and
the monitoring port.

The package is installed with ``pip install -e`` into a temporary prefix,
never into the project's environment (other tests share it, and the plugin
refuses some publishes). A ``sitecustomize`` makes that prefix a site
directory of the servers' interpreter, as site-packages is, so the
package's ``.pth`` is read and its ``natsbroker/plugins`` drop-in directory
is on ``sys.path``.
"""

import asyncio
import json
import os
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request

import nats
import pytest

from tests.support.servers import ROOT, ServerProcess

EXAMPLE = os.path.join(ROOT, "examples", "natsbroker-example-plugin")
TWISTD = os.path.join(os.path.dirname(sys.executable), "twistd")

CONF = """
example { deny_publish: ["secret.>"], save_interval: 0.2 }
accounts {
  A { users = [{user: a, password: a}] }
  B { users = [{user: b, password: b}] }
}
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """``{"PYTHONPATH": ...}`` for a server that has the example installed."""
    d = tmp_path_factory.mktemp("example-install")
    prefix = d / "prefix"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--prefix", str(prefix), "-e", EXAMPLE], check=True, capture_output=True,
                   timeout=300)
    site = sysconfig.get_path("purelib", vars={"base": str(prefix), "platbase": str(prefix)})
    assert any(n.endswith(".pth") for n in os.listdir(site)), os.listdir(site)
    hook = d / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text("import site\nsite.addsitedir(%r)\n" % site)
    return {"PYTHONPATH": os.pathsep.join([str(hook), ROOT])}


class Twistd(ServerProcess):
    """``twistd natsbroker`` with the same options, twistd-style."""

    def command(self):
        return [TWISTD, "-n", "--pidfile=", "natsbroker", "--port", "-1", "--addr", "127.0.0.1",
                "--ports_file_dir", self.dir] + self.args


def _server(runner, conf, store, env):
    if runner == "natsbroker":
        return ServerProcess("natsbroker", ["-c", conf, "-m", "-1", "-sd", store], env=env)
    return Twistd("twistd", ["--config", conf, "--http_port", "-1", "--store_dir", store], env=env)


def _get(server, path):
    url = "http://127.0.0.1:%d%s" % (server.http_port, path)
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _eventually(check, timeout=15):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


async def _traffic(url):
    """As a user of A: three messages, a denied publish, the service; as B:
    the service. Returns what each saw."""
    errors = []

    async def on_error(e):
        errors.append(str(e))

    a = await nats.connect(url.replace("://", "://a:a@"), error_cb=on_error, allow_reconnect=False)
    b = await nats.connect(url.replace("://", "://b:b@"), allow_reconnect=False)
    try:
        denied = await a.subscribe("secret.>")
        for i in range(3):
            await a.publish("x", b"%d" % i)
        await a.publish("secret.plans", b"!")
        await a.flush()
        info_a = json.loads((await a.request("example.info", b"", timeout=10)).data)
        info_b = json.loads((await b.request("example.info", b"", timeout=10)).data)
        with pytest.raises(nats.errors.TimeoutError):
            await denied.next_msg(timeout=0.3)
        _eventually(lambda: errors, timeout=5)
        return info_a, info_b, errors, a.is_connected
    finally:
        await a.close()
        await b.close()


@pytest.mark.parametrize("runner", ["natsbroker", "twistd"])
def test_example_plugin(installed, tmp_path, runner):
    conf = tmp_path / "server.conf"
    conf.write_text(CONF)
    store = tmp_path / "store"
    with _server(runner, str(conf), str(store), installed) as server:
        info_a, info_b, errors, still_connected = asyncio.run(_traffic(server.url))
        # The service answers in every account; the counter counts each
        # account's publishes (the request included), not the refused one.
        assert info_a == {"account": "A", "messages": 4, "total": 4, "refused": 1, "starts": 1}
        assert info_b == {"account": "B", "messages": 1, "total": 5, "refused": 1, "starts": 1}
        # Refused as nats-server refuses a denied publish: -ERR, still connected.
        assert errors == ['nats: permissions violation for publish to "secret.plans"']
        assert still_connected
        # The monitoring endpoint, with a decoded query.
        assert _get(server, "/examplez?account=B&account=A") == (200, {"accounts": {
            "B": info_b, "A": dict(info_a, total=5)}})
        # Its service subscriptions are the plugin's own business.
        _, subsz = _get(server, "/subsz?subs=1&account=A")
        assert "example.info" not in json.dumps(subsz)
        # The health check: healthy while the state is saved.
        state = store / "example" / "state.json"
        assert _get(server, "/healthz") == (200, {"status": "ok"})
        state.unlink()
        state.mkdir()  # (a directory where the file goes: the next save fails)
        failing = _eventually(lambda: _get(server, "/healthz")[0] == 503)
        assert failing
        code, body = _get(server, "/healthz")
        assert body["status"] == "unavailable"
        assert body["error"].startswith("example: cannot save state: Is a directory: ")
        state.rmdir()
        assert _eventually(lambda: _get(server, "/healthz") == (200, {"status": "ok"}))
    # State kept across a restart, in the plugin's store directory.
    assert json.loads(state.read_text())["counts"] == {"A": 4, "B": 1}
    with _server(runner, str(conf), str(store), installed) as server:
        info_a, _, _, _ = asyncio.run(_traffic(server.url))
    assert info_a == {"account": "A", "messages": 8, "total": 9, "refused": 2, "starts": 2}


def test_example_is_not_in_the_project_environment():
    # The install above went to a temporary prefix: a server started without
    # it has no example plugin.
    with ServerProcess("natsbroker", ["-m", "-1"]) as server:
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen("http://127.0.0.1:%d/examplez" % server.http_port, timeout=10)
    assert e.value.code == 404
