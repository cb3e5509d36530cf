"""Stream snapshot and restore: the $JS.API.STREAM.SNAPSHOT/RESTORE protocol and
``natsbroker-admin backup/restore``, against real server processes.

The round trips go through natsbroker; the protocol and the API replies are
compared with nats-server's (the spec). The payload inside the chunks is each
server's own (nats-server: an s2 tar; natsbroker: :mod:`natsbroker.store.snapfile`).
"""

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tracemalloc

import nats
import pytest

from natsbroker.store import snapfile
from tests.support.servers import ROOT, ServerProcess
from tests.test_observed_live import rfc3339_ns

pytestmark = pytest.mark.timeout(180)

def Broker(args=("-js",)):
    return ServerProcess("natsbroker", list(args))


@pytest.fixture(scope="module")
def broker():
    with Broker() as b:
        yield b


@pytest.fixture(scope="module")
def reference():
    """nats-server with JetStream: the spec."""
    with ServerProcess("nats-server", ["-js"]) as s:
        yield s


def run(coro):
    return asyncio.run(coro)


def admin(*args, timeout=120):
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "natsbroker.admin", *args], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=timeout)


async def req(nc, subject, body=b"", timeout=10):
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
    msg = await nc.request(subject, body, timeout=timeout)
    return json.loads(msg.data)


# -- capturing a stream's complete observable state -----------------------------------

async def capture(nc, name):
    info = await req(nc, "$JS.API.STREAM.INFO." + name, {"deleted_details": True})
    assert "error" not in info, info
    st = info["state"]
    msgs = {}
    for seq in range(max(st["first_seq"], 1), st["last_seq"] + 1):
        r = await req(nc, "$JS.API.STREAM.MSG.GET." + name, {"seq": seq})
        if "error" in r:
            assert r["error"]["err_code"] == 10037, r
            continue
        msgs[seq] = r["message"]
    names = await req(nc, "$JS.API.CONSUMER.NAMES." + name)
    consumers = {}
    for cname in names.get("consumers") or []:
        ci = await req(nc, "$JS.API.CONSUMER.INFO.%s.%s" % (name, cname))
        cfg = dict(ci["config"])
        consumers[cname] = {
            "config": cfg,
            "delivered": {k: ci["delivered"][k] for k in ("consumer_seq", "stream_seq")},
            "ack_floor": {k: ci["ack_floor"][k] for k in ("consumer_seq", "stream_seq")},
            "num_ack_pending": ci["num_ack_pending"], "num_redelivered": ci["num_redelivered"],
            "num_pending": ci["num_pending"]}
    return {"config": info["config"], "state": st, "messages": msgs, "consumers": consumers}


async def build_stream(nc, name, storage="file", n=150):
    """Messages (some with headers, several subjects, varied sizes), interior and
    trailing deletes, a durable pull consumer with some acks and some pending, and
    a filtered durable push consumer."""
    js = nc.jetstream()
    await js.add_stream(name=name, subjects=["%s.>" % name.lower()], storage=storage)
    for i in range(n):
        hdr = {"X-Idx": str(i), "Nats-Msg-Id": "%s-%d" % (name, i)} if i % 3 == 0 else None
        data = os.urandom(i * 37 % 3000) if i % 5 else b""
        await js.publish("%s.%s" % (name.lower(), "abcde"[i % 5]), data, headers=hdr)
    for seq in (2, 3, n // 3, n // 2 + 1, n):
        await js.delete_msg(name, seq)
    await js.add_consumer(name, durable_name="WORKER", ack_policy="explicit", ack_wait=600)
    sub = await js.pull_subscribe("%s.>" % name.lower(), durable="WORKER", stream=name)
    got = await sub.fetch(12, timeout=10)
    for m in got[:5]:
        await m.ack()
    await got[7].ack()
    await js.add_consumer(name, durable_name="PUSHY", ack_policy="explicit",
                          deliver_subject="nowhere.%s" % name, filter_subject="%s.b" % name.lower())
    await nc.flush()
    # The acks were published without confirmation: wait until the consumer
    # shows them (not a fixed time).
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if (await js.consumer_info(name, "WORKER")).num_ack_pending == len(got) - 6:
            break
        await asyncio.sleep(0.05)


# -- round trips through the admin tool ---------------------------------------------------

@pytest.mark.parametrize("storage", ["file", "memory"])
def test_round_trip_with_admin_tool(broker, tmp_path, storage):
    name = "RT" + storage.upper()
    d = str(tmp_path / "backup")

    async def setup():
        nc = await nats.connect(broker.url)
        await build_stream(nc, name, storage)
        before = await capture(nc, name)
        await nc.close()
        return before

    before = run(setup())
    assert len(before["messages"]) == 145 and before["state"]["num_deleted"] == 5
    assert before["consumers"]["WORKER"]["num_ack_pending"] == 6

    out = admin("backup", name, d, "--server", broker.url, "--chunk-size", "4096")
    assert out.returncode == 0, out.stderr
    assert "chunks" in out.stderr and "/s" in out.stderr  # the progress bar
    assert "verified" in out.stderr
    manifest = json.load(open(os.path.join(d, "manifest.json")))
    assert manifest["format"] == "natsbroker" and manifest["messages"] == 145
    assert manifest["consumer_count"] == 2 and manifest["chunks"] > 10
    meta = json.load(open(os.path.join(d, "backup.json")))
    assert meta["config"]["name"] == name and meta["state"]["messages"] == 145

    out = admin("verify", d)
    assert out.returncode == 0 and "OK" in out.stderr, out.stderr

    async def delete():
        nc = await nats.connect(broker.url)
        await nc.jetstream().delete_stream(name)
        r = await req(nc, "$JS.API.STREAM.INFO." + name)
        assert r["error"]["err_code"] == 10059
        await nc.close()
    run(delete())

    out = admin("restore", d, "--server", broker.url, "--chunk-size", "3000")
    assert out.returncode == 0, out.stderr
    assert "restored stream %s" % name in out.stderr and "145 messages" in out.stderr

    async def after():
        nc = await nats.connect(broker.url)
        got = await capture(nc, name)
        # The restored consumer carries on where it was.
        js = nc.jetstream()
        sub = await js.pull_subscribe("%s.>" % name.lower(), durable="WORKER", stream=name)
        nxt = (await sub.fetch(1, timeout=10))[0]
        await nc.close()
        return got, nxt.metadata.sequence.stream

    got, next_seq = run(after())
    assert got["config"] == before["config"]
    assert got["state"] == before["state"]
    assert got["messages"] == before["messages"]
    assert got["consumers"] == before["consumers"]
    assert next_seq == before["consumers"]["WORKER"]["delivered"]["stream_seq"] + 1


def test_round_trip_edges(broker, tmp_path):
    """Empty streams, a purged stream (first_seq past last_seq), a stream whose
    first sequences were purged away, and no_consumers."""

    async def setup():
        nc = await nats.connect(broker.url)
        js = nc.jetstream()
        await js.add_stream(name="EMPTY", subjects=["empty"])
        await js.add_stream(name="PURGED", subjects=["purged.*"], storage="memory")
        for i in range(10):
            await js.publish("purged.x", b"%d" % i)
        await js.purge_stream("PURGED")
        await js.add_stream(name="TAIL", subjects=["tail"])
        for i in range(20):
            await js.publish("tail", b"%d" % i)
        await req(nc, "$JS.API.STREAM.PURGE.TAIL", {"seq": 15})
        await js.delete_msg("TAIL", 20)
        await js.add_consumer("TAIL", durable_name="C", ack_policy="explicit")
        out = {n: await capture(nc, n) for n in ("EMPTY", "PURGED", "TAIL")}
        await nc.close()
        return out

    before = run(setup())
    assert before["PURGED"]["state"]["first_seq"] == 11
    assert before["TAIL"]["state"]["first_seq"] == 15
    for n in before:
        extra = ["--no-consumers"] if n == "TAIL" else []
        out = admin("backup", n, str(tmp_path / n), "--server", broker.url, *extra)
        assert out.returncode == 0, out.stderr

    async def delete():
        nc = await nats.connect(broker.url)
        for n in before:
            await nc.jetstream().delete_stream(n)
        await nc.close()
    run(delete())
    for n in before:
        out = admin("restore", str(tmp_path / n), "--server", broker.url)
        assert out.returncode == 0, out.stderr

    async def after():
        nc = await nats.connect(broker.url)
        out = {n: await capture(nc, n) for n in before}
        await nc.close()
        return out

    got = run(after())
    for n in before:
        exp = before[n]
        if n == "TAIL":  # backed up without its consumer
            exp = dict(exp, consumers={}, state=dict(exp["state"], consumer_count=0))
        assert got[n] == exp, n


def test_restore_under_another_name(broker, tmp_path):
    async def setup():
        nc = await nats.connect(broker.url)
        js = nc.jetstream()
        await js.add_stream(name="ORIG", subjects=["orig.>"])
        for i in range(5):
            await js.publish("orig.%d" % i, b"x" * i)
        await nc.close()
    run(setup())
    d = str(tmp_path / "b")
    assert admin("backup", "ORIG", d, "--server", broker.url).returncode == 0
    # Same subjects as ORIG: refused at the end (overlap), nothing left behind.
    out = admin("restore", d, "--server", broker.url, "--stream", "COPY")
    assert out.returncode == 1, out.stderr
    assert ("restore of stream COPY: restore failed: error adding stream: subjects overlap with "
            "an existing stream (10065) (error 500/10062)") in out.stderr, out.stderr

    async def check():
        nc = await nats.connect(broker.url)
        r = await req(nc, "$JS.API.STREAM.INFO.COPY")
        assert r["error"]["err_code"] == 10059
        await nc.jetstream().delete_stream("ORIG")
        await nc.close()
    run(check())
    out = admin("restore", d, "--server", broker.url, "--stream", "COPY")
    assert out.returncode == 0, out.stderr

    async def check2():
        nc = await nats.connect(broker.url)
        r = await req(nc, "$JS.API.STREAM.INFO.COPY")
        assert r["state"]["messages"] == 5 and r["config"]["subjects"] == ["orig.>"]
        await nc.jetstream().delete_stream("COPY")
        await nc.close()
    run(check2())


def test_restore_over_existing_stream_refused(broker, tmp_path):
    d = str(tmp_path / "b")

    async def setup():
        nc = await nats.connect(broker.url)
        js = nc.jetstream()
        await js.add_stream(name="KEEP", subjects=["keep"])
        for i in range(7):
            await js.publish("keep", b"%d" % i)
        await nc.close()
    run(setup())
    assert admin("backup", "KEEP", d, "--server", broker.url).returncode == 0

    async def more():
        nc = await nats.connect(broker.url)
        await nc.jetstream().publish("keep", b"later")
        state = await capture(nc, "KEEP")
        await nc.close()
        return state
    before = run(more())

    out = admin("restore", d, "--server", broker.url)
    assert out.returncode == 1
    assert "stream name already in use, cannot restore" in out.stderr, out.stderr

    async def check():
        nc = await nats.connect(broker.url)
        got = await capture(nc, "KEEP")
        await nc.jetstream().delete_stream("KEEP")
        await nc.close()
        return got
    assert run(check()) == before


# -- damaged snapshots ------------------------------------------------------------------------

async def take_snapshot(nc, name, chunk_size=4096, ack=True):
    """The raw protocol: ``(response, [(reply, data, headers)], eof headers)``."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    resp = await req(nc, "$JS.API.STREAM.SNAPSHOT." + name,
                     {"deliver_subject": inbox, "chunk_size": chunk_size})
    chunks = []
    eof = None
    if "error" not in resp:
        while True:
            m = await sub.next_msg(timeout=15)
            if not m.data:
                eof = m.headers
                break
            chunks.append((m.reply, m.data, m.headers))
            if m.reply and ack:
                await nc.publish(m.reply, b"")
    await sub.unsubscribe()
    return resp, chunks, eof


async def send_restore(nc, name, meta, chunks):
    """RESTORE, then each chunk as a request; stops at the first non-empty
    answer. Returns ``(restore response, [chunk answers], final answer)``."""
    resp = await req(nc, "$JS.API.STREAM.RESTORE." + name, meta)
    if "error" in resp:
        return resp, [], None
    answers = []
    for c in chunks:
        a = await nc.request(resp["deliver_subject"], c, timeout=10)
        answers.append(a.data)
        if a.data:
            return resp, answers, None
    final = await nc.request(resp["deliver_subject"], b"", timeout=30)
    return resp, answers, json.loads(final.data)


def _stream_dirs(server):
    d = os.path.join(server.dir, "store", "jetstream", "streams")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def test_corrupt_chunk_creates_nothing(broker):
    async def go():
        nc = await nats.connect(broker.url)
        await build_stream(nc, "DAMAGE", n=60)
        resp, chunks, eof = await take_snapshot(nc, "DAMAGE", chunk_size=2048)
        assert eof == {"Status": "204"} and len(chunks) > 5
        meta = {"config": resp["config"], "state": resp["state"]}
        data = [c[1] for c in chunks]
        before = await capture(nc, "DAMAGE")
        await nc.jetstream().delete_stream("DAMAGE")

        # One flipped byte in the middle of the snapshot.
        bad = list(data)
        k = len(bad) // 2
        bad[k] = bad[k][:100] + bytes([bad[k][100] ^ 0x40]) + bad[k][101:]
        r, answers, final = await send_restore(nc, "DAMAGE", meta, bad)
        assert "deliver_subject" in r and len(answers) == k + 1
        err = json.loads(answers[-1])
        assert err["type"] == "io.nats.jetstream.api.v1.stream_create_response"
        assert err["error"]["err_code"] == 10062 and err["error"]["code"] == 500
        assert err["error"]["description"].startswith("restore failed: snapshot corrupt:")
        assert "DAMAGE" not in ((await req(nc, "$JS.API.STREAM.NAMES")).get("streams") or [])
        # The restore is over: its subject no longer answers.
        with pytest.raises(nats.errors.NoRespondersError):
            await nc.request(r["deliver_subject"], data[0], timeout=10)

        # A chunk lost: every record checks out, the digest does not.
        r, answers, final = await send_restore(nc, "DAMAGE", meta, data[:k] + data[k + 1:])
        assert final is not None or json.loads(answers[-1])["error"]["err_code"] == 10062
        if final is not None:
            assert final["error"]["err_code"] == 10062

        # Truncated: everything checks out but the end never came.
        r, answers, final = await send_restore(nc, "DAMAGE", meta, data[:-1])
        assert final == {"type": "io.nats.jetstream.api.v1.stream_create_response",
                         "error": {"code": 500, "err_code": 10062, "description":
                                   "restore failed: snapshot truncated: it ends before its digest"}}

        # Not ours at all.
        r, answers, final = await send_restore(nc, "DAMAGE", meta, [b"\xff\x06\x00\x00S2sTwO" + b"x" * 50])
        assert json.loads(answers[0])["error"]["description"] == \
            "restore failed: not a natsbroker snapshot (an s2 stream: nats-server's format?)"

        r = await req(nc, "$JS.API.STREAM.INFO.DAMAGE")
        assert r["error"]["err_code"] == 10059
        deadline = time.monotonic() + 10  # the failed restore's directory goes asynchronously
        while "DAMAGE" in _stream_dirs(broker) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert "DAMAGE" not in _stream_dirs(broker)

        # Nothing was left in the way: the intact snapshot restores.
        r, answers, final = await send_restore(nc, "DAMAGE", meta, data)
        assert answers == [b""] * len(data)
        assert final["type"] == "io.nats.jetstream.api.v1.stream_create_response"
        assert "error" not in final
        assert final["state"] == {k: v for k, v in before["state"].items() if k != "deleted"}
        assert await capture(nc, "DAMAGE") == before
        await nc.jetstream().delete_stream("DAMAGE")
        await nc.close()
    run(go())


def test_admin_tool_refuses_a_damaged_backup(broker, tmp_path):
    d = str(tmp_path / "b")

    async def setup():
        nc = await nats.connect(broker.url)
        js = nc.jetstream()
        await js.add_stream(name="DMG2", subjects=["dmg2"])
        for i in range(50):
            await js.publish("dmg2", os.urandom(500))
        await nc.close()
    run(setup())
    assert admin("backup", "DMG2", d, "--server", broker.url).returncode == 0

    async def drop():
        nc = await nats.connect(broker.url)
        await nc.jetstream().delete_stream("DMG2")
        await nc.close()
    run(drop())
    path = os.path.join(d, "stream.tar.s2")
    raw = bytearray(open(path, "rb").read())
    raw[len(raw) // 2] ^= 1
    open(path, "wb").write(raw)
    out = admin("restore", d, "--server", broker.url)
    assert out.returncode == 1, out.stderr
    assert "snapshot corrupt" in out.stderr or "damaged" in out.stderr, out.stderr
    # Even with a manifest that agrees, the snapshot's own checks catch it.
    import hashlib
    m = json.load(open(os.path.join(d, "manifest.json")))
    m["sha256"] = hashlib.sha256(raw).hexdigest()
    json.dump(m, open(os.path.join(d, "manifest.json"), "w"))
    out = admin("restore", d, "--server", broker.url)
    assert out.returncode == 1 and "snapshot corrupt" in out.stderr, out.stderr
    out = admin("verify", d)
    assert out.returncode == 1 and "snapshot corrupt" in out.stderr

    async def check():
        nc = await nats.connect(broker.url)
        r = await req(nc, "$JS.API.STREAM.INFO.DMG2")
        assert r["error"]["err_code"] == 10059
        await nc.close()
    run(check())


def test_admin_tool_errors(broker, tmp_path):
    out = admin("backup", "NOPE", str(tmp_path / "x"), "--server", broker.url)
    assert out.returncode == 1
    assert "natsbroker-admin: error: backup of stream NOPE: stream not found" in out.stderr
    assert not os.path.exists(tmp_path / "x" / "stream.tar.s2")
    out = admin("restore", str(tmp_path / "nothing"), "--server", broker.url)
    assert out.returncode == 1 and "no backup.json" in out.stderr
    out = admin("backup", "X", str(tmp_path / "y"), "--server", "nats://127.0.0.1:1")
    assert out.returncode == 1 and "cannot connect to nats://127.0.0.1:1" in out.stderr
    out = admin("backup")
    assert out.returncode == 2


def test_stream_created_during_restore_wins(broker):
    """nats-server lets a stream be created while a restore of that name is
    under way and fails the restore (10130); so do we, at the next chunk."""
    async def go():
        nc = await nats.connect(broker.url)
        await build_stream(nc, "RACE", n=40)
        resp, chunks, _ = await take_snapshot(nc, "RACE", chunk_size=1024)
        await nc.jetstream().delete_stream("RACE")
        meta = {"config": resp["config"], "state": resp["state"]}
        r = await req(nc, "$JS.API.STREAM.RESTORE.RACE", meta)
        for c in chunks[:3]:
            assert (await nc.request(r["deliver_subject"], c[1], timeout=10)).data == b""
        created = await req(nc, "$JS.API.STREAM.CREATE.RACE", {"name": "RACE", "subjects": ["other"]})
        assert created["did_create"] is True, created
        a = await nc.request(r["deliver_subject"], chunks[3][1], timeout=10)
        assert json.loads(a.data) == {"type": "io.nats.jetstream.api.v1.stream_create_response",
                                      "error": {"code": 400, "err_code": 10130, "description":
                                                "stream name already in use, cannot restore"}}
        info = await req(nc, "$JS.API.STREAM.INFO.RACE")
        assert info["config"]["subjects"] == ["other"] and info["state"]["messages"] == 0
        await nc.jetstream().publish("other", b"still works")
        assert (await req(nc, "$JS.API.STREAM.INFO.RACE"))["state"]["messages"] == 1
        await nc.jetstream().delete_stream("RACE")
        await nc.close()
    run(go())


def test_restore_interrupted_by_a_crash_leaves_nothing(tmp_path):
    store = str(tmp_path / "store")
    first = Broker(["-js", "-sd", store]).start()
    try:
        async def start_restore():
            nc = await nats.connect(first.url)
            await build_stream(nc, "CRASH", n=40)
            resp, chunks, _ = await take_snapshot(nc, "CRASH", chunk_size=1024)
            await nc.jetstream().delete_stream("CRASH")
            r = await req(nc, "$JS.API.STREAM.RESTORE.CRASH",
                          {"config": resp["config"], "state": resp["state"]})
            for c in chunks[:5]:
                await nc.request(r["deliver_subject"], c[1], timeout=10)
            await nc.close()
        run(start_restore())
        assert "CRASH" in os.listdir(os.path.join(store, "jetstream", "streams"))
    finally:
        first.stop(sig=9)
        shutil.rmtree(first.dir, ignore_errors=True)
    with Broker(["-js", "-sd", store]) as second:
        async def after():
            nc = await nats.connect(second.url)
            r = await req(nc, "$JS.API.STREAM.INFO.CRASH")
            assert r["error"]["err_code"] == 10059
            r = await req(nc, "$JS.API.STREAM.CREATE.CRASH", {"name": "CRASH"})
            assert r.get("did_create") is True, r
            await nc.close()
        run(after())
        assert "Unhandled" not in second.log()


# -- the protocol and replies, compared with nats-server ---------------------------------------

LOADED = time.time_ns()  # before any server of this module started
TS = re.compile(r'"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z)"')
NUID = re.compile(r"(\$JS\.SNAPSHOT\.(?:RESTORE|ACK)\.[A-Za-z0-9_-]+\.)[A-Za-z0-9]{22}")


def norm(value):
    text = json.dumps(value)
    for m in TS.finditer(text):  # what is blanked, checked: stamped while this module ran
        if m.group(1) != "0001-01-01T00:00:00Z":
            assert LOADED <= rfc3339_ns(m.group(1)) <= time.time_ns(), m.group(1)
    text = TS.sub('"TS"', text)
    text = NUID.sub(r"\1ID", text)
    value = json.loads(text)

    def walk(v):
        if isinstance(v, dict):
            meta = v.get("metadata")
            if isinstance(meta, dict):
                for k in ("_nats.ver", "_nats.level"):
                    meta.pop(k, None)
            for x in v.values():
                walk(x)
    walk(value)
    return value


API_SCRIPT = [
    ("$JS.API.STREAM.SNAPSHOT.SS", b""),
    ("$JS.API.STREAM.SNAPSHOT.SS", b"{}"),
    ("$JS.API.STREAM.SNAPSHOT.SS", b"{bad"),
    ("$JS.API.STREAM.SNAPSHOT.NOPE", b'{"deliver_subject":"x"}'),
    ("$JS.API.STREAM.SNAPSHOT.NOPE", b"{bad"),
    ("$JS.API.STREAM.SNAPSHOT.SS", b'{"deliver_subject":""}'),
    ("$JS.API.STREAM.SNAPSHOT.SS", b'{"deliver_subject":"a b"}'),
    ("$JS.API.STREAM.SNAPSHOT.SS", b'{"deliver_subject":"x.*"}'),
    ("$JS.API.STREAM.SNAPSHOT.SS", b'{"deliver_subject":"x","foo":1}'),
    ("$JS.API.STREAM.SNAPSHOT.SS", b'{"deliver_subject":5}'),
    ("$JS.API.STREAM.SNAPSHOT.SS", b'{"deliver_subject":"x","chunk_size":"a"}'),
    ("$JS.API.STREAM.SNAPSHOT.SS", b"null"),
    ("$JS.API.STREAM.SNAPSHOT.SS", b"[]"),
    ("$JS.API.STREAM.SNAPSHOT.SS", b'{"no_consumers":true}'),
    ("$JS.API.STREAM.RESTORE.R", b""),
    ("$JS.API.STREAM.RESTORE.R", b"{}"),
    ("$JS.API.STREAM.RESTORE.R", b"{bad"),
    ("$JS.API.STREAM.RESTORE.R", b'{"config":{"name":"X"}}'),
    ("$JS.API.STREAM.RESTORE.R", b'{"config":{"name":"R","foo":1}}'),
    ("$JS.API.STREAM.RESTORE.R", b'{"config":{"name":"R"},"foo":1}'),
    ("$JS.API.STREAM.RESTORE.R", b'{"config":{"name":"R","max_msgs":"x"}}'),
    ("$JS.API.STREAM.RESTORE.R", b'{"config":{"name":"R"}} x'),
    ("$JS.API.STREAM.RESTORE.R", b"[]"),
    ("$JS.API.STREAM.RESTORE.SS", b'{"config":{"name":"SS","subjects":["ss.>"]}}'),
    ("$JS.API.STREAM.RESTORE.SS", b'{"state":{"messages":1}}'),
]


async def api_replies(url):
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="SS", subjects=["ss.>"])
    for i in range(5):
        await js.publish("ss.%d" % (i % 2), b"payload %d" % i, headers={"H": str(i)})
    await js.delete_msg("SS", 2)
    out = []
    for subject, body in API_SCRIPT:
        m = await nc.request(subject, body, timeout=10)
        out.append((subject, body, norm(json.loads(m.data))))
    # A successful snapshot request (chunks discarded by nobody listening: the
    # servers give up on their own).
    r = await req(nc, "$JS.API.STREAM.SNAPSHOT.SS", {"deliver_subject": "nobody.listens"})
    assert set(r["config"]["metadata"]) == {"_nats.req.level"}  # no reply-only keys here
    out.append(("snapshot ok", b"", norm(r)))
    # Restores that were started and left: accepted with a deliver subject.
    r = await req(nc, "$JS.API.STREAM.RESTORE.NEWONE", {"config": {"name": "NEWONE"}})
    out.append(("restore ok", b"", norm(r)))
    await nc.close()
    return out


def test_api_replies_as_nats_server(broker, reference):
    ours = run(api_replies(broker.url))
    theirs = run(api_replies(reference.url))
    for (subj, body, a), (_, _, b) in zip(ours, theirs):
        assert a == b, (subj, body)


async def protocol_trace(url, name, nbytes):
    """Snapshot a stream of random payloads (incompressible) with 1 KiB chunks
    (the smallest allowed) and restore it; the shape of everything but the
    bytes inside the chunks."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name=name, subjects=[name.lower()])
    for i in range(nbytes // 1000):
        await js.publish(name.lower(), os.urandom(1000))
    resp, chunks, eof = await take_snapshot(nc, name, chunk_size=10)
    trace = {"response": norm(resp), "eof": eof}
    shape = []
    for i, (reply, data, headers) in enumerate(chunks):
        shape.append((NUID.sub(r"\1ID", reply or ""), len(data) == 1024, headers))
    # Full chunks with ack subjects numbered from 1, then a short one without.
    assert all(s == ("$JS.SNAPSHOT.ACK.%s.ID.1024.%d" % (name, i + 1), True, None)
               for i, s in enumerate(shape[:-1])), shape[:3]
    trace["last"] = shape[-1][0] == "" and not shape[-1][1]
    trace["several"] = len(chunks) > 3
    info_before = await req(nc, "$JS.API.STREAM.INFO." + name)
    await js.delete_stream(name)
    meta = {"config": resp["config"], "state": resp["state"]}
    r, answers, final = await send_restore(nc, name, meta, [c[1] for c in chunks])
    trace["restore"] = norm(r)
    trace["acks"] = set(answers)
    trace["final"] = norm(final)
    assert final["state"] == info_before["state"]
    # Over the existing stream now.
    r = await req(nc, "$JS.API.STREAM.RESTORE." + name, meta)
    trace["existing"] = norm(r)
    # What only the stream's creation at the end refuses.
    data = [c[1] for c in chunks]
    for what, change in (("overlap", {}), ("replicas", {"subjects": ["elsewhere"], "num_replicas": 3})):
        cfg = dict(meta["config"], name=name + "X", **change)
        r, answers, final = await send_restore(nc, name + "X", dict(meta, config=cfg), data)
        trace[what] = (norm(r), final)
    # A small stream fits one chunk: no ack subject, EOF without status.
    await js.add_stream(name=name + "1", subjects=[name.lower() + "1"])
    await js.publish(name.lower() + "1", b"x")
    resp, chunks, eof = await take_snapshot(nc, name + "1", chunk_size=1 << 20)
    trace["small"] = ([c[0] for c in chunks], eof)
    # Garbage restored: acknowledged chunk by chunk by nats-server (which only
    # looks at the end), refused at once by natsbroker; the same final error.
    await js.delete_stream(name + "1")
    r = await req(nc, "$JS.API.STREAM.RESTORE.%s1" % name, {"config": {"name": name + "1"}})
    a = await nc.request(r["deliver_subject"], b"garbage" * 100, timeout=10)
    if not a.data:
        a = await nc.request(r["deliver_subject"], b"", timeout=10)
    err = json.loads(a.data)
    err["error"]["description"] = err["error"]["description"].split(":")[0]
    trace["garbage"] = err
    await nc.close()
    return trace


def test_protocol_as_nats_server(broker, reference):
    ours = run(protocol_trace(broker.url, "PROTO", 20000))
    theirs = run(protocol_trace(reference.url, "PROTO", 20000))
    assert ours["several"] and theirs["several"]
    assert ours == theirs
    assert ours["eof"] == {"Status": "204"}
    assert ours["small"] == ([""], None)
    assert ours["existing"]["error"]["err_code"] == 10130
    assert ours["replicas"][1]["error"] == {
        "code": 500, "err_code": 10062, "description": "restore failed: error adding stream: "
        "replicas > 1 not supported in non-clustered mode (10074)"}
    assert ours["acks"] == {b""}
    assert ours["garbage"] == {"type": "io.nats.jetstream.api.v1.stream_create_response",
                               "error": {"code": 500, "err_code": 10062,
                                         "description": "restore failed"}}


async def stalled_snapshot(url, name):
    """A client that never acknowledges: the window fills (8 MiB) and the server
    gives up after a while with a 408 status."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name=name, subjects=[name.lower()])
    for i in range(95):  # incompressible: nats-server's s2 does not shrink it
        await js.publish(name.lower(), os.urandom(100_000))
    resp, chunks, eof = await take_snapshot(nc, name, chunk_size=1 << 20, ack=False)
    await js.delete_stream(name)
    await nc.close()
    return sum(len(c[1]) for c in chunks), len(chunks), eof


def test_no_flow_response_as_nats_server(broker, reference):
    async def both():
        return await asyncio.gather(stalled_snapshot(broker.url, "STALL"),
                                    stalled_snapshot(reference.url, "STALL"))
    ours, theirs = run(both())
    assert ours[2] == theirs[2] == {"Status": "408", "Description": "No Flow Response"}
    assert ours[0] == theirs[0] == 8 * 1024 * 1024 and ours[1] == theirs[1] == 8


# -- nats-server through the admin tool -----------------------------------------------------

def test_admin_tool_with_nats_server(reference, broker, tmp_path):
    d = str(tmp_path / "ns")

    async def setup():
        nc = await nats.connect(reference.url)
        js = nc.jetstream()
        await js.add_stream(name="NSB", subjects=["nsb.>"])
        for i in range(40):
            await js.publish("nsb.%d" % (i % 3), os.urandom(2000), headers={"I": str(i)})
        await js.delete_msg("NSB", 7)
        state = await capture(nc, "NSB")
        await nc.close()
        return state
    before = run(setup())
    out = admin("backup", "NSB", d, "--server", reference.url, "--chunk-size", "8192")
    assert out.returncode == 0, out.stderr
    assert json.load(open(os.path.join(d, "manifest.json")))["format"] == "nats-server"
    # natsbroker cannot read nats-server's snapshots: a clear refusal.
    out = admin("restore", d, "--server", broker.url)
    assert out.returncode == 1 and "not a natsbroker snapshot" in out.stderr, out.stderr

    async def drop():
        nc = await nats.connect(reference.url)
        await nc.jetstream().delete_stream("NSB")
        await nc.close()
    run(drop())
    out = admin("restore", d, "--server", reference.url)
    assert out.returncode == 0, out.stderr

    async def after():
        nc = await nats.connect(reference.url)
        got = await capture(nc, "NSB")
        await nc.close()
        return got
    got = run(after())
    assert got["messages"] == before["messages"]
    assert got["state"] == before["state"]


# -- streaming: bounded memory ------------------------------------------------------------------

class _Msg:
    __slots__ = ("seq", "subject", "hdr", "data", "ts")

    def __init__(self, seq, data):
        self.seq, self.subject, self.hdr, self.data, self.ts = seq, b"big", b"", data, seq


class _HugeStore:
    """A 100 MB stream that exists only as it is read."""

    SIZE = 100_000
    COUNT = 1000

    def state(self):
        from natsbroker.store.base import StreamState
        return StreamState(self.COUNT, self.COUNT * self.SIZE, 1, 1, self.COUNT, self.COUNT, 1, 0)

    def load_next(self, seq, filt=None):
        if seq > self.COUNT:
            return None
        return _Msg(seq, bytes([seq % 256]) * self.SIZE)


def test_snapshot_streams_without_loading_the_stream(monkeypatch):
    from types import SimpleNamespace

    from natsbroker.jetstream import snapshot, stream_config as SC, stream_models as SM

    cfg = SC.fill_defaults(SM.StreamConfig(name="BIG"))
    stream = SimpleNamespace(name="BIG", config=cfg, created=1, consumers={}, store=_HugeStore())
    js = SimpleNamespace(broker=SimpleNamespace(reactor=None), streams={"BIG": stream})
    monkeypatch.setattr(snapshot, "_state_json", lambda s: {})
    sender = snapshot.Sender(js, stream, "inbox", 128 * 1024, True)
    reader = snapfile.Reader()
    total = 0
    tracemalloc.start()
    try:
        while True:
            item = sender._read_chunk()
            if item is None:
                break
            reader.feed(item[0])
            total += len(item[0])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    reader.finish()
    assert reader.messages == 1000 and total > 100_000_000
    assert peak < 4_000_000, peak


def test_snapfile_round_trip_and_damage():
    w = snapfile.Writer()
    msgs = [snapfile.Message(s, s * 10, b"a.b", b"NATS/1.0\r\nX: y\r\n\r\n" if s % 2 else b"",
                             b"data%d" % s) for s in (3, 4, 9)]
    blob = w.magic() + w.json(b"S", {"format": 1, "stream": "T", "state": {"first_seq": 3}})
    for m in msgs:
        blob += w.message(m)
    blob += w.json(b"E", {"last_seq": 12, "last_ts": 5, "messages": 3, "bytes": 0, "consumers": 0})
    blob += w.close()
    seen = []
    r = snapfile.Reader(lambda k, v: seen.append((k, v)))
    for i in range(0, len(blob), 7):  # fed in awkward pieces
        r.feed(blob[i:i + 7])
    r.finish()
    assert [v for k, v in seen if k == "M"] == msgs
    for pos in range(len(blob)):  # every single damaged byte is caught
        bad = bytearray(blob)
        bad[pos] ^= 0x10
        with pytest.raises(snapfile.SnapshotError):
            r = snapfile.Reader()
            r.feed(bytes(bad))
            r.finish()
    with pytest.raises(snapfile.SnapshotError, match="truncated"):
        r = snapfile.Reader()
        r.feed(blob[:-40])
        r.finish()


@pytest.mark.parametrize("option, value, error", [
    ("--timeout", "0", "must be positive: '0'"),
    ("--timeout", "soon", "not a number: 'soon'"),
    ("--chunk-size", "-5", "must be positive: '-5'"),
    ("--chunk-size", "1.5", "not a number: '1.5'"),
])
def test_admin_rejects_bad_numbers(tmp_path, option, value, error):
    """A bad --timeout or --chunk-size: usage error (exit 2) naming it, nothing written."""
    out = admin("backup", "S", str(tmp_path / "b"), option, value, timeout=60)
    assert out.returncode == 2
    assert "argument %s: %s" % (option, error) in out.stderr
    assert not (tmp_path / "b").exists()
