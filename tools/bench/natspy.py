"""Key-Value and Object Store workers that use nats-py (the official asyncio
client) instead of the raw protocol: the scenarios measure what a nats-py
application sees, so the client's costs are the same on both servers.

nats-py is imported lazily (inside the worker process), so the rest of the
tool keeps working without it.  Every worker is one connection and one
asyncio loop (``asyncio.run``) in its own process (or thread), started by
``loadgen.run_workers`` like the raw workers:

* ``kv_put``:  ``js.create_key_value(bucket=B)`` (``direct=True`` if asked),
  then ``count`` x ``await kv.put(key_i, value_i)`` one at a time; each
  put must return revision i + 1; afterwards ``KV_B`` must hold ``count``
  messages, seqs 1..count.
* ``kv_get``:  ``js.key_value(B)`` (whose ``allow_direct`` decides nats-py's
  get path: ``$JS.API.DIRECT.GET`` or ``$JS.API.STREAM.MSG.GET``), then
  ``count`` x ``await kv.get(key_i)``; every entry must have value_i and
  revision i + 1.  Also the read-back check after ``kv_put``.
* ``obj_put``: ``js.create_object_store(B)``, one ``await obs.put(NAME,
  data)`` of ``mib`` MiB of seeded pseudo-random bytes (nats-py: 128 KiB
  chunks, one awaited PubAck each, then the meta message); the returned
  info must have the size, chunk count and SHA-256 digest computed here,
  and ``OBJ_B`` chunks + 1 messages.
* ``obj_get``: ``js.object_store(B)``, one ``await obs.get(NAME,
  writeinto=sink)`` (ordered push consumer; nats-py checks the digest
  itself and raises DigestMismatchError); the bytes must equal the data
  written.  Also the read-back check after ``obj_put``.

``value_i`` starts with the key's number, so a value returned for the wrong
key is caught.  With ``delete`` the bucket is deleted at the end (warm-up).
Any callback error nats-py reports on the connection (slow consumer,
protocol error, disconnect) fails the run.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import random
import time

from .errors import BenchError
from .payload import make_payload

OBJ_NAME = "bench.bin"
OBJ_SEED = 0x4E415453  # the object's bytes: random.Random(OBJ_SEED).randbytes(n)
OBJ_CHUNK = 128 * 1024  # nats-py's default object chunk size


def kv_key(i: int) -> str:
    return f"key_{i}"


def kv_value(i: int, size: int) -> bytes:
    head = b"%010d:" % i
    return (head + make_payload(size))[:size] if size >= len(head) else head[:size]


def obj_data(mib: int) -> bytes:
    return random.Random(OBJ_SEED).randbytes(mib * 1024 * 1024)


def obj_digest(data: bytes) -> str:
    """nats-py's / nats-server's object digest string for ``data``."""
    return "SHA-256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode()


class _Ctx:
    """One nats-py connection with error bookkeeping."""

    def __init__(self, p: dict):
        self.p = p
        self.errors: list[str] = []
        self.nc = None
        self.js = None

    async def connect(self, port: int) -> None:
        try:
            import nats  # noqa: PLC0415 - only in the worker
        except ImportError as e:
            raise BenchError(f"the kv-*/obj-* scenarios need nats-py (pip install nats-py): "
                             f"{e}") from None

        async def on_error(e):
            self.errors.append(f"{type(e).__name__}: {e}")

        async def on_disconnect():
            self.errors.append("disconnected from the server")

        try:
            self.nc = await nats.connect(
                f"nats://127.0.0.1:{port}", allow_reconnect=False, connect_timeout=5,
                max_reconnect_attempts=0, error_cb=on_error, disconnected_cb=on_disconnect,
                name=f"bench-{self.p.get('op')}")
        except Exception as e:  # noqa: BLE001
            raise BenchError(f"nats-py connect to port {port} failed: "
                             f"{type(e).__name__}: {e}") from None
        # Per-request timeout of every JetStream call: the idle limit.
        self.js = self.nc.jetstream(timeout=self.p.get("idle") or 20.0)

    def check(self, what: str) -> None:
        if self.errors:
            raise BenchError(f"nats-py reported {len(self.errors)} error(s) while {what}: "
                             f"{'; '.join(self.errors[:3])}")
        a = self.p.get("abort")
        if a is not None and a.is_set():
            raise BenchError(f"aborted while {what}")

    async def close(self) -> None:
        if self.nc is not None and not self.nc.is_closed:
            try:
                await asyncio.wait_for(self.nc.close(), 5.0)
            except Exception:  # noqa: BLE001 - closing is best effort
                pass


async def _call(coro, what: str):
    """Await one nats-py call; turn its exceptions into BenchError."""
    try:
        return await coro
    except BenchError:
        raise
    except asyncio.TimeoutError:
        raise BenchError(f"no response within the idle limit while {what} "
                         f"(server stalled?)") from None
    except Exception as e:  # noqa: BLE001
        raise BenchError(f"{what}: {type(e).__name__}: {e}") from None


async def _wait_start(start_evt, deadline: float) -> None:
    loop = asyncio.get_running_loop()
    ok = await loop.run_in_executor(None, start_evt.wait, max(0.0, deadline - time.monotonic()))
    if not ok:
        raise BenchError("start signal never came")


async def _stream_state(ctx: _Ctx, stream: str, what: str):
    return await _call(ctx.js.stream_info(stream), f"{what}: STREAM.INFO {stream}")


def _expect_state(si, stream: str, msgs: int, what: str) -> None:
    st = si.state
    got = (st.messages, st.first_seq if msgs else 0, st.last_seq)
    want = (msgs, 1 if msgs else 0, msgs)
    if got != want:
        raise BenchError(f"{what}: stream {stream} has {st.messages} messages, seqs "
                         f"{st.first_seq}..{st.last_seq} (expected "
                         f"{f'{msgs}, seqs 1..{msgs}' if msgs else 'none'})")


# -- Key-Value --------------------------------------------------------------

async def _kv_put(ctx: _Ctx, p: dict, start_evt, report, deadline: float) -> dict:
    bucket, count, size = p["bucket"], p["count"], p["size"]
    stream = f"KV_{bucket}"
    params = {"bucket": bucket}
    if p.get("direct") is not None:
        params["direct"] = p["direct"]
    kv = await _call(ctx.js.create_key_value(**params), f"creating KV bucket {bucket}")
    _expect_state(await _stream_state(ctx, stream, "before the puts"), stream, 0,
                  "store not fresh")
    keys = [kv_key(i) for i in range(count)]
    values = [kv_value(i, size) for i in range(count)]
    report("ready", None)
    await _wait_start(start_evt, deadline)
    t0, c0 = time.monotonic(), time.thread_time()
    for i in range(count):
        rev = await _call(kv.put(keys[i], values[i]), f"put #{i} ({keys[i]})")
        if rev != i + 1:
            raise BenchError(f"put #{i} ({keys[i]}) returned revision {rev}, expected {i + 1}")
        if (i & 255) == 0:
            ctx.check(f"putting ({i}/{count} done)")
    t1, c1 = time.monotonic(), time.thread_time()
    ctx.check("putting")
    _expect_state(await _stream_state(ctx, stream, "after the puts"), stream, count,
                  f"after {count} puts")
    return {"t0": t0, "t1": t1, "client_cpu": c1 - c0, "ops": count,
            "direct_get": bool(kv._direct)}


async def _kv_get(ctx: _Ctx, p: dict, start_evt, report, deadline: float) -> dict:
    bucket, count, size = p["bucket"], p["count"], p["size"]
    stream = f"KV_{bucket}"
    kv = await _call(ctx.js.key_value(bucket), f"opening KV bucket {bucket}")
    _expect_state(await _stream_state(ctx, stream, "before the gets"), stream, count,
                  "before the gets")
    keys = [kv_key(i) for i in range(count)]
    values = [kv_value(i, size) for i in range(count)]
    if start_evt is not None:
        report("ready", None)
        await _wait_start(start_evt, deadline)
    t0, c0 = time.monotonic(), time.thread_time()
    for i in range(count):
        e = await _call(kv.get(keys[i]), f"get #{i} ({keys[i]})")
        if e.value != values[i] or e.revision != i + 1 or e.key != keys[i]:
            v = e.value or b""
            raise BenchError(f"get #{i} ({keys[i]}): key {e.key!r} revision {e.revision}, "
                             f"{len(v)}-byte value {v[:40]!r}... (expected revision {i + 1}, "
                             f"{len(values[i])}-byte value {values[i][:40]!r}...)")
        if (i & 255) == 0:
            ctx.check(f"getting ({i}/{count} done)")
    t1, c1 = time.monotonic(), time.thread_time()
    ctx.check("getting")
    return {"t0": t0, "t1": t1, "client_cpu": c1 - c0, "ops": count,
            "direct_get": bool(kv._direct)}


async def _kv_verify(ctx: _Ctx, p: dict, start_evt, report, deadline: float) -> dict:
    """Read back every key after kv_put (not measured)."""
    report("ready", None)
    await _wait_start(start_evt, deadline)
    return await _kv_get(ctx, p, None, report, deadline)


# -- Object Store -------------------------------------------------------------

def _check_info(info, size: int, digest: str, what: str) -> None:
    chunks = -(-size // OBJ_CHUNK)
    if (info.name, info.size, info.chunks, info.digest) != (OBJ_NAME, size, chunks, digest):
        raise BenchError(f"{what}: object info name {info.name!r} size {info.size} chunks "
                         f"{info.chunks} digest {info.digest} (expected {OBJ_NAME!r}, {size}, "
                         f"{chunks}, {digest})")


async def _obj_put(ctx: _Ctx, p: dict, start_evt, report, deadline: float) -> dict:
    bucket = p["bucket"]
    stream = f"OBJ_{bucket}"
    obs = await _call(ctx.js.create_object_store(bucket), f"creating object store {bucket}")
    _expect_state(await _stream_state(ctx, stream, "before the put"), stream, 0,
                  "store not fresh")
    data = obj_data(p["mib"])
    digest = obj_digest(data)
    report("ready", None)
    await _wait_start(start_evt, deadline)
    t0, c0 = time.monotonic(), time.thread_time()
    info = await _call(obs.put(OBJ_NAME, data), f"putting the {p['mib']} MiB object")
    t1, c1 = time.monotonic(), time.thread_time()
    ctx.check("putting the object")
    _check_info(info, len(data), digest, "put")
    _expect_state(await _stream_state(ctx, stream, "after the put"), stream, info.chunks + 1,
                  f"after the put ({info.chunks} chunks + meta)")
    return {"t0": t0, "t1": t1, "client_cpu": c1 - c0, "bytes": len(data),
            "chunks": info.chunks}


async def _obj_get(ctx: _Ctx, p: dict, start_evt, report, deadline: float) -> dict:
    bucket = p["bucket"]
    obs = await _call(ctx.js.object_store(bucket), f"opening object store {bucket}")
    data = obj_data(p["mib"])
    digest = obj_digest(data)
    info = await _call(obs.get_info(OBJ_NAME), "OBJ get_info")
    _check_info(info, len(data), digest, "before the get")
    sink = io.BytesIO()
    if start_evt is not None:
        report("ready", None)
        await _wait_start(start_evt, deadline)
    t0, c0 = time.monotonic(), time.thread_time()
    # writeinto: nats-py's default (result.data += chunk) copies the whole
    # object so far for every chunk (quadratic: ~2.5 MB/s on both servers).
    res = await _call(obs.get(OBJ_NAME, writeinto=sink), f"getting the {p['mib']} MiB object")
    t1, c1 = time.monotonic(), time.thread_time()
    ctx.check("getting the object")
    got = sink.getvalue()
    if got != data:
        i = next((k for k in range(min(len(got), len(data))) if got[k] != data[k]),
                 min(len(got), len(data)))
        raise BenchError(f"object read back differs: {len(got)} bytes (expected {len(data)}), "
                         f"first difference at byte {i}")
    _check_info(res.info, len(data), digest, "get")
    return {"t0": t0, "t1": t1, "client_cpu": c1 - c0, "bytes": len(got)}


async def _obj_verify(ctx: _Ctx, p: dict, start_evt, report, deadline: float) -> dict:
    report("ready", None)
    await _wait_start(start_evt, deadline)
    return await _obj_get(ctx, p, None, report, deadline)


OPS = {"kv_put": _kv_put, "kv_get": _kv_get, "kv_verify": _kv_verify,
       "obj_put": _obj_put, "obj_get": _obj_get, "obj_verify": _obj_verify}


async def _main(port, p, start_evt, report) -> dict:
    deadline = time.monotonic() + p["timeout"]
    ctx = _Ctx(p)
    try:
        await ctx.connect(port)
        res = await OPS[p["op"]](ctx, p, start_evt, report, deadline)
        if p.get("delete"):
            kind, b = p["op"].split("_")[0], p["bucket"]
            what = f"deleting {'KV bucket' if kind == 'kv' else 'object store'} {b}"
            fn = ctx.js.delete_key_value if kind == "kv" else ctx.js.delete_object_store
            if await _call(fn(b), what) is not True:
                raise BenchError(f"{what} failed")
        ctx.check("finishing")
        # A final round trip: nothing left in flight, connection healthy.
        await _call(ctx.nc.flush(timeout=p.get("idle") or 20.0), "final flush")
        ctx.check("finishing")
        return res
    finally:
        await ctx.close()


def w_natspy(port, p, start_evt, report):
    """loadgen worker: one nats-py KV / Object Store job (p['op'])."""
    async def bounded():
        try:
            return await asyncio.wait_for(_main(port, p, start_evt, report), p["timeout"])
        except asyncio.TimeoutError:
            raise BenchError(f"{p['op']}: timeout ({p['timeout']:.0f}s)") from None
    return asyncio.run(bounded())
