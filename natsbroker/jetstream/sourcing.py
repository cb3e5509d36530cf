"""Stream mirrors and sources: copying another stream's messages into this one.

nats-server copies through an internal push consumer on the origin stream; here
origin and destination live in the same process, so a :class:`SourceLink` reads
the origin's store directly, a bounded batch per reactor turn, and learns of new
origin messages through the plugin's ``IStreamEvents`` observers. Copies go
through ``Stream.accept(..., sourced=...)`` -- limits, consumers, republish and
the group commit all as for a publish.

* A **mirror** keeps the origin's sequence numbers and timestamps: sequences the
  origin no longer has (deleted, or filtered out) become gaps in the mirror.
* A **source** appends with the destination's own sequences and adds the
  ``Nats-Stream-Source`` header: ``<origin> <origin seq> <filter> <dest>
  <origin subject> <origin id>`` (as nats-server 2.12+ writes it; the last field
  is a hash identifying the origin stream instance).

Progress (the next origin sequence to look at, the last one copied) is kept in
the destination store's meta under ``src.<hash of the source's index name>``,
staged with the copied messages so that the same commit makes both durable: a
restart, even after SIGKILL, resumes without duplicates or gaps. Without that
record (a source added by an update, or an older store) a mirror resumes after
its last sequence and a source from the last ``Nats-Stream-Source`` header of
its own, as nats-server does.

A mirror or source with a ``consumer`` (``{name, deliver_subject}``, nats-server
2.14's reliable WorkQueue/Interest sourcing) reads through that durable
consumer of the origin instead, as nats-server does: the link subscribes to
the consumer's deliver subject, resets the consumer to its ack floor
(``CONSUMER.RESET``), copies what is delivered, and answers the consumer's
flow control requests with ``Nats-Last-Consumer``/``Nats-Last-Stream`` only
after the commit that made the copies durable -- with ``ack_policy:
flow_control`` that reply is the ack, so WorkQueue and Interest origins lose
the messages once copied, and a restart resumes from the consumer's ack floor.
The consumer is never created by the link: a missing one leaves the link
inactive (nats-server's reset request goes unanswered), one with another ack
policy shows ``mirror/source consumer requires flow control ack policy``.

Not done: ``external`` origins other than this server's own API prefix (the
link stays inactive, as a nats-server source whose prefix nobody answers
does), ``mirror_direct`` serving direct gets for the origin.
"""

import base64
import hashlib
import json
import weakref

from twisted.logger import Logger

from natsbroker.gocompat import times as gotime
from natsbroker.jetstream import errors as E, stream_models as SM
from natsbroker.jetstream.stream import now_ns
from natsbroker.subjects.sublist import subject_matches
from natsbroker.subjects.transform import SubjectTransform

log = Logger()

NANOS = 1_000_000_000

# Copy at most this many messages (or sequence skips) per link per reactor turn,
# so a big backlog never holds the reactor: clients are served between batches.
BATCH = 256
SKIP_BATCH = 50_000
# A copy the destination refused (limits with discard new, sealed...) is tried
# again this much later (nats-server's sourceConsumerRetryThreshold).
RETRY = 2.0
# nats-server's origins send a heartbeat every second: "active" is never more
# than that while the origin is there.
HEARTBEAT = NANOS
# How long nats-server waits for a durable consumer's reset reply before it
# tries again (srcDurableConsumerWaitTime).
DURABLE_WAIT = 5.0

_FC_REPLY = b"NATS/1.0\r\nNats-Last-Consumer: %d\r\nNats-Last-Stream: %d\r\n\r\n"

H_STREAM_SOURCE = b"Nats-Stream-Source"
META_PREFIX = b"src."


def go_hash(text):
    """nats-server's ``getHash``: 8 characters of URL-safe base64 of SHA-256."""
    digest = hashlib.sha256(text.encode()).digest()
    return base64.urlsafe_b64encode(digest).decode()[:8]


def stream_identity(stream):
    """The origin instance's hash: the last field of a source header, and
    the ``Nats-Stream-Identity`` a sourcing consumer's creation answers
    with (a re-created stream has another)."""
    return go_hash("%s %d" % (stream.name, stream.created))


def index_name(spec):
    """nats-server's ``composeIName``: ``<name[:hash(api)]> <filters> <dests>``,
    several transforms joined with form feeds, empty parts as ``>``."""
    name = spec.name
    if spec.external is not None:
        name = "%s:%s" % (name, go_hash(spec.external.api))
    if not spec.subject_transforms:
        return " ".join((name, spec.filter_subject or ">", ">"))
    srcs = "\f".join(tr.src or ">" for tr in spec.subject_transforms)
    dests = "\f".join(tr.dest or ">" for tr in spec.subject_transforms)
    return " ".join((name, srcs, dests))


def source_headers(hdr):
    """A sourced message's headers without an earlier ``Nats-Stream-Source``
    (daisy chains) and without ``Nats-Expected-*`` (not to be checked again);
    returned without the final blank line."""
    if not hdr:
        return b"NATS/1.0\r\n"
    lines = hdr.split(b"\r\n")
    keep = [lines[0]]
    for line in lines[1:]:
        if not line:
            continue
        name = line.partition(b":")[0]
        if name == H_STREAM_SOURCE or name.startswith(b"Nats-Expected-"):
            continue
        keep.append(line)
    return b"\r\n".join(keep) + b"\r\n"


def mirror_headers(hdr):
    """A mirrored message's headers: the origin's without ``Nats-Expected-*``
    (case as written, like nats-server), none at all if nothing is left."""
    if not hdr or b"Nats-Expected-" not in hdr:
        return hdr
    lines = [line for line in hdr.split(b"\r\n")[1:]
             if line and not line.startswith(b"Nats-Expected-")]
    if not lines:
        return b""
    return b"\r\n".join([hdr.split(b"\r\n", 1)[0]] + lines) + b"\r\n\r\n"


class SourceLink:
    """One ``mirror`` or ``sources`` entry of a destination stream."""

    def __init__(self, dest, spec, mirror):
        self.dest = dest
        self.spec = spec
        self.mirror = mirror
        self.origin_name = spec.name
        self.iname = index_name(spec)
        self.meta_key = META_PREFIX + go_hash(self.iname).encode()
        head = self.iname.split(" ")
        self.header_head = ("%s " % head[0]).encode()
        self.header_mid = (" %s %s " % (head[1], head[2])).encode()
        if spec.subject_transforms:
            self.filters = [(tr.src or ">").encode() for tr in spec.subject_transforms]
            self.transforms = [SubjectTransform.compile(tr.src or ">", tr.dest)
                               if tr.dest else None for tr in spec.subject_transforms]
        else:
            self.filters = [spec.filter_subject.encode()] if spec.filter_subject else None
            self.transforms = None
        self.origin = None  # the origin Stream while attached
        self.ident = b""  # the origin instance's hash (last header field)
        self.scan = 0  # next origin sequence to look at; 0 = position unknown yet
        self.copied = 0  # origin sequence of the last message copied
        self.lag = 0
        self.last = 0  # ns of the last contact with the origin (0 = never)
        self.error = None  # an ApiError shown in the stream info
        self.call = None  # the pending reactor call (pump or retry)
        self.closed = False
        self.tried = False  # an attach was attempted
        # Durable sourcing (spec.consumer): the deliver subject subscription,
        # the origin consumer read through, and the last delivery sequence.
        self.sub = None
        self.consumer = None
        self.dseq = 0

    @property
    def durable(self):
        return self.spec.consumer is not None

    # -- what the stream info shows ----------------------------------------

    def info(self, now):
        if self.origin is not None and not self.durable:
            self.lag = self._pending()
        if not self.last:
            active = -1
        elif self.origin is not None:
            active = (now - self.last) % HEARTBEAT
        else:
            active = now - self.last
        spec = self.spec
        trs = [SM.SubjectTransformConfig(tr.src, tr.dest) for tr in spec.subject_transforms or ()]
        ext = spec.external
        return SM.StreamSourceInfo(
            name=spec.name,
            external=SM.ExternalStream(ext.api, ext.deliver) if ext is not None else None,
            lag=self.lag, seq=0 if self.mirror else self.copied, active=active,
            error=SM.ApiErrorBody.of(self.error) if self.error is not None else None,
            # nats-server shows a mirror's filter once it first sets the copy up.
            filter_subject=spec.filter_subject if self.tried or not self.mirror else "",
            subject_transforms=trs or None)

    def _pending(self):
        """Origin messages this link has still to copy."""
        store = self.origin.store
        start = max(self.scan, 1)
        if self.filters is None:
            return store.num_pending(start)
        return sum(store.num_pending(start, f) for f in self.filters)

    # -- reading the origin ------------------------------------------------

    def next_msg(self):
        """The first origin message at or after ``scan`` this link takes."""
        store = self.origin.store
        if self.filters is None:
            return store.load_next(self.scan)
        best = None
        for f in self.filters:
            m = store.load_next(self.scan, f)
            if m is not None and (best is None or m.seq < best.seq):
                best = m
        return best

    def takes(self, subject):
        """Whether this link copies messages on ``subject``."""
        if self.filters is None:
            return True
        return any(f == b">" or subject_matches(f, subject) for f in self.filters)

    def subject_for(self, subject):
        if self.transforms:
            for tr in self.transforms:
                if tr is not None:
                    out = tr.match(subject)
                    if out is not None:
                        return out
        return subject

    def source_header(self, seq, subject, hdr):
        """The copy's headers: the origin message's (``source_headers``) and
        ``Nats-Stream-Source`` for origin sequence ``seq`` on ``subject``,
        the origin instance last when known."""
        return (source_headers(hdr) + H_STREAM_SOURCE + b": " + self.header_head
                + b"%d" % seq + self.header_mid + subject
                + (b" " + self.ident if self.ident else b"") + b"\r\n\r\n")

    # -- progress ----------------------------------------------------------

    def load_progress(self):
        raw = self.dest.store.get_meta(self.meta_key)
        if raw is None:
            return False
        try:
            rec = json.loads(raw)
            self.scan, self.copied = int(rec["scan"]), int(rec["copied"])
        except (ValueError, KeyError, TypeError):
            return False
        return True

    def save_progress(self):
        self.dest.store.put_meta(self.meta_key,
                                 b'{"scan":%d,"copied":%d}' % (self.scan, self.copied))


class Sourcing:
    """All the mirror/source links of a JetStream plugin.

    The plugin calls :meth:`start`/:meth:`stop` and tells it of streams created,
    updated and deleted; the rest runs on reactor calls.
    """

    def __init__(self, js, remote=None):
        self.js = js
        # remote(stream): a started remote_sourcing.RemoteSourcing storing
        # here (given by the engine, which knows both modules).
        self._make_remote = remote
        self.links = {}  # destination stream name -> [SourceLink]
        self._by_origin = {}  # origin stream name -> [SourceLink]
        # workqueue origin Stream -> seq its consumption by the links reached
        self._consumed = weakref.WeakKeyDictionary()
        self._observing = False
        # Streams of one replica in a cluster copy through origin consumers
        # (the origin may be on another server): name -> RemoteSourcing.
        self.remote = {}

    @property
    def reactor(self):
        return self.js.broker.reactor

    # -- lifecycle -----------------------------------------------------------

    def start(self):
        for stream in list(self.js.streams.values()):
            self._add_links(stream)
        self._sync_observer()

    def stop(self):
        for links in self.links.values():
            for link in links:
                self._close(link)
        self.links = {}
        for name in list(self.remote):
            self.stop_remote(name)
        self._sync_observer()

    def stream_added(self, stream):
        """A stream was created: links of its own, and links waiting for it as origin."""
        self._add_links(stream)
        for link in self._all():
            if link.origin_name == stream.name and link.origin is None:
                self._schedule(link)
        self._sync_observer()

    def stream_updated(self, stream):
        """Sources may be added or removed by an update (a mirror cannot change)."""
        if getattr(stream, "group", None) is not None:
            stream.group.sources_changed()
        if stream.name in self.remote:
            self.stop_remote(stream.name)
            self._schedule_all(stream)
        old = {link.iname: link for link in self.links.get(stream.name, ())}
        links = []
        for spec, mirror in self.specs(stream.config):
            iname = index_name(spec)
            link = old.pop(iname, None)
            if link is None:
                link = SourceLink(stream, spec, mirror)
                self._schedule(link)
            link.spec = spec
            links.append(link)
        for link in old.values():
            self._close(link)
            stream.store.del_meta(link.meta_key)
        if links:
            self.links[stream.name] = links
        else:
            self.links.pop(stream.name, None)
        self._sync_observer()

    def stream_removed(self, stream):
        """A stream was deleted: its links go, links copying from it stop."""
        self.stop_remote(stream.name)
        for link in self.links.pop(stream.name, ()):
            self._close(link)
        for link in self._all():
            if link.origin is stream:
                self._detach(link)
                link.error = E.stream_not_found()
        self._sync_observer()

    def info(self, stream):
        """``(mirror, sources)`` for a stream info: StreamSourceInfo or None, list or None."""
        group = getattr(stream, "group", None)
        remote = group.sourcing_info() if group is not None else None
        if remote is not None:
            return remote
        rs = self.remote.get(stream.name)
        if rs is not None and rs.dest is stream:
            return rs.info()
        links = self.links.get(stream.name)
        if not links:
            return None, None
        now = now_ns()
        if stream.config.mirror is not None:
            return links[0].info(now), None
        return None, [link.info(now) for link in links]

    # -- links ---------------------------------------------------------------

    @staticmethod
    def specs(cfg):
        if cfg.mirror is not None:
            return [(cfg.mirror, True)]
        return [(s, False) for s in cfg.sources or () if s is not None]

    def _add_links(self, stream):
        specs = self.specs(stream.config)
        if not specs or stream.name in self.links:
            return
        links = self.links[stream.name] = [SourceLink(stream, s, m) for s, m in specs]
        for link in links:
            # Attached on a later turn: the create response shows the link
            # not yet active, as nats-server's does.
            self._schedule(link)

    def _all(self):
        for links in self.links.values():
            yield from links

    def _sync_observer(self):
        """Watch stream mutations only while some link needs them (observers
        cost every publish an event)."""
        by_origin = {}
        for link in self._all():
            by_origin.setdefault(link.origin_name, []).append(link)
        self._by_origin = by_origin
        want = bool(self.links)
        if want and not self._observing:
            self.js.add_stream_observer(self._on_event)
        elif not want and self._observing:
            self.js.remove_stream_observer(self._on_event)
        self._observing = want

    def _on_event(self, event):
        if event.op != "put":
            return
        for link in self._by_origin.get(event.stream, ()):
            if link.origin is not None and not link.durable:
                self._schedule(link)

    def _schedule(self, link, delay=0):
        if link.closed or (link.call is not None and link.call.active()):
            return
        link.call = self.reactor.callLater(delay, self._run, link)

    def _close(self, link):
        link.closed = True
        if link.call is not None and link.call.active():
            link.call.cancel()
        link.call = None
        link.origin = None
        self._unsubscribe(link)

    def _detach(self, link):
        link.origin = None
        self._unsubscribe(link)
        if link.call is not None and link.call.active():
            link.call.cancel()
        link.call = None

    def _local(self, spec):
        """Whether the origin is in this server: no external API prefix, or ours."""
        ext = spec.external
        if ext is None or not ext.api:
            return True
        domain = self.js.js.domain
        return bool(domain) and ext.api.rstrip(".") == "$JS.%s.API" % domain

    def _attach(self, link):
        link.tried = True
        origin = self.js.streams.get(link.origin_name)
        if origin is None:
            link.error = E.stream_not_found()
            return False
        link.origin = origin
        link.error = None
        link.ident = stream_identity(origin).encode()
        link.last = now_ns()
        if not link.scan:
            self._start_position(link)
        return True

    def _start_position(self, link):
        """Where copying starts: the saved progress, else what nats-server
        derives (the mirror's last sequence, the source's last header, the
        configured start)."""
        dest = link.dest
        st = dest.store.state()
        spec = link.spec
        if link.load_progress():
            if link.mirror:
                link.scan = max(link.scan, st.last_seq + 1)
            return
        if link.mirror:
            if st.msgs == 0 and st.first_seq == 0:
                if spec.opt_start_seq:
                    link.scan = spec.opt_start_seq
                    if spec.opt_start_seq > 1:
                        # nats-server moves an empty mirror's first sequence there.
                        dest.store.purge(seq=spec.opt_start_seq)
                        self.js.note_stored()
                elif spec.opt_start_time is not None:
                    link.scan = link.origin.seq_for_time(gotime.parse_rfc3339(spec.opt_start_time))
                else:
                    link.scan = 1
            else:
                link.scan = st.last_seq + 1
            return
        found = self.last_from_headers(link, st)
        if found:
            link.scan, link.copied = found + 1, found
        elif spec.opt_start_seq:
            link.scan = spec.opt_start_seq
        elif spec.opt_start_time is not None:
            t = gotime.parse_rfc3339(spec.opt_start_time)
            if st.last_ts and t < st.last_ts:
                t = st.last_ts
            link.scan = link.origin.seq_for_time(t)
        elif st.first_seq > 1 and st.last_ts:
            link.scan = link.origin.seq_for_time(st.last_ts)
        else:
            link.scan = 1

    @staticmethod
    def last_from_headers(link, st):
        """The origin sequence in the newest ``Nats-Stream-Source`` header of this
        source (nats-server's backward scan), or 0."""
        store = link.dest.store
        want = link.iname.split(" ")
        needle = H_STREAM_SOURCE + b": "
        for seq in range(st.last_seq, max(st.first_seq, 1) - 1, -1):
            m = store.load(seq)
            if m is None or not m.hdr:
                continue
            i = m.hdr.find(needle)
            if i < 0:
                continue
            value = m.hdr[i + len(needle):].split(b"\r\n", 1)[0].decode(errors="replace")
            fields = value.split(" ")
            if len(fields) >= 4 and [fields[0], fields[2], fields[3]] == want:
                try:
                    return int(fields[1])
                except ValueError:
                    return 0
        return 0

    # -- copying -------------------------------------------------------------

    def resume(self, stream):
        """A stream copied by its group's leader until now is this server's
        alone again (scaled down to one replica): its links run here."""
        self._schedule_all(stream)

    def _schedule_all(self, stream):
        for link in self.links.get(stream.name, ()):
            self._schedule(link)

    def stop_remote(self, name):
        """Stop the origin consumers of stream ``name`` (deleted, updated, or
        given replicas: its group's leader copies from then on)."""
        rs = self.remote.pop(name, None)
        if rs is not None:
            rs.stop()

    def _run_remote(self, stream):
        """In a cluster, a stream of one replica copies through origin
        consumers too: its origins may live on other servers."""
        rs = self.remote.get(stream.name)
        if rs is not None and rs.dest is stream:
            return
        self.remote[stream.name] = self._make_remote(stream)

    def _run(self, link):
        link.call = None
        if link.closed or self.js.streams.get(link.dest.name) is not link.dest:
            return
        if link.dest.config.num_replicas > 1 or getattr(link.dest, "group", None) is not None:
            # A replicated stream (only a cluster has them): its leader copies
            # through origin consumers (natsbroker.jetstream.remote_sourcing)
            # and its group replicates the copies; no replica copies alone,
            # not even before its group has started.
            return
        if self._make_remote is not None and self.js.server.cluster is not None and not any(
                lk.durable for lk in self.links.get(link.dest.name, ())):
            self._run_remote(link.dest)
            return
        if link.durable:
            if self._local(link.spec):
                self._setup_durable(link)
            return
        if link.origin is None:
            if not self._local(link.spec) or not self._attach(link):
                return
        elif self.js.streams.get(link.origin_name) is not link.origin:
            self._detach(link)
            link.error = E.stream_not_found()
            return
        more = self._copy(link)
        if more:
            self._schedule(link, 0 if more is True else more)

    def _copy(self, link):
        """Copy one batch; True if there is more to do now, a delay in seconds
        to retry a refused copy, False when caught up."""
        dest = link.dest
        store = dest.store
        budget = BATCH
        moved = False
        result = False
        while True:
            msg = link.next_msg()
            if msg is None:
                last = link.origin.store.state().last_seq
                if last + 1 > link.scan:
                    link.scan = last + 1
                    moved = True
                break
            if budget <= 0:
                result = True
                break
            subject = link.subject_for(msg.subject)
            try:
                if link.mirror:
                    if msg.seq <= store.state().last_seq:
                        # Already there (origin recreated with lower sequences).
                        link.scan = msg.seq + 1
                        moved = True
                        budget -= 1
                        continue
                    if not self.advance(store, msg.seq, msg.ts):
                        result = True  # a huge gap: the rest of it next turn
                        moved = True
                        break
                    dest.accept(subject, mirror_headers(msg.hdr), msg.data, ts=msg.ts,
                                sourced="mirror")
                else:
                    dest.accept(subject, link.source_header(msg.seq, msg.subject, msg.hdr), msg.data,
                                sourced="source")
            except E.ApiError as e:
                log.debug("{dest}: copy of {origin} seq {seq} refused: {e}", dest=dest.name,
                          origin=link.origin_name, seq=msg.seq, e=e.description)
                result = RETRY
                break
            link.scan = msg.seq + 1
            link.copied = msg.seq
            moved = True
            budget -= 1
        if moved:
            link.last = now_ns()
            link.save_progress()
            after = None
            if link.origin.config.retention == "workqueue":
                origin = link.origin
                after = lambda: self._consume(origin)  # noqa: E731
            self.js.note_stored(after)
        link.lag = link._pending()
        return result

    def _consume(self, origin):
        """A workqueue origin loses each message once every link copying it
        has copied it -- nats-server's source consumers ack it -- and only
        after the commit that made the copies durable."""
        if self.js.streams.get(origin.name) is not origin:
            return
        # (Links through a durable consumer are acked through it instead.)
        links = [link for link in self._by_origin.get(origin.name, ())
                 if link.origin is origin and not link.durable]
        if not links:
            return
        upto = max(link.scan for link in links) - 1
        store = origin.store
        # Messages below the cursor that stayed are taken by no link: not rescanned.
        cursor = self._consumed.get(origin)
        seq = max(store.state().first_seq, cursor or 0)
        removed = False
        while seq and seq <= upto:
            msg = store.load_next(seq)
            if msg is None or msg.seq > upto:
                break
            takers = [link for link in links if link.takes(msg.subject)]
            if takers and all(link.scan > msg.seq for link in takers):
                origin.remove(msg.seq, "ack")
                removed = True
            elif takers:
                break  # a link has still to copy it: later
            seq = msg.seq + 1
        self._consumed[origin] = seq
        if removed:
            self.js.schedule_commit()

    @staticmethod
    def advance(store, seq, ts):
        """Make ``seq`` the next sequence of a mirror's store: skipped ones
        become gaps (an empty store just moves its first sequence). False if
        the gap was too big for one turn (part of it was skipped)."""
        st = store.state()
        nxt = st.last_seq + 1
        if seq <= nxt:
            return True
        if not st.msgs:
            store.purge(seq=seq)
            return True
        n = seq - nxt
        skip = store.skip
        for _ in range(min(n, SKIP_BATCH)):
            skip(ts)
        return n <= SKIP_BATCH

    # -- durable sourcing: through the origin's named consumer (2.14) ----------

    def _unsubscribe(self, link):
        if link.sub is not None:
            self.js.broker.unsubscribe(link.sub)
            link.sub = None
        link.consumer = None

    def _retry_durable(self, link, delay=RETRY):
        """Drop the subscription and set the link up again later (nats-server
        cancels the source info and asks for a new consumer setup)."""
        self._detach(link)
        self._schedule(link, delay)

    def _setup_durable(self, link):
        """nats-server's setupMirrorConsumer/setupSourceConsumer with a
        ``consumer``: subscribe to its deliver subject and reset it to its ack
        floor; the consumer must exist with ``ack_policy: flow_control``."""
        link.tried = True
        self._unsubscribe(link)
        origin = self.js.streams.get(link.origin_name)
        consumer = origin.consumers.get(link.spec.consumer.name) if origin is not None else None
        if consumer is None or consumer.closed:
            # The reset request is answered by the consumer alone: nothing
            # answers, the link stays inactive and asks again.
            self._schedule(link, DURABLE_WAIT)
            return
        if consumer.config.ack_policy != "flow_control":
            link.error = (E.mirror_consumer_requires_ack_fc() if link.mirror
                          else E.source_consumer_requires_ack_fc())
            self._schedule(link, RETRY)
            return
        link.error = None
        link.origin, link.consumer = origin, consumer
        link.ident = stream_identity(origin).encode()
        self._durable_position(link)
        link.dseq = 0
        link.sub = self.js.broker.subscribe(
            link.spec.consumer.deliver_subject,
            lambda sub, subject, reply, hdr_len, raw: self._on_delivery(
                link, sub, subject, reply, hdr_len, raw))
        seq = consumer.reset(0)
        self.js.consumer_dirty(consumer, urgent=True)
        delivered = seq - 1
        if link.mirror:
            st = link.dest.store.state()
            if st.last_seq < delivered:
                # The origin moved past us (nats-server skips or purges up to it).
                self.advance(link.dest.store, delivered + 1, now_ns())
                self.js.note_stored()
            link.copied = max(delivered, st.last_seq)
        else:
            link.copied = max(link.copied, delivered)
        link.scan = link.copied + 1
        link.last = now_ns()

    def _durable_position(self, link):
        """What this stream has already copied (the sequences it ignores
        when the consumer delivers them again after a reset)."""
        if link.scan:
            return
        if link.mirror:
            link.copied = link.dest.store.state().last_seq
            return
        if not link.load_progress():
            link.copied = self.last_from_headers(link, link.dest.store.state())

    def _on_delivery(self, link, sub, subject, reply, hdr_len, raw):
        """A message, heartbeat or flow control request from the consumer
        (nats-server's processInboundMirrorMsg / processInboundSourceMsg)."""
        if sub is not link.sub or link.closed:
            return
        link.last = now_ns()
        hdr = raw[:hdr_len] if hdr_len > 0 else b""
        if hdr.startswith(b"NATS/1.0 100"):
            self._on_control(link, reply, hdr)
            return
        toks = reply.split(b".") if reply else ()
        if len(toks) < 9 or toks[0] != b"$JS" or toks[1] != b"ACK":
            return
        try:
            dc, sseq, dseq, ts, pending = (int(t) for t in toks[-5:])
        except ValueError:
            return
        if dc > 1:
            return
        if sseq <= link.copied:
            if dseq == link.dseq + 1:
                link.dseq += 1
            return
        if dseq != link.dseq + 1 and not (link.mirror and sseq == link.copied + 1):
            if dseq > link.dseq:
                self._retry_durable(link)  # missed deliveries: start over from the ack floor
            return
        link.lag = max(pending - 1, 0)
        data = raw[hdr_len:] if hdr_len > 0 else raw
        try:
            if link.mirror:
                store = link.dest.store
                while not self.advance(store, sseq, ts):
                    pass  # (origin messages deleted or filtered out: gaps)
                link.dest.accept(link.subject_for(subject), mirror_headers(hdr), data, ts=ts,
                                 sourced="mirror")
            else:
                link.dest.accept(link.subject_for(subject),
                                 link.source_header(sseq, subject, hdr), data,
                                 sourced="source")
        except E.ApiError as e:
            log.debug("{dest}: copy of {origin} seq {seq} refused: {e}", dest=link.dest.name,
                      origin=link.origin_name, seq=sseq, e=e.description)
            self._retry_durable(link)
            return
        link.dseq, link.copied, link.scan = dseq, sseq, sseq + 1
        if not link.mirror:
            link.save_progress()
        self.js.note_stored()

    def _on_control(self, link, reply, hdr):
        if reply:
            # Flow control: the reply acks (ack policy flow_control) what was
            # delivered so far, so it goes out once that is durable.
            out = _FC_REPLY % (link.dseq, link.copied)
            self.js.note_stored(lambda: self._send(reply, out))
            return
        last = int_header(hdr, b"Nats-Last-Consumer")
        if last > 0 and last != link.dseq:
            self._retry_durable(link, 0)  # a delivery was missed
            return
        stalled = header_value(hdr, b"Nats-Consumer-Stalled")
        if stalled:
            self._send(stalled, None)

    def _send(self, subject, hdr):
        broker = self.js.broker
        broker.begin()
        try:
            broker.deliver(subject, subject, b"", None, hdr)
        finally:
            broker.end()


def header_value(hdr, name):
    for line in hdr.split(b"\r\n")[1:]:
        key, sep, value = line.partition(b":")
        if sep and key.strip() == name:
            return value.strip()
    return b""


def int_header(hdr, name):
    try:
        return int(header_value(hdr, name) or 0)
    except ValueError:
        return 0
