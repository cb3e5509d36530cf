"""The change feed: every stream mutation as JSON Lines, for Spark to ingest.

Enabled by a ``changefeed { dir: ..., streams: [...] }`` block. It watches
JetStream through ``IStreamEvents`` (nothing else of JetStream's) and writes
one record per mutation -- message stored, message removed (and why), purge,
stream created/updated/deleted -- to ``feed-<n>.tmp`` in the feed directory.
A file is closed when it reaches ``max_file_size`` or ``max_file_age``: it is
fsynced (in a thread, so the reactor never waits on the disk) and renamed to
``feed-<n>.jsonl``; names sort in feed order, and a reader never sees a
partial file. The record schema is in ``man/natsbroker-changefeed.5``.

Crash safety: ``checkpoint.json`` (replaced atomically after each rename)
holds, per stream, the last stored sequence whose ``put`` record is in a
completed file. At start-up every stored message after it is written again,
so after a SIGKILL no stored (hence no acknowledged) message is missing from
the feed; the records repeated that way carry the same ``id``, which is what
the ingest de-duplicates on.
"""

import base64
import binascii
import fnmatch
import json
import os
import time

from twisted.internet import threads
from twisted.logger import Logger
from zope.interface import implementer

from natsbroker.interfaces import IBrokerPlugin, IStreamEvents
from natsbroker.plugin import PluginFactory
from natsbroker.protocol.wire import HeaderError, decode_headers
from natsbroker.store.base import StreamEvent

log = Logger()

FORMAT = 1
REPLAY_BATCH = 2000  # records written per reactor turn while catching up


def record_id(ev_stream, created, op, seq, ts):
    base = "%s@%d:%s:%d" % (ev_stream, created, op, seq)
    return base if op in ("put", "delete") else "%s:%d" % (base, ts)


def _headers(hdr):
    if not hdr:
        return None
    try:
        _, _, pairs = decode_headers(hdr)
    except HeaderError:
        return None
    out = {}
    for name, value in pairs:
        out.setdefault(name.decode("latin-1"), []).append(value.decode("utf-8", "replace"))
    return out or None


def _enrich(record, stream, msg):
    """KV and Object Store meaning of a stored message, from the layout the
    clients use (KV_<bucket>: $KV.<bucket>.<key>; OBJ_<bucket>: $O.<bucket>.M/C)."""
    subject = msg.subject.decode("utf-8", "replace")
    if stream.startswith("KV_"):
        bucket = stream[3:]
        prefix = "$KV.%s." % bucket
        if subject.startswith(prefix):
            op = "PUT"
            for name, values in (record["headers"] or {}).items():
                if name.lower() == "kv-operation" and values:
                    op = values[0].upper()
            record["kv"] = {"bucket": bucket, "key": subject[len(prefix):], "operation": op,
                            "revision": msg.seq}
    elif stream.startswith("OBJ_"):
        bucket = stream[4:]
        parts = subject.split(".", 3)
        if len(parts) == 4 and parts[0] == "$O" and parts[1] == bucket:
            if parts[2] == "M":
                try:
                    meta = json.loads(msg.data)
                    name = base64.urlsafe_b64decode(parts[3]).decode()
                except (ValueError, TypeError):
                    return
                if isinstance(meta, dict):
                    record["obj"] = {"bucket": bucket, "object": meta.get("name") or name,
                                     "event": "delete" if meta.get("deleted") else "put",
                                     "nuid": meta.get("nuid"), "size": meta.get("size"),
                                     "digest": meta.get("digest")}
            elif parts[2] == "C":
                record["obj"] = {"bucket": bucket, "object": None, "event": "chunk",
                                 "nuid": parts[3], "size": len(msg.data), "digest": None}


_PUT_LINE = (b'{"id":"%s:put:%%d","feed":1,"stream":%s,"stream_created":%d,"seq":%%d,'
             b'"op":"put","reason":null,"ts":%%d,"subject":%%s,"headers":%%s,"data":"%%s",'
             b'"purge":null,"config":null,"kv":null,"obj":null}\n')


class PutLines:
    """The JSON line of a plain stream's put, from a per-stream template:
    the same bytes ``json.dumps(make_record(ev))`` gives, several times faster
    (this runs once per stored message)."""

    def __init__(self):
        self._templates = {}  # (stream, created) -> template
        self.subjects = {}  # subject bytes -> its JSON string

    def template(self, stream, created):
        key = (stream, created)
        tpl = self._templates.get(key)
        if tpl is None:
            # A stream name may hold '%': escaped, the template stays a format.
            ident = json.dumps("%s@%d" % key)[1:-1].encode().replace(b"%", b"%%")
            name = json.dumps(stream).encode().replace(b"%", b"%%")
            tpl = self._templates[key] = _PUT_LINE % (ident, name, created)
        return tpl

    def subject(self, subject):
        subj = self.subjects.get(subject)
        if subj is None:
            if len(self.subjects) > 10000:
                self.subjects.clear()
            subj = self.subjects[subject] = json.dumps(subject.decode("utf-8", "replace")).encode()
        return subj

    def line(self, ev):
        msg = ev.msg
        hdrs = b"null"
        if msg.hdr:
            h = _headers(msg.hdr)
            if h is not None:
                hdrs = json.dumps(h, separators=(",", ":")).encode()
        return self.template(ev.stream, ev.stream_created) % (
            ev.seq, ev.seq, ev.ts, self.subject(msg.subject), hdrs,
            binascii.b2a_base64(msg.data, newline=False))


def make_record(ev):
    rec = {"id": record_id(ev.stream, ev.stream_created, ev.op, ev.seq, ev.ts), "feed": FORMAT,
           "stream": ev.stream, "stream_created": ev.stream_created, "seq": ev.seq, "op": ev.op,
           "reason": ev.reason, "ts": ev.ts, "subject": None, "headers": None, "data": None,
           "purge": None, "config": None, "kv": None, "obj": None}
    msg = ev.msg
    if msg is not None:
        rec["subject"] = msg.subject.decode("utf-8", "replace")
        rec["headers"] = _headers(msg.hdr)
        if ev.op == "put":
            rec["data"] = base64.b64encode(msg.data).decode()
            _enrich(rec, ev.stream, msg)
    if ev.purge is not None:
        filt, upto, keep = ev.purge
        rec["purge"] = {"filter": filt, "upto_seq": upto, "keep": keep}
    if ev.config is not None:
        rec["config"] = json.dumps(ev.config, separators=(",", ":"))
    return rec


@implementer(IBrokerPlugin)
class ChangeFeed:
    name = "changefeed"

    def __init__(self, config):
        self.config = config
        self.cfg = config.changefeed
        self.broker = None
        self.js = None
        self._file = None
        self._file_no = 0
        self._file_started = 0.0
        self._file_size = 0
        self._file_puts = {}  # stream -> (created, last put seq) in the open file
        self._closing = None  # Deferred of the file being synced, if any
        self._roll_call = None
        self._retention_call = None
        self.checkpoint = {}  # stream -> {"created": ns, "seq": n}
        self._replay_pos = {}  # stream -> next seq the start-up replay will write
        self._wanted = {}  # stream -> included?
        self._lines = PutLines()
        self._fast = {}  # plain stream included -> (created, put line template)
        self.records = 0

    # -- lifecycle ------------------------------------------------------------

    def start(self, broker):
        self.broker = broker
        js = broker.plugin("jetstream")
        if js is None or not IStreamEvents.providedBy(js):
            log.error("change feed: no plugin offers IStreamEvents (is JetStream on?); disabled")
            return
        self.js = js
        store_dir = os.path.abspath(self.config.jetstream.store_dir or "data")
        self.dir = os.path.abspath(self.cfg.dir or os.path.join(store_dir, "changefeed"))
        os.makedirs(self.dir, exist_ok=True)
        numbers = [0]
        for name in os.listdir(self.dir):
            if name.startswith("feed-") and name.endswith(".tmp"):
                # An unfinished file of a previous run: its puts are replayed.
                os.unlink(os.path.join(self.dir, name))
            elif name.startswith("feed-") and name.endswith(".jsonl"):
                try:
                    numbers.append(int(name[5:-6]))
                except ValueError:
                    pass
        self._file_no = max(numbers)
        self._load_checkpoint()
        js.add_stream_observer(self.on_event)
        self._replay(list(js.stream_names()), None)
        if self.cfg.retention > 0:
            self._expire_old()
        log.info("Change feed: writing to {dir}", dir=self.dir)

    def stop(self):
        if self.js is None:
            return
        self.js.remove_stream_observer(self.on_event)
        for call in (self._roll_call, self._retention_call):
            if call is not None and call.active():
                call.cancel()
        # Shutting down: finish the open file synchronously.
        if self._file is not None:
            f, no, puts = self._detach()
            self._finish(f, no, puts, sync_now=True)

    # -- selection --------------------------------------------------------------

    def wants(self, stream):
        pats = self.cfg.streams
        return not pats or any(fnmatch.fnmatchcase(stream, p) for p in pats)

    # -- events ------------------------------------------------------------------

    def on_event(self, ev):
        # The common case inline (it runs once per stored message): a put
        # without headers on a plain stream already seen, into an open file.
        fast = self._fast.get(ev.stream)
        if fast is not None and fast[0] == ev.stream_created and ev.op == "put":
            msg = ev.msg
            subj = self._lines.subjects.get(msg.subject)
            f = self._file
            if subj is not None and not msg.hdr and f is not None:
                seq = ev.seq
                line = fast[1] % (seq, seq, ev.ts, subj, b"null",
                                  binascii.b2a_base64(msg.data, newline=False))
                f.write(line)
                self.records += 1
                self._file_puts[ev.stream] = (fast[0], seq)
                self._file_size += len(line)
                if self._file_size >= self.cfg.max_file_size:
                    self._roll()
                return
        wanted = self._wanted.get(ev.stream)
        if wanted is None:
            wanted = self._wanted[ev.stream] = self.wants(ev.stream)
        if not wanted:
            return
        if ev.op == "put" and not ev.stream.startswith(("KV_", "OBJ_")):
            self._fast[ev.stream] = (ev.stream_created,
                                     self._lines.template(ev.stream, ev.stream_created))
            self._write_line(self._lines.line(ev), ev.stream, ev.stream_created, ev.seq)
        else:
            self._write(make_record(ev))

    def _replay(self, names, position):
        """Write put records for stored messages newer than the checkpoint, a
        batch per reactor turn (a large backlog must not stall the server)."""
        n = 0
        while names:
            name = names[0]
            if not self.wants(name):
                names.pop(0)
                position = None
                continue
            created = self.js.stream_created(name)
            if position is None:
                cp = self.checkpoint.get(name)
                position = cp["seq"] + 1 if cp and cp.get("created") == created else 1
            msg = self.js.read_stream(name, position)
            while msg is not None and n < REPLAY_BATCH:
                self.on_replayed(name, created, msg)
                n += 1
                position = msg.seq + 1
                msg = self.js.read_stream(name, position)
            if msg is not None:
                # Live records interleave with the rest of the backlog: the
                # checkpoint may not pass what the replay has written.
                self._replay_pos[name] = position
                self.broker.reactor.callLater(0, self._replay, names, position)
                return
            self._replay_pos.pop(name, None)
            names.pop(0)
            position = None

    def on_replayed(self, name, created, msg):
        self._write(make_record(StreamEvent(name, created, "put", msg.seq, msg.ts, msg=msg)))

    # -- files ---------------------------------------------------------------------

    def _path(self, no, ext):
        return os.path.join(self.dir, "feed-%020d.%s" % (no, ext))

    def _open(self):
        self._file_no += 1
        # A large buffer: records go to the kernel in big writes.
        self._file = open(self._path(self._file_no, "tmp"), "wb", buffering=1 << 20)
        self._file_started = time.monotonic()
        self._file_size = 0
        self._file_puts = {}
        self._roll_call = self.broker.reactor.callLater(self.cfg.max_file_age, self._roll)

    def _write(self, rec):
        line = json.dumps(rec, separators=(",", ":")).encode() + b"\n"
        if rec["op"] == "put":
            self._write_line(line, rec["stream"], rec["stream_created"], rec["seq"])
        else:
            self._write_line(line)

    def _write_line(self, line, stream=None, created=0, seq=0):
        if self._file is None:
            self._open()
        self._file.write(line)
        self._file_size += len(line)
        self.records += 1
        if stream is not None:
            self._file_puts[stream] = (created, seq)
        if self._file_size >= self.cfg.max_file_size:
            self._roll()

    def _detach(self):
        f, no, puts = self._file, self._file_no, self._file_puts
        for stream, pos in self._replay_pos.items():
            if stream in puts:
                created, seq = puts[stream]
                puts[stream] = (created, min(seq, pos - 1))
        self._file = None
        self._file_puts = {}
        if self._roll_call is not None and self._roll_call.active():
            self._roll_call.cancel()
        self._roll_call = None
        return f, no, puts

    def _roll(self):
        """Close the open file: fsync it off the reactor thread, then rename it.
        Files complete one at a time, in order."""
        self._roll_call = None
        if self._file is None:
            return
        f, no, puts = self._detach()
        f.flush()
        prev = self._closing
        if prev is None:
            d = threads.deferToThread(os.fsync, f.fileno())
        else:
            d = prev.addCallback(lambda _: threads.deferToThread(os.fsync, f.fileno()))
        d.addCallback(lambda _: self._finish(f, no, puts, sync_now=False))
        d.addErrback(lambda failure: log.failure("change feed: closing a file failed", failure))

        def done(result):
            if self._closing is d:
                self._closing = None
            return result
        d.addBoth(done)
        self._closing = d

    def _finish(self, f, no, puts, sync_now):
        if sync_now:
            f.flush()
            os.fsync(f.fileno())
        f.close()
        os.rename(self._path(no, "tmp"), self._path(no, "jsonl"))
        self._fsync_dir()
        for stream, (created, seq) in puts.items():
            self.checkpoint[stream] = {"created": created, "seq": seq}
        self._save_checkpoint()

    def _fsync_dir(self):
        fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _load_checkpoint(self):
        try:
            with open(os.path.join(self.dir, "checkpoint.json")) as f:
                self.checkpoint = json.load(f)
        except (OSError, ValueError):
            self.checkpoint = {}

    def _save_checkpoint(self):
        path = os.path.join(self.dir, "checkpoint.json")
        with open(path + ".tmp", "w") as f:
            json.dump(self.checkpoint, f)
            f.flush()
            os.fsync(f.fileno())
        os.rename(path + ".tmp", path)

    def _expire_old(self):
        """Remove completed files older than ``retention``."""
        cutoff = time.time() - self.cfg.retention
        for name in sorted(os.listdir(self.dir)):
            if name.startswith("feed-") and name.endswith(".jsonl"):
                path = os.path.join(self.dir, name)
                try:
                    if os.stat(path).st_mtime < cutoff:
                        os.unlink(path)
                except OSError:
                    pass
        self._retention_call = self.broker.reactor.callLater(
            min(self.cfg.retention, 60.0), self._expire_old)


changefeed = PluginFactory("changefeed", ChangeFeed, order=30,
                           enabled=lambda config: config.changefeed.enabled
                           and config.jetstream.enabled)
