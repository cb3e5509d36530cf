"""The server-side $OBJ.<bucket> API over the raw protocol, interoperating
with nats-py's object store on the same bucket."""

import asyncio
import base64
import hashlib
import json
import os

import nats
import pytest

from tests.support.raw import Raw, count
from tests.support.servers import ServerProcess


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ServerProcess("natsbroker", ["-js", "-sd", str(tmp_path_factory.mktemp("js"))]) as s:
        yield s


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


async def _bucket(server, name):
    nc = await nats.connect(server.url)
    js = nc.jetstream()
    obs = await js.create_object_store(name)
    return nc, obs


def make_bucket(server, name):
    async def main():
        nc, _ = await _bucket(server, name)
        await nc.close()
    run(main())


def digest(data):
    return "SHA-256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode()


def upload(r, bucket, name, data, chunk=100_000, nonce=None, **extra):
    nonce = nonce or "N" + os.urandom(8).hex()
    chunks = [data[i:i + chunk] for i in range(0, len(data), chunk)]
    meta = {"name": name, "nonce": nonce, "chunks": len(chunks), "size": len(data)}
    meta.update(extra)
    r.pub("$OBJ.%s.info.%s" % (bucket, name), meta, "_R.meta")
    for i, c in enumerate(chunks):
        r.pub("$OBJ.%s.chunks.%s" % (bucket, nonce), c, "_R.put" if i == len(chunks) - 1 else None)
    return r.frames(until=count(1, lambda f: f.subject in ("_R.put", "_R.meta")), limit=10)


def test_upload_raw_then_read_with_nats_py(server):
    data = os.urandom(350_000)
    make_bucket(server, "RAWUP")
    r = Raw(server.port)
    try:
        r.sub("_R.>", 1)
        got = upload(r, "RAWUP", "blob.bin", data, description="raw upload")
    finally:
        r.close()
    info = json.loads(got[0].payload)
    assert (info["name"], info["size"], info["chunks"], info["digest"], info["description"]) == (
        "blob.bin", 350_000, 4, digest(data), "raw upload")

    async def read():
        nc, obs = await _bucket(server, "RAWUP")
        try:
            res = await obs.get("blob.bin")
            return res.data, res.info
        finally:
            await nc.close()
    back, meta = run(read())
    assert back == data and meta.size == 350_000 and meta.digest == digest(data)


def test_put_with_nats_py_then_info_get_list_delete_raw(server):
    data = os.urandom(300_000)

    async def put():
        nc, obs = await _bucket(server, "PYPUT")
        try:
            await obs.put("a.txt", data)
            await obs.put("b.txt", b"small")
        finally:
            await nc.close()
    run(put())
    r = Raw(server.port)
    try:
        r.sub("_R.>", 1)
        r.sub("_DL.a", 2)
        r.pub("$OBJ.PYPUT.info", {"name": "a.txt"}, "_R.info")
        info = json.loads(r.frames(until=count(1))[0].payload)
        r.pub("$OBJ.PYPUT.get", {"name": "a.txt", "deliver_subject": "_DL.a"}, "_R.get")
        frames = r.frames(until=count(1, lambda f: f.header.startswith(b"NATS/1.0 204")), limit=10)
        r.pub("$OBJ.PYPUT", b"", "_R.list")
        listing = json.loads(r.frames(until=count(1))[0].payload)
        r.pub("$OBJ.PYPUT.delete", {"name": "b.txt"}, "_R.del")
        deleted = json.loads(r.frames(until=count(1))[0].payload)
        r.pub("$OBJ.PYPUT", {"name": "b.txt"}, "_R.gone")
        gone = json.loads(r.frames(until=count(1))[0].payload)
        r.pub("$OBJ.NOBUCKET", {"name": "x"}, "_R.nob")
        nobucket = json.loads(r.frames(until=count(1))[0].payload)
    finally:
        r.close()
    assert (info["name"], info["size"], info["digest"]) == ("a.txt", 300_000, digest(data))
    reply = [f for f in frames if f.subject == "_R.get"]
    chunks = [f.payload for f in frames if f.subject == "_DL.a" and not f.header]
    end = [f for f in frames if f.header.startswith(b"NATS/1.0 204")]
    assert json.loads(reply[0].payload)["name"] == "a.txt"
    assert b"".join(chunks) == data and len(chunks) == 3  # 128 KiB chunks
    assert b"Nats-Object-Digest: %s" % digest(data).encode() in end[0].header
    assert [o["name"] for o in listing["objects"]] == ["a.txt", "b.txt"]
    assert deleted == {"success": True}
    assert gone == {"error": {"code": 404, "description": "object not found"}}
    assert nobucket == {"error": {"code": 404, "description": "bucket not found"}}

    async def check():
        nc, obs = await _bucket(server, "PYPUT")
        try:
            return [i.name for i in await obs.list(ignore_deletes=True)]
        finally:
            await nc.close()
    assert run(check()) == ["a.txt"]


def test_bad_uploads_leave_the_existing_object(server):
    make_bucket(server, "BAD")
    r = Raw(server.port)
    try:
        r.sub("_R.>", 1)
        ok = json.loads(upload(r, "BAD", "doc", b"version one")[0].payload)
        wrong_size = json.loads(upload(r, "BAD", "doc", b"two", size=99)[0].payload)
        wrong_digest = json.loads(upload(r, "BAD", "doc", b"three", digest=digest(b"x"))[0].payload)
        reused = json.loads(upload(r, "BAD", "other", b"x", nonce=ok["nuid"])[0].payload)
        refused_chunk = json.loads(r.frames(until=count(1))[0].payload)  # its chunk has no upload
        r.pub("$OBJ.BAD.chunks.nobody", b"x", "_R.stray")
        stray = json.loads(r.frames(until=count(1))[0].payload)
        r.pub("$OBJ.BAD.info.doc", b"{not json", "_R.junk")
        junk = json.loads(r.frames(until=count(1))[0].payload)
        r.pub("$OBJ.BAD.get", {"name": "doc"}, "_R.nodest")
        nodest = json.loads(r.frames(until=count(1))[0].payload)
        r.pub("$OBJ.BAD.info", {"name": "doc"}, "_R.after")
        after = json.loads(r.frames(until=count(1))[0].payload)
    finally:
        r.close()
    assert ok["size"] == 11
    assert wrong_size["error"]["description"] == "size mismatch: announced 99, received 3"
    assert wrong_digest["error"]["description"] == "digest mismatch"
    assert reused == {"error": {"code": 409, "description": "nonce already in use"}}
    assert refused_chunk["error"]["code"] == 404
    assert stray["error"]["code"] == 404
    assert junk["error"]["code"] == 400
    assert nodest == {"error": {"code": 400, "description": "deliver_subject required"}}
    assert (after["size"], after["digest"]) == (11, digest(b"version one"))

    async def stream_state():
        nc = await nats.connect(server.url)
        try:
            info = await nc.jetstream().stream_info("OBJ_BAD", subjects_filter=">")
            return info.state.subjects
        finally:
            await nc.close()
    # Only the surviving object's chunk and meta remain: failed uploads' chunks are purged.
    assert sorted(run(stream_state()).values()) == [1, 1]
