"""NRG's state machine (natsbroker.cluster.raft.node) in a simulated network.

Scenarios first (election, replication, failover, catch-up from the WAL and
from a snapshot, leader transfer, membership), then hypothesis stateful tests
that lose, reorder, duplicate and restart at random and must never see two
leaders in one term or two nodes that applied one index differently
(tests/support/raftsim.py checks both on every step), and must converge once
the network heals.
"""

import os
import random

import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from natsbroker.cluster.raft.node import (
    MAX_ELECTION_TIMEOUT,
    Committed,
    LeaderChange,
    Node,
    NotLeader,
    Send,
    State,
    Subscribe,
)
from natsbroker.cluster.raft.storage import MemoryStorage
from natsbroker.cluster.raft.wire import (
    AppendEntry,
    AppendEntryResponse,
    EntryType,
    PeerState,
    VoteRequest,
    VoteResponse,
    peer_id,
)
from tests.support.raftsim import GROUP, SimCluster

A, B, C = peer_id("nodeA"), peer_id("nodeB"), peer_id("nodeC")


def elect(sim, seconds=2 * MAX_ELECTION_TIMEOUT):
    sim.run(seconds)
    leader = sim.leader()
    assert leader is not None, {i: sim.nodes[i].state for i in sim.ids}
    return leader


def converged(sim):
    live = [i for i in sim.ids if i not in sim.down]
    states = {i: tuple(sim.state[i]) for i in live}
    return len(set(states.values())) == 1, states


# -- one node, by hand ---------------------------------------------------------

def lone_node(peers=(A, B, C)):
    clock = [0.0]
    node = Node(GROUP, A, MemoryStorage(), clock=lambda: clock[0], rng=random.Random(1), peers=peers)
    return node, clock


def sends(effects, subject=None):
    return [e for e in effects if isinstance(e, Send) and (subject is None or e.subject == subject)]


def test_start_subscribes_nrg_subjects_and_waits_for_an_election_timeout():
    node, clock = lone_node()
    effects = node.start()
    subs = {e.subject for e in effects if isinstance(e, Subscribe)}
    assert {"$NRG.V." + GROUP, "$NRG.AE." + GROUP} <= subs
    inboxes = subs - {"$NRG.V." + GROUP, "$NRG.AE." + GROUP}
    assert len(inboxes) == 2 and all(s.startswith("$NRG.R.") and len(s) == 15 for s in inboxes)
    assert 4.0 <= node.next_deadline() < 9.0
    clock[0] = 3.9
    assert sends(node.tick()) == []


def test_candidate_persists_its_vote_before_asking():
    node, clock = lone_node()
    node.start()
    clock[0] = 10
    effects = node.tick()
    (req,) = sends(effects, "$NRG.V." + GROUP)
    vr = VoteRequest.decode(req.payload)
    assert (vr.term, vr.last_term, vr.last_index, vr.candidate) == (1, 0, 0, A)
    assert req.reply == node.vreply
    assert node.storage.load_term_vote() == (1, A)
    assert node.state == State.CANDIDATE


def test_one_granted_vote_of_three_makes_a_leader_whose_first_entry_is_peer_state():
    node, clock = lone_node()
    node.start()
    clock[0] = 10
    node.tick()
    effects = node.receive(node.vreply, "", VoteResponse(1, B, True, False).encode())
    assert node.state == State.LEADER
    (ae_msg,) = sends(effects, "$NRG.AE." + GROUP)
    ae = AppendEntry.decode(ae_msg.payload)
    assert (ae.leader, ae.term, ae.commit, ae.pterm, ae.pindex) == (A, 1, 0, 0, 0)
    assert [e.type for e in ae.entries] == [EntryType.PEER_STATE]
    assert sorted(PeerState.decode(ae.entries[0].data).peers) == sorted([A, B, C])
    # Not announced as leader until that entry commits.
    assert not any(isinstance(e, LeaderChange) and e.is_leader for e in effects)
    effects = node.receive(node.areply, "", AppendEntryResponse(1, 1, B, True).encode())
    assert any(isinstance(e, LeaderChange) and e.is_leader for e in effects)
    assert node.commit == 1


def test_empty_log_votes_need_the_whole_cluster():
    node, clock = lone_node()
    node.start()
    clock[0] = 10
    node.tick()
    node.receive(node.vreply, "", VoteResponse(1, B, True, empty=True).encode())
    assert node.state == State.CANDIDATE  # 1 real vote + 1 empty of 3
    node.receive(node.vreply, "", VoteResponse(1, C, True, empty=True).encode())
    assert node.state == State.LEADER


def test_a_new_member_votes_as_one_with_data_until_it_has_some():
    # nats-server's "initializing": a group just created has only empty
    # logs; their votes must make a quorum without the whole group.
    node, _ = lone_node()
    node.start()
    out = sends(node.receive("$NRG.V." + GROUP, "$NRG.R.cand", VoteRequest(1, 0, 0, B).encode()))
    resp = VoteResponse.decode(out[0].payload)
    assert resp.granted and not resp.empty
    recovering = Node(GROUP, A, MemoryStorage(), clock=lambda: 0.0, rng=random.Random(1),
                      peers=(A, B, C), recovering=True)
    recovering.start()
    out = sends(recovering.receive("$NRG.V." + GROUP, "$NRG.R.cand", VoteRequest(1, 0, 0, B).encode()))
    assert VoteResponse.decode(out[0].payload).empty


def test_a_scaled_up_member_observes_until_the_leader_sends_data():
    clock = [0.0]
    node = Node(GROUP, A, MemoryStorage(), clock=lambda: clock[0], rng=random.Random(1),
                peers=(A, B, C), scale_up=True)
    node.start()
    assert node.observer
    clock[0] = 20
    assert sends(node.tick(), "$NRG.V." + GROUP) == []
    node.receive("$NRG.AE." + GROUP, "$NRG.R.leadB", AppendEntry(B, 1, 0, 0, 0, [_normal(b"x")]).encode())
    assert not node.observer


def test_a_lone_snapshot_entry_is_installed_at_commit_by_a_follower_without_one():
    from natsbroker.cluster.raft.wire import Entry
    node, _ = lone_node()
    node.start()
    node.receive("$NRG.AE." + GROUP, "r", AppendEntry(B, 1, 0, 0, 0, [_normal(b"a")]).encode())
    node.receive("$NRG.AE." + GROUP, "r", AppendEntry(B, 1, 1, 1, 1, [Entry(EntryType.SNAPSHOT, b"S")]).encode())
    effects = node.receive("$NRG.AE." + GROUP, "r", AppendEntry(B, 1, 2, 1, 2).encode())
    assert [(c.index, [e.type for e in c.entries]) for c in effects if isinstance(c, Committed)] == \
        [(2, [EntryType.SNAPSHOT])]
    snap = node.storage.load_snapshot()
    assert (snap.last_term, snap.last_index, snap.data) == (1, 1, b"S")


def test_a_vote_is_refused_to_a_shorter_log_and_for_an_older_term():
    node, clock = lone_node()
    node.start()
    node.receive("$NRG.AE." + GROUP, "$NRG.R.leaderB1",
                 AppendEntry(B, 2, 0, 0, 0, [_normal(b"x")]).encode())
    assert (node.pterm, node.pindex) == (2, 1)
    out = sends(node.receive("$NRG.V." + GROUP, "$NRG.R.cand", VoteRequest(3, 1, 5, C).encode()))
    assert not VoteResponse.decode(out[0].payload).granted
    assert node.term == 3  # a higher term is adopted even when refused
    out = sends(node.receive("$NRG.V." + GROUP, "$NRG.R.cand", VoteRequest(2, 2, 1, C).encode()))
    resp = VoteResponse.decode(out[0].payload)
    assert not resp.granted and resp.term == 3
    out = sends(node.receive("$NRG.V." + GROUP, "$NRG.R.cand", VoteRequest(3, 2, 1, C).encode()))
    assert VoteResponse.decode(out[0].payload).granted
    assert node.storage.load_term_vote() == (3, C)
    # One vote per term.
    out = sends(node.receive("$NRG.V." + GROUP, "$NRG.R.cand", VoteRequest(3, 2, 1, B).encode()))
    assert not VoteResponse.decode(out[0].payload).granted


def _normal(data):
    from natsbroker.cluster.raft.wire import Entry
    return Entry(EntryType.NORMAL, data)


def test_follower_acks_live_entries_with_its_pterm_and_pindex_and_applies_commit():
    node, _ = lone_node()
    node.start()
    ae = AppendEntry(B, 1, 0, 0, 0, [_normal(b"one")])
    (ack,) = sends(node.receive("$NRG.AE." + GROUP, "$NRG.R.leadB", ae.encode()))
    assert ack.subject == "$NRG.R.leadB" and ack.reply == ""
    assert AppendEntryResponse.decode(ack.payload) == AppendEntryResponse(1, 1, A, True)
    effects = node.receive("$NRG.AE." + GROUP, "$NRG.R.leadB", AppendEntry(B, 1, 1, 1, 1).encode())
    assert [c.index for c in effects if isinstance(c, Committed)] == [1]
    assert node.leader == B
    assert node.storage.entry(1)[1] == ae.encode()


def test_a_gap_asks_for_catch_up_on_a_fresh_inbox_and_catch_up_entries_are_not_acked():
    node, _ = lone_node()
    node.start()
    effects = node.receive("$NRG.AE." + GROUP, "$NRG.R.leadB", AppendEntry(B, 1, 2, 1, 2, [_normal(b"c")]).encode())
    (req,) = sends(effects)
    assert req.subject == "$NRG.R.leadB" and req.reply.startswith("$NRG.CR.")
    assert AppendEntryResponse.decode(req.payload) == AppendEntryResponse(0, 0, A, False)
    assert Subscribe(req.reply) in effects
    for i, data in ((0, b"a"), (1, b"b")):
        out = node.receive(req.reply, "$NRG.R.leadB",
                           AppendEntry(B, 1, 0, i and 1, i, [_normal(data)], lterm=1).encode())
        assert sends(out) == []
    assert node.pindex == 2
    # The next live entry matches: catch-up ends and it is acked.
    out = sends(node.receive("$NRG.AE." + GROUP, "$NRG.R.leadB", AppendEntry(B, 1, 2, 1, 2, [_normal(b"c")]).encode()))
    assert AppendEntryResponse.decode(out[0].payload) == AppendEntryResponse(1, 3, A, True)
    assert node.catchup is None


def test_a_malformed_message_is_logged_not_raised():
    node, _ = lone_node()
    node.start()
    effects = node.receive("$NRG.AE." + GROUP, "", b"short")
    assert [e.level for e in effects] == ["warning"]


def test_propose_needs_the_leader():
    node, _ = lone_node()
    node.start()
    with pytest.raises(NotLeader):
        node.propose(b"x")


# -- a cluster ------------------------------------------------------------------

@pytest.mark.parametrize("size", [1, 3, 5])
def test_a_leader_is_elected_and_entries_replicate_everywhere(size):
    sim = SimCluster(size, seed=size)
    leader = elect(sim)
    for n in range(50):
        sim.propose(b"m%d" % n)
    sim.run(3)
    ok, states = converged(sim)
    assert ok and len(states[leader]) == 50, states
    assert all(sim.nodes[i].commit == sim.nodes[leader].commit for i in sim.ids)


def test_leader_failure_elects_another_and_nothing_committed_is_lost():
    sim = SimCluster(3, seed=7)
    first = elect(sim)
    for n in range(10):
        sim.propose(b"a%d" % n)
    sim.run(2)
    sim.stop(first)
    second = elect(sim)
    assert second != first and sim.nodes[second].term > sim.nodes[first].term
    for n in range(10):
        sim.propose(b"b%d" % n)
    sim.run(2)
    sim.start(first)
    sim.run(15)
    ok, states = converged(sim)
    assert ok and len(states[first]) == 20, states
    assert sim.nodes[first].state == State.FOLLOWER and sim.nodes[first].leader == second


def test_a_follower_that_missed_entries_catches_up_from_the_wal():
    sim = SimCluster(3, seed=11)
    leader = elect(sim)
    lagger = next(i for i in sim.ids if i != leader)
    sim.stop(lagger)
    for n in range(300):
        sim.propose(b"x%d" % n)
    sim.run(2)
    sim.start(lagger)
    sim.run(12)
    ok, states = converged(sim)
    assert ok and len(states[lagger]) == 300


def test_a_follower_behind_the_leaders_snapshot_gets_snapshot_and_peer_state():
    sim = SimCluster(3, seed=12)
    leader = elect(sim)
    lagger = next(i for i in sim.ids if i != leader)
    sim.stop(lagger)
    for n in range(40):
        sim.propose(b"y%d" % n)
    sim.run(2)
    assert sim.snapshot(leader)
    assert sim.nodes[leader].storage.first_index > 1
    for n in range(5):
        sim.propose(b"z%d" % n)
    sim.run(1)
    sim.start(lagger)
    sim.run(12)
    ok, states = converged(sim)
    assert ok and len(states[lagger]) == 45, states
    assert sim.nodes[lagger].storage.load_snapshot() is not None


def test_step_down_transfers_leadership_to_the_preferred_peer():
    sim = SimCluster(3, seed=5)
    leader = elect(sim)
    target = next(i for i in sim.ids if i != leader)
    sim.handle(leader, sim.nodes[leader].step_down(preferred=target))
    sim.run(1)
    assert sim.leader() == target


def test_a_new_peer_is_added_when_it_answers_and_can_then_be_removed():
    sim = SimCluster(3, seed=9)
    leader = elect(sim)
    for n in range(5):
        sim.propose(b"p%d" % n)
    sim.run(1)
    # A fourth server joins: it answers the leader's AppendEntries.
    newcomer = peer_id("node3")
    sim.ids.append(newcomer)
    sim.storage[newcomer] = sim.storage_factory(newcomer)
    sim.start(newcomer)
    sim.run(6)
    assert newcomer in sim.nodes[leader].peers and sim.nodes[leader].cluster_size == 4
    assert newcomer in sim.nodes[sim.ids[0] if sim.ids[0] != leader else sim.ids[1]].peers
    ok, states = converged(sim)
    assert ok and len(states[newcomer]) == 5
    sim.handle(leader, sim.nodes[leader].propose_remove_peer(newcomer))
    sim.run(2)
    assert all(sim.nodes[i].cluster_size == 3 for i in sim.ids[:3])


def test_a_leader_removing_itself_hands_over_and_every_node_applies_it():
    """The removal commits on the leader, which hands the group over and
    stops; every node hands the RemovePeer entry up (the leader's own effects
    were lost once: stop() replaced the effect list they were on)."""
    sim = SimCluster(3, seed=9)
    leader = elect(sim)
    sim.propose(b"x")
    sim.run(1)
    seen = []
    apply = sim.apply

    def watch(i, c):
        seen.extend((i, bytes(e.data)) for e in c.entries if e.type == EntryType.REMOVE_PEER)
        apply(i, c)
    sim.apply = watch
    sim.handle(leader, sim.nodes[leader].propose_remove_peer(leader))
    sim.run(1)
    assert sorted(seen) == sorted((i, leader.encode()) for i in sim.ids)
    assert sim.nodes[leader].state == State.CLOSED
    rest = [i for i in sim.ids if i != leader]
    assert sim.leader() in rest  # handed over at once, no election timeout
    assert all(sim.nodes[i].cluster_size == 2 and leader not in sim.nodes[i].peers for i in rest)


def test_restart_restores_term_vote_log_and_reapplies_commits():
    sim = SimCluster(3, seed=3)
    elect(sim)
    for n in range(5):
        sim.propose(b"r%d" % n)
    sim.run(2)
    i = sim.ids[0]
    before = (sim.nodes[i].term, sim.nodes[i].pindex, tuple(sim.state[i]))
    sim.restart(i)
    assert (sim.nodes[i].term, sim.nodes[i].pindex) == before[:2]
    sim.run(3)
    assert tuple(sim.state[i]) == before[2]


def test_minority_cannot_commit_and_leader_steps_down_on_lost_quorum():
    sim = SimCluster(3, seed=4)
    leader = elect(sim)
    others = [i for i in sim.ids if i != leader]
    for o in others:
        sim.stop(o)
    sim.propose(b"lost")
    sim.run(25)
    assert sim.nodes[leader].state != State.LEADER
    assert b"lost" not in sim.state[leader]


def test_on_leveldb_storage_restarts_resume_from_disk(tmp_path):
    from natsbroker.cluster.raft.filestorage import FileStorage

    def reopen(storage):
        storage.close()
        return FileStorage(storage.path)
    sim = SimCluster(3, seed=21, storage_factory=lambda i: FileStorage(str(tmp_path / i)), reopen=reopen)
    leader = elect(sim)
    for n in range(30):
        sim.propose(b"f%d" % n)
    sim.run(2)
    assert sim.snapshot(leader)
    for i in sim.ids:
        sim.restart(i)
    leader = elect(sim)
    sim.propose(b"after")
    sim.run(3)
    ok, states = converged(sim)
    assert ok and len(states[leader]) == 31 and states[leader][-1] == b"after", states


# -- hypothesis: chaos never breaks safety ---------------------------------------

class Chaos(RuleBasedStateMachine):
    """Random delivery order, loss, duplication, time and restarts."""

    @initialize(size=st.sampled_from([3, 5]), seed=st.integers(0, 2**32))
    def setup(self, size, seed):
        self.sim = SimCluster(size, seed=seed)
        self.n = 0
        self.sim.run(20)

    @rule(seed=st.integers(0, 2**32), seconds=st.floats(0.5, 12.0),
          loss=st.sampled_from([0.0, 0.05, 0.3]), dup=st.sampled_from([0.0, 0.1]),
          reorder=st.booleans(), cut=st.sets(st.integers(0, 4), max_size=2),
          propose=st.integers(0, 20))
    def bad_network(self, seed, seconds, loss, dup, reorder, cut, propose):
        ids = self.sim.ids
        self.sim.chaos(random.Random(seed), seconds, loss, dup, reorder,
                       frozenset(ids[c % len(ids)] for c in cut), propose)

    @rule(seed=st.integers(0, 2**32), count=st.integers(1, 30))
    def deliver_some_out_of_order(self, seed, count):
        rng = random.Random(seed)
        for _ in range(min(count, len(self.sim.inflight))):
            self.sim.deliver(rng.randrange(len(self.sim.inflight)))

    @rule(dt=st.sampled_from([0.05, 0.5, 1.0, 5.0, 10.0]))
    def advance(self, dt):
        self.sim.advance(dt)

    @precondition(lambda self: self.sim.leader() is not None)
    @rule(batch=st.integers(1, 5))
    def propose(self, batch):
        for _ in range(batch):
            self.n += 1
            self.sim.propose(b"e%d" % self.n)

    @rule(which=st.integers(0, 4))
    def restart(self, which):
        self.sim.restart(self.sim.ids[which % len(self.sim.ids)])

    @rule(which=st.integers(0, 4))
    def snapshot(self, which):
        self.sim.snapshot(self.sim.ids[which % len(self.sim.ids)])

    @precondition(lambda self: self.sim.leader() is not None)
    @rule(which=st.integers(0, 4))
    def step_down(self, which):
        leader = self.sim.leader()
        target = self.sim.ids[which % len(self.sim.ids)]
        self.sim.handle(leader, self.sim.nodes[leader].step_down(preferred=target))

    @invariant()
    def commit_never_passes_the_log(self):
        for node in self.sim.nodes.values():
            assert node.commit <= node.pindex and node.applied <= node.commit

    def teardown(self):
        if not hasattr(self, "sim"):
            return
        # Heal: everything delivered, time passing. A leader must emerge,
        # take a new entry and every node must apply the same list.
        sim = self.sim
        sim.run(40)
        assert sim.leader() is not None, {i: (n.state, n.term) for i, n in sim.nodes.items()}
        sim.propose(b"final")
        sim.run(20)
        ok, states = converged(sim)
        assert ok, states
        assert all(s and s[-1] == b"final" for s in states.values()), states


# `make chaos` raises the count (RAFT_CHAOS_EXAMPLES) and draws fresh examples.
Chaos.TestCase.settings = settings(max_examples=int(os.environ.get("RAFT_CHAOS_EXAMPLES", 100)),
                                   stateful_step_count=30, deadline=None,
                                   suppress_health_check=[HealthCheck.too_slow])
test_chaos = Chaos.TestCase
