"""One change-feed file -> an Arrow table of its records and its bad lines.

Runs in Spark's Python workers (spark/stage.py), so the per-record work
stays out of the JVM: on the 1M-record bench feed the JVM parse and Spark's
Parquet writes cost 108-138 JVM CPU seconds, a third of it the JIT warming
up Spark's stack; pyarrow does the same work in ~20 CPU seconds
(tools/bench/ingest_pyarrow/README.md).

Two paths, the same result:

* **fast**: ``pyarrow.json.read_json`` over the whole file with the record
  schema, then vectorized checks. Taken only when the file can be vouched for
  as a whole: every line starts with ``{`` and ends with ``}`` (no blank
  lines, no CR, no other JSON value: pyarrow 26 crashes on a ``null`` line),
  pyarrow reads exactly one row per line with every value of its schema's
  type, every row passes the record checks, and every headers object comes
  out with its names in the line's order and no null value;
* **exact**: otherwise every line goes through spark/lines.py, the JVM
  parse's rules in Python, which names each bad line's problem.

A file the fast path refuses is cut in halves, and the halves again, each
piece tried on the fast path, until pieces of at most :data:`MIN_PIECE`
lines go the exact way: a bad line costs the exact parse of its own piece,
not of its whole file (one bad line in a 10,000-line file: 0.12 CPU s, not
the 0.30 s of the whole file's exact parse; 0.09-0.10 s clean). Lines are
independent (both paths decide each line by itself), so the pieces' results
put together are the whole file's.
"""

import binascii
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
import pybase64

from natsbroker.spark import lines as L

HEADERS = pa.map_(pa.string(), pa.list_(pa.string()))
PURGE = pa.struct([(n, pa.string() if k == "string" else pa.int64()) for n, k in L.PURGE_FIELDS])
KV = pa.struct([(n, pa.string() if k == "string" else pa.int64()) for n, k in L.KV_FIELDS])
OBJ = pa.struct([(n, pa.string() if k == "string" else pa.int64()) for n, k in L.OBJ_FIELDS])
TIME = pa.timestamp("us", tz="UTC")

# The events table's columns in order, with ``stream`` (a partition column
# in the table's directories) still among them.
EVENTS = pa.schema([
    ("id", pa.string()), ("feed", pa.int32()), ("stream", pa.string()),
    ("stream_created", pa.int64()), ("seq", pa.int64()), ("op", pa.string()),
    ("reason", pa.string()), ("ts", pa.int64()), ("time", TIME), ("subject", pa.string()),
    ("headers", HEADERS), ("data", pa.binary()), ("purge", PURGE), ("config", pa.string()),
    ("kv", KV), ("obj", OBJ), ("file", pa.string()), ("line", pa.int64()),
])

# What read_json is told; headers are inferred (its JSON reader has no map
# type) and turned into a map afterwards.
_JSON_SCHEMA = pa.schema([
    ("id", pa.string()), ("feed", pa.int64()), ("stream", pa.string()),
    ("stream_created", pa.int64()), ("seq", pa.int64()), ("op", pa.string()),
    ("reason", pa.string()), ("ts", pa.int64()), ("subject", pa.string()),
    ("data", pa.string()), ("purge", PURGE), ("config", pa.string()), ("kv", KV), ("obj", OBJ),
])
_OPS = pa.array(L.OPS)
_LIST_OK = (pa.list_(pa.string()), pa.list_(pa.null()))


MIN_PIECE = 256


class Parsed:
    """``events``: EVENTS rows of the good records in line order; ``bad``:
    [(line, raw, error)]; ``lines``: the non-blank lines; ``exact``: how many
    of the file's lines went the exact way (``fast``: none did)."""

    __slots__ = ("events", "bad", "lines", "exact")

    def __init__(self, events, bad, lines, exact):
        self.events, self.bad, self.lines, self.exact = events, bad, lines, exact

    @property
    def fast(self):
        return self.exact == 0


def parse_file(buf, name):
    """``buf``: the file's bytes; ``name``: its file name (the ``file`` column)."""
    buf = bytes(buf)
    out = _fast(buf, name)
    return out if out is not None else _pieces(buf, name)


def _pieces(buf, name):
    """The file in pieces (see the module's docstring)."""
    a = np.frombuffer(buf, np.uint8)
    starts = np.r_[0, np.flatnonzero(a == 10) + 1]  # each line's first byte
    if starts[-1] != len(buf):
        starts = np.r_[starts, len(buf)]  # the last line has no newline
    parts = []

    def visit(lo, hi, tried):  # lines [lo, hi), 0-based
        piece = buf[starts[lo]:starts[hi]]
        if hi - lo <= MIN_PIECE:
            parts.append(_exact(piece, name, lo + 1))
            return
        p = None if tried else _fast(piece, name, lo + 1)
        if p is not None:
            parts.append(p)
            return
        mid = (lo + hi) // 2
        visit(lo, mid, False)
        visit(mid, hi, False)

    visit(0, len(starts) - 1, True)
    if len(parts) == 1:
        return parts[0]
    return Parsed(pa.concat_tables([p.events for p in parts]),
                  [b for p in parts for b in p.bad], sum(p.lines for p in parts),
                  sum(p.exact for p in parts))


# -- the fast path ---------------------------------------------------------------------------

def _fast(buf, name, first=1):
    if not buf.endswith(b"}\n") or not buf.startswith(b"{"):
        return None
    a = np.frombuffer(buf, np.uint8)
    ends = np.flatnonzero(a == 10)
    n = len(ends)
    # every line starts with '{' and ends with '}'
    if not ((a[ends[:-1] + 1] == 123).all() and (a[ends - 1] == 125).all()):
        return None
    try:
        t = pj.read_json(
            pa.py_buffer(buf),
            read_options=pj.ReadOptions(use_threads=False, block_size=len(buf) + 1),
            parse_options=pj.ParseOptions(explicit_schema=_JSON_SCHEMA,
                                          unexpected_field_behavior="infer"))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None
    if t.num_rows != n:
        return None  # more than one value on a line
    headers = _headers(t["headers"].combine_chunks() if "headers" in t.column_names else None, n)
    if headers is None:
        return None
    if headers.null_count < n and not _headers_as_written(buf, ends, headers):
        return None
    ok = pc.and_(pc.is_valid(t["seq"]), pc.is_in(t["op"], value_set=_OPS))
    for f in ("id", "stream"):
        ok = pc.and_(ok, pc.greater(pc.binary_length(t[f]), 0))
    ok = pc.and_(ok, pc.fill_null(pc.equal(t["feed"], 1), True))
    if not pc.all(pc.fill_null(ok, False)).as_py():
        return None
    data = _b64(t["data"])
    if data is None:
        return None
    lines = pa.array(np.arange(first, first + n, dtype=np.int64))
    return Parsed(_assemble(t, headers, data, name, lines), [], n, 0)


def _headers(col, n):
    """read_json's inferred headers (a struct, one field per header name) ->
    the map column; None when some value is not an array of strings."""
    if col is None or pa.types.is_null(col.type):
        return pa.nulls(n, HEADERS)
    if not pa.types.is_struct(col.type):
        return None
    kids = []
    for i in range(col.type.num_fields):
        k = col.field(i)
        if pa.types.is_null(k.type):
            k = pa.nulls(len(k), pa.list_(pa.string()))
        elif k.type not in _LIST_OK:
            return None
        kids.append(k.cast(pa.list_(pa.string())))
    names = [col.type.field(i).name for i in range(col.type.num_fields)]
    valid = col.is_valid().to_numpy(zero_copy_only=False)
    if not kids:
        present = np.zeros((n, 0), bool)
    else:
        present = np.stack([k.is_valid().to_numpy(zero_copy_only=False) for k in kids], axis=1)
        present &= valid[:, None]
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(present.sum(axis=1), out=offsets[1:])
    rows, which = np.nonzero(present)  # row-major: per row, the names in field order
    keys = pa.array(np.array(names, object)[which] if len(which) else [], pa.string())
    if len(which):
        taken = [kids[j].take(pa.array(rows[which == j])) for j in range(len(kids))]
        grouped = pa.concat_arrays(taken)
        pos = np.concatenate([np.nonzero(which == j)[0] for j in range(len(kids))])
        inverse = np.empty(len(pos), np.int64)
        inverse[pos] = np.arange(len(pos))
        values = grouped.take(pa.array(inverse))
    else:
        values = pa.array([], pa.list_(pa.string()))
    mask = None if valid.all() else pa.array(~valid)
    return pa.MapArray.from_arrays(pa.array(offsets), keys, values, type=HEADERS, mask=mask)


_PAIRS = json.JSONDecoder(object_pairs_hook=list)
_HEADERS_KEY = b'"headers"'
_BLANK = b" \t\r"


def _after_key(buf, k, end):
    """Where the value starts if the ``"headers"`` at ``k`` is a key (a
    colon follows, blanks around it); -1 if it is not."""
    k += len(_HEADERS_KEY)
    while k < end and buf[k] in _BLANK:
        k += 1
    if k >= end or buf[k] != 58:  # ':'
        return -1
    k += 1
    while k < end and buf[k] in _BLANK:
        k += 1
    return k


def _headers_as_written(buf, ends, headers):
    """True if every row's header map holds the names of its line's headers
    object in the line's order, with no null value. read_json's struct (one
    field per name, in the order first seen in the file) loses both: a row
    with "B" before "A" would come out "A" first, and ``"C": null`` would
    be left out; the JVM's map keeps them. Each line with headers is read
    again, its headers object only, with json: the key found in the bytes
    (it is there as written: a quote in a JSON string is escaped), the
    object decoded from there (~2 us a line with headers, ~14% of the lines
    on the bench feed)."""
    rows = np.flatnonzero(headers.is_valid().to_numpy(zero_copy_only=False))
    offsets = headers.offsets.to_numpy()
    keys = headers.keys.to_pylist()
    starts = np.r_[0, ends[:-1] + 1]
    decode = _PAIRS.raw_decode
    find = buf.find
    for i, start, end in zip(rows.tolist(), starts[rows].tolist(), ends[rows].tolist()):
        value = -1
        k = find(_HEADERS_KEY, start, end)
        while k >= 0:
            at = _after_key(buf, k, end)
            if at >= 0:
                if value >= 0:
                    return False  # the key twice: the exact path decides
                value = at
            k = find(_HEADERS_KEY, k + 1, end)
        if value < 0:
            return False  # written escaped: the exact path decides
        try:
            pairs, _ = decode(buf[value:end].decode("utf-8", "replace"))
        except ValueError:
            return False
        if [k for k, _ in pairs] != keys[offsets[i]:offsets[i + 1]] or \
                any(v is None for _, v in pairs):
            return False
    return True


_EQ, _A = ord("="), ord("A")


def value_offsets(arr):
    """A string or binary array's value offsets (n + 1 of them, int64), read
    from its offsets buffer where the array starts in it."""
    return np.frombuffer(arr.buffers()[1], np.int32, len(arr) + 1,
                         arr.offset * 4).astype(np.int64)


def _b64(col):
    """The data column decoded; None if a value is not base64 that Spark
    reads the same way (the exact path then decides, with Spark's leniency
    for spaces and left-out padding).

    Every value must be whole groups of four (length a multiple of 4) with
    "=" only as its last one or two characters -- ``a2b_base64(strict_mode=
    True)`` alone was not enough, it takes "=" past a complete group
    ("wzZs=", "AAAA====") which Spark refuses. The column's text is then
    decoded in one call: each value's padding is replaced by "A" (so the
    values, all whole groups, can be decoded back to back), the text decoded
    by pybase64 with ``validate=True`` (any character outside the alphabet,
    or an "=" left, refuses the column), and the bytes that stood for the
    padding cut out.
    What a padded group decodes to does not depend on the bits under its
    "=" -- nor on an "A" there -- so each value comes out as alone.
    binascii ran at ~180 MB/s, 1.3 us a value on the bench feed; pybase64
    (SIMD) decodes at >1 GB/s."""
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    n = len(col)
    if n == 0:
        return pa.array([], pa.binary())
    validity, _, chars = col.buffers()
    off = value_offsets(col)
    lens = np.diff(off)
    if (lens & 3).any():
        return None
    base = int(off[0])
    text = bytearray(memoryview(chars)[base:int(off[-1])]) if chars is not None else bytearray()
    raw = np.frombuffer(text, np.uint8)
    ends = off[1:][lens > 0] - base
    last = raw[ends - 1] == _EQ
    second = last & (raw[ends - 2] == _EQ)
    raw[ends[last] - 1] = _A
    raw[ends[second] - 2] = _A
    try:
        # an "=" left (not in the last two places of a value) is refused here
        # too: validate=True takes "=" only as the padding at the end of it all
        decoded = np.frombuffer(pybase64.b64decode(text, validate=True), np.uint8)
    except (binascii.Error, ValueError):
        return None
    full = lens // 4 * 3
    pad = np.zeros(n, np.int64)
    pad[lens > 0] = last.astype(np.int64) + second
    if pad.any():
        dend = np.cumsum(full)
        keep = np.ones(len(decoded), bool)
        keep[dend[pad > 0] - 1] = False
        keep[dend[pad > 1] - 2] = False
        decoded = decoded[keep]
    out = np.zeros(n + 1, np.int64)
    np.cumsum(full - pad, out=out[1:])
    if out[-1] >= 2 ** 31:
        return None  # more than a binary array holds: the exact path builds it in parts
    if validity is not None:
        validity = col.is_valid().buffers()[1]  # realigned at offset 0
    return pa.Array.from_buffers(pa.binary(), n, [validity, pa.py_buffer(out.astype(np.int32)),
                                                  pa.py_buffer(decoded)])


def _assemble(t, headers, data, name, lines):
    n = t.num_rows
    ts = t["ts"].combine_chunks()
    micros = pc.divide(ts, 1000)  # integer division towards zero, like Spark's div
    cols = {
        "feed": pc.cast(t["feed"], pa.int32()),
        "time": micros.cast(pa.int64()).cast(TIME),
        "headers": headers, "data": data,
        "file": pa.array([name] * n, pa.string()), "line": lines,
    }
    return pa.table([cols[f.name] if f.name in cols else t[f.name] for f in EVENTS], schema=EVENTS)


# -- the exact path ---------------------------------------------------------------------------

def _exact(buf, name, first=1):
    records, numbers, bad = [], [], []
    count = 0
    parts = buf.split(b"\n")
    for no, raw in enumerate(parts, first):
        if raw.strip(b" ") == b"":
            continue
        try:
            text = L.strip_cr(raw.decode("utf-8"))
        except UnicodeDecodeError:
            count += 1
            bad.append((no, raw.decode("utf-8", "replace"), "invalid JSON"))
            continue
        if L.is_blank(text):
            continue
        count += 1
        rec, err = L.check(text)
        if err is not None:
            bad.append((no, _clean(text), err))
            continue
        records.append(_clean_record(rec))
        numbers.append(no)
    cols = {f.name: [r[f.name] for r in records] for f in EVENTS if f.name in L.FIELDS_BY_NAME}
    t = pa.table({k: pa.array(v, EVENTS.field(k).type if k != "feed" else pa.int64())
                  for k, v in cols.items()})
    data = t["data"].combine_chunks()
    headers = t["headers"].combine_chunks()
    return Parsed(_assemble(t, headers, data, name, pa.array(numbers, pa.int64())),
                  bad, count, max(len(parts) - (parts[-1] == b""), 1))


def _clean(s):
    """Java writes an unpaired surrogate as '?' when it encodes UTF-8."""
    if isinstance(s, str):
        try:
            s.encode("utf-8")
        except UnicodeEncodeError:
            return s.encode("utf-8", "replace").decode("utf-8")
    return s


def _clean_record(rec):
    for k, v in rec.items():
        if isinstance(v, str):
            rec[k] = _clean(v)
        elif isinstance(v, dict):
            rec[k] = {m: _clean(x) for m, x in v.items()}
        elif k == "headers" and v is not None:
            rec[k] = [(_clean(h), None if vs is None else [_clean(x) for x in vs]) for h, vs in v]
    return rec
