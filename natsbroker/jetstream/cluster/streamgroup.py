"""A replicated stream's Raft group (``S-R3F-...``): this server's replica.

nats-server gives every stream of more than one replica an NRG group of its
own, named in its assignment; the group's leader is the stream's leader.
Here, as there:

* only the leader takes the stream's publishes (it alone subscribes to the
  stream's subjects) and proposes each as a stream message entry (op 4,
  ``encodeStreamMsg``); purges and message deletes are proposed as ops 5
  and 6;
* every replica, the leader included, applies what commits, in log order,
  and the leader answers the publisher (the PubAck) only then, after its own
  store has synced the message too (natsbroker's group commit);
* the stream's API requests (INFO, MSG.GET, CONSUMER.*) are the leader's.

The checks of a publish (de-duplication, expected sequences, limits) run
when the entry is applied, on every replica against the same state, so
replicas agree without the leader having to account for what it has in
flight; the publish time in the entry is the clock they use. Two checks
depend on the server rather than the stream, the server's and the
account's storage limits: the leader makes them before it proposes, and
replicas do not repeat them (a replica that decided otherwise would differ).

Each store records the index of the last entry it applied, written in the
same batch as what the entry changed: a restart replays the log after it
and nothing twice.

The log is compacted as nats-server compacts a stream group's: a snapshot
(the stream's state: counts, first and last sequence, deletes; no
messages) once 64Ki entries or 8 MiB were applied since the last one, every
two minutes if anything was, and at shutdown; always after the store has
synced what it covers. A replica that gets a snapshot past what it holds
(it was away while the log was compacted, or its memory stream restarted
empty) catches up as nats-server's do: it asks on the stream's sync
subject (``$JSC.SYNC.<id>``) for the messages it lacks, the leader sends
them to its inbox as stream message entries (deleted runs as op 15) and an
empty message at the end, and only then does it apply what came after the
snapshot.
"""

import json
import os
import random

from natsbroker import jsonbound, nuid as nuids
from natsbroker.cluster.raft.filestorage import FileStorage, move_aside
from natsbroker.cluster.raft.node import Committed, Node, NotLeader
from natsbroker.cluster.raft.storage import MemoryStorage, StorageError
from natsbroker.cluster.raft.transport import RaftTransport
from natsbroker.cluster.raft.wire import EntryType
from natsbroker.gocompat import gojson, times as gotime
from natsbroker.jetstream import consumer_models as CM, errors as E
from natsbroker.jetstream.cluster.entries import (
    FLAG_FROM_SOURCE_OR_MIRROR,
    DeletedSet,
    DeleteRange,
    EntryError,
    EntryOp,
    MsgDelete,
    StreamMsg,
    StreamPurge,
    StreamSnapshot,
    decode_entry,
    decode_stream_snapshot,
    encode_entry,
    encode_stream_msg,
    encode_stream_snapshot,
)
from natsbroker.jetstream.remote_sourcing import RemoteSourcing
from natsbroker.jetstream.sourcing import Sourcing

APPLIED_KEY = b"raft.applied"
# natsbroker's own entry ops, above nats-server's (0-18): a JetStream API
# request every replica runs (a durable consumer's create, update, pause or
# delete) and a durable consumer's state as its leader last wrote it. JSON,
# as nats-server's meta records are.
OP_API_REQUEST = 64
OP_CONSUMER_STATE = 65
# Messages the leader removed by retention (an ack of a work-queue or
# interest stream, nobody interested): the replicas remove them too.
OP_REMOVED = 66
# jetstream_cluster.go monitorStream: compactNumMin, compactSizeMin, compactInterval.
SNAPSHOT_MIN_ENTRIES = 65536
SNAPSHOT_MIN_BYTES = 8 * 1024 * 1024
SNAPSHOT_INTERVAL = 120.0
# Catch-up: messages sent a reactor turn, and the silence after which the
# replica asks again from where it got to.
CATCHUP_BATCH = 256
CATCHUP_STALL = 5.0


class _Catchup:
    def __init__(self, snap, index, inbox):
        self.snap = snap
        self.index = index
        self.inbox = inbox
        self.sub = None
        self.timer = None
        self.queued = []  # what committed after the snapshot, applied once caught up
        self.rest = None  # the snapshot's own commit's later entries (a Committed)


def group_dir(store_dir, name):
    # nats-server keeps every stream and consumer group's log under the
    # system account's _js_ directory, as the meta group's.
    return os.path.join(store_dir, "$SYS", "_js_", name)


class StreamGroup:
    """The replica of ``stream`` (a natsbroker.jetstream.stream.Stream of
    ``jsa``) in the group ``raft`` (a RaftGroup), run by ``controller``."""

    def __init__(self, controller, jsa, stream, raft, store_dir, pending_reply=None, sync="",
                 scale_up=False, lead_with_snapshot=False):
        self.controller = controller
        self.jsa = jsa
        self.stream = stream
        self.raft = raft
        self.name = raft.name
        broker = controller.broker
        self.broker = broker
        self.path = group_dir(store_dir, raft.name)
        self.storage = self.node = self.transport = None  # (start() opens them)
        # A replica added to a running stream: an observer until it has data.
        self.scale_up = scale_up
        # The replica that had the stream alone: once it leads, it proposes a
        # snapshot of it, which the new replicas catch up to.
        self.lead_with_snapshot = lead_with_snapshot
        self.pending_reply = pending_reply
        self.leader_since = None
        self.failed = None
        raw = stream.store.get_meta(APPLIED_KEY)
        self.applied = int(raw) if raw else 0
        self.sync = sync
        self._sync_sub = None
        self.catchup = None
        self.entries_since = 0
        self.bytes_since = 0
        self._check = None
        self.started = broker.reactor.seconds()
        self._recampaigns = []
        self._removed = []
        self._confirms = {}  # consumer name -> ack replies for its next state
        self._confirming = {}  # token -> ack replies, answered when it commits
        self._token = 0
        self.quorum_lost_sent = -1e18
        self.remote = None  # the leader's mirror/source links (RemoteSourcing)
        self._batches = {}  # atomic batch id -> its messages applied so far
        # The leader's copies proposed and not yet applied: (count, bytes),
        # for the limits it checks before it proposes another.
        self._copies = [0, 0]

    @property
    def is_leader(self):
        node = self.node
        return node is not None and node.is_leader and node.leader_ready

    @property
    def leader(self):
        return self.node.leader if self.node is not None else ""

    def _open(self, damaged=False):
        raft, broker = self.raft, self.broker
        if raft.store == "memory":
            # A memory stream's log is in memory too, as nats-server keeps it:
            # a restarted replica rejoins empty and is caught up by the leader
            # (and a cluster restarted whole has the stream, empty).
            recovering = False
            self.storage = MemoryStorage()
        else:
            # A replica whose log was moved aside rejoins empty but as one
            # that had data: its votes count as empty ones (never toward a
            # quorum on their own), so it cannot help elect a leader that
            # lacks what it had acknowledged.
            recovering = damaged or os.path.exists(os.path.join(self.path, "CURRENT"))
            os.makedirs(self.path, mode=0o700, exist_ok=True)
            self.storage = FileStorage(self.path)
        self.node = Node(raft.name, self.controller.id, self.storage, clock=broker.reactor.seconds,
                         rng=random.SystemRandom(), peers=list(raft.peers),
                         cluster_size=len(raft.peers), recovering=recovering,
                         scale_up=self.scale_up and not recovering)
        self.transport = RaftTransport(self.node, broker.system_account, broker.reactor,
                                       on_commit=self._commit, on_leader=self._leader,
                                       log=self._log, on_failure=self._log_failed)

    def _start_transport(self):
        """Open the log and replay it. A damaged log (a record whose checksum
        fails, a database LevelDB cannot open) is not trusted and not
        deleted: it is moved aside, named in the log, and this replica
        rejoins with an empty one, to be caught up by its peers from theirs
        (the stream's own store, checked separately, is kept)."""
        try:
            self._open()
            self.transport.start()
            return
        except StorageError as e:
            why = str(e)
        try:
            self.storage.close()
        except Exception:
            pass
        aside = move_aside(self.path)
        self._log("error", "Raft log damaged (%s): moved to %s, not used; this replica "
                  "rejoins with an empty log and is caught up by its peers" % (why, aside))
        self._open(damaged=True)
        self.transport.start()

    def start(self):
        if self.sync:
            self._sync_sub = self.jsa.broker.subscribe(self.sync.encode(), self._on_sync, hidden=True)
        self._check = self.broker.reactor.callLater(
            SNAPSHOT_INTERVAL + random.random() * 60.0, self._periodic)
        self._start_transport()
        if not self.node.recovering and self.raft.preferred == self.node.id:
            # The placement's first choice campaigns at once (nats-server's
            # createRaftGroup: a new group's preferred peer does). Its peers
            # make their replicas when they learn the assignment committed,
            # which may be after its first vote request went unheard: it asks
            # again soon rather than after a whole election timeout (4-9 s).
            self.transport.call(self.node.campaign, immediately=True)
            for delay in (0.25, 0.75, 2.0):
                self._recampaigns.append(self.broker.reactor.callLater(delay, self._recampaign))

    def _recampaign(self):
        if not self.transport.stopped and not self.node.leader:
            self.transport.call(self.node.campaign, immediately=True)

    def stop(self, snapshot=True):
        """Leave the group; ``snapshot``: compact the log first (a shutdown,
        not a delete)."""
        for call in self._recampaigns:
            if call.active():
                call.cancel()
        if self._check is not None and self._check.active():
            self._check.cancel()
        self._stop_sourcing()
        if self.transport is None:
            return
        if snapshot and not self.transport.stopped:
            self.snapshot()
        self._end_catchup()
        if self._sync_sub is not None:
            self.jsa.broker.unsubscribe(self._sync_sub)
            self._sync_sub = None
        self.transport.stop()
        self.storage.close()

    # -- snapshots ---------------------------------------------------------------

    def snapshot(self):
        """Compact the log through what the stream has applied (and synced)."""
        node = self.node
        if self.failed or self.catchup is not None or self.applied <= node.papplied \
                or self.applied != node.applied:
            return
        self.jsa.commit()  # the store holds it all on disk before the log lets go of it
        self.transport.call(node.install_snapshot, self._state())
        self.entries_since = self.bytes_since = 0

    def _state(self):
        """The stream's state as a snapshot: counts, sequences, deletes."""
        st = self.stream.store.state()
        deleted = self.stream.store.deleted() if st.num_deleted else ()
        return encode_stream_snapshot(StreamSnapshot(
            st.msgs, st.bytes, st.first_seq, st.last_seq, 0, len(deleted),
            [DeletedSet(tuple(deleted))] if deleted else []))

    def _periodic(self):
        self._check = self.broker.reactor.callLater(SNAPSHOT_INTERVAL, self._periodic)
        if self.entries_since:
            self.snapshot()

    def _log(self, level, text):
        self.controller._log(level, "stream '%s > %s' (%s): %s" % (
            self.jsa.account_name, self.stream.name, self.name, text))

    # -- the leader proposes ------------------------------------------------------

    def publish(self, subject, reply, hdr, data):
        """A publish captured by the leader: proposed (refused at once only
        by the checks of the server's own limits)."""
        if not self.is_leader:
            return
        stream = self.stream
        try:
            if stream.guard is not None:
                stream.guard(subject, hdr, data)
        except E.ApiError as e:
            self.jsa.refuse_publish(stream, reply, e)
            return
        m = StreamMsg(subject.decode("utf-8", "surrogateescape") if isinstance(subject, bytes)
                      else subject,
                      reply.decode("latin-1") if reply else "", bytes(hdr or b""), bytes(data),
                      lseq=stream.store.state().last_seq, ts=stream.now())
        self._propose(encode_stream_msg(m))

    def propose_request(self, kind, subject, reply, body):
        """A purge or message delete the leader was asked for: proposed, so
        that every replica applies it (True), or left to the leader to
        answer at once (False: a request that changes nothing, a bad one)."""
        client = self.controller._client(self.jsa)
        reply = reply.decode("latin-1") if reply else ""
        subject = subject.decode("latin-1")
        if kind == "stream_purge_response":
            rec = StreamPurge(client=client, stream=self.stream.name,
                              last_seq=self.stream.store.state().last_seq, subject=subject,
                              reply=reply, request=body.decode("utf-8", "surrogateescape") or None)
            self._propose(encode_entry(EntryOp.PURGE_STREAM, rec))
            return True
        try:
            req = jsonbound.loads(body)
            seq = req.get("seq")
            no_erase = req.get("no_erase", False)
        except (ValueError, AttributeError):
            return False
        if type(seq) is not int or seq <= 0 or type(no_erase) is not bool:
            return False
        rec = MsgDelete(client=client, stream=self.stream.name, seq=seq, no_erase=no_erase,
                        subject=subject, reply=reply)
        self._propose(encode_entry(EntryOp.DELETE_MSG, rec))
        return True

    def propose_api(self, subject, reply, body):
        """An API request that changes what every replica keeps (a durable
        consumer's config): each runs it, the leader answers."""
        self._propose(_nb_entry(OP_API_REQUEST, {
            "subject": subject.decode("latin-1"), "reply": reply.decode("latin-1") if reply else "",
            "body": bytes(body).decode("latin-1")}))

    def _replicate_consumers(self):
        """The durable consumers the stream had before it had replicas: their
        configs and states go to the new replicas through the log."""
        stream = self.stream.name.encode()
        for c in list(self.stream.consumers.values()):
            if c.closed or not c.config.durable_name:
                continue
            body = json.dumps({"stream_name": self.stream.name,
                               "config": CM.consumer_config_json(c.config)}).encode()
            self.propose_api(b"$JS.API.CONSUMER.CREATE.%s.%s" % (stream, c.name.encode()), b"", body)
            self.propose_consumer_state(c.name, c.state_json(),
                                        (c.dseq - 1, c.sseq - 1, c.adflr, c.asflr))

    def note_removed(self, seq):
        """The leader removed ``seq`` by retention; the replicas hear of it
        (one entry a reactor turn)."""
        if not self.is_leader:
            return
        if not self._removed:
            self.broker.reactor.callLater(0, self._flush_removed)
        self._removed.append(seq)

    def _flush_removed(self):
        seqs, self._removed = self._removed, []
        for i in range(0, len(seqs), 10000):
            self._propose(_nb_entry(OP_REMOVED, {"seqs": seqs[i:i + 10000]}))

    def propose_consumer_state(self, name, state, floors):
        """A durable consumer's progress, so that a new leader goes on from
        it (redelivering at most what it had not heard of). The ack
        confirmations waiting for it go out once it is committed."""
        rec = {"name": name, "state": state.decode("latin-1"), "floors": list(floors)}
        waiting = self._confirms.pop(name, None)
        if waiting:
            self._token += 1
            rec["token"] = self._token
            self._confirming[self._token] = waiting
        self._propose(_nb_entry(OP_CONSUMER_STATE, rec))

    def confirm_with_state(self, name, reply):
        """Answer an ack's reply once consumer ``name``'s next state is
        committed: an acknowledged ack is then on a quorum, and a new
        leader's ack floor never goes back past it."""
        self._confirms.setdefault(name, []).append(bytes(reply))

    def _propose(self, data):
        try:
            self.transport.propose(data)
        except NotLeader:
            pass

    def step_down(self, preferred=""):
        self.transport.call(self.node.step_down, preferred=preferred)

    def update_peers(self, raft):
        """The meta leader gave the group new members (createRaftGroup on a
        group already running): taken here at once, and proposed by the
        leader into the group's log so that a member added now replays the
        same membership rather than the one the group began with."""
        self.raft = raft
        peers = list(raft.peers)
        if self.node.is_leader:
            self.transport.call(self.node.propose_known_peers, peers)  # (takes them too)
        else:
            self.transport.call(self.node.update_known_peers, peers)

    # -- every replica applies ------------------------------------------------------

    def _commit(self, committed):
        if self.failed or committed.index <= self.applied:
            return
        if self.catchup is not None:
            self.catchup.queued.append(committed)
            return
        jsa = self.jsa
        leader = self.node.is_leader
        for i, e in enumerate(committed.entries):
            if e.type == EntryType.SNAPSHOT:
                if not self._apply_snapshot(e.data, committed.index):
                    # Catching up: what follows it in this commit waits too.
                    if self.catchup is not None and i + 1 < len(committed.entries):
                        self.catchup.rest = Committed(committed.index,
                                                      tuple(committed.entries[i + 1:]))
                    return
                continue
            if e.type != EntryType.NORMAL:
                continue
            self.entries_since += 1
            self.bytes_since += len(e.data)
            try:
                if e.data and e.data[0] in (OP_API_REQUEST, OP_CONSUMER_STATE, OP_REMOVED):
                    op, rec = e.data[0], _nb_record(e.data)
                else:
                    op, rec = decode_entry(e.data)
            except EntryError as err:
                # An entry this server cannot read: applying the rest would
                # leave this replica different from its peers.
                self.failed = "entry at %d cannot be applied: %s" % (committed.index, err)
                self._log("error", self.failed)
                jsa.stream_offline(self.stream.name, self.failed)
                return
            if op in (EntryOp.STREAM_MSG, EntryOp.COMPRESSED_STREAM_MSG):
                if not rec.subject and rec.reply and not rec.msg \
                        and rec.hdr.startswith(b"NATS/1.0"):
                    # A mirror/source's flow control reply: the copies before
                    # it are on a quorum; the leader answers once they are
                    # synced here too (applyStreamEntries' control message).
                    if leader:
                        reply, hdr = rec.reply.encode("latin-1"), rec.hdr
                        jsa.note_stored(lambda: jsa.broker.publish(reply, b"", headers=hdr))
                    continue
                if rec.sourced and leader and self.remote is not None and self._copies[0]:
                    self._copies[0] -= 1
                    self._copies[1] = max(self._copies[1] - len(rec.subject) - len(rec.hdr)
                                          - len(rec.msg), 0)
                jsa.apply_replicated_msg(self.stream, rec, leader)
            elif op in (EntryOp.BATCH_MSG, EntryOp.BATCH_COMMIT_MSG):
                # An atomic batch: kept until its commit, then applied whole
                # (a batch begun again with sequence 1 drops what was kept).
                msgs = self._batches.get(rec.batch_id)
                if rec.batch_seq == 1 or msgs is None:
                    msgs = self._batches[rec.batch_id] = []
                if rec.batch_seq == len(msgs) + 1:
                    msgs.append(rec.msg)
                else:
                    self._batches.pop(rec.batch_id, None)  # (a gap: never complete)
                    continue
                if rec.commit:
                    del self._batches[rec.batch_id]
                    jsa.apply_replicated_batch(self.stream, rec.batch_id, msgs, leader)
            elif op == EntryOp.DELETE_RANGE:
                # A mirror's gap (origin messages deleted, or filtered out).
                store = self.stream.store
                while not Sourcing.advance(store, rec.first + rec.num, 0):
                    pass
                jsa.note_stored()
            elif op == EntryOp.PURGE_STREAM:
                jsa.apply_replicated_request(
                    self.stream, b"$JS.API.STREAM.PURGE." + self.stream.name.encode(),
                    rec.reply if leader else "", (rec.request or "").encode())
            elif op == EntryOp.DELETE_MSG:
                jsa.apply_replicated_request(
                    self.stream, b"$JS.API.STREAM.MSG.DELETE." + self.stream.name.encode(),
                    rec.reply if leader else "",
                    json.dumps({"seq": rec.seq, "no_erase": rec.no_erase}).encode())
            elif op == OP_API_REQUEST:
                jsa.apply_replicated_request(
                    self.stream, rec["subject"].encode("latin-1"), rec["reply"] if leader else "",
                    rec["body"].encode("latin-1"))
                if not leader:
                    jsa.park_consumers(self.stream)
            elif op == OP_REMOVED:
                # (gone already on the leader that said so: removing is idempotent)
                for seq in rec.get("seqs") or ():
                    if type(seq) is int:
                        self.stream.remove(seq, "ack")
            elif op == OP_CONSUMER_STATE:
                # (only a consumer that is not running here takes it: a new
                # leader catching up on its predecessor's entries does too)
                jsa.apply_consumer_state(self.stream, rec["name"],
                                         rec["state"].encode("latin-1"), rec["floors"])
                for reply in self._confirming.pop(rec.get("token"), ()):
                    jsa.broker.publish(reply, b"")
        self._set_applied(committed.index)
        if self.entries_since >= SNAPSHOT_MIN_ENTRIES or self.bytes_since >= SNAPSHOT_MIN_BYTES:
            self.snapshot()

    def _set_applied(self, index):
        self.applied = index
        self.stream.store.put_meta(APPLIED_KEY, b"%d" % index)
        self.jsa.schedule_commit()

    # -- catching up ---------------------------------------------------------------

    def _log_failed(self, err):
        """The group's log turned out damaged while running: this replica
        stops serving the stream (no publishes taken, no consumers run,
        nothing answered from it); its peers go on without it."""
        self._fail("Raft log damaged: %s" % err)
        self.leader_since = None
        self.jsa.capture(self.stream)
        self.jsa.park_consumers(self.stream)

    def _fail(self, why):
        self.failed = why
        self._log("error", why)
        self.jsa.stream_offline(self.stream.name, why)

    def _apply_snapshot(self, data, index):
        """The stream's state at ``index``: True once this replica matches
        it, False while it catches up to it."""
        try:
            snap = decode_stream_snapshot(data)
        except EntryError as err:
            self._fail("snapshot at %d cannot be read: %s" % (index, err))
            return False
        if self.stream.store.state().last_seq >= snap.last_seq:
            self._reconcile(snap)
            self._set_applied(index)
            return True
        self.catchup = _Catchup(snap, index, "$JSC.R." + nuids.nuid())
        self.catchup.sub = self.jsa.broker.subscribe(self.catchup.inbox.encode(), self._on_catchup,
                                                     hidden=True)
        self._log("info", "catching up to sequence %d from the stream's leader" % snap.last_seq)
        self._ask()
        return False

    def _ask(self):
        cu = self.catchup
        if cu is None:
            return
        if cu.timer is not None and cu.timer.active():
            cu.timer.cancel()
        cu.timer = self.broker.reactor.callLater(CATCHUP_STALL, self._ask)
        first = self.stream.store.state().last_seq + 1
        self.jsa.broker.publish(self.sync.encode(), json.dumps({
            "peer": self.node.id, "first_seq": first,
            "last_seq": cu.snap.last_seq}).encode(), reply=cu.inbox.encode())

    def _on_catchup(self, sub, subject, reply, hdr_len, raw):
        cu = self.catchup
        if cu is None:
            return
        data = bytes(raw[hdr_len:])
        store = self.stream.store
        if not data:
            if store.state().last_seq >= cu.snap.last_seq:
                self._finish_catchup()
            return
        try:
            op, rec = decode_entry(data)
        except EntryError as err:
            self._log("warning", "catch-up message ignored: %s" % err)
            return
        last = store.state().last_seq
        if op in (EntryOp.STREAM_MSG, EntryOp.COMPRESSED_STREAM_MSG):
            if rec.lseq < last:
                return  # had it already (a repeated answer)
            while last < rec.lseq:
                last = store.skip(rec.ts)
            self.stream.store_copy(rec.subject.encode("utf-8", "surrogateescape"), rec.hdr,
                                   rec.msg, rec.ts)
        elif op == EntryOp.DELETE_RANGE:
            end = rec.first + rec.num - 1
            while last < min(end, cu.snap.last_seq):
                last = store.skip(0)
        else:
            return
        self.jsa.note_stored()
        if cu.timer is not None and cu.timer.active():
            cu.timer.reset(CATCHUP_STALL)

    def _finish_catchup(self):
        cu = self.catchup
        self._end_catchup()
        self._reconcile(cu.snap)
        if cu.rest is not None:
            self._commit(cu.rest)  # (applies them, then takes the index as applied)
        else:
            self._set_applied(cu.index)
        self._log("info", "caught up to sequence %d" % cu.snap.last_seq)
        for committed in cu.queued:
            self._commit(committed)

    def _end_catchup(self):
        cu, self.catchup = self.catchup, None
        if cu is None:
            return
        if cu.timer is not None and cu.timer.active():
            cu.timer.cancel()
        if cu.sub is not None:
            self.jsa.broker.unsubscribe(cu.sub)

    def _reconcile(self, snap):
        """Remove what the snapshot says is gone (purged below its first
        sequence, deleted inside it)."""
        stream = self.stream
        st = stream.store.state()
        if snap.first_seq > st.first_seq and st.msgs:
            stream.purge("catchup", seq=snap.first_seq)
        for seq in snap.deleted_seqs():
            if snap.first_seq <= seq <= snap.last_seq:
                stream.remove(seq, "catchup")
        stream.forget_removed()
        self.jsa.note_stored()

    def _on_sync(self, sub, subject, reply, hdr_len, raw):
        """A replica asks the leader for the messages it lacks."""
        if not self.is_leader or not reply:
            return
        try:
            req = jsonbound.loads(bytes(raw[hdr_len:]))
            first, last = int(req["first_seq"]), int(req["last_seq"])
        except (ValueError, KeyError, TypeError):
            return
        reply = bytes(reply)
        self._send_range(reply, max(first, 1), last)

    def _send_range(self, reply, seq, last):
        store = self.stream.store
        publish = self.jsa.broker.publish
        sent = 0
        while seq <= last and sent < CATCHUP_BATCH:
            msg = store.load_next(seq)
            if msg is None or msg.seq > last:
                publish(reply, encode_entry(EntryOp.DELETE_RANGE, DeleteRange(seq, last - seq + 1)))
                seq = last + 1
                break
            if msg.seq > seq:
                publish(reply, encode_entry(EntryOp.DELETE_RANGE, DeleteRange(seq, msg.seq - seq)))
            publish(reply, encode_stream_msg(StreamMsg(
                msg.subject.decode("utf-8", "surrogateescape") if isinstance(msg.subject, bytes)
                else msg.subject, "", msg.hdr or b"", msg.data, lseq=msg.seq - 1, ts=msg.ts)))
            seq = msg.seq + 1
            sent += 1
        if seq > last:
            publish(reply, b"")
        else:
            self.broker.reactor.callLater(0, self._send_range, reply, seq, last)

    def _leader(self, change):
        jsa = self.jsa
        now = self.broker.reactor.seconds()
        if change.is_leader:
            self.leader_since = now
            self.leader_since_ns = gotime.now_ns()
            self._log("info", "new stream leader")
            self._advise("LEADER_ELECTED", "stream_leader_elected",
                         leader=self.controller._name(self.node.id))
            if self.pending_reply:
                jsa.respond_created(self.stream, self.pending_reply)

        else:
            if self.leader_since is not None and not self.node.has_quorum \
                    and now - self.started >= 5.0 and now - self.quorum_lost_sent >= 10.0:
                # Stepped down for want of a quorum: the stream is stalled.
                self.quorum_lost_sent = now
                self._log("warning", "has NO quorum, stalled")
                self._advise("QUORUM_LOST", "stream_quorum_lost")
            self.leader_since = None
        if change.leader:
            self.pending_reply = None
        # Only the leader takes publishes, answers for the stream and runs
        # its consumers.
        jsa.capture(self.stream)
        if change.is_leader:
            jsa.resume_consumers(self.stream)
            self._start_sourcing()
            self.stream.schedules.arm()
            if self.lead_with_snapshot:
                self.lead_with_snapshot = False
                self.transport.call(self.node.send_snapshot, self._state())
                self._replicate_consumers()
        else:
            jsa.park_consumers(self.stream)
            self._stop_sourcing()
            self.stream.schedules.stop()

    # -- mirrors and sources: the leader copies, every replica applies ----------

    def _start_sourcing(self):
        """The leader asks the origins for consumers from where the stream
        stands (everything committed before it led is applied by now)."""
        self._stop_sourcing()
        self._copies = [0, 0]
        cfg = self.stream.config
        if cfg.mirror is None and not cfg.sources:
            return
        self.remote = RemoteSourcing(self.jsa.broker, self.broker.reactor, self.stream, self,
                                     account_name=self.jsa.account_name,
                                     domain=self.jsa.js.domain or "")
        self.remote.start()

    def _stop_sourcing(self):
        if self.remote is not None:
            self.remote.stop()
            self.remote = None

    def sources_changed(self):
        """The stream's config changed (sources added or removed): the
        leader's links start again from the new list."""
        if self.is_leader:
            self._start_sourcing()

    def sourcing_info(self):
        """``(mirror, sources)`` of the stream info, or None when this server
        runs no links for it."""
        return self.remote.info() if self.remote is not None else None

    def copy(self, link, subject, hdr, data, sseq, ts):
        """RemoteSourcing's sink: a copy, proposed. A mirror's keeps the
        origin's sequence (``lseq``, checked on apply) and time. False (ask
        the origin again later) when ``discard: new`` limits would refuse it
        once the copies in flight are applied, as nats-server's leader
        checks before it proposes (processClusteredInboundMsg)."""
        cfg = self.stream.config
        size = len(subject) + len(hdr or b"") + len(data)
        if cfg.discard == "new" and (cfg.max_msgs > 0 or cfg.max_bytes > 0):
            st = self.stream.store.state()
            n, nbytes = self._copies
            if (cfg.max_msgs > 0 and st.msgs + n >= cfg.max_msgs) or (
                    cfg.max_bytes > 0 and st.bytes + nbytes + size > cfg.max_bytes):
                return False
        self._copies[0] += 1
        self._copies[1] += size
        if link.mirror:
            lseq, when = sseq - 1, ts
        else:
            lseq, when = self.stream.store.state().last_seq, self.stream.now()
        self._propose(encode_stream_msg(StreamMsg(
            subject.decode("utf-8", "surrogateescape"), "", hdr, data, lseq=lseq, ts=when,
            flags=FLAG_FROM_SOURCE_OR_MIRROR)))

    def skip(self, link, first, last):
        if last >= first:
            self._propose(encode_entry(EntryOp.DELETE_RANGE, DeleteRange(first, last - first + 1)))

    def propose_batch(self, batch_id, msgs, reply):
        """An atomic batch staged here (its commit arrived): proposed as
        nats-server proposes one, its messages as ops 16 and the last as 17
        (with the publisher's reply), in one turn's append entries."""
        bid = batch_id.decode("utf-8", "surrogateescape") if isinstance(batch_id, bytes) \
            else batch_id
        reply = reply.decode("latin-1") if isinstance(reply, bytes) else (reply or "")
        last_seq, now = self.stream.store.state().last_seq, self.stream.now()
        n = len(msgs)
        for i, (subject, hdr, data) in enumerate(msgs, 1):
            m = StreamMsg(subject.decode("utf-8", "surrogateescape") if isinstance(subject, bytes)
                          else subject, reply if i == n else "", bytes(hdr or b""), bytes(data),
                          lseq=last_seq, ts=now)
            self._propose(encode_stream_msg(m, batch_id=bid, batch_seq=i, commit=i == n))

    def propose_scheduled(self, target, hdr, data):
        """A copy the leader's schedules made (nats-server proposes it as an
        internal message, the publisher's checks skipped)."""
        self._propose(encode_stream_msg(StreamMsg(
            target.decode("utf-8", "surrogateescape") if isinstance(target, bytes) else target,
            "", hdr, data, lseq=self.stream.store.state().last_seq, ts=self.stream.now(),
            flags=FLAG_FROM_SOURCE_OR_MIRROR)))

    def flow_control(self, link, reply, hdr):
        self._propose(encode_stream_msg(StreamMsg("", reply.decode("latin-1"), hdr, b"")))

    # -- info -------------------------------------------------------------------

    def _advise(self, event, kind, **fields):
        """A stream advisory to the stream's account and, naming it, to the
        system account (nats-server's sendStreamLeaderElectAdvisory)."""
        body = {"type": "io.nats.jetstream.advisory.v1." + kind, "stream": self.stream.name}
        body.update(fields)
        body["replicas"] = self._peer_infos(with_self=True)
        domain = self.jsa.js.domain
        if domain:
            body["domain"] = domain
        subject = "$JS.EVENT.ADVISORY.STREAM.%s.%s" % (event, self.stream.name)
        system = self.broker.system_account
        if system is not None and self.jsa.broker is not system:
            self.jsa.advise(subject, dict(body))
        body = dict(body, account=self.jsa.account_name)
        if system is not None:
            sub = subject.encode()
            if system.sublist.has_interest(sub):
                out = {"type": body.pop("type"), "id": nuids.nuid(),
                       "timestamp": gotime.rfc3339(gotime.now_ns())}
                out["account"] = body.pop("account")
                out.update(body)
                system.publish(sub, gojson.go_json_dumps(out).encode())

    def _peer_infos(self, with_self=False):
        node = self.node
        ctl = self.controller
        now = self.broker.reactor.seconds()
        out = []
        for peer in sorted(node.peers):
            if peer == node.id and not with_self:
                continue
            p = node.peers[peer]
            # nats-server's PeerInfo, in its field order.
            r = {"name": ctl._name(peer), "current": peer == node.id or bool(
                node.is_leader and p.li >= node.commit) or (peer == node.leader and p.ts is not None
                                                              and now - p.ts <= 2.0)}
            info = ctl.peers.get(peer)
            if info is not None and info.offline:
                r["offline"] = True
            r["active"] = int((now - p.ts) * 1e9) if p.ts is not None and peer != node.id else 0
            if node.is_leader and peer != node.id and p.li < node.commit:
                r["lag"] = node.commit - p.li
            r["peer"] = peer
            out.append(r)
        return out

    def cluster_info(self):
        """The ``cluster`` block of the stream's info, as its leader sees it."""
        node = self.node
        out = {"name": self.raft.cluster or self.broker.config.cluster.name,
               "raft_group": self.name,
               "leader": self.controller._name(node.leader) if node.leader else ""}
        if self.leader_since is not None:
            out["leader_since"] = gotime.rfc3339(self.leader_since_ns)
        # Its Raft traffic goes over the system account, as nats-server's
        # (it says so since 2.12).
        system = self.broker.system_account
        out["system_account"] = True
        out["traffic_account"] = system.name if system is not None else "$SYS"
        replicas = sorted(self._peer_infos(), key=lambda r: r["name"])
        if replicas:
            out["replicas"] = replicas
        return out

def _nb_entry(op, record):
    return bytes([op]) + json.dumps(record, separators=(",", ":")).encode()


def _nb_record(data):
    try:
        rec = jsonbound.loads(bytes(data[1:]))
    except (ValueError, RecursionError) as e:
        raise EntryError("op %d: %s" % (data[0], e)) from None
    if not isinstance(rec, dict):
        raise EntryError("op %d: not an object" % data[0])
    return rec
