"""A node's ``/raftz`` entry, as nats-server's monitor.go ``RaftzGroup``.

A plugin that runs Raft groups (JetStream, or a third party's) lists them
through ``interfaces.IRaftGroups``; the monitor gathers the entries by
account and group name and serves them at ``/raftz``.
"""

from natsbroker.cluster.raft.node import State
from natsbroker.gocompat.durations import format_duration
from natsbroker.gocompat.times import ZERO_TIME, rfc3339

_STATES = {State.FOLLOWER: "FOLLOWER", State.CANDIDATE: "CANDIDATE", State.LEADER: "LEADER",
           State.CLOSED: "CLOSED"}


def group_status(node, now, name_of=lambda peer: peer, system_account=True,
                 traffic_account="$SYS"):
    """``node`` (a :class:`~natsbroker.cluster.raft.node.Node`) as a
    RaftzGroup dict, fields in nats-server's order, its ``omitempty`` ones
    only when set. ``now``: the node's clock now (seconds, the same clock:
    last-seen durations and ``leader_since`` derive from it);
    ``name_of(peer)``: a peer's server name.

    Not kept by this Raft, so never shown set: ``paused`` and ``overrun``
    (nats-server's apply-queue back-pressure), the ``ipq_*`` queue lengths
    (no queues: a node's input is handled as it arrives, so 0), and the WAL's
    ``first_ts``/``last_ts`` (its records carry no time: Go's zero time)."""
    st = node.storage
    first, last = st.first_index, st.last_index
    msgs = last - first + 1 if last >= first else 0
    out = {"id": node.id, "state": _STATES.get(node.state, "UNKNOWN"), "size": node.csz,
           "quorum_needed": node.qn}
    if node.observer:
        out["observer"] = True
    out["committed"] = node.commit
    out["applied"] = node.applied
    if node.catchup is not None:
        out["catching_up"] = True
    if node.leader:
        out["leader"] = node.leader
    if node.leader_since is not None and node.state == State.LEADER:
        out["leader_since"] = rfc3339(int(node.leader_since * 1e9))
    out["ever_had_leader"] = bool(node.pleader)
    out["term"] = node.term
    if node.vote:
        out["voted_for"] = node.vote
    out["pterm"] = node.pterm
    out["pindex"] = node.pindex
    out["system_account"] = bool(system_account)
    out["traffic_account"] = traffic_account
    out["ipq_proposal_len"] = len(node.proposals)
    out["ipq_entry_len"] = 0
    out["ipq_resp_len"] = 0
    out["ipq_apply_len"] = 0
    out["wal"] = {"messages": msgs, "bytes": st.wal_bytes() if msgs else 0,
                  "first_seq": first if msgs else last + 1, "first_ts": ZERO_TIME,
                  "last_seq": last, "last_ts": ZERO_TIME, "consumer_count": 0}
    peers = {}
    mc = node.memb_change
    for peer, p in sorted(node.peers.items()):
        if peer == node.id:
            continue
        entry = {"name": name_of(peer), "known": mc is None or mc.peer != peer}
        if p.li:
            entry["last_replicated_index"] = p.li
        if p.ts is not None:
            entry["last_seen"] = format_duration(max(0, int((now - p.ts) * 1e9)))
        peers[peer] = entry
    out["peers"] = peers
    return out
