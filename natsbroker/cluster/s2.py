"""S2, klauspost/compress's extension of Snappy, as nats-server uses it.

nats-server compresses three things a cluster peer must read: the meta
group snapshot and stream op 14 (``compressedStreamMsgOp``) are S2 *blocks*
(``s2.Encode``), consumer assignment op 9 is an S2 *stream* (``s2.NewWriter``).
No Python package decodes S2, so the decoders here follow klauspost/compress
s2/decode_other.go (blocks) and s2/reader.go (streams) step by step.

Encoding needs no S2: ``s2.Decode`` decodes Snappy blocks and ``s2.NewReader``
accepts ``sNaPpY`` framed streams, so the encoders hand the work to cramjam's
Snappy.

Both decoders refuse corrupt input with :class:`S2Error` only, and refuse a
declared size over ``max_size`` before producing anything: the output grows
only as the input really produces bytes, never from the length header alone.
"""

import cramjam
import crc32c

__all__ = [
    "DEFAULT_MAX_SIZE",
    "S2Error",
    "decode_block",
    "decode_stream",
    "encode_block",
    "encode_stream",
]

# An op 14 record of the largest message a default nats-server takes
# (max_payload may not exceed max_pending, 64 MB by default) plus its
# subject, reply and headers; a caller with larger limits, or decoding a
# meta snapshot of many assets, passes its own.
DEFAULT_MAX_SIZE = (64 << 20) + (1 << 20)

# s2.go: tags (the low 2 bits of a tag byte)
_TAG_LITERAL, _TAG_COPY1, _TAG_COPY2, _TAG_COPY4 = range(4)

# s2.go: framing
_CHUNK_COMPRESSED = 0x00
_CHUNK_UNCOMPRESSED = 0x01
_CHUNK_PADDING = 0xFE
_CHUNK_STREAM_ID = 0xFF
_MAGIC_S2 = b"S2sTwO"
_MAGIC_SNAPPY = b"sNaPpY"
_MAX_BLOCK = 4 << 20            # maxBlockSize: the largest block a frame may hold
_MAX_SNAPPY_BLOCK = 1 << 16     # maxSnappyBlockSize, after an sNaPpY identifier
_CHECKSUM = 4
# reader.go maxBufSize: MaxEncodedLen(maxBlockSize) + checksumSize, the
# largest data chunk a reader takes
_MAX_DATA_CHUNK = _MAX_BLOCK + 4 + 4 + _CHECKSUM


class S2Error(ValueError):
    """Input nats-server's S2 decoder would refuse (ErrCorrupt, ErrCRC,
    ErrUnsupported, ErrTooLarge), or output over the caller's max_size."""


def _decoded_len(src):
    """decode.go decodedLen: a uvarint of at most 5 bytes, at most 2**32-1.
    Returns (length, header size)."""
    v = shift = 0
    for i in range(min(len(src), 10)):
        b = src[i]
        v |= (b & 0x7F) << shift
        if b < 0x80:
            n = i + 1
            break
        shift += 7
    else:
        raise S2Error("s2: corrupt input (length header)")
    if n > 5 or v > 0xFFFFFFFF:
        raise S2Error("s2: corrupt input (length header)")
    return v, n


def decode_block(data, max_size=DEFAULT_MAX_SIZE):
    """``s2.Decode``: the decoded bytes of an S2 (or Snappy) block."""
    src = memoryview(data).cast("B") if not isinstance(data, bytes) else data
    dlen, s = _decoded_len(src)
    if dlen > max_size:
        raise S2Error("s2: decoded block is too large (%d > %d)" % (dlen, max_size))
    dst = bytearray()
    n = len(src)
    offset = 0
    while s < n:
        tag = src[s]
        kind = tag & 0x03
        if kind == _TAG_LITERAL:
            x = tag >> 2
            if x < 60:
                s += 1
            else:
                # 60..63: the length-1 follows in 1..4 little-endian bytes
                extra = x - 59
                if s + 1 + extra > n:
                    raise S2Error("s2: corrupt input (literal header)")
                x = int.from_bytes(src[s + 1:s + 1 + extra], "little")
                s += 1 + extra
            length = x + 1
            if length > dlen - len(dst) or length > n - s:
                raise S2Error("s2: corrupt input (literal length)")
            dst += src[s:s + length]
            s += length
            continue
        if kind == _TAG_COPY1:
            s += 2
            if s > n:
                raise S2Error("s2: corrupt input (copy-1)")
            length = (tag >> 2) & 0x7
            toffset = (tag & 0xE0) << 3 | src[s - 1]
            if toffset == 0:
                # S2's repeat: offset 0 keeps the last offset; codes 5-7
                # carry a longer length in 1-3 more bytes.
                if length >= 5:
                    extra = length - 4
                    if s + extra > n:
                        raise S2Error("s2: corrupt input (repeat)")
                    x = int.from_bytes(src[s:s + extra], "little")
                    s += extra
                    length = x + (4, 1 << 8, 1 << 16)[extra - 1]
            else:
                offset = toffset
            length += 4
        elif kind == _TAG_COPY2:
            s += 3
            if s > n:
                raise S2Error("s2: corrupt input (copy-2)")
            length = 1 + (tag >> 2)
            offset = src[s - 2] | src[s - 1] << 8
        else:
            s += 5
            if s > n:
                raise S2Error("s2: corrupt input (copy-4)")
            length = 1 + (tag >> 2)
            offset = int.from_bytes(src[s - 4:s], "little")
        d = len(dst)
        if offset <= 0 or d < offset or length > dlen - d:
            raise S2Error("s2: corrupt input (copy offset %d length %d at %d)" % (offset, length, d))
        start = d - offset
        if offset >= length:
            dst += dst[start:start + length]
        else:
            # An overlapping copy runs forwards byte by byte: it repeats the
            # last `offset` bytes.
            dst += (dst[start:] * (length // offset + 1))[:length]
    if len(dst) != dlen:
        raise S2Error("s2: corrupt input (decoded %d of %d bytes)" % (len(dst), dlen))
    return bytes(dst)


def encode_block(data):
    """A block ``s2.Decode`` accepts: a raw Snappy block."""
    return bytes(cramjam.snappy.compress_raw(bytes(data)))


def _crc(b):
    """s2.go crc: CRC-32C, masked as the Snappy framing format says."""
    c = crc32c.crc32c(b)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def decode_stream(data, max_size=DEFAULT_MAX_SIZE):
    """``s2.NewReader`` read to the end: the decoded bytes of an S2 or
    Snappy framed stream (concatenated streams included)."""
    src = bytes(data)
    n = len(src)
    out = bytearray()
    pos = 0
    seen_id = snappy = False
    while pos < n:
        if n - pos < 4:
            raise S2Error("s2: corrupt input (chunk header cut off)")
        ctype = src[pos]
        clen = int.from_bytes(src[pos + 1:pos + 4], "little")
        pos += 4
        if not seen_id and ctype != _CHUNK_STREAM_ID:
            raise S2Error("s2: corrupt input (no stream identifier)")
        if clen > n - pos:
            raise S2Error("s2: corrupt input (chunk cut off)")
        body = src[pos:pos + clen]
        pos += clen
        if ctype == _CHUNK_STREAM_ID:
            if body == _MAGIC_S2:
                snappy = False
            elif body == _MAGIC_SNAPPY:
                snappy = True
            else:
                raise S2Error("s2: corrupt input (stream identifier %r)" % body[:16])
            seen_id = True
            continue
        if ctype <= _CHUNK_UNCOMPRESSED:
            if clen < _CHECKSUM or clen > _MAX_DATA_CHUNK:
                raise S2Error("s2: corrupt input (data chunk of %d bytes)" % clen)
            checksum = int.from_bytes(body[:4], "little")
            payload = body[4:]
            limit = _MAX_SNAPPY_BLOCK if snappy else _MAX_BLOCK
            if ctype == _CHUNK_COMPRESSED:
                size, _ = _decoded_len(payload)
                if size > limit:
                    raise S2Error("s2: corrupt input (block of %d bytes)" % size)
                if len(out) + size > max_size:
                    raise S2Error("s2: stream over %d bytes" % max_size)
                block = decode_block(payload, limit)
            else:
                if len(payload) > limit:
                    raise S2Error("s2: corrupt input (block of %d bytes)" % len(payload))
                if len(out) + len(payload) > max_size:
                    raise S2Error("s2: stream over %d bytes" % max_size)
                block = payload
            if _crc(block) != checksum:
                raise S2Error("s2: corrupt input, crc mismatch")
            out += block
            continue
        if ctype <= 0x7F:
            # reserved unskippable chunk types 0x02-0x7f
            raise S2Error("s2: unsupported input (chunk type 0x%02x)" % ctype)
        # padding (_CHUNK_PADDING), S2's index 0x99 and the other skippable 0x80-0xfd
    return bytes(out)


def encode_stream(data):
    """A stream ``s2.NewReader`` accepts: Snappy's framing format
    (``sNaPpY``, blocks of at most 64 KiB)."""
    return bytes(cramjam.snappy.compress(bytes(data)))
