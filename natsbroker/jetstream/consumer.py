"""A JetStream consumer: a cursor on a stream that delivers, tracks acks and
redelivers, with nats-server's semantics (names follow its consumer.go:
``sseq`` is the next stream sequence to look at, ``dseq`` the next delivery
sequence, ``asflr``/``adflr`` the ack floors, ``pending`` the delivered but
unacknowledged messages, ``rdc`` redelivery counts, ``rdq`` the redelivery
queue).

Deliveries run after the store's group commit, so a consumer only ever hands
out messages that are durable; its own state (delivered, floors, pending) is
written into the stream's store at the next commit, and ack confirmations
("double acks") wait for that commit. Every timer is a reactor call.
"""

import collections
import json
import os
import random

from twisted.logger import Logger

from natsbroker import jsonbound
from natsbroker.gocompat import times as gotime
from natsbroker.gocompat.durations import parse_duration
from natsbroker.jetstream import consumer_api, consumer_requests as CR, errors as E, priority as P
from natsbroker.jetstream.apilevel import slice_header
from natsbroker.nuid import nuid
from natsbroker.subjects.sublist import subject_matches

NANOS = 1_000_000_000
META_PREFIX = b"c."

log = Logger()

# Pull requests' status lines, as nats-server sends them.
_PENDING_T = b"Nats-Pending-Messages: %d\r\nNats-Pending-Bytes: %d\r\n\r\n"
_TIMEOUT = b"NATS/1.0 408 Request Timeout\r\n" + _PENDING_T
_MAX_BYTES = b"NATS/1.0 409 Message Size Exceeds MaxBytes\r\n" + _PENDING_T
_SHUTDOWN = b"NATS/1.0 409 Server Shutdown\r\n" + _PENDING_T
_NO_MESSAGES = b"NATS/1.0 404 No Messages\r\n\r\n"
_HEARTBEAT = b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: %d\r\nNats-Last-Stream: %d\r\n\r\n"
_FC_REQUEST = b"NATS/1.0 100 FlowControl Request\r\n\r\n"


def _parse_int64(token):
    """nats-server's parseInt64: decimal digits, else -1."""
    if not token or not token.isdigit() or not token.isascii():
        return -1
    return int(token)


def status(code, text):
    return b"NATS/1.0 %d %s\r\n\r\n" % (code, text)


def _ns_time(value):
    """A config time (RFC 3339 text, ns, or None) as ns since the epoch, or 0."""
    if not value:
        return 0
    if isinstance(value, int):
        return value
    return gotime.parse_rfc3339(value)


class WaitingRequest:
    __slots__ = ("reply", "n", "d", "b", "expires", "received", "hb", "hbt", "no_wait",
                 "max_bytes", "pg")

    def __init__(self, reply, n, b, expires, received, hb, no_wait, pg=None):
        self.reply = reply
        self.n = n  # messages still wanted
        self.d = 0  # messages delivered
        self.b = b  # max bytes still allowed, 0 for no limit
        self.max_bytes = b
        self.expires = expires  # ns, 0 for never
        self.received = received
        self.hb = hb
        self.hbt = received + hb if hb > 0 else 0  # <= 0: no heartbeats
        self.no_wait = no_wait
        # The JSON request's priority group fields (a consumer_models.NextRequest; its ``id``
        # is set when this request gets the pin), None for a bare batch size.
        self.pg = pg


class Consumer:
    def __init__(self, js, stream, name, config, created):
        self.js = js
        self.broker = js.broker
        self.stream = stream
        self.name = name
        # Every ack subject of this consumer starts so: its subscription,
        # the replies it sends, the acks it parses.
        self._ack_prefix = b"$JS.ACK.%s.%s." % (stream.name.encode(), name.encode())
        self.config = config
        self.created = created
        self.clock = stream.clock
        self.now = stream.now
        self.sseq = 1
        self.dseq = 1
        self.asflr = 0
        self.adflr = 0
        self.pending = collections.OrderedDict()  # sseq -> [dseq, ts]; ordered: O(1) lowest (a dict scans its holes)
        self.rdc = {}  # sseq -> times redelivered
        self.rdq = collections.OrderedDict()  # sseq queued for redelivery, in order
        self.lss = None  # last-per-subject start: seqs still to deliver
        self.lss_resume = 0
        self.waiting = collections.deque()  # pull requests
        self.ldt = 0  # last delivery time
        self.lat = 0  # last ack time
        self.active = False  # push: the deliver subject has interest
        self.closed = False
        self.dirty = False
        # num pending: ``_npc`` as of the stream's log position ``_lmark``
        # (natsbroker.jetstream.consumer_index); read ``npc``.
        self._npc = 0
        self._lmark = stream.index.end
        self._subs = []
        self._watch = None
        self._timers = {}
        self._kicked = False
        self._replay_lts = 0
        self._rate_t = 0  # rate limit: when the bucket was last filled
        self._tokens = 0.0
        self._rate_paid = False  # the held message already reserved its bytes
        self.pbytes = 0  # flow control: bytes sent since the last answered request
        self.fcid = None
        self.fcsz = 0
        # pinned_client: the pin handed to one client's requests (not stored:
        # nats-server forgets it on restart), when and for which group.
        self.pin_id = ""
        self.pinned_ts = 0
        self.pin_group = ""
        self._set_filters()

    # -- config -------------------------------------------------------------

    def _set_filters(self):
        cfg = self.config
        filters = list(cfg.filter_subjects or ())
        if cfg.filter_subject:
            filters = [cfg.filter_subject]
        self.filters = [f.encode() for f in filters if f not in ("", ">")]
        self.is_pull = not cfg.deliver_subject
        self.ack_none = cfg.ack_policy == "none"
        self.maxp = cfg.max_ack_pending if not self.ack_none else 0
        # A 2 MiB flow-control window (nats-server's maxpb = pblimit / 16).
        self.pblimit = 32 * 1024 * 1024 if cfg.flow_control else 0
        self.maxpb = self.pblimit // 16

    def update_config(self, config):
        self.settle()  # what was stored so far counts under the old filters
        self.config = config
        self._set_filters()
        self.stream.index.refilter(self)
        self._arm_heartbeat()
        self._arm_pause()
        self.dirty = True
        self.kick()

    def wants(self, subject):
        if not self.filters:
            return True
        for f in self.filters:
            if f == subject or subject_matches(f, subject):
                return True
        return False

    @property
    def durable(self):
        return bool(self.config.durable_name)

    # -- lifecycle ------------------------------------------------------------

    def select_start(self):
        """nats-server's selectStartingSeqNo."""
        cfg = self.config
        store = self.stream.store
        st = store.state()
        policy = cfg.deliver_policy
        if cfg.opt_start_seq and policy == "by_start_sequence":
            sseq = cfg.opt_start_seq
        elif policy == "all":
            sseq = st.first_seq
        elif policy == "last":
            sseq = st.last_seq
            if self.filters:
                last = 0
                for f in self.filters:
                    m = store.load_last(f)
                    if m is not None and m.seq > last:
                        last = m.seq
                sseq = last or st.last_seq
        elif policy == "last_per_subject":
            seqs = []
            for f in (self.filters or [None]):
                for subj in store.subject_counts(f):
                    m = store.load_last(subj)
                    if m is not None:
                        seqs.append(m.seq)
            if seqs:
                seqs = sorted(set(seqs))
                self.lss = collections.deque(seqs)
                self.lss_resume = st.last_seq
                sseq = seqs[0]
            else:
                sseq = st.last_seq
        elif policy == "by_start_time":
            sseq = self.stream.seq_for_time(_ns_time(cfg.opt_start_time))
        else:  # new
            sseq = st.last_seq + 1
        if st.first_seq == 0:
            sseq = 1
        elif sseq < st.first_seq:
            sseq = st.first_seq
        elif sseq > st.last_seq:
            sseq = st.last_seq + 1
        self.sseq = sseq
        self.dseq = 1
        self.adflr = 0
        self.asflr = sseq - 1
        self.dirty = True

    def start(self, state=None):
        if state is None:
            self.select_start()
        else:
            self.restore(state)
        self._raise_to_floor()
        self.npc = self.compute_pending()
        stream, name = self.stream.name.encode(), self.name.encode()
        if not self.ack_none:
            # An ack_policy none consumer has no ack subscription at all.
            # (".>" matches faster than five "*" levels; _on_ack answers other
            # token counts as nats-server's 9-token subscription would: 503.)
            self._subs.append(self.broker.subscribe(self._ack_prefix + b">", self._on_ack))
        # Like nats-server, the consumer answers its own reset subject: no
        # consumer, no reply (and no API count or audit either way).
        for prefix in self.js._api_prefixes():
            self._subs.append(self.broker.subscribe(
                prefix + b"CONSUMER.RESET.%s.%s" % (stream, name), self._on_reset))
        if not self.is_pull:
            self._subs.append(self.broker.subscribe(
                b"$JS.FC.%s.%s.>" % (stream, name), self._on_flow_control))
            dsubj = self.config.deliver_subject.encode()
            self._watch = self.broker.sublist.watch(dsubj, self._on_interest,
                                                    self._on_interest_gone)
            self.active = self.broker.sublist.has_interest(dsubj)
            self._arm_heartbeat()
        self._arm_inactivity()
        self._arm_pause()
        if self.pending:
            self._arm_ack_timer()
        self.stream.index.add(self)
        self.kick()

    def stop(self, delete=False):
        if self.closed:
            return
        self.closed = True
        self.stream.index.remove(self)
        for sub in self._subs:
            self.broker.unsubscribe(sub)
        self._subs = []
        if self._watch is not None:
            self.broker.sublist.unwatch(self._watch)
            self._watch = None
        for call in self._timers.values():
            if call.active():
                call.cancel()
        self._timers = {}
        if delete and self.is_pull:
            # Waiting requests learn the consumer is gone.
            for wr in self.waiting:
                self.send_status(wr.reply, status(409, b"Consumer Deleted"))
        self.waiting.clear()

    def signal_shutdown(self):
        """nats-server's signalPullConsumers: the server is going away, so every
        waiting pull request gets 409 "Server Shutdown" with what it had still
        to receive. Clients whose requests would otherwise just vanish (an
        ordered consumer's continuous pull, without heartbeats) then pull again
        once reconnected, and learn the consumer is gone. One status per reply
        subject (the last request on it), and only for R1 consumers, as there."""
        if not self.is_pull or self.config.num_replicas > 1:
            return
        last = {wr.reply: wr for wr in self.waiting}
        for reply, wr in last.items():
            self.send_status(reply, _SHUTDOWN % (wr.n, wr.b))

    # -- state ----------------------------------------------------------------

    def state_json(self):
        return json.dumps({
            "delivered": [self.dseq - 1, self.sseq - 1],
            "ack_floor": [self.adflr, self.asflr],
            "pending": [[s, d, t] for s, (d, t) in self.pending.items()],
            "redelivered": sorted(self.rdc.items()),
            "lss": list(self.lss) if self.lss else None,
            "lss_resume": self.lss_resume,
        }, separators=(",", ":")).encode()

    def _raise_to_floor(self):
        """Delivered and ack floors never go back: the store's high-water mark
        keeps them beyond damage that took the newer state record with it."""
        f = self.stream.store.floor(self.name.encode())
        if not f:
            return
        dd, ds, ad, asf = f
        before = (self.dseq - 1, self.sseq - 1, self.adflr, self.asflr)
        if ds + 1 > self.sseq:
            self.sseq = ds + 1
        if dd + 1 > self.dseq:
            self.dseq = dd + 1
        if asf > self.asflr:
            self.asflr = asf
            self.adflr = max(self.adflr, ad)
            for s in [s for s in self.pending if s <= asf]:
                del self.pending[s]
                self.rdc.pop(s, None)
        after = (self.dseq - 1, self.sseq - 1, self.adflr, self.asflr)
        if after != before:
            log.warn("JetStream consumer {s} > {c}: stored state was behind its high-water mark "
                     "(damaged store); delivered {b0}/{b1} -> {a0}/{a1}, ack floor {b2}/{b3} -> "
                     "{a2}/{a3} (consumer/stream sequences)", s=self.stream.name, c=self.name,
                     b0=before[0], b1=before[1], b2=before[2], b3=before[3],
                     a0=after[0], a1=after[1], a2=after[2], a3=after[3])

    def restore(self, raw):
        st = json.loads(raw)
        self.dseq = st["delivered"][0] + 1
        self.sseq = st["delivered"][1] + 1
        self.adflr, self.asflr = st["ack_floor"]
        self.pending = collections.OrderedDict((s, [d, t]) for s, d, t in sorted(st["pending"]))
        self.rdc = {s: n for s, n in st["redelivered"]}
        if st.get("lss"):
            self.lss = collections.deque(st["lss"])
            self.lss_resume = st.get("lss_resume", 0)
        first = self.stream.store.state().first_seq
        if self.sseq < first:
            self.sseq = first

    def mark_dirty(self):
        """The state changed: it is written within STATE_FLUSH (or with the
        commit of an ack confirmation, which must not be sent before it)."""
        if not self.dirty:
            self.dirty = True
            self.js.consumer_dirty(self)

    # -- numbers for info ------------------------------------------------------

    def compute_pending(self):
        """Messages at or after the cursor that this consumer would deliver."""
        store = self.stream.store
        start = self.sseq
        if self.lss:
            n = len(self.lss)
            start = self.lss_resume + 1
        else:
            n = 0
        if not self.filters:
            return n + store.num_pending(start)
        return n + sum(store.num_pending(start, f) for f in self.filters)

    def info(self):
        """The consumer's numbers in nats-server's ConsumerInfo terms."""
        self._process_waiting(False)
        self.npc = self.compute_pending()
        paused_until = _ns_time(self.config.pause_until)
        now = self.now()
        return {
            "delivered": (self.dseq - 1, self.sseq - 1, self.ldt),
            "ack_floor": (self.adflr, self.asflr, self.lat),
            "num_ack_pending": len(self.pending),
            "num_redelivered": len(self.rdc),
            "num_waiting": len(self.waiting) if self.is_pull else 0,
            "num_pending": self.npc,
            "push_bound": (not self.is_pull) and self.active,
            "paused": paused_until > now,
            "pause_remaining": max(paused_until - now, 0),
            "pinned": (self.pin_id, self.pinned_ts),
        }

    # -- new messages ----------------------------------------------------------
    # The stream's ConsumerIndex kicks the consumer for a message it takes and
    # logs the message; ``npc`` counts the log when read.

    @property
    def npc(self):
        """Num pending: messages at or after the cursor this consumer would deliver."""
        if self._lmark != self.stream.index.end:
            self.settle()
        return self._npc

    @npc.setter
    def npc(self, n):
        # A value computed now accounts for everything logged so far.
        self._lmark = self.stream.index.end
        self._npc = n

    def settle(self):
        """Count the messages logged since the last count. Called before the
        cursor moves or the filters change: a message counts if it was at or
        past the cursor, and taken by the filters, when it was stored."""
        index = self.stream.index
        if self._lmark != index.end:
            self._npc += index.count(self._lmark, self.sseq,
                                     self.wants if self.filters else None)
            self._lmark = index.end

    def kick(self):
        """Deliver what can be delivered, after this turn's commit."""
        if not self._kicked and not self.closed:
            self._kicked = True
            self.stream.index.busy(self)
            self.js.consumer_kicked(self)

    def run(self):
        """Called by the plugin after the commit."""
        self._kicked = False
        if not self.closed:
            if self.waiting or not self.is_pull:
                self.stream.index.idle(self)
            # else: a pull consumer with no request waiting has nothing to do
            # when messages arrive; it stays out of the index's idle sets
            # (which wake it) until a request comes (next_request). With
            # 1000 such consumers on a stream, waking each one every turn
            # cost ~100 us per published message.
            self.deliver_pending()

    # -- getting the next message ----------------------------------------------

    def _next_msg(self):
        """``(msg, delivery count)`` or ``(None, reason)``; nats-server's getNextMsg."""
        self.settle()  # the cursor moves
        store = self.stream.store
        maxdc = self.config.max_deliver
        while self.rdq:
            seq, _ = self.rdq.popitem(last=False)
            self.rdc[seq] = self.rdc.get(seq, 0) + 1
            dc = self.rdc[seq] + 1
            if maxdc > 0 and dc > maxdc:
                if dc == maxdc + 1:
                    self._advise_max_deliveries(seq, dc - 1)
                self.pending.pop(seq, None)
                self.mark_dirty()
                continue
            msg = store.load(seq)
            if msg is None:
                self.pending.pop(seq, None)
                self.rdc.pop(seq, None)
                continue
            return msg, dc
        if self.lss:
            seq = self.lss[0]
            if self.maxp > 0 and len(self.pending) >= self.maxp:
                return None, "max_ack_pending"
            self.lss.popleft()
            if not self.lss:
                self.lss = None
                self.sseq = self.lss_resume + 1
            msg = store.load(seq)
            if msg is not None:
                return msg, 1
            return self._next_msg()
        if self.maxp > 0 and len(self.pending) >= self.maxp:
            return None, "max_ack_pending"
        msg = self._load_next(self.sseq)
        if msg is None:
            st = store.state()
            if self.sseq <= st.last_seq:
                self.sseq = st.last_seq + 1
            self.npc = 0
            return None, "eof"
        self.sseq = msg.seq + 1
        return msg, 1

    def _load_next(self, seq):
        store = self.stream.store
        if not self.filters:
            return store.load_next(seq)
        if len(self.filters) == 1:
            return store.load_next(seq, self.filters[0])
        best = None
        for f in self.filters:
            m = store.load_next(seq, f)
            if m is not None and (best is None or m.seq < best.seq):
                best = m
        return best

    # -- delivery ---------------------------------------------------------------

    def _paused(self):
        until = _ns_time(self.config.pause_until)
        return until and until > self.now()

    def deliver_pending(self):
        broker = self.broker
        cfg = self.config
        why = None
        broker.begin()
        try:
            while not self.closed:
                if self._paused():
                    break
                if self.is_pull:
                    if not self.waiting:
                        break
                else:
                    # Flow control: a request past half the window, a stall past it.
                    if not self.active or (self.maxpb and self.pbytes > self.maxpb):
                        break
                if "replay" in self._timers or "rate" in self._timers:
                    break
                msg, dc = self._next_msg()
                if msg is None:
                    why = dc
                    break
                if dc == 1:
                    self.npc -= 1
                now = self.now()
                if cfg.replay_policy == "original" and self._replay_lts and dc == 1:
                    delay = msg.ts - self._replay_lts
                    if delay > 1_000_000 and not self._replay_ready:
                        self._hold(msg, dc, "replay", delay)
                        break
                self._replay_ready = False
                self._replay_lts = msg.ts
                if not self._send(msg, dc, now):
                    if self.is_pull:
                        # No request may take it: one-shot requests end here
                        # (nats-server's processWaiting(true)).
                        why = "no_request"
                    break
            if self.is_pull and self.waiting:
                # Out of messages: one-shot (no_wait) requests that got some end
                # here, but not when only max_ack_pending holds delivery back.
                self._process_waiting(why is not None and why != "max_ack_pending")
        finally:
            broker.end()
        if self.is_pull:
            self._arm_waiting()

    _replay_ready = False

    def _hold(self, msg, dc, kind, delay_ns):
        """Put ``msg`` back and continue after ``delay_ns``."""
        self._unget(msg, dc)

        def resume():
            self._timers.pop(kind, None)
            if kind == "replay":
                self._replay_ready = True
            self.deliver_pending()
        self._timers[kind] = self.clock.callLater(delay_ns / NANOS, resume)

    def _unget(self, msg, dc):
        if dc == 1:
            self.npc += 1
            self.sseq = msg.seq
        else:
            self.rdq[msg.seq] = True
            self.rdq.move_to_end(msg.seq, last=False)
            self.rdc[msg.seq] = dc - 2
            if not self.rdc[msg.seq]:
                del self.rdc[msg.seq]

    def ack_reply(self, sseq, dseq, dc, ts, pending):
        return self._ack_prefix + b"%d.%d.%d.%d.%d" % (dc, sseq, dseq, ts, pending)

    def _send(self, msg, dc, now):
        cfg = self.config
        pending = max(self.npc, 0)
        reply = self.ack_reply(msg.seq, self.dseq, dc, msg.ts, pending)
        hdr, data = msg.hdr, msg.data
        if cfg.headers_only:
            base = hdr[:-2] if hdr else b"NATS/1.0\r\n"
            hdr = base + b"Nats-Msg-Size: %d\r\n\r\n" % len(data)
            data = b""
        sz = len(msg.subject) + len(reply) + len(hdr) + len(data)
        if self.is_pull:
            wr = self._next_waiting(sz)
            if wr is None:
                self._unget(msg, dc)
                return False
            dsubj = wr.reply
            if wr.n > 0 and wr.hb > 0:
                wr.hbt = now + wr.hb
            if cfg.priority_policy == "pinned_client":
                hdr = P.with_pin_header(hdr, self.pin_id)
        else:
            dsubj = cfg.deliver_subject.encode()
            if cfg.rate_limit_bps and not self._rate_paid:
                # nats-server's limiter: bytes at rate_limit_bps / 8 a second,
                # a burst of the stream's max_msg_size (or max_payload), full
                # at first; a message reserves its bytes, then waits its turn.
                rate = cfg.rate_limit_bps / 8 / NANOS
                burst = self.stream.config.max_msg_size
                if burst <= 0:
                    burst = self.js.config.max_payload
                if self._rate_t == 0:
                    self._tokens, self._rate_t = burst, now
                self._tokens = min(burst, self._tokens + (now - self._rate_t) * rate) - sz
                self._rate_t = now
                if self._tokens < 0:
                    self._rate_paid = True
                    self._hold(msg, dc, "rate", -self._tokens / rate)
                    return False
            self._rate_paid = False
        dseq = self.dseq
        self.dseq += 1
        n = self.broker.deliver(dsubj, msg.subject, data, reply, hdr or None)
        if self.is_pull and wr.b > 0 and wr.n <= 0:
            # A max_bytes request that got its batch with bytes to spare says
            # so; one whose last message used its bytes up exactly ends
            # silently (nats-server: wrn <= 0 && wrb > 0).
            self.send_status(wr.reply, b"NATS/1.0 409 Batch Completed\r\n"
                              + _PENDING_T % (wr.n, wr.b))
        if self.maxpb:
            self.pbytes += sz
        if not self.ack_none:
            p = self.pending.get(msg.seq)
            if p is None:
                self.pending[msg.seq] = [dseq, now]
            else:
                # A redelivery keeps the original delivery sequence (the ack
                # floor moves by those), as nats-server 2.15 does.
                p[1] = now
            self._arm_ack_timer()
        else:
            self.adflr, self.asflr = dseq, msg.seq
            if self.stream.config.retention != "limits":
                self.js.ack_msg(self.stream, self, msg.seq)
        self.ldt = now
        self.mark_dirty()
        if not self.is_pull:
            if n == 0:
                self.active = False
            if self.maxpb and self._need_flow_control(sz):
                self._send_flow_control()
            self._arm_heartbeat()
        return True

    # -- push: interest, flow control, heartbeats --------------------------------

    def _on_interest(self, subject):
        if not self.active:
            self.active = True
            self.kick()

    def _on_interest_gone(self, subject):
        if self.active and not self._check_interest():
            self.went_idle()

    def _check_interest(self):
        if not self.is_pull:
            self.active = self.broker.sublist.has_interest(self.config.deliver_subject.encode())
        return self.active

    def _need_flow_control(self, sz):
        """nats-server's needFlowControl: over half the window, or (ack
        policy flow_control) at ``max_ack_pending``; an outstanding request
        grows its size once the window is exceeded."""
        if self.fcid is None:
            if self.pbytes > self.maxpb // 2:
                return True
            return (self.config.ack_policy == "flow_control" and self.maxp > 0
                    and len(self.pending) >= self.maxp)
        if self.pbytes - self.fcsz >= self.maxpb:
            self.fcsz += sz
        return False

    def _send_flow_control(self):
        token = "".join("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"[b % 62]
                        for b in os.urandom(4))
        reply = b"$JS.FC.%s.%s.%s" % (self.stream.name.encode(), self.name.encode(), token.encode())
        self.fcid, self.fcsz = reply, self.pbytes
        self.broker.deliver(self.config.deliver_subject.encode(), self.config.deliver_subject.encode(),
                            b"", reply, _FC_REQUEST)

    def _on_flow_control(self, sub, subject, reply, hdr_len, raw):
        if subject != self.fcid:
            return
        if self.maxpb < self.pblimit:
            # Slow start: each answered request doubles the window.
            self.maxpb = min(self.maxpb * 2, self.pblimit)
        self.pbytes = max(self.pbytes - self.fcsz, 0)
        self.fcid, self.fcsz = None, 0
        self.kick()
        if self.config.ack_policy != "flow_control" or hdr_len <= 0:
            return
        # Ack policy flow_control: the reply's Nats-Last-Consumer/-Stream
        # headers ack everything up to them (like an ack all); a consumer
        # sequence may be 0 (a reply without deliveries).
        hdr = raw[:hdr_len]
        lsseq = _parse_int64(slice_header(hdr, b"Nats-Last-Stream"))
        if lsseq > 0:
            ldseq = max(_parse_int64(slice_header(hdr, b"Nats-Last-Consumer")), 0)
            floor = (self.adflr, self.asflr)
            self._ack_msg(lsseq, ldseq)
            if (self.adflr, self.asflr) != floor:
                self.lat = self.now()

    def _arm_heartbeat(self):
        hb = self.config.idle_heartbeat
        if self.is_pull or not hb or self.closed:
            return
        call = self._timers.get("hb")
        if call is not None and call.active():
            call.reset(hb / NANOS)
        else:
            self._timers["hb"] = self.clock.callLater(hb / NANOS, self._heartbeat)

    def _heartbeat(self):
        self._timers.pop("hb", None)
        if self.closed:
            return
        if self._check_interest():
            hdr = _HEARTBEAT % (self.dseq - 1, self.sseq - 1)
            if self.fcid:
                hdr = hdr[:-2] + b"Nats-Consumer-Stalled: %s\r\n\r\n" % self.fcid
            dsubj = self.config.deliver_subject.encode()
            self.broker.begin()
            try:
                self.broker.deliver(dsubj, dsubj, b"", None, hdr)
                # Ack policy flow_control: acks come with flow control
                # replies, so unacked deliveries ask for one (nats-server).
                if self.config.ack_policy == "flow_control" and self.pending \
                        and self.fcid is None:
                    self._send_flow_control()
            finally:
                self.broker.end()
        self._arm_heartbeat()

    # -- pull requests ------------------------------------------------------------

    def next_request(self, reply, body):
        """``$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>``: nats-server's
        processNextMsgRequest."""
        if not reply:
            return
        cfg = self.config
        now = self.now()
        try:
            req = CR.parse_next_request(body)
        except CR.NextRequestError as e:
            self.send_status(reply, e.header)
            return
        err = CR.next_request_error(req, cfg)
        if err is not None:
            self.send_status(reply, err.header)
            return
        if req.priority_group and cfg.priority_policy != "none" and self.pin_id:
            if req.id == self.pin_id:
                self._arm_pin_timer()  # the pinned client is still there
            elif req.id:
                self.send_status(reply, P.PIN_MISMATCH)
                return
        batch, expires, max_bytes, no_wait, hb = (
            req.batch, req.expires, req.max_bytes, req.no_wait, req.idle_heartbeat)
        max_waiting = cfg.max_waiting or 512
        if len(self.waiting) >= max_waiting:
            self._process_waiting(False)
        self._arm_inactivity()
        if no_wait:
            pending = 0 if self._paused() else self.compute_pending() + len(self.rdq)
            if pending == 0 and not expires:
                self.send_status(reply, _NO_MESSAGES)
                return
            if pending > 0:
                wanted = sum(w.n for w in self.waiting)
                if pending < wanted:
                    self.send_status(reply, status(408, b"Requests Pending"))
                    return
        if len(self.waiting) >= max_waiting:
            if hb <= 0:
                # With heartbeats the client notices their absence and asks
                # again later: no 409 (that would make it retry at once).
                self.send_status(reply, status(409, b"Exceeded MaxWaiting"))
            return
        wr = WaitingRequest(reply, batch, max_bytes, now + expires if expires else 0,
                            now, hb, no_wait, req if req.priority_group else None)
        if cfg.priority_policy == "prioritized":
            P.insert_by_priority(self.waiting, wr)
        else:
            self.waiting.append(wr)
        if not self._kicked:
            self.stream.index.idle(self)  # new messages wake it again
        self.deliver_pending()

    def send_status(self, reply, hdr):
        self.broker.begin()
        try:
            self.broker.deliver(reply, reply, b"", None, hdr)
        finally:
            self.broker.end()

    def _next_waiting(self, sz):
        """nats-server's nextWaiting: the request the next message (of ``sz``
        bytes) goes to, or None. In queue order: expired requests end; under
        pinned_client the first request without a pin gets a new one, requests
        with another pin end (423), requests without one wait their turn while
        a pin is held; overflow requests below their thresholds let it pass;
        then max bytes and interest."""
        waiting = self.waiting
        has_interest = self.broker.sublist.has_interest
        now = self.now()
        policy = self.config.priority_policy
        need_pin = policy == "pinned_client" and not self.pin_id
        cycled = 0
        while waiting:
            wr = waiting[0]
            if wr.expires and now >= wr.expires:
                waiting.popleft()
                self.send_status(wr.reply, _TIMEOUT % (wr.n, wr.b))
                continue
            pg = wr.pg
            assigned = False
            if need_pin:
                if pg is None or not pg.id:
                    assigned = self._assign_pin(wr)
                else:
                    # It still holds a pin that timed out or was unpinned.
                    waiting.popleft()
                    self.send_status(wr.reply, P.WRONG_PIN % (wr.n, wr.b))
                    continue
            elif self.pin_id and not (pg is not None and pg.id == self.pin_id):
                if pg is None or not pg.id:
                    # Not the pinned client: to the back, it waits for the pin.
                    waiting.rotate(-1)
                    cycled += 1
                    if cycled >= len(waiting):
                        return None
                    continue
                waiting.popleft()
                self.send_status(wr.reply, P.WRONG_PIN % (wr.n, wr.b))
                continue
            if policy == "overflow" and pg is not None and P.overflow_waits(
                    pg, self.npc, len(self.pending)):
                waiting.rotate(-1)
                cycled += 1
                if cycled >= len(waiting):
                    return None
                continue
            if wr.b > 0:
                if sz <= wr.b:
                    wr.b -= sz
                    if wr.b == 0:
                        wr.n = 1  # this one fits exactly: the last
                else:
                    waiting.popleft()
                    self.send_status(wr.reply, _MAX_BYTES % (wr.n, wr.b))
                    if assigned:
                        self._unassign_pin()  # (nats-server sends no advisory here)
                    continue
            if has_interest(wr.reply):
                wr.d += 1
                wr.n -= 1
                if wr.n <= 0:
                    waiting.popleft()
                elif len(waiting) > 1:
                    waiting.popleft()
                    if policy == "prioritized":
                        P.insert_by_priority(waiting, wr)  # behind its equals
                    else:
                        waiting.append(wr)
                return wr
            waiting.popleft()
        return None

    def _process_waiting(self, eos):
        """Expire requests, drop those without interest, send heartbeats
        (nats-server's processWaiting); ``eos``: no more messages for now, so
        no_wait requests that got something end here."""
        if not self.waiting:
            return
        has_interest = self.broker.sublist.has_interest
        now = self.now()
        keep = collections.deque()
        for wr in self.waiting:
            expired = wr.expires and now >= wr.expires
            if expired:
                self.send_status(wr.reply, _TIMEOUT % (wr.n, wr.b))
                continue
            if eos and wr.no_wait and (not wr.expires or wr.d > 0):
                # A one-shot request that got what there was, or that nothing
                # may go to (2.15 says 404 here); one with expires and nothing
                # yet keeps waiting for it.
                self.send_status(wr.reply, _NO_MESSAGES)
                continue
            if not has_interest(wr.reply):
                continue
            if wr.hbt and now >= wr.hbt:
                self.send_status(wr.reply, _HEARTBEAT % (self.dseq - 1, self.sseq - 1))
                wr.hbt = now + wr.hb
            keep.append(wr)
        self.waiting = keep

    def _arm_waiting(self):
        """One timer for the earliest request expiry or heartbeat."""
        call = self._timers.pop("wait", None)
        if call is not None and call.active():
            call.cancel()
        if self.closed:
            return
        if not self.waiting:
            if self._was_waiting:
                self._was_waiting = False
                if self.config.inactive_threshold:
                    self.went_idle()
            return
        self._was_waiting = True
        at = 0
        for wr in self.waiting:
            for t in (wr.expires, wr.hbt):
                if t and (not at or t < at):
                    at = t
        if not at:
            return

        def fire():
            self._timers.pop("wait", None)
            self.deliver_pending()
            if self.waiting:
                self._process_waiting(False)
                self._arm_waiting()
        self._timers["wait"] = self.clock.callLater(max((at - self.now()) / NANOS, 0), fire)

    # -- acks ----------------------------------------------------------------------

    def _on_ack(self, sub, subject, reply, hdr_len, raw):
        # The subscription's prefix is this consumer's: only the five numbers
        # after it need splitting.
        tokens = subject[len(self._ack_prefix):].split(b".")
        if len(tokens) != 5:
            self.js.no_responders(subject, reply)
            return
        dc, sseq, dseq = _ack_num(tokens[0]), _ack_num(tokens[1]), _ack_num(tokens[2])
        self.process_ack(sseq, dseq, dc, raw[hdr_len:], reply)

    def process_ack(self, sseq, dseq, dc, body, reply=None):
        """nats-server's processAck: the body decides, byte for byte. Asked
        for, a confirmation goes out except for an ack or term of a message not
        delivered yet and a nak or progress naming sequence 0."""
        confirm = True
        if self.config.ack_policy == "flow_control":
            # nats-server 2.15.1: acks come with flow control replies only;
            # what comes to the ack subject is confirmed and does nothing
            # (no ack, no nak redelivery).
            pass
        elif body in (b"", b"+ACK", b"+OK"):
            if not self._ack_msg(sseq, dseq):
                confirm = False
        elif body.startswith(b"+NXT"):
            self._ack_msg(sseq, dseq)
            if reply:
                self.next_request(reply, body[4:])
            confirm = False
        elif body.startswith(b"-NAK"):
            self._nak(sseq, dseq, dc, body[4:].strip())
            confirm = sseq != 0
        elif body == b"+WPI":
            p = self.pending.get(sseq)
            if p is not None:
                p[1] = self.now()
                self.mark_dirty()
            confirm = sseq != 0
        elif body.startswith(b"+TERM"):
            if not self._term(sseq, dseq, dc, body[5:].strip()):
                confirm = False
        self.lat = self.now()
        self._arm_inactivity()
        if reply and confirm:
            # The confirmation waits for the commit that makes the ack durable
            # (for a replicated stream's durable consumer: until the state
            # that has it is committed in the stream's group).
            self.js.consumer_dirty(self, urgent=True)
            group = self.stream.group
            if group is not None and self.config.durable_name:
                group.confirm_with_state(self.name, reply)
            else:
                self.js.reply_after_commit(reply, b"")

    def _ack_msg(self, sseq, dseq):
        """An ack of ``sseq``; False if it was not delivered yet (ignored,
        except on a flow-controlled consumer, as in nats-server)."""
        if sseq >= self.sseq and sseq not in self.pending and not self.config.flow_control:
            return False
        self._ack(sseq, dseq)
        return True

    def _ack(self, sseq, dseq):
        policy = self.config.ack_policy
        acked = []
        if policy == "explicit":
            p = self.pending.pop(sseq, None)
            if p is not None:
                dseq = p[0]
                acked.append(sseq)
            if not self.pending:
                self.adflr, self.asflr = self.dseq - 1, self.sseq - 1
            elif dseq == self.adflr + 1:
                # ``pending`` keeps first-delivery order, which is stream order:
                # its first key is the lowest outstanding sequence.
                lo = next(iter(self.pending))
                self.adflr, self.asflr = self.pending[lo][0] - 1, lo - 1
            self.rdc.pop(sseq, None)
            self.rdq.pop(sseq, None)
        elif policy in ("all", "flow_control"):
            if dseq <= self.adflr or sseq <= self.asflr:
                return
            for seq in [s for s in self.pending if s <= sseq]:
                del self.pending[seq]
                self.rdc.pop(seq, None)
                self.rdq.pop(seq, None)
                acked.append(seq)
            gap_from = self.asflr + 1
            self.adflr, self.asflr = dseq, sseq
            acked = list(range(gap_from, sseq + 1))
        else:
            return
        self.mark_dirty()
        if self.stream.config.retention != "limits":
            for seq in acked:
                self.js.ack_msg(self.stream, self, seq)
        self.kick()

    def _nak(self, sseq, dseq, dc, arg):
        """nats-server's processNak: a delivery sequence outside what is
        outstanding, or a message not pending, is ignored."""
        if dseq <= self.adflr or dseq >= self.dseq:
            return
        p = self.pending.get(sseq)
        if p is None:
            return
        self._advise("$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.%s.%s", {
            "type": "io.nats.jetstream.advisory.v1.nak",
            "stream": self.stream.name, "consumer": self.name,
            "consumer_seq": dseq, "stream_seq": sseq, "deliveries": dc})
        delay = _nak_delay(arg) if arg else None
        if delay is not None:
            # A delay that parses, even zero or negative: out of the redelivery
            # queue, redelivered by the ack timer once it has passed.
            self.rdq.pop(sseq, None)
            now = self.now()
            p[1] = now - self._ack_wait(sseq) + delay
            self._arm_ack_timer(now + delay)
        else:
            self.rdq[sseq] = True
            self.kick()
        self.mark_dirty()

    def _term(self, sseq, dseq, dc, reason):
        """Like an ack (no more redeliveries), with the MSG_TERMINATED advisory
        always sent, carrying the subject's numbers; True if it was delivered."""
        acked = self._ack_msg(sseq, dseq)
        event = {"type": "io.nats.jetstream.advisory.v1.terminated",
                 "stream": self.stream.name, "consumer": self.name,
                 "consumer_seq": dseq, "stream_seq": sseq, "deliveries": dc}
        if reason:
            event["reason"] = reason.decode(errors="replace")
        self._advise("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.%s.%s", event)
        return acked

    def needs_ack(self, seq, subject):
        """Whether this consumer still needs ``seq`` (interest retention)."""
        if not self.wants(subject):
            return False
        if self.config.ack_policy == "explicit":
            if seq <= self.asflr:
                return False
            if seq >= self.sseq:
                return True
            return seq in self.pending
        return seq > self.asflr

    # -- ack wait ---------------------------------------------------------------------

    def _ack_wait(self, sseq):
        backoff = self.config.backoff
        if backoff:
            dc = self.rdc.get(sseq, 0)
            return backoff[min(dc, len(backoff) - 1)]
        return self.config.ack_wait or 30 * NANOS

    def _arm_ack_timer(self, at=None):
        """One timer for the earliest ack deadline; ``at`` a new deadline that
        may come before the armed one (a nak with a delay)."""
        if self.closed or not self.pending or self.config.ack_policy == "flow_control":
            # (flow_control: no ack wait, so no redeliveries; checkPending stops.)
            return
        call = self._timers.get("ack")
        if call is not None:
            if at is None or self._ack_at <= at:
                return
            call.cancel()
        # Messages already queued for redelivery wait for a puller, not a timer.
        due = [p[1] + self._ack_wait(s) for s, p in self.pending.items() if s not in self.rdq]
        if at is None:
            if not due:
                return
            at = min(due)
        elif due:
            at = min(at, min(due))
        self._ack_at = at
        self._timers["ack"] = self.clock.callLater(max((at - self.now()) / NANOS, 0),
                                                   self._check_pending)

    _ack_at = 0

    def _check_pending(self):
        """nats-server's checkPending: queue expired deliveries for redelivery."""
        self._timers.pop("ack", None)
        if self.closed:
            return
        first = self.stream.store.state().first_seq
        now = self.now()
        expired = []
        for seq, p in list(self.pending.items()):
            if seq < first or seq <= self.asflr:
                del self.pending[seq]
                self.rdc.pop(seq, None)
                self.rdq.pop(seq, None)
                if seq > self.asflr:
                    self.asflr = seq
                if p[0] > self.adflr:
                    self.adflr = p[0]
                self.mark_dirty()
                continue
            if now - p[1] >= self._ack_wait(seq) and seq not in self.rdq:
                expired.append(seq)
        if expired:
            expired.sort()
            off = now - self.pending[expired[0]][1]
            for seq in expired:
                self.rdq[seq] = True
                self.pending[seq][1] += off
            self.mark_dirty()
            self.kick()
        self._arm_ack_timer()

    # -- purge, removal -------------------------------------------------------------------

    def purged(self):
        """The stream was purged: skip what is gone (nats-server's consumer.purge)."""
        self.settle()  # the cursor moves
        first = self.stream.store.state().first_seq
        if self.sseq < first:
            self.sseq = first
        if self.asflr < first - 1:
            self.asflr = first - 1
            for seq in [s for s in self.pending if s <= self.asflr]:
                d = self.pending.pop(seq)[0]
                if d > self.adflr:
                    self.adflr = d
                self.rdc.pop(seq, None)
        for seq in [s for s in self.rdq if s < self.sseq and s not in self.pending]:
            del self.rdq[seq]
        if self.lss:
            self.lss = collections.deque(s for s in self.lss if s >= first) or None
        self.mark_dirty()

    # -- inactivity and pause --------------------------------------------------------------

    def _delete_wait(self):
        """How long an idle consumer lives, in ns: its inactive_threshold, and
        for a pull consumer 0.1 s to 1 s more, drawn once (nats-server's
        ``dthresh``, consumer.go updateInactiveThreshold: jitter, so that
        ephemerals idle since the same moment do not all go at once)."""
        thresh = self.config.inactive_threshold
        if not thresh or not self.is_pull:
            return thresh
        if self._dthresh[0] != thresh:
            self._dthresh = (thresh, thresh + (100 + random.randrange(900)) * 1_000_000)
        return self._dthresh[1]

    _dthresh = (0, 0)

    def _arm_inactivity(self):
        thresh = self._delete_wait()
        if not thresh or self.closed:
            return
        if not self._idle_since:
            self._idle_since = self.now()
        call = self._timers.get("inactive")
        if call is not None and call.active():
            call.reset(thresh / NANOS)
        else:
            self._timers["inactive"] = self.clock.callLater(thresh / NANOS, self._inactive_check)

    def _inactive_check(self):
        """Delete an idle consumer one full threshold after it went idle: a
        pull consumer when no request has been waiting, a push consumer when
        its deliver subject has had no subscriber."""
        self._timers.pop("inactive", None)
        if self.closed:
            return
        thresh = self._delete_wait()
        now = self.now()
        busy = bool(self.waiting) if self.is_pull else self._check_interest()
        if busy:
            self._idle_since = now
            self._timers["inactive"] = self.clock.callLater(thresh / NANOS, self._inactive_check)
            return
        left = thresh - (now - self._idle_since)
        if left <= 0:
            self.js.delete_consumer(self.stream, self, reason="inactive")
        else:
            self._timers["inactive"] = self.clock.callLater(left / NANOS, self._inactive_check)

    def went_idle(self):
        """The last pull request ended, or the deliver subject lost its
        subscriber: the inactivity countdown starts now."""
        self._idle_since = self.now()
        self._arm_inactivity()

    _idle_since = 0
    _was_waiting = False

    def _arm_pause(self):
        call = self._timers.pop("pause", None)
        if call is not None and call.active():
            call.cancel()
        until = _ns_time(self.config.pause_until)
        now = self.now()
        if until and until > now and not self.closed:
            def resume():
                self._timers.pop("pause", None)
                self.js.consumer_resumed(self)
                self.kick()
            self._timers["pause"] = self.clock.callLater((until - now) / NANOS, resume)

    # -- priority groups: the pin ------------------------------------------------------------

    def _assign_pin(self, wr):
        """A new pin for ``wr`` (a request naming a group): its messages, and
        those of requests naming this pin, carry it until priority_timeout
        passes without such a request or it is unpinned. True if assigned."""
        pg = wr.pg
        if pg is None or not pg.group:
            return False
        self.pin_id = pg.id = nuid()
        self.pinned_ts = self.now()
        self.pin_group = pg.group
        self._arm_pin_timer()
        self._advise("$JS.EVENT.ADVISORY.CONSUMER.PINNED.%s.%s", P.pinned_advisory(
            self.stream.name, self.name, pg.group, self.pin_id))
        return True

    def _unassign_pin(self):
        self.pin_id = ""
        self.pinned_ts = 0
        call = self._timers.pop("pin", None)
        if call is not None and call.active():
            call.cancel()

    def _arm_pin_timer(self):
        """(Re)start the pin's priority_timeout: a request from the pinned
        client restarts it, deliveries do not."""
        call = self._timers.pop("pin", None)
        if call is not None and call.active():
            call.cancel()
        ttl = self.config.priority_timeout
        if ttl > 0 and not self.closed:
            self._timers["pin"] = self.clock.callLater(ttl / NANOS, self._pin_expired)

    def _pin_expired(self):
        self._timers.pop("pin", None)
        if self.closed or not self.pin_id:
            return
        group = self.pin_group
        self._unassign_pin()
        self._advise("$JS.EVENT.ADVISORY.CONSUMER.UNPINNED.%s.%s", P.unpinned_advisory(
            self.stream.name, self.name, group, "timeout"))
        self.kick()

    def unpin(self, group):
        """CONSUMER.UNPIN: the next request without a pin gets a new one (the
        advisory goes out even when nothing was pinned, as nats-server)."""
        self._unassign_pin()

        def advise():
            # After the API reply (nats-server's order), before any new pin.
            if not self.closed:
                self._advise("$JS.EVENT.ADVISORY.CONSUMER.UNPINNED.%s.%s", P.unpinned_advisory(
                    self.stream.name, self.name, group, "admin"))
                self.kick()
        self.clock.callLater(0, advise)

    # -- reset -----------------------------------------------------------------------------------

    def reset(self, seq):
        """nats-server's resetStartingSeq: deliver from ``seq`` again (0: the
        ack floor + 1) as if nothing had been delivered; returns the sequence.
        An explicit sequence needs deliver policy all, by_start_sequence (not
        below opt_start_seq) or by_start_time (not below its first message);
        it is not checked against the stream (below the first or past the last
        sequence is accepted, as nats-server does)."""
        cfg = self.config
        policy = cfg.deliver_policy
        if seq == 0:
            seq = self.asflr + 1
        elif policy == "by_start_sequence":
            if seq < cfg.opt_start_seq:
                raise E.consumer_invalid_reset("below start seq")
        elif policy == "by_start_time":
            if seq < self.stream.seq_for_time(_ns_time(cfg.opt_start_time)):
                raise E.consumer_invalid_reset("below start time")
        elif policy != "all":
            raise E.consumer_invalid_reset("not allowed")
        self.pending.clear()
        self.rdc.clear()
        self.rdq.clear()
        call = self._timers.pop("ack", None)
        if call is not None and call.active():
            call.cancel()
        self.sseq, self.dseq = seq, 1
        self.adflr, self.asflr = 0, seq - 1
        self.ldt = self.lat = 0
        if self.stream.config.retention == "interest":
            self._drop_unneeded_below_floor()
        self.npc = self.compute_pending()
        self.mark_dirty()
        self.kick()
        return seq

    def _drop_unneeded_below_floor(self):
        """Interest retention: what a forward reset skipped may be needed by
        no consumer now (nats-server's checkStateForInterestStream)."""
        store = self.stream.store
        consumers = list(self.stream.consumers.values())
        msg = store.load_next(store.state().first_seq)
        while msg is not None and msg.seq <= self.asflr:
            if not any(c.needs_ack(msg.seq, msg.subject) for c in consumers):
                self.stream.remove(msg.seq, "interest")
            msg = store.load_next(msg.seq + 1)

    def _on_reset(self, sub, subject, reply, hdr_len, raw):
        # An API request: a server's own publish here is none (IBroker.serving_request).
        if reply and self.broker.serving_request():
            consumer_api.consumer_reset(self.js, self, reply, raw[hdr_len:], raw[:hdr_len])

    # -- advisories ----------------------------------------------------------------------------

    def _advise(self, template, event):
        self.js.advise(template % (self.stream.name, self.name), event)

    def _advise_max_deliveries(self, seq, deliveries):
        self._advise("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.%s.%s", {
            "type": "io.nats.jetstream.advisory.v1.max_deliver",
            "stream": self.stream.name, "consumer": self.name,
            "stream_seq": seq, "deliveries": deliveries})



_U64 = 1 << 64
_I64 = 1 << 63


def _nak_delay(arg):
    """The delay (ns) of ``-NAK <arg>`` as nats-server reads it: JSON
    ``{"delay": <int64 ns>}`` (absent or null: 0) or a Go duration; None when
    it does not parse (then it is a plain NAK)."""
    try:
        if arg.startswith(b"{"):
            opts = jsonbound.loads(arg)
            if not isinstance(opts, dict):
                return None
            d = opts.get("delay")
            if d is None:
                return 0
            if type(d) is not int or not -_I64 <= d < _I64:
                return None
            return d
        return parse_duration(arg.decode())
    except (ValueError, UnicodeDecodeError):
        return None


def _ack_num(token):
    """nats-server's parseAckReplyNum as a uint64: ASCII digits (wrapping), else 2**64-1."""
    if not token or not token.isdigit():
        return _U64 - 1
    return int(token) % _U64
