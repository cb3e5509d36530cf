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
"""

import json
import os
import random

from natsbroker.cluster.raft.filestorage import FileStorage
from natsbroker.cluster.raft.node import Node, NotLeader
from natsbroker.cluster.raft.transport import RaftTransport
from natsbroker.cluster.raft.wire import EntryType
from natsbroker.jetstream import errors as E
from natsbroker.jetstream.cluster.entries import (
    EntryError,
    EntryOp,
    MsgDelete,
    StreamMsg,
    StreamPurge,
    decode_entry,
    encode_entry,
    encode_stream_msg,
)

APPLIED_KEY = b"raft.applied"


def group_dir(store_dir, name):
    # nats-server keeps every stream and consumer group's log under the
    # system account's _js_ directory, as the meta group's.
    return os.path.join(store_dir, "$SYS", "_js_", name)


class StreamGroup:
    """The replica of ``stream`` (a natsbroker.jetstream.stream.Stream of
    ``jsa``) in the group ``raft`` (a RaftGroup), run by ``controller``."""

    def __init__(self, controller, jsa, stream, raft, store_dir, pending_reply=None):
        self.controller = controller
        self.jsa = jsa
        self.stream = stream
        self.raft = raft
        self.name = raft.name
        broker = controller.broker
        self.broker = broker
        self.path = group_dir(store_dir, raft.name)
        recovering = os.path.exists(os.path.join(self.path, "CURRENT"))
        os.makedirs(self.path, mode=0o700, exist_ok=True)
        self.storage = FileStorage(self.path)
        self.node = Node(raft.name, controller.id, self.storage, clock=broker.reactor.seconds,
                         rng=random.SystemRandom(), peers=list(raft.peers),
                         cluster_size=len(raft.peers), recovering=recovering)
        self.transport = RaftTransport(self.node, broker.system_account, broker.reactor,
                                       on_commit=self._commit, on_leader=self._leader,
                                       log=self._log)
        self.pending_reply = pending_reply
        self.leader_since = None
        self.failed = None
        raw = stream.store.get_meta(APPLIED_KEY)
        self.applied = int(raw) if raw else 0

    @property
    def is_leader(self):
        node = self.node
        return node.is_leader and node.leader_ready

    @property
    def leader(self):
        return self.node.leader

    def start(self):
        self.transport.start()
        if not self.node.recovering and self.raft.preferred == self.node.id:
            # The placement's first choice campaigns at once (nats-server's
            # createRaftGroup: a new group's preferred peer does).
            self.transport.call(self.node.campaign, immediately=True)

    def stop(self):
        self.transport.stop()
        self.storage.close()

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
            req = json.loads(body)
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

    def _propose(self, data):
        try:
            self.transport.propose(data)
        except NotLeader:
            pass

    def step_down(self, preferred=""):
        self.transport.call(self.node.step_down, preferred=preferred)

    # -- every replica applies ------------------------------------------------------

    def _commit(self, committed):
        if self.failed or committed.index <= self.applied:
            return
        jsa = self.jsa
        leader = self.node.is_leader
        for e in committed.entries:
            if e.type != EntryType.NORMAL:
                continue
            try:
                op, rec = decode_entry(e.data)
            except EntryError as err:
                # An entry this server cannot read: applying the rest would
                # leave this replica different from its peers.
                self.failed = "entry at %d cannot be applied: %s" % (committed.index, err)
                self._log("error", self.failed)
                jsa.stream_offline(self.stream.name, self.failed)
                return
            if op in (EntryOp.STREAM_MSG, EntryOp.COMPRESSED_STREAM_MSG):
                jsa.apply_replicated_msg(self.stream, rec, leader)
            elif op == EntryOp.PURGE_STREAM:
                jsa.apply_replicated_request(
                    self.stream, b"$JS.API.STREAM.PURGE." + self.stream.name.encode(),
                    rec.reply if leader else "", (rec.request or "").encode())
            elif op == EntryOp.DELETE_MSG:
                jsa.apply_replicated_request(
                    self.stream, b"$JS.API.STREAM.MSG.DELETE." + self.stream.name.encode(),
                    rec.reply if leader else "",
                    json.dumps({"seq": rec.seq, "no_erase": rec.no_erase}).encode())
        self.applied = committed.index
        self.stream.store.put_meta(APPLIED_KEY, b"%d" % committed.index)
        jsa.schedule_commit()

    def _leader(self, change):
        jsa = self.jsa
        if change.is_leader:
            self.leader_since = self.broker.reactor.seconds()
            if self.pending_reply:
                jsa.respond_created(self.stream, self.pending_reply)
        else:
            self.leader_since = None
        if change.leader:
            self.pending_reply = None
        # Only the leader takes publishes and answers for the stream.
        jsa.capture(self.stream)

    # -- info -------------------------------------------------------------------

    def cluster_info(self):
        """The ``cluster`` block of the stream's info, as its leader sees it."""
        node = self.node
        ctl = self.controller
        now = self.broker.reactor.seconds()
        out = {"name": self.raft.cluster or self.broker.config.cluster.name,
               "raft_group": self.name, "leader": ctl._name(node.leader) if node.leader else ""}
        replicas = []
        for peer in sorted(node.peers):
            if peer == node.id:
                continue
            p = node.peers[peer]
            r = {"name": ctl._name(peer),
                 "current": bool(node.is_leader and p.li >= node.commit),
                 "active": int((now - p.ts) * 1e9) if p.ts is not None else 0, "peer": peer}
            if node.is_leader and p.li < node.commit:
                r["lag"] = node.commit - p.li
            info = ctl.peers.get(peer)
            if info is not None and info.offline:
                r["offline"] = True
            replicas.append(r)
        if replicas:
            out["replicas"] = replicas
        return out
