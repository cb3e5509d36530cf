"""What a third-party plugin can do with the public API alone (issue 30):
each test loads a plugin module from a temporary directory, as an author's
package would be, into a real server process."""

import asyncio
import os
import json
import textwrap
import urllib.error
import urllib.request

import nats

from tests.support.raw import exchange
from tests.support.servers import ROOT, ServerProcess

CONNECT = b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\n'

FILTER_PLUGIN = textwrap.dedent('''
    """Refuses publishes to secret.> as a permission violation, counts the rest."""
    from zope.interface import implementer

    from natsbroker.interfaces import IBrokerPlugin, IClientOpFilter
    from natsbroker.protocol.parser import OP_HPUB, OP_PUB

    @implementer(IBrokerPlugin, IClientOpFilter)
    class Guard:
        name = "guard"

        def __init__(self, config):
            self.passed = 0

        def start(self, broker):
            broker.subscribe("guard.count", self.on_count)
            self.broker = broker

        def stop(self):
            pass

        def on_count(self, sub, subject, reply, hdr_len, raw):
            self.broker.publish(reply, b"%d" % self.passed)

        def client_op_filters(self, client):
            def guard(op):
                if op[1].startswith(b"secret."):
                    client.permission_violation(op[1])
                    return None
                self.passed += 1
                return op
            return {OP_PUB: guard, OP_HPUB: guard}
''')


def _write(tmp_path, name, text, conf=""):
    (tmp_path / (name + ".py")).write_text(text)
    path = tmp_path / "server.conf"
    path.write_text('plugins: ["%s:%s"]\n%s' % (name, _factory(text), conf))
    return path


def _factory(text):
    return "Guard" if "class Guard" in text else "Plugin"


def _run_conversation(port):
    return exchange(port, CONNECT + b"SUB > 1\r\nPUB secret.x 2\r\nhi\r\nPUB open.x 2\r\nok\r\n"
                    b"HPUB secret.y 12 14\r\nNATS/1.0\r\n\r\nhi\r\nPING\r\n")


def test_publish_filter_refuses_like_nats_server_permissions(tmp_path):
    # nats-server refuses with a user's deny list; the plugin with a filter:
    # the same -ERR, the connection stays, the allowed message is delivered.
    ref_conf = tmp_path / "ref.conf"
    ref_conf.write_text('authorization { users = [ {user: a, password: b, '
                        'permissions: {publish: {deny: ["secret.>"]}}} ] }\n')
    with ServerProcess("nats-server", ["-c", str(ref_conf)]) as ref:
        want = exchange(ref.port, b'CONNECT {"verbose":false,"headers":true,"user":"a","pass":"b"}\r\n'
                        b"SUB > 1\r\nPUB secret.x 2\r\nhi\r\nPUB open.x 2\r\nok\r\n"
                        b"HPUB secret.y 12 14\r\nNATS/1.0\r\n\r\nhi\r\nPING\r\n")
    conf = _write(tmp_path, "guard_plugin", FILTER_PLUGIN)
    with ServerProcess("natsbroker", ["-c", str(conf)], env=_path(tmp_path)) as server:
        got = _run_conversation(server.port)
        count = asyncio.run(_request(server.url, "guard.count"))
    assert got == want
    assert got[0].count(b"-ERR 'Permissions Violation for Publish to") == 2
    assert b"MSG open.x 1 2\r\nok" in got[0] and b"MSG secret" not in got[0]
    assert count == b"2"  # open.x and guard.count itself


async def _request(url, subject, payload=b""):
    nc = await nats.connect(url)
    try:
        return (await nc.request(subject, payload, timeout=10)).data
    finally:
        await nc.close()


def _path(tmp_path):
    # The plugin's directory, then this tree (the environment's replaces
    # ServerProcess's own PYTHONPATH).
    return {"PYTHONPATH": str(tmp_path) + os.pathsep + ROOT}
