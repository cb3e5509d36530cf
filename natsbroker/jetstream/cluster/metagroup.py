"""This server's member of the JetStream meta group (``_meta_``).

Runs an NRG node (natsbroker.cluster.raft) in the system account with its
log in ``<store>/$SYS/_js_/_meta_`` (the layout nats-server uses under its
JetStream store directory), applies what commits to a :class:`.MetaState`,
and snapshots that state once enough has been applied, as nats-server's
meta group does (jetstream_cluster.go ``monitorCluster``: a snapshot when
the log holds many entries or much data, checked every minute and on
leadership changes; never while catching up).

A first start bootstraps the group as nats-server's ``bootstrapRaftNode``:
the peers known so far, and an expected size of at least two and at least
the number of configured routes.
"""

import os
import random

from natsbroker.cluster.raft.filestorage import FileStorage
from natsbroker.cluster.raft.node import Node
from natsbroker.cluster.raft.transport import RaftTransport
from natsbroker.cluster.raft.wire import EntryType, peer_id
from natsbroker.jetstream.cluster.entries import EntryError
from natsbroker.jetstream.cluster.meta import MetaState

GROUP = "_meta_"
# jetstream_cluster.go: compactNumMin / compactSizeMin and the check interval.
SNAPSHOT_MIN_ENTRIES = 65536
SNAPSHOT_MIN_BYTES = 8 * 1024 * 1024
SNAPSHOT_INTERVAL = 60.0


def expected_size(known, routes):
    """bootstrapRaftNode's expected size when not every peer is known."""
    return max(2, len(known), routes)


class MetaGroup:
    """``on_change(Change)`` hears every assignment change, in order;
    ``on_leader(LeaderChange)`` every leadership change; ``log(level, text)``
    the group's log lines."""

    def __init__(self, broker, store_dir, known_peers=(), routes=0, observer=False,
                 on_change=None, on_leader=None, log=None):
        self.broker = broker
        self.state = MetaState()
        self.on_change = on_change
        self.on_leader = on_leader
        self.log = log
        path = os.path.join(store_dir, "$SYS", "_js_", GROUP)
        os.makedirs(path, mode=0o700, exist_ok=True)
        recovering = os.path.exists(os.path.join(path, "CURRENT"))
        self.storage = FileStorage(path)
        me = peer_id(broker.server_name)
        known = sorted(set(known_peers) | {me})
        self.node = Node(GROUP, me, self.storage, clock=broker.reactor.seconds,
                         rng=random.SystemRandom(), peers=known,
                         cluster_size=expected_size(known, routes), observer=observer,
                         recovering=recovering)
        self.transport = RaftTransport(self.node, broker.system_account, broker.reactor,
                                       on_commit=self._commit, on_leader=self._leader, log=log)
        self.applied_since_snapshot = 0
        self.bytes_since_snapshot = 0
        self._check = None
        self.failed = None
        self.replaying = False

    @property
    def id(self):
        return self.node.id

    def start(self):
        # What start() applies is the log replayed from disk: nobody waits
        # for an answer to those requests any more.
        self.replaying = True
        try:
            self.transport.start()
        finally:
            self.replaying = False
        if not self.node.recovering:
            # A bootstrapped group campaigns early (setupMetaGroup: Campaign()).
            self.transport.call(self.node.campaign)
        self._check = self.broker.reactor.callLater(SNAPSHOT_INTERVAL, self._periodic)

    def stop(self):
        if self._check is not None and self._check.active():
            self._check.cancel()
        self.transport.stop()
        self.storage.close()

    def propose(self, data):
        self.transport.propose(data)

    def snapshot(self):
        """Snapshot the applied state now (nothing when nothing is new)."""
        if self.node.applied > self.node.papplied:
            self.transport.call(self.node.install_snapshot, self.state.snapshot())
            self.applied_since_snapshot = self.bytes_since_snapshot = 0

    # -- the node's effects ----------------------------------------------------

    def _commit(self, committed):
        if self.failed:
            return
        for e in committed.entries:
            try:
                if e.type == EntryType.SNAPSHOT:
                    changes = self.state.apply_snapshot(e.data)
                elif e.type == EntryType.NORMAL:
                    changes = self.state.apply_entry(e.data)
                    self.bytes_since_snapshot += len(e.data)
                else:
                    continue
            except EntryError as err:
                # nats-server panics on an entry it cannot decode; a member that
                # skipped one would differ from its peers, so it stops applying
                # (and says why) rather than go on with a different state.
                self.failed = "entry at %d cannot be applied: %s" % (committed.index, err)
                if self.log is not None:
                    self.log("error", "JetStream meta group " + self.failed)
                return
            for change in changes:
                if self.on_change is not None:
                    self.on_change(change)
        self.applied_since_snapshot += 1
        if (self.applied_since_snapshot >= SNAPSHOT_MIN_ENTRIES
                or self.bytes_since_snapshot >= SNAPSHOT_MIN_BYTES):
            self.snapshot()

    def _leader(self, change):
        if self.on_leader is not None:
            self.on_leader(change)

    def _periodic(self):
        self._check = self.broker.reactor.callLater(SNAPSHOT_INTERVAL, self._periodic)
        if self.node.catchup is None and self.applied_since_snapshot:
            self.snapshot()
