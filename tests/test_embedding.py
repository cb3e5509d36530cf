"""Embedding natsbroker (issue 17 item 3): the pytest plugin's fixtures, run
through pytester in a pytest of their own (README's example test verbatim),
and :mod:`natsbroker.embed` used directly from sync and asyncio code."""

import asyncio
import os
import textwrap
import time

import nats
import pytest

from natsbroker import embed
from tests.support.clients import flushed
from tests.support.servers import ROOT

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.timeout(300)


def readme_example():
    text = open(os.path.join(ROOT, "README.md")).read()
    block = text.split("<!-- test example -->", 1)[1].split("```python\n", 1)[1]
    return block.split("```", 1)[0]


def run(coro, timeout=60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def until_delivered(sub, pub_nc, subject, timeout=30):
    """Publish on ``pub_nc`` until ``sub`` gets it: subscription interest
    reaches other nodes a little after SUB."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        await pub_nc.publish(subject, b"across")
        try:
            return await sub.next_msg(timeout=0.2)
        except nats.errors.TimeoutError:
            continue
    raise AssertionError("no message across the cluster in %ss" % timeout)


# -- the pytest plugin ------------------------------------------------------------------

def test_readme_example_passes_with_the_plugin(pytester):
    example = readme_example()
    assert 8 <= len(example.strip().splitlines()) <= 15 and "natsbroker_server" in example
    pytester.makepyfile(test_readme=example)
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", timeout=240)
    result.assert_outcomes(passed=1)


def test_factory_and_cluster_fixtures(pytester):
    pytester.makepyfile(test_fixtures=textwrap.dedent('''
        import asyncio, os, time
        import nats

        PIDS = []

        def test_factory(natsbroker_factory):
            a = natsbroker_factory("max_payload: 1024\\nserver_name: custom", jetstream=False)
            b = natsbroker_factory(args=["--user", "u", "--pass", "p"])
            PIDS.extend([a.pid, b.pid])
            assert a.url != b.url and a.http_url.startswith("http://127.0.0.1:")

            async def scenario():
                nc = await nats.connect(a.url)
                assert nc.max_payload == 1024
                assert nc._server_info["server_name"] == "custom"
                assert not nc._server_info.get("jetstream")
                await nc.close()
                nc = await nats.connect(b.url, user="u", password="p")
                assert nc._server_info["jetstream"]
                await nc.close()
            asyncio.run(scenario())

        def test_factory_brokers_stopped_at_teardown():
            assert len(PIDS) == 2
            for pid in PIDS:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    continue
                raise AssertionError("broker %d still running" % pid)

        def test_cluster(natsbroker_cluster):
            assert len(natsbroker_cluster.urls) == 3

            async def loop():
                a = await nats.connect(natsbroker_cluster[0].url)
                c = await nats.connect(natsbroker_cluster[2].url)
                sub = await c.subscribe("x")
                await c.flush()
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    await a.publish("x", b"hi")
                    try:
                        msg = await sub.next_msg(timeout=0.2)
                    except nats.errors.TimeoutError:
                        continue
                    await a.close(); await c.close()
                    return msg.data
            assert asyncio.run(loop()) == b"hi"
    '''))
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", timeout=240)
    result.assert_outcomes(passed=3)


def test_plugin_can_be_turned_off(pytester):
    pytester.makepyfile(test_off="def test_x(natsbroker_server):\n    pass\n")
    result = pytester.runpytest_subprocess("-q", "-p", "no:natsbroker", "-p", "no:cacheprovider",
                                           timeout=120)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*fixture 'natsbroker_server' not found*"])


# -- natsbroker.embed directly ------------------------------------------------------------

def test_start_sync_pub_sub_and_stop():
    broker = embed.start(jetstream=False)
    workdir = broker.workdir
    try:
        assert broker.running and broker.url == "nats://127.0.0.1:%d" % broker.port

        async def scenario():
            nc = await nats.connect(broker.url)
            sub = await nc.subscribe("greet")
            await nc.publish("greet", b"hello")
            assert (await sub.next_msg(timeout=5)).data == b"hello"
            assert not nc._server_info.get("jetstream")
            await nc.close()
        run(scenario())
    finally:
        status = broker.stop()
    assert status == 0 and not broker.running
    assert not os.path.exists(workdir)  # the temporary directory went with it
    assert broker.stop() == 0  # stopping twice is harmless


def test_start_async_with_jetstream_and_kept_store(tmp_path):
    async def scenario():
        async with embed.BrokerProcess(workdir=tmp_path / "w") as broker:
            nc = await nats.connect(broker.url)
            js = nc.jetstream()
            await js.add_stream(name="S", subjects=["s.>"])
            await js.publish("s.1", b"kept")
            await nc.close()
            return broker
    broker = run(scenario())
    assert not broker.running
    assert broker.store_dir == str(tmp_path / "w" / "store")
    assert os.path.isdir(os.path.join(broker.store_dir, "jetstream"))  # a given workdir stays

    # The same store again: the message is still there.
    async def again():
        async with embed.BrokerProcess(store_dir=broker.store_dir) as b2:
            nc = await nats.connect(b2.url)
            msg = await nc.jetstream().get_msg("S", 1)
            await nc.close()
            return msg.data
    assert run(again()) == b"kept"


def test_config_text_and_flags():
    with embed.start("server_name: from-config\nmax_payload: 2048", jetstream=False,
                     args=["--auth", "s3cret"]) as broker:
        async def scenario():
            nc = await nats.connect(broker.url, token="s3cret")
            assert nc.max_payload == 2048 and nc._server_info["server_name"] == "from-config"
            await nc.close()
        run(scenario())
        assert "from-config" in open(os.path.join(broker.workdir, "natsbroker.conf")).read()


def test_start_failure_reports_the_log():
    with pytest.raises(embed.BrokerStartError) as err:
        embed.start("max_payload: [not a size", jetstream=False)
    assert "exited with status" in str(err.value)


def test_cluster_helper_carries_a_message_across_nodes():
    with embed.start_cluster(3, name="embedtest") as cluster:
        nodes = list(cluster)
        assert len(set(cluster.urls)) == 3 and all(s.cluster_url for s in nodes)

        async def scenario():
            a = await nats.connect(cluster[0].url)
            c = await nats.connect(cluster[2].url)
            sub = await c.subscribe("across")
            await flushed(c)
            msg = await until_delivered(sub, a, "across")
            await a.close()
            await c.close()
            return msg.data
        assert run(scenario()) == b"across"
    assert not any(s.running for s in nodes) and cluster.servers == []
