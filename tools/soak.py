"""Crash-loop soak of natsbroker's JetStream (issue 12, item 8): ``make soak``.

Usage (from the repository root)::

    .venv/bin/python -m tools.soak --minutes 10 [--workdir DIR] [--seed N]

It starts ``python -m natsbroker -p PORT -a 127.0.0.1 -js -sd DIR/store`` on a
free loopback port and, for the given minutes, runs concurrently (nats-py):

- publishers: JetStream publishes to stream SOAK with a unique id in the
  payload and as Nats-Msg-Id; every PubAck received is recorded as
  (seq, id); a publish without an ack is retried with the same id;
- a durable pull consumer (PULL) and a durable push consumer (PUSH), explicit
  ack: every delivery is recorded (stream seq, id, num_delivered), every ack
  is sent with ``ack_sync`` (double ack) and counted as confirmed only when
  the server's reply arrived;
- KV writers on bucket SOAKKV: puts of known values, acked revisions recorded.

Every 2-6 s (random) the server is killed with SIGKILL and restarted on the
same store and port. The clients are re-created for every server life (an
"epoch"), so only replies that really arrived count. After every restart the
consumers' info is sampled. Afterwards, with the server up cleanly, it checks:

1. every acked publish is stored exactly once, at its acked sequence, and no
   id is stored at two sequences (dedupe by Nats-Msg-Id across retries);
2. no sequence was acked for two different ids (sequences never reused);
3. the consumers' ack floor and delivered stream seq, sampled after every
   restart, never go back, and the ack floor is never below the floor the
   confirmed acks imply;
4. no message whose ack was confirmed is delivered again afterwards;
5. KV: the last acked revision of every key is what a get returns (or a later
   revision holding one of the values written for that key without an ack).

It prints a summary (also written to WORKDIR/summary.txt) and exits 1 on any
violation. WORKDIR (default: a fresh /tmp/natsbroker-soak-*) keeps the store,
the server's log of every life (server.log, with "=== start"/"=== SIGKILL"
markers, wall-clock times) and violations.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import socket
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import nats
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StorageType, StreamConfig

from natsbroker import launch

REPO_ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
STREAM = "SOAK"
BUCKET = "SOAKKV"
PUSH_SUBJECT = "_SOAK.push"
ACK_WAIT = 30.0
N_KEYS = 16
MAX_EXAMPLES = 8


def now_wall() -> str:
    t = time.time()
    return time.strftime("%H:%M:%S", time.localtime(t)) + f".{int(t * 1000) % 1000:03d}"


def free_port() -> int:
    s = socket.socket()
    s.bind((HOST, 0))
    try:
        return s.getsockname()[1]
    finally:
        s.close()


# ---------------------------------------------------------------------------
# The server
# ---------------------------------------------------------------------------

class Server:
    def __init__(self, workdir: Path, port: int):
        self.store = workdir / "store"
        self.port = port
        self.log = open(workdir / "server.log", "ab")
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.kills = 0
        self.start_times: list[float] = []

    def mark(self, text: str) -> None:
        self.log.write(f"\n=== {text} at {now_wall()}\n".encode())
        self.log.flush()

    async def start(self, timeout: float = 60.0) -> float:
        """Start on the same store and port; ready when it answers PING."""
        argv = launch.server_argv(launch.broker_command(), port=self.port, host=HOST,
                                  jetstream=True, store_dir=str(self.store))
        self.starts += 1
        self.mark(f"start #{self.starts}: {' '.join(argv)}")
        t0 = time.monotonic()
        self.proc = launch.spawn(argv, log=self.log, cwd=str(REPO_ROOT), new_session=True)
        try:
            await asyncio.to_thread(launch.await_ready, self.proc, timeout, poll=0.05,
                                    ready=lambda _ports: launch.nats_ping(HOST, self.port))
        except launch.LaunchError as e:
            if e.returncode is not None:
                raise RuntimeError(f"server exited with {e.returncode} during startup "
                                   f"(see {self.log.name})") from None
            raise RuntimeError(f"server not ready after {timeout}s (see {self.log.name})") from None
        dt = time.monotonic() - t0
        self.start_times.append(dt)
        return dt

    def kill(self) -> None:
        p = self.proc
        if p is None:
            return
        self.kills += 1
        self.mark(f"SIGKILL #{self.kills} (pid {p.pid})")
        launch.kill(p, group=True)
        self.proc = None

    def stop(self) -> int | None:
        p = self.proc
        if p is None:
            return None
        self.mark(f"SIGTERM (pid {p.pid})")
        rc = launch.stop(p, timeout=30, group=True)
        self.proc = None
        self.mark(f"exited with {rc}")
        return rc


async def connect(port: int):
    return await nats.connect(f"nats://{HOST}:{port}", allow_reconnect=False,
                              connect_timeout=2, max_reconnect_attempts=0,
                              error_cb=_quiet, disconnected_cb=_quiet0, closed_cb=_quiet0)


async def _quiet(e):  # nats-py logs every error otherwise
    pass


async def _quiet0():
    pass


async def close_quietly(nc) -> None:
    try:
        await asyncio.wait_for(nc.close(), 2)
    except BaseException:
        pass


# ---------------------------------------------------------------------------
# The recorded history
# ---------------------------------------------------------------------------

class History:
    def __init__(self):
        self.epoch = 0
        # publishes
        self.pub_attempts: dict[str, list[float]] = defaultdict(list)  # id -> attempt times
        self.pub_acks: dict[str, list[tuple[int, bool, int]]] = defaultdict(list)  # id -> (seq, dup, epoch)
        self.seq_acked: dict[int, set[str]] = defaultdict(set)  # seq -> ids acked at it
        self.pub_errors = 0
        # consumers
        self.deliveries: dict[str, list[tuple[int, str, int, float, int]]] = defaultdict(list)
        # cons -> (seq, id, num_delivered, t, epoch)
        self.confirmed: dict[str, dict[int, tuple[float, int]]] = defaultdict(dict)  # cons -> seq -> (t, epoch)
        self.ack_failures: dict[str, int] = defaultdict(int)
        self.confirmed_floor: dict[str, int] = defaultdict(int)
        self.samples: dict[str, list[tuple[int, str, int, int, int]]] = defaultdict(list)
        # cons -> (epoch, when, ack_floor, delivered, our confirmed floor)
        # kv
        self.kv_attempts: dict[str, set[str]] = defaultdict(set)
        self.kv_acks: list[tuple[str, int, str, int]] = []  # (key, rev, value, epoch)
        self.kv_errors = 0

    def confirm(self, cons: str, seq: int) -> None:
        self.confirmed[cons].setdefault(seq, (time.monotonic(), self.epoch))

    def floor(self, cons: str) -> int:
        f = self.confirmed_floor[cons]
        c = self.confirmed[cons]
        while f + 1 in c:
            f += 1
        self.confirmed_floor[cons] = f
        return f


def msg_id(msg) -> str:
    try:
        return json.loads(msg.data)["id"]
    except Exception:
        return "?" + repr(msg.data[:40])


# ---------------------------------------------------------------------------
# Workers (one server life each; cancelled at the kill)
# ---------------------------------------------------------------------------

class Publisher:
    def __init__(self, name: str, hist: History, rate: float, rnd: random.Random):
        self.name, self.hist, self.rate, self.rnd = name, hist, rate, rnd
        self.n = 0
        self.pending: str | None = None  # an id sent without an ack: retried as is

    async def run(self, port: int) -> None:
        nc = await connect(port)
        try:
            js = nc.jetstream(timeout=3)
            while True:
                if self.pending is None:
                    self.n += 1
                    self.pending = f"{self.name}-{self.n}"
                mid = self.pending
                body = json.dumps({"id": mid, "pad": "x" * self.rnd.randint(0, 200)}).encode()
                self.hist.pub_attempts[mid].append(time.monotonic())
                try:
                    ack = await js.publish(f"soak.{self.name}", body, timeout=3,
                                           headers={"Nats-Msg-Id": mid})
                except asyncio.CancelledError:
                    raise
                except Exception:
                    self.hist.pub_errors += 1
                    if nc.is_closed:
                        return
                    await asyncio.sleep(0.1)
                    continue
                self.hist.pub_acks[mid].append((ack.seq, bool(ack.duplicate), self.hist.epoch))
                self.hist.seq_acked[ack.seq].add(mid)
                self.pending = None
                if self.rate > 0:
                    await asyncio.sleep(self.rnd.expovariate(self.rate))
        finally:
            await close_quietly(nc)


class Consumers:
    def __init__(self, hist: History):
        self.hist = hist

    def _record(self, cons: str, msg) -> None:
        md = msg.metadata
        self.hist.deliveries[cons].append((md.sequence.stream, msg_id(msg), md.num_delivered,
                                           time.monotonic(), self.hist.epoch))

    async def _ack(self, cons: str, msg) -> None:
        seq = msg.metadata.sequence.stream
        try:
            await msg.ack_sync(timeout=3)
        except asyncio.CancelledError:
            raise
        except Exception:
            self.hist.ack_failures[cons] += 1
            return
        self.hist.confirm(cons, seq)

    async def run_pull(self, port: int) -> None:
        nc = await connect(port)
        try:
            js = nc.jetstream(timeout=3)
            psub = await js.pull_subscribe_bind("PULL", STREAM)
            while not nc.is_closed:
                try:
                    msgs = await psub.fetch(64, timeout=1)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    await asyncio.sleep(0.05)
                    continue
                for m in msgs:
                    self._record("PULL", m)
                await asyncio.gather(*(self._ack("PULL", m) for m in msgs))
        finally:
            await close_quietly(nc)

    async def run_push(self, port: int) -> None:
        nc = await connect(port)
        tasks: set[asyncio.Task] = set()

        async def cb(msg):
            self._record("PUSH", msg)
            t = asyncio.ensure_future(self._ack("PUSH", msg))
            tasks.add(t)
            t.add_done_callback(tasks.discard)

        try:
            await nc.subscribe(PUSH_SUBJECT, cb=cb)
            await nc.flush(timeout=3)
            while not nc.is_closed:
                await asyncio.sleep(0.2)
        finally:
            for t in list(tasks):
                t.cancel()
            await close_quietly(nc)


class KVWriter:
    def __init__(self, name: str, hist: History, rate: float, rnd: random.Random):
        self.name, self.hist, self.rate, self.rnd = name, hist, rate, rnd
        self.n = 0

    async def run(self, port: int) -> None:
        nc = await connect(port)
        try:
            js = nc.jetstream(timeout=3)
            kv = await js.key_value(BUCKET)
            while not nc.is_closed:
                self.n += 1
                key = f"k{self.rnd.randrange(N_KEYS)}"
                value = f"{self.name}-{self.n}"
                self.hist.kv_attempts[key].add(value)
                try:
                    rev = await asyncio.wait_for(kv.put(key, value.encode()), 3)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    self.hist.kv_errors += 1
                    await asyncio.sleep(0.1)
                    continue
                self.hist.kv_acks.append((key, rev, value, self.hist.epoch))
                if self.rate > 0:
                    await asyncio.sleep(self.rnd.expovariate(self.rate))
        finally:
            await close_quietly(nc)


# ---------------------------------------------------------------------------
# Setup, sampling, verification
# ---------------------------------------------------------------------------

async def setup(port: int) -> None:
    nc = await connect(port)
    try:
        js = nc.jetstream(timeout=5)
        await js.add_stream(StreamConfig(name=STREAM, subjects=["soak.>"],
                                         storage=StorageType.FILE, duplicate_window=120.0))
        await js.add_consumer(STREAM, ConsumerConfig(
            durable_name="PULL", ack_policy=AckPolicy.EXPLICIT, ack_wait=ACK_WAIT,
            deliver_policy=DeliverPolicy.ALL, max_ack_pending=2000))
        await js.add_consumer(STREAM, ConsumerConfig(
            durable_name="PUSH", ack_policy=AckPolicy.EXPLICIT, ack_wait=ACK_WAIT,
            deliver_policy=DeliverPolicy.ALL, deliver_subject=PUSH_SUBJECT,
            max_ack_pending=2000))
        await js.create_key_value(bucket=BUCKET, history=5)
    finally:
        await close_quietly(nc)


async def sample_consumers(port: int, hist: History, when: str) -> list[str]:
    """Consumer info of both consumers into hist.samples; returns errors."""
    errs = []
    try:
        nc = await connect(port)
    except Exception as e:
        return [f"connect: {e!r}"]
    try:
        js = nc.jetstream(timeout=3)
        for cons in ("PULL", "PUSH"):
            for attempt in range(5):
                try:
                    ci = await js.consumer_info(STREAM, cons)
                    break
                except Exception as e:
                    err = e
                    await asyncio.sleep(0.2)
            else:
                errs.append(f"{cons}: {err!r}")
                continue
            hist.samples[cons].append((hist.epoch, when, ci.ack_floor.stream_seq,
                                       ci.delivered.stream_seq, hist.floor(cons)))
    finally:
        await close_quietly(nc)
    return errs


async def read_stream(js, nc, last_seq: int) -> tuple[dict[int, str], list[str]]:
    """seq -> id of every stored message: an ack-none pull consumer, then
    STREAM.MSG.GET for whatever it did not deliver."""
    notes = []
    stored: dict[int, str] = {}
    try:
        await js.delete_consumer(STREAM, "VERIFY")
    except Exception:
        pass
    await js.add_consumer(STREAM, ConsumerConfig(durable_name="VERIFY", ack_policy=AckPolicy.NONE,
                                                 deliver_policy=DeliverPolicy.ALL))
    psub = await js.pull_subscribe_bind("VERIFY", STREAM)
    idle = 0
    while len(stored) < last_seq and idle < 3:
        try:
            msgs = await psub.fetch(1000, timeout=3)
        except Exception:
            idle += 1
            continue
        idle = 0
        for m in msgs:
            stored[m.metadata.sequence.stream] = msg_id(m)
    missing = [s for s in range(1, last_seq + 1) if s not in stored]
    if missing:
        notes.append(f"VERIFY consumer left {len(missing)} sequences; read by MSG.GET")
        for s in missing:
            r = await nc.request(f"$JS.API.STREAM.MSG.GET.{STREAM}", json.dumps({"seq": s}).encode(),
                                 timeout=5)
            d = json.loads(r.data)
            if "message" in d:
                import base64
                stored[s] = json.loads(base64.b64decode(d["message"]["data"]))["id"]
    try:
        await js.delete_consumer(STREAM, "VERIFY")
    except Exception:
        pass
    return stored, notes


def verify_publishes(hist: History, stored: dict[int, str], v: dict[str, list]) -> dict:
    where: dict[str, list[int]] = defaultdict(list)
    for s, i in stored.items():
        where[i].append(s)
    acked_ids = {i for i, acks in hist.pub_acks.items() if acks}
    # (1) stored exactly once, at the acked sequence
    for i in sorted(acked_ids):
        seqs = sorted({a[0] for a in hist.pub_acks[i]})
        for s in seqs:
            if stored.get(s) != i:
                v["1 acked publish not stored"].append(
                    f"id {i} acked at seq {s} (epoch {hist.pub_acks[i][0][2]}), stored there: "
                    f"{stored.get(s)!r}")
        if len(where.get(i, [])) > 1:
            v["1 id stored more than once"].append(
                f"id {i} stored at seqs {sorted(where[i])}, acked at {seqs}, "
                f"{len(hist.pub_attempts[i])} attempts")
    for i, seqs in where.items():
        if i not in acked_ids and len(seqs) > 1:
            v["1 id stored more than once"].append(
                f"id {i} (never acked) stored at seqs {sorted(seqs)}, "
                f"{len(hist.pub_attempts[i])} attempts")
        if i not in hist.pub_attempts:
            v["1 stored message never published"].append(f"seq {seqs} id {i}")
    # (2) no sequence acked for two ids, no id acked at two sequences
    for s, ids in hist.seq_acked.items():
        if len(ids) > 1:
            v["2 sequence acked for different ids"].append(f"seq {s}: ids {sorted(ids)}")
    for i, acks in hist.pub_acks.items():
        if len({a[0] for a in acks}) > 1:
            v["2 id acked at different sequences"].append(f"id {i}: acks {acks}")
    unacked_stored = sum(1 for i in where if i not in acked_ids)
    return {"acked": len(acked_ids), "unacked_stored": unacked_stored,
            "dup_acks": sum(1 for acks in hist.pub_acks.values() for a in acks if a[1]),
            "retried": sum(1 for a in hist.pub_attempts.values() if len(a) > 1)}


def verify_consumers(hist: History, stored: dict[int, str], v: dict[str, list]) -> None:
    # (3) samples after every restart never go back; ack floor >= confirmed floor
    for cons, samples in hist.samples.items():
        prev = None
        for (ep, when, af, dl, ours) in samples:
            if when == "after restart":
                if prev is not None:
                    pep, paf, pdl = prev
                    if af < paf:
                        v["3 ack floor went back"].append(
                            f"{cons}: after restart of epoch {ep} ack_floor {af} < {paf} (epoch {pep})")
                    if dl < pdl:
                        v["3 delivered went back"].append(
                            f"{cons}: after restart of epoch {ep} delivered {dl} < {pdl} (epoch {pep})")
                prev = (ep, af, dl)
            if af < ours:
                v["3 ack floor below confirmed acks"].append(
                    f"{cons}: epoch {ep} ({when}) ack_floor {af} < {ours}, "
                    f"the floor of confirmed acks")
    # (4) nothing delivered again after its ack was confirmed; deliveries match the stream
    for cons, dels in hist.deliveries.items():
        conf = hist.confirmed[cons]
        for (seq, i, nd, t, ep) in dels:
            c = conf.get(seq)
            if c is not None and t > c[0]:
                v["4 redelivered after confirmed ack"].append(
                    f"{cons}: seq {seq} (id {i}) ack confirmed in epoch {c[1]}, delivered again "
                    f"in epoch {ep} (num_delivered {nd}, {t - c[0]:.1f}s later)")
            if seq in stored and stored[seq] != i:
                v["4 delivery does not match the stream"].append(
                    f"{cons}: seq {seq} delivered as {i}, stored as {stored[seq]}")


async def verify_kv(js, hist: History, v: dict[str, list]) -> dict:
    kv = await js.key_value(BUCKET)
    last: dict[str, tuple[int, str, int]] = {}
    revs: dict[int, set] = defaultdict(set)
    for key, rev, value, ep in hist.kv_acks:
        revs[rev].add((key, value))
        if key not in last or rev > last[key][0]:
            last[key] = (rev, value, ep)
    for rev, kvs in revs.items():
        if len(kvs) > 1:
            v["2 KV revision acked for different puts"].append(f"rev {rev}: {sorted(kvs)}")
    for key, (rev, value, ep) in sorted(last.items()):
        try:
            e = await kv.get(key)
        except Exception as ex:
            v["5 KV last acked revision unreadable"].append(
                f"{key}: acked rev {rev} = {value!r} (epoch {ep}); get: {ex!r}")
            continue
        got = e.value.decode() if e.value is not None else None
        if e.revision < rev:
            v["5 KV last acked revision unreadable"].append(
                f"{key}: acked rev {rev} = {value!r} (epoch {ep}); get: rev {e.revision} = {got!r}")
        elif e.revision == rev and got != value:
            v["5 KV wrong value"].append(f"{key}: acked rev {rev} = {value!r}, get: {got!r}")
        elif e.revision > rev and got not in hist.kv_attempts[key]:
            v["5 KV wrong value"].append(
                f"{key}: rev {e.revision} (> last acked {rev}) holds {got!r}, never written")
        try:  # the acked revision itself, by revision (history 5)
            e2 = await kv.get(key, revision=rev)
            if e2.value.decode() != value:
                v["5 KV wrong value"].append(
                    f"{key}: get(revision={rev}) = {e2.value!r}, acked {value!r}")
        except Exception:
            pass  # fine when > 5 later unacked revisions pushed it out
    return {"puts_acked": len(hist.kv_acks), "keys": len(last)}


# ---------------------------------------------------------------------------
# Main loop
# ---------------------------------------------------------------------------

async def soak(args) -> int:
    rnd = random.Random(args.seed)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="natsbroker-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    port = args.port or free_port()
    server = Server(workdir, port)
    hist = History()
    print(f"soak: {args.minutes} min, port {port}, seed {args.seed}, workdir {workdir}", flush=True)

    await server.start()
    await setup(port)
    pubs = [Publisher(f"p{i}", hist, args.rate, random.Random(rnd.random()))
            for i in range(args.publishers)]
    kvs = [KVWriter(f"w{i}", hist, args.kv_rate, random.Random(rnd.random()))
           for i in range(args.kv_writers)]
    cons = Consumers(hist)
    sample_errors: list[str] = []
    worker_errors: dict[str, int] = defaultdict(int)
    end = time.monotonic() + args.minutes * 60
    t_start = time.monotonic()
    last_report = t_start
    try:
        while time.monotonic() < end:
            hist.epoch += 1
            if hist.epoch > 1:
                await server.start()
                sample_errors += [f"epoch {hist.epoch}: {e}"
                                  for e in await sample_consumers(port, hist, "after restart")]
            coros = ([p.run(port) for p in pubs] + [k.run(port) for k in kvs]
                     + [cons.run_pull(port), cons.run_push(port)])
            tasks = [asyncio.ensure_future(c) for c in coros]
            life = rnd.uniform(2.0, 6.0)
            await asyncio.sleep(min(life, max(0.0, end - time.monotonic())))
            server.kill()  # the last life too: the final start is a restart after a crash
            for t in tasks:
                t.cancel()
            for t in tasks:
                try:
                    await t
                except asyncio.CancelledError:
                    pass
                except Exception as e:
                    worker_errors[type(e).__name__] += 1
            if time.monotonic() - last_report > 30:
                last_report = time.monotonic()
                print(f"  {last_report - t_start:5.0f}s epoch {hist.epoch}: "
                      f"acked {sum(1 for a in hist.pub_acks.values() if a)} publishes, "
                      f"deliveries PULL {len(hist.deliveries['PULL'])} "
                      f"PUSH {len(hist.deliveries['PUSH'])}, kv {len(hist.kv_acks)}", flush=True)
    finally:
        if server.proc is not None:
            server.kill()

    # the clean life: drain the consumers a little, then verify
    hist.epoch += 1
    await server.start()
    sample_errors += [f"final: {e}" for e in await sample_consumers(port, hist, "after restart")]
    v: dict[str, list] = defaultdict(list)
    nc = await connect(port)
    notes: list[str] = []
    try:
        js = nc.jetstream(timeout=10)
        raw = json.loads((await nc.request(f"$JS.API.STREAM.INFO.{STREAM}", b"", timeout=10)).data)
        state = raw.get("state", {})
        last_seq = state.get("last_seq", 0)
        stored, notes = await read_stream(js, nc, last_seq)
        pub = verify_publishes(hist, stored, v)
        verify_consumers(hist, stored, v)
        kvr = await verify_kv(js, hist, v)
    finally:
        await close_quietly(nc)
    rc_stop = server.stop()

    # summary
    restarts = server.starts - 2  # the first start and the final clean one
    dels = {c: hist.deliveries[c] for c in ("PULL", "PUSH")}
    lines = [
        "=" * 72,
        f"natsbroker crash-loop soak: {args.minutes} min, seed {args.seed}, port {port}",
        f"workdir {workdir} (server log: {server.log.name})",
        f"server: {server.starts} starts, {server.kills} SIGKILLs, {restarts} restarts under load; "
        f"startup {min(server.start_times):.2f}-{max(server.start_times):.2f}s "
        f"(mean {sum(server.start_times) / len(server.start_times):.2f}s); final SIGTERM exit {rc_stop}",
        f"publishes: {sum(len(a) for a in hist.pub_attempts.values())} attempts, "
        f"{pub['acked']} ids acked ({pub['dup_acks']} acks marked duplicate), "
        f"{pub['retried']} ids retried, {hist.pub_errors} errors/timeouts",
        f"stream: last_seq {last_seq}, messages {state.get('messages')}, read back {len(stored)}, "
        f"stored but never acked {pub['unacked_stored']}, num_deleted {state.get('num_deleted', 0)}, "
        f"lost {raw.get('state', {}).get('lost', raw.get('lost', 0)) or 0}",
    ]
    for c in ("PULL", "PUSH"):
        d = dels[c]
        redel = sum(1 for x in d if x[2] > 1)
        seen: dict[int, int] = {}
        stale = 0  # delivered again without a higher num_delivered (count lost in a crash)
        for x in d:
            if x[0] in seen and x[2] <= seen[x[0]]:
                stale += 1
            seen[x[0]] = max(seen.get(x[0], 0), x[2])
        samp = [s for s in hist.samples[c] if s[1] == "after restart"]
        fin = samp[-1] if samp else None
        lines.append(
            f"{c}: {len(d)} deliveries ({len({x[0] for x in d})} distinct seqs, {redel} redeliveries, "
            f"{stale} repeats without a higher num_delivered), "
            f"{len(hist.confirmed[c])} acks confirmed, {hist.ack_failures[c]} unconfirmed; "
            f"{len(samp)} samples after restarts, final ack_floor {fin[2] if fin else '?'} "
            f"delivered {fin[3] if fin else '?'}")
    lines.append(f"KV: {kvr['puts_acked']} puts acked over {kvr['keys']} keys, "
                 f"{hist.kv_errors} errors/timeouts")
    for n in notes:
        lines.append(f"note: {n}")
    if sample_errors:
        lines.append(f"consumer info failed {len(sample_errors)} times, e.g. {sample_errors[:3]}")
    if worker_errors:
        lines.append(f"worker setup errors (a life too short to connect etc.): {dict(worker_errors)}")
    checks = [("1", "every acked publish stored exactly once"),
              ("2", "no sequence/revision acked twice"),
              ("3", "consumer ack floors/delivered never go back"),
              ("4", "no redelivery after a confirmed ack"),
              ("5", "KV last acked revision readable")]
    total = 0
    for num, title in checks:
        keys = sorted(k for k in v if k.startswith(num + " "))
        n = sum(len(v[k]) for k in keys)
        total += n
        lines.append(f"check {num} ({title}): {'OK' if n == 0 else f'{n} VIOLATIONS'}")
        for k in keys:
            lines.append(f"  {k[2:]}: {len(v[k])}")
            for ex in v[k][:MAX_EXAMPLES]:
                lines.append(f"    - {ex}")
    lines.append(f"RESULT: {'PASS' if total == 0 else f'FAIL ({total} violations)'}")
    lines.append("=" * 72)
    text = "\n".join(lines)
    print(text, flush=True)
    (workdir / "summary.txt").write_text(text + "\n")
    (workdir / "violations.json").write_text(json.dumps(v, indent=1))
    (workdir / "samples.json").write_text(json.dumps(hist.samples, indent=1))
    return 0 if total == 0 else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.soak", description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--workdir", help="kept afterwards (default: a fresh /tmp/natsbroker-soak-*)")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--publishers", type=int, default=4)
    ap.add_argument("--rate", type=float, default=100.0, help="publishes/s per publisher (0: no limit)")
    ap.add_argument("--kv-writers", type=int, default=2)
    ap.add_argument("--kv-rate", type=float, default=20.0, help="puts/s per KV writer")
    args = ap.parse_args(argv)
    if args.seed is None:
        args.seed = random.randrange(1 << 30)
    return asyncio.run(soak(args))


if __name__ == "__main__":
    sys.exit(main())
