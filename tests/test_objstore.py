"""nats-py Object Store buckets against nats-server and natsbroker.

An object store is, for the client, a convention over a JetStream stream
``OBJ_<bucket>`` on ``$O.<bucket>.C.>`` (chunks, one subject per object
nuid) and ``$O.<bucket>.M.>`` (one JSON meta message per object, keyed by the
base64url object name, published with ``Nats-Rollup: sub``). Reads go through
last-by-subject message gets and ordered push consumers; deletes and
overwrites purge the chunk subject.

Every expected value below was observed from nats-server 2.15.1 (the spec).
"""

import asyncio
import base64
import hashlib
import io
import json
import os

import nats
import nats.errors
import pytest
from nats.js.api import ObjectLink, ObjectMeta, ObjectMetaOptions, StorageType
from nats.js.errors import (
    BucketNotFoundError,
    LinkIsABucketError,
    NotFoundError,
    ObjectAlreadyExists,
    ObjectDeletedError,
    ObjectNotFoundError,
)

from tests.support.both import both, both_servers, connect_js
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.timeout(90)

API_TIMEOUT = 10.0
CHUNK = 128 * 1024


server = both_servers("obj")


def run(coro, timeout=60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def _conn(server):
    return connect_js(server.url, API_TIMEOUT)


async def err_of(coro):
    try:
        await coro
    except Exception as e:  # noqa: BLE001 - the error is the result
        return e
    return None


def api_err(e):
    return (type(e).__name__, e.code, e.err_code, e.description)


def digest(data):
    return "SHA-256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode()


def meta_subject(bucket, name):
    return "$O.%s.M.%s" % (bucket, base64.urlsafe_b64encode(name.encode()).decode())


def info_t(i):
    """An ObjectInfo as a comparable tuple (the None end-of-initial marker stays None)."""
    if i is None:
        return None
    return (i.name, i.size, i.chunks, bool(i.deleted))


async def initial(watcher, timeout=10.0):
    out = []
    while True:
        i = await watcher.updates(timeout)
        out.append(info_t(i))
        if i is None:
            return out


class Reader:
    """A plain object with readinto (neither bytes nor a BufferedIOBase)."""

    def __init__(self, data):
        self._buf = io.BytesIO(data)
        self.calls = 0

    def readinto(self, b):
        self.calls += 1
        return self._buf.readinto(b)


# --------------------------------------------------------------------------
# buckets


@both()
def test_create_status_bind_delete(server):
    async def main():
        nc, js = await _conn(server)
        try:
            obs = await js.create_object_store("OB1", description="objects", ttl=3600)
            st = await obs.status()
            again = await js.create_object_store("OB1", description="objects", ttl=3600)
            bound = await js.object_store("OB1")
            await bound.put("x", b"data")
            st2 = await obs.status()
            missing = await err_of(js.object_store("NOPE_OBJ"))
            mem = await js.create_object_store("OB1M", storage=StorageType.MEMORY, max_bytes=4096)
            st_mem = await mem.status()
            deleted = await js.delete_object_store("OB1")
            await js.delete_object_store("OB1M")
            gone = await err_of(js.object_store("OB1"))
            return st, again, st2, missing, st_mem, deleted, gone
        finally:
            await nc.close()

    st, again, st2, missing, st_mem, deleted, gone = run(main())
    assert (st.bucket, st.description, st.ttl, st.storage_type, st.replicas, st.sealed, st.size) == (
        "OB1", "objects", 3600.0, StorageType.FILE, 1, False, 0)
    c = st.stream_info.config
    assert c.name == "OBJ_OB1" and c.subjects == ["$O.OB1.C.>", "$O.OB1.M.>"]
    assert (c.discard, c.allow_rollup_hdrs, c.allow_direct, c.max_bytes, c.max_msgs) == (
        "new", True, True, -1, -1)
    assert c.max_consumers == -1 and c.max_msgs_per_subject == -1
    assert again._stream == "OBJ_OB1"
    assert st2.stream_info.state.messages == 2 and st2.size > 4
    assert isinstance(missing, BucketNotFoundError)
    assert (st_mem.storage_type, st_mem.stream_info.config.max_bytes, st_mem.ttl) == (
        StorageType.MEMORY, 4096, 0.0)
    assert deleted is True
    assert isinstance(gone, BucketNotFoundError)


# --------------------------------------------------------------------------
# put / get


@both()
def test_put_get_bytes_and_meta_message(server):
    async def main():
        nc, js = await _conn(server)
        try:
            obs = await js.create_object_store("OB2")
            meta = ObjectMeta(name="dir/hello.txt", description="greeting",
                              headers={"Content-Type": "text/plain"})
            put = await obs.put("dir/hello.txt", b"hello world", meta=meta)
            got = await obs.get("dir/hello.txt")
            info = await obs.get_info("dir/hello.txt")
            raw_meta = await js.get_last_msg("OBJ_OB2", meta_subject("OB2", "dir/hello.txt"))
            raw_chunk = await js.get_last_msg("OBJ_OB2", "$O.OB2.C.%s" % put.nuid)
            s = await obs.put("s", "a string")
            empty = await obs.put("empty", b"")
            got_empty = await obs.get("empty")
            missing = await err_of(obs.get("nope"))
            missing_info = await err_of(obs.get_info("nope"))
            st = await obs.status()
            await js.delete_object_store("OB2")
            return put, got, info, raw_meta, raw_chunk, s, empty, got_empty, missing, missing_info, st
        finally:
            await nc.close()

    put, got, info, raw_meta, raw_chunk, s, empty, got_empty, missing, missing_info, st = run(main())
    assert (put.name, put.bucket, put.size, put.chunks, put.digest) == (
        "dir/hello.txt", "OB2", 11, 1, digest(b"hello world"))
    assert len(put.nuid) == 22
    assert got.data == b"hello world"
    for i in (got.info, info):
        assert (i.name, i.bucket, i.nuid, i.size, i.chunks, i.digest, i.deleted) == (
            "dir/hello.txt", "OB2", put.nuid, 11, 1, digest(b"hello world"), False)
        assert (i.description, i.headers) == ("greeting", {"Content-Type": "text/plain"})
        assert i.options.max_chunk_size == CHUNK and not i.is_link()
    assert raw_meta.subject == "$O.OB2.M.ZGlyL2hlbGxvLnR4dA=="
    assert dict(raw_meta.headers) == {"Nats-Rollup": "sub"}
    doc = json.loads(raw_meta.data)
    assert (doc["name"], doc["bucket"], doc["size"], doc["chunks"], doc["nuid"]) == (
        "dir/hello.txt", "OB2", 11, 1, put.nuid)
    assert (raw_chunk.seq, raw_chunk.data, raw_chunk.headers) == (1, b"hello world", None)
    assert (s.size, s.chunks, s.digest) == (8, 1, digest(b"a string"))
    assert (empty.size, empty.chunks, empty.digest) == (0, 0, digest(b""))
    assert got_empty.data == b"" and got_empty.info.size == 0
    assert isinstance(missing, ObjectNotFoundError)
    assert isinstance(missing_info, ObjectNotFoundError)
    assert st.stream_info.state.messages == 5  # 2 chunks + 3 meta


@both()
def test_put_file_and_streams_in_chunks(server, tmp_path):
    data = os.urandom(3 * CHUNK + 1234)
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    dst = tmp_path / "dst.bin"
    small = os.urandom(10_500)

    async def main():
        nc, js = await _conn(server)
        try:
            obs = await js.create_object_store("OB3")
            with open(src, "rb") as f:
                from_file = await obs.put("file.bin", f)
            with open(dst, "wb") as f:
                into = await obs.get("file.bin", writeinto=f)
            stream = await obs.put("small", io.BytesIO(small), meta=ObjectMeta(
                name="small", options=ObjectMetaOptions(max_chunk_size=1000)))
            got_small = await obs.get("small")
            reader = Reader(small)
            from_reader = await obs.put("reader", reader, meta=ObjectMeta(
                name="reader", options=ObjectMetaOptions(max_chunk_size=4096)))
            got_reader = await obs.get("reader")
            chunk_msgs = []
            for seq in range(from_file.chunks + 2, from_file.chunks + 5):
                m = await js.get_msg("OBJ_OB3", seq)
                chunk_msgs.append((m.subject, len(m.data)))
            st = await obs.status()
            await js.delete_object_store("OB3")
            return from_file, into, stream, got_small, from_reader, reader.calls, got_reader, \
                chunk_msgs, st
        finally:
            await nc.close()

    from_file, into, stream, got_small, from_reader, calls, got_reader, chunk_msgs, st = run(main())
    assert (from_file.size, from_file.chunks, from_file.digest) == (len(data), 4, digest(data))
    assert dst.read_bytes() == data and into.data == b"" and into.info.chunks == 4
    assert (stream.size, stream.chunks, stream.digest) == (10_500, 11, digest(small))
    assert got_small.data == small and got_small.info.options.max_chunk_size == 1000
    assert (from_reader.size, from_reader.chunks) == (10_500, 3) and calls == 4
    assert got_reader.data == small
    assert chunk_msgs == [("$O.OB3.C.%s" % stream.nuid, 1000)] * 3
    assert st.stream_info.state.messages == 4 + 1 + 11 + 1 + 3 + 1


@both()
def test_overwrite_purges_old_chunks(server):
    first = os.urandom(2 * CHUNK + 5)

    async def main():
        nc, js = await _conn(server)
        try:
            obs = await js.create_object_store("OB4")
            a = await obs.put("obj", first)
            b = await obs.put("obj", b"second")
            got = await obs.get("obj")
            st = await obs.status()
            old = await err_of(js.get_last_msg("OBJ_OB4", "$O.OB4.C.%s" % a.nuid))
            await js.delete_object_store("OB4")
            return a, b, got, st, old
        finally:
            await nc.close()

    a, b, got, st, old = run(main())
    assert a.chunks == 3 and b.chunks == 1 and a.nuid != b.nuid
    assert got.data == b"second" and got.info.nuid == b.nuid
    s = st.stream_info.state
    assert (s.messages, s.first_seq, s.last_seq) == (2, 5, 6)
    assert api_err(old) == ("NotFoundError", 404, 10037, "no message found")


@both()
def test_delete(server):
    async def main():
        nc, js = await _conn(server)
        try:
            obs = await js.create_object_store("OB5")
            put = await obs.put("gone", os.urandom(CHUNK + 1))
            await obs.put("kept", b"k")
            res = await obs.delete("gone")
            info = await err_of(obs.get_info("gone"))
            shown = await obs.get_info("gone", show_deleted=True)
            got_deleted = await obs.get("gone", show_deleted=True)
            again = await err_of(obs.delete("gone"))
            chunks = await err_of(js.get_last_msg("OBJ_OB5", "$O.OB5.C.%s" % put.nuid))
            st = await obs.status()
            re_put = await obs.put("gone", b"back")
            back = await obs.get("gone")
            await js.delete_object_store("OB5")
            return res, info, shown, got_deleted, again, chunks, st, re_put, back
        finally:
            await nc.close()

    res, info, shown, got_deleted, again, chunks, st, re_put, back = run(main())
    assert res is None
    assert isinstance(info, ObjectNotFoundError)
    assert (shown.name, shown.deleted, shown.size, shown.chunks, shown.digest, shown.nuid) == (
        "gone", True, 0, 0, "", shown.nuid)
    assert got_deleted.data == b"" and got_deleted.info.deleted
    assert isinstance(again, ObjectNotFoundError)
    assert api_err(chunks) == ("NotFoundError", 404, 10037, "no message found")
    s = st.stream_info.state
    assert (s.messages, s.first_seq, s.last_seq) == (3, 4, 6)  # kept: chunk + meta; gone: meta
    assert (re_put.size, re_put.chunks) == (4, 1) and back.data == b"back"


@both()
def test_list(server):
    async def main():
        nc, js = await _conn(server)
        try:
            obs = await js.create_object_store("OB6")
            empty = await err_of(obs.list())
            for n in ("b", "a", "c", "d"):
                await obs.put(n, n.encode() * 3)
            await obs.delete("a")
            await obs.put("b", b"bb")
            everything = [(i.name, i.size, bool(i.deleted)) for i in await obs.list()]
            live = [i.name for i in await obs.list(ignore_deletes=True)]
            await obs.delete("c")
            await obs.delete("d")
            await obs.delete("b")
            only_deleted = await err_of(obs.list(ignore_deletes=True))
            await js.delete_object_store("OB6")
            return empty, everything, live, only_deleted
        finally:
            await nc.close()

    empty, everything, live, only_deleted = run(main())
    assert isinstance(empty, NotFoundError)
    assert everything == [("c", 3, False), ("d", 3, False), ("a", 0, True), ("b", 2, False)]
    assert live == ["c", "d", "b"]
    assert isinstance(only_deleted, NotFoundError)


# --------------------------------------------------------------------------
# watch


@both()
def test_watch(server):
    async def main():
        nc, js = await _conn(server)
        try:
            obs = await js.create_object_store("OB7")
            out = {}
            w_empty = await obs.watch()
            out["empty"] = await initial(w_empty)
            await obs.put("a", b"1")
            await obs.put("b", b"22")
            await obs.put("a", b"333")
            w = await obs.watch()
            out["init"] = await initial(w)
            w_hist = await obs.watch(include_history=True)
            out["hist"] = await initial(w_hist)
            w_new = await obs.watch(updates_only=True)
            w_nodel = await obs.watch(ignore_deletes=True)
            out["nodel_init"] = await initial(w_nodel)
            await obs.put("c", b"4444")
            await obs.delete("b")
            out["live"] = [info_t(await w.updates(10)) for _ in range(2)]
            out["empty_live"] = [info_t(await w_empty.updates(10)) for _ in range(5)]
            out["new"] = [info_t(await w_new.updates(10)) for _ in range(2)]
            out["nodel_live"] = [info_t(await w_nodel.updates(10))]
            try:
                await w_nodel.updates(0.3)
                out["nodel_quiet"] = False
            except nats.errors.TimeoutError:
                out["nodel_quiet"] = True
            for x in (w_empty, w, w_hist, w_new, w_nodel):
                await x.stop()
            await js.delete_object_store("OB7")
            return out
        finally:
            await nc.close()

    out = run(main())
    assert out["empty"] == [None]
    assert out["init"] == [("b", 2, 1, False), ("a", 3, 1, False), None]
    # a's first meta was rolled up by the second: history is what the stream still holds
    assert out["hist"] == [("b", 2, 1, False), ("a", 3, 1, False), None]
    assert out["nodel_init"] == [("b", 2, 1, False), ("a", 3, 1, False), None]
    assert out["live"] == [("c", 4, 1, False), ("b", 0, 0, True)]
    assert out["empty_live"] == [("a", 1, 1, False), ("b", 2, 1, False), ("a", 3, 1, False),
                                 ("c", 4, 1, False), ("b", 0, 0, True)]
    assert out["new"] == [("c", 4, 1, False), ("b", 0, 0, True)]
    assert out["nodel_live"] == [("c", 4, 1, False)] and out["nodel_quiet"]


# --------------------------------------------------------------------------
# links, seal, meta updates


def link_meta(name, bucket, target=None):
    # nats-py needs max_chunk_size whenever options are given
    return ObjectMeta(name=name, options=ObjectMetaOptions(
        link=ObjectLink(bucket=bucket, name=target), max_chunk_size=CHUNK))


@both()
def test_links(server):
    async def main():
        nc, js = await _conn(server)
        try:
            target = await js.create_object_store("OB8T")
            await target.put("real", b"the real data")
            obs = await js.create_object_store("OB8")
            link = await obs.put("alias", b"", meta=link_meta("alias", "OB8T", "real"))
            dir_link = await obs.put("dir", b"", meta=link_meta("dir", "OB8T"))
            info = await obs.get_info("alias")
            via = await obs.get("alias")
            as_bucket = await err_of(obs.get("dir"))
            dangling = await obs.put("dangling", b"", meta=link_meta("dangling", "OB8T", "no"))
            broken = await err_of(obs.get("dangling"))
            raw = json.loads((await js.get_last_msg("OBJ_OB8", meta_subject("OB8", "alias"))).data)
            for b in ("OB8", "OB8T"):
                await js.delete_object_store(b)
            return link, dir_link, info, via, as_bucket, dangling, broken, raw
        finally:
            await nc.close()

    link, dir_link, info, via, as_bucket, dangling, broken, raw = run(main())
    assert link.is_link() and (link.size, link.chunks) == (0, 0)
    assert dir_link.is_link() and dir_link.options.link.name is None
    assert dangling.is_link()
    assert info.is_link() and (info.options.link.bucket, info.options.link.name) == ("OB8T", "real")
    assert via.data == b"the real data" and via.info.name == "real" and via.info.bucket == "OB8T"
    assert isinstance(as_bucket, LinkIsABucketError)
    assert isinstance(broken, ObjectNotFoundError)
    assert raw["options"]["link"] == {"bucket": "OB8T", "name": "real"}


@both()
def test_seal(server):
    async def main():
        nc, js = await _conn(server)
        try:
            obs = await js.create_object_store("OB9")
            await obs.put("a", b"before")
            await obs.seal()
            st = await obs.status()
            put_err = await err_of(obs.put("b", b"after"))
            del_err = await err_of(obs.delete("a"))
            got = await obs.get("a")
            purge_err = await err_of(js.purge_stream("OBJ_OB9"))
            st2 = await obs.status()
            await js.delete_object_store("OB9")
            return st, put_err, del_err, got, purge_err, st2
        finally:
            await nc.close()

    st, put_err, del_err, got, purge_err, st2 = run(main())
    assert st.sealed is True and st.stream_info.config.sealed is True
    assert st.stream_info.config.deny_delete and st.stream_info.config.deny_purge
    assert api_err(put_err) == ("BadRequestError", 400, 10109, "invalid operation on sealed stream")
    assert api_err(del_err) == ("BadRequestError", 400, 10109, "invalid operation on sealed stream")
    assert got.data == b"before"
    assert api_err(purge_err) == ("BadRequestError", 400, 10109, "invalid operation on sealed stream")
    assert st2.stream_info.state.messages == 2


@both()
def test_update_meta(server):
    async def main():
        nc, js = await _conn(server)
        try:
            obs = await js.create_object_store("OB10")
            put = await obs.put("doc", b"contents", meta=ObjectMeta(name="doc", description="v1"))
            await obs.update_meta("doc", ObjectMeta(name="doc", description="v2",
                                                    headers={"X-A": "1"}))
            info = await obs.get_info("doc")
            got = await obs.get("doc")
            rename = await err_of(obs.update_meta("doc", ObjectMeta(name="other")))
            missing = await err_of(obs.update_meta("nope", ObjectMeta(name="nope")))
            st = await obs.status()
            await js.delete_object_store("OB10")
            return put, info, got, rename, missing, st
        finally:
            await nc.close()

    put, info, got, rename, missing, st = run(main())
    assert (info.name, info.description, info.headers) == ("doc", "v2", {"X-A": "1"})
    assert (info.nuid, info.size, info.digest) == (put.nuid, 8, digest(b"contents"))
    assert got.data == b"contents"
    assert isinstance(rename, ObjectAlreadyExists)  # nats-py checks the old name
    assert isinstance(missing, ObjectDeletedError)
    assert st.stream_info.state.messages == 2


@both()
def test_max_bytes(server):
    async def main():
        nc, js = await _conn(server)
        try:
            obs = await js.create_object_store("OB11", max_bytes=3 * CHUNK)
            too_big = await err_of(obs.put("big", os.urandom(4 * CHUNK)))
            st = await obs.status()
            ok = await obs.put("fits", os.urandom(CHUNK))
            await js.delete_object_store("OB11")
            return too_big, st, ok
        finally:
            await nc.close()

    too_big, st, ok = run(main())
    assert api_err(too_big) == ("ServiceUnavailableError", 503, 10077, "maximum bytes exceeded")
    assert st.stream_info.state.messages == 0  # the client purged the chunks it had sent
    assert ok.chunks == 1


@both()
def test_20mb_round_trip(server, tmp_path):
    data = os.urandom(20 * 1024 * 1024)

    async def main():
        nc, js = await _conn(server)
        try:
            obs = await js.create_object_store("OB20")
            put = await obs.put("big", data)
            got = await obs.get("big")
            buf = io.BytesIO()
            await obs.get("big", writeinto=buf)
            st = await obs.status()
            await js.delete_object_store("OB20")
            return put, got, buf.getvalue(), st
        finally:
            await nc.close()

    put, got, written, st = run(main(), timeout=80)
    assert (put.size, put.chunks, put.digest) == (len(data), 160, digest(data))
    assert got.data == data and written == data
    assert st.stream_info.state.messages == 161


@both()
def test_bucket_ttl(server):
    async def main():
        nc, js = await _conn(server)
        try:
            obs = await js.create_object_store("OBTTL", ttl=1)
            await obs.put("x", os.urandom(CHUNK + 10))
            first = (await obs.get_info("x")).size
            gone = None
            deadline = asyncio.get_running_loop().time() + 10
            while asyncio.get_running_loop().time() < deadline:
                gone = await err_of(obs.get_info("x"))
                if gone is not None:
                    break
                await asyncio.sleep(0.1)
            # The chunks expire too: wait for the stream to empty (not a fixed time).
            while True:
                st = await obs.status()
                if st.stream_info.state.messages == 0 or asyncio.get_running_loop().time() > deadline:
                    break
                await asyncio.sleep(0.1)
            listed = await err_of(obs.list())
            await js.delete_object_store("OBTTL")
            return first, gone, st, listed
        finally:
            await nc.close()

    first, gone, st, listed = run(main())
    assert first == CHUNK + 10
    assert isinstance(gone, ObjectNotFoundError)
    s = st.stream_info.state
    assert (s.messages, s.first_seq, s.last_seq) == (0, 4, 3)
    assert isinstance(listed, NotFoundError)


@both()
def test_bucket_survives_restart(server, tmp_path):
    """A bucket in its own server on its own store, stopped and started again."""
    store = str(tmp_path / "store")
    data = os.urandom(2 * CHUNK + 99)

    async def before(url):
        nc, js = await connect_js(url, API_TIMEOUT)
        try:
            obs = await js.create_object_store("OBRS")
            await obs.put("keep", b"old")
            await obs.put("keep", data)
            await obs.put("drop", b"d")
            await obs.delete("drop")
        finally:
            await nc.close()

    async def after(url):
        nc, js = await connect_js(url, API_TIMEOUT)
        try:
            obs = await js.object_store("OBRS")
            got = await obs.get("keep")
            listed = [(i.name, i.size, bool(i.deleted)) for i in await obs.list()]
            st = await obs.status()
            return got, listed, st
        finally:
            await nc.close()

    with ServerProcess(server.kind_name, ["-js", "-sd", store]) as s:
        run(before(s.url))
    with ServerProcess(server.kind_name, ["-js", "-sd", store]) as s:
        got, listed, st = run(after(s.url))
    assert got.data == data and got.info.chunks == 3
    assert listed == [("keep", len(data), False), ("drop", 0, True)]
    s = st.stream_info.state
    assert (s.messages, s.first_seq, s.last_seq) == (5, 3, 9)
