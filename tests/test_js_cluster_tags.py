"""``server_tags`` and ``jetstream { unique_tag }`` in a JetStream cluster:
placement by tag and one replica per tag value, the same on a three-server
nats-server cluster and a natsbroker one."""

import asyncio
import json

import nats
import pytest

from tests.support.cluster import run_on_cluster

pytestmark = [pytest.mark.long, pytest.mark.xdist_group("clusters"), pytest.mark.timeout(300)]

ZONES = {"js-a": "az:1", "js-b": "az:1", "js-c": "az:2"}


def _conf(tmp_path, name, ports):
    path = tmp_path / ("%s.conf" % name)
    routes = ["nats://127.0.0.1:%d" % p for n, p in ports.items() if n != name]
    path.write_text("server_name: %s\nserver_tags: [%s, \"disk:%s\"]\n"
                    "listen: 127.0.0.1:-1\nhttp: 127.0.0.1:-1\n"
                    "jetstream { store_dir: %s, unique_tag: \"AZ:\" }\n"
                    "cluster { name: jsc, listen: 127.0.0.1:%d, routes: %s }\n"
                    % (name, json.dumps(ZONES[name]), name, json.dumps(str(tmp_path / name)),
                       ports[name], json.dumps(routes)))
    return ["-c", str(path)]


async def _create(nc, cfg):
    for _ in range(60):
        r = json.loads((await nc.request("$JS.API.STREAM.CREATE." + cfg["name"],
                                         json.dumps(cfg).encode(), timeout=10)).data)
        if "error" not in r or r["error"]["err_code"] not in (10008, 10023) and \
                "peer offline" not in r["error"]["description"]:
            return r
        await asyncio.sleep(0.5)
    return r


async def _scenario(servers):
    nc = await nats.connect(servers["js-a"].url)
    try:
        out = {}
        r = await _create(nc, {"name": "R3", "subjects": ["r3"], "num_replicas": 3})
        out["r3"] = r.get("error")
        r = await _create(nc, {"name": "R2", "subjects": ["r2"], "num_replicas": 2})
        assert "error" not in r, r
        names = {r["cluster"]["leader"]} | {p["name"] for p in r["cluster"].get("replicas") or ()}
        out["r2 zones"] = sorted(ZONES[n] for n in names)
        r = await _create(nc, {"name": "ON2", "subjects": ["on2"],
                               "placement": {"tags": ["az:2"]}})
        assert "error" not in r, r
        out["on az:2"] = r["cluster"]["leader"]
        r = await _create(nc, {"name": "ONB", "subjects": ["onb"],
                               "placement": {"tags": ["DISK:JS-B"]}})
        out["on disk:js-b"] = r.get("error") or r["cluster"]["leader"]
        r = await _create(nc, {"name": "NONE", "subjects": ["none"],
                               "placement": {"tags": ["az:3"]}})
        out["on az:3"] = r.get("error")
        return out
    finally:
        await nc.close()


def test_placement_by_server_tags_and_unique_tag(tmp_path):
    reference = run_on_cluster(tmp_path, "nats-server", _conf, _scenario)
    got = run_on_cluster(tmp_path, "natsbroker", _conf, _scenario)
    assert got == reference
    assert got["r2 zones"] == ["az:1", "az:2"] and got["on az:2"] == "js-c"
    assert got["r3"]["err_code"] == 10005
