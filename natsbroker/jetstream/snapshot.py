"""Stream snapshots and restores: ``$JS.API.STREAM.SNAPSHOT.<stream>`` and
``$JS.API.STREAM.RESTORE.<stream>``, with nats-server's chunked, flow-controlled
protocol (what the ``nats`` CLI and nats.go's jsm use).

Snapshot (as nats-server 2.15.1 does it, observed on the wire):

* the request ``{"deliver_subject", "no_consumers", "chunk_size",
  "window_size", "jsck"}`` is
  answered with ``stream_snapshot_response`` ``{config, state}``;
* the snapshot then goes to ``deliver_subject`` in chunks of ``chunk_size``
  bytes (default 128 KiB, clamped to [1 KiB, 1 MiB]); every full chunk has the
  reply subject ``$JS.SNAPSHOT.ACK.<stream>.<id>.<chunk len>.<index>``, which
  the client answers (any payload) to acknowledge it; the short last chunk has
  no reply subject;
* at most ``window_size`` bytes (default 8 MiB, clamped to [1 KiB, 32 MiB]
  and to at least one chunk; API level 3, nats-server 2.12.5) may be
  unacknowledged, counted in whole chunks as nats-server counts its slots;
  a sender blocked on the window for 5 seconds gives up;
* the end is an empty message: with the header ``NATS/1.0 204`` once any chunk
  carried an ack subject, ``NATS/1.0 408 No Flow Response`` when the client
  stopped acknowledging, no header when the whole snapshot fit in one chunk.

Restore:

* ``{"config", "state"}`` is answered with ``stream_restore_response``
  ``{"deliver_subject": "$JS.SNAPSHOT.RESTORE.<stream>.<id>"}``;
* each chunk sent there (with a reply subject) is acknowledged with an empty
  message; an empty chunk is the end, answered with a ``stream_create_response``
  (the new stream's info, or the error);
* 5 seconds without a chunk abandon the restore.

The bytes inside the chunks are our own format (:mod:`natsbroker.store.snapfile`:
the stream header, every message with its sequence, timestamp and headers, the
durable consumers' configs and states, the last sequence, CRC-32 per record and
a closing SHA-256); nats-server sends an s2 compressed tar of its file store,
and the two are not interchangeable.

The snapshot reads the store one message at a time as the window allows (it
never holds more than a chunk and a message); it covers the sequences up to
``last_seq`` at the time of the request, and the consumers' states as they were
then. Messages removed while the snapshot is being sent are left out (they
restore as deleted sequences).

The restore writes the stream into the store as the chunks arrive (committed
with each turn's group commit), but it is not a stream yet: no config record,
not in ``js.streams``, no subscriptions. Only when the whole snapshot has been
received and its digest checked is it installed (config, consumers, subject
capture); any error deletes what was written, and a stream of that name that
exists is never touched (restoring over it is refused up front, and again at
the end should one have been created meanwhile).
"""

import json
import time
import weakref

import attrs
from twisted.logger import Logger

from natsbroker.gocompat import gojson, times as gotime
from natsbroker.jetstream import (
    api_models as AM,
    consumer_models as CM,
    errors as E,
    limits as L,
    marshal,
    stream_config as SC,
    stream_models as SM,
    subject_rules as SR,
)
from natsbroker.jetstream.stream import Stream
from natsbroker.jetstream.stream_state import stream_state
from natsbroker.nuid import nuid
from natsbroker.store.meta_keys import META_CONFIG, META_CREATED
from natsbroker.store.snapfile import FORMAT_VERSION, Reader, SnapshotError, Writer

log = Logger()

# -- protocol constants (nats-server 2.15.1) ---------------------------------------

DEFAULT_CHUNK_SIZE = 128 * 1024
MIN_CHUNK_SIZE = 1024
MAX_CHUNK_SIZE = 1024 * 1024
WINDOW_SIZE = 8 * 1024 * 1024  # defaultSnapshotWindowSize
MIN_WINDOW_SIZE = 1024
MAX_WINDOW_SIZE = 32 * 1024 * 1024
FLOW_TIMEOUT = 5.0  # a sender blocked on the window this long gives up
INTEREST_WAIT = 2.0  # how long the sender waits for interest in deliver_subject
RESTORE_IDLE = 5.0  # a restore with no chunk for this long is abandoned

SNAPSHOT_ACK_T = "$JS.SNAPSHOT.ACK.%s.%s"
RESTORE_DELIVER_T = "$JS.SNAPSHOT.RESTORE.%s.%s"

EOF_OK = b"NATS/1.0 204\r\n\r\n"
EOF_NO_FLOW = b"NATS/1.0 408 No Flow Response\r\n\r\n"

# Sending: chunks published per reactor turn at most (then the turn is given up).
CHUNKS_PER_TURN = 8

# -- requests ------------------------------------------------------------------------

@attrs.define
class SnapshotRequest:
    __go_name__ = "JSApiStreamSnapshotRequest"
    deliver_subject: str = marshal.gofield(gojson.STRING, "")
    no_consumers: bool = marshal.gofield(gojson.BOOL, False)
    chunk_size: int = marshal.gofield(gojson.INT, 0)
    window_size: int = marshal.gofield(gojson.INT, 0, omit=True)
    jsck: bool = marshal.gofield(gojson.BOOL, False)


@attrs.define
class RestoreRequest:
    __go_name__ = "JSApiStreamRestoreRequest"
    config: SM.StreamConfig = marshal.gofield(gojson.Struct(SM.StreamConfig),
                                              factory=SM.StreamConfig)
    state: SM.StreamState = marshal.gofield(gojson.Struct(SM.StreamState), factory=SM.StreamState)


def _structure_snapshot(value, _):
    return SnapshotRequest(**value)


def _structure_restore(value, _):
    out = RestoreRequest()
    if value.get("config") is not None:
        out.config = marshal.converter.structure(value["config"], SM.StreamConfig)
    if value.get("state") is not None:
        out.state = marshal.converter.structure(value["state"], SM.StreamState)
    return out


marshal.converter.register_structure_hook(SnapshotRequest, _structure_snapshot)
marshal.converter.register_structure_hook(RestoreRequest, _structure_restore)


def _is_empty(raw):
    """nats-server's isEmptyRequest as 2.15.1 applies it here: no body, or a
    JSON object without members (``null`` and ``[]`` are not empty)."""
    if not raw:
        return True
    try:
        nodes = list(gojson.parse_json_values(bytes(raw)))
    except gojson.GoJSONError:
        return False
    return len(nodes) == 1 and nodes[0].kind == "object" and not nodes[0].value


def _now():
    return time.time_ns()


# Per plugin instance: {"snapshots": set(Sender), "restores": {name: Restore}}.
_SESSIONS = weakref.WeakKeyDictionary()


def _sessions(js):
    s = _SESSIONS.get(js)
    if s is None:
        s = _SESSIONS[js] = {"snapshots": set(), "restores": {}}
    return s


def _state_json(stream):
    return marshal.to_json(stream_state(stream))


# -- snapshot --------------------------------------------------------------------------

def stream_snapshot(js, args, body):
    if len(args) != 1:
        return None  # no subscription matches in nats-server: no answer
    if _is_empty(body):
        raise E.bad_request()
    stream = js.streams.get(args[0])
    if stream is None:
        raise E.stream_not_found()
    req = marshal.decode_request(body, SnapshotRequest)
    if not SR.subject_is_valid_literal(req.deliver_subject):
        raise E.snapshot_deliver_subject_invalid()
    chunk = req.chunk_size or DEFAULT_CHUNK_SIZE
    chunk = min(max(chunk, MIN_CHUNK_SIZE), MAX_CHUNK_SIZE)
    sender = Sender(js, stream, req.deliver_subject, chunk, not req.no_consumers,
                    window=window_bytes(chunk, req.window_size))
    # The response first (the handler's return value), then the chunks.
    js.broker.reactor.callLater(0, sender.start)
    return {"config": SM.stream_config_json(stream.config, dynamic=False),
            "state": sender.state_json}


def window_bytes(chunk, window_size):
    """nats-server's in-flight limit (``wndSize / chunkSize`` slots) in bytes:
    every unacknowledged chunk is a full one."""
    window = min(max(window_size or WINDOW_SIZE, MIN_WINDOW_SIZE), MAX_WINDOW_SIZE)
    return max(window, chunk) // chunk * chunk


class Sender:
    """Streams one snapshot out, a chunk at a time, as acks open the window."""

    def __init__(self, js, stream, deliver, chunk_size, consumers, window=WINDOW_SIZE):
        self.js = js
        self.broker = js.broker
        self.reactor = js.broker.reactor
        self.stream = stream
        self.name = stream.name
        self.deliver = deliver.encode()
        self.chunk_size = chunk_size
        self.window = window
        st = stream.store.state()
        self.first_seq = st.first_seq
        self.last_seq = st.last_seq
        self.last_ts = st.last_ts
        self.state_json = _state_json(stream)
        # Consumers as they are now (durables only: ephemerals die with their client).
        self.consumers = []
        if consumers:
            for name in sorted(stream.consumers):
                c = stream.consumers[name]
                if c.closed or not c.durable:
                    continue
                self.consumers.append({
                    "name": name, "created": c.created,
                    "config": CM.consumer_config_json(c.config),
                    "state": json.loads(c.state_json())})
        self.ack_subject = SNAPSHOT_ACK_T % (self.name, nuid())
        self.index = 0
        self.out = 0  # unacknowledged bytes
        self.with_reply = False  # a chunk with an ack subject went out: the EOF says 204
        self.sent_bytes = 0
        self.start_ns = _now()
        self._records = self._generate()
        self._buf = bytearray()
        self._exhausted = False
        self._pending = None  # a chunk read but held back by the window
        self._call = None
        self._timeout = None
        self._ack_sub = None
        self._deadline = 0
        self.done = False

    # -- payload ------------------------------------------------------------

    def _generate(self):
        w = Writer()
        yield w.magic()
        cfg = self.stream.config
        yield w.json(b"S", {
            "format": FORMAT_VERSION, "stream": self.name,
            "config": SM.stream_config_json(cfg, dynamic=False),
            "created": self.stream.created, "time": self.start_ns,
            "state": {"first_seq": self.first_seq, "last_seq": self.last_seq,
                      "last_ts": self.last_ts}})
        n = nbytes = 0
        seq = self.first_seq
        store = self.stream.store
        while seq and seq <= self.last_seq:
            if self.js.streams.get(self.name) is not self.stream:
                return  # deleted meanwhile: the snapshot ends without its digest
            msg = store.load_next(seq)
            if msg is None or msg.seq > self.last_seq:
                break
            yield w.message(msg)
            n += 1
            nbytes += len(msg.subject) + len(msg.hdr) + len(msg.data)
            seq = msg.seq + 1
        for c in self.consumers:
            yield w.json(b"C", c)
        yield w.json(b"E", {"last_seq": self.last_seq, "last_ts": self.last_ts,
                            "messages": n, "bytes": nbytes, "consumers": len(self.consumers)})
        yield w.close()

    def _read_chunk(self):
        """The next chunk as io.Reader semantics give it: ``(data, full)``;
        ``full`` False marks the short last one. ``None`` at the end."""
        buf = self._buf
        size = self.chunk_size
        while len(buf) < size and not self._exhausted:
            try:
                buf += next(self._records)
            except StopIteration:
                self._exhausted = True
        if len(buf) >= size:
            chunk = bytes(buf[:size])
            del buf[:size]
            return chunk, True
        if not buf:
            return None
        chunk = bytes(buf)
        buf.clear()
        return chunk, False

    # -- flow -----------------------------------------------------------------

    def start(self):
        _sessions(self.js)["snapshots"].add(self)
        self.js.advise("$JS.EVENT.ADVISORY.STREAM.SNAPSHOT_CREATE." + self.name, {
            "type": "io.nats.jetstream.advisory.v1.snapshot_create", "stream": self.name,
            "state": self.state_json})
        self._ack_sub = self.broker.subscribe(self.ack_subject.encode() + b".>", self._on_ack)
        self._deadline = self.reactor.seconds() + INTEREST_WAIT
        self._wait_interest()

    def _wait_interest(self):
        self._call = None
        if self.done:
            return
        if self.broker.sublist.has_interest(self.deliver) or self.reactor.seconds() >= self._deadline:
            self._pump()
        else:
            self._call = self.reactor.callLater(0.02, self._wait_interest)

    def _on_ack(self, sub, subject, reply, hdr_len, raw):
        try:
            n = int(subject.split(b".")[-2])
        except (ValueError, IndexError):
            return
        self.out = max(self.out - n, 0)
        if self._pending is not None and self._call is None and not self.done \
                and self.out + len(self._pending[0]) <= self.window:
            self._cancel_timeout()
            self._call = self.reactor.callLater(0, self._pump)

    def _pump(self):
        self._call = None
        if self.done:
            return
        if not self.broker.sublist.has_interest(self.deliver) and self.index:
            self._finish(None)  # lost interest
            return
        publish = self.broker.publish
        try:
            self.broker.begin()
            for _ in range(CHUNKS_PER_TURN):
                item = self._pending
                self._pending = None
                if item is None:
                    item = self._read_chunk()
                if item is None:
                    self._finish(EOF_OK if self.with_reply else None)
                    return
                chunk, full = item
                if not full:
                    publish(self.deliver, chunk)
                    self.sent_bytes += len(chunk)
                    # What follows a short read is the end.
                    self._finish(EOF_OK if self.with_reply else None)
                    return
                if self.out + len(chunk) > self.window:
                    self._pending = item
                    self._arm_timeout()
                    return
                self.index += 1
                reply = b"%s.%d.%d" % (self.ack_subject.encode(), len(chunk), self.index)
                publish(self.deliver, chunk, reply=reply)
                self.with_reply = True
                self.out += len(chunk)
                self.sent_bytes += len(chunk)
        except Exception:  # a store failure: the snapshot ends truncated (no digest)
            log.failure("snapshot of stream {name} failed", name=self.name)
            self._finish(None)
            return
        finally:
            self.broker.end()
        self._call = self.reactor.callLater(0, self._pump)

    def _arm_timeout(self):
        if self._timeout is None:
            self._timeout = self.reactor.callLater(FLOW_TIMEOUT, self._flow_timeout)

    def _cancel_timeout(self):
        if self._timeout is not None:
            if self._timeout.active():
                self._timeout.cancel()
            self._timeout = None

    def _flow_timeout(self):
        self._timeout = None
        if not self.done:
            self._finish(EOF_NO_FLOW)

    def _finish(self, header):
        if self.done:
            return
        self.stop()
        self.broker.publish(self.deliver, b"", headers=header)
        self.js.advise("$JS.EVENT.ADVISORY.STREAM.SNAPSHOT_COMPLETE." + self.name, {
            "type": "io.nats.jetstream.advisory.v1.snapshot_complete", "stream": self.name,
            "start": gotime.rfc3339(self.start_ns), "end": gotime.rfc3339(_now())})

    def stop(self):
        self.done = True
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None
        self._cancel_timeout()
        if self._ack_sub is not None:
            self.broker.unsubscribe(self._ack_sub)
            self._ack_sub = None
        self._records.close()
        self._sessions_discard()

    def _sessions_discard(self):
        s = _SESSIONS.get(self.js)
        if s is not None:
            s["snapshots"].discard(self)


# -- restore ---------------------------------------------------------------------------

def stream_restore(js, args, body):
    if len(args) != 1:
        return None
    name = args[0]
    if _is_empty(body):
        raise E.bad_request()
    req = marshal.decode_request(body, RestoreRequest)
    cfg = req.config
    if not cfg.name:
        cfg.name = name
    cfg = SC.fill_defaults(cfg, account_limits=js.limits)
    if cfg.name != name:
        raise E.stream_mismatch()
    L.check_restore(js, cfg)
    sessions = _sessions(js)
    if name in js.streams or name in sessions["restores"]:
        raise E.stream_name_exist_restore_failed()
    restore = Restore(js, cfg)
    return {"deliver_subject": restore.subject}


class Restore:
    """One restore in progress: chunks in, the stream built aside, installed at the end."""

    def __init__(self, js, cfg):
        self.js = js
        self.broker = js.broker
        self.reactor = js.broker.reactor
        self.cfg = cfg
        self.name = cfg.name
        self.subject = RESTORE_DELIVER_T % (self.name, nuid())
        self.total = 0
        self.start_ns = _now()
        self.consumers = []
        self.reader = Reader(self._apply)
        self.closed = False
        self.preempted = None  # the error to answer with once the name was taken
        store = js.store_for(cfg)
        old = store.stream(self.name)
        if old is not None:
            if old.get_meta(b"config") is not None:
                raise E.stream_name_exist_restore_failed()
            # Left behind by a restore that never finished (the server stopped):
            # it has no config, so it is not a stream.
            store.delete_stream(self.name)
        self.store = store
        try:
            self.ss = store.create_stream(self.name)
        except (OSError, ValueError):
            raise E.temp_storage_failed() from None
        _sessions(js)["restores"][self.name] = self
        self.sub = self.broker.subscribe(self.subject.encode(), self._on_chunk)
        self._idle = self.reactor.callLater(RESTORE_IDLE, self._stalled)
        js.advise("$JS.EVENT.ADVISORY.STREAM.RESTORE_CREATE." + self.name, {
            "type": "io.nats.jetstream.advisory.v1.restore_create", "stream": self.name})

    # -- chunks -------------------------------------------------------------

    def _on_chunk(self, sub, subject, reply, hdr_len, raw):
        if self.closed:
            return
        data = raw[hdr_len:]
        if self.preempted is not None:
            # A stream of this name was created meanwhile: nats-server fails
            # the restore at its end with 10130; the next chunk learns it here.
            err, self.preempted = self.preempted, None
            self._close()
            if reply:
                self._reply_error(reply, err)
            return
        if not reply:
            # nats-server: every chunk needs a reply subject; the restore ends.
            self._abort()
            return
        if not data:
            self._complete(reply)
            return
        self.total += len(data)
        self._idle.reset(RESTORE_IDLE)
        try:
            self.reader.feed(data)
        except SnapshotError as e:
            self._fail(reply, E.stream_restore(str(e)))
            return
        except E.ApiError as e:
            self._fail(reply, e)
            return
        self.broker.publish(reply, b"")
        self.js.schedule_commit()

    def _apply(self, kind, value):
        ss = self.ss
        if kind == "M":
            _advance_to(ss, value.seq, value.ts)
            seq = ss.append(value.subject, value.hdr, value.data, value.ts)
            if seq != value.seq:  # pragma: no cover - _advance_to guarantees it
                raise SnapshotError("restore out of sequence at %d" % value.seq)
        elif kind == "S":
            # Up to first_seq - 1: the first message, or the E record's
            # last_seq/last_ts of an empty stream, then come next.
            first = int((value.get("state") or {}).get("first_seq") or 0)
            if first > 1:
                ss.purge(seq=first - 1)
        elif kind == "C":
            self.consumers.append(value)
        elif kind == "E":
            _advance_last(ss, int(value.get("last_seq") or 0), int(value.get("last_ts") or 0))

    # -- the end ------------------------------------------------------------

    def _complete(self, reply):
        try:
            self.reader.finish()
        except SnapshotError as e:
            self._fail(reply, E.stream_restore(str(e)))
            return
        js = self.js
        cfg = self.cfg
        try:
            if self.name in js.streams:
                raise E.stream_name_exist_restore_failed()
            try:
                SC.check_create(cfg)
                for other in js.streams.values():
                    if SR.subjects_overlap(cfg.subjects, other.config.subjects):
                        raise E.stream_subject_overlap()
            except E.ApiError as e:
                # What nats-server's addStream refuses, as its restore reports it.
                raise E.stream_restore("error adding stream: %s (%d)"
                                       % (e.description, e.err_code)) from None
            consumers = self._consumer_configs()
        except E.ApiError as e:
            self._fail(reply, e)
            return
        stream = self._install(consumers)
        info = SM.stream_info_json(stream.config, stream.created, stream_state(stream))
        resp = {"type": AM.TYPE_STREAM_CREATE}
        resp.update(info)
        js.reply_after_commit(reply, gojson.go_json_dumps(resp).encode())
        self._advise_complete()

    def _consumer_configs(self):
        out = []
        for c in self.consumers:
            try:
                name = c["name"]
                cfg = CM.consumer_config_from_json(c["config"])
                state = json.dumps(c["state"]).encode()
            except Exception as e:
                raise E.stream_restore("bad consumer record: %s" % e) from None
            out.append((name, cfg, state))
        return out

    def _install(self, consumers):
        js = self.js
        self._close()
        ss = self.ss
        cfg = self.cfg
        created = _now()
        ss.put_meta(META_CONFIG, json.dumps(SM.stream_config_json(cfg)).encode())
        ss.put_meta(META_CREATED, str(created).encode())
        stream = Stream(cfg, ss, created, self.reactor)
        js._add(stream)
        stream.recover()
        stream.enforce_limits()
        for name, ccfg, state in consumers:
            js.add_consumer(stream, name, ccfg, None, state, persist=True)
        js.sourcing.stream_added(stream)  # a restored mirror/source goes on copying
        js.schedule_commit()
        return stream

    def _advise_complete(self):
        self.js.advise("$JS.EVENT.ADVISORY.STREAM.RESTORE_COMPLETE." + self.name, {
            "type": "io.nats.jetstream.advisory.v1.restore_complete", "stream": self.name,
            "start": gotime.rfc3339(self.start_ns), "end": gotime.rfc3339(_now()),
            "bytes": self.total})

    def _fail(self, reply, err):
        """Answer ``reply`` with the final error and drop what was written."""
        self._abort()
        self._reply_error(reply, err)

    def _reply_error(self, reply, err):
        resp = {"type": AM.TYPE_STREAM_CREATE, "error": err.to_json()}
        self.broker.publish(reply, gojson.go_json_dumps(resp).encode())
        self._advise_complete()

    def preempt(self):
        """A stream of this name is being created: drop what was written now
        (the store name is needed) and fail the restore at the next chunk."""
        if self.closed or self.preempted is not None:
            return
        self.preempted = E.stream_name_exist_restore_failed()
        self.store.delete_stream(self.name)
        s = _SESSIONS.get(self.js)
        if s is not None and s["restores"].get(self.name) is self:
            del s["restores"][self.name]

    def _stalled(self):
        self._idle = None
        self._abort()

    def _abort(self):
        if self.closed:
            return
        self._close()
        if self.preempted is None:
            self.store.delete_stream(self.name)

    def _close(self):
        self.closed = True
        if self._idle is not None and self._idle.active():
            self._idle.cancel()
        self._idle = None
        self.broker.unsubscribe(self.sub)
        s = _SESSIONS.get(self.js)
        if s is not None and s["restores"].get(self.name) is self:
            del s["restores"][self.name]


def _advance_to(ss, seq, ts):
    """Make ``seq`` the sequence the store's next append gets: the sequences
    skipped on the way become deleted ones (or move first_seq when empty)."""
    st = ss.state()
    nxt = st.last_seq + 1
    if seq < nxt:
        raise SnapshotError("snapshot corrupt: message %d below the stream's last sequence" % seq)
    if seq == nxt:
        return
    if not st.msgs:
        ss.purge(seq=seq)  # empty: first_seq = seq, last_seq = seq - 1
        return
    skip = ss.skip
    for _ in range(seq - nxt):
        skip(ts)


def _advance_last(ss, last_seq, last_ts):
    """Trailing sequences without messages, up to the snapshot's last_seq/last_ts."""
    st = ss.state()
    if last_seq < st.last_seq:
        raise SnapshotError("snapshot corrupt: last sequence %d below its messages" % last_seq)
    if last_seq == st.last_seq:
        return
    if not st.msgs and last_seq > st.last_seq + 1:
        ss.purge(seq=last_seq)
    else:
        skip = ss.skip
        for _ in range(last_seq - 1 - ss.state().last_seq):
            skip(last_ts)
    ss.skip(last_ts)


# -- plugin hooks --------------------------------------------------------------------

def stop(js):
    """Plugin stop: end every snapshot being sent and abandon every restore."""
    s = _SESSIONS.pop(js, None)
    if s is None:
        return
    for sender in list(s["snapshots"]):
        sender.stop()
    for restore in list(s["restores"].values()):
        restore._abort()


def release_name(js, name):
    """Before a stream called ``name`` is created (``JetStream.create_stream``):
    a restore of that name in progress gives way (it fails, as in nats-server
    where the restore ends with 10130 when the name was taken meanwhile), and a
    config-less store stream left by an interrupted restore is deleted, so the
    store has the name free."""
    s = _SESSIONS.get(js)
    restore = s["restores"].get(name) if s is not None else None
    if restore is not None:
        restore.preempt()
    if name not in js.streams:
        for store in (js.file_store, js.memory_store):
            ss = store.stream(name) if store is not None else None
            if ss is not None and ss.get_meta(b"config") is None:
                store.delete_stream(name)


def cleanup_orphans(js):
    """Plugin start (after loading streams): store streams without a config
    (left by restores the server never finished, or a damaged store) are
    never deleted by guesswork: file streams are moved to the quarantine
    directory (and logged there); memory streams hold nothing after a start."""
    for store in (js.file_store, js.memory_store):
        for name in store.stream_names():
            if name not in js.streams:
                ss = store.stream(name)
                if ss is not None and ss.get_meta(b"config") is None:
                    if hasattr(store, "quarantine_stream"):
                        st = ss.state()
                        store.quarantine_stream(name, "no stream config found (%d message(s), "
                                                "last sequence %d)" % (st.msgs, st.last_seq))
                    else:
                        store.delete_stream(name)


ROUTES = {
    ("STREAM", "SNAPSHOT"): (stream_snapshot, "stream_snapshot_response", 1),
    ("STREAM", "RESTORE"): (stream_restore, "stream_restore_response", 1),
}

# Fields nats-server sends even with an error (api.ERROR_EXTRAS).
ERROR_EXTRAS = {
    "stream_restore_response": {"deliver_subject": ""},
}
