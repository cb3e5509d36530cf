"""Fast batch publish (``allow_batched``; nats-server 2.14+, API level 4).

A fast batch is told by its reply subject, not by headers::

    <prefix>.<batch id>.<flow>.<gap mode>.<batch seq>.<op>.$FI

``op`` 0 starts (seq 1), 1 appends (seq > 1), 2 commits with this message,
3 commits without it ("end of batch", seq > 1), 4 pings; ``gap mode`` is
``fail`` or ``ok``; ``flow`` is how often the client wants a flow ack (at
most 65535; 0 or not a number: 10).  Anything else ending in ``.$FI`` is
refused as an invalid pattern (10206).  Unlike an atomic batch each message
is checked and stored as it comes (stored as published, no batch headers), and
the replies, all on the message's own reply subject, are:

* ``{"type":"ack","seq":N,"msgs":M}`` -- flow control: messages up to N are
  stored, the next ack comes M messages later.  The first message gets one
  with seq 0; M starts at min(500, flow), or 1 when the stream has other fast
  batches in flight, and doubles at each ack up to min(flow, 500 / batches in
  flight on the stream);
* ``{"type":"gap","last_seq":E,"seq":S}`` -- a message arrived out of order
  (2.15.1 reports a backward one too); in ``fail`` mode, and for any
  backward one, the batch ends there: committed with what it has;
* ``{"type":"err","seq":S,"error":{...}}`` -- message S was refused; ``fail``
  mode commits what came before, ``ok`` mode goes on (the first message of a
  ``fail`` batch gets a plain PubAck error instead, and nothing is kept);
* the PubAck of the commit: ``{"stream":..,"seq":<last stored>,"batch":id,
  "count":<messages counted>}`` (a commit whose message is a duplicate at the
  start of a ``fail`` batch: ``"duplicate": true``, nats-server's spacing).

A ping (op 4) re-sends the last flow ack, or reports a gap past the batch's
end.  Errors before the batch is known -- sealed, too big, not enabled,
invalid pattern, id over 64 bytes, unknown batch (a message other than seq 1,
or a ping), 1000 batches in flight on the stream or 50 000 in all
(429/10211), ``Nats-Required-Api-Level`` above ours (the batch is dropped) --
are PubAck errors.  A batch with no message for 10 s is forgotten.

This is nats-server's R1 code path (processJetStreamFastBatchMsg,
fastBatchRegisterSequences, checkFlowControl, fastBatchCommit), including its
quirks: flow acks, gaps and commit acks are sent even on a ``no_ack`` stream;
a ``Nats-Expected-Last-Msg-Id`` mismatch is answered like an ordinary publish
and leaves the message counted as pending (later acks then come per message).
Durability is ours: every reply is queued with the plugin's acks and goes out
after the synced group commit that holds the messages it speaks for.
"""

from natsbroker.gocompat import gojson
from natsbroker.jetstream import api, api_models as AM, apilevel, errors as E
from natsbroker.jetstream.batches import server_limit

SUFFIX = b".$FI"
GAP_FAIL, GAP_OK = b"fail", b"ok"
OP_START, OP_APPEND, OP_COMMIT, OP_COMMIT_EOB, OP_PING = range(5)

MAX_ID_LEN = 64
MAX_INFLIGHT_PER_STREAM = 1000
MAX_INFLIGHT_TOTAL = 50_000
MAX_ACK_MESSAGES = 500
DEFAULT_FLOW = 10
TIMEOUT = 10.0  # seconds without a message

_ERR_WRONG_LAST_MSG_ID = 10070
_INT64 = 1 << 64


class Request:
    """What a fast batch reply subject says about its message."""

    __slots__ = ("id", "seq", "flow", "gap_ok", "ping", "commit", "eob")


INVALID = object()


def _int64(token):
    """nats-server's parseInt64: decimal digits (wrapping like Go), -1 if not."""
    if not token or not token.isdigit() or not token.isascii():
        return -1
    n = int(token) % _INT64
    return n - _INT64 if n >= _INT64 >> 1 else n


def parse(reply):
    """A :class:`Request`, or ``INVALID`` (nats-server's getFastBatch)."""
    head, _, op = reply[:-4].rpartition(b".")
    if not _:
        return INVALID
    op = _int64(op)
    if op < OP_START or op > OP_PING:
        return INVALID
    head, _, seq = head.rpartition(b".")
    if not _ or not seq.isdigit() or not seq.isascii():
        return INVALID
    seq = int(seq)
    if seq == 0 or seq >= _INT64 - 1:
        return INVALID
    if (seq == 1 and op == OP_COMMIT_EOB) or (op == OP_START and seq != 1) or (
            op == OP_APPEND and seq <= 1):
        return INVALID
    head, _, gap = head.rpartition(b".")
    if not _ or gap not in (GAP_FAIL, GAP_OK):
        return INVALID
    head, _, flow = head.rpartition(b".")
    if not _:
        return INVALID
    flow = _int64(flow)
    flow = DEFAULT_FLOW if flow <= 0 else min(flow, 0xFFFF)
    head, _, bid = head.rpartition(b".")
    if not _:
        return INVALID
    r = Request()
    r.id, r.seq, r.flow, r.gap_ok = bid, seq, flow, gap == GAP_OK
    r.ping = op == OP_PING
    r.eob = op == OP_COMMIT_EOB
    r.commit = r.eob or op == OP_COMMIT
    return r


class Batch:
    """One fast batch in flight (nats-server's fastBatch)."""

    __slots__ = ("stream", "id", "lseq", "sseq", "pseq", "fseq", "pending", "ack_messages",
                 "max_ack_messages", "gap_ok", "commit", "timer")

    def __init__(self, stream, batch_id, gap_ok, flow):
        self.stream = stream
        self.id = batch_id
        self.lseq = 0      # highest batch sequence taken
        self.sseq = 0      # stream sequence of the last message stored
        self.pseq = 0      # highest batch sequence stored
        self.fseq = 0      # batch sequence of the last flow ack
        self.pending = 0   # messages counted but not stored
        self.ack_messages = 0
        self.max_ack_messages = flow
        self.gap_ok = gap_ok
        self.commit = False
        self.timer = None


def _flow_ack(seq, msgs):
    return b'{"type":"ack","seq":%d,"msgs":%d}' % (seq, msgs)


def _gap(last_seq, seq):
    return b'{"type":"gap","last_seq":%d,"seq":%d}' % (last_seq, seq)


def _flow_err(seq, err):
    return b'{"type":"err","seq":%d,"error":%s}' % (
        seq, gojson.go_json_dumps(err.to_json()).encode())


class FastBatches:
    """Every stream's fast batches in flight, for the JetStream plugin ``js``."""

    def __init__(self, js):
        self.js = js
        self.streams = {}  # stream name -> (Stream, {batch id: Batch})
        self.total = 0

    def publish(self, stream, subject, reply, hdr, data):
        """Take one message whose reply subject ends in ``.$FI``."""
        cfg = stream.config
        req = parse(reply)
        try:
            if cfg.sealed:
                raise E.stream_sealed()
            if cfg.max_msg_size > 0 and len(hdr) + len(data) > cfg.max_msg_size:
                raise E.stream_message_exceeds_maximum()
            if not cfg.allow_batched:
                raise E.batch_publish_disabled()
            if req is INVALID:
                raise E.batch_publish_invalid_pattern()
            if len(req.id) > MAX_ID_LEN:
                raise E.batch_publish_invalid_batch_id()
            batches = self._batches(stream)
            b = batches.get(req.id)
            if b is None:
                if req.seq != 1 or req.ping:
                    raise E.batch_publish_unknown_batch_id()
                if (len(batches) >= server_limit(
                        self.js, "batch_max_inflight_per_stream", MAX_INFLIGHT_PER_STREAM)
                        or self.total >= server_limit(
                            self.js, "batch_max_inflight_total", MAX_INFLIGHT_TOTAL)):
                    raise E.batch_publish_too_many_inflight()
                b = self._begin(stream, batches, req)
            if apilevel.required(hdr) is not None:
                if apilevel.refused(hdr):
                    self._end(b)
                    raise E.required_api_level()
                hdr = apilevel.strip(hdr)
        except E.ApiError as e:
            if not cfg.no_ack:
                self._send(reply, api.pub_ack_error(stream.name, e))
            return
        if not b.commit:
            b.timer.reset(server_limit(self.js, "batch_timeout", TIMEOUT))
        if req.ping:
            self._ping(b, req, reply)
            return
        if b.commit:
            return  # ending (its PubAck waits for what is pending): nothing more is taken
        b.lseq += 1
        if b.lseq != req.seq:
            self._send(reply, _gap(b.lseq, req.seq))
            if b.gap_ok and req.seq > b.lseq:
                b.lseq = req.seq
            else:
                b.lseq -= 1
                self._commit(b, reply)
                return
        if req.commit:
            if req.eob:
                b.lseq -= 1
                if b.pending == 0:
                    b.pseq = b.lseq
            self._commit(b, reply)  # with a message to store, never done yet
            if req.eob:
                return
        if req.seq == 1 and not req.commit and not cfg.no_ack:
            self._send(reply, _flow_ack(0, b.ack_messages))
        try:
            p = stream.prepare(subject, hdr, data)
        except E.ApiError as e:
            self._refused(b, req, reply, e)
            return
        if p.dup is not None:
            self._duplicate(b, req, reply, p.dup)
            return
        b.pending += 1
        seq = stream.store_prepared(p)[0]
        self._stored(b, req, reply, seq)

    # -- nats-server's steps ------------------------------------------------------

    def _ping(self, b, req, reply):
        send_flow = True
        if req.seq > b.lseq:
            self._send(reply, _gap(b.lseq + 1, req.seq + 1))
            if b.gap_ok:
                b.lseq = req.seq
                if b.pending == 0:
                    b.pseq = b.lseq
                send_flow = not self._check_flow(b, reply)
            elif self._commit(b, reply):
                send_flow = False
        if send_flow:
            self._send(reply, _flow_ack(b.fseq, b.ack_messages), b)

    def _refused(self, b, req, reply, err):
        """The message failed its checks."""
        if err.err_code == _ERR_WRONG_LAST_MSG_ID:
            # nats-server checks this one while storing, past the batch's
            # bookkeeping: an ordinary PubAck error, the message stays pending.
            b.pending += 1
            if not b.stream.config.no_ack:
                self._send(reply, api.pub_ack_error(b.stream.name, err))
            return
        if not req.gap_ok and b.lseq == 1:
            self._end(b)
            self._send(reply, api.pub_ack_error(b.stream.name, err))
            return
        self._send(reply, _flow_err(req.seq, err))
        if req.gap_ok and not req.commit:
            return
        b.lseq -= 1
        if b.pending == 0:
            b.pseq = b.lseq
        self._commit(b, reply)

    def _duplicate(self, b, req, reply, dseq):
        """The message's Nats-Msg-Id is in the duplicate window: not stored."""
        if b.pending == 0:
            b.pseq = req.seq
            self._check_flow(b, reply)
        if not req.commit:
            return
        if not req.gap_ok and b.lseq == 1:
            self._end(b)
            self._send(reply, self._ack_head(b) + b'%d,"duplicate": true,"batch":%s,"count":%d}' % (
                dseq, _quote(b.id), req.seq))
            return
        self._commit(b, reply)

    def _stored(self, b, req, reply, seq):
        """fastBatchRegisterSequences: a message of the batch is stored."""
        if b.pending > 0:
            b.pending -= 1
        b.sseq = seq
        caught_up = b.pending == 0
        b.pseq = b.lseq if caught_up else req.seq
        if b.lseq == b.pseq and b.commit:
            self._end(b)
            if caught_up:
                self._send(reply, self._commit_ack(b, b.sseq, b.lseq), b)
            elif not b.stream.config.no_ack:
                self._send(reply, self._commit_ack(b, seq, req.seq), b)
            return
        self._check_flow(b, reply)

    def _check_flow(self, b, reply):
        """checkFlowControl: a flow ack every ``ack_messages`` stored messages,
        ramping up (or down) with the stream's batches in flight."""
        am = b.ack_messages
        if b.pseq < b.fseq + am:
            return False
        b.fseq += (b.pseq - b.fseq) // am * am
        inflight = len(self.streams.get(b.stream.name, (None, ()))[1])
        limit = max(1, MAX_ACK_MESSAGES // max(1, inflight))
        limit = min(limit, b.max_ack_messages)
        if b.ack_messages < limit:
            b.ack_messages = min(b.ack_messages * 2, limit)
        elif b.ack_messages > limit:
            b.ack_messages = max(b.ack_messages // 2, limit)
        self._send(reply, _flow_ack(b.fseq, b.ack_messages), b)
        return True

    def _commit(self, b, reply):
        """fastBatchCommit: the batch ends; its PubAck goes out now if all it
        counted is stored (True), else when the last of it is."""
        if not b.commit:
            b.commit = True
            if b.timer is not None and b.timer.active():
                b.timer.cancel()  # ending: nothing times it out any more
        if b.lseq != b.pseq:
            return False
        self._end(b)
        self._send(reply, self._commit_ack(b, b.sseq, b.lseq), b)
        return True

    # -- bookkeeping --------------------------------------------------------------

    def _batches(self, stream):
        entry = self.streams.get(stream.name)
        if entry is None or entry[0] is not stream:
            if entry is not None:
                for b in list(entry[1].values()):  # the stream they were for is gone
                    self._end(b)
            entry = self.streams[stream.name] = (stream, {})
        return entry[1]

    def _begin(self, stream, batches, req):
        b = Batch(stream, req.id, req.gap_ok, req.flow)
        batches[req.id] = b
        self.total += 1
        b.ack_messages = 1 if len(batches) > 1 else min(MAX_ACK_MESSAGES, req.flow)
        b.timer = self.js.broker.reactor.callLater(
            server_limit(self.js, "batch_timeout", TIMEOUT), self._end, b)
        return b

    def _end(self, b):
        entry = self.streams.get(b.stream.name)
        if entry is None or entry[1].get(b.id) is not b:
            return
        del entry[1][b.id]
        self.total -= 1
        if not entry[1]:
            del self.streams[b.stream.name]
        if b.timer is not None and b.timer.active():
            b.timer.cancel()
        b.timer = None

    def _ack_head(self, b):
        full = AM.pub_ack_json(b.stream.name, 1, domain=self.js.js.domain)
        return full[:full.rindex(b"1}")]

    def _commit_ack(self, b, seq, count):
        return self._ack_head(b) + b'%d,"batch":%s,"count":%d}' % (seq, _quote(b.id), count)

    def _send(self, reply, payload, b=None):
        """Queue a reply behind the group commit; one that speaks for stored
        messages (``b``) becomes the store's error if that commit fails."""
        pub = (b.stream, b.sseq) if b is not None and b.sseq else None
        self.js._acks.append((reply, payload, pub))
        self.js.schedule_commit()


def _quote(batch_id):
    return E.go_quote(batch_id).encode("utf-8")
