"""A simulated network for NRG nodes (natsbroker.cluster.raft.node).

Nodes of one group exchange their Send effects through an in-flight list
that a test delivers in any order, drops, duplicates, or lets a restarted
node miss; time is a number the test advances. Every Committed effect is
checked as it happens: the upper layer here is a list of the Normal entries'
data (a Snapshot entry replaces it), and every node's list after index i must
be the same list, whenever and however it got there.
"""

import random

from natsbroker.cluster.raft.node import Committed, LeaderChange, Node, Send, State, Subscribe, Unsubscribe
from natsbroker.cluster.raft.storage import MemoryStorage
from natsbroker.cluster.raft.wire import EntryType, peer_id

GROUP = "S-R3F-test"


def encode_state(items):
    return b"\n".join(items)


def decode_state(data):
    return data.split(b"\n") if data else []


class Divergence(AssertionError):
    pass


class SimCluster:
    def __init__(self, size=3, seed=0, storage_factory=None, reopen=None):
        """``storage_factory(id)`` makes a node's storage (MemoryStorage by
        default); ``reopen(storage)`` gives it back after a restart (the same
        object by default; a FileStorage closes and opens its directory)."""
        self.time = 0.0
        self.rng = random.Random(seed)
        self.ids = [peer_id("node%d" % i) for i in range(size)]
        self.storage_factory = storage_factory or (lambda i: MemoryStorage())
        self.reopen = reopen
        self.storage = {i: self.storage_factory(i) for i in self.ids}
        self.nodes = {}
        self.subs = {}
        self.state = {}  # id -> the upper layer's list
        self.inflight = []  # [dest, subject, reply, payload, sender]
        self.history = {}  # index -> tuple(state) as first applied anywhere
        self.leaders = {}  # term -> {ids that led in it}
        self.down = set()
        self.sent = 0
        for i in self.ids:
            self.start(i)

    # -- lifecycle ------------------------------------------------------

    def start(self, i):
        node = Node(GROUP, i, self.storage[i], clock=lambda: self.time,
                    rng=random.Random(self.rng.random()), peers=self.ids)
        self.nodes[i] = node
        self.subs[i] = set()
        self.state[i] = []
        self.down.discard(i)
        self.handle(i, node.start())

    def stop(self, i):
        self.nodes[i].stop()
        self.subs[i] = set()
        self.down.add(i)
        self.inflight = [m for m in self.inflight if m[0] != i]

    def restart(self, i):
        self.stop(i)
        if self.reopen is not None:
            self.storage[i] = self.reopen(self.storage[i])
        self.start(i)

    # -- effects --------------------------------------------------------

    def handle(self, src, effects):
        for e in effects:
            if isinstance(e, Send):
                self.sent += 1
                for dest in self.ids:
                    # nats-server's send queue never delivers to the
                    # sending server's own internal subscriptions.
                    if dest != src and e.subject in self.subs[dest]:
                        self.inflight.append([dest, e.subject, e.reply, e.payload, src])
            elif isinstance(e, Subscribe):
                self.subs[src].add(e.subject)
            elif isinstance(e, Unsubscribe):
                self.subs[src].discard(e.subject)
            elif isinstance(e, Committed):
                self.apply(src, e)
            elif isinstance(e, LeaderChange):
                pass
        node = self.nodes[src]
        if node.state == State.LEADER:
            led = self.leaders.setdefault(node.term, set())
            led.add(src)
            if len(led) > 1:
                raise Divergence("two leaders in term %d: %s" % (node.term, sorted(led)))

    def apply(self, i, c):
        state = self.state[i]
        for e in c.entries:
            if e.type == EntryType.SNAPSHOT:
                state[:] = decode_state(e.data)
            elif e.type == EntryType.NORMAL:
                state.append(e.data)
        seen = self.history.setdefault(c.index, tuple(state))
        if seen != tuple(state):
            raise Divergence("node %s applied index %d as %r, another node as %r"
                             % (i, c.index, state[-3:], list(seen[-3:])))

    # -- the network ----------------------------------------------------

    def deliver(self, k):
        dest, subject, reply, payload = self.inflight.pop(k)[:4]
        if subject in self.subs[dest]:
            self.handle(dest, self.nodes[dest].receive(subject, reply, payload))

    def drop(self, k):
        self.inflight.pop(k)

    def duplicate(self, k):
        self.inflight.append(list(self.inflight[k]))

    def advance(self, dt):
        self.time += dt
        for i in self.ids:
            if i not in self.down:
                self.handle(i, self.nodes[i].tick())

    def run(self, seconds, step=0.05, loss=0.0):
        """Deliver everything in order as time passes (``loss`` of it lost)."""
        end = self.time + seconds
        while self.time < end:
            while self.inflight:
                if loss and self.rng.random() < loss:
                    self.drop(0)
                else:
                    self.deliver(0)
            self.advance(step)

    def chaos(self, rng, seconds, loss=0.0, dup=0.0, reorder=False, cut=frozenset(), propose=0):
        """``seconds`` of a bad network: messages lost, duplicated, taken in
        any order, and none between the ``cut`` nodes and the others; the
        leader of the moment is handed ``propose`` entries along the way."""
        end = self.time + seconds
        while self.time < end:
            budget = len(self.inflight)
            while self.inflight and budget > 0:
                budget -= 1
                k = rng.randrange(len(self.inflight)) if reorder else 0
                dest = self.inflight[k][0]
                if rng.random() < loss or (cut and (dest in cut) != (self._sender(k) in cut)):
                    self.drop(k)
                    continue
                if rng.random() < dup:
                    self.duplicate(k)
                self.deliver(k)
            if propose and self.leader() is not None and rng.random() < 0.3:
                propose -= 1
                self.propose(b"c%d-%d" % (self.sent, propose))
            self.advance(rng.choice((0.01, 0.1, 0.5, 1.0)))

    def _sender(self, k):
        return self.inflight[k][4] if len(self.inflight[k]) > 4 else None

    # -- the upper layer ------------------------------------------------

    def leader(self):
        live = [i for i in self.ids if i not in self.down and self.nodes[i].state == State.LEADER]
        return live[0] if len(live) == 1 else None

    def propose(self, data):
        i = self.leader()
        self.handle(i, self.nodes[i].propose(data))
        return i

    def snapshot(self, i):
        node = self.nodes[i]
        if node.applied > node.papplied and node.storage.term_at(node.applied) is not None:
            self.handle(i, node.install_snapshot(encode_state(self.state[i])))
            return True
        return False
