"""One member of an NRG group: nats-server's Raft, as a sans-IO state machine.

The node never touches a socket, a timer or the reactor. Its inputs are the
messages that arrive on its subjects (:meth:`Node.receive`), the passing of
time (:meth:`Node.tick`, with the clock it was given) and the upper layer's
calls (propose, step down, snapshot); its outputs are effects, returned from
each call: messages to send, subjects to subscribe to and to drop, committed
entries to apply, leadership changes and log lines. A Twisted adapter
(:mod:`natsbroker.cluster.raft.transport`) carries the effects over the
``$NRG.>`` subjects; the tests carry them through a simulated network that
loses, reorders, duplicates and restarts.

Behaviour follows nats-server's server/raft.go (v2.14) step by step, since
nats-server peers must not be able to tell this node from one of their own:

* an index counts AppendEntries, not the entries inside them;
* a follower acknowledges only AppendEntries that arrive live on
  ``$NRG.AE.<group>`` and answers with its own (pterm, pindex); the leader
  counts an acknowledgement only for the exact index and only when that
  pterm is its current term, and commits every index up to one a quorum
  holds (its own copy included);
* a follower that finds a gap asks for a catch-up by answering with the
  reply subject of a fresh ``$NRG.CR.<inbox>``; the leader streams stored
  AppendEntries there (re-encoded with ``lterm``), first a
  ``[Snapshot, PeerState]`` entry when its WAL no longer reaches back;
* terms, votes and WAL appends reach storage (durably) before the vote or
  acknowledgement that depends on them is sent.

Times are in seconds on the node's clock.
"""

import enum

import attrs

from natsbroker.cluster.raft.storage import Snapshot, StorageError
from natsbroker.cluster.raft.wire import (
    ID_LEN,
    AppendEntry,
    AppendEntryResponse,
    Entry,
    EntryType,
    PeerState,
    VoteRequest,
    VoteResponse,
    WireError,
    quorum,
)

# raft.go's timers.
MIN_ELECTION_TIMEOUT = 4.0
MAX_ELECTION_TIMEOUT = 9.0
MIN_CAMPAIGN_TIMEOUT = 0.1
MAX_CAMPAIGN_TIMEOUT = 0.8
HEARTBEAT_INTERVAL = 1.0
LOST_QUORUM_INTERVAL = 10.0
OBSERVER_INTERVAL = 48 * 3600.0
PEER_REMOVE_TIMEOUT = 300.0
CATCHUP_STALL = 2.0
TRANSFER_CAMPAIGN = 0.01
# A leader's batching of proposals into one AppendEntry, and its catch-up window.
MAX_BATCH_BYTES = 256 * 1024
MAX_BATCH_ENTRIES = 512
CATCHUP_WINDOW = 2 * 1024 * 1024

_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


class State(enum.Enum):
    FOLLOWER = "follower"
    CANDIDATE = "candidate"
    LEADER = "leader"
    CLOSED = "closed"


# -- effects ----------------------------------------------------------------

@attrs.frozen
class Send:
    """Publish ``payload`` on ``subject`` (in the group's account)."""

    subject: str
    reply: str
    payload: bytes


@attrs.frozen
class Subscribe:
    subject: str


@attrs.frozen
class Unsubscribe:
    subject: str


@attrs.frozen
class Committed:
    """Entries committed at ``index`` for the upper layer to apply, in index
    order (Normal, Snapshot, AddPeer and RemovePeer entries; possibly none)."""

    index: int
    entries: tuple


@attrs.frozen
class LeaderChange:
    """Leadership changed. ``is_leader`` turns true only once this node's
    first entry as leader is applied, as nats-server tells its upper layer."""

    is_leader: bool
    leader: str
    term: int


@attrs.frozen
class Log:
    level: str  # "debug", "notice", "warning", "error"
    text: str


class NotLeader(Exception):
    """A call only a leader may make."""


class MembershipChanging(Exception):
    """A peer is being added or removed: one change at a time."""


class PeerNotFound(Exception):
    """No such peer in the group."""


class RemoveLastNode(Exception):
    """The last peer of a group cannot be removed."""


@attrs.define
class _Peer:
    ts: float = None  # last heard from (None: never, or reset)
    li: int = 0  # last index it acknowledged


@attrs.define
class _MembChange:
    index: int
    peer: str
    prev: _Peer = None  # set for a removal: what to put back on truncation


@attrs.define
class _Catchup:
    """A follower's catch-up in progress: the inbox the leader streams to
    and the target the AppendEntry that revealed the gap named."""

    inbox: str
    cterm: int
    cindex: int
    pindex: int
    active: float


@attrs.define
class _Progress:
    """A leader's catch-up of one follower."""

    reply: str
    next: int
    last: int
    deadline: float
    total: int = 0
    outstanding: dict = attrs.field(factory=dict)


class Node:
    """A member of the NRG group ``group`` with the 8-character id ``node_id``.

    ``storage`` holds the durable state (see :mod:`.storage`); ``clock()``
    returns the time in seconds; ``rng`` is a ``random.Random`` for the
    election timeouts and inbox names. ``peers`` and ``cluster_size`` seed a
    new group's membership (ignored when storage already has a peer state).
    ``recovering``: the server is restarting with this group on disk (not a
    group just created); ``scale_up``: the group grew to include this node,
    which waits as an observer until the leader has sent it data.
    """

    def __init__(self, group, node_id, storage, clock, rng, peers=(), cluster_size=0,
                 observer=False, recovering=False, scale_up=False):
        if len(node_id) != ID_LEN:
            raise ValueError("a peer id is %d characters" % ID_LEN)
        self.group = group
        self.id = node_id
        self.storage = storage
        self.clock = clock
        self.rng = rng
        self.observer = observer
        self.vsubj = "$NRG.V.%s" % group
        self.asubj = "$NRG.AE.%s" % group
        self.psubj = "$NRG.P.%s" % group
        self.rpsubj = "$NRG.RP.%s" % group
        self.vreply = self._new_inbox("$NRG.R.")
        self.areply = self._new_inbox("$NRG.R.")

        self.state = State.FOLLOWER
        self.leader = ""
        self.leader_ready = False
        self.pleader = False  # has the group ever had a leader (as this node knows)
        self.leader_since = None  # clock() when this node's leadership became ready
        self.term, self.vote = storage.load_term_vote()
        self.pterm = self.pindex = 0
        self.commit = self.applied = 0
        self.papplied = 0  # the snapshot's index
        self.peers = {}
        self.csz = 0
        self.qn = 1
        self.ext = 0
        self.removed = {}
        self.memb_change = None
        self.lsut = None  # last scale-up time
        self.active = None  # when the leader last stored entries
        self.lxfer = False
        self.aflr = 0
        self.acks = {}
        self.progress = {}
        self.catchup = None
        self.votes = set()
        self.empty_votes = set()
        self.proposals = []  # (Entry, reply) queued for the next AppendEntry
        self.elect_at = None
        self.hb_at = None
        self.lq_at = None
        self._out = []
        self._started = False
        self.recovering = recovering
        self.scale_up = False
        self.initializing = False
        self._scale_up_wanted = scale_up

        stored = storage.load_peer_state()
        if stored is not None:
            ps = PeerState.decode(stored)
            self.csz, self.ext = ps.cluster_size, ps.ext
            self.peers = {p: _Peer() for p in ps.peers}
        else:
            self.peers = {p: _Peer() for p in peers}
            self.csz = max(cluster_size, len(self.peers))
            self._write_peer_state()
        self.qn = quorum(self.csz)

    # -- upper-layer API ------------------------------------------------

    def start(self):
        """Subscribe, restore the log and arm the election timer."""
        self._started = True
        for subject in (self.vsubj, self.asubj, self.vreply, self.areply):
            self._emit(Subscribe(subject))
        self._restore()
        self._reset_election_timeout()
        if not self.recovering and self.pindex == 0:
            # A new member with an empty log: its votes count as those of a
            # member with data until the leader has sent it some.
            self.initializing = True
            if self._scale_up_wanted and not self.observer:
                self.scale_up = True
                self.observer = True
        return self._take()

    def stop(self):
        subjects = [self.vsubj, self.asubj, self.vreply, self.areply]
        if self.state == State.LEADER:
            subjects += [self.psubj, self.rpsubj]
        if self.catchup is not None:
            subjects.append(self.catchup.inbox)
        for subject in subjects:
            self._emit(Unsubscribe(subject))
        self.state = State.CLOSED
        return self._take()

    @property
    def is_leader(self):
        return self.state == State.LEADER

    @property
    def quorum(self):
        return self.qn

    @property
    def cluster_size(self):
        return self.csz

    def peer_state(self):
        return PeerState(self.csz, sorted(self.peers), self.ext)

    def next_deadline(self):
        """When :meth:`tick` next has something to do (None: nothing)."""
        times = [t for t in (self.elect_at, self.hb_at, self.lq_at) if t is not None]
        times += [p.deadline for p in self.progress.values()]
        return min(times) if times else None

    def tick(self):
        if self.state == State.CLOSED:
            return self._take()
        now = self.clock()
        if self.state == State.LEADER:
            for peer, prog in list(self.progress.items()):
                if now >= prog.deadline:
                    self._debug("Catching up for %r stalled" % peer)
                    self._end_catchup(peer, prog)
            if self.hb_at is not None and now >= self.hb_at:
                self.hb_at = now + HEARTBEAT_INTERVAL
                if self.active is None or now - self.active > HEARTBEAT_INTERVAL:
                    self._send_heartbeat()
            if self.lq_at is not None and now >= self.lq_at:
                self.lq_at = now + LOST_QUORUM_INTERVAL
                if self._lost_quorum():
                    self._notice("Lost quorum, stepping down")
                    self._step_down("")
        elif self.elect_at is not None and now >= self.elect_at:
            self._election_timeout()
        return self._take()

    def receive(self, subject, reply, payload):
        """A message on one of the node's subjects."""
        if self.state == State.CLOSED:
            return self._take()
        try:
            if subject == self.asubj:
                self._on_append_entry(AppendEntry.decode(payload), reply, "new")
            elif self.catchup is not None and subject == self.catchup.inbox:
                self._on_append_entry(AppendEntry.decode(payload), reply, "catchup")
            elif subject == self.vsubj:
                self._on_vote_request(VoteRequest.decode(payload), reply)
            elif subject == self.vreply:
                self._on_vote_response(VoteResponse.decode(payload))
            elif subject == self.areply:
                if self.state == State.LEADER:
                    self._on_append_entry_response(AppendEntryResponse.decode(payload), reply)
            elif subject == self.psubj:
                self._on_forwarded_proposal(payload, reply)
            elif subject == self.rpsubj:
                self._on_forwarded_remove_peer(payload, reply)
        except WireError as e:
            self._warn("Received malformed NRG message on %s: %s" % (subject, e))
        return self._take()

    def propose(self, data, flush=True):
        """Propose a Normal entry (leader only). Queued proposals go out in
        AppendEntries of up to 512 entries / 256 KiB on :meth:`flush`."""
        self._require_leader()
        self.proposals.append((Entry(EntryType.NORMAL, bytes(data)), ""))
        if flush:
            self._flush_proposals()
        return self._take()

    def flush(self):
        if self.state == State.LEADER:
            self._flush_proposals()
        return self._take()

    def forward_proposal(self, data):
        """Propose from any member: a non-leader forwards to ``$NRG.P``."""
        if self.state == State.LEADER:
            return self.propose(data)
        self._emit(Send(self.psubj, "", bytes(data)))
        return self._take()

    def propose_add_peer(self, peer):
        self._require_leader()
        if self.memb_change is not None:
            raise MembershipChanging(peer)
        self._send_membership_change(Entry(EntryType.ADD_PEER, peer.encode()))
        return self._take()

    def propose_remove_peer(self, peer):
        if self.state != State.LEADER:
            self._emit(Send(self.rpsubj, "", peer.encode()))
            return self._take()
        if self.memb_change is not None:
            raise MembershipChanging(peer)
        if peer not in self.peers:
            raise PeerNotFound(peer)
        if len(self.peers) <= 1:
            raise RemoveLastNode(peer)
        self._send_membership_change(Entry(EntryType.REMOVE_PEER, peer.encode()))
        return self._take()

    def update_known_peers(self, peers):
        """UpdateKnownPeers: the membership the layer above assigned (a
        JetStream meta leader moving a stream), taken as a peer state: peers
        left out are marked removed, new ones tracked, the quorum follows."""
        self._process_peer_state(PeerState(len(peers), sorted(peers), self.ext))
        return self._take()

    def propose_known_peers(self, peers):
        """ProposeKnownPeers: as leader, take ``peers`` and send them as a
        PeerState entry, so that the group's log holds the change (a new
        member replaying it must not fall back to the old membership)."""
        if self.state != State.LEADER:
            return self._take()
        self._process_peer_state(PeerState(len(peers), sorted(peers), self.ext))
        self._send_append_entry([Entry(EntryType.PEER_STATE, self.peer_state().encode())])
        return self._take()

    def step_down(self, preferred="", healthy=None):
        """Step down, handing leadership to ``preferred`` (or to the first
        healthy peer) with a LeaderTransfer entry. ``healthy(peer)`` says
        whether a peer is online; a peer must also have been heard from in
        the last 3 heartbeats."""
        self._require_leader()
        self._transfer_and_step_down(preferred, healthy)
        return self._take()

    def _transfer_and_step_down(self, preferred="", healthy=None):
        now = self.clock()

        def ok(peer):
            p = self.peers.get(peer)
            return (p is not None and p.ts is not None and now - p.ts < 3 * HEARTBEAT_INTERVAL
                    and (healthy is None or healthy(peer)))

        target = preferred if preferred and preferred != self.id and ok(preferred) else ""
        if not target:
            target = next((p for p in self.peers if p != self.id and ok(p)), "")
        if preferred and not target:
            self._debug("Can not transfer to preferred peer %r" % preferred)
        if target:
            self._send_append_entry([Entry(EntryType.LEADER_TRANSFER, target.encode())])
        self._step_down("")

    def campaign(self, immediately=False):
        """Start an election soon (100-800 ms; 50 ms when ``immediately``)."""
        if self.state == State.LEADER:
            return self._take()
        if immediately:
            self._reset_initializing()
            self._reset_elect(MIN_CAMPAIGN_TIMEOUT / 2)
        else:
            self._reset_elect(self.rng.uniform(MIN_CAMPAIGN_TIMEOUT, MAX_CAMPAIGN_TIMEOUT))
        return self._take()

    def set_observer(self, observer):
        self.observer = observer
        return self._take()

    def install_snapshot(self, data):
        """Keep ``data`` as the upper layer's state as of the last applied
        index, and compact the WAL through it."""
        if self.applied == 0 or self.applied <= self.papplied:
            raise ValueError("nothing applied since the last snapshot")
        term = self.storage.term_at(self.applied)
        if term is None:
            raise StorageError("no WAL entry at applied index %d" % self.applied)
        snap = Snapshot(term, self.applied, self._committed_peer_state(self.applied).encode(), bytes(data))
        self.storage.save_snapshot(snap)
        self.papplied = snap.last_index
        return self._take()

    def send_snapshot(self, data):
        """Append a lone Snapshot entry (a leader scaling a group up): a
        follower without a snapshot of its own installs it at commit."""
        self._send_append_entry([Entry(EntryType.SNAPSHOT, bytes(data))])
        return self._take()

    # -- plumbing -------------------------------------------------------

    def _reset_initializing(self):
        self.initializing = False
        if self.scale_up:
            self.scale_up = False
            self.observer = False

    def _take(self):
        out, self._out = self._out, []
        return out

    def _emit(self, effect):
        self._out.append(effect)

    def _debug(self, text):
        self._emit(Log("debug", text))

    def _notice(self, text):
        self._emit(Log("notice", text))

    def _warn(self, text):
        self._emit(Log("warning", text))

    def _new_inbox(self, prefix):
        return prefix + "".join(self.rng.choice(_BASE62) for _ in range(ID_LEN))

    def _require_leader(self):
        if self.state != State.LEADER:
            raise NotLeader(self.group)

    def _send(self, subject, reply, payload):
        if subject:
            self._emit(Send(subject, reply, payload))

    def _save_term_vote(self):
        self.storage.save_term_vote(self.term, self.vote)

    def _write_peer_state(self):
        self.storage.save_peer_state(PeerState(self.csz, sorted(self.peers), self.ext).encode())

    def _reset_election_timeout(self):
        self._reset_elect(self.rng.uniform(MIN_ELECTION_TIMEOUT, MAX_ELECTION_TIMEOUT))

    def _reset_elect(self, after):
        self.elect_at = self.clock() + after

    # -- restart --------------------------------------------------------

    def _restore(self):
        """Rebuild pterm/pindex, tentative membership and the commits the
        WAL records, as nats-server replays its WAL at start-up."""
        snap = self.storage.load_snapshot()
        if snap is not None:
            self.pterm, self.pindex = snap.last_term, snap.last_index
            self.commit = self.applied = self.papplied = snap.last_index
            self._emit(Committed(snap.last_index, (Entry(EntryType.SNAPSHOT, snap.data),)))
        first, last = self.storage.first_index, self.storage.last_index
        if first > last and last > self.pindex:
            # Compacted past everything without a snapshot we can read.
            self.pindex = last
        commit = self.commit
        for index in range(first, last + 1):
            rec = self.storage.entry(index)
            if rec is None:
                raise StorageError("WAL of %s has no entry at %d (first %d, last %d)"
                                   % (self.group, index, first, last))
            ae = AppendEntry.decode(rec[1])
            self.pterm, self.pindex = rec[0], index
            self._track_membership_entries(ae)
            commit = max(commit, min(ae.commit, index))
        for index in range(self.commit + 1, commit + 1):
            if not self._apply_commit(index):
                break

    # -- timers ---------------------------------------------------------

    def _election_timeout(self):
        if self.state == State.FOLLOWER:
            if self.observer:
                self._reset_elect(OBSERVER_INTERVAL)
                return
            if self.catchup is not None:
                if self._catchup_stalled():
                    self._cancel_catchup()
                self._reset_election_timeout()
                return
        self._switch_to_candidate()

    @property
    def has_quorum(self):
        """Has this node heard from a quorum lately (itself included)?"""
        return not self._lost_quorum()

    def _lost_quorum(self):
        now = self.clock()
        if self.lsut is not None and now - self.lsut < LOST_QUORUM_INTERVAL:
            return False
        heard = sum(1 for peer, p in self.peers.items()
                    if peer == self.id or (p.ts is not None and now - p.ts < LOST_QUORUM_INTERVAL))
        return heard < self.qn

    # -- state switches -------------------------------------------------

    def _switch_state(self, state):
        was = self.state
        if was == State.CLOSED:
            return
        self.state = state
        self._reset_election_timeout()
        if was == State.LEADER and state != State.LEADER:
            self._emit(Unsubscribe(self.psubj))
            self._emit(Unsubscribe(self.rpsubj))
            self.hb_at = self.lq_at = None
            self.progress.clear()
            self.proposals.clear()
            self.leader_ready = False
            self.leader_since = None
            self._emit(LeaderChange(False, self.leader, self.term))
        self._save_term_vote()

    def _step_down(self, new_leader):
        self.aflr = 0
        self.lxfer = False
        self.acks.clear()
        self._update_leader(new_leader)
        self._switch_state(State.FOLLOWER)

    def _update_leader(self, new_leader):
        was_leader = self.leader == self.id
        self.leader = new_leader
        if new_leader:
            self.pleader = True
        if new_leader != self.id and not was_leader:
            for peer, p in self.peers.items():
                p.li = 0
                if peer != new_leader:
                    p.ts = None

    def _switch_to_candidate(self):
        if self.state == State.CLOSED:
            return
        if self.observer or self.applied < self.commit:
            self._reset_elect(MIN_ELECTION_TIMEOUT / 4)
            return
        if self.memb_change is not None and self.memb_change.peer == self.id:
            self._reset_elect(MIN_ELECTION_TIMEOUT)
            return
        self.term += 1
        self.vote = ""
        self._update_leader("")
        self._switch_state(State.CANDIDATE)
        # requestVote: the self-vote is durable before anyone hears of it.
        self.vote = self.id
        self._save_term_vote()
        self.votes, self.empty_votes = set(), set()
        self._send(self.vsubj, self.vreply,
                   VoteRequest(self.term, self.pterm, self.pindex, self.id).encode())
        self._count_vote(VoteResponse(self.term, self.id, True, False))

    def _switch_to_leader(self):
        self.lxfer = False
        self._update_leader(self.id)
        self._switch_state(State.LEADER)
        self._emit(Subscribe(self.psubj))
        self._emit(Subscribe(self.rpsubj))
        now = self.clock()
        self.hb_at = now + HEARTBEAT_INTERVAL
        self.lq_at = now + LOST_QUORUM_INTERVAL
        # The first entry, a no-op in effect: leadership is announced once
        # it (and so everything before it) is applied.
        self._send_append_entry([Entry(EntryType.PEER_STATE, self.peer_state().encode())])
        self.aflr = self.pindex
        self._check_leader_ready()

    def _check_leader_ready(self):
        if self.aflr and self.applied >= self.aflr:
            self.aflr = 0
            if self.state == State.LEADER and not self.leader_ready:
                self.leader_ready = True
                self.leader_since = self.clock()
                self._emit(LeaderChange(True, self.id, self.term))

    # -- votes ----------------------------------------------------------

    def _on_vote_request(self, vr, reply):
        resp = VoteResponse(self.term, self.id, False, self.pindex == 0)
        if vr.term < self.term:
            self._send(reply, "", resp.encode())
            return
        if vr.term > self.term:
            if self.state != State.FOLLOWER:
                self._debug("Stepping down from %s, detected higher term: %d vs %d"
                            % (self.state.value, vr.term, self.term))
                self._step_down("")
            self._cancel_catchup()
            self.term = vr.term
            self.vote = ""
            self._save_term_vote()
        vote_ok = self.vote in ("", vr.candidate)
        if vote_ok and resp.empty and self.initializing:
            resp.empty = False
        if vote_ok and (vr.last_term > self.pterm
                        or (vr.last_term == self.pterm and vr.last_index >= self.pindex)):
            self.term = vr.term
            self.vote = vr.candidate
            self._save_term_vote()
            resp.granted = True
            self._reset_election_timeout()
        elif self.vote == "" and self.state != State.CANDIDATE:
            # Our log is further along: campaign sooner.
            self._reset_elect(self.rng.uniform(MIN_CAMPAIGN_TIMEOUT, MAX_CAMPAIGN_TIMEOUT))
        resp.term = self.term
        self._send(reply, "", resp.encode())

    def _on_vote_response(self, vr):
        if self.state == State.CANDIDATE:
            self._count_vote(vr)
        elif self.state == State.LEADER and vr.term > self.term:
            self._step_down("")

    def _should_count_vote(self, peer):
        return peer in self.peers or len(self.peers) < self.csz

    def _count_vote(self, vr):
        if vr.granted and vr.term == self.term:
            self._track_peer(vr.peer)
            if self._should_count_vote(vr.peer):
                (self.empty_votes if vr.empty else self.votes).add(vr.peer)
            if len(self.votes) >= self.qn or len(self.votes) + len(self.empty_votes) == self.csz:
                self._switch_to_leader()
        elif vr.term > self.term:
            self._debug("Stepping down from candidate, detected higher term: %d vs %d"
                        % (vr.term, self.term))
            self.term = vr.term
            self.vote = ""
            self._save_term_vote()
            self.lxfer = False
            self._step_down("")

    # -- the follower's side of AppendEntry ------------------------------

    def _on_append_entry(self, ae, reply, sub):
        if not self.lxfer:
            self._reset_election_timeout()
        lterm = ae.lterm or ae.term
        if self.state == State.LEADER:
            if lterm >= self.term:
                if lterm > self.term:
                    self.term, self.vote = lterm, ""
                    self._save_term_vote()
                else:
                    self._warn("Two leaders using the same term %d: %r" % (self.term, ae.leader))
                self._debug("Received append entry from another leader, stepping down to %r" % ae.leader)
                self._step_down(ae.leader)
            else:
                self._send(reply, "", AppendEntryResponse(self.term, self.pindex, self.id, False).encode())
                return
        if self.state == State.CANDIDATE and lterm >= self.term:
            if lterm > self.term:
                self.term, self.vote = lterm, ""
                self._save_term_vote()
            self._step_down(ae.leader)

        catching_up = self.catchup is not None
        is_new = sub == "new"

        if lterm > self.term:
            self.term, self.vote = lterm, ""
            if is_new:
                self._save_term_vote()
            if self.state != State.FOLLOWER:
                self._step_down(ae.leader)
        elif lterm < self.term and (is_new or ae.lterm != 0):
            if not is_new:
                return
            self._send(reply, "", AppendEntryResponse(self.term, self.pindex, self.id, False).encode())
            return

        if catching_up:
            cs = self.catchup
            if self.pterm >= cs.cterm and self.pindex >= cs.cindex:
                self._cancel_catchup()
                catching_up = False
            elif is_new:
                if self._catchup_stalled():
                    self._debug("Catchup may be stalled, will request again")
                    inbox = self._create_catchup(ae)
                    self._send(reply, inbox,
                               AppendEntryResponse(self.pterm, self.pindex, self.id, False).encode())
                return

        if is_new and self.leader != ae.leader and self.state == State.FOLLOWER:
            self._update_leader(ae.leader)
            self._save_term_vote()
            self._reset_election_timeout()
            self._emit(LeaderChange(False, ae.leader, self.term))

        if is_new and ae.leader and ae.leader == self.leader:
            p = self.peers.get(ae.leader)
            if p is not None:
                p.ts = self.clock()

        if ae.pterm != self.pterm or ae.pindex != self.pindex:
            if ae.pindex <= self.pindex:
                if not self._reconcile(ae, is_new):
                    return
            elif catching_up:
                self._install_leader_snapshot(ae)
                return
            else:
                self._debug("AppendEntry did not match [%d:%d] with [%d:%d]"
                            % (ae.pterm, ae.pindex, self.pterm, self.pindex))
                inbox = self._create_catchup(ae)
                self._send(reply, inbox, AppendEntryResponse(self.pterm, self.pindex, self.id, False).encode())
                return

        # It follows our last entry: store it. (Not a snapshot catch-up head:
        # one that follows our log exactly is a copy of one installed.)
        if _is_snapshot_catchup(ae):
            return
        if ae.entries:
            self.storage.append(self.pindex + 1, ae.term, ae.encode())
            self.pterm, self.pindex = ae.term, self.pindex + 1
            self._reset_initializing()
        for e in ae.entries:
            if e.type == EntryType.LEADER_TRANSFER:
                if is_new and e.data.decode("latin-1") == self.id:
                    if not self.observer:
                        self.lxfer = True
                        if self.state != State.LEADER:
                            self._reset_elect(TRANSFER_CAMPAIGN)
            elif e.type in (EntryType.ADD_PEER, EntryType.REMOVE_PEER):
                self._track_membership_entry(e, self.pindex)

        if ae.commit > self.commit:
            for index in range(self.commit + 1, ae.commit + 1):
                if not self._apply_commit(index):
                    break

        if is_new:
            self._send(reply, "", AppendEntryResponse(self.pterm, self.pindex, self.id, True).encode())

    def _reconcile(self, ae, is_new):
        """An AppendEntry at or before our last entry that does not follow
        it. True when the WAL was truncated so that ``ae`` now follows it;
        otherwise nothing is answered (an answer could claim quorum for a log
        that is not up to date)."""
        success = False
        if ae.pindex < self.commit:
            success = True
        else:
            rec = self.storage.entry(ae.pindex) if ae.pindex else None
            if rec is None:
                if ae.pterm == self.pterm and is_new:
                    success = True
                elif ae.pindex == self.pindex:
                    self._truncate_wal(ae.pterm, ae.pindex)
                else:
                    snap = self.storage.load_snapshot()
                    if snap is not None and snap.last_index == ae.pindex and snap.last_term == ae.pterm:
                        if _is_snapshot_catchup(ae) or self._stale_copy(ae):
                            return False  # the snapshot we installed, or a replay
                        self._truncate_wal(snap.last_term, snap.last_index)
                        if ae.pterm == self.pterm and ae.pindex == self.pindex:
                            return True
                    else:
                        self._reset_wal()
            elif rec[0] == ae.pterm:
                # Our log matches the leader's at ae.pindex and goes further.
                # nats-server truncates here whatever follows; on a network
                # that can replay or reorder a message (a route reconnecting),
                # a stale AppendEntry from the current leader would then drop
                # entries this node already acknowledged, which may be
                # committed. Truncate only what the sender's term shows is not
                # in its log: entries of an older term than the AppendEntry's.
                # (Same index and term means the same entry.)
                if self._stale_copy(ae):
                    return False
                self._truncate_wal(ae.pterm, ae.pindex)
                if ae.pterm == self.pterm and ae.pindex == self.pindex:
                    return True
            else:
                eae = AppendEntry.decode(rec[1])
                if eae.pindex < self.commit:
                    success = True
                    self._warn("Truncate to earlier entry would lose commits")
                else:
                    self._truncate_wal(eae.pterm, eae.pindex)
        if not success:
            self._cancel_catchup()
        return False

    def _stale_copy(self, ae):
        """Is ``ae`` (which matches our log at ae.pindex, our log going
        further) a copy of what we hold, or older than it? Same index and term
        means the same entry; a heartbeat no newer than our last entry is
        stale."""
        if ae.entries:
            return self.storage.term_at(ae.pindex + 1) == ae.term
        return self.pterm >= ae.term

    def _install_leader_snapshot(self, ae):
        if not _is_snapshot_catchup(ae):
            self._warn("Expected first catchup entry to be a snapshot and peerstate, will retry")
            self._cancel_catchup()
            return
        try:
            ps = PeerState.decode(ae.entries[1].data)
        except WireError:
            self._warn("Could not parse snapshot peerstate correctly")
            self._cancel_catchup()
            return
        self._process_peer_state(ps)
        snap = Snapshot(ae.pterm, ae.pindex, self.peer_state().encode(), bytes(ae.entries[0].data))
        self.storage.truncate(0)
        self.storage.save_snapshot(snap)
        self.pindex = self.commit = ae.pindex
        self.pterm = ae.pterm
        self.papplied = ae.pindex
        self._reset_initializing()
        self._emit(Committed(self.commit, (ae.entries[0],)))
        self.applied = self.commit

    def _track_membership_entries(self, ae):
        for e in ae.entries:
            if e.type in (EntryType.ADD_PEER, EntryType.REMOVE_PEER):
                self._track_membership_entry(e, self.pindex)

    def _track_membership_entry(self, e, index):
        # Tentative until committed; undone if the entry is truncated away.
        peer = e.data.decode("latin-1")
        if len(peer) != ID_LEN:
            return
        if e.type == EntryType.ADD_PEER:
            self.memb_change = _MembChange(index, peer)
            self.peers.setdefault(peer, _Peer())
        else:
            self.memb_change = _MembChange(index, peer, self.peers.get(peer) or _Peer())
            self.peers.pop(peer, None)
        self._adjust_cluster_size()

    # -- catching up (follower) -------------------------------------------

    def _create_catchup(self, ae):
        if self.catchup is not None:
            self._emit(Unsubscribe(self.catchup.inbox))
        inbox = self._new_inbox("$NRG.CR.")
        self.catchup = _Catchup(inbox, ae.pterm, ae.pindex, self.pindex, self.clock())
        self._emit(Subscribe(inbox))
        return inbox

    def _cancel_catchup(self):
        if self.catchup is not None:
            self._emit(Unsubscribe(self.catchup.inbox))
            self.catchup = None

    def _catchup_stalled(self):
        cs = self.catchup
        if cs is None:
            return False
        if cs.pindex == self.pindex:
            return self.clock() - cs.active > CATCHUP_STALL
        cs.pindex, cs.active = self.pindex, self.clock()
        return False

    # -- the WAL --------------------------------------------------------

    def _truncate_wal(self, term, index):
        self._debug("Truncating and repairing WAL to Term %d Index %d" % (term, index))
        if index < self.commit:
            self._warn("WAL truncate lost commits: index %d, commit %d" % (index, self.commit))
        self.storage.truncate(index)
        self.pterm, self.pindex = term, index
        if index == 0:
            self.papplied = 0
        self.commit = min(self.commit, self.pindex)
        self.applied = min(self.applied, self.commit)
        mc = self.memb_change
        if mc is not None and mc.index > index:
            if mc.prev is not None:
                self.peers[mc.peer] = mc.prev
                self.removed.pop(mc.peer, None)
            else:
                self.peers.pop(mc.peer, None)
            self._adjust_cluster_size()
            self._write_peer_state()
            self.memb_change = None

    def _reset_wal(self):
        self._truncate_wal(0, 0)

    def _apply_commit(self, index):
        """Commit ``index`` and hand its entries up. False when the WAL
        does not hold it."""
        if index <= self.commit:
            return True
        if self.state == State.LEADER:
            self.acks.pop(index, None)
        if index <= self.papplied:
            self.commit = index
            return True
        rec = self.storage.entry(index)
        if rec is None:
            return False
        ae = AppendEntry.decode(rec[1])
        self.commit = index
        committed = []
        removed_self = False
        for e in ae.entries:
            if e.type == EntryType.NORMAL:
                committed.append(e)
            elif e.type == EntryType.OLD_SNAPSHOT:
                committed.append(Entry(EntryType.SNAPSHOT, e.data))
            elif e.type == EntryType.SNAPSHOT:
                committed.append(e)
                if len(ae.entries) == 1 and self.storage.load_snapshot() is None and ae.commit > 0:
                    # A leader's snapshot on the live path (scale-up): ours now.
                    self.storage.save_snapshot(Snapshot(
                        ae.pterm, ae.commit, self._committed_peer_state(ae.commit).encode(), bytes(e.data)))
                    self.papplied = max(self.papplied, ae.commit)
            elif e.type == EntryType.PEER_STATE:
                if self.state != State.LEADER:
                    try:
                        self._process_peer_state(PeerState.decode(e.data))
                    except WireError:
                        self._warn("Could not parse peer state at index %d" % index)
            elif e.type == EntryType.ADD_PEER:
                self._add_peer(e.data.decode("latin-1"))
                committed.append(e)
                self.memb_change = None
            elif e.type == EntryType.REMOVE_PEER:
                peer = e.data.decode("latin-1")
                self._remove_peer(peer)
                committed.append(e)
                self.memb_change = None
                removed_self = peer == self.id and self.state == State.LEADER
        self._emit(Committed(index, tuple(committed)))
        self.applied = index
        self._check_leader_ready()
        if removed_self:
            # Removed while leading: hand over, then leave the group.
            self._transfer_and_step_down()
            # (stop() hands back and replaces self._out: taken first, then kept)
            stopped = self.stop()
            self._out.extend(stopped)
            return False
        return True

    # -- membership -----------------------------------------------------

    def _process_peer_state(self, ps):
        self.csz = ps.cluster_size
        self.qn = quorum(self.csz)
        old = self.peers
        self.peers = {}
        for peer in ps.peers:
            self.peers[peer] = old.pop(peer, None) or _Peer()
            self.removed.pop(peer, None)
        now = self.clock()
        for peer in old:
            self.removed[peer] = now
        self.ext = ps.ext
        self.storage.save_peer_state(ps.encode())

    def _adjust_cluster_size(self):
        before, after = self.csz, len(self.peers)
        self.csz = after
        self.qn = quorum(after)
        if after > before:
            self.lsut = self.clock()
        elif after < before and self.state == State.LEADER:
            self._send_heartbeat()

    def _add_peer(self, peer):
        self.removed.pop(peer, None)
        self.peers.setdefault(peer, _Peer())
        self._adjust_cluster_size()
        self._write_peer_state()

    def _remove_peer(self, peer):
        self.removed[peer] = self.clock()
        self.peers.pop(peer, None)
        self._adjust_cluster_size()
        self._write_peer_state()

    def _committed_peer_state(self, index):
        mc = self.memb_change
        if mc is None or mc.index <= index:
            return self.peer_state()
        names = set(self.peers)
        if mc.prev is not None:
            names.add(mc.peer)
        else:
            names.discard(mc.peer)
        return PeerState(len(names), sorted(names), self.ext)

    def _track_peer(self, peer):
        now = self.clock()
        removed_at = self.removed.get(peer)
        is_removed = removed_at is not None and now - removed_at < PEER_REMOVE_TIMEOUT
        if self.state == State.LEADER and peer not in self.peers and not is_removed:
            if self.memb_change is None:
                self._send_membership_change(Entry(EntryType.ADD_PEER, peer.encode()))
        p = self.peers.get(peer)
        if p is not None:
            p.ts = now

    # -- the leader's side ------------------------------------------------

    def _send_append_entry(self, entries):
        ae = AppendEntry(self.id, self.term, self.commit, self.pterm, self.pindex, list(entries))
        encoded = ae.encode()
        if entries:
            self.storage.append(self.pindex + 1, self.term, encoded)
            self.pterm, self.pindex = self.term, self.pindex + 1
            self.active = self.clock()
        self._send(self.asubj, self.areply, encoded)
        if self.csz == 1:
            self._try_commit(self.pindex)

    def _send_heartbeat(self):
        if self.state == State.LEADER:
            self._send_append_entry([])

    def _send_membership_change(self, entry):
        if self.memb_change is not None:
            return False
        peer = entry.data.decode("latin-1")
        prev = self.peers.get(peer)
        if (entry.type == EntryType.ADD_PEER) == (prev is not None):
            return False
        self.memb_change = _MembChange(self.pindex + 1, peer, prev)
        self._send_append_entry([entry])
        if entry.type == EntryType.ADD_PEER:
            if peer not in self.peers:
                self.peers[peer] = _Peer()
                self._adjust_cluster_size()
        else:
            if self.peers.pop(peer, None) is not None:
                self._adjust_cluster_size()
            if self.csz == 1:
                self._try_commit(self.pindex)
        return True

    def _flush_proposals(self):
        queued, self.proposals = self.proposals, []
        batch, size = [], 0
        for entry, _reply in queued:
            batch.append(entry)
            size += len(entry.data) + 1
            if size >= MAX_BATCH_BYTES or len(batch) >= MAX_BATCH_ENTRIES:
                self._send_append_entry(batch)
                batch, size = [], 0
                if self.state != State.LEADER:
                    return
        if batch:
            self._send_append_entry(batch)
        for _entry, reply in queued:
            if reply:
                self._send(reply, "", b"")

    def _on_forwarded_proposal(self, payload, reply):
        if self.state != State.LEADER or not self.leader_ready:
            self._debug("Ignoring forwarded proposal, not leader")
            return
        self.proposals.append((Entry(EntryType.NORMAL, bytes(payload)), reply))
        self._flush_proposals()

    def _on_forwarded_remove_peer(self, payload, reply):
        if len(payload) != ID_LEN:
            self._warn("Received invalid peer name for remove proposal: %r" % bytes(payload))
            return
        peer = bytes(payload).decode("latin-1")
        if (self.state != State.LEADER or not self.leader_ready or self.memb_change is not None
                or peer not in self.peers or len(self.peers) <= 1):
            return
        self._send_membership_change(Entry(EntryType.REMOVE_PEER, payload))
        self._send(reply, "", b"")

    def _on_append_entry_response(self, ar, reply):
        self._track_peer(ar.peer)
        if ar.success:
            if self._track_response(ar) and self._try_commit(ar.index) and not self.proposals:
                self._send_heartbeat()
        elif reply:
            self._catchup_follower(ar, reply)
        elif ar.term > self.term:
            self.term, self.vote = ar.term, ""
            self._save_term_vote()
            self._warn("Detected another leader with higher term, will stepdown")
            self._step_down("")

    def _track_response(self, ar):
        if self.state != State.LEADER:
            return False
        p = self.peers.get(ar.peer)
        if p is not None and ar.index > p.li:
            p.li = ar.index
        prog = self.progress.get(ar.peer)
        if prog is not None:
            self._catchup_progress(ar.peer, prog, ar.index)
        if ar.index <= self.commit or ar.term != self.term or p is None:
            return False
        self.acks.setdefault(ar.index, set()).add(ar.peer)
        return True

    def _try_commit(self, index):
        acks = len(self.acks.get(index, ()))
        if self.id in self.peers:
            acks += 1
        if acks < self.qn:
            return False
        for i in range(self.commit + 1, index + 1):
            if not self._apply_commit(i):
                return False
        return True

    # -- catching a follower up (leader) ---------------------------------

    def _catchup_follower(self, ar, reply):
        self._debug("Being asked to catch up follower: %r" % ar.peer)
        self.progress.pop(ar.peer, None)
        start = ar.index + 1
        first, last = self.storage.first_index, self.storage.last_index
        empty = first > last
        if start < first or (empty and start <= last):
            snap = self.storage.load_snapshot()
            if snap is None:
                self._warn("Error sending snapshot to follower [%s]: no snapshot" % ar.peer)
                self._step_down("")
                return
            ae = AppendEntry(self.id, self.term, self.commit, snap.last_term, snap.last_index,
                             [Entry(EntryType.SNAPSHOT, snap.data),
                              Entry(EntryType.PEER_STATE, snap.peer_state)])
            if snap.last_index < first - 1:
                ae.pindex = first - 1
            self._send(reply, self.areply, ae.encode())
            start = ae.pindex + 1
            if empty or start > last:
                self._end_catchup(ar.peer, None)
                return
        if self.storage.entry(start) is None:
            if start > last:
                self._warn("Request from follower for entry at index [%d] beyond our state" % start)
                self._step_down("")
                return
            start = first
        prog = _Progress(reply, start - 1, self.pindex, self.clock() + CATCHUP_STALL)
        self.progress[ar.peer] = prog
        if self._send_next(prog):
            self._end_catchup(ar.peer, prog)

    def _send_next(self, prog):
        """Stream stored AppendEntries up to the window. True when done."""
        while prog.total <= CATCHUP_WINDOW:
            prog.next += 1
            if prog.next > prog.last:
                return True
            rec = self.storage.entry(prog.next)
            if rec is None:
                return True
            ae = AppendEntry.decode(rec[1])
            encoded = rec[1]
            if ae.lterm != self.term:
                ae.lterm = self.term
                encoded = ae.encode()
            prog.outstanding[prog.next] = len(encoded)
            prog.total += len(encoded)
            self._send(prog.reply, self.areply, encoded)
        return False

    def _catchup_progress(self, peer, prog, index):
        prog.deadline = self.clock() + CATCHUP_STALL
        prog.total -= prog.outstanding.pop(index, 0)
        if index > prog.last or self._send_next(prog):
            self._debug("Finished catching up")
            self._end_catchup(peer, prog)

    def _end_catchup(self, peer, prog):
        if prog is not None and self.progress.get(peer) is prog:
            del self.progress[peer]
        if peer not in self.peers and self.state == State.LEADER and self.memb_change is None:
            self._debug("Catchup done for %r, will add into peers" % peer)
            self._send_membership_change(Entry(EntryType.ADD_PEER, peer.encode()))


def _is_snapshot_catchup(ae):
    """A leader's ``[Snapshot, PeerState]`` catch-up head: installed, never
    stored as a log entry."""
    return (len(ae.entries) == 2 and ae.entries[0].type == EntryType.SNAPSHOT
            and ae.entries[1].type == EntryType.PEER_STATE)
