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
from urllib.parse import urlsplit

from natsbroker.cluster.raft.filestorage import FileStorage, move_aside
from natsbroker.cluster.raft.node import Node
from natsbroker.cluster.raft.storage import StorageError
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
    """bootstrapRaftNode's expected size when not every peer is known:
    ``routes`` is the number of servers the configured routes name, this
    one included (:func:`route_members`)."""
    return max(2, len(known), routes)


def route_members(cluster):
    """How many servers a cluster block's routes name, this one included.
    nats-server counts the configured routes alone, which is right for the
    usual config that lists every server, itself too, and one short for a
    config that lists only the others: four servers configured so would
    each expect three, and two pairs could each elect a meta leader in the
    same term. A route to this server's own cluster port is not counted
    twice."""
    own = {"", "localhost", "0.0.0.0", "::", "127.0.0.1", "::1", cluster.host or ""}
    others = 0
    for url in cluster.routes or ():
        try:
            u = urlsplit(url if "://" in str(url) else "nats://" + str(url))
            port = u.port
        except ValueError:
            others += 1
            continue
        if cluster.port > 0 and port == cluster.port and (u.hostname or "") in own:
            continue  # ourselves
        others += 1
    return others + 1


class MetaGroup:
    """``on_change(Change)`` hears every assignment change, in order;
    ``on_leader(LeaderChange)`` every leadership change;
    ``on_peer_removed(peer)`` each member removed from the group (a
    committed RemovePeer entry); ``log(level, text)`` the group's log lines."""

    def __init__(self, broker, store_dir, known_peers=(), routes=0, observer=False,
                 on_change=None, on_leader=None, log=None, on_peer_removed=None):
        self.broker = broker
        self.state = MetaState()
        self.on_change = on_change
        self.on_peer_removed = on_peer_removed
        self.on_leader = on_leader
        self.log = log
        self.path = os.path.join(store_dir, "$SYS", "_js_", GROUP)
        self._known, self._routes, self._observer = known_peers, routes, observer
        self.storage = self.node = self.transport = None
        self._open_error = None
        try:
            self._open()
        except StorageError as e:
            self._open_error = e  # (start() moves the log aside)
            if self.storage is not None:
                self.storage.close()
            self.storage = self.node = self.transport = None
        self.applied_since_snapshot = 0
        self.bytes_since_snapshot = 0
        self._check = None
        self.failed = None
        self.replaying = False

    def _open(self, damaged=False):
        broker = self.broker
        os.makedirs(self.path, mode=0o700, exist_ok=True)
        recovering = damaged or os.path.exists(os.path.join(self.path, "CURRENT"))
        self.storage = FileStorage(self.path)
        me = peer_id(broker.server_name)
        known = sorted(set(self._known) | {me})
        # (a log moved aside rejoins as one that had data: its empty votes
        # never make a quorum alone, and it waits to be caught up)
        self.node = Node(GROUP, me, self.storage, clock=broker.reactor.seconds,
                         rng=random.SystemRandom(), peers=known,
                         cluster_size=expected_size(known, self._routes),
                         observer=self._observer, recovering=recovering)
        self.transport = RaftTransport(self.node, broker.system_account, broker.reactor,
                                       on_commit=self._commit, on_leader=self._leader,
                                       log=self.log, on_failure=self._log_failed)

    def _log_failed(self, err):
        # (the transport stopped the node and said why; nothing more is applied)
        self.failed = "Raft log damaged: %s" % err

    @property
    def id(self):
        return peer_id(self.broker.server_name)

    def start(self):
        """Replay the log. A damaged one (a record whose checksum fails, a
        database LevelDB cannot open) is not trusted and not deleted: it is
        moved aside and named in the log, and this server rejoins with an
        empty one that the meta leader fills. Nothing is removed because the
        damaged log no longer lists it (the streams on disk stay, and are
        attached again as the assignments arrive)."""
        # What start() applies is the log replayed from disk: nobody waits
        # for an answer to those requests any more.
        self.replaying = True
        try:
            try:
                if self.storage is None:
                    raise self._open_error
                self.transport.start()
            except StorageError as e:
                why = str(e)
                try:
                    if self.storage is not None:
                        self.storage.close()
                except Exception:
                    pass
                self.state = MetaState()
                aside = move_aside(self.path)
                if self.log is not None:
                    self.log("error", "JetStream meta group's Raft log damaged (%s): moved to %s, "
                             "not used; this server rejoins with an empty log and is caught up "
                             "by the meta leader" % (why, aside))
                self._open(damaged=True)
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
                elif e.type == EntryType.REMOVE_PEER:
                    # (processRemovePeer: not for what a restart replays)
                    if not self.replaying and self.on_peer_removed is not None:
                        self.on_peer_removed(bytes(e.data).decode("latin-1"))
                    continue
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
