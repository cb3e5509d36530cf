"""What JetStream's cluster layer puts in NRG entries
(natsbroker.jetstream.cluster.entries): byte vectors derived from nats-server
v2.14.5's jetstream_cluster.go, consumer.go, store.go, filestore.go and
avl/seqset.go; hypothesis round trips; garbage refused with EntryError only;
and a live oracle: every Normal entry a three-node nats-server cluster
replicates while a stream and a consumer live and die, decoded and (where
nats-server's encoding is deterministic) encoded back byte for byte."""

import asyncio
import json
import random
import struct

import nats
import nats.js.errors
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from natsbroker.cluster import s2
from natsbroker.cluster.raft.wire import AppendEntry, EntryType
from natsbroker.jetstream.cluster.entries import (
    Acks,
    BatchMsg,
    ClientInfo,
    ConsumerAssignment,
    ConsumerState,
    DeletedSet,
    DeleteRange,
    Delivered,
    EntryError,
    EntryOp,
    MsgDelete,
    PendingRequest,
    RaftGroup,
    ResetSeq,
    Skip,
    StreamAssignment,
    StreamMsg,
    StreamPurge,
    StreamSnapshot,
    decode_consumer_state,
    decode_entry,
    decode_meta_entry,
    decode_meta_snapshot,
    decode_stream_snapshot,
    encode_consumer_state,
    encode_entry,
    encode_meta_entry,
    encode_meta_snapshot,
    encode_stream_msg,
    encode_stream_snapshot,
)
from tests.support.servers import ServerProcess, free_port

U64 = st.integers(0, 2**64 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
TEXT = st.text(max_size=12)


# -- vectors ---------------------------------------------------------------------

def test_entry_op_numbering():
    # jetstream_cluster.go: the iota list, appended to only
    assert [op.value for op in EntryOp] == list(range(19))
    assert EntryOp.COMPRESSED_STREAM_MSG == 14 and EntryOp.RESET_SEQ == 18
    assert EntryOp.ASSIGN_COMPRESSED_CONSUMER == 9 and EntryOp.UPDATE_STREAM == 11


def test_stream_msg_layout():
    # encodeStreamMsgAllowCompressAndBatch: op, lseq u64, ts u64, u16 subject,
    # u16 reply, u16 hdr, u32 msg, uvarint flags (always written)
    m = StreamMsg("a.b", "r", b"NATS/1.0\r\n\r\n", b"hi", lseq=7, ts=-1, flags=1)
    want = (b"\x04" + struct.pack("<QQ", 7, 2**64 - 1) + b"\x03\x00a.b" + b"\x01\x00r"
            + b"\x0c\x00NATS/1.0\r\n\r\n" + b"\x02\x00\x00\x00hi" + b"\x01")
    assert encode_stream_msg(m) == want
    assert decode_entry(want) == (EntryOp.STREAM_MSG, m)
    assert m.sourced
    # the flags varint is optional; 26 bytes is the least body decodeStreamMsg takes
    bare = b"\x04" + bytes(16) + bytes(10)
    assert decode_entry(bare)[1] == StreamMsg("", "", b"", b"", 0, 0, 0)
    with pytest.raises(EntryError):
        decode_entry(bare[:-1])


def test_stream_msg_compression_rule():
    small = StreamMsg("s", msg=b"x" * 8192)          # total 8193 > 8192: tried
    assert encode_stream_msg(small)[0] == EntryOp.COMPRESSED_STREAM_MSG
    edge = StreamMsg("", msg=b"x" * 8192)            # total 8192: never
    assert encode_stream_msg(edge)[0] == EntryOp.STREAM_MSG
    assert encode_stream_msg(small, compress=False)[0] == EntryOp.STREAM_MSG
    # random bytes do not shrink: sent plain (only pay for decoding if it paid off)
    rnd = random.Random(1)
    noise = StreamMsg("s", msg=rnd.randbytes(9000), lseq=rnd.getrandbits(63), ts=rnd.getrandbits(63))
    assert encode_stream_msg(noise) == encode_stream_msg(noise, compress=False)
    packed = encode_stream_msg(small)
    assert packed[1:] == s2.encode_block(encode_stream_msg(small, compress=False)[1:])
    assert decode_entry(packed)[1] == small


def test_batch_layout():
    # op 16/17, u16 id length, id, uvarint batch seq, then a whole op 4 record
    m = StreamMsg("x", msg=b"1", lseq=3)
    enc = encode_stream_msg(m, batch_id="B", batch_seq=300, commit=True)
    assert enc[:6] == b"\x11\x01\x00B\xac\x02" and enc[6:] == encode_stream_msg(m)
    assert decode_entry(enc) == (EntryOp.BATCH_COMMIT_MSG, BatchMsg("B", 300, m, commit=True))
    assert encode_entry(EntryOp.BATCH_COMMIT_MSG, decode_entry(enc)[1]) == enc
    assert encode_stream_msg(m, batch_id="B", batch_seq=1)[0] == EntryOp.BATCH_MSG


def test_json_records_end_with_the_encoder_newline():
    # json.NewEncoder(&bb).Encode(x): compact JSON then "\n"
    dr = encode_entry(EntryOp.DELETE_RANGE, DeleteRange(5, 10))
    assert dr == b'\x0f{"First":5,"Num":10}\n'
    md = encode_entry(EntryOp.DELETE_MSG, MsgDelete(stream="S", seq=2, subject="$JS.API.X", reply="_INBOX.<1>"))
    assert md == b'\x06{"stream":"S","seq":2,"subject":"$JS.API.X","reply":"_INBOX.\\u003c1\\u003e"}\n'
    sp = encode_entry(EntryOp.PURGE_STREAM, StreamPurge(client=ClientInfo(acc="A"), stream="S", last_seq=9))
    assert sp == b'\x05{"client":{"acc":"A"},"stream":"S","last_seq":9,"subject":"","reply":""}\n'
    # Go matches keys case-blind
    assert decode_entry(b'\x0f{"first":1,"NUM":2}')[1] == DeleteRange(1, 2)


def test_assignment_layout():
    sa = StreamAssignment(client=ClientInfo(acc="APP", tags=["a"]), created="2026-11-29T00:00:00.5Z",
                          config_json='{"name":"S","subjects":["s.>"]}',
                          group=RaftGroup("S-R3F-x", ["p1", "p2"], "memory", preferred="p1"),
                          sync="$JSC.SYNC.abcdefgh", subject="$JS.API.STREAM.CREATE.S", reply="r")
    want = (b'\x00{"client":{"acc":"APP","tags":["a"]},"created":"2026-11-29T00:00:00.5Z",'
            b'"stream":{"name":"S","subjects":["s.>"]},'
            b'"group":{"name":"S-R3F-x","peers":["p1","p2"],"store":"memory","preferred":"p1"},'
            b'"sync":"$JSC.SYNC.abcdefgh","subject":"$JS.API.STREAM.CREATE.S","reply":"r"}\n')
    assert encode_meta_entry(EntryOp.ASSIGN_STREAM, sa) == want
    assert decode_meta_entry(want) == (EntryOp.ASSIGN_STREAM, sa)
    assert sa.name == "S" and sa.client.account == "APP"
    # a field we do not model survives a round trip; an unset group is null
    odd = b'\x01{"created":"0001-01-01T00:00:00Z","name":"c","stream":"S","consumer":null,"group":null,"new":[1]}\n'
    op, ca = decode_meta_entry(odd)
    assert ca.unknown == {"new": "[1]"} and encode_meta_entry(op, ca) == odd
    for bad in (b'\x00{"group":{"store":"disk"}}', b'\x00{"stream":[]}', b'\x01null', b'\x00{"sync":1}',
                b'\x00{} {}', b'\x02{"client":{"id":-1}}'):
        with pytest.raises(EntryError):
            decode_meta_entry(bad)


def test_compressed_consumer_assignment():
    ca = ConsumerAssignment(name="D", stream="S", config_json='{"durable_name":"D"}', group=RaftGroup("C-R3F-y"))
    enc = encode_meta_entry(EntryOp.ASSIGN_COMPRESSED_CONSUMER, ca)
    assert enc[0] == 9 and s2.decode_stream(enc[1:]).endswith(b"}\n")
    assert decode_meta_entry(enc) == (EntryOp.ASSIGN_COMPRESSED_CONSUMER, ca)


def test_meta_snapshot_layout():
    assert encode_meta_snapshot([]) == b"" and decode_meta_snapshot(b"") == []
    ca = ConsumerAssignment(client=ClientInfo(acc="A", user="u"), name="c", stream="S", config_json="{}",
                            group=RaftGroup("C"), subject="x", state='{"delivered":{}}')
    sa = StreamAssignment(client=ClientInfo(acc="A", svc="B", name="n", cluster="c"), config_json='{"name":"S"}',
                          group=RaftGroup("G"), sync="y", subject="z", consumers=[ca])
    snap = encode_meta_snapshot([sa])
    # writeableStreamAssignment: client cut to acc/svc/cluster; Consumers untagged
    assert s2.decode_block(snap) == (
        b'[{"client":{"acc":"A","svc":"B","cluster":"c"},"created":"0001-01-01T00:00:00Z",'
        b'"stream":{"name":"S"},"group":{"name":"G","peers":[],"store":"file"},"sync":"y",'
        b'"Consumers":[{"client":{"acc":"A"},"created":"0001-01-01T00:00:00Z","name":"c","stream":"S",'
        b'"consumer":{},"group":{"name":"C","peers":[],"store":"file"}}]}]')
    (back,) = decode_meta_snapshot(snap)
    assert back.consumers[0].name == "c" and back.subject == ""
    # a consumer without a stream name takes the stream's
    raw = b'[{"stream":{"name":"S"},"group":null,"sync":"","Consumers":[{"name":"c","consumer":{}}]}]'
    assert decode_meta_snapshot(s2.encode_block(raw))[0].consumers[0].stream == "S"
    with pytest.raises(EntryError):
        decode_meta_snapshot(s2.encode_block(b'[{"stream":{"name":"S"},"Consumers":[null]}]'))


def test_consumer_op_layouts():
    # consumer.go: uvarints, then a zigzag varint ts
    assert encode_entry(7, Delivered(1, 300, 2, -1)) == b"\x07\x01\xac\x02\x02\x01"
    assert encode_entry(8, Acks(1, 2)) == b"\x08\x01\x02"
    assert encode_entry(10, Skip(5)) == b"\x0a" + struct.pack("<Q", 5)
    assert encode_entry(12, PendingRequest("_INBOX.x")) == b"\x0c_INBOX.x"
    assert encode_entry(13, PendingRequest("r", add=False)) == b"\x0dr"
    assert encode_entry(18, ResetSeq(9, "rep")) == b"\x12" + struct.pack("<Q", 9) + b"rep"
    assert decode_entry(b"\x0a" + struct.pack("<Q", 5) + b"junk")[1] == Skip(5)
    for bad in (b"\x07\x01\x02\x03", b"\x08\x01", b"\x0a1234567", b"\x12", b"\x08\x80"):
        with pytest.raises(EntryError):
            decode_entry(bad)


def test_stream_snapshot_layout():
    snap = StreamSnapshot(10, 1000, 3, 20, 1, 8, [DeleteRange(5, 3), DeletedSet((9, 11, 12))])
    enc = encode_stream_snapshot(snap)
    # 42,1; uvarints; run-length blocks 33, first, num (a set written as its runs)
    assert enc == bytes([42, 1, 10, 0xE8, 0x07, 3, 20, 1, 8, 33, 5, 3, 33, 9, 1, 33, 11, 2])
    back = decode_stream_snapshot(enc)
    assert back.deleted_seqs() == [5, 6, 7, 9, 11, 12] and back.failed == 1
    # an AVL seqset block (v2): 22,2, u32 nodes, u32 count, pre-order nodes of
    # u64 base, 32 u64 words, u16 height
    bits = [0] * 32
    bits[0] = 1 << 5 | 1 << 6
    bits[1] = 1
    node = struct.pack("<Q", 2048) + struct.pack("<32Q", *bits) + struct.pack("<H", 1)
    avl = bytes([22, 2]) + struct.pack("<II", 1, 3) + node
    # msgs 0, bytes 0, first 1, last 3000 (uvarint b8 17), failed 0, 3 deleted
    got = decode_stream_snapshot(bytes([42, 1, 0, 0, 1]) + b"\xb8\x17\x00\x03" + avl)
    assert got.deleted == [DeletedSet((2053, 2054, 2112))]
    # version 1 sets: 64 words, the count checked
    v1 = bytes([22, 1]) + struct.pack("<II", 1, 1) + struct.pack("<Q", 0) + struct.pack("<64Q", 2, *[0] * 63) + b"\0\0"
    assert decode_stream_snapshot(bytes([42, 1, 0, 0, 0, 0, 0, 1]) + v1).deleted == [DeletedSet((1,))]
    # no deletes counted: trailing bytes ignored
    assert decode_stream_snapshot(bytes([42, 1, 1, 1, 1, 1, 0, 0, 99])).deleted == []
    legacy = decode_stream_snapshot(b'{"messages":2,"bytes":3,"first_seq":1,"last_seq":4,"clfs":0,"deleted":[2,3]}')
    assert legacy.legacy and legacy.deleted_seqs() == [2, 3] and legacy.last_seq == 4
    for bad in (bytes([42, 1, 0]), bytes([42, 1, 0, 0, 0, 0, 0, 1, 7]), bytes([42, 1, 0, 0, 0, 0, 0, 1, 33, 1]),
                bytes([42, 1, 0, 0, 0, 0, 0, 1, 22, 2, 1, 0, 0, 0, 0, 0, 0, 0]), b"{", b"[]"):
        with pytest.raises(EntryError):
            decode_stream_snapshot(bad)


def test_consumer_state_layout():
    st_ = ConsumerState((2, 10), (5, 14), {12: (3, 1_000_000_000_000), 14: (5, 999_000_000_000)}, {12: 3})
    enc = encode_consumer_state(st_, now_s=1000)
    # 22,2; afc, afs, dc, ds, nPending; varint base; per pending sseq-afs,
    # dseq-afc, varint base-secs; nRedelivered; seq-afs, count
    assert enc == bytes([22, 2, 2, 10, 5, 14, 2, 0xD0, 0x0F, 2, 1, 0, 4, 3, 2, 1, 2, 3])
    assert decode_consumer_state(enc) == st_
    assert decode_consumer_state(bytes([22, 2, 0, 0, 0, 0, 0, 0])) == ConsumerState()
    # version 1: delivered stored as "next", no dseq, ts added to the base
    v1 = decode_consumer_state(bytes([22, 1, 3, 4, 2, 2, 1, 20, 1, 2, 0]))
    assert v1.delivered == (4, 5) and v1.pending == {5: (0, 11_000_000_000)}  # zigzag: base 10, ts 1
    for bad in (b"", bytes([21, 2]), bytes([22, 3, 0]), bytes([22, 2, 0, 0, 0]),
                bytes([22, 2, 0, 0, 0, 0, 1, 0]), bytes([22, 2, 0, 0, 0, 0, 1, 0, 0, 0, 0]),
                bytes([22, 2, 0]) + b"\xff" * 9 + b"\x01"):
        with pytest.raises(EntryError):
            decode_consumer_state(bad)


# -- round trips and garbage ------------------------------------------------------

NAMES = st.text("abcXYZ09-_.<>&\u00e9", max_size=10)
CLIENTS = st.none() | st.builds(ClientInfo, acc=NAMES, svc=NAMES, user=NAMES, id=U64, rtt=I64,
                                tags=st.none() | st.lists(NAMES, min_size=1, max_size=2),
                                start=st.none() | st.just("2026-01-02T03:04:05.123456789Z"))
GROUPS = st.none() | st.builds(RaftGroup, name=NAMES, peers=st.lists(NAMES, max_size=3),
                               store=st.sampled_from(["file", "memory"]), cluster=NAMES, preferred=NAMES,
                               scale_up=st.booleans())
CONFIGS = st.dictionaries(NAMES, st.integers(0, 99) | NAMES, max_size=3).map(
    lambda d: json.dumps(d, separators=(",", ":")))
SAS = st.builds(StreamAssignment, client=CLIENTS, created=st.just("2026-01-01T00:00:00Z"), config_json=CONFIGS,
                group=GROUPS, sync=NAMES, subject=NAMES, reply=NAMES,
                restore_state=st.none() | st.just('{"messages":1}'))
CAS = st.builds(ConsumerAssignment, client=CLIENTS, name=NAMES, stream=NAMES, config_json=CONFIGS,
                group=GROUPS, subject=NAMES, reply=NAMES, state=st.none() | st.just('{"delivered":{}}'))
MSGS = st.builds(StreamMsg, NAMES, NAMES, st.binary(max_size=20), st.binary(max_size=9000) | st.just(b"a" * 9000),
                 U64, I64, st.integers(0, 3))


@given(st.sampled_from([0, 2, 11]), SAS)
def test_stream_assignment_round_trip(op, sa):
    enc = encode_meta_entry(op, sa)
    assert decode_meta_entry(enc) == (op, sa)
    assert enc.endswith(b"\n")


@given(st.sampled_from([1, 3, 9]), CAS)
def test_consumer_assignment_round_trip(op, ca):
    assert decode_meta_entry(encode_meta_entry(op, ca)) == (op, ca)


@settings(max_examples=30, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(SAS, max_size=3), st.lists(CAS, max_size=2))
def test_meta_snapshot_round_trip(sas, cas):
    sas = [s.__class__(client=s.client and s.client.for_assignment_snap(), created=s.created,
                       config_json=s.config_json, group=s.group, sync=s.sync,
                       consumers=[c.__class__(client=c.client and c.client.for_assignment_snap(), name=c.name,
                                              stream=c.stream or "x", config_json=c.config_json, group=c.group)
                                  for c in cas]) for s in sas]
    back = decode_meta_snapshot(encode_meta_snapshot(sas))
    for s in back:
        s.client = None if s.client == ClientInfo() else s.client
        for c in s.consumers:
            c.client = None if c.client == ClientInfo() else c.client
    for s in sas:
        s.client = None if s.client == ClientInfo() else s.client
        for c in s.consumers:
            c.client = None if c.client == ClientInfo() else c.client
    assert back == sas


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(MSGS, st.booleans(), st.none() | st.tuples(NAMES.filter(bool), U64, st.booleans()))
def test_stream_msg_round_trip(m, compress, batch):
    if batch:
        enc = encode_stream_msg(m, compress, batch[0], batch[1], batch[2])
        op, rec = decode_entry(enc)
        assert (rec.batch_id, rec.batch_seq, rec.commit, rec.msg) == (*batch, m)
    else:
        assert decode_entry(encode_stream_msg(m, compress))[1] == m


@given(st.one_of(
    st.tuples(st.just(5), st.builds(StreamPurge, client=CLIENTS, stream=NAMES, last_seq=U64, subject=NAMES,
                                    reply=NAMES, request=st.none() | st.just('{"filter":"a"}'))),
    st.tuples(st.just(6), st.builds(MsgDelete, client=CLIENTS, stream=NAMES, seq=U64, no_erase=st.booleans(),
                                    subject=NAMES, reply=NAMES)),
    st.tuples(st.just(15), st.builds(DeleteRange, U64, U64)),
    st.tuples(st.just(7), st.builds(Delivered, U64, U64, U64, I64)),
    st.tuples(st.just(8), st.builds(Acks, U64, U64)),
    st.tuples(st.just(10), st.builds(Skip, U64)),
    st.tuples(st.just(12), st.builds(PendingRequest, NAMES, st.just(True))),
    st.tuples(st.just(13), st.builds(PendingRequest, NAMES, st.just(False))),
    st.tuples(st.just(18), st.builds(ResetSeq, U64, NAMES)),
))
def test_other_ops_round_trip(pair):
    op, rec = pair
    assert decode_entry(encode_entry(op, rec)) == (op, rec)


@given(U64, U64, U64, U64, U64, st.lists(st.integers(1, 5000), max_size=40))
def test_stream_snapshot_round_trip(msgs, nbytes, first, last, failed, deleted):
    snap = StreamSnapshot(msgs, nbytes, first, last, failed, len(set(deleted)), [DeletedSet(tuple(sorted(set(deleted))))])
    back = decode_stream_snapshot(encode_stream_snapshot(snap))
    assert back.deleted_seqs() == sorted(set(deleted)) and back.msgs == msgs and back.failed == failed


@given(st.integers(0, 2**40), st.integers(0, 2**40), st.integers(0, 2**30), st.integers(0, 2**30),
       st.dictionaries(st.integers(1, 1000), st.tuples(st.integers(0, 1000), st.integers(0, 2**40).map(lambda s: s * 10**9)),
                       max_size=5),
       st.dictionaries(st.integers(1, 1000), st.integers(1, 50), max_size=5), st.integers(0, 2**40))
def test_consumer_state_round_trip(afc, afs, dd, ds, pending, redelivered, now):
    state = ConsumerState((afc, afs), (afc + dd, afs + ds),
                          {afs + k: (afc + d, t) for k, (d, t) in pending.items()},
                          {afs + k: n for k, n in redelivered.items()})
    assert decode_consumer_state(encode_consumer_state(state, now_s=now)) == state


@settings(max_examples=400)
@given(st.binary(max_size=80), st.integers(0, 20))
def test_garbage_raises_only_entry_error(data, op):
    for blob in (bytes([op]) + data, data):
        for decode in (decode_entry, decode_stream_snapshot, decode_consumer_state, decode_meta_snapshot):
            try:
                decode(blob)
            except EntryError:
                pass
    # structured garbage: valid magic, random rest
    for head in (bytes([42, 1]), bytes([22, 2]), bytes([22, 1])):
        for decode in (decode_stream_snapshot, decode_consumer_state):
            try:
                decode(head + data)
            except EntryError:
                pass


@given(st.sampled_from([0, 1, 3, 5, 6, 11, 15]), st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(
        st.sampled_from(["client", "group", "stream", "name", "peers", "store", "seq", "First", "x"]), c, max_size=4),
    max_leaves=10))
def test_json_garbage_raises_only_entry_error(op, value):
    try:
        decode_entry(bytes([op]) + json.dumps(value).encode())
    except EntryError:
        pass


# -- live oracle -------------------------------------------------------------------

NODES = ("ent-a", "ent-b", "ent-c")
BIG = b"compressible " * 1000   # 13 KB: op 14


def _conf(tmp_path, name, port, routes):
    path = tmp_path / ("%s.conf" % name)
    path.write_text("""server_name: %s
listen: 127.0.0.1:-1
jetstream { store_dir: %s }
cluster { name: ent, listen: 127.0.0.1:%d, routes: %s }
accounts {
  SYS { users [ {user: sys, password: pw} ] }
  APP { jetstream: enabled, users [ {user: app, password: pw} ] }
}
system_account: SYS
""" % (name, json.dumps(str(tmp_path / name)), port, json.dumps(["nats://127.0.0.1:%d" % p for p in routes])))
    return ["-c", str(path)]


def test_decodes_what_a_nats_server_cluster_replicates(tmp_path):
    ports = [free_port() for _ in NODES]
    nodes = []
    try:
        for name, port in zip(NODES, ports):
            nodes.append(ServerProcess("nats-server", _conf(tmp_path, name, port, ports)).start(60))
        captured, facts = asyncio.run(_drive(nodes))
    finally:
        for n in nodes:
            n.stop()

    seen = {}          # (group kind, op) -> [records]
    for subject, data in captured:
        group = subject.split(".", 2)[2]
        kind = "meta" if group == "_meta_" else group[0]
        ae = AppendEntry.decode(data)
        for e in ae.entries:
            if e.type == EntryType.SNAPSHOT:
                seen.setdefault((kind, "snapshot"), []).append(e.data)
                _decode_snapshot(kind, e.data)
                continue
            if e.type != EntryType.NORMAL:
                continue
            op, rec = decode_entry(e.data)
            if kind == "meta":
                assert op in (0, 1, 2, 3, 9, 11), op
            elif kind == "S":
                assert op in (4, 5, 6, 14, 15, 16, 17), op
            else:
                assert op in (7, 8, 10, 12, 13, 18), op
            _check_reencodes(op, rec, e.data)
            seen.setdefault((kind, op), []).append(rec)

    # meta: the stream's create, update and delete; the consumer's create, delete
    created = seen[("meta", EntryOp.ASSIGN_STREAM)]
    assert created[0].name == "ORD" and created[0].config["subjects"] == ["ord.>"]
    assert created[0].group.name.startswith("S-R3F-") and len(created[0].group.peers) == 3
    assert created[0].client.account == "APP" and created[0].stream_config().num_replicas == 3
    assert seen[("meta", EntryOp.UPDATE_STREAM)][-1].config["subjects"] == ["ord.>", "more.>"]
    assert seen[("meta", EntryOp.REMOVE_STREAM)][-1].name == "ORD"
    ca = seen[("meta", EntryOp.ASSIGN_CONSUMER)][0]
    assert (ca.name, ca.stream, ca.consumer_config().durable_name) == ("DUR", "ORD", "DUR")
    assert ca.group.name.startswith("C-R3F-")
    assert seen[("meta", EntryOp.REMOVE_CONSUMER)][-1].name == "DUR"
    # the project's StreamConfig / ConsumerConfig models write nats-server's
    # config JSON exactly: what we propose holds only fields nats-server knows
    for op in (EntryOp.ASSIGN_STREAM, EntryOp.UPDATE_STREAM, EntryOp.REMOVE_STREAM):
        for sa in seen[("meta", op)]:
            assert StreamAssignment.with_config(sa.stream_config()).config_json == sa.config_json
    for op in (EntryOp.ASSIGN_CONSUMER, EntryOp.REMOVE_CONSUMER):
        for ca in seen[("meta", op)]:
            assert ConsumerAssignment.with_config(ca.consumer_config()).config_json == ca.config_json
    # stream: the messages (the big one compressed), the delete, the purge
    msgs = seen[("S", EntryOp.STREAM_MSG)] + seen[("S", EntryOp.COMPRESSED_STREAM_MSG)]
    by_subject = {m.subject: m for m in msgs}
    assert by_subject["ord.small"].msg == b"hello" and b"X-Test: 1" in by_subject["ord.small"].hdr
    assert by_subject["ord.big"].msg == BIG and b"X-Big: yes" in by_subject["ord.big"].hdr
    assert seen[("S", EntryOp.COMPRESSED_STREAM_MSG)][0].subject == "ord.big"
    assert [m.lseq for m in sorted(msgs, key=lambda m: m.lseq)] == list(range(len(msgs)))
    assert all(m.ts > 0 for m in msgs)
    assert {(md.stream, md.seq) for md in seen[("S", EntryOp.DELETE_MSG)]} == {("ORD", facts["deleted"])}
    assert {purge.stream for purge in seen[("S", EntryOp.PURGE_STREAM)]} == {"ORD"}
    # consumer: delivered and acked what was fetched; the ack floor follows
    acks = seen[("C", EntryOp.UPDATE_ACKS)]
    assert sorted(a.sseq for a in acks) == facts["acked"]
    assert max(a.sseq for a in acks) == facts["ack_floor"]
    assert {d.sseq for d in seen[("C", EntryOp.UPDATE_DELIVERED)]} >= set(facts["acked"])


def _decode_snapshot(kind, data):
    if kind == "meta":
        decode_meta_snapshot(data)
    elif kind == "S":
        decode_stream_snapshot(data)
    else:
        decode_consumer_state(data)


def _check_reencodes(op, rec, data):
    if op in (EntryOp.ASSIGN_COMPRESSED_CONSUMER, EntryOp.COMPRESSED_STREAM_MSG):
        # nats-server's S2 encoder is not ours (we write Snappy, which S2
        # decodes): equal content, not equal bytes
        assert decode_entry(encode_entry(op, rec)) == (op, rec)
        return
    if op in (EntryOp.BATCH_MSG, EntryOp.BATCH_COMMIT_MSG) and rec.compressed:
        return
    assert encode_entry(op, rec, compress=False) == data, (op, data)


async def _drive(nodes):
    sys_nc = await nats.connect(nodes[0].url, user="sys", password="pw")
    captured = []

    async def on(msg):
        captured.append((msg.subject, msg.data))
    await sys_nc.subscribe("$NRG.AE.>", cb=on)
    await sys_nc.subscribe("$NRG.CR.>", cb=on)
    await sys_nc.flush()
    app = await nats.connect(nodes[1].url, user="app", password="pw")
    js = app.jetstream()
    for _ in range(300):
        try:
            await js.add_stream(name="ORD", subjects=["ord.>"], num_replicas=3)
            break
        except Exception:
            await asyncio.sleep(0.1)
    else:
        raise AssertionError("no R3 stream: no meta leader")
    # (each call is retried while the cluster is briefly leaderless: a
    # publish deduplicated by its id; a delete may find it already done)
    gone = (nats.js.errors.NotFoundError,)
    await _retrying(lambda: js.publish("ord.small", b"hello", headers={"X-Test": "1", "Nats-Msg-Id": "s"}))
    await _retrying(lambda: js.publish("ord.big", BIG, headers={"X-Big": "yes", "Nats-Msg-Id": "b"}))
    for i in range(3):
        await _retrying(lambda: js.publish("ord.n", b"%d" % i, headers={"Nats-Msg-Id": "n%d" % i}))
    await _retrying(lambda: js.add_consumer("ORD", durable_name="DUR", ack_policy="explicit", num_replicas=3))
    sub = await js.pull_subscribe_bind("DUR", "ORD")
    msgs = await _retrying(lambda: sub.fetch(3, timeout=5))
    acked = []
    for m in msgs:
        await _retrying(m.ack_sync)
        acked.append(m.metadata.sequence.stream)
    info = await _retrying(lambda: js.consumer_info("ORD", "DUR"))
    await _retrying(lambda: js.delete_msg("ORD", 5), done=gone)
    await _retrying(lambda: js.purge_stream("ORD"))
    await _retrying(lambda: js.update_stream(name="ORD", subjects=["ord.>", "more.>"], num_replicas=3))
    await _retrying(lambda: js.delete_consumer("ORD", "DUR"), done=gone)
    await _retrying(lambda: js.delete_stream("ORD"), done=gone)
    # (poll until the stream's removal has gone out on the meta group)
    for _ in range(100):
        if any(s == "$NRG.AE._meta_" and any(e.type == EntryType.NORMAL and e.data[:1] == b"\x02"
                                              for e in AppendEntry.decode(d).entries) for s, d in captured):
            break
        await asyncio.sleep(0.05)
    await app.close()
    await sys_nc.close()
    return captured, {"acked": sorted(acked), "ack_floor": info.ack_floor.stream_seq, "deleted": 5}


def test_decodes_the_snapshots_a_returning_node_catches_up_with(tmp_path):
    """A node stops; the stream and meta leaders step down, so the new ones
    snapshot and compact (NeedSnapshot on a stream leader change, every meta
    leader change); the node returns and catches up from ``[Snapshot,
    PeerState]`` on ``$NRG.CR``: the meta snapshot (S2 block of JSON) and the
    stream's (its deletes an AVL seqset block) decode to what was done."""
    ports = [free_port() for _ in NODES]
    confs = [_conf(tmp_path, name, port, ports) for name, port in zip(NODES, ports)]
    nodes = []
    try:
        for conf in confs:
            nodes.append(ServerProcess("nats-server", conf).start(60))
        snaps = asyncio.run(_drive_catch_up(nodes, confs))
    finally:
        for n in nodes:
            n.stop()
    # (catch-up subjects do not name the group: tell the snapshots by their data)
    stream = [decode_stream_snapshot(d) for d in snaps if d[:2] == b"\x2a\x01"]
    meta = [(d, decode_meta_snapshot(d)) for d in snaps if d[:2] not in (b"\x2a\x01", b"\x16\x02")]
    assert stream and meta, [d[:4] for d in snaps]
    s = stream[-1]
    assert (s.msgs, s.first_seq, s.last_seq, s.num_deleted) == (197, 1, 200, 3)
    assert s.deleted == [DeletedSet((2, 3, 100))]       # nats-server wrote a seqset block
    assert decode_stream_snapshot(encode_stream_snapshot(s)).deleted_seqs() == [2, 3, 100]
    raw, (sa,) = meta[-1]
    assert sa.name == "ORD" and sa.config["subjects"] == ["ord.>"] and sa.client.acc == "APP"
    assert [(c.name, c.stream) for c in sa.consumers] == [("DUR", "ORD")]
    # our JSON is nats-server's, byte for byte (the S2 bytes differ: we write Snappy)
    assert s2.decode_block(encode_meta_snapshot([sa])) == s2.decode_block(raw)
    for d in snaps:
        if d[:2] == b"\x16\x02":
            decode_consumer_state(d)


async def _drive_catch_up(nodes, confs):
    sys_nc = await nats.connect(nodes[0].url, user="sys", password="pw")
    snaps = []

    async def on(msg):
        for e in AppendEntry.decode(msg.data).entries:
            if e.type == EntryType.SNAPSHOT:
                snaps.append(e.data)
    await sys_nc.subscribe("$NRG.CR.>", cb=on)
    app = await nats.connect(nodes[1].url, user="app", password="pw")
    js = app.jetstream()
    for _ in range(300):
        try:
            await js.add_stream(name="ORD", subjects=["ord.>"], num_replicas=3)
            break
        except Exception:
            await asyncio.sleep(0.1)
    else:
        raise AssertionError("no R3 stream: no meta leader")
    await _retrying(lambda: js.add_consumer("ORD", durable_name="DUR", ack_policy="explicit", num_replicas=3))
    nodes[2].stop()
    # (if the stopped node led the stream, the first tries find no leader)
    # (a retried publish is deduplicated by its id; a retried delete may
    # find its message already gone)
    for i in range(200):
        await _retrying(lambda: js.publish("ord.%d" % (i % 7), b"m%d" % i, headers={"Nats-Msg-Id": str(i)}))
    for seq in (2, 3, 100):
        await _retrying(lambda: js.delete_msg("ORD", seq), done=(nats.js.errors.NotFoundError,))
    for nc, subject in ((app, "$JS.API.STREAM.LEADER.STEPDOWN.ORD"), (sys_nc, "$JS.API.META.LEADER.STEPDOWN")):
        async def step_down():
            reply = json.loads((await nc.request(subject, b"", timeout=5)).data)
            if not reply.get("success"):
                raise nats.errors.Error(reply)
        await _retrying(step_down)
    nodes[2] = ServerProcess("nats-server", confs[2]).start(60)
    for _ in range(300):
        if {d[:1] for d in snaps} >= {b"\x2a"} and any(d[:1] not in (b"\x2a", b"\x16") for d in snaps):
            break
        await asyncio.sleep(0.1)
    await app.close()
    await sys_nc.close()
    return snaps


async def _retrying(call, tries=150, done=()):
    """``call()`` until it succeeds; after a failed try, ``done`` errors
    count as success (the failed try took effect after all)."""
    for attempt in range(tries):
        try:
            return await call()
        except done:
            if attempt:
                return None
            raise
        except (nats.errors.Error, asyncio.TimeoutError):
            if attempt == tries - 1:
                raise
            await asyncio.sleep(0.1)


# natsbroker's own stream group entries (natsbroker.jetstream.cluster.streamgroup)

from natsbroker.jetstream.cluster import streamgroup as SG  # noqa: E402


@given(st.sampled_from([SG.OP_API_REQUEST, SG.OP_CONSUMER_STATE]),
       st.dictionaries(st.text(), st.one_of(st.text(), st.integers(), st.lists(st.integers()))))
def test_natsbroker_group_entries_round_trip(op, record):
    data = SG._nb_entry(op, record)
    assert data[0] == op and SG._nb_record(data) == record


@given(st.binary())
@settings(max_examples=300)
def test_natsbroker_group_entry_garbage_is_an_entry_error(tail):
    for op in (SG.OP_API_REQUEST, SG.OP_CONSUMER_STATE):
        try:
            rec = SG._nb_record(bytes([op]) + tail)
        except EntryError:
            continue
        assert isinstance(rec, dict)


def test_deep_json_in_a_group_entry_is_refused_not_a_crash():
    data = bytes([SG.OP_API_REQUEST]) + b"[" * 100000 + b"]" * 100000
    with pytest.raises(EntryError):
        SG._nb_record(data)
