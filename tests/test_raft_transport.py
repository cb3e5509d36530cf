"""The Twisted adapter of a Raft node, on a simulated clock: a log record
that turns out damaged while running (its checksum fails when the node
reads it to apply) stops the node, says why, and reaches ``on_failure``;
nothing read from it is handed up."""

import random

from twisted.internet.task import Clock

from natsbroker.cluster.raft.node import Node
from natsbroker.cluster.raft.storage import MemoryStorage, StorageError
from natsbroker.cluster.raft.transport import RaftTransport


class Account:
    """Just what the transport uses of an IBroker account."""

    route_source = None

    def __init__(self):
        self.subs = {}
        self.published = []

    def subscribe(self, subject, callback, hidden=False):
        self.subs[subject] = callback
        return subject

    def unsubscribe(self, sub):
        self.subs.pop(sub, None)

    def publish(self, subject, payload, reply=None):
        self.published.append((subject, payload, reply))


class DamagedAfter(MemoryStorage):
    """A WAL whose records read back damaged once ``damaged`` is set."""

    damaged = False

    def entry(self, index):
        if self.damaged:
            raise StorageError("log index %d damaged (checksum mismatch)" % index)
        return super().entry(index)


def test_a_record_damaged_while_running_stops_the_node():
    clock = Clock()
    storage = DamagedAfter()
    node = Node("G", "AAAAAAAA", storage, clock=clock.seconds, rng=random.Random(1),
                peers=["AAAAAAAA"])
    committed, failures, logs = [], [], []
    account = Account()
    t = RaftTransport(node, account, clock, on_commit=committed.append,
                      on_failure=failures.append, log=lambda level, text: logs.append((level, text)))
    t.start()
    t.call(node.campaign, immediately=True)
    clock.advance(1)
    assert node.is_leader
    t.propose(b"one")
    clock.advance(0)
    assert [e.data for c in committed for e in c.entries] == [b"one"]
    storage.damaged = True
    t.propose(b"two")
    clock.advance(0)
    # Not handed up, the node stopped, its subscriptions gone, and why is said.
    assert [e.data for c in committed for e in c.entries] == [b"one"]
    assert len(failures) == 1 and isinstance(failures[0], StorageError)
    assert t.stopped and t.failed and not account.subs
    assert any(level == "error" and "damaged" in text for level, text in logs)
    # Its timers are gone too: nothing runs later.
    clock.advance(60)
    assert [e.data for c in committed for e in c.entries] == [b"one"] and len(failures) == 1
