"""Third-party plugins: found in a drop-in directory or named in config, and serving traffic."""

import asyncio
import textwrap

import nats
import pytest
from zope.interface.verify import verifyObject

from natsbroker.config.model import ServerConfig
from natsbroker.discovery import discover, plugins_for
from natsbroker.interfaces import IBrokerPlugin, IBrokerPluginFactory, IClientOps
from tests.support.servers import ServerProcess

PLUGIN = textwrap.dedent('''
    """A third-party plugin: answers requests on echo.> through the public API only."""
    from twisted.plugin import IPlugin
    from zope.interface import implementer, provider

    from natsbroker.interfaces import IBrokerPlugin, IBrokerPluginFactory, IClientObserver


    @implementer(IBrokerPlugin, IClientObserver)
    class Echo:
        name = "echo"

        def __init__(self, config):
            self.connected = 0

        def start(self, broker):
            self.broker = broker
            self.sub = broker.subscribe("echo.>", self.on_msg)

        def stop(self):
            self.broker.unsubscribe(self.sub)

        def on_msg(self, sub, subject, reply, hdr_len, raw):
            if reply:
                body = b"%s|%d|%s" % (subject, self.connected, raw[hdr_len:])
                self.broker.publish(reply, body, headers={"Echo-Plugin": "yes"})

        def client_connected(self, client):
            self.connected += 1

        def client_closed(self, client):
            pass


    @implementer(IPlugin, IBrokerPluginFactory)
    class EchoFactory:
        name = "echo"
        order = 50

        def make_plugin(self, config):
            return Echo(config)


    echo = EchoFactory()
''')


def _request(url, subject, body):
    async def main():
        nc = await nats.connect(url)
        try:
            m = await nc.request(subject, body, timeout=10)
            return m.data, m.headers
        finally:
            await nc.close()
    return asyncio.run(main())


def test_builtin_plugins_provide_the_interfaces():
    factories = {f.name: f for f in discover()}
    assert "pubsub" in factories
    for f in factories.values():
        verifyObject(IBrokerPluginFactory, f)
    for p in plugins_for(ServerConfig()):
        verifyObject(IBrokerPlugin, p)
    pubsub = [p for p in plugins_for(ServerConfig()) if p.name == "pubsub"][0]
    verifyObject(IClientOps, pubsub)


def test_dropin_directory_plugin_handles_traffic(tmp_path):
    # A natsbroker/plugins directory (no __init__.py in it or in natsbroker/)
    # anywhere on sys.path is scanned, as x/twisted/plugins is by twistd.
    dropins = tmp_path / "site" / "natsbroker" / "plugins"
    dropins.mkdir(parents=True)
    (dropins / "echo_dropin.py").write_text(PLUGIN)
    # A bare "plugins" directory is nobody's namespace: not scanned.
    (tmp_path / "site" / "plugins").mkdir()
    (tmp_path / "site" / "plugins" / "shout_dropin.py").write_text(
        PLUGIN.replace('"echo', '"shout'))
    env = {"PYTHONPATH": str(tmp_path / "site")}
    with ServerProcess("natsbroker", [], env=env) as server:
        data, headers = _request(server.url, "echo.hi", b"there")
        with pytest.raises(nats.errors.NoRespondersError):
            _request(server.url, "shout.hi", b"there")
    assert data == b"echo.hi|1|there"
    assert headers == {"Echo-Plugin": "yes"}


def test_plugin_named_in_config(tmp_path):
    (tmp_path / "thirdparty_echo.py").write_text(PLUGIN)
    conf = tmp_path / "server.conf"
    conf.write_text('plugins: ["thirdparty_echo:echo"]\n')
    env = {"PYTHONPATH": str(tmp_path)}
    with ServerProcess("natsbroker", ["-c", str(conf)], env=env) as server:
        data, _ = _request(server.url, "echo.x.y", b"1")
    assert data == b"echo.x.y|1|1"


def test_bad_plugin_name_fails_startup(tmp_path):
    conf = tmp_path / "server.conf"
    conf.write_text('plugins: ["no_such_module_xyz:thing"]\n')
    server = ServerProcess("natsbroker", ["-c", str(conf)])
    try:
        server.start(timeout=30)
        raise AssertionError("server started with a missing plugin")
    except RuntimeError as e:
        assert "no_such_module_xyz" in str(e)
    finally:
        server.stop()
