"""nats-py Key-Value buckets against nats-server and natsbroker.

A KV bucket is, for the client, a convention over a JetStream stream
``KV_<bucket>`` on ``$KV.<bucket>.>``: puts are publishes, create/update use
``Nats-Expected-Last-Subject-Sequence``, delete/purge are marker messages
(``KV-Operation: DEL|PURGE``, purge with ``Nats-Rollup: sub``), gets are
(direct) message gets and watchers are ordered push consumers.

Every expected value below was observed from nats-server 2.15.1 (the spec).
"""

import asyncio
import re
import time

import nats
import nats.errors
import pytest
from nats.js.api import RePublish, StorageType
from nats.js.errors import (
    APIError,
    BucketNotFoundError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NoKeysError,
)

from tests.support.both import both, both_servers, connect_js
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.timeout(60)

API_TIMEOUT = 10.0


server = both_servers("kv")


def run(coro, timeout=40):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def _conn(server):
    return connect_js(server.url, API_TIMEOUT)


def ent(e):
    """An entry as a comparable tuple (the None end-of-initial-values marker stays None)."""
    if e is None:
        return None
    return (e.key, e.value, e.revision, e.delta, e.operation)


async def initial(watcher, timeout=10.0, grace=0.5):
    """Entries up to and including the end-of-initial-values None marker.

    nats-py's watch() decides the marker itself: right after creating the
    consumer it asks for the consumer's info, and if nothing is pending and
    its subscription has not yet handed a message over, it queues None first.
    A server that pushed every initial value before that reply was read
    (nats-server often does) then gets None *before* its values. So when None
    comes first, values arriving within ``grace`` belong before it."""
    out = []
    while True:
        e = await watcher.updates(timeout)
        out.append(ent(e))
        if e is None:
            break
    if out == [None]:
        late = []
        try:
            while True:
                late.append(ent(await watcher.updates(grace)))
        except nats.errors.TimeoutError:
            pass
        out = late + out
    return out


async def more(watcher, n, timeout=10.0):
    return [ent(await watcher.updates(timeout)) for _ in range(n)]


async def quiet(watcher, wait=0.3):
    """True when nothing further arrives on the watcher within ``wait``."""
    try:
        await watcher.updates(wait)
    except nats.errors.TimeoutError:
        return True
    return False


async def err_of(coro):
    try:
        await coro
    except Exception as e:  # noqa: BLE001 - the error is the result
        return e
    return None


def api_err(e):
    return (type(e).__name__, e.code, e.err_code, e.description)


# --------------------------------------------------------------------------
# buckets


@both()
def test_create_bind_status_delete(server):
    async def main():
        nc, js = await _conn(server)
        try:
            kv = await js.create_key_value(bucket="KVB1", description="kv one", history=5,
                                           ttl=3600, max_value_size=1024, max_bytes=1 << 20)
            st = await kv.status()
            si = await js.stream_info("KV_KVB1")
            again = await js.create_key_value(bucket="KVB1", description="kv one", history=5,
                                              ttl=3600, max_value_size=1024, max_bytes=1 << 20)
            clash = await err_of(js.create_key_value(bucket="KVB1", history=2))
            bound = await js.key_value("KVB1")
            await bound.put("k", b"v")
            st2 = await kv.status()
            missing = await err_of(js.key_value("NOPE_KV"))
            deleted = await js.delete_key_value("KVB1")
            gone = await err_of(js.key_value("KVB1"))
            del_missing = await err_of(js.delete_key_value("KVB1"))
            return st, si, again, clash, st2, missing, deleted, gone, del_missing
        finally:
            await nc.close()

    st, si, again, clash, st2, missing, deleted, gone, del_missing = run(main())
    assert (st.bucket, st.values, st.history, st.ttl) == ("KVB1", 0, 5, 3600.0)
    c = si.config
    assert c.name == "KV_KVB1" and c.subjects == ["$KV.KVB1.>"] and c.description == "kv one"
    assert (c.max_msgs_per_subject, c.max_msg_size, c.max_bytes, c.max_msgs) == (5, 1024, 1 << 20, -1)
    assert c.max_age == 3600.0 and c.duplicate_window == 120.0
    assert c.discard == "new" and c.storage == StorageType.FILE
    assert (c.allow_rollup_hdrs, c.deny_delete, c.deny_purge, c.allow_msg_ttl) == (True, True, False, True)
    assert not c.allow_direct
    assert again._stream == "KV_KVB1"
    assert api_err(clash) == ("BadRequestError", 400, 10058,
                              "stream name already in use with a different configuration")
    assert st2.values == 1
    assert isinstance(missing, BucketNotFoundError)
    assert deleted is True
    assert isinstance(gone, BucketNotFoundError)
    assert api_err(del_missing) == ("NotFoundError", 404, 10059, "stream not found")


@both()
def test_small_ttl_shrinks_duplicate_window(server):
    async def main():
        nc, js = await _conn(server)
        try:
            kv = await js.create_key_value(bucket="KVB2", ttl=30, storage=StorageType.MEMORY,
                                           direct=True)
            st = await kv.status()
            await js.delete_key_value("KVB2")
            return st
        finally:
            await nc.close()

    st = run(main())
    c = st.stream_info.config
    assert (c.max_age, c.duplicate_window, c.storage, c.allow_direct) == (
        30.0, 30.0, StorageType.MEMORY, True)
    assert st.ttl == 30.0 and st.history == 1


# --------------------------------------------------------------------------
# put / get / create / update


@pytest.mark.parametrize("direct", [False, True], ids=["msg-get", "direct-get"])
@both()
def test_put_get_revisions(server, direct):
    bucket = "KVP" + ("D" if direct else "M")

    async def main():
        nc, js = await _conn(server)
        try:
            kv = await js.create_key_value(bucket=bucket, direct=direct, history=3)
            revs = [await kv.put("a", b"1"), await kv.put("b.c", b"2"), await kv.put("a", b"3"),
                    await kv.put("x/y=z_-", b""), await kv.put("a", b"5"), await kv.put("a", b"6")]
            a = await kv.get("a")
            bc = await kv.get("b.c")
            empty = await kv.get("x/y=z_-")
            old = await kv.get("a", revision=3)
            oldest = await err_of(kv.get("a", revision=1))  # trimmed by history=3
            other = await err_of(kv.get("a", revision=2))  # revision of another key
            missing = await err_of(kv.get("nokey"))
            future = await err_of(kv.get("a", revision=99))
            st = await kv.status()
            await js.delete_key_value(bucket)
            return revs, a, bc, empty, old, oldest, other, missing, future, st
        finally:
            await nc.close()

    revs, a, bc, empty, old, oldest, other, missing, future, st = run(main())
    assert revs == [1, 2, 3, 4, 5, 6]
    assert (a.bucket, a.key, a.value, a.revision, a.operation) == (bucket, "a", b"6", 6, None)
    assert (bc.key, bc.value, bc.revision) == ("b.c", b"2", 2)
    assert (empty.value, empty.revision) == (None, 4)  # nats-py reports an empty body as None
    assert (old.key, old.value, old.revision) == ("a", b"3", 3)
    assert isinstance(oldest, KeyNotFoundError)
    assert isinstance(other, KeyNotFoundError) and "expected '$KV.%s.a', but got '$KV.%s.b.c'" % (
        bucket, bucket) in str(other)
    assert isinstance(missing, KeyNotFoundError)
    assert isinstance(future, KeyNotFoundError)
    assert st.values == 5  # a keeps 3 revisions (3, 5, 6) + b.c + x/y=z_-


@both()
def test_create_update_wrong_revision(server):
    async def main():
        nc, js = await _conn(server)
        try:
            kv = await js.create_key_value(bucket="KVCU", history=10)
            r1 = await kv.create("k", b"v1")
            dup = await err_of(kv.create("k", b"again"))
            r2 = await kv.update("k", b"v2", last=r1)
            stale = await err_of(kv.update("k", b"v3", last=r1))
            zero = await err_of(kv.update("k", b"v3", last=0))
            fresh = await kv.update("new", b"n", last=0)
            await kv.delete("k")
            r4 = await kv.create("k", b"again")  # create over a deleted key
            await kv.purge("k")
            r6 = await kv.create("k", b"after purge")
            on_missing = await err_of(kv.update("nokey", b"x", last=3))
            raw = await err_of(js.publish("$KV.KVCU.k", b"x",
                                          headers={"Nats-Expected-Last-Subject-Sequence": "1"}))
            got = await kv.get("k")
            await js.delete_key_value("KVCU")
            return r1, dup, r2, stale, zero, fresh, r4, r6, on_missing, raw, got
        finally:
            await nc.close()

    r1, dup, r2, stale, zero, fresh, r4, r6, on_missing, raw, got = run(main())
    assert (r1, r2, fresh, r4, r6) == (1, 2, 3, 5, 7)
    assert isinstance(dup, KeyWrongLastSequenceError) and dup.description == "wrong last sequence: 1"
    assert isinstance(stale, KeyWrongLastSequenceError) and stale.description == "wrong last sequence: 2"
    assert isinstance(zero, KeyWrongLastSequenceError) and zero.description == "wrong last sequence: 2"
    assert isinstance(on_missing, KeyWrongLastSequenceError)
    assert on_missing.description == "wrong last sequence: 0"
    assert api_err(raw) == ("BadRequestError", 400, 10071, "wrong last sequence: 7")
    assert (got.value, got.revision) == (b"after purge", 7)


@both()
def test_max_value_size(server):
    async def main():
        nc, js = await _conn(server)
        try:
            kv = await js.create_key_value(bucket="KVMS", max_value_size=16)
            ok = await kv.put("k", b"x" * 16)
            big = await err_of(kv.put("k", b"x" * 17))
            big_create = await err_of(kv.create("k2", b"y" * 100))
            st = await kv.status()
            await js.delete_key_value("KVMS")
            return ok, big, big_create, st
        finally:
            await nc.close()

    ok, big, big_create, st = run(main())
    assert ok == 1
    assert api_err(big) == ("BadRequestError", 400, 10054, "message size exceeds maximum allowed")
    assert api_err(big_create) == ("BadRequestError", 400, 10054,
                                   "message size exceeds maximum allowed")
    assert st.values == 1


@both()
def test_max_bytes_discard_new(server):
    async def main():
        nc, js = await _conn(server)
        try:
            kv = await js.create_key_value(bucket="KVMB", max_bytes=200, storage=StorageType.MEMORY)
            revs = []
            err = None
            for i in range(10):
                try:
                    revs.append(await kv.put("k%d" % i, b"v" * 40))
                except APIError as e:
                    err = e
                    break
            st = await kv.status()
            await js.delete_key_value("KVMB")
            return revs, err, st
        finally:
            await nc.close()

    revs, err, st = run(main())
    assert revs == [1, 2]
    assert api_err(err) == ("ServiceUnavailableError", 503, 10077, "maximum bytes exceeded")
    assert st.values == 2


# --------------------------------------------------------------------------
# delete / purge / history / keys


@both()
def test_delete_purge_history(server):
    async def main():
        nc, js = await _conn(server)
        try:
            kv = await js.create_key_value(bucket="KVDP", history=10)
            for v in (b"1", b"2", b"3"):
                await kv.put("k", v)
            await kv.put("other", b"o")
            await kv.delete("k")
            got_deleted = await err_of(kv.get("k"))
            h1 = [ent(e) for e in await kv.history("k")]
            wrong_last = await err_of(kv.delete("other", last=1))
            await kv.delete("other", last=4)
            await kv.put("k", b"4")
            await kv.purge("k")
            h2 = [ent(e) for e in await kv.history("k")]
            got_purged = await err_of(kv.get("k"))
            marker = await js.get_last_msg("KV_KVDP", "$KV.KVDP.k")
            none = await err_of(kv.history("never"))
            st = await kv.status()
            await js.delete_key_value("KVDP")
            return got_deleted, h1, wrong_last, h2, got_purged, marker, none, st
        finally:
            await nc.close()

    got_deleted, h1, wrong_last, h2, got_purged, marker, none, st = run(main())
    assert isinstance(got_deleted, KeyNotFoundError) and got_deleted.op == "DEL"
    assert got_deleted.entry.revision == 5
    assert h1 == [("k", b"1", 1, 3, None), ("k", b"2", 2, 2, None), ("k", b"3", 3, 1, None),
                  ("k", b"", 5, 0, "DEL")]
    assert api_err(wrong_last) == ("BadRequestError", 400, 10071, "wrong last sequence: 4")
    assert h2 == [("k", b"", 8, 0, "PURGE")]
    assert isinstance(got_purged, KeyNotFoundError) and got_purged.op == "PURGE"
    assert marker.seq == 8 and marker.data is None
    assert dict(marker.headers) == {"KV-Operation": "PURGE", "Nats-Rollup": "sub"}
    assert isinstance(none, NoKeysError)
    assert st.values == 3  # other's value (4) and DEL marker (6), k's PURGE marker (8)
    assert (st.stream_info.state.first_seq, st.stream_info.state.last_seq) == (4, 8)


@both()
def test_keys_and_filters(server):
    async def main():
        nc, js = await _conn(server)
        try:
            kv = await js.create_key_value(bucket="KVK", history=3)
            none = await err_of(kv.keys())
            for k in ("user.1", "user.2", "order.1", "user.3", "cfg"):
                await kv.put(k, b"v-" + k.encode())
            await kv.put("user.1", b"again")
            await kv.delete("user.2")
            await kv.purge("cfg")
            keys = await kv.keys()
            users = await kv.keys(filters=["user"])
            ones = await kv.keys(filters=[".1", "zzz"])
            no_match = await err_of(kv.keys(filters=["zzz"]))
            await js.delete_key_value("KVK")
            return none, keys, users, ones, no_match
        finally:
            await nc.close()

    none, keys, users, ones, no_match = run(main())
    assert isinstance(none, NoKeysError)
    assert keys == ["order.1", "user.3", "user.1"]
    assert users == ["user.3", "user.1"]
    assert ones == ["order.1", "user.1"]
    assert isinstance(no_match, NoKeysError)


@both()
def test_purge_deletes(server):
    async def main():
        nc, js = await _conn(server)
        try:
            kv = await js.create_key_value(bucket="KVPD", history=5)
            for k in ("a", "b", "c"):
                await kv.put(k, b"1")
                await kv.put(k, b"2")
            await kv.delete("a")
            await kv.purge("b")
            before = (await kv.status()).values
            await kv.purge_deletes()  # markers younger than 30 min are kept (keep=1)
            kept = (await kv.status()).values
            h_a = [ent(e) for e in await kv.history("a")]
            await kv.purge_deletes(olderthan=-1)  # every marker goes
            after = await kv.status()
            keys = await kv.keys()
            h_c = [ent(e) for e in await kv.history("c")]
            await js.delete_key_value("KVPD")
            return before, kept, h_a, after, keys, h_c
        finally:
            await nc.close()

    before, kept, h_a, after, keys, h_c = run(main())
    assert before == 6  # a: 1,2,DEL  b: PURGE  c: 1,2
    assert kept == 4
    assert h_a == [("a", b"", 7, 0, "DEL")]
    assert after.values == 2
    assert (after.stream_info.state.first_seq, after.stream_info.state.last_seq) == (5, 8)
    assert keys == ["c"]
    assert h_c == [("c", b"1", 5, 1, None), ("c", b"2", 6, 0, None)]


# --------------------------------------------------------------------------
# watchers


@both()
def test_watchall_live_updates(server):
    async def main():
        nc, js = await _conn(server)
        try:
            kv = await js.create_key_value(bucket="KVW", history=5)
            empty_w = await kv.watchall()
            empty_init = await initial(empty_w)
            await kv.put("a", b"1")
            await kv.put("b", b"1")
            await kv.put("a", b"2")
            w = await kv.watchall()
            init = await initial(w)
            await kv.put("c", b"3")
            await kv.delete("b")
            await kv.purge("a")
            # a live entry's delta is num_pending when it was sent: timing, not compared
            live = [e[:3] + e[4:] for e in await more(w, 3)]
            live_empty = [e[:3] + e[4:] for e in await more(empty_w, 6)]
            silent = await quiet(w)
            await w.stop()
            await empty_w.stop()
            await js.delete_key_value("KVW")
            return empty_init, init, live, live_empty, silent
        finally:
            await nc.close()

    empty_init, init, live, live_empty, silent = run(main())
    assert empty_init == [None]
    assert init == [("b", b"1", 2, 1, None), ("a", b"2", 3, 0, None), None]
    assert live == [("c", b"3", 4, None), ("b", b"", 5, "DEL"), ("a", b"", 6, "PURGE")]
    assert live_empty == [("a", b"1", 1, None), ("b", b"1", 2, None), ("a", b"2", 3, None),
                          ("c", b"3", 4, None), ("b", b"", 5, "DEL"), ("a", b"", 6, "PURGE")]
    assert silent


@both()
def test_watch_filters_and_options(server):
    async def main():
        nc, js = await _conn(server)
        try:
            kv = await js.create_key_value(bucket="KVWO", history=5)
            await kv.put("user.1", b"a")
            await kv.put("user.2", b"b")
            await kv.put("sys.x", b"c")
            await kv.put("user.1", b"d")
            await kv.delete("user.2")
            out = {}
            w = await kv.watch("user.*")
            out["filtered"] = await initial(w)
            await kv.put("sys.y", b"skip")
            await kv.put("user.3", b"e")
            out["filtered_live"] = await more(w, 1)
            await w.stop()
            w = await kv.watchall(include_history=True)
            out["history"] = await initial(w)
            await w.stop()
            w = await kv.watchall(ignore_deletes=True)
            out["ignore_deletes"] = await initial(w)
            await kv.delete("user.3")
            await kv.put("user.4", b"f")
            out["ignore_deletes_live"] = await more(w, 1)
            await w.stop()
            w = await kv.watch("user.>", meta_only=True)
            out["meta_only"] = await initial(w)
            await w.stop()
            w = await kv.watch("user.1", include_history=True, meta_only=True)
            out["key_history_meta"] = await initial(w)
            await w.stop()
            w = await kv.watch("none.*")
            out["no_match"] = await initial(w)
            await w.stop()
            await js.delete_key_value("KVWO")
            return out
        finally:
            await nc.close()

    out = run(main())
    assert out["filtered"] == [("user.1", b"d", 4, 1, None), ("user.2", b"", 5, 0, "DEL"), None]
    assert out["filtered_live"] == [("user.3", b"e", 7, 0, None)]
    assert out["history"] == [
        ("user.1", b"a", 1, 6, None), ("user.2", b"b", 2, 5, None), ("sys.x", b"c", 3, 4, None),
        ("user.1", b"d", 4, 3, None), ("user.2", b"", 5, 2, "DEL"), ("sys.y", b"skip", 6, 1, None),
        ("user.3", b"e", 7, 0, None), None]
    assert out["ignore_deletes"] == [
        ("sys.x", b"c", 3, 4, None), ("user.1", b"d", 4, 3, None), ("sys.y", b"skip", 6, 1, None),
        ("user.3", b"e", 7, 0, None), None]
    assert out["ignore_deletes_live"] == [("user.4", b"f", 9, 0, None)]
    assert out["meta_only"] == [("user.1", b"", 4, 3, None), ("user.2", b"", 5, 2, "DEL"),
                                ("user.3", b"", 8, 1, "DEL"), ("user.4", b"", 9, 0, None), None]
    assert out["key_history_meta"] == [("user.1", b"", 1, 1, None), ("user.1", b"", 4, 0, None),
                                       None]
    assert out["no_match"] == [None]


# --------------------------------------------------------------------------
# expiry


@both()
def test_bucket_ttl_expires_values(server):
    async def main():
        nc, js = await _conn(server)
        try:
            kv = await js.create_key_value(bucket="KVTTL", ttl=1)
            await kv.put("k", b"v")
            first = (await kv.get("k")).value
            deadline = time.monotonic() + 10
            gone = None
            while time.monotonic() < deadline:
                gone = await err_of(kv.get("k"))
                if gone is not None:
                    break
                await asyncio.sleep(0.1)
            st = await kv.status()
            await js.delete_key_value("KVTTL")
            return first, gone, st
        finally:
            await nc.close()

    first, gone, st = run(main())
    assert first == b"v"
    assert isinstance(gone, KeyNotFoundError) and gone.op is None
    assert st.values == 0 and st.stream_info.state.first_seq == 2


@both()
def test_per_key_ttl(server):
    async def main():
        nc, js = await _conn(server)
        try:
            kv = await js.create_key_value(bucket="KVKT", history=3)
            r1 = await kv.create("short", b"s", msg_ttl=1)
            r2 = await kv.put("long", b"l")
            raw = await js.get_msg("KV_KVKT", r1)
            deadline = time.monotonic() + 10
            gone = None
            while time.monotonic() < deadline:
                gone = await err_of(kv.get("short"))
                if gone is not None:
                    break
                await asyncio.sleep(0.1)
            long_ = (await kv.get("long")).value
            again = await kv.create("short", b"s2")
            bad = await err_of(js.publish("$KV.KVKT.x", b"x", msg_ttl=0.5))
            st = await kv.status()
            await js.delete_key_value("KVKT")
            return r1, r2, raw, gone, long_, again, bad, st
        finally:
            await nc.close()

    r1, r2, raw, gone, long_, again, bad, st = run(main())
    assert (r1, r2, again) == (1, 2, 3)
    assert dict(raw.headers) == {"Nats-Expected-Last-Subject-Sequence": "0", "Nats-TTL": "1"}
    assert isinstance(gone, KeyNotFoundError)
    assert long_ == b"l"
    # nats-py sends int(msg_ttl): "Nats-TTL: 0"
    assert api_err(bad) == ("BadRequestError", 400, 10165, "invalid per-message TTL")
    assert st.values == 2


@both()
def test_limit_marker_ttl_reports_expiry_to_watchers(server):
    async def main():
        nc, js = await _conn(server)
        try:
            kv = await js.create_key_value(bucket="KVLM", ttl=1, limit_marker_ttl=1)
            st = await kv.status()
            w = await kv.watchall()
            init = await initial(w)
            await kv.put("k", b"v")
            put = await more(w, 1)
            expired = await w.updates(10)
            await w.stop()
            await js.delete_key_value("KVLM")
            return st, init, put, expired
        finally:
            await nc.close()

    st, init, put, expired = run(main())
    assert st.marker_ttl == 1.0
    assert init == [None]
    assert put == [("k", b"v", 1, 0, None)]
    assert (expired.key, expired.value, expired.revision, expired.operation) == ("k", b"", 2, "PURGE")


@both()
def test_limit_marker_and_purge_marker_ttls(server):
    """The MaxAge marker carries Nats-Marker-Reason/Nats-TTL and expires itself;
    a purge marker published with a TTL expires too."""

    async def main():
        nc, js = await _conn(server)
        try:
            kv = await js.create_key_value(bucket="KVLM2", ttl=1, limit_marker_ttl=1, history=2)
            await kv.put("k", b"v")
            await kv.put("p", b"w")
            await kv.purge("p", msg_ttl=1)
            marker = None
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and marker is None:
                try:
                    m = await js.get_last_msg("KV_KVLM2", "$KV.KVLM2.k")
                    if m.seq != 1:
                        marker = m
                except APIError:
                    pass
                await asyncio.sleep(0.05)
            hdrs = dict(marker.headers)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                st = await kv.status()
                if st.values == 0:
                    break
                await asyncio.sleep(0.1)
            await js.delete_key_value("KVLM2")
            return marker, hdrs, st
        finally:
            await nc.close()

    marker, hdrs, st = run(main())
    assert (marker.seq, marker.data) == (4, None)
    assert hdrs == {"Nats-Marker-Reason": "MaxAge", "Nats-Rollup": "sub", "Nats-TTL": "1s"}
    assert st.values == 0 and st.stream_info.state.last_seq >= 4


@both()
def test_republish(server):
    async def main():
        nc, js = await _conn(server)
        try:
            sub = await nc.subscribe("repub.>")
            kv = await js.create_key_value(bucket="KVRP", republish=RePublish(
                src="$KV.KVRP.>", dest="repub.>"))
            await kv.put("a.b", b"1")
            await kv.delete("a.b")
            got = [await sub.next_msg(10), await sub.next_msg(10)]
            await sub.unsubscribe()
            await js.delete_key_value("KVRP")
            return [(m.subject, m.data, dict(m.headers)) for m in got]
        finally:
            await nc.close()

    got = run(main())
    stamps = [h.pop("Nats-Time-Stamp") for _, _, h in got]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z", t) for t in stamps), stamps
    assert got == [
        ("repub.a.b", b"1", {"Nats-Stream": "KV_KVRP", "Nats-Subject": "$KV.KVRP.a.b",
                             "Nats-Sequence": "1", "Nats-Last-Sequence": "0"}),
        ("repub.a.b", b"", {"KV-Operation": "DEL", "Nats-Stream": "KV_KVRP",
                            "Nats-Subject": "$KV.KVRP.a.b", "Nats-Sequence": "2",
                            "Nats-Last-Sequence": "1"}),
    ]


@both()
def test_direct_get_headers_and_created(server):
    async def main():
        nc, js = await _conn(server)
        try:
            kv = await js.create_key_value(bucket="KVDG", direct=True, history=4)
            t0 = time.time()
            await kv.put("k", b"1")
            await kv.delete("k")
            last = await nc.request("$JS.API.DIRECT.GET.KV_KVDG.$KV.KVDG.k", b"", timeout=5)
            by_seq = await nc.request("$JS.API.DIRECT.GET.KV_KVDG", b'{"seq": 1}', timeout=5)
            w = await kv.watch("k", include_history=True)
            entries = [await w.updates(10), await w.updates(10)]
            await w.stop()
            await js.delete_key_value("KVDG")
            return t0, last, by_seq, entries
        finally:
            await nc.close()

    t0, last, by_seq, entries = run(main())
    assert last.data == b"" and last.headers["KV-Operation"] == "DEL"
    assert set(last.headers) == {"KV-Operation", "Nats-Stream", "Nats-Subject", "Nats-Sequence",
                                 "Nats-Time-Stamp"}
    assert (last.headers["Nats-Stream"], last.headers["Nats-Subject"],
            last.headers["Nats-Sequence"]) == ("KV_KVDG", "$KV.KVDG.k", "2")
    assert by_seq.data == b"1" and by_seq.headers["Nats-Sequence"] == "1"
    assert [(e.revision, e.operation) for e in entries] == [(1, None), (2, "DEL")]
    for e in entries:
        assert abs(e.created.timestamp() - t0) < 5


@both()
def test_many_keys(server):
    async def main():
        nc, js = await _conn(server)
        try:
            kv = await js.create_key_value(bucket="KVMANY", storage=StorageType.MEMORY)
            await asyncio.gather(*[js.publish("$KV.KVMANY.k.%04d" % i, b"x") for i in range(600)])
            for i in range(0, 600, 3):
                await kv.delete("k.%04d" % i)
            keys = await kv.keys()
            for attempt in range(3):
                w = await kv.watchall()
                init = await initial(w, timeout=10)
                await w.stop()
                # nats-server now and then reports the end of the initial
                # values first (nats-py then sees no initial values): that
                # race is the reference's, so only its run watches again.
                if len(init) > 1 or server.kind_name != "nats-server":
                    break
            await js.delete_key_value("KVMANY")
            return keys, init
        finally:
            await nc.close()

    keys, init = run(main())
    live = ["k.%04d" % i for i in range(600) if i % 3]
    assert sorted(keys) == live and len(keys) == 400
    assert len(init) == 601 and init[-1] is None
    assert sum(1 for e in init[:-1] if e[4] == "DEL") == 200
    assert [e[3] for e in init[:-1]] == list(range(599, -1, -1))


@both()
def test_bucket_survives_restart(server, tmp_path):
    """A bucket in its own server on its own store, stopped and started again."""
    store = str(tmp_path / "store")

    async def before(url):
        nc, js = await connect_js(url, API_TIMEOUT)
        try:
            kv = await js.create_key_value(bucket="KVRS", history=3)
            for v in (b"1", b"2", b"3", b"4"):
                await kv.put("k", v)
            await kv.put("o", b"o")
            await kv.delete("o")
        finally:
            await nc.close()

    async def after(url):
        nc, js = await connect_js(url, API_TIMEOUT)
        try:
            kv = await js.key_value("KVRS")
            for _ in range(75):
                # (nats-server, restarted on a loaded machine, has been seen
                # to answer "no keys" for a moment before its store is back)
                try:
                    h = [ent(e) for e in await kv.history("k")]
                    break
                except NoKeysError:
                    await asyncio.sleep(0.2)
            else:
                h = [ent(e) for e in await kv.history("k")]
            o = await err_of(kv.get("o"))
            keys = await kv.keys()
            stale = await err_of(kv.update("k", b"x", last=3))
            rev = await kv.update("k", b"5", last=4)
            st = await kv.status()
            return h, o, keys, stale, rev, st
        finally:
            await nc.close()

    with ServerProcess(server.kind_name, ["-js", "-sd", store]) as s:
        run(before(s.url))
    with ServerProcess(server.kind_name, ["-js", "-sd", store]) as s:
        h, o, keys, stale, rev, st = run(after(s.url))
    assert h == [("k", b"2", 2, 2, None), ("k", b"3", 3, 1, None), ("k", b"4", 4, 0, None)]
    assert isinstance(o, KeyNotFoundError) and o.op == "DEL"
    assert keys == ["k"]
    assert isinstance(stale, KeyWrongLastSequenceError) and stale.description == "wrong last sequence: 4"
    assert rev == 7
    assert (st.values, st.history, st.stream_info.state.first_seq) == (5, 3, 3)


@both()
def test_watch_large_values(server):
    """4 MiB of initial values through one watcher: more than a flow-control window."""
    values = {"big.%02d" % i: bytes([i]) * (64 * 1024) for i in range(64)}

    async def main():
        nc, js = await _conn(server)
        try:
            kv = await js.create_key_value(bucket="KVBIG", storage=StorageType.MEMORY)
            for k, v in values.items():
                await kv.put(k, v)
            w = await kv.watchall()
            got = []
            while True:
                e = await w.updates(10)
                if e is None:
                    break
                got.append(e)
            await kv.put("big.00", b"new")
            live = await w.updates(10)
            await w.stop()
            await js.delete_key_value("KVBIG")
            return got, live
        finally:
            await nc.close()

    got, live = run(main())
    assert [(e.key, e.revision, e.delta) for e in got] == [
        ("big.%02d" % i, i + 1, 63 - i) for i in range(64)]
    assert all(e.value == values[e.key] for e in got)
    assert (live.key, live.value, live.revision) == ("big.00", b"new", 65)
