"""JetStream in one account: its streams and consumers, their stores, its
``$JS.API`` subscriptions, publish and group commit (the hot path: compiled,
see setup.py).

The plugin (natsbroker/jetstream/plugin.py) runs one :class:`JetStreamAccount`
per account with JetStream; each is given its account (an IBroker acting in
it) as its broker, so its streams, consumers, API subscriptions and
advisories live in that account's subject space, with its own stores and the
account's limits. The global account's store is ``<store_dir>/jetstream``;
another account's ``<store_dir>/jetstream/accounts/<name>`` (:func:`account_dir`).

Durability: every write of a reactor turn is staged in the store; one
``commit`` (a synced LevelDB write batch per stream) runs at the end of the
turn, and only then are the acks of that turn sent (group commit). Each
account commits its own stores: the sync is per stream anyway, so one commit
across accounts would save no fsync.
"""

import hashlib
import json
import os
import re

from twisted.logger import Logger

from natsbroker.gocompat import gojson, times as gotime
from natsbroker.jetstream import (
    api,
    apilevel,
    batches,
    consumer_models as CM,
    errors as E,
    fastbatch,
    limits as L,
    snapshot,
    stream_config as SC,
    stream_models as SM,
)
from natsbroker.jetstream.consumer import Consumer
from natsbroker.jetstream.remote_sourcing import LocalSink, RemoteSourcing
from natsbroker.jetstream.sourcing import Sourcing
from natsbroker.jetstream.stream import Accepted, Stream, now_ns
from natsbroker.nuid import nuid
from natsbroker.store.leveldb import LevelDBStore
from natsbroker.store.memory import MemoryStore
from natsbroker.store.meta_keys import META_CONFIG, META_CREATED, consumer_key, pinned_meta

log = Logger()

API_PREFIX = b"$JS.API."


GLOBAL_ACCOUNT = "$G"

# Account names are kept as they are in their store directory's name, except
# for what a file name cannot safely hold: anything but letters, digits, "_"
# and "-" is %XX-escaped (so no name is "", "." or ".." or holds "/").
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_MAX_DIR_NAME = 200


def account_dir(root, name):
    """The store directory of account ``name`` under the JetStream ``root``
    (``<store_dir>/jetstream``): ``root`` itself for the global account (where
    its streams always were), else ``root/accounts/<escaped name>``. The global
    account's store keeps only ``streams/``, ``trash/`` and ``quarantine/`` in
    ``root``, so ``accounts/`` collides with nothing."""
    if name == GLOBAL_ACCOUNT:
        return root
    safe = _UNSAFE.sub(lambda m: "".join("%%%02X" % b for b in m.group().encode()), name)
    if len(safe) > _MAX_DIR_NAME:
        # A file name has 255 bytes at most: a long name keeps its start and
        # a digest ("~" never appears in an escaped name).
        safe = safe[:100] + "~" + hashlib.sha256(name.encode()).hexdigest()[:32]
    return os.path.join(root, "accounts", safe)


def dir_account_name(dir_name):
    """The account name of a store directory under ``accounts/`` (None for a
    long name stored as a digest: it cannot be told back)."""
    if "~" in dir_name:
        return None
    try:
        return re.sub(r"(?:%[0-9A-F]{2})+", lambda m: bytes.fromhex(
            m.group().replace("%", "")).decode(), dir_name)
    except (ValueError, UnicodeDecodeError):
        return None


class JetStreamAccount:
    """JetStream in one account: its streams and consumers, its stores, its
    ``$JS.API`` subscriptions and group commit. ``broker`` is the account (an
    IBroker acting in it); ``server`` the plugin, which holds what all accounts
    share (the server's limits, change-feed observers)."""

    def __init__(self, server, account, limits=None, root=None):
        self.server = server
        self.config = server.config
        self.js = self.config.jetstream
        self.broker = account
        self.account_name = getattr(account, "name", GLOBAL_ACCOUNT)
        self.streams = {}
        self.set_limits(limits if limits is not None else L.UNLIMITED)
        self._used_tiers = set()  # tiers that have stored bytes (ACCOUNT.INFO's tiers)
        self.root = root
        self._subs = {}  # stream name -> [Subscription]
        self._api_subs = []
        self._acks = []  # (reply, payload, (store, seq) of a publish or None) waiting for the commit
        self._after_commit = []  # callables run once the commit is done
        self._commit_call = None
        self._dirty_consumers = set()  # consumers whose state the commit writes
        self._lazy_consumers = set()  # ... and those written by the next flush
        self._flush_call = None
        self._kicked = []  # consumers to run after the commit
        self._logged = []  # streams' ConsumerIndex with messages to count after it
        # The observers every stream calls (one list, shared, changed in
        # place): this account's own (mirrors and sources, by bare stream
        # names), then the plugin's -- the global account's streams reach
        # them as they are, another account's through one forwarder that
        # names the account.
        self.prefix = "" if self.account_name == GLOBAL_ACCOUNT else self.account_name + "/"
        self._observers = []
        self._local_observers = []
        self._events = []  # this commit's events, for the plugin's batched observers
        self.observers_changed()
        self.api_total = 0
        self.api_errors = 0
        self.file_store = None
        self.memory_store = None
        self.offline = {}  # stream name -> why it is offline

    def set_limits(self, limits):
        """The account's limits: an AccountJetStream (every stream's), or
        ``{tier: AccountJetStream}``. ``limits`` is what a single server's
        streams (R1) are checked against. A stream keeps the tier it was made
        in (nats-server's ``mset.tier``); its publish guard follows the new
        limits."""
        if not isinstance(limits, dict):
            limits = {"": limits}
        self.tiers = dict(limits)
        self.limits = L.select(self.tiers, 1)[0]
        for stream in self.streams.values():
            stream.guard = L.publish_guard(self, stream)

    # -- lifecycle -----------------------------------------------------------

    def start(self):
        # Durable unless a positive sync_interval asks for lazy syncing.
        sync = self.js.sync_always or self.js.sync_interval <= 0
        self.file_store = LevelDBStore(self.root, sync=sync, pin_meta=pinned_meta)
        self.memory_store = MemoryStore()
        if not sync:
            from twisted.internet.task import LoopingCall
            self._lazy_sync = LoopingCall(self.file_store.sync_all)
            self._lazy_sync.clock = self.broker.reactor
            self._lazy_sync.start(self.js.sync_interval, now=False)
        # Streams whose store could not be opened: known by name, answered
        # with "stream is offline" (10194), listed, deletable, never recreated
        # over their files.
        self.offline = self.file_store.offline
        for name in self.file_store.stream_names():
            try:
                self._load(name, self.file_store)
            except Exception as e:
                # One stream that fails to load never stops the others.
                log.failure("JetStream stream {name} could not be loaded; it is offline",
                            name=self.prefix + name)
                self.streams.pop(name, None)
                self.offline[name] = "could not be loaded: %s" % (e,)
        for name, why in sorted(self.offline.items()):
            self.stream_offline(name, why)
        snapshot.cleanup_orphans(self)
        self.sourcing = Sourcing(self, remote=self._remote_sourcing)  # mirrors and sources
        self.sourcing.start()
        for p in self._api_prefixes():
            self._api_subs.append(self.broker.subscribe(p + b">", self._on_api))

    def stop(self):
        snapshot.stop(self)
        self.sourcing.stop()
        if self._flush_call is not None and self._flush_call.active():
            self._flush_call.cancel()
        self._flush_call = None
        self._dirty_consumers |= self._lazy_consumers
        self._lazy_consumers = set()
        self.commit()
        for sub in self._api_subs:
            self.broker.unsubscribe(sub)
        for stream in self.streams.values():
            for c in stream.consumers.values():
                c.stop()
            stream.stop()
        for subs in self._subs.values():
            for sub in subs:
                self.broker.unsubscribe(sub)
        if getattr(self, "_lazy_sync", None) is not None and self._lazy_sync.running:
            self._lazy_sync.stop()
        self.file_store.close()
        self.memory_store.close()

    def _api_prefixes(self):
        """``$JS.API.``, and ``$JS.<domain>.API.`` when a domain is set."""
        if self.js.domain:
            return [API_PREFIX, b"$JS.%s.API." % self.js.domain.encode()]
        return [API_PREFIX]

    def observers_changed(self):
        """This account's or the plugin's observers changed."""
        observers = list(self._local_observers)
        if self.server._observers:
            if self.prefix:
                observers.append(self._forward)
            else:
                observers.extend(self.server._observers)
        if self.server._batch_observers:
            observers.append(self._collect)
        self._observers[:] = observers

    def add_stream_observer(self, observer):
        """Watch this account's streams (events name them without the account)."""
        self._local_observers.append(observer)
        self.observers_changed()

    def remove_stream_observer(self, observer):
        if observer in self._local_observers:
            self._local_observers.remove(observer)
        self.observers_changed()

    def _collect(self, event):
        """A stream's event for the batched observers: delivered by the commit."""
        events = self._events
        if not events and self._commit_call is None:
            self.schedule_commit()
        events.append(event)

    def _deliver_events(self):
        events, self._events = self._events, []
        if self.prefix:
            prefix = self.prefix
            events = [e._replace(stream=prefix + e.stream) for e in events]
        for observer in self.server._batch_observers:
            observer(events)

    def _forward(self, event):
        event = event._replace(stream=self.prefix + event.stream)
        for observer in self.server._observers:
            observer(event)

    def _load(self, name, store):
        ss = store.stream(name)
        raw = ss.get_meta(META_CONFIG)
        if raw is None:
            log.warn("stream {name} has no config; skipped", name=name)
            return
        cfg = SC.fill_defaults(SC.parse_stream_config(raw, name))
        created = int(ss.get_meta(META_CREATED) or b"0")
        stream = Stream(cfg, ss, created, self.broker.reactor)
        self._add(stream)
        stream.recover()
        if not self._awaits_group(stream):
            # (a replicated stream's consumers start when it leads)
            self._load_consumers(stream)

    def _awaits_group(self, stream):
        """A replicated stream in a cluster before its Raft group is back
        (the meta group attaches it once it knows the assignment): it takes
        no publishes and answers nothing meanwhile, as a follower."""
        return stream.group is None and stream.config.num_replicas > 1 \
            and self.server.cluster is not None

    def _add(self, stream):
        # The tier its usage counts in, chosen when it is made or recovered.
        stream.tier = L.select(self.tiers, stream.config.num_replicas)[1]
        stream.observers = self._observers
        stream.on_change = self.schedule_commit
        stream.publish = self.broker.publish
        stream.guard = L.publish_guard(self, stream)
        self.streams[stream.name] = stream
        self._capture(stream)
        stream.schedule_expiry()

    def capture(self, stream):
        """(Re)subscribe what feeds ``stream``: its subjects and direct gets;
        for a replicated stream only while this server leads it (see
        natsbroker.jetstream.cluster.streamgroup)."""
        self._capture(stream)

    def _capture(self, stream):
        for sub in self._subs.pop(stream.name, ()):
            self.broker.unsubscribe(sub)
        group = stream.group
        if (group is not None and not group.is_leader) or self._awaits_group(stream):
            return
        cb = self._capture_cb(stream)
        subs = [self.broker.subscribe(s.encode(), cb) for s in stream.config.subjects or ()]
        if stream.config.allow_direct:
            # Like nats-server, direct gets are answered only when allowed.
            def direct(sub, subject, reply, hdr_len, raw):
                local = api.local_subject(subject, self.js.domain)
                api.direct_get(self, stream, local, reply, raw[hdr_len:], raw[:hdr_len])
            for prefix in self._api_prefixes():
                base = prefix + b"DIRECT.GET." + stream.name.encode()
                subs.append(self.broker.subscribe(base, direct))
                subs.append(self.broker.subscribe(base + b".>", direct))
        self._subs[stream.name] = subs

    def _capture_cb(self, stream):
        def on_msg(sub, subject, reply, hdr_len, raw):
            self.publish(stream, subject, reply, raw[:hdr_len], raw[hdr_len:])
        return on_msg

    # -- publish & group commit ------------------------------------------------

    _stored = False
    _batches = None
    _async_sync_call = None

    def publish(self, stream, subject, reply, hdr, data):
        if stream.group is not None:
            self._publish_replicated(stream, subject, reply, hdr, data)
            return
        if stream.config.persist_mode == "async":
            # Acked without waiting for the disk (nats-server's async persist
            # mode); synced within the sync interval (see _async_written).
            self._async_written()
        else:
            self._stored = True
        try:
            failing = getattr(stream.store, "write_error", None)
            if failing is not None:
                # The store cannot write (disk full, I/O error): refused
                # before anything is staged, as nats-server answers a failed store.
                raise E.stream_store_failed(failing)
            if reply and reply[-4:] == fastbatch.SUFFIX and len(reply) > 4:
                self.fastbatches.publish(stream, subject, reply, hdr, data)
                return
            if hdr and batches.H_BATCH_ID in hdr and self.batches.publish(
                    stream, subject, reply, hdr, data):
                return
            res = stream.accept(subject, hdr, data)
        except E.ApiError as e:
            if reply:
                self._acks.append((reply, api.pub_ack_error(stream.name, e), None))
                self.schedule_commit()
            return
        seq, dup = res
        if reply:
            if res.__class__ is Accepted:
                payload = api.pub_ack(stream.name, seq, dup, self.js.domain, val=res.val)
            else:
                payload = api.pub_ack(stream.name, seq, dup, self.js.domain)
            self._acks.append((reply, payload, None if dup else (stream, seq)))
        self.schedule_commit()

    def _publish_replicated(self, stream, subject, reply, hdr, data):
        if reply and reply[-4:] == fastbatch.SUFFIX and len(reply) > 4:
            self.refuse_publish(stream, reply, E.ApiError(
                400, 10174, "fast batch publish is not supported by natsbroker's cluster yet"))
            return
        if hdr and batches.H_BATCH_ID in hdr and self.batches.publish(
                stream, subject, reply, hdr, data):
            return  # (staged here; its commit proposes the batch: Batches._commit)
        stream.group.publish(subject, reply, hdr, data)

    def refuse_publish(self, stream, reply, err):
        """A publish refused before it was stored: its error goes out with
        this turn's acks."""
        if reply:
            self._acks.append((reply, api.pub_ack_error(stream.name, err), None))
            self.schedule_commit()

    def apply_replicated_msg(self, stream, m, leader):
        """A committed stream message entry (``m``: entries.StreamMsg):
        stored as a publish is, with every check made against this
        replica's state at the entry's time; the leader acks it once the
        commit has synced it here."""
        reply = m.reply.encode("latin-1") if leader and m.reply else None
        self._stored = True
        ts = m.ts
        mirror = m.sourced and stream.config.mirror is not None
        if mirror:
            # A mirror keeps the origin's sequences: the entry's lseq is the
            # one before it (a copy had already is dropped, a gap skipped).
            if m.lseq < stream.store.state().last_seq:
                return
            while not Sourcing.advance(stream.store, m.lseq + 1, ts):
                pass
        with _applying(stream, ts):
            # (an internal copy with Nats-Scheduler in a stream that sources
            # nothing is its leader's schedule firing: schedules.fire)
            scheduled = (m.sourced and not mirror and not stream.config.sources
                         and b"Nats-Scheduler" in m.hdr)
            try:
                res = stream.accept(m.subject.encode("utf-8", "surrogateescape"), m.hdr, m.msg,
                                    ts=ts, sourced="mirror" if mirror else None if scheduled
                                    else "source" if m.sourced else None, scheduled=scheduled)
            except E.ApiError as e:
                if reply:
                    self._acks.append((reply, api.pub_ack_error(stream.name, e), None))
                return
        if leader and stream.config.retention == "interest" and not res[1]:
            # Stored everywhere; the leader, whose consumers run, takes out
            # what none of them wants, and tells the replicas.
            msg = stream.store.load(res[0])
            if msg is not None and not stream.has_interest(msg.subject):
                stream.remove(res[0], "interest")
                stream.group.note_removed(res[0])
        if reply:
            seq, dup = res
            val = res.val if res.__class__ is Accepted else None
            self._acks.append((reply, api.pub_ack(stream.name, seq, dup, self.js.domain, val=val),
                               None if dup else (stream, seq)))

    def _remote_sourcing(self, stream):
        """Copying through origin consumers into ``stream`` stored here (a
        stream of one replica in a cluster)."""
        rs = RemoteSourcing(self.broker, self.broker.reactor, stream, LocalSink(self, stream),
                            account_name=self.account_name, domain=self.js.domain or "")
        rs.start()
        return rs

    def apply_replicated_batch(self, stream, batch_id, msgs, leader):
        """A committed atomic batch (``msgs``: its entries.StreamMsg, the
        last one carrying the publisher's reply): every message checked
        against the stream and the batch before it, then all stored, or
        none; the leader answers once the commit has synced them here."""
        last = msgs[-1]
        reply = last.reply.encode("latin-1") if leader and last.reply else None
        self._stored = True
        with _applying(stream, last.ts):
            try:
                prepared = batches.prepare_all(stream, [
                    (m.subject.encode("utf-8", "surrogateescape"), m.hdr, m.msg) for m in msgs])
            except E.ApiError as e:
                if reply:
                    self._acks.append((reply, api.pub_ack_error(stream.name, e), None))
                return
            seq = 0
            for m, p in zip(msgs, prepared):
                seq = stream.store_prepared(p, ts=m.ts)[0]
        if reply:
            self._acks.append((reply, api.pub_ack(
                stream.name, seq, False, self.js.domain,
                batch=batch_id.decode("utf-8", "replace") if isinstance(batch_id, bytes)
                else batch_id, count=len(prepared)), (stream, seq)))

    def apply_replicated_request(self, stream, subject, reply, body):
        """A committed purge or message delete: run here as the API runs it;
        the leader's run answers the requester."""
        self._stored = True
        api.handle(self, subject, reply.encode("latin-1") if reply else None, body)

    def park_consumers(self, stream):
        """A replica that does not lead ``stream``: its durable consumers
        stay (closed: no subscriptions, no deliveries, their records kept
        for when it leads); the others were the old leader's alone."""
        for name, c in list(stream.consumers.items()):
            if c.closed:
                continue
            if c.config.durable_name:
                c.stop()
                self._dirty_consumers.discard(c)
                self._lazy_consumers.discard(c)
            else:
                self.delete_consumer(stream, c)

    def resume_consumers(self, stream):
        """This server leads ``stream`` now: its consumers run from the state
        the group last replicated."""
        for name in [n for n, c in stream.consumers.items() if c.closed]:
            del stream.consumers[name]
        self._load_consumers(stream, skip=set(stream.consumers), restart=False)

    def apply_consumer_state(self, stream, name, state, floors):
        """A durable consumer's state from the stream's leader."""
        c = stream.consumers.get(name)
        if c is not None and not c.closed:
            return  # running here: this server leads, its own state is newer
        if stream.store.get_meta(consumer_key(name, b"config")) is None:
            return  # (deleted meanwhile)
        stream.store.put_meta(consumer_key(name, b"state"), state)
        stream.store.set_floor(name.encode(), tuple(floors))
        self.schedule_commit()

    def respond_created(self, stream, reply):
        """The answer to a replicated stream's create, from its first leader."""
        self.reply_after_commit(reply.encode("latin-1"), gojson.go_json_dumps(
            api.stream_created(self, stream)).encode())

    _fastbatches = None

    @property
    def fastbatches(self):
        """The fast batches in flight (natsbroker.jetstream.fastbatch)."""
        if self._fastbatches is None:
            self._fastbatches = fastbatch.FastBatches(self)
        return self._fastbatches

    @property
    def batches(self):
        """The atomic batches being staged (natsbroker.jetstream.batches)."""
        if self._batches is None:
            self._batches = batches.Batches(self)
        return self._batches

    def _async_written(self):
        """An async-persist stream took a write nobody waits for: make sure a
        sync follows within the sync interval (nats-server's default: 2 min)."""
        if self._async_sync_call is None and self.file_store.sync:
            interval = self.js.sync_interval if self.js.sync_interval > 0 else 120.0
            self._async_sync_call = self.broker.reactor.callLater(interval, self._sync_async)

    def _sync_async(self):
        self._async_sync_call = None
        if getattr(self.file_store, "_closed", False):
            return
        self.commit()
        self.file_store.sync_all()

    def schedule_commit(self):
        if self._commit_call is None:
            self._commit_call = self.broker.reactor.callLater(0, self.commit)

    def commit(self):
        """Sync this turn's writes (consumer state included), then send the
        acks that waited for them, then let consumers deliver what is now durable."""
        self._commit_call = None
        if self._dirty_consumers:
            dirty, self._dirty_consumers = self._dirty_consumers, set()
            for c in dirty:
                c.dirty = False
                if not c.closed:
                    ss = c.stream.store
                    state = c.state_json()
                    floors = (c.dseq - 1, c.sseq - 1, c.adflr, c.asflr)
                    ss.put_meta(consumer_key(c.name, b"state"), state)
                    ss.set_floor(c.name.encode(), floors)
                    group = c.stream.group
                    if group is not None and c.config.durable_name and group.is_leader:
                        group.propose_consumer_state(c.name, state, floors)
        # Sync when something waits on it (acks, API replies) or messages were
        # stored (consumers deliver only what is on disk); consumer progress
        # alone, and async-persist streams' writes, go without waiting for the disk.
        self.file_store.commit(sync=self._stored)
        self._stored = False
        failed = self.file_store.failed
        if failed:
            self._give_up(failed)
        if self._events:
            self._deliver_events()
        if self._after_commit:
            after, self._after_commit = self._after_commit, []
            for fn in after:
                fn()
        acks, self._acks = self._acks, []
        kicked, self._kicked = self._kicked, []
        if acks or kicked:
            publish = self.broker.publish
            # One batch: the acks are written out now, not on yet another turn.
            self.broker.begin()
            try:
                for reply, payload, _ in acks:
                    publish(reply, payload)
                for c in kicked:
                    c.run()
            finally:
                self.broker.end()
        if self._logged:
            # Consumers count the turn's messages in bulk, once (see consumer_index).
            logged, self._logged = self._logged, []
            for index in logged:
                index.trim()

    def note_stored(self, after=None):
        """Messages were staged outside a publish (mirror/source copies): commit,
        synced; ``after`` is called once that commit is done."""
        self._stored = True
        if after is not None:
            self._after_commit.append(after)
        self.schedule_commit()


    def reply_after_commit(self, reply, payload):
        """An API answer that depends on staged writes goes out after the commit."""
        self._stored = True
        if reply:
            self._acks.append((reply, payload, None))
        self.schedule_commit()

    def _give_up(self, failed):
        """The commit could not write some streams (see LevelDBStream._write_failed):
        their new messages are not stored, so their publishers get the store's
        error instead of an ack, and their message ids leave the de-duplication
        window (a retry is a new message)."""
        by_store = {}
        for st, (seqs, why) in failed.items():
            by_store[st] = (set(seqs), why)
        for stream in self.streams.values():
            hit = by_store.get(stream.store)
            if hit is not None:
                stream.forget(hit[0])
        acks = self._acks
        for i, (reply, payload, pub) in enumerate(acks):
            if pub is not None:
                stream, seq = pub
                hit = by_store.get(stream.store)
                if hit is not None and seq in hit[0]:
                    acks[i] = (reply, api.pub_ack_error(stream.name, E.stream_store_failed(
                        hit[1])), None)

    # -- API ---------------------------------------------------------------------

    def _elsewhere(self, stream):
        """Is ``stream`` (None: not here) served by another server?"""
        if stream is None:
            return self.server.cluster is not None
        group = stream.group
        return (group is not None and not group.is_leader) or self._awaits_group(stream)

    def _on_api(self, sub, subject, reply, hdr_len, raw):
        if not self.broker.serving_request():
            # A response or delivery the server itself published here (a
            # client named this subject as its reply or deliver subject) is
            # no request: served, it would act with the server's authority.
            # nats-server's API ignores a message without a client's identity.
            return
        # Dispatched by exact subject structure, as nats-server's own API
        # subscriptions do: a pull request or direct get spliced into another
        # API subject ($JS.API.STREAM.INFO.API.CONSUMER.MSG.NEXT.S.C) is
        # nothing, so a permission or import that allows only that other
        # subject allows nothing more.
        local = api.local_subject(subject, self.js.domain)
        if local is None:
            self.no_responders(subject, reply)  # an unmapped domain subject
            return
        if local.startswith(api.DIRECT_GET_PREFIX):
            # Answered by the stream's own direct-get subscription; without
            # one (allow_direct off, no such stream) nats-server has no
            # subscriber there: the requester gets "no responders".
            name = api.direct_get_target(local)
            stream = self.streams.get(name) if name is not None else None
            if self._elsewhere(stream):
                return  # another server's stream (or its replica's leader's)
            if stream is None or not stream.config.allow_direct:
                self.no_responders(local, reply)
            return
        if local.startswith(api.MSG_NEXT_PREFIX):
            # A consumer's own request subject: not an API call in nats-server's
            # counts, and unanswered when the consumer does not exist.
            target = api.pull_target(local)
            stream = self.streams.get(target[0]) if target else None
            c = stream.consumers.get(target[1]) if stream else None
            if self._elsewhere(stream):
                return  # another server's stream (or its replica's leader's)
            if c is None:
                self.no_responders(local, reply)
            elif hdr_len and reply and apilevel.refused(raw[:hdr_len]):
                c.send_status(reply, apilevel.STATUS_412)
            else:
                c.next_request(reply, raw[hdr_len:])
            return
        cluster = self.server.cluster
        if cluster is not None and not cluster.accept(self, local, reply, raw[hdr_len:], raw[:hdr_len]):
            return  # another server's to answer (or answered as the meta leader)
        api.handle(self, local, reply, raw[hdr_len:], raw[:hdr_len])

    def no_responders(self, subject, reply):
        """What a requester gets when nothing serves ``subject`` (a missing
        consumer's MSG.NEXT has no subscriber in nats-server): a 503 status,
        if its connection asked for no-responders replies."""
        source = self.broker.route_source
        if reply and source is not None and getattr(source, "no_responders", False):
            self.broker.deliver(reply, reply, b"", None,
                                b"NATS/1.0 503\r\nNats-Subject: %s\r\n\r\n" % subject)

    # -- advisories ----------------------------------------------------------------

    def advise(self, subject, event):
        """Publish an advisory (only when someone listens: they are JSON to build)."""
        subject = subject.encode() if isinstance(subject, str) else subject
        if not self.broker.sublist.has_interest(subject):
            return
        body = {"type": event.pop("type"), "id": nuid(),
                "timestamp": gotime.rfc3339(now_ns())}
        body.update(event)
        self.broker.publish(subject, gojson.go_json_dumps(body).encode())

    def stream_offline(self, name, why):
        """Advisory: a stream is offline (its store failed to open or load)."""
        self.advise("$JS.EVENT.ADVISORY.STREAM.OFFLINE.%s" % name,
                    {"type": "io.nats.jetstream.advisory.v1.stream_offline", "stream": name,
                     "reason": why})

    def stream_action(self, name, action):
        self.advise("$JS.EVENT.ADVISORY.STREAM.%s.%s" % (
            {"create": "CREATED", "modify": "UPDATED", "delete": "DELETED"}[action], name),
            {"type": "io.nats.jetstream.advisory.v1.stream_action", "stream": name,
             "action": action})

    def audit(self, client, subject, request, response):
        if not self.broker.sublist.has_interest(b"$JS.EVENT.ADVISORY.API"):
            return
        info = {}
        if client is not None:
            info = {"start": gotime.rfc3339(int(client.start * 1e9)), "host": client.host,
                    "id": client.cid, "acc": self.account_name, "lang": client.opts.lang,
                    "ver": client.opts.version, "rtt": int(client.rtt * 1e9),
                    "server": self.broker.server_name, "kind": "Client",
                    "client_type": "nats"}
            if client.user:
                info["user"] = client.user
            info = {k: v for k, v in info.items() if v not in ("", None)}
        event = {"type": "io.nats.jetstream.advisory.v1.api_audit",
                 "server": self.broker.server_name, "client": info,
                 "subject": subject.decode(errors="replace")}
        if request:
            event["request"] = request.decode(errors="replace")
        event["response"] = response.decode(errors="replace")
        self.advise("$JS.EVENT.ADVISORY.API", event)

    def respond(self, reply, value):
        if reply:
            self.broker.publish(reply, gojson.go_json_dumps(value).encode())

    # -- streams -------------------------------------------------------------------

    def store_for(self, cfg):
        return self.memory_store if cfg.storage == "memory" else self.file_store

    def create_stream(self, cfg):
        snapshot.release_name(self, cfg.name)
        store = self.store_for(cfg)
        ss = store.create_stream(cfg.name)
        if cfg.first_seq > 1:
            # nats-server starts the stream there: empty, last_seq first_seq - 1.
            ss.purge(seq=cfg.first_seq)
        created = now_ns()
        ss.put_meta(META_CONFIG, json.dumps(SM.stream_config_json(cfg)).encode())
        ss.put_meta(META_CREATED, str(created).encode())
        stream = Stream(cfg, ss, created, self.broker.reactor)
        self._add(stream)
        stream.emit("stream_create", 0, created, config=SM.stream_config_json(cfg))
        self.sourcing.stream_added(stream)
        return stream

    # -- consumers -----------------------------------------------------------------

    def add_consumer(self, stream, name, cfg, created=None, state=None, persist=True):
        c = Consumer(self, stream, name, cfg, created or now_ns())
        stream.consumers[name] = c
        if persist:
            self.save_consumer_config(c)
            stream.store.put_meta(consumer_key(name, b"created"), str(c.created).encode())
        c.start(state)
        self.consumer_dirty(c, urgent=True)
        return c

    def save_consumer_config(self, c):
        c.stream.store.put_meta(consumer_key(c.name, b"config"),
                                json.dumps(CM.consumer_config_json(c.config)).encode())

    def delete_consumer(self, stream, c, reason=None):
        c.stop(delete=True)
        if stream.consumers.get(c.name) is c:
            del stream.consumers[c.name]
        for part in (b"config", b"state", b"created"):
            stream.store.del_meta(consumer_key(c.name, part))
        stream.store.del_floor(c.name.encode())
        self._dirty_consumers.discard(c)
        self._lazy_consumers.discard(c)
        group = stream.group
        if stream.config.retention == "interest" and (group is None or group.is_leader):
            # Messages only this consumer still needed go with it (a
            # replicated stream's leader decides, and tells the replicas).
            st = stream.store.state()
            msg = stream.store.load_next(max(c.asflr + 1, st.first_seq))
            while msg is not None:
                if not any(o.needs_ack(msg.seq, msg.subject) for o in stream.consumers.values()):
                    stream.remove(msg.seq, "interest")
                    if group is not None:
                        group.note_removed(msg.seq)
                msg = stream.store.load_next(msg.seq + 1)
        self.advise("$JS.EVENT.ADVISORY.CONSUMER.DELETED.%s.%s" % (stream.name, c.name),
                    {"type": "io.nats.jetstream.advisory.v1.consumer_action",
                     "stream": stream.name, "consumer": c.name, "action": "delete"})
        self.schedule_commit()

    # Consumer progress nobody waits on is written at most this late (seconds):
    # a crash may then redeliver up to that much, never lose a message.
    STATE_FLUSH = 0.1

    def consumer_dirty(self, c, urgent=False):
        if urgent:
            self._lazy_consumers.discard(c)
            self._dirty_consumers.add(c)
            self.schedule_commit()
            return
        if c not in self._dirty_consumers:
            self._lazy_consumers.add(c)
            if self._flush_call is None:
                self._flush_call = self.broker.reactor.callLater(self.STATE_FLUSH,
                                                                 self._flush_consumers)

    def _flush_consumers(self):
        self._flush_call = None
        self._dirty_consumers |= self._lazy_consumers
        self._lazy_consumers = set()
        self.commit()

    def consumer_kicked(self, c):
        self._kicked.append(c)
        self.schedule_commit()

    def consumer_index_logged(self, index):
        """A stream logged new messages for its consumers: they count them
        after the commit (each store is followed by one)."""
        self._logged.append(index)

    def consumer_resumed(self, c):
        self.advise("$JS.EVENT.ADVISORY.CONSUMER.PAUSE.%s.%s" % (c.stream.name, c.name),
                    {"type": "io.nats.jetstream.advisory.v1.consumer_pause",
                     "stream": c.stream.name, "consumer": c.name, "paused": False,
                     "pause_until": gotime.rfc3339(gotime.go_parse_rfc3339(c.config.pause_until)[0],
                                                   zero_is_unset=False)
                     if c.config.pause_until else gotime.ZERO_TIME})

    def ack_msg(self, stream, consumer, seq):
        """A consumer is done with ``seq``: workqueue streams drop it now,
        interest streams once no other consumer needs it."""
        retention = stream.config.retention
        if retention == "workqueue":
            removed = stream.remove(seq, "ack")
        elif retention == "interest":
            msg = stream.store.load(seq)
            if msg is None:
                return
            for c in stream.consumers.values():
                if c is not consumer and c.needs_ack(seq, msg.subject):
                    return
            removed = stream.remove(seq, "ack")
        else:
            return
        group = stream.group
        if removed is not False and group is not None and group.is_leader:
            group.note_removed(seq)  # the replicas remove it too

    def _load_consumers(self, stream, skip=(), restart=True):
        ss = stream.store
        for key in ss.meta_keys(b"c."):
            if not key.endswith(b".config"):
                continue
            name = key[2:-7].decode()
            if name in skip:
                continue
            try:
                cfg = CM.consumer_config_from_json(json.loads(ss.get_meta(key)))
            except Exception as e:  # a damaged record must not stop the server
                log.warn("consumer {s} > {c}: bad config ({e}); skipped",
                         s=stream.name, c=name, e=e)
                continue
            if cfg.mem_storage and restart:
                # nats-server keeps a mem_storage consumer (durable or not) in
                # memory only: a restart forgets it, so its records go too.
                for part in (b"config", b"state", b"created"):
                    ss.del_meta(consumer_key(name, part))
                ss.del_floor(name.encode())
                continue
            created = int(ss.get_meta(consumer_key(name, b"created")) or b"0")
            state = ss.get_meta(consumer_key(name, b"state"))
            self.add_consumer(stream, name, cfg, created, state, persist=False)

    def update_stream(self, stream, cfg):
        stream.config = cfg
        stream.store.put_meta(META_CONFIG, json.dumps(SM.stream_config_json(cfg)).encode())
        self._capture(stream)
        stream.emit("stream_update", stream.store.state().last_seq, now_ns(),
                    config=SM.stream_config_json(cfg))
        stream.enforce_limits()
        stream.schedule_expiry()
        self.sourcing.stream_updated(stream)

    def delete_stream(self, stream):
        for c in list(stream.consumers.values()):
            c.stop(delete=True)
            self._dirty_consumers.discard(c)
            self._lazy_consumers.discard(c)
        stream.consumers.clear()
        stream.stop()
        stream.emit("stream_delete", stream.store.state().last_seq, now_ns())
        for sub in self._subs.pop(stream.name, ()):
            self.broker.unsubscribe(sub)
        del self.streams[stream.name]
        self.sourcing.stream_removed(stream)
        return self.store_for(stream.config).delete_stream(stream.name)

    # -- usage -------------------------------------------------------------------

    def usage(self):
        """Bytes stored, (memory, file)."""
        mem = sto = 0
        for s in self.streams.values():
            b = s.store.stored_bytes
            if s.config.storage == "memory":
                mem += b
            else:
                sto += b
        return mem, sto

    def used_bytes(self, storage):
        """Bytes stored in ``storage`` ("memory" or "file") streams."""
        return sum(s.store.stored_bytes for s in self.streams.values()
                   if s.config.storage == storage)

    def reserved(self):
        """Bytes set aside by streams' max_bytes, (memory, file): what new
        streams are checked against, as nats-server does."""
        return self.reservation("memory"), self.reservation("file")

    def reservation(self, storage, exclude=None):
        """The ``max_bytes`` of the ``storage`` streams (but ``exclude``):
        nats-server's ``tieredReservation``."""
        return sum(s.config.max_bytes for s in self.streams.values()
                   if s.config.max_bytes > 0 and s.config.storage == storage
                   and s.name != exclude)

    def stream_count(self):
        return len(self.streams)

    def consumer_count(self):
        return sum(len(s.consumers) for s in self.streams.values())


class _applying:
    """A committed entry applied to a replica: the stream's clock reads the
    entry's time, the leader-only guard (server and account limits) is off,
    and the stream knows it is applying (interest is the leader's to judge).
    (A class, not a generator: every replicated publish goes through it.)"""

    __slots__ = ("stream", "ts", "saved")

    def __init__(self, stream, ts):
        self.stream, self.ts = stream, ts

    def __enter__(self):
        stream, ts = self.stream, self.ts
        self.saved = (stream.now, stream.guard)
        stream.now = lambda: ts
        stream.guard = None
        stream.replicated_apply = True

    def __exit__(self, *exc):
        stream = self.stream
        stream.now, stream.guard = self.saved
        stream.replicated_apply = False
