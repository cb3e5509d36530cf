"""Change-feed JSON Lines -> Arrow tables in the events / messages schemas (pyarrow + orjson).

Measurement code only (not the product). Two parsers:
  parse_pajson(buf, fname): pyarrow.json.read_json with an explicit schema (headers inferred as a
      struct and turned into a map; malformed files fall back to a per-line orjson check)
  parse_orjson(buf, fname): orjson per line, validated with the records.py rules, columns built
      with pa.array
Both return (events table, rejects [(line, error)], timings {step: cpu s}).
"""

import binascii
import time

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

OPS = ("put", "delete", "purge", "stream_create", "stream_update", "stream_delete")
HEADERS = pa.map_(pa.string(), pa.list_(pa.string()))
PURGE = pa.struct([("filter", pa.string()), ("upto_seq", pa.int64()), ("keep", pa.int64())])
KV = pa.struct([("bucket", pa.string()), ("key", pa.string()), ("operation", pa.string()),
                ("revision", pa.int64())])
OBJ = pa.struct([("bucket", pa.string()), ("object", pa.string()), ("event", pa.string()),
                 ("nuid", pa.string()), ("size", pa.int64()), ("digest", pa.string())])
TIME = pa.timestamp("us", tz="UTC")

EVENTS = pa.schema([
    ("id", pa.string()), ("feed", pa.int32()), ("stream", pa.string()),
    ("stream_created", pa.int64()), ("seq", pa.int64()), ("op", pa.string()),
    ("reason", pa.string()), ("ts", pa.int64()), ("time", TIME), ("subject", pa.string()),
    ("headers", HEADERS), ("data", pa.binary()), ("purge", PURGE), ("config", pa.string()),
    ("kv", KV), ("obj", OBJ), ("file", pa.string()), ("line", pa.int64()),
])
MESSAGES = pa.schema([
    ("id", pa.string()), ("stream_created", pa.int64()), ("seq", pa.int64()),
    ("subject", pa.string()), ("headers", HEADERS), ("data", pa.binary()), ("ts", pa.int64()),
    ("time", TIME), ("stream", pa.string()), ("date", pa.date32()),
])

# read_json: everything explicit except headers (map is not supported by the JSON reader)
JSON_SCHEMA = pa.schema([
    ("id", pa.string()), ("feed", pa.int64()), ("stream", pa.string()),
    ("stream_created", pa.int64()), ("seq", pa.int64()), ("op", pa.string()),
    ("reason", pa.string()), ("ts", pa.int64()), ("subject", pa.string()),
    ("data", pa.string()), ("purge", PURGE), ("config", pa.string()), ("kv", KV), ("obj", OBJ),
])

# ---------------------------------------------------------------- per-line validation (records.py rules)

_KIND = {"id": str, "stream": str, "op": str, "reason": str, "subject": str, "data": str,
         "config": str, "feed": int, "stream_created": int, "seq": int, "ts": int}
_SUB = {"purge": (("filter", str), ("upto_seq", int), ("keep", int)),
        "kv": (("bucket", str), ("key", str), ("operation", str), ("revision", int)),
        "obj": (("bucket", str), ("object", str), ("event", str), ("nuid", str), ("size", int),
                ("digest", str))}
_TN = {str: "a string", int: "an integer"}
_OPSET = frozenset(OPS)


def _jtype(v):
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer",
            float: "number"}.get(type(v), "null")


def check(o):
    """records.py's rules on one parsed line -> (error or None, decoded data or None)."""
    if type(o) is not dict:
        return "not a JSON object", None
    for k in ("id", "stream", "op", "seq"):
        if o.get(k) is None:
            return "missing required field '%s'" % k, None
    for k, t in _KIND.items():
        v = o.get(k)
        if v is not None and type(v) is not t:
            return "field '%s' must be %s, got %s" % (k, _TN[t], _jtype(v)), None
        if t is int and v is not None and not -(1 << 63) <= v < (1 << 63):
            return "field '%s' must be an integer, got an out-of-range integer" % k, None
    h = o.get("headers")
    if h is not None:
        if type(h) is not dict or not all(type(x) is list and all(type(s) is str for s in x)
                                          for x in h.values()):
            return "field 'headers' must be an object of string arrays", None
    for k, subs in _SUB.items():
        v = o.get(k)
        if v is None:
            continue
        if type(v) is not dict:
            return "field '%s' must be an object, got %s" % (k, _jtype(v)), None
        for s, t in subs:
            x = v.get(s)
            if x is not None and type(x) is not t:
                return "field '%s.%s' must be %s, got %s" % (k, s, _TN[t], _jtype(x)), None
    for k in ("id", "stream", "op"):
        if o[k] == "":
            return "field '%s' is empty" % k, None
    if o["op"] not in _OPSET:
        return 'unknown op "%s"' % o["op"], None
    f = o.get("feed")
    if f is not None and f != 1:
        return "unsupported feed format version %d" % f, None
    d = o.get("data")
    if d is not None:
        try:
            return None, binascii.a2b_base64(d, strict_mode=True)
        except (binascii.Error, ValueError):
            return "field 'data' is not valid base64", None
    return None, None


def check_line(line):
    try:
        o = orjson.loads(line)
    except orjson.JSONDecodeError:
        return "invalid JSON", None, None
    err, data = check(o)
    return err, o, data


# ---------------------------------------------------------------- base64, vectorized with numpy

_LUT = np.full(256, 255, np.uint8)
for _i, _c in enumerate(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"):
    _LUT[_c] = _i
_LUT[ord("=")] = 64


def b64_numpy(arr):
    """StringArray of base64 -> (BinaryArray, bool ndarray ok). Strict: length % 4 == 0, only
    alphabet chars, '=' only as the last one or two chars of a value. Invalid values -> null;
    ok is True for valid base64 and for nulls."""
    arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    n = len(arr)
    valid = np.ones(n, bool) if arr.null_count == 0 else \
        arr.is_valid().to_numpy(zero_copy_only=False)
    offs = np.frombuffer(arr.buffers()[1], np.int32)[arr.offset:arr.offset + n + 1].astype(np.int64)
    lens = np.diff(offs)
    good = valid & (lens % 4 == 0)
    if (good | (~valid & (lens == 0))).all():
        return _b64_clean(arr, offs, lens, valid)
    # slow path: values of a bad length, or null slots holding bytes
    sub = arr.filter(pa.array(good))
    so = np.frombuffer(sub.buffers()[1], np.int32)[sub.offset:sub.offset + len(sub) + 1].astype(np.int64)
    out_sub, ok_sub = _b64_clean(sub, so, np.diff(so), np.ones(len(sub), bool))
    idx = np.zeros(n, np.int64)
    idx[good] = np.arange(good.sum())
    out = out_sub.take(pa.array(idx, mask=~good))
    ok = ~valid
    ok[good] = ok_sub
    return out, ok


def _b64_clean(arr, offs, lens, valid):
    n = len(arr)
    raw = np.frombuffer(arr.buffers()[2], np.uint8) if arr.buffers()[2] is not None \
        else np.zeros(0, np.uint8)
    base = offs[0]
    chars = raw[base:offs[-1]]
    v = _LUT[chars].reshape(-1, 4)
    nq = lens // 4
    quad_owner = np.repeat(np.arange(n), nq)
    badq = (v == 255).any(axis=1)
    pad = v == 64
    last = (offs[1:] - base) // 4 - 1  # index of each value's last quad (if nq > 0)
    has = nq > 0
    lastq = last[has]
    # '=' allowed only at positions 2,3 of the last quad, and "x=" then "=" must follow
    padq = pad.any(axis=1)
    notlast = np.ones(len(v), bool)
    notlast[lastq] = False
    badq |= padq & notlast
    lp = pad[lastq]
    badq_last = lp[:, 0] | lp[:, 1] | (lp[:, 2] & ~lp[:, 3])
    badq[lastq] |= badq_last
    bad_val = np.zeros(n, bool)
    if badq.any():
        bad_val[np.unique(quad_owner[badq])] = True
    vv = np.where(pad, 0, v).astype(np.uint8)
    out3 = np.empty((len(v), 3), np.uint8)
    out3[:, 0] = (vv[:, 0] << 2) | (vv[:, 1] >> 4)
    out3[:, 1] = ((vv[:, 1] & 15) << 4) | (vv[:, 2] >> 2)
    out3[:, 2] = ((vv[:, 2] & 3) << 6) | vv[:, 3]
    npad = np.zeros(n, np.int64)
    npad[has] = lp[:, 2].astype(np.int64) + lp[:, 3]
    outlen = nq * 3 - npad
    keep = np.ones((len(v), 3), bool)
    keep[lastq, 2] &= ~lp[:, 3]
    keep[lastq, 1] &= ~lp[:, 2]
    data = out3[keep]
    ooffs = np.zeros(n + 1, np.int32)
    np.cumsum(outlen, out=ooffs[1:])
    ok = valid & ~bad_val
    keepvalid = arr.null_count and arr.offset == 0
    res = pa.Array.from_buffers(pa.binary(), n, [arr.buffers()[0] if keepvalid else None,
                                                  pa.py_buffer(ooffs), pa.py_buffer(data)])
    if bad_val.any() or (arr.null_count and not keepvalid):
        res = pc.if_else(pa.array(ok), res, pa.scalar(None, pa.binary()))
    return res, ok | ~valid  # ok: valid base64 or null


# ---------------------------------------------------------------- shared helpers

def line_index(buf):
    """(start offsets, end offsets) of the lines of buf (without \\n)."""
    a = np.frombuffer(buf, np.uint8)
    nl = np.flatnonzero(a == 10)
    starts = np.concatenate(([0], nl + 1))
    ends = np.concatenate((nl, [len(a)]))
    if starts[-1] == len(a):  # final newline: no extra empty line
        starts, ends = starts[:-1], ends[:-1]
    return starts, ends


def finish(t, fname, lines, data):
    """Add time, file, line, data (binary), order as EVENTS."""
    n = t.num_rows
    ts = t.column("ts")
    time_ = pc.cast(pc.divide(ts, 1000), pa.int64()).cast(TIME) if n else pa.array([], TIME)
    cols = {
        "id": t.column("id"), "feed": pc.cast(t.column("feed"), pa.int32()),
        "stream": t.column("stream"), "stream_created": t.column("stream_created"),
        "seq": t.column("seq"), "op": t.column("op"), "reason": t.column("reason"),
        "ts": ts, "time": time_, "subject": t.column("subject"),
        "headers": t.column("headers"), "data": data, "purge": t.column("purge"),
        "config": t.column("config"), "kv": t.column("kv"), "obj": t.column("obj"),
        "file": pa.array(np.full(n, fname, object), pa.string()) if n else pa.array([], pa.string()),
        "line": pa.array(lines, pa.int64()),
    }
    return pa.table([cols[f.name] for f in EVENTS], schema=EVENTS)


def struct_to_map(col, n):
    """headers inferred by read_json as struct<K1: list<string>, ...> -> map<string, list<string>>."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if pa.types.is_null(col.type) or not pa.types.is_struct(col.type) or col.type.num_fields == 0:
        if pa.types.is_struct(col.type) and col.type.num_fields == 0:
            # all headers are {} or null
            offs = np.zeros(n + 1, np.int32)
            m = pa.MapArray.from_arrays(pa.array(offs), pa.array([], pa.string()),
                                        pa.array([], pa.list_(pa.string())))
            return pc.if_else(col.is_valid(), m, pa.scalar(None, HEADERS))
        return pa.nulls(n, HEADERS)
    names = [col.type.field(i).name for i in range(col.type.num_fields)]
    kids = [col.field(i) for i in range(len(names))]
    for k in kids:
        if k.type != pa.list_(pa.string()):
            raise ValueError("headers value of type %s" % k.type)
    present = np.stack([k.is_valid().to_numpy(zero_copy_only=False) for k in kids], axis=1)
    counts = present.sum(axis=1)
    offs = np.zeros(n + 1, np.int32)
    np.cumsum(counts, out=offs[1:])
    rows, which = np.nonzero(present)  # row-major: per row, keys in field order
    keys = pa.array(np.array(names, object)[which], pa.string())
    # values: take from each child at its rows, then interleave back to row-major order
    vals = pa.concat_arrays([kids[j].take(pa.array(rows[which == j])) for j in range(len(kids))])
    grp_pos = np.concatenate([np.nonzero(which == j)[0] for j in range(len(kids))])
    inv = np.empty(len(grp_pos), np.int64)
    inv[grp_pos] = np.arange(len(grp_pos))
    vals = vals.take(pa.array(inv))
    m = pa.MapArray.from_arrays(pa.array(offs), keys, vals)
    if col.null_count:
        m = pc.if_else(col.is_valid(), m, pa.scalar(None, HEADERS))
    return m


# ---------------------------------------------------------------- parser 1: pyarrow.json

def _pajson_table(buf):
    ro = pj.ReadOptions(use_threads=USE_THREADS, block_size=max(1 << 20, len(buf) + 1))
    po = pj.ParseOptions(explicit_schema=JSON_SCHEMA, unexpected_field_behavior="infer")
    return pj.read_json(pa.BufferReader(buf), read_options=ro, parse_options=po)


USE_THREADS = True


def parse_pajson(buf, fname, b64="numpy"):
    tm = {}
    c0 = time.process_time()
    starts, ends = line_index(buf)
    lens = ends - starts
    blank = lens == 0  # (whitespace-only lines: not handled in this sketch)
    rejects = []
    lines = np.flatnonzero(~blank) + 1
    try:
        t = _pajson_table(buf)
        if t.num_rows != len(lines):
            raise ValueError("row count %d != lines %d" % (t.num_rows, len(lines)))
    except (pa.ArrowInvalid, ValueError):
        # fall back: find the bad lines per line with orjson, re-read the rest
        keep = []
        for ln in lines:
            s, e = starts[ln - 1], ends[ln - 1]
            err, _, _ = check_line(buf[s:e])
            if err is None or err == "field 'data' is not valid base64":
                keep.append(ln)
            else:
                rejects.append((int(ln), err))
        lines = np.array(keep, np.int64)
        good = b"\n".join(bytes(buf[starts[ln - 1]:ends[ln - 1]]) for ln in lines)
        t = _pajson_table(good)
    c1 = time.process_time()
    tm["parse"] = c1 - c0
    n = t.num_rows
    hdr = struct_to_map(t.column("headers"), n) if "headers" in t.column_names \
        else pa.nulls(n, HEADERS)
    t = t.drop_columns([c for c in t.column_names if c not in JSON_SCHEMA.names])
    t = t.append_column("headers", hdr)
    c2 = time.process_time()
    tm["headers"] = c2 - c1
    # checks read_json does not do: required fields, empty strings, op, feed
    ok = pc.and_kleene(pc.is_valid(t["seq"]), pc.is_in(t["op"], value_set=pa.array(OPS)))
    for k in ("id", "stream"):
        ok = pc.and_(ok, pc.fill_null(pc.greater(pc.binary_length(t[k]), 0), False))
    ok = pc.and_(ok, pc.fill_null(pc.equal(t["feed"], 1), True))
    ok = pc.fill_null(ok, False)
    c3 = time.process_time()
    tm["check"] = c3 - c2
    if b64 == "numpy":
        data, dok = b64_numpy(t["data"].combine_chunks())
    else:
        vals = t["data"].to_pylist()
        out, dl = [], []
        for v in vals:
            if v is None:
                out.append(None); dl.append(True)
            else:
                try:
                    out.append(binascii.a2b_base64(v, strict_mode=True)); dl.append(True)
                except (binascii.Error, ValueError):
                    out.append(None); dl.append(False)
        data, dok = pa.array(out, pa.binary()), np.array(dl)
    c4 = time.process_time()
    tm["decode"] = c4 - c3
    okn = ok.to_numpy(zero_copy_only=False) & dok
    if not okn.all():
        for i in np.flatnonzero(~okn):
            rejects.append((int(lines[i]), "checks" if dok[i] else "field 'data' is not valid base64"))
        m = pa.array(okn)
        t, data, lines = t.filter(m), data.filter(m), lines[okn]
    ev = finish(t, fname, lines, data)
    tm["assemble"] = time.process_time() - c4
    return ev, rejects, tm


# ---------------------------------------------------------------- parser 2: orjson per line

_SCALARS = [("id", pa.string()), ("feed", pa.int64()), ("stream", pa.string()),
            ("stream_created", pa.int64()), ("seq", pa.int64()), ("op", pa.string()),
            ("reason", pa.string()), ("ts", pa.int64()), ("subject", pa.string()),
            ("config", pa.string())]


def parse_orjson(buf, fname, validate=True):
    tm = {}
    c0 = time.process_time()
    objs, datas, lines, rejects = [], [], [], []
    loads = orjson.loads
    for i, raw in enumerate(bytes(buf).split(b"\n"), 1):
        if not raw.strip():
            continue
        if validate:
            err, o, d = check_line(raw)
            if err is not None:
                rejects.append((i, err))
                continue
        else:
            try:
                o = loads(raw)
            except orjson.JSONDecodeError:
                rejects.append((i, "invalid JSON"))
                continue
            d = o.get("data")
            d = None if d is None else binascii.a2b_base64(d)
        objs.append(o)
        datas.append(d)
        lines.append(i)
    c1 = time.process_time()
    tm["parse+check+decode"] = c1 - c0
    cols = {}
    for name, typ in _SCALARS:
        cols[name] = pa.array([o.get(name) for o in objs], typ)
    cols["headers"] = pa.array([o.get("headers") for o in objs], HEADERS)
    for name, typ in (("purge", PURGE), ("kv", KV), ("obj", OBJ)):
        cols[name] = pa.array([o.get(name) for o in objs], typ)
    t = pa.table(cols)
    data = pa.array(datas, pa.binary())
    ev = finish(t, fname, np.array(lines, np.int64), data)
    tm["arrays"] = time.process_time() - c1
    return ev, rejects, tm


# ---------------------------------------------------------------- messages, writing

def messages(ev):
    p = ev.filter(pc.equal(ev["op"], "put"))
    date = pc.cast(pc.cast(pc.divide(p["ts"], 86_400_000_000_000), pa.int32()), pa.date32())
    # (ts >= 0 here; a negative ts would need floor division)
    cols = [p[c] for c in MESSAGES.names[:-1]] + [date]
    return pa.table(cols, schema=MESSAGES)


def write_table(t, base, parts, tag, int96=True, dict_cols=None, threads=True):
    import pyarrow.dataset as ds
    fmt = ds.ParquetFileFormat()
    opts = fmt.make_write_options(
        compression="snappy",
        use_dictionary=dict_cols if dict_cols is not None else True,
        use_deprecated_int96_timestamps=int96)
    part = ds.partitioning(pa.schema([t.schema.field(p) for p in parts]), flavor="hive")
    ds.write_dataset(t, base, format="parquet", partitioning=part, file_options=opts,
                     basename_template="part-%s-{i}.parquet" % tag,
                     existing_data_behavior="overwrite_or_ignore", use_threads=threads,
                     max_rows_per_group=1 << 20, max_partitions=4096)
