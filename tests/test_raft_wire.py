"""NRG's wire (natsbroker.cluster.raft.wire): every layout against
nats-server's raft.go, hypothesis round trips, and the bytes a live
three-node nats-server JetStream cluster sends on ``$NRG.>``, decoded and
encoded again byte for byte."""

import asyncio
import json
import struct

import nats
import pytest
from hypothesis import given, strategies as st

from natsbroker.cluster.raft.wire import (
    AE_BASE_LEN,
    AppendEntry,
    AppendEntryResponse,
    Entry,
    EntryType,
    PeerState,
    VoteRequest,
    VoteResponse,
    WireError,
    peer_id,
    put_uvarint,
    quorum,
    uvarint,
)
from tests.support.servers import ServerProcess, free_port

U64 = st.integers(0, 2**64 - 1)
IDS = st.text("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", min_size=8, max_size=8)


def test_peer_ids_are_nats_server_s_hash():
    # events.go getHash: SHA-256, first 8 bytes as base-62 digits.
    assert peer_id("nodeA") == "lH4hK6Rg"
    assert peer_id("nodeB") == "Sm0Lj2I0"


def test_append_entry_layout():
    ae = AppendEntry("lH4hK6Rg", term=3, commit=5, pterm=2, pindex=7,
                     entries=[Entry(EntryType.NORMAL, b"abc")], lterm=3)
    b = ae.encode()
    assert b[:8] == b"lH4hK6Rg"
    assert struct.unpack_from("<QQQQH", b, 8) == (3, 5, 2, 7, 1)
    assert b[42:46] == struct.pack("<I", 4) and b[46] == 0 and b[47:50] == b"abc"
    assert b[50:] == b"\x03"  # the uvarint lterm, always written
    assert AppendEntry.decode(b) == ae


def test_heartbeat_and_unset_leader():
    hb = AppendEntry("", 1, 0, 0, 0)
    b = hb.encode()
    assert b[:8] == b"\0" * 8 and len(b) == AE_BASE_LEN + 1 and hb.heartbeat
    assert AppendEntry.decode(b) == hb


@pytest.mark.parametrize("bad", [
    b"x" * 41,                                                # shorter than the base
    AppendEntry("aaaaaaaa", 1, 0, 0, 0).encode()[:40] + b"\x01\x00",  # one entry, none there
    AppendEntry("aaaaaaaa", 1, 0, 0, 0).encode()[:40] + b"\x01\x00" + struct.pack("<I", 0),
    AppendEntry("aaaaaaaa", 1, 0, 0, 0).encode()[:40] + b"\x01\x00" + struct.pack("<I", 9) + b"\x00ab",
])
def test_append_entry_refused_as_nats_server_refuses(bad):
    with pytest.raises(WireError):
        AppendEntry.decode(bad)


def test_trailing_bytes_that_are_no_uvarint_are_ignored():
    # Go's binary.Uvarint of a cut-off varint returns n == 0: lterm stays 0.
    b = AppendEntry("aaaaaaaa", 1, 0, 0, 0).encode()[:-1] + b"\x80"
    assert AppendEntry.decode(b).lterm == 0


def test_fixed_layouts():
    assert AppendEntryResponse(7, 9, "Sm0Lj2I0", True).encode() == \
        struct.pack("<QQ", 7, 9) + b"Sm0Lj2I0" + b"\x01"
    assert VoteRequest(4, 3, 10, "lH4hK6Rg").encode() == struct.pack("<QQQ", 4, 3, 10) + b"lH4hK6Rg"
    assert VoteResponse(4, "lH4hK6Rg", granted=True, empty=True).encode() == \
        struct.pack("<Q", 4) + b"lH4hK6Rg" + b"\x03"
    assert PeerState(3, ["lH4hK6Rg", "Sm0Lj2I0"], 2).encode() == \
        struct.pack("<II", 3, 2) + b"lH4hK6RgSm0Lj2I0" + b"\x02\x00"
    for cls, size in ((AppendEntryResponse, 25), (VoteRequest, 32), (VoteResponse, 17)):
        with pytest.raises(WireError):
            cls.decode(b"\0" * (size + 1))
    with pytest.raises(WireError):
        PeerState.decode(struct.pack("<II", 3, 2) + b"lH4hK6Rg")  # names two, holds one
    # The extension state is optional on the wire.
    assert PeerState.decode(struct.pack("<II", 1, 1) + b"lH4hK6Rg").ext == 0
    assert [quorum(n) for n in (1, 2, 3, 4, 5)] == [1, 2, 2, 3, 3]


@given(U64)
def test_uvarint_round_trip(n):
    b = put_uvarint(n)
    assert uvarint(b) == (n, len(b))


@given(IDS | st.just(""), U64, U64, U64, U64, U64,
       st.lists(st.tuples(st.sampled_from(list(EntryType)), st.binary(max_size=64)), max_size=8))
def test_append_entry_round_trip(leader, term, commit, pterm, pindex, lterm, entries):
    ae = AppendEntry(leader, term, commit, pterm, pindex, [Entry(t, d) for t, d in entries], lterm)
    assert AppendEntry.decode(ae.encode()) == ae


@given(st.binary(max_size=200))
def test_append_entry_decoder_takes_any_bytes(data):
    try:
        ae = AppendEntry.decode(data)
    except WireError:
        return
    assert len(data) >= AE_BASE_LEN and len(ae.entries) == struct.unpack_from("<H", data, 40)[0]


@given(U64, U64, IDS, st.booleans(), U64, U64, IDS, st.booleans(), st.booleans(),
       st.integers(0, 2**32 - 1), st.lists(IDS, max_size=9), st.integers(0, 2))
def test_fixed_round_trips(t, i, p, ok, lt, li, c, granted, empty, size, ids, ext):
    for rec in (AppendEntryResponse(t, i, p, ok), VoteRequest(t, lt, li, c),
                VoteResponse(t, p, granted, empty), PeerState(size, ids, ext)):
        assert type(rec).decode(rec.encode()) == rec


# -- what nats-server sends -------------------------------------------------------------

NAMES = ("nrg-a", "nrg-b", "nrg-c")


def _conf(tmp_path, name, port, routes):
    store = tmp_path / name
    path = tmp_path / ("%s.conf" % name)
    path.write_text("""server_name: %s
listen: 127.0.0.1:-1
jetstream { store_dir: %s }
cluster { name: nrg, listen: 127.0.0.1:%d, routes: %s }
accounts {
  SYS { users [ {user: sys, password: pw} ] }
  APP { jetstream: enabled, users [ {user: app, password: pw} ] }
}
system_account: SYS
""" % (name, json.dumps(str(store)), port, json.dumps(["nats://127.0.0.1:%d" % p for p in routes])))
    return ["-c", str(path)]


def test_decodes_and_reencodes_what_nats_server_sends(tmp_path):
    """Three nats-server nodes elect a meta leader and replicate an R3 stream:
    every ``$NRG`` message is decoded by its kind and encodes back to the same
    bytes; leaders, voters and peer states name the three servers' ids."""
    # (nats-server's JetStream cluster needs its routes configured: fixed ports)
    ports = [free_port() for _ in NAMES]
    nodes = []
    try:
        for name, port in zip(NAMES, ports):
            nodes.append(ServerProcess("nats-server", _conf(tmp_path, name, port, ports)).start(60))
        captured = asyncio.run(_capture(nodes))
    finally:
        for n in nodes:
            n.stop()
    ids = {peer_id(n) for n in NAMES}
    kinds = set()
    for subject, data in captured:
        kind = subject.split(".")[1]
        if kind == "AE" or kind == "CR":
            rec = AppendEntry.decode(data)
            assert rec.leader in ids, subject
            for e in rec.entries:
                if e.type == EntryType.PEER_STATE:
                    ps = PeerState.decode(e.data)
                    # (a new leader's first peer state names the peers it knows so far)
                    assert ps.cluster_size == 3 and ps.peers and set(ps.peers) <= ids, ps
                    kinds.add("peerstate")
        elif kind == "V":
            rec = VoteRequest.decode(data)
            assert rec.candidate in ids
        elif kind == "R":
            rec = (AppendEntryResponse if len(data) == 25 else VoteResponse).decode(data)
            assert rec.peer in ids
        else:
            continue  # (proposals: the upper layer's bytes)
        kinds.add(kind if kind != "R" else type(rec).__name__)
        assert rec.encode() == data, (subject, data.hex())
    assert {"AE", "AppendEntryResponse", "peerstate"} <= kinds, kinds


async def _capture(nodes):
    sys_nc = await nats.connect(nodes[0].url, user="sys", password="pw")
    captured = []

    async def on(msg):
        captured.append((msg.subject, msg.data))
    await sys_nc.subscribe("$NRG.>", cb=on)
    await sys_nc.flush()
    app = await nats.connect(nodes[1].url, user="app", password="pw")
    js = app.jetstream()

    async def stream_made():
        try:
            await js.add_stream(name="R3", subjects=["r3.>"], num_replicas=3)
            return True
        except Exception:
            return False
    # (the meta group needs its leader first: the first tries are refused)
    for _ in range(300):
        if await stream_made():
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("no R3 stream: the cluster elected no meta leader")
    for i in range(5):
        await js.publish("r3.%d" % i, b"m%d" % i)

    def enough():
        return sum(1 for s, d in captured if s.startswith("$NRG.R.") and len(d) == 25) >= 3
    for _ in range(100):
        if enough():
            break
        await asyncio.sleep(0.05)
    await app.close()
    await sys_nc.close()
    return captured
