"""A test plugin: one NRG node in the system account, on the group the
configuration names (``raftprobe { group: _meta_, observer: true }``; a new
group of its own also names its ``peers`` by server name), kept
in FileStorage under the store directory, reporting at ``/raftprobez`` (where ``?propose=x`` proposes ``x`` on a leader).

It lets a test put natsbroker's Raft (node, transport, storage) into a
group that nats-server servers run, with nothing above the Raft layer.
"""

import os
import random

from zope.interface import implementer

from natsbroker.cluster.raft.filestorage import FileStorage
from natsbroker.cluster.raft.node import Node
from natsbroker.cluster.raft.transport import RaftTransport
from natsbroker.cluster.raft.wire import EntryType, peer_id
from natsbroker.discovery import PluginFactory
from natsbroker.interfaces import IBrokerPlugin
from natsbroker.jetstream.cluster.meta import MetaState


@implementer(IBrokerPlugin)
class RaftProbe:
    name = "raftprobe"

    def __init__(self, config):
        block = config.plugin_config.get("raftprobe") or {}
        self.group = block.get("group", "_meta_")
        self.observer = bool(block.get("observer", False))
        self.peers = [peer_id(name) for name in block.get("peers", ())]
        self.committed = []  # (index, [(type, data)])
        # The meta group's entries and snapshots, applied as natsbroker's
        # JetStream cluster layer applies them.
        self.meta = MetaState() if self.group == "_meta_" else None
        self.leaders = []

    def start(self, broker):
        self.broker = broker
        path = os.path.join(broker.store_path("raftprobe"), self.group)
        os.makedirs(path, mode=0o700, exist_ok=True)
        self.storage = FileStorage(path)
        self.node = Node(self.group, peer_id(broker.server_name), self.storage,
                         clock=broker.reactor.seconds, rng=random.SystemRandom(),
                         peers=self.peers, observer=self.observer)
        self.transport = RaftTransport(self.node, broker.system_account, broker.reactor,
                                       on_commit=self._commit, on_leader=self.leaders.append)
        self.transport.start()
        broker.add_monitor_endpoint("raftprobez", self._raftz)

    def stop(self):
        self.transport.stop()
        self.storage.close()

    def _commit(self, c):
        self.committed.append((c.index, [(int(e.type), e.data) for e in c.entries]))
        if self.meta is not None:
            for e in c.entries:
                if e.type == EntryType.SNAPSHOT:
                    self.meta.apply_snapshot(e.data)
                elif e.type == EntryType.NORMAL:
                    self.meta.apply_entry(e.data)

    def _raftz(self, request):
        n = self.node
        for data in request.query.get("propose", ()):
            self.transport.propose(data.encode())
        normal = [d for _, es in self.committed for t, d in es if t == EntryType.NORMAL]
        return {
            "id": n.id, "state": n.state.value, "term": n.term, "leader": n.leader,
            "pterm": n.pterm, "pindex": n.pindex, "commit": n.commit, "applied": n.applied,
            "cluster_size": n.cluster_size, "peers": sorted(n.peers),
            "normal": [d.decode("latin-1") for d in normal],
            "first_index": self.storage.first_index,
            "streams": {} if self.meta is None else {
                "%s/%s" % key: {"peers": sa.group.peers, "group": sa.group.name,
                                "consumers": [c.name for c in self.meta.stream_consumers(*key)]}
                for key, sa in self.meta.streams.items()},
        }


factory = PluginFactory("raftprobe", RaftProbe, config_block="raftprobe")
