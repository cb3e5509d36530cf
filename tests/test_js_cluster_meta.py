"""The meta group's state (natsbroker.jetstream.cluster.meta): assignments
applied from entries and snapshots as nats-server's applyMetaEntries and
applyMetaSnapshot apply them."""

import json

from natsbroker.jetstream.cluster.entries import (
    ClientInfo,
    ConsumerAssignment,
    EntryOp,
    RaftGroup,
    StreamAssignment,
    encode_meta_entry,
)
from natsbroker.jetstream.cluster.meta import MetaState


def sa(name, acc="APP", peers=("aaaaaaaa",), created="2026-11-29T00:00:00Z", group=None, subjects=None):
    cfg = {"name": name, "subjects": subjects or [name.lower() + ".>"], "storage": "file", "num_replicas": len(peers)}
    return StreamAssignment(client=ClientInfo(acc=acc), created=created, config_json=json.dumps(cfg),
                            group=RaftGroup(name=group or "S-R%dF-%s" % (len(peers), name), peers=list(peers)),
                            sync="$JSC.SYNC.x")


def ca(stream, name, acc="APP", peers=("aaaaaaaa",)):
    return ConsumerAssignment(client=ClientInfo(acc=acc), created="2026-11-29T00:00:00Z", name=name,
                              stream=stream, config_json=json.dumps({"durable_name": name}),
                              group=RaftGroup(name="C-R1F-" + name, peers=list(peers)))


def kinds(changes):
    return [(c.kind, c.account, c.stream, c.consumer) for c in changes]


def test_streams_and_consumers_come_and_go():
    m = MetaState()
    assert kinds(m.apply_entry(encode_meta_entry(EntryOp.ASSIGN_STREAM, sa("ORDERS")))) == \
        [("stream_added", "APP", "ORDERS", "")]
    assert kinds(m.apply_entry(encode_meta_entry(EntryOp.ASSIGN_CONSUMER, ca("ORDERS", "C1")))) == \
        [("consumer_added", "APP", "ORDERS", "C1")]
    # A consumer of a stream the group does not know is dropped.
    assert m.apply_entry(encode_meta_entry(EntryOp.ASSIGN_CONSUMER, ca("NOPE", "C1"))) == []
    assert kinds(m.apply_entry(encode_meta_entry(EntryOp.UPDATE_STREAM, sa("ORDERS", subjects=["o.>"])))) == \
        [("stream_updated", "APP", "ORDERS", "")]
    assert m.stream("APP", "ORDERS").config["subjects"] == ["o.>"]
    assert [c.name for c in m.stream_consumers("APP", "ORDERS")] == ["C1"]
    assert kinds(m.apply_entry(encode_meta_entry(EntryOp.REMOVE_STREAM, sa("ORDERS")))) == \
        [("consumer_removed", "APP", "ORDERS", "C1"), ("stream_removed", "APP", "ORDERS", "")]
    assert m.streams == {}


def test_the_owner_is_the_service_account_when_there_is_one():
    m = MetaState()
    rec = sa("X")
    rec.client = ClientInfo(acc="CLIENT", svc="OWNER")
    m.apply_entry(encode_meta_entry(EntryOp.ASSIGN_STREAM, rec))
    assert m.stream("OWNER", "X") is not None and m.stream("CLIENT", "X") is None


def test_snapshot_round_trip_and_apply_as_a_diff():
    m = MetaState()
    for name in ("A", "B", "C"):
        m.apply_entry(encode_meta_entry(EntryOp.ASSIGN_STREAM, sa(name, peers=("aaaaaaaa", "bbbbbbbb"))))
    m.apply_entry(encode_meta_entry(EntryOp.ASSIGN_CONSUMER, ca("A", "D1")))
    data = m.snapshot()
    other = MetaState()
    other.apply_entry(encode_meta_entry(EntryOp.ASSIGN_STREAM, sa("GONE")))
    other.apply_entry(encode_meta_entry(EntryOp.ASSIGN_STREAM, sa("B", peers=("aaaaaaaa", "bbbbbbbb"))))
    changes = kinds(other.apply_snapshot(data))
    assert ("stream_removed", "APP", "GONE", "") in changes
    assert ("stream_added", "APP", "A", "") in changes and ("stream_added", "APP", "C", "") in changes
    assert ("consumer_added", "APP", "A", "D1") in changes
    assert not any(c[2] == "B" for c in changes)  # unchanged: nothing to do
    assert sorted(k for k in other.streams) == [("APP", "A"), ("APP", "B"), ("APP", "C")]
    assert other.snapshot() == data
    assert MetaState().snapshot() == b""


def test_groups_of_a_peer():
    m = MetaState()
    m.apply_entry(encode_meta_entry(EntryOp.ASSIGN_STREAM, sa("A", peers=("aaaaaaaa", "bbbbbbbb"))))
    m.apply_entry(encode_meta_entry(EntryOp.ASSIGN_STREAM, sa("B", peers=("cccccccc",))))
    m.apply_entry(encode_meta_entry(EntryOp.ASSIGN_CONSUMER, ca("B", "D", peers=("bbbbbbbb",))))
    assert sorted(x.group.name for x in m.groups_of("bbbbbbbb")) == ["C-R1F-D", "S-R2F-A"]
