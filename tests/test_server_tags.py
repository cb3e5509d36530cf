"""``server_tags`` and ``jetstream { unique_tag }`` as nats-server reads
them: refusals in its words, tags trimmed, lower-cased and kept once, shown
in /varz and in statsz (where a JetStream meta leader's placement reads
them)."""

import asyncio
import json

import nats
import pytest

from tests.support.http import get_json
from tests.support.servers import ServerProcess
from tests.test_config_unknown_keys import _both, _write


@pytest.mark.parametrize("value", ["5", "true", "{a: 1}", "[true]"])
def test_bad_server_tags_refused_as_by_nats_server(tmp_path, value):
    got = _both(_write(tmp_path, "port: -1\nserver_tags: %s" % value), "-t")
    assert got["natsbroker"] == got["nats-server"]
    assert got["natsbroker"][0] == 1


def test_server_tags_in_varz_and_statsz(tmp_path):
    conf = tmp_path / "tags.conf"
    conf.write_text(
        'listen: 127.0.0.1:-1\nhttp: 127.0.0.1:-1\nserver_name: tagged\n'
        'server_tags: ["AZ:1", " ssd ", "az:1", ""]\n'
        'jetstream { store_dir: %s, unique_tag: " AZ: " }\n'
        'accounts { SYS { users [ {user: sys, password: pw} ] } }\nsystem_account: SYS\n'
        % json.dumps(str(tmp_path / "js")))
    seen = {}
    for kind in ("nats-server", "natsbroker"):
        with ServerProcess(kind, ["-c", str(conf)]) as s:
            varz = get_json(s.http_port, "/varz")

            async def statsz():
                nc = await nats.connect(s.url, user="sys", password="pw")
                try:
                    m = await nc.request("$SYS.REQ.SERVER.PING.STATSZ", b"", timeout=5)
                    return json.loads(m.data)["server"]
                finally:
                    await nc.close()
            server = asyncio.run(statsz())
            keys = list(server)
            seen[kind] = (varz.get("tags"), server.get("tags"),
                          keys[keys.index("ver") + 1] if "ver" in keys else None)
    assert seen["natsbroker"] == seen["nats-server"]
    assert seen["natsbroker"][0] == ["az:1", "ssd"]
