"""A micro-batch's per-record work, done in Spark's Python workers.

:func:`stage_partition` is given to ``RDD.mapPartitions`` over groups of the
batch's feed files (file names, balanced by size). Each task reads and
parses its files (spark/fileparse.py) and writes, with pyarrow, into the
batch's staging directory:

* ``events/stream=S/part-<task>-<token>.parquet``: the good records, in feed
  order, ``stream`` as the partition directory (as Spark's ``partitionBy``
  lays it out, escaped the same way);
* ``messages/stream=S/date=D/part-<task>-<token>.parquet``: the puts;
* ``_keys/part-<task>.parquet``: thin columns (a hash of the id, task,
  stream, seq, op, file, line, id) from which the driver finds the
  duplicates.

and returns one row per file (its non-blank line count) and one per bad
line (line, raw text, reason). A task that is run again (a retry) writes
the same names, so nothing is staged twice. The Parquet files are what Spark
would write: snappy, timestamps as INT96 (Spark's default), the partition
columns only in the directory names.
"""

import functools
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from natsbroker.spark.fileparse import EVENTS, parse_file, value_offsets

QUARANTINE = pa.schema([
    ("file", pa.string()), ("line", pa.int64()), ("raw", pa.string()), ("error", pa.string()),
    ("batch", pa.string()), ("ingested_at", pa.timestamp("us", tz="UTC")),
])
KEYS = ("stream", "seq", "op", "file", "line", "id")
# Rows in a row group of a keys file: the driver reads the ids of only the
# groups that hold a row whose id hash is not unique.
KEYS_ROW_GROUP = 16384
# A keys file's columns but the ids: what the driver reads of every row.
KEYS_BUT_ID = ("hash", "task") + KEYS[:-1]
DAY_NS = 86400 * 10 ** 9
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"

# Spark's ExternalCatalogUtils.escapePathName: these become %XX in a partition
# directory's name.
_ESCAPE = set(chr(c) for c in range(1, 32)) | set('"#%\'*/:=?\\\x7f{[]^')


def escape(value):
    if not any(c in _ESCAPE for c in value):
        return value
    return "".join("%%%02X" % ord(c) if c in _ESCAPE else c for c in value)


# Dictionary encoding only where values repeat: on the all-different columns
# (id, seq, ts, time, data, line) Parquet builds a dictionary until it
# overflows and then falls back, for nothing.
_DICTIONARY = ["feed", "stream_created", "op", "reason", "subject", "headers", "purge",
               "config", "kv", "obj", "file", "error", "batch"]


def write_parquet(table, path, **options):
    """Write atomically (temp name, rename), the way Spark writes: snappy, INT96."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
    pq.write_table(table, tmp, compression="snappy", use_deprecated_int96_timestamps=True,
                   use_dictionary=[c for c in _DICTIONARY if c in table.column_names],
                   **options)
    os.replace(tmp, path)


MESSAGE_COLUMNS = ("id", "stream_created", "seq", "subject", "headers", "data", "ts", "time")


def dictionary_codes(col):
    """A column's dictionary codes (int64 numpy, a null a value of its own)
    and its dictionary: the values numbered in order of first appearance,
    one dictionary across the chunks (the hashing is shared; the last
    chunk's dictionary is the whole)."""
    enc = pc.dictionary_encode(col, null_encoding="encode")
    chunks = enc.chunks if isinstance(enc, pa.ChunkedArray) else [enc]
    if not chunks:
        return np.zeros(0, np.int64), pa.array([], col.type)
    codes = np.concatenate([c.indices.to_numpy(zero_copy_only=False) for c in chunks])
    return codes.astype(np.int64), chunks[-1].dictionary


def repeats(ids):
    """A bool array over ``ids`` (in feed order): True where the id occurred
    earlier, i.e. every occurrence but the first."""
    n = len(ids)
    if n == 0:
        return np.zeros(0, bool)
    # dictionary_encode numbers the distinct ids in order of first appearance
    # (one dictionary across chunks), so a row is an id's first occurrence
    # exactly when its number is above every number before it. One hashing
    # pass and a running maximum: 0.2 us an id, where unique() and, when some
    # repeat, a min-per-id grouping took ~1 us.
    codes, _ = dictionary_codes(ids)
    before = np.empty(n, np.int64)
    before[0] = -1
    np.maximum.accumulate(codes[:-1], out=before[1:])
    return codes <= before


_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)
_LOW_BYTES = np.array([(1 << (8 * k)) - 1 for k in range(9)], np.uint64)


def id_hashes(ids):
    """A 64-bit hash of each id (a string column), the same in every process
    and whatever else is in the column: the driver looks for repeats across
    the tasks among the rows whose hash is not unique, and compares only
    their ids (spark/ingest.py). An id is read as little-endian 8-byte words
    (the last one zero-filled), folded by xor-multiply from its length on,
    then avalanched with splitmix64's finalizer; ~40 ns an id."""
    a = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
    n = len(a)
    if n == 0:
        return np.zeros(0, np.uint64)
    chars = a.buffers()[2]
    off = value_offsets(a)
    lens = off[1:] - off[:-1]
    start = off[:-1] - off[0]
    size = int(off[-1] - off[0])
    padded = np.zeros(size + 8, np.uint8)
    if size:
        padded[:size] = np.frombuffer(chars, np.uint8, size, int(off[0]))
    # the 8 bytes from every position, as one (unaligned) uint64 each
    words = np.ndarray((size + 1,), "<u8", padded, 0, (1,))
    h = lens.astype(np.uint64) * _MULTIPLIER
    for w in range(0, int(lens.max()), 8):
        left = lens - w
        live = left > 0
        word = words[np.minimum(start + w, size)] & _LOW_BYTES[np.clip(left, 0, 8)]
        h = np.where(live, (h ^ word) * _MULTIPLIER, h)
    h ^= h >> np.uint64(30)
    h *= np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(27)
    h *= np.uint64(0x94D049BB133111EB)
    h ^= h >> np.uint64(31)
    return h


def partitions(table, parts, keep=None):
    """[(values of ``parts``, rows of ``table`` without the ``parts`` columns)]
    for each distinct value, rows in their order: one stable sort and
    zero-copy slices (a filter per partition would copy the table each time).
    ``keep`` (a bool array), if given: only those rows, in the same one
    ``take`` (a filter first would copy the table once more). A null would
    be a partition value of its own; the callers leave none (a stream is
    never empty, a put without ``ts`` is written apart)."""
    if table.num_rows == 0:
        return []
    codes = np.zeros(table.num_rows, np.int64)
    values = []
    for p in parts:
        part_codes, dictionary = dictionary_codes(table[p])
        codes = codes * len(dictionary) + part_codes
        values.append(dictionary.to_pylist())
    rows = None if keep is None or keep.all() else np.flatnonzero(keep)
    if rows is not None:
        if not len(rows):
            return []
        codes = codes[rows]
    order = np.argsort(codes, kind="stable")
    codes = codes[order]
    data = table.select([c for c in table.column_names if c not in parts])
    if rows is not None:
        data = data.take(pa.array(rows[order]))
    elif codes[0] != codes[-1]:
        data = data.take(pa.array(order))
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
    bounds = list(starts) + [len(codes)]
    out = []
    for i, start in enumerate(starts):
        code = int(codes[start])
        key = []
        for vals in reversed(values):
            key.append(vals[code % len(vals)])
            code //= len(vals)
        out.append((tuple(reversed(key)), data.slice(start, bounds[i + 1] - start)))
    return out


def _dir(root, parts, key):
    return os.path.join(root, *["%s=%s" % (p, escape(str(v))) for p, v in zip(parts, key)])


def write_events(events, stage, name, keep=None):
    """An EVENTS table (its ``keep`` rows, if given) -> staged ``events`` (by
    stream) and ``messages`` (its puts, by stream and date) files named
    ``name``."""
    for (stream,), rows in partitions(events, ["stream"], keep):
        write_parquet(rows, os.path.join(_dir(os.path.join(stage, "events"), ["stream"],
                                              (stream,)), name))
        write_messages(rows, stage, stream, name)


def write_messages(rows, stage, stream, name):
    """The puts among one stream's event ``rows`` (without the stream column)
    -> its staged ``messages`` files, by UTC date of ``ts``; a put without
    ``ts`` under ``date=__HIVE_DEFAULT_PARTITION__``, as Spark puts it."""
    puts = rows.filter(pc.equal(rows["op"], "put"))
    if not puts.num_rows:
        return
    msgs = puts.select(list(MESSAGE_COLUMNS))
    root = _dir(os.path.join(stage, "messages"), ["stream"], (stream,))
    ts = puts["ts"]
    if ts.null_count:
        valid = pc.is_valid(ts)
        write_parquet(msgs.filter(pc.invert(valid)),
                      os.path.join(root, "date=" + NULL_PARTITION, name))
        msgs, ts = msgs.filter(valid), ts.filter(valid)
        if not msgs.num_rows:
            return
    days = np.floor_divide(ts.to_numpy(), DAY_NS).astype(np.int32)  # floor: Spark's pmod/div
    if days[0] == days[-1] and (days == days[0]).all():
        groups = [(days[0], msgs)]  # the usual case: one day
    else:
        groups = [(d, m) for (d,), m in partitions(
            msgs.append_column("date", pa.array(days, pa.int32())), ["date"])]
    for day, m in groups:
        date = pa.scalar(int(day), pa.date32()).as_py()
        write_parquet(m, os.path.join(_dir(root, ["date"], (date,)), name))


def stage_files(named_buffers, stage, token, task):
    """Parse and stage ``[(file name, bytes or a function returning them)]``;
    returns the result rows."""
    parsed = sorted(((name, parse_file(buf() if callable(buf) else buf, name))
                     for name, buf in named_buffers), key=lambda x: x[0])
    rows = []
    for name, p in parsed:
        rows.append((name, p.lines, None, None, None))
        rows.extend((name, None, line, raw, error) for line, raw, error in p.bad)
    tables = [p.events for _, p in parsed if p.events.num_rows]
    if tables and not os.path.isdir(stage):
        # The driver creates the staging directory before the tasks start; gone
        # means the batch was discarded (a restarted ingest's recovery after a
        # kill -9 of this one, whose worker this is): write nothing, or the
        # directories below would make it again.
        raise RuntimeError("staging directory %s is gone: the batch was discarded" % stage)
    if tables:
        events = pa.concat_tables(tables)
        # a repeat is dropped here, the first occurrence of its id kept
        again = repeats(events["id"])
        keep = ~again if again.any() else None
        write_events(events, stage, "part-%05d-%s.parquet" % (task, token), keep)
        events = events.select(list(KEYS))
        if keep is not None:
            events = events.filter(pa.array(keep))
        keys = events.add_column(0, "hash", pa.array(id_hashes(events["id"]))) \
            .add_column(1, "task", pa.array(np.full(events.num_rows, task, np.int32)))
        write_parquet(keys, os.path.join(stage, "_keys", "part-%05d.parquet" % task),
                      row_group_size=KEYS_ROW_GROUP)
    return rows


def balance(feed, names, n):
    """``names`` (files in ``feed``, in feed order) cut into at most ``n``
    consecutive runs of about equal bytes. Consecutive, because a broker
    that crashed repeats records of the file before in the next one: a task
    drops the repeats among its own files before writing anything, and only
    repeats across a cut need the driver to rewrite staged files."""
    sizes = []
    for name in names:
        try:
            sizes.append(os.path.getsize(os.path.join(feed, name)))
        except OSError:
            sizes.append(0)
    n = max(1, min(n, len(names)))
    total = float(sum(sizes)) or 1.0
    groups, cur, acc = [], [], 0
    for name, size in zip(names, sizes):
        cur.append(name)
        acc += size
        # close the run when it reaches its share of the bytes
        if len(groups) < n - 1 and acc >= total * (len(groups) + 1) / n:
            groups.append(cur)
            cur = []
    if cur:
        groups.append(cur)
    return groups


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def stage_partition(feed, stage, token):
    """The function for ``RDD.mapPartitions`` over groups of file names:
    each task reads its files from ``feed`` and stages them; yields the
    result rows (file, lines, line, raw, error)."""

    def run(groups):
        from pyspark import TaskContext
        pa.set_cpu_count(1)  # a task is one of Spark's cores
        pa.set_io_thread_count(1)
        # glibc's malloc, not pyarrow's mimalloc: staging 25 files in one
        # process, alternated three times each, used 0.6-0.7 s of system CPU
        # against 0.85-1.13 s, and ~15% less CPU in all
        pa.set_memory_pool(pa.system_memory_pool())
        ctx = TaskContext.get()
        task = ctx.partitionId() if ctx is not None else 0
        # each file read when it is parsed: only one file's text in memory
        files = [(name, functools.partial(_read, os.path.join(feed, name)))
                 for group in groups for name in group]
        return iter(stage_files(files, stage, token, task))

    return run


__all__ = ["EVENTS", "QUARANTINE", "balance", "stage_partition", "stage_files", "escape",
           "repeats", "write_events", "write_messages", "write_parquet"]
