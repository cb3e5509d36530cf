"""S2 (natsbroker.cluster.s2): hand-built vectors for every S2-only form,
derived from klauspost/compress s2/decode_other.go and s2/reader.go;
hypothesis round trips and garbage; and a live oracle: the op 14 S2 block a
three-node nats-server JetStream cluster replicates for a large message."""

import asyncio
import os
import socket
import struct
import time

import cramjam
import nats
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from natsbroker.cluster.raft.wire import AppendEntry, EntryType, uvarint
from natsbroker.cluster.s2 import S2Error, decode_block, decode_stream, encode_block, encode_stream
from tests.support.servers import ServerProcess, free_port

# -- block vectors -------------------------------------------------------------


def lit(b):
    """A literal tag (length-1 inline below 60, else in 1-4 more bytes)."""
    n = len(b) - 1
    if n < 60:
        return bytes([n << 2]) + b
    extra = (n.bit_length() + 7) // 8
    return bytes([(59 + extra) << 2]) + n.to_bytes(extra, "little") + b


def copy1(offset, length):
    assert 4 <= length <= 11 and 0 < offset < 2048
    return bytes([(offset >> 8) << 5 | (length - 4) << 2 | 1, offset & 0xFF])


def copy2(offset, length):
    return bytes([(length - 1) << 2 | 2]) + struct.pack("<H", offset)


def copy4(offset, length):
    return bytes([(length - 1) << 2 | 3]) + struct.pack("<I", offset)


def repeat(code, extra=b""):
    """S2's repeat: a copy-1 tag with offset 0 (the last offset again)."""
    return bytes([code << 2 | 1, 0]) + extra


def _uvarint(n):
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# repeat length codes (decode_other.go tagCopy1 with offset 0): 0-4 copy
# 4-8 bytes; 5 is 8 + u8; 6 is 260 + u16 LE; 7 is 65540 + u24 LE.
@pytest.mark.parametrize("code, extra, length", [
    (0, b"", 4), (1, b"", 5), (2, b"", 6), (3, b"", 7), (4, b"", 8),
    (5, b"\x10", 0x10 + 8),
    (6, b"\x02\x01", 0x0102 + 260),
    (7, b"\x03\x00\x00", 3 + 65540),
    (7, b"\x00\x00\x01", 65536 + 65540),
])
def test_repeat_offset_length_codes(code, extra, length):
    # "abcd", a copy-1 sets offset 4 ("abcd" again), the repeat reuses it.
    body = lit(b"abcd") + copy1(4, 4) + repeat(code, extra)
    total = 8 + length
    expected = (b"abcd" * (total // 4 + 1))[:total]
    assert decode_block(_uvarint(total) + body) == expected


def test_repeat_written_out():
    # 3 + 4 + 5: "xyz", copy-2 offset 3 length 4 ("xyzx"), repeat code 1 (5 bytes at offset 3)
    src = _uvarint(12) + lit(b"xyz") + copy2(3, 4) + repeat(1)
    assert decode_block(src) == b"xyzxyzxyzxyz"
    # a repeat keeps the offset of the last copy of any kind, here a copy-4
    src = _uvarint(18) + lit(b"0123456789") + copy4(7, 4) + repeat(0)
    assert decode_block(src) == b"0123456789" + b"3456" + b"7893"


def test_copy4():
    src = _uvarint(15) + lit(b"0123456789") + copy4(10, 5)
    assert decode_block(src) == b"012345678901234"
    # a copy-4's length is 1 + the tag's top 6 bits, up to 64
    src = _uvarint(74) + lit(b"0123456789") + copy4(10, 64)
    assert decode_block(src) == b"0123456789" * 7 + b"0123"


def test_overlapping_copies_run_forwards():
    assert decode_block(_uvarint(9) + lit(b"ab") + copy2(2, 7)) == b"ababababa"
    assert decode_block(_uvarint(7) + lit(b"x") + copy1(1, 6)) == b"xxxxxxx"
    assert decode_block(_uvarint(11) + lit(b"abc") + copy1(2, 8)) == b"abcbcbcbcbc"
    # offset 1 run of 100000 bytes through a long repeat
    src = _uvarint(1 + 4 + 99995) + lit(b"z") + copy1(1, 4) + repeat(7, (99995 - 65540).to_bytes(3, "little"))
    assert decode_block(src) == b"z" * 100000


@pytest.mark.parametrize("n", [1, 59, 60, 61, 255, 256, 257, 65536, 65537, 70000])
def test_literal_length_forms(n):
    data = bytes(range(256)) * (n // 256 + 1)
    assert decode_block(_uvarint(n) + lit(data[:n])) == data[:n]


def test_buffer_types():
    src = _uvarint(9) + lit(b"ab") + copy2(2, 7)
    for b in (bytearray(src), memoryview(src), memoryview(b"xx" + src)[2:]):
        assert decode_block(b) == b"ababababa"
    framed = encode_stream(b"abc" * 100)
    assert decode_stream(bytearray(framed)) == decode_stream(memoryview(framed)) == b"abc" * 100


def test_snappy_blocks_decode():
    for data in [b"", b"a", b"hello, world " * 500, os.urandom(3000)]:
        assert decode_block(bytes(cramjam.snappy.compress_raw(data))) == data


@pytest.mark.parametrize("src", [
    b"",                                             # no length header
    b"\x80",                                         # cut-off header
    b"\x80\x80\x80\x80\x80\x01",                     # header longer than 5 bytes
    b"\xff\xff\xff\xff\x1f",                         # 2**35-1 > 2**32-1
    _uvarint(4) + repeat(0),                         # a repeat before any offset
    _uvarint(8) + lit(b"ab") + copy2(3, 4),          # offset before the start
    _uvarint(8) + lit(b"ab") + copy2(0, 4),          # copy-2 offset 0
    _uvarint(5) + lit(b"ab") + copy2(2, 4),          # copy past the declared end
    _uvarint(3) + lit(b"abcd"),                      # literal past the declared end
    _uvarint(4) + b"\x0c" + b"ab",                   # literal past the input
    _uvarint(9) + lit(b"ab") + copy2(2, 4),          # decodes fewer than declared
    _uvarint(9) + lit(b"ab") + b"\x02\x02",          # cut-off copy-2
    _uvarint(9) + lit(b"ab") + b"\x03\x02\x00\x00",  # cut-off copy-4
    _uvarint(9) + lit(b"ab") + b"\x01",              # cut-off copy-1
    _uvarint(9) + lit(b"abcd") + copy1(4, 4) + b"\x15\x00",          # cut-off repeat code 5
    _uvarint(999) + lit(b"abcd") + copy1(4, 4) + b"\x1d\x00\x01",    # cut-off repeat code 7
    _uvarint(70) + b"\xf4\x01",                      # cut-off 2-byte literal length
])
def test_corrupt_blocks_refused(src):
    with pytest.raises(S2Error):
        decode_block(src)


def test_declared_size_over_max_refused_before_allocating():
    # 2**40 does not fit decode.go's 5-byte, 32-bit header at all
    t = time.perf_counter()
    with pytest.raises(S2Error):
        decode_block(_uvarint(2**40) + lit(b"a"))
    # 2**32-1 fits, but is over max_size
    with pytest.raises(S2Error, match="too large"):
        decode_block(_uvarint(2**32 - 1) + lit(b"a"))
    with pytest.raises(S2Error, match="too large"):
        decode_block(_uvarint(1001) + lit(b"a"), max_size=1000)
    # under max_size but a lie: the output grows only with real input
    with pytest.raises(S2Error):
        decode_block(_uvarint(60 << 20) + lit(b"a"))
    assert time.perf_counter() - t < 0.5


def test_bomb_stops_at_max_size():
    # each 5-byte repeat makes 16 MB: the header's limit refuses the block
    rep = repeat(7, b"\xff\xff\xff")
    total = 5 + 100 * (65540 + 0xFFFFFF)
    with pytest.raises(S2Error, match="too large"):
        decode_block(_uvarint(total) + lit(b"abcd") + copy1(1, 4) + rep * 100)


# -- stream vectors ------------------------------------------------------------


def _masked_crc(b):
    import crc32c
    c = crc32c.crc32c(b)
    return ((c >> 15 | c << 17) + 0xA282EAD8) & 0xFFFFFFFF


def chunk(ctype, body):
    return bytes([ctype]) + len(body).to_bytes(3, "little") + body


def data_chunk(ctype, decoded, payload=None):
    payload = decoded if payload is None else payload
    return chunk(ctype, struct.pack("<I", _masked_crc(decoded)) + payload)


S2_ID = chunk(0xFF, b"S2sTwO")
SNAPPY_ID = chunk(0xFF, b"sNaPpY")


def test_stream_chunk_kinds():
    s2_block = _uvarint(12) + lit(b"xyz") + copy2(3, 4) + repeat(1)
    stream = (S2_ID
              + chunk(0xFE, b"\0" * 7)                          # padding
              + data_chunk(0x01, b"plain,")                      # uncompressed
              + data_chunk(0x00, b"xyzxyzxyzxyz", s2_block)      # S2 block with a repeat
              + chunk(0x99, b"s2idx\0\0\0index-body")            # S2's index, skipped
              + chunk(0x80, b"") + chunk(0xFD, b"skip")          # reserved skippable
              + SNAPPY_ID                                        # a second stream appended
              + data_chunk(0x01, b"!"))
    assert decode_stream(stream) == b"plain,xyzxyzxyzxyz!"


def test_masked_crc_agrees_with_snappy_framing():
    # cramjam writes Snappy's framing format with its own CRC-32C and mask
    data = b"the quick brown fox " * 5000 + os.urandom(1000)
    framed = bytes(cramjam.snappy.compress(data))
    assert framed.startswith(SNAPPY_ID)
    assert decode_stream(framed) == data
    assert _masked_crc(b"") == 0xA282EAD8


@pytest.mark.parametrize("stream", [
    data_chunk(0x01, b"x"),                              # no stream identifier first
    chunk(0xFF, b"S2sTwo"),                              # wrong identifier
    chunk(0xFF, b"S2sTwO!"),                             # identifier of the wrong length
    S2_ID + data_chunk(0x01, b"x")[:-1] + b"y",          # CRC mismatch
    S2_ID + chunk(0x01, b"abc"),                         # shorter than its checksum
    S2_ID + chunk(0x02, b""),                            # reserved unskippable
    S2_ID + chunk(0x7F, b"abc"),                         # reserved unskippable
    S2_ID + data_chunk(0x01, b"x")[:-1],                 # chunk cut off
    S2_ID + b"\x01\x05",                                 # header cut off
    S2_ID + chunk(0x99, b"abc")[:-1],                    # skippable chunk cut off
    S2_ID + data_chunk(0x00, b"ab", _uvarint(3) + lit(b"ab")),  # corrupt block
    # a Snappy frame holds blocks of at most 64 KiB
    SNAPPY_ID + data_chunk(0x01, b"a" * 65537),
    SNAPPY_ID + data_chunk(0x00, b"a" * 65537, bytes(cramjam.snappy.compress_raw(b"a" * 65537))),
])
def test_corrupt_streams_refused(stream):
    with pytest.raises(S2Error):
        decode_stream(stream)


def test_stream_limits():
    big = b"a" * 65537
    # an S2 frame holds blocks up to 4 MiB
    assert decode_stream(S2_ID + data_chunk(0x01, big)) == big
    with pytest.raises(S2Error):
        decode_stream(S2_ID + data_chunk(0x00, b"", _uvarint((4 << 20) + 1)))
    with pytest.raises(S2Error):
        decode_stream(S2_ID + data_chunk(0x01, big) * 2, max_size=100000)
    assert decode_stream(b"") == b""


# -- round trips and garbage ---------------------------------------------------

REPETITIVE = st.builds(lambda parts, n: b"".join(parts) * n,
                       st.lists(st.binary(min_size=1, max_size=40), min_size=1, max_size=5),
                       st.integers(1, 3000))
DATA = st.one_of(st.binary(max_size=5000), REPETITIVE)


@given(DATA)
@settings(max_examples=200, deadline=None)
def test_block_round_trip(data):
    assert decode_block(encode_block(data)) == data


@given(DATA)
@settings(max_examples=200, deadline=None)
def test_stream_round_trip(data):
    assert decode_stream(encode_stream(data)) == data


def _only_s2error(fn, data):
    try:
        out = fn(data)
    except S2Error:
        return
    assert isinstance(out, bytes)


@given(st.binary(max_size=300))
@settings(max_examples=1000)
def test_garbage_block(data):
    _only_s2error(decode_block, data)


@given(st.binary(max_size=300))
@settings(max_examples=500)
def test_garbage_stream(data):
    _only_s2error(decode_stream, data)
    _only_s2error(decode_stream, S2_ID + data)


@given(DATA, st.lists(st.tuples(st.integers(0, 2**16), st.integers(0, 255)), min_size=1, max_size=4))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_mutated_encodings(data, flips):
    # valid encodings with a few bytes changed reach deep into the decoders
    for enc, dec in ((encode_block, decode_block), (encode_stream, decode_stream)):
        b = bytearray(enc(data))
        if not b:
            continue
        for pos, val in flips:
            b[pos % len(b)] = val
        _only_s2error(dec, bytes(b))


def test_speed():
    data = (b"some repeated text with variation %d; " * 1) * 1 + b"".join(
        b"record %06d value %d;" % (i, i * 7 % 13) for i in range(40000))
    enc = encode_block(data)
    t = time.perf_counter()
    assert decode_block(enc) == data
    took = time.perf_counter() - t
    assert took < 2.0, took


# -- the live oracle: op 14 as nats-server writes it ---------------------------

NAMES = ("s2-a", "s2-b", "s2-c")


def _conf(tmp_path, name, port, routes):
    # as tests/test_raft_wire.py: a $SYS user may watch $NRG.>
    import json
    path = tmp_path / ("%s.conf" % name)
    path.write_text("""server_name: %s
listen: 127.0.0.1:-1
jetstream { store_dir: %s }
cluster { name: s2c, listen: 127.0.0.1:%d, routes: %s }
accounts {
  SYS { users [ {user: sys, password: pw} ] }
  APP { jetstream: enabled, users [ {user: app, password: pw} ] }
}
system_account: SYS
""" % (name, json.dumps(str(tmp_path / name)), port, json.dumps(["nats://127.0.0.1:%d" % p for p in routes])))
    return ["-c", str(path)]


def _tags(block):
    """Walk an S2 block's tags: counts of literal, copy1, copy2, copy4, repeat."""
    counts = dict.fromkeys(("literal", "copy1", "copy2", "copy4", "repeat"), 0)
    _, s = uvarint(block)
    while s < len(block):
        tag = block[s]
        kind = tag & 3
        if kind == 0:
            x = tag >> 2
            extra = max(0, x - 59)
            if extra:
                x = int.from_bytes(block[s + 1:s + 1 + extra], "little")
            s += 1 + extra + x + 1
            counts["literal"] += 1
        elif kind == 1:
            if (tag & 0xE0) == 0 and block[s + 1] == 0:
                code = tag >> 2 & 7
                s += 2 + max(0, code - 4)
                counts["repeat"] += 1
            else:
                s += 2
                counts["copy1"] += 1
        elif kind == 2:
            s += 3
            counts["copy2"] += 1
        else:
            s += 5
            counts["copy4"] += 1
    return counts


def _op4_body(body):
    """The op-4 record after its op byte (reference §3.2)."""
    lseq, ts = struct.unpack_from("<Qq", body, 0)
    p = 16
    fields = []
    for width in ("<H", "<H", "<H", "<I"):
        (n,) = struct.unpack_from(width, body, p)
        p += struct.calcsize(width)
        fields.append(body[p:p + n])
        p += n
    flags, n = uvarint(body, p)
    assert n > 0 and p + n == len(body) and flags == 0, "flags: one uvarint, last"
    return lseq, ts, fields


def _payload():
    # Repeated-with-variation records: S2's encoder finds the record stride
    # again after each changed digit and emits repeat tags for it.
    rnd = os.urandom(512)
    recs = b"".join(b'{"sensor":"temperature-probe","id":%05d,"v":%d,"unit":"celsius"}\n' % (i, i % 10)
                    for i in range(300))
    return recs + rnd + recs[:4000]


def test_nats_server_op14_decodes(tmp_path):
    """A 3-node nats-server cluster replicates a 20+ KB compressible message
    of an R3 stream as op 14: its S2 block decodes to the op-4 record of what
    was published, and uses S2-only repeat tags Snappy cannot read."""
    ports = [free_port() for _ in NAMES]
    nodes = []
    payload = _payload()
    assert len(payload) > 8192
    try:
        for name, port in zip(NAMES, ports):
            nodes.append(ServerProcess("nats-server", _conf(tmp_path, name, port, ports)).start(60))
        captured = asyncio.run(_capture(nodes, payload))
    finally:
        for n in nodes:
            n.stop()
    blocks = []
    for subject, data in captured:
        if not subject.startswith("$NRG.AE.S-"):
            continue
        for e in AppendEntry.decode(data).entries:
            if e.type == EntryType.NORMAL and e.data[:1] == b"\x0e":
                blocks.append(e.data[1:])
    assert blocks, "no op 14 entry among %d $NRG messages" % len(captured)
    for blk_ in blocks:
        lseq, ts, (subject, reply, hdr, msg) = _op4_body(decode_block(blk_))
        # (lseq is the stream's last sequence before this message; the reply
        # is the publisher's inbox, a JetStream publish being a request)
        assert subject == b"big.s2" and msg == payload and hdr == b""
        assert lseq == 0 and abs(ts - time.time_ns()) < 60e9 and reply.startswith(b"_INBOX.")
        counts = _tags(blk_)
        assert counts["repeat"] > 0, counts
        # Snappy alone cannot decode it (the repeats are S2's)
        try:
            wrong = bytes(cramjam.snappy.decompress_raw(blk_))
        except Exception:
            wrong = None
        assert wrong != decode_block(blk_)


async def _capture(nodes, payload):
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
            await js.add_stream(name="S2", subjects=["big.>"], num_replicas=3)
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
    await js.publish("big.s2", payload)

    def seen():
        return any(s.startswith("$NRG.AE.S-") and b"\x0e" in d for s, d in captured)
    deadline = time.monotonic() + 10
    while not seen() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await sys_nc.flush()
    await app.close()
    await sys_nc.close()
    return captured


# -- the live oracle both ways: a compressed leafnode connection ---------------


def _chunks(stream):
    """(type, body) of each chunk of a framed stream."""
    pos = 0
    while pos + 4 <= len(stream):
        clen = int.from_bytes(stream[pos + 1:pos + 4], "little")
        yield stream[pos], stream[pos + 4:pos + 4 + clen]
        pos += 4 + clen


def _read_until(sock, buf, done, timeout=10):
    """Read until the framed stream ``buf`` decodes to bytes ``done``
    accepts: (raw bytes, decoded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            out = decode_stream(buf)
            if done(out):
                return buf, out
        except S2Error:
            pass  # a chunk still on its way
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            more = sock.recv(1 << 16)
        except TimeoutError:
            break
        if not more:
            break
        buf += more
    raise AssertionError("not done after %d bytes" % len(buf))


def test_nats_server_leafnode_compression(tmp_path):
    """nats-server reads our (Snappy framed) stream as its leafnode
    compression: CONNECT and PING sent with encode_stream get a PONG. And its
    own s2_best stream (S2sTwO, S2 blocks) decodes: INFO, PONG and a large
    message, which S2 compresses with repeat tags."""
    lport = free_port()
    conf = tmp_path / "leaf.conf"
    conf.write_text("listen: 127.0.0.1:-1\nleafnodes { listen: 127.0.0.1:%d, compression: s2_best }\n" % lport)
    payload = _payload()
    with ServerProcess("nats-server", ["-c", str(conf)]) as srv:
        leaf = socket.create_connection(("127.0.0.1", lport), 5)
        buf = b""
        while b"\r\n" not in buf:
            buf += leaf.recv(1 << 16)
        line, buf = buf.split(b"\r\n", 1)
        assert b'"compression":"s2_best"' in line
        # (as a soliciting server would: our INFO picks the mode, in the clear)
        leaf.sendall(b'INFO {"server_id":"S2LEAFTEST","name":"s2leaf","compression":"s2_best"}\r\n')
        # its answer, compressed, says its reader now decompresses too (the
        # bytes read with our INFO are still parsed in the clear)
        buf, out = _read_until(leaf, buf, lambda out: out.startswith(b"INFO {") and b"\r\n" in out)
        assert buf.startswith(S2_ID)
        leaf.sendall(encode_stream(b'CONNECT {"verbose":false,"pedantic":false,"name":"s2leaf","headers":true}\r\n'))
        leaf.sendall(encode_stream(b"PING\r\n"))
        buf, out = _read_until(leaf, buf, lambda out: b"PONG\r\n" in out)
        seen = len(out)
        # the PONG after LS+ says the subscription is in place
        leaf.sendall(encode_stream(b"LS+ big.>\r\nPING\r\n"))
        buf, out = _read_until(leaf, buf, lambda out: out.count(b"PONG\r\n") == 2)
        client = socket.create_connection(("127.0.0.1", srv.port), 5)
        client.sendall(b'CONNECT {"verbose":false}\r\nSUB up.s2 1\r\n'
                       b'PUB big.s2 %d\r\n%s\r\nPING\r\n' % (len(payload), payload))
        buf, out = _read_until(leaf, buf, lambda out: payload + b"\r\n" in out)
        # and the other way: a large message in one of our compressed chunks
        up = encode_stream(b"LMSG up.s2 %d\r\n%s\r\n" % (len(payload), payload))
        assert any(ctype == 0x00 and len(body) < len(payload) // 4 for ctype, body in _chunks(up))
        leaf.sendall(up)
        got = b""
        client.settimeout(10)
        while payload not in got:
            more = client.recv(1 << 16)
            assert more, got[-200:]
            got += more
        assert b"MSG up.s2 1 %d\r\n%s\r\n" % (len(payload), payload) in got
        client.close()
        leaf.close()
    assert out[seen:].count(b"LMSG big.s2 %d\r\n" % len(payload)) == 1
    repeats = sum(_tags(body[4:])["repeat"] for ctype, body in _chunks(buf) if ctype == 0x00)
    assert repeats > 0
