"""Mirrors and sources copied through a consumer on the origin stream, as
nats-server copies them (stream.go setupMirrorConsumer,
trySetupSourceConsumer, processInboundMirrorMsg, processInboundSourceMsg).

The in-process links of :mod:`natsbroker.jetstream.sourcing` read the
origin's store directly; that needs the origin in this process. A replicated
stream's leader cannot count on that (the origin's leader may be another
server), so it copies the way nats-server does everywhere:

* it asks the origin, over the JetStream API (``$JS.API.CONSUMER.CREATE``,
  or the ``external`` API prefix), for an ephemeral push consumer: ``direct``
  and ``sourcing``, ``ack_policy: none``, ``max_deliver: 1``, flow control, a
  heartbeat every second, gone after 10 s unused, starting where this stream
  stands (a mirror after its last sequence; a source after the origin
  sequence of its newest ``Nats-Stream-Source`` header);
* each delivery's ack subject names its origin sequence, delivery sequence,
  time and pending count; a delivery sequence out of step (a lost message)
  or a heartbeat naming another last delivery makes it ask for a new
  consumer from where it got to; mirror gaps (origin messages deleted)
  become gaps here;
* it looks every 10 s: no word from the origin for that long, and it asks
  again (no more often than every 2 s, backing off by 10 s a failure up to
  2 minutes, as nats-server does).

What to do with a copy, a gap or a flow control request is the ``sink``'s:
a replicated stream proposes each into its group, so that the origin hears
back (the flow control reply) only once a quorum has the copies; a stream
of one replica in a cluster stores them (:class:`LocalSink`), the reply
going out once they are synced. A copy the sink refuses (limits with
``discard: new``) is asked for again, from its sequence, after the 2 s
threshold, as nats-server retries it.
"""

import json
import random

from twisted.logger import Logger

from natsbroker import jsonbound, nuid as nuids
from natsbroker.gocompat import times as gotime
from natsbroker.jetstream import errors as E
from natsbroker.jetstream.sourcing import (
    SourceLink,
    Sourcing,
    go_hash,
    header_value,
    int_header,
    mirror_headers,
)

log = Logger()

NANOS = 1_000_000_000
# stream.go sourceHealthHB, sourceHealthCheckInterval, sourceConsumerRetryThreshold,
# retryBackOff, retryMaximum, srcConsumerWaitTime.
HEARTBEAT_NS = NANOS
HEALTH_CHECK = 10.0
RETRY_THRESHOLD = 2.0
RETRY_BACKOFF = 5.0
RETRY_MAXIMUM = 120.0
CREATE_WAIT = 30.0
ACK_WAIT_NS = 22 * 3600 * NANOS
# The API level that has sourcing consumers (jetstream_api.go JSRequiredApiLevel).
REQUIRED_LEVEL = b"NATS/1.0\r\nNats-Required-Api-Level: 4\r\n\r\n"
FC_REPLY = b"NATS/1.0\r\nNats-Last-Consumer: %d\r\nNats-Last-Stream: %d\r\n\r\n"


def retry_backoff(fails):
    """calculateRetryBackoff: 10 s a failure, at most 2 minutes."""
    return min(RETRY_BACKOFF * fails * 2, RETRY_MAXIMUM)


def ack_reply_info(reply):
    """``(stream, consumer, delivered count, stream seq, delivery seq, ts,
    pending)`` of a v1 (9 tokens) or v2 (12 tokens) ack subject, or None."""
    toks = reply.split(b".") if reply else ()
    if len(toks) == 9:
        stream, consumer = toks[2], toks[3]
    elif len(toks) >= 11:
        stream, consumer = toks[4], toks[5]
    else:
        return None
    if toks[0] != b"$JS" or toks[1] != b"ACK":
        return None
    try:
        if len(toks) == 9:
            dc, sseq, dseq, ts, pending = (int(t) for t in toks[4:9])
        else:
            dc, sseq, dseq, ts, pending = (int(t) for t in toks[6:11])
    except ValueError:
        return None
    return stream, consumer, dc, sseq, dseq, ts, pending


class RemoteLink(SourceLink):
    """One ``mirror`` or ``sources`` entry copied through an origin consumer."""

    def __init__(self, dest, spec, mirror):
        super().__init__(dest, spec, mirror)
        self.cname = b""  # the origin consumer delivering now
        self.sseq = 0  # the last origin sequence taken
        self.dseq = 0  # its delivery sequence
        self.create_sub = None
        self.wait = None  # the create request's time-out
        self.retry = None  # a set-up scheduled
        self.lreq = None  # when the last create request went out
        self.fails = 0
        self.sip = False  # a create request in flight
        self.start_at = 0  # where the next consumer starts (0: derive it)
        self.heard = None  # reactor time of the last word from the origin
        self.req_seq = 0  # where the consumer asked for starts (0: not by sequence)


class RemoteSourcing:
    """The remote links of one stream, run while this server leads it.

    ``account``: the stream's account (publish, request, subscribe,
    unsubscribe); ``sink``: ``copy(link, subject, hdr, data, sseq, ts)``,
    ``skip(link, first, last)`` (a mirror's gap) and ``flow_control(link,
    reply, hdr)``, the reply to send once the copies before it are kept."""

    def __init__(self, account, reactor, dest, sink, account_name="", domain=""):
        self.account = account
        self.reactor = reactor
        self.dest = dest
        self.sink = sink
        self.account_name = account_name
        self.domain = domain
        self.links = []
        self.health = None
        self.stopped = True

    def start(self):
        self.stopped = False
        self.links = [RemoteLink(self.dest, spec, mirror)
                      for spec, mirror in Sourcing.specs(self.dest.config)]
        for link in self.links:
            self._setup(link)
        self.health = self.reactor.callLater(HEALTH_CHECK, self._check_health)

    def stop(self):
        self.stopped = True
        if self.health is not None and self.health.active():
            self.health.cancel()
        self.health = None
        for link in self.links:
            self._cancel(link)
            link.closed = True

    def info(self):
        """``(mirror, sources)`` for the stream info, as Sourcing.info."""
        if not self.links:
            return None, None
        now = gotime.now_ns()
        for link in self.links:
            link.copied = link.sseq
        if self.dest.config.mirror is not None:
            return self.links[0].info(now), None
        return None, [link.info(now) for link in self.links]

    # -- set-up ------------------------------------------------------------------

    def _cancel(self, link):
        for attr in ("sub", "create_sub"):
            sub = getattr(link, attr)
            if sub is not None:
                self.account.unsubscribe(sub)
                setattr(link, attr, None)
        for attr in ("wait", "retry"):
            call = getattr(link, attr)
            if call is not None and call.active():
                call.cancel()
            setattr(link, attr, None)
        link.cname = b""
        link.sip = False

    def _schedule(self, link, fail=False):
        """scheduleSetupMirrorConsumerRetry: after the 2 s threshold since the
        last request, the failures' back-off, and 100-200 ms of jitter."""
        if self.stopped:
            return
        if fail:
            link.fails += 1
        now = self.reactor.seconds()
        due = 0.0
        if link.lreq is not None:
            due = max(RETRY_THRESHOLD - (now - link.lreq), 0.0)
        due += retry_backoff(link.fails) + 0.1 + random.random() * 0.1
        if link.retry is not None and link.retry.active():
            link.retry.cancel()
        link.retry = self.reactor.callLater(due, self._setup, link)

    def _restart(self, link, at=0):
        """Drop this consumer and ask for another, from ``at`` (0: from what
        the stream holds)."""
        self._cancel(link)
        link.start_at = at
        self._setup(link)

    def _start_seq(self, link):
        """(deliver policy, opt start seq, opt start time) of the next consumer."""
        spec = link.spec
        st = self.dest.store.state()
        if link.mirror:
            if st.msgs == 0 and st.first_seq == 0 and not link.start_at:
                if spec.opt_start_seq:
                    return "by_start_sequence", spec.opt_start_seq, None
                if spec.opt_start_time is not None:
                    return "by_start_time", 0, spec.opt_start_time
                return "all", 0, None
            return "by_start_sequence", max(link.start_at, st.last_seq + 1), None
        seq = link.start_at
        if not seq:
            seq = Sourcing.last_from_headers(link, st) + 1
        if seq > 1:
            return "by_start_sequence", seq, None
        if spec.opt_start_seq:
            return "by_start_sequence", spec.opt_start_seq, None
        if spec.opt_start_time is not None:
            t = gotime.parse_rfc3339(spec.opt_start_time)
            if st.last_ts and t < st.last_ts:
                return "by_start_time", 0, gotime.rfc3339(st.last_ts)
            return "by_start_time", 0, spec.opt_start_time
        if st.first_seq > 1 and st.last_ts:
            return "by_start_time", 0, gotime.rfc3339(st.last_ts)
        return "all", 0, None

    def _request(self, link):
        """The consumer create request: (subject, body)."""
        spec = link.spec
        kind = "mirror" if link.mirror else "src"
        ext = spec.external
        if ext is not None and ext.deliver:
            deliver = "%s.%s.%s" % (ext.deliver.rstrip("."), "M" if link.mirror else "S",
                                    nuids.nuid())
        else:
            deliver = "$JS.%s.%s" % ("M" if link.mirror else "S", nuids.nuid())
        ident = go_hash("%s %s %s" % (self.account_name, self.dest.name, link.iname))
        metadata = {"_nats.%s.stream" % kind: self.dest.name,
                    "_nats.%s.acc" % kind: self.account_name}
        if self.domain:
            metadata["_nats.%s.domain" % kind] = self.domain
        policy, seq, start_time = self._start_seq(link)
        link.req_seq = seq
        cfg = {"name": "JS_%s_%s" % ("MIRROR" if link.mirror else "SRC", ident),
               "deliver_subject": deliver, "deliver_policy": policy,
               "ack_policy": "none", "ack_wait": ACK_WAIT_NS, "max_deliver": 1,
               "idle_heartbeat": HEARTBEAT_NS, "flow_control": True, "direct": True,
               "sourcing": True, "inactive_threshold": int(HEALTH_CHECK * NANOS),
               "metadata": metadata}
        if seq:
            cfg["opt_start_seq"] = seq
        if start_time:
            cfg["opt_start_time"] = start_time
        filters = ([tr.src or ">" for tr in spec.subject_transforms]
                   if spec.subject_transforms else [])
        if spec.filter_subject:
            cfg["filter_subject"] = spec.filter_subject
        elif len(filters) == 1:
            cfg["filter_subject"] = filters[0]
        elif filters:
            cfg["filter_subjects"] = filters
        if cfg.get("filter_subject"):
            subject = "$JS.API.CONSUMER.CREATE.%s.%s.%s" % (spec.name, cfg["name"],
                                                          cfg["filter_subject"])
        else:
            subject = "$JS.API.CONSUMER.CREATE.%s" % spec.name
        if ext is not None and ext.api:
            subject = subject.replace("$JS.API", ext.api, 1).replace("..", ".")
        body = json.dumps({"stream_name": spec.name, "config": cfg}, separators=(",", ":"))
        return subject, body.encode()

    def _setup(self, link):
        if self.stopped or link.closed:
            return
        link.retry = None
        now = self.reactor.seconds()
        if link.sip or (link.lreq is not None and now - link.lreq < RETRY_THRESHOLD):
            self._schedule(link)
            return
        self._cancel(link)
        link.lreq = now
        link.tried = True
        subject, body = self._request(link)
        inbox = "$JS._INBOX.%s" % nuids.nuid()
        link.create_sub = self.account.subscribe(
            inbox, lambda sub, subj, reply, hdr_len, raw: self._on_created(
                link, sub, bytes(raw[hdr_len:]), bytes(raw[:hdr_len])), hidden=True)
        link.sip = True
        link.wait = self.reactor.callLater(CREATE_WAIT, self._create_timed_out, link)
        self.account.request(subject, body, reply=inbox, headers=REQUIRED_LEVEL)

    def _create_timed_out(self, link):
        link.wait = None
        self._cancel(link)
        self._schedule(link, fail=True)

    def _on_created(self, link, sub, body, hdr=b""):
        if sub is not link.create_sub or self.stopped:
            return
        self.account.unsubscribe(sub)
        link.create_sub = None
        if link.wait is not None and link.wait.active():
            link.wait.cancel()
        link.wait = None
        link.sip = False
        try:
            resp = jsonbound.loads(body)
            err = resp.get("error")
            cfg = resp.get("config")
            name = resp.get("name")
            delivered = int(((resp.get("delivered") or {}).get("stream_seq")) or 0)
        except (ValueError, AttributeError, TypeError):
            resp, err, cfg, name, delivered = None, None, None, None, 0
        if err is not None or not isinstance(cfg, dict) or not isinstance(name, str) \
                or not cfg.get("deliver_subject"):
            if isinstance(err, dict):
                link.error = E.ApiError(int(err.get("code") or 500), int(err.get("err_code") or 0),
                                        str(err.get("description") or ""))
            else:
                link.error = (E.mirror_consumer_setup_failed("invalid consumer create response")
                              if link.mirror else
                              E.source_consumer_setup_failed("invalid consumer create response"))
            self._schedule(link, fail=True)
            return
        link.fails = 0
        link.error = None
        st = self.dest.store.state()
        if link.mirror:
            if st.last_seq < delivered:
                # The origin starts past what we hold (its first messages are
                # gone): that much is a gap here.
                self.sink.skip(link, st.last_seq + 1, delivered)
            link.sseq = max(delivered, st.last_seq)
        else:
            link.sseq = max(link.req_seq - 1, 0)
        link.cname = name.encode()
        # The origin instance (nats-server 2.15's Nats-Stream-Identity), the
        # last field of the copies' Nats-Stream-Source when known.
        link.ident = header_value(hdr, b"Nats-Stream-Identity") if hdr else b""
        link.dseq = 0
        link.start_at = 0
        link.last = gotime.now_ns()
        link.heard = self.reactor.seconds()
        link.sub = self.account.subscribe(
            cfg["deliver_subject"], lambda s, subj, reply, hdr_len, raw: self._on_msg(
                link, s, subj, reply, hdr_len, raw), hidden=True)

    def _check_health(self):
        self.health = self.reactor.callLater(HEALTH_CHECK, self._check_health)
        now = self.reactor.seconds()
        for link in self.links:
            if link.sip or (link.retry is not None and link.retry.active()):
                continue
            if link.heard is None or now - link.heard > HEALTH_CHECK:
                self._restart(link, link.sseq + 1 if link.sseq and not link.mirror else 0)

    # -- deliveries ---------------------------------------------------------------

    def _on_msg(self, link, sub, subject, reply, hdr_len, raw):
        """processInboundMirrorMsg / processInboundSourceMsg."""
        if sub is not link.sub or self.stopped:
            return
        raw = bytes(raw)
        hdr = raw[:hdr_len] if hdr_len > 0 else b""
        reply = bytes(reply) if reply else b""
        if hdr.startswith(b"NATS/1.0 100") and len(raw) == hdr_len:
            link.last = gotime.now_ns()
            link.heard = self.reactor.seconds()
            if reply:
                self.sink.flow_control(link, reply, FC_REPLY % (link.dseq, link.sseq))
                return
            last = int_header(hdr, b"Nats-Last-Consumer")
            if last > 0 and last != link.dseq:
                self._restart(link, 0 if link.mirror else link.sseq + 1)
                return
            stalled = header_value(hdr, b"Nats-Consumer-Stalled")
            if stalled:
                self.account.publish(stalled, b"")
            return
        meta = ack_reply_info(reply)
        if meta is None or meta[1] != link.cname:
            return  # (an older consumer's)
        _stream, _cname, dc, sseq, dseq, ts, pending = meta
        if dc > 1:
            return
        link.last = gotime.now_ns()
        link.heard = self.reactor.seconds()
        if sseq <= link.sseq:
            if dseq == link.dseq + 1:
                link.dseq += 1
            return
        if link.mirror:
            if sseq != link.sseq + 1:
                if dseq != link.dseq + 1:
                    self._restart(link)
                    return
                self.sink.skip(link, link.sseq + 1, sseq - 1)  # deleted at the origin
        elif dseq != link.dseq + 1:
            self._restart(link, link.sseq + 1)
            return
        odseq, osseq = link.dseq, link.sseq
        link.dseq, link.sseq = dseq, sseq
        link.lag = max(pending - 1, 0)
        data = raw[hdr_len:] if hdr_len > 0 else raw
        origin_subject = bytes(subject)
        if link.mirror:
            out_hdr = _without_batch(mirror_headers(hdr))
        else:
            # (the origin's subject, before any transform: genSourceHeader)
            out_hdr = link.source_header(sseq, origin_subject, _without_batch(hdr))
        if self.sink.copy(link, link.subject_for(origin_subject), out_hdr, data, sseq,
                          ts) is False:
            # Refused here: asked for again from this one.
            link.dseq, link.sseq = odseq, osseq
            self._restart(link, sseq)


class LocalSink:
    """RemoteSourcing's sink for a stream of one replica: copies stored
    here through the JetStream account engine ``js`` (the group commit)."""

    def __init__(self, js, stream):
        self.js = js
        self.stream = stream

    def copy(self, link, subject, hdr, data, sseq, ts):
        dest = self.stream
        if dest.group is not None:
            return None  # (replicated since: its group copies)
        try:
            if link.mirror:
                if sseq <= dest.store.state().last_seq:
                    return None
                while not Sourcing.advance(dest.store, sseq, ts):
                    pass
                dest.accept(subject, hdr, data, ts=ts, sourced="mirror")
            else:
                dest.accept(subject, hdr, data, sourced="source")
        except E.ApiError as e:
            log.debug("{dest}: copy of {origin} seq {seq} refused: {e}", dest=dest.name,
                      origin=link.origin_name, seq=sseq, e=e.description)
            return False
        self.js.note_stored()
        return True

    def skip(self, link, first, last):
        if self.stream.group is None and last >= first:
            while not Sourcing.advance(self.stream.store, last + 1, 0):
                pass
            self.js.note_stored()

    def flow_control(self, link, reply, hdr):
        broker = self.js.broker
        self.js.note_stored(lambda: broker.publish(reply, b"", headers=hdr))


def _without_batch(hdr):
    """Headers without ``Nats-Batch-*`` (batches are not copied as batches)."""
    if not hdr or b"Nats-Batch-" not in hdr:
        return hdr
    lines = hdr.split(b"\r\n")
    keep = [lines[0]] + [ln for ln in lines[1:] if ln and not ln.startswith(b"Nats-Batch-")]
    return b"\r\n".join(keep) + b"\r\n" + (b"\r\n" if hdr.endswith(b"\r\n\r\n") else b"")
