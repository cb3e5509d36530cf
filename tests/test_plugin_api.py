"""What a third-party plugin can do with the public API alone (issue 30):
each test loads a plugin module from a temporary directory, as an author's
package would be, into a real server process."""

import asyncio
import json
import os
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


MONITOR_PLUGIN = textwrap.dedent('''
    """An endpoint with a decoded query, and a health check switched by a subject."""
    from zope.interface import implementer

    from natsbroker.interfaces import IBrokerPlugin, IHealthCheck

    @implementer(IBrokerPlugin, IHealthCheck)
    class Plugin:
        name = "probe"

        def __init__(self, config):
            self.problem = None

        def start(self, broker):
            broker.add_monitor_endpoint("probez", lambda request: {"query": request.query})
            refused = []
            for path in ("healthz", "/varz/", "probez"):
                try:
                    broker.add_monitor_endpoint(path, lambda request: {})
                except ValueError as e:
                    refused.append(str(e))
            broker.add_monitor_endpoint("refusedz", lambda request: {"refused": refused})
            broker.subscribe("probe.problem", self.on_problem)

        def stop(self):
            pass

        def on_problem(self, sub, subject, reply, hdr_len, raw):
            self.problem = raw[hdr_len:].decode() or None

        def health_check(self):
            return self.problem
''')


def _get(server, path):
    url = "http://127.0.0.1:%d%s" % (server.http_port, path)
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


async def _publish(url, subject, payload):
    nc = await nats.connect(url)
    try:
        await nc.publish(subject, payload)
        await nc.flush()
    finally:
        await nc.close()


def test_endpoint_query_taken_paths_and_health_check(tmp_path):
    conf = _write(tmp_path, "probe_plugin", MONITOR_PLUGIN)
    with ServerProcess("natsbroker", ["-c", str(conf), "-m", "-1"], env=_path(tmp_path)) as server:
        assert _get(server, "/probez?a=1&b=&a=%20x&c") == (
            200, {"query": {"a": ["1", " x"], "b": [""], "c": [""]}})
        assert _get(server, "/refusedz") == (200, {"refused": [
            "monitor endpoint /healthz is taken", "monitor endpoint /varz is taken",
            "monitor endpoint /probez is taken"]})
        assert _get(server, "/healthz") == (200, {"status": "ok"})
        asyncio.run(_publish(server.url, "probe.problem", b"disk full"))
        assert _get(server, "/healthz") == (503, {"status": "unavailable",
                                                  "error": "probe: disk full"})
        assert _get(server, "/healthz?details=true") == (503, {
            "status": "unavailable",
            "errors": [{"type": "PLUGIN", "error": "probe: disk full"}]})
        asyncio.run(_publish(server.url, "probe.problem", b""))
        assert _get(server, "/healthz") == (200, {"status": "ok"})


def test_builtin_monitor_paths_are_the_monitors_own():
    from twisted.internet.task import Clock

    from natsbroker.broker import BUILTIN_MONITOR_PATHS, Broker
    from natsbroker.config.model import ServerConfig
    from natsbroker.monitoring.http import MonitorResource
    resource = MonitorResource(Broker(ServerConfig(), Clock()))
    assert {p.strip("/") for p in resource._builtin} == BUILTIN_MONITOR_PATHS


STATE_PLUGIN = textwrap.dedent('''
    """Counts its starts in its store directory; one hidden and one shown subscription."""
    import os

    from zope.interface import implementer

    from natsbroker.interfaces import IBrokerPlugin

    @implementer(IBrokerPlugin)
    class Plugin:
        name = "keeper"

        def __init__(self, config):
            pass

        def start(self, broker):
            d = broker.store_path("keeper")
            os.makedirs(d, mode=0o700, exist_ok=True)
            path = os.path.join(d, "starts")
            starts = int(open(path).read()) + 1 if os.path.exists(path) else 1
            with open(path, "w") as f:
                f.write(str(starts))
            answer = lambda sub, subject, reply, h, raw: broker.publish(reply, b"%d|%s" % (starts, d.encode()))
            broker.subscribe("keeper.hidden", answer, hidden=True)
            broker.subscribe("keeper.shown", answer)

        def stop(self):
            pass
''')


def test_store_path_keeps_state_and_hidden_subscriptions(tmp_path):
    conf = _write(tmp_path, "keeper_plugin", STATE_PLUGIN)
    store = tmp_path / "store"
    args = ["-c", str(conf), "-m", "-1", "-sd", str(store)]
    for starts in (1, 2):
        with ServerProcess("natsbroker", args, env=_path(tmp_path)) as server:
            got = asyncio.run(_request(server.url, "keeper.hidden"))
            assert got == b"%d|%s" % (starts, str(store / "keeper").encode())
            assert asyncio.run(_request(server.url, "keeper.shown")) == got
            _, subsz = _get(server, "/subsz?subs=1")
            _, varz = _get(server, "/varz")
    subjects = [s["subject"] for s in subsz["subscriptions_list"]]
    assert "keeper.shown" in subjects and "keeper.hidden" not in subjects
    assert subsz["num_subscriptions"] == len(subjects) == varz["subscriptions"]
    # Without -sd: ./data, as JetStream's default.
    with ServerProcess("natsbroker", ["-c", str(conf)], env=_path(tmp_path)) as server:
        got = asyncio.run(_request(server.url, "keeper.hidden"))
        assert got == b"1|%s" % os.path.join(server.dir, "data", "keeper").encode()


ACCOUNTS_PLUGIN = textwrap.dedent('''
    """Answers whoami.plugin in every account; lists the account events at /eventsz."""
    from zope.interface import implementer

    from natsbroker.interfaces import IAccountObserver, IBrokerPlugin

    @implementer(IBrokerPlugin, IAccountObserver)
    class Plugin:
        name = "accounts-watch"

        def __init__(self, config):
            self.events = []

        def start(self, broker):
            broker.add_monitor_endpoint("eventsz", lambda request: {"events": self.events})

        def stop(self):
            pass

        def account_added(self, account):
            self.events.append(["added", account.name])
            def answer(sub, subject, reply, hdr_len, raw, account=account):
                if reply:
                    account.publish(reply, account.name.encode())
            account.subscribe("whoami.plugin", answer, hidden=True)

        def account_updated(self, account):
            self.events.append(["updated", account.name])

        def account_removed(self, account):
            self.events.append(["removed", account.name])
''')


def test_account_events_for_config_accounts(tmp_path):
    conf = _write(tmp_path, "watch_plugin", ACCOUNTS_PLUGIN, conf=(
        "accounts { A { users = [{user: a, password: a}] }, "
        "B { users = [{user: b, password: b}] } }\n"))
    with ServerProcess("natsbroker", ["-c", str(conf), "-m", "-1"], env=_path(tmp_path)) as server:
        _, events = _get(server, "/eventsz")
        who = [asyncio.run(_request("nats://%s:%s@127.0.0.1:%d" % (u, u, server.port), "whoami.plugin"))
               for u in ("a", "b")]
    assert sorted(events["events"]) == [["added", "$G"], ["added", "$SYS"], ["added", "A"],
                                        ["added", "B"]]
    assert who == [b"A", b"B"]


def test_account_events_for_jwt_accounts(tmp_path):
    from natsbroker.auth.jwt import claims as C
    from tests.test_jwt import creds
    from tests.test_jwt_updates import Keys, P, _update
    keys = Keys()
    jwts = tmp_path / "jwts"
    jwts.mkdir()
    for kp, token in [(keys.sys, keys.sys_jwt), (keys.a, keys.a_jwt)]:
        (jwts / ("%s.jwt" % P(kp))).write_text(token)
    (tmp_path / "op.jwt").write_text(keys.operator_jwt)
    conf = _write(tmp_path, "watch_plugin", ACCOUNTS_PLUGIN, conf=(
        "operator: %s\nsystem_account: %s\nresolver { type: full, dir: %s, allow_delete: true }\n"
        % (tmp_path / "op.jwt", P(keys.sys), jwts)))

    async def run(server):
        sc = await nats.connect(server.url, user_credentials=creds(tmp_path, *keys.user(keys.sys),
                                                                  name="sys.creds"))
        user = await nats.connect(server.url, user_credentials=creds(tmp_path, *keys.user(keys.a)))
        who = (await user.request("whoami.plugin", b"", timeout=10)).data
        assert (await _update(sc, keys.account(keys.a, "A", subs=5)))["message"] == "jwt updated"
        req = C.encode("generic", P(keys.op), keys.op, nats={"accounts": [P(keys.a)]})
        await sc.request("$SYS.REQ.CLAIMS.DELETE", req.encode(), timeout=5)
        await user.close()
        await sc.close()
        return who

    with ServerProcess("natsbroker", ["-c", str(conf), "-m", "-1"], env=_path(tmp_path)) as server:
        who = asyncio.run(run(server))
        _, events = _get(server, "/eventsz")
    a = P(keys.a)
    assert who == a.encode()
    assert [e for e in events["events"] if e[1] == a] == [["added", a], ["updated", a], ["removed", a]]
    assert ["added", P(keys.sys)] in events["events"]


BLOCK_PLUGIN = textwrap.dedent('''
    """Owns the greeter { ... } block of the config file."""
    import json

    from twisted.plugin import IPlugin
    from zope.interface import implementer

    from natsbroker.interfaces import IBrokerPlugin, IBrokerPluginFactory

    @implementer(IBrokerPlugin)
    class Greeter:
        name = "greeter"

        def __init__(self, config):
            self.block = config.plugin_config.get("greeter")

        def start(self, broker):
            broker.subscribe("greet", lambda sub, subject, reply, h, raw:
                             broker.publish(reply, json.dumps(self.block).encode()))

        def stop(self):
            pass

    @implementer(IPlugin, IBrokerPluginFactory)
    class Factory:
        name = "greeter"
        order = 60
        config_block = "greeter"

        def make_plugin(self, config):
            return Greeter(config)

    greeter = Factory()
''')


def test_plugin_config_block(tmp_path):
    (tmp_path / "greeter_plugin.py").write_text(BLOCK_PLUGIN)
    conf = tmp_path / "server.conf"
    conf.write_text('plugins: ["greeter_plugin:greeter"]\n'
                    'GREETER { greeting: "hello", subjects: [a, b], limits { n: 5, size: 1KB } }\n')
    with ServerProcess("natsbroker", ["-c", str(conf)], env=_path(tmp_path)) as server:
        got = json.loads(asyncio.run(_request(server.url, "greet")))
    assert got == {"greeting": "hello", "subjects": ["a", "b"], "limits": {"n": 5, "size": 1024}}
    # Without the plugin, the block is nats-server's unknown field.
    conf.write_text('greeter { greeting: "hello" }\n')
    for kind in ("nats-server", "natsbroker"):
        server = ServerProcess(kind, ["-c", str(conf)], env=_path(tmp_path))
        try:
            server.start()
            raise AssertionError("%s started" % kind)
        except RuntimeError as e:
            assert 'server.conf:1:0: unknown field "greeter"' in str(e), (kind, str(e))
        finally:
            server.stop()


def _fatal_start(command, env, cwd):
    import subprocess
    p = subprocess.run(command, capture_output=True, env=env, cwd=cwd, timeout=60)
    return p.returncode, (p.stdout + p.stderr).decode(errors="replace")


def test_broken_dropin_stops_the_server(tmp_path):
    import re
    import shutil
    import sys

    from tests.support.servers import broker_command
    dropins = tmp_path / "site" / "natsbroker" / "plugins"
    dropins.mkdir(parents=True)
    (dropins / "broken_dropin.py").write_text("import no_such_module_for_natsbroker\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "site") + os.pathsep + ROOT)
    twistd = os.path.join(os.path.dirname(sys.executable), "twistd")
    assert shutil.which(twistd)
    # natsbroker: nats-server's [FTL] line, its last; twistd: the same text
    # as a critical line of its own log format.
    status, out = _fatal_start(broker_command() + ["-p", "-1"], env, str(tmp_path))
    assert status == 1 and "Traceback" not in out, out
    assert re.search(r"\[FTL\] " + WHY + "$", out.splitlines()[-1]), out
    status, out = _fatal_start([twistd, "-n", "--pidfile=", "natsbroker", "--port", "-1"], env,
                               str(tmp_path))
    assert status == 1 and "Traceback" not in out, out
    assert len(re.findall(r"#critical\] " + WHY + "\n", out)) == 1, out


WHY = (r"cannot load plugin natsbroker\.plugins\.broken_dropin \(.*broken_dropin\.py\): "
       r"ModuleNotFoundError: No module named 'no_such_module_for_natsbroker'")
