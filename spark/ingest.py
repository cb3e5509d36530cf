"""Ingest natsbroker's change feed into Parquet tables, exactly once per record id.

Usage::

    natsbroker-ingest --feed DIR --out DIR [--once] [--master local[*]]
                      [--trigger-seconds N] [--max-batch-size SIZE]

(or ``python -m natsbroker.spark.ingest``, the same command).

Tables under ``--out`` (columns in spark/README.md): ``events`` (every
record), ``messages`` (every put, payload decoded, partitioned by stream and
UTC date), ``quarantine`` (lines that are not valid records, with the reason),
and two tables derived from ``events``: ``kv`` (live KV state) and
``objects`` (object catalog).

How it runs
-----------
The driver lists ``DIR/feed-*.jsonl`` (``*.tmp``, ``checkpoint.json`` and
anything else are ignored), takes the files the commit log does not name yet,
in name order, and ingests them in micro-batches of at most
``--max-batch-size`` bytes (a file is never split). ``--once`` does that once
and stops; without it the directory is listed again every
``--trigger-seconds``. The two can be alternated freely.

A micro-batch is one Spark job of Python tasks (spark/stage.py), the files
in groups balanced by size, two per core: each task reads its files, parses
and checks every line (spark/fileparse.py, spark/lines.py: the rules of the
JVM parse in spark/records.py, which the tests hold them to) and writes
the staged ``events`` (partitioned by stream, in feed order) and ``messages``
Parquet files itself with pyarrow, returning only its bad lines and counts.
The per-record work thus stays out of the JVM, where parsing and Parquet
writing cost several times the CPU (spark/README.md, section 5). The driver
then finds the duplicates on thin staged columns with pyarrow, writes the
quarantine rows and commits. Spark schedules the tasks, on ``local[N]`` or a
cluster alike (whose workers must see the feed and output directories, as
for any file source).

Exactly-once design
-------------------
Repeats have two sources: the broker writes records again after a crash
(same ``id``, possibly in a later file), and the ingest itself redoes a
micro-batch after being killed. Both are handled by making the *output* the
authority, not Spark's checkpoint:

1. Within a batch, records are de-duplicated by ``id``, keeping the first in
   feed order (file name, line).
2. Against earlier batches, by the ``id`` column of ``events``. An ``id``
   names one mutation of one stream at one sequence
   (``STREAM@created:op:seq[:ts]``), so only the ``events`` partitions of the
   batch's streams and, through Parquet min/max statistics, only the files
   overlapping the batch's seq range are read: the cost follows the batch,
   not the table. Quarantined lines are keyed by (file, line) likewise.
3. The batch's rows are written by its tasks into a private staging directory and
   committed atomically with a roll-forward manifest (spark/commit.py): once
   the manifest is written (the commit point) a crash is completed by the next
   start; before it, the staging is thrown away and the batch redone. The
   ``events``, ``messages`` and ``quarantine`` rows of a batch therefore land
   together or not at all, and ``messages`` is always exactly the puts of
   ``events``.
4. The commit log names each batch's feed directory and files, and the files
   it names are not read again. When a batch is redone anyway (the commit log
   lost, or the same files under another feed directory), step 2 drops
   everything already committed: the tables stay exactly-once; the summary
   counts those records as duplicates.

The derived tables (``kv``, ``objects``) are recomputed from ``events``:
with ``--once`` at the end of the run, when following the feed at most every
max(trigger, 5) seconds, and only when a commit touched a ``KV_``/``OBJ_``
stream. Each is written aside and swapped in by rename, and remembers the
commit it reflects, so a start after a crash recomputes any that is behind.

A lock file keeps a second ingest off the output directory. Readers may briefly see part of a batch while its files are renamed
into place (milliseconds); they never see a partially written file. The
protocol protects against process crashes (kill -9); the manifest and commit
log are fsynced, the Parquet files are not.
"""

import argparse
import fnmatch
import json
import os
import shutil
import signal
import sys
import threading
import time

from natsbroker.spark.commit import Committer, LockedError

FEED_GLOB = "feed-*.jsonl"
PROG = "natsbroker-ingest"
# Feed bytes per micro-batch. Every batch pays fixed costs: about twenty Spark
# jobs with their planning, code generation and the JIT compilation of the
# code paths they use, and the file listings of the staging area. On a 1M-record
# (514 MB) backfill on local[2], 128 MB batches (four) spent a quarter of the
# wall time with no Spark job running; one batch cut the JVM's CPU seconds by
# ~17% and the jobs from 93 to 42 with no more executor time (spark/README.md,
# section 5). A file is never split, and following the feed the batches are
# as small as what arrived.
DEFAULT_BATCH_BYTES = 1 << 30


class UsageError(Exception):
    """A problem with the command line or its directories: exit status 2."""


# -- table schemas ---------------------------------------------------------------------

def _events_schema():
    """``events`` as Spark reads it (the derived tables computed in Spark)."""
    from pyspark.sql import types as T

    from natsbroker.spark.records import RECORD_SCHEMA

    fields = list(RECORD_SCHEMA.fields)
    events = T.StructType(
        fields[:8] + [T.StructField("time", T.TimestampType())] + fields[8:]
        + [T.StructField("file", T.StringType()), T.StructField("line", T.LongType())])
    return events


def check_feed_dir(path):
    """Raise UsageError unless ``path`` is a readable directory."""
    if not os.path.exists(path):
        raise UsageError("feed directory %s does not exist" % path)
    if not os.path.isdir(path):
        raise UsageError("feed path %s is not a directory" % path)
    try:
        os.listdir(path)
    except OSError as e:
        raise UsageError("feed directory %s is not readable: %s" % (path, e.strerror))
    if not os.access(path, os.R_OK | os.X_OK):
        raise UsageError("feed directory %s is not readable: permission denied" % path)


def feed_files(path):
    try:
        return sorted(n for n in os.listdir(path) if fnmatch.fnmatchcase(n, FEED_GLOB))
    except OSError:
        return []


def _n(x):
    return "{:,}".format(x)


class Stats:
    def __init__(self):
        self.files = self.lines = self.valid = self.new = self.quarantined = self.batches = 0
        self.gone = 0  # feed files removed before their batch read them
        self.busy = 0.0  # seconds spent in batches

    @property
    def duplicates(self):
        return self.valid - self.new

    def rate(self, ingest):
        """Records/s: over the whole run for --once; over the time spent in
        batches when following the feed (idle time is not slowness)."""
        span = time.time() - ingest.started if ingest.once else self.busy
        return int(self.lines / max(span, 1e-6))


def _ids_at(files, rows):
    """The ``id`` of the keys files' rows ``rows`` (ascending positions in
    the files' rows one after the other), read from only the row groups
    that hold them."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    out, base = [], 0
    for f in files:
        pf = pq.ParquetFile(f)
        md = pf.metadata
        bounds = base + np.cumsum([0] + [md.row_group(i).num_rows
                                         for i in range(md.num_row_groups)])
        mine = rows[(rows >= base) & (rows < bounds[-1])]
        if len(mine):
            group = np.searchsorted(bounds, mine, "right") - 1
            groups = np.unique(group)
            t = pf.read_row_groups(groups.tolist(), columns=["id"])
            sizes = bounds[groups + 1] - bounds[groups]
            first = np.r_[0, np.cumsum(sizes)[:-1]]  # each read group's first row in t
            at = first[np.searchsorted(groups, group)] + (mine - bounds[group])
            out.extend(t["id"].take(pa.array(at)).chunks)
        base = int(bounds[-1])
    return pa.chunked_array(out, pa.string())


class Ingest:
    """The ingest of one feed directory into one output directory.

    ``spark``: the SparkSession to use; ``max_bytes_per_batch`` /
    ``max_files_per_batch``: the micro-batch size (bytes of feed files, or
    number of files when given); ``log``: where progress lines go (a file,
    default stderr; None for silence); ``fault``: a test hook called with the
    commit step names."""

    def __init__(self, spark, feed, out, checkpoint=None, max_bytes_per_batch=DEFAULT_BATCH_BYTES,
                 max_files_per_batch=None, log=sys.stderr, fault=None):
        self.spark = spark
        self.feed = os.path.abspath(feed)
        self.out = os.path.abspath(out)
        self.checkpoint = os.path.abspath(checkpoint or os.path.join(self.out, "_checkpoint"))
        self.max_bytes = max_bytes_per_batch
        self.max_files = max_files_per_batch
        self.log = log
        self.fault = fault
        self.committer = Committer(self.out)
        self.events_schema = _events_schema()
        self.stats = Stats()
        self.done_files = set()
        self.batch_error = None
        self.started = None
        self.next_batch = 0
        self._reading = None  # the staging directory while the batch's tasks read the feed
        self._finished = True
        self.query = None
        self.once = True
        self.derived_every = 10.0
        self._mark = time.time()

    def mark(self, step):
        """With INGEST_TIMINGS=1 in the environment: how long each step took."""
        now = time.time()
        if os.environ.get("INGEST_TIMINGS"):
            print("[%s] timing: %-24s %6.1fs" % (PROG, step, now - self._mark),
                  file=sys.stderr, flush=True)
        self._mark = now

    def say(self, text):
        if self.log is not None:
            print("[%s] %s" % (PROG, text), file=self.log, flush=True)

    def table(self, name):
        return os.path.join(self.out, name)

    # -- start-up and the end ---------------------------------------------------------------

    def _legacy_feed(self):
        """The feed directory an output made before the commit log named its
        feed (Spark's stream checkpoint did) was made from, if known."""
        try:
            with open(os.path.join(self.checkpoint, "natsbroker-feed.json")) as f:
                return json.load(f).get("feed")
        except (OSError, ValueError):
            return None

    def prepare(self):
        """Lock the output, finish or discard interrupted commits, learn which
        files of this feed directory are done."""
        self.committer.lock()
        done, dropped = self.committer.recover()
        if done or dropped:
            self.say("recovered an interrupted run: %d batch(es) completed, %d discarded"
                     % (done, dropped))
        legacy = self._legacy_feed() or self.feed
        commits = self.committer.commits()
        self.next_batch = max([c.get("batch", -1) for c in commits] + [-1]) + 1
        for c in commits:
            if c.get("feed", legacy) == self.feed:
                self.done_files.update(c.get("files", ()))
        if not os.path.isdir(self.table("quarantine")):
            # An empty table with its schema, so that queries work before the
            # first bad line.
            from natsbroker.spark.stage import QUARANTINE, write_parquet
            _, stage = self.committer.new_stage(0)
            write_parquet(QUARANTINE.empty_table(),
                          os.path.join(stage, "quarantine", "part-00000-empty.parquet"))
            self.committer.install(stage, "quarantine")

    def close(self):
        self.committer.unlock()

    def stale_derived(self):
        """Derived tables that are missing or behind the last commit touching them."""
        last = self.committer.last_derived
        return [(t, last.get(t)) for t in ("kv", "objects")
                if not os.path.isdir(self.table(t))
                or (t in last and self.committer.derived_token(t) != last[t])]

    def finish_tables(self):
        """Bring the derived tables up to date (batches never touch them, so
        this may run beside the stream)."""
        for table, token in self.stale_derived():
            self.refresh_derived(table, token)
            self.mark("derived " + table)

    # -- one micro-batch ------------------------------------------------------------------

    def _existing_ids(self, ranges):
        """The ids already in ``events`` that the batch could repeat: an id
        names a stream and a sequence, so only those partitions and (by
        Parquet statistics) row groups overlapping the batch's seq range are
        read."""
        import pyarrow as pa
        import pyarrow.dataset as ds
        path = self.table("events")
        if not ranges or not os.path.isdir(path):
            return None
        dset = ds.dataset(path, format="parquet", partitioning=ds.partitioning(
            pa.schema([("stream", pa.string())]), flavor="hive"))
        pred = None
        if len(ranges) <= 64:
            for s, (lo, hi) in ranges.items():
                c = (ds.field("stream") == s) & (ds.field("seq") >= lo) & (ds.field("seq") <= hi)
                pred = c if pred is None else (pred | c)
        else:
            pred = ds.field("stream").isin(list(ranges))
        return dset.to_table(columns=["id"], filter=pred)["id"]

    def _duplicates(self, keys, files):
        """A bool array over ``keys`` (read from ``files``, in feed order):
        the records not to keep, i.e. repeats of an id within the batch (all
        but the first in feed order) and ids already in ``events``.

        Only rows whose id hash (spark/stage.py: id_hashes) another row
        shares can repeat an id of the batch; their ids are read, from the
        row groups that hold them, and compared. On a 1M-record backfill that
        is a sort of 1M integers and a few thousand ids, where hashing all
        the ids here took 0.3-0.7 s after 0.3 s of reading them."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        from natsbroker.spark.stage import repeats
        n = keys.num_rows
        drop = np.zeros(n, bool)
        ranges = {r["stream"]: (r["seq_min"], r["seq_max"]) for r in
                  keys.group_by("stream").aggregate([("seq", "min"), ("seq", "max")]).to_pylist()}
        existing = self._existing_ids(ranges)
        ids = None
        if existing is not None and len(existing):
            # a batch overlapping earlier ones (rare): every id is compared
            ids = pa.chunked_array([c for f in files
                                    for c in pq.read_table(f, columns=["id"])["id"].chunks],
                                   pa.string())
            drop |= pc.is_in(ids, value_set=existing.combine_chunks()) \
                .to_numpy(zero_copy_only=False)
        h = keys["hash"].combine_chunks().to_numpy(zero_copy_only=False)
        order = np.argsort(h, kind="stable")
        same = h[order[1:]] == h[order[:-1]]
        if same.any():
            shared = np.zeros(n, bool)
            shared[order[1:][same]] = True
            shared[order[:-1][same]] = True
            rows = np.flatnonzero(shared)
            drop[rows] |= repeats(_ids_at(files, rows) if ids is None
                                  else ids.take(pa.array(rows)))
        return drop

    def _rewrite_without(self, stage, token, dropped):
        """Take the ``dropped`` rows (keys: file, line, task, stream) out of
        the staged events and messages files of the tasks and streams that
        wrote them (rare: repeats across two tasks or batches only)."""
        import glob

        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        from natsbroker.spark import stage as S

        names = pc.unique(dropped["file"])

        def row_keys(t):  # (file, line) as one int64
            idx = pc.index_in(t["file"], value_set=names).cast(pa.int64())
            return pc.add(pc.multiply(idx, 1 << 32), t["line"])

        for task in sorted(set(dropped["task"].to_pylist())):
            mine = dropped.filter(pc.equal(dropped["task"], task))
            gone = row_keys(mine)
            part = "part-%05d-%s.parquet" % (task, token)
            for stream in sorted(set(mine["stream"].to_pylist())):
                d = os.path.join(stage, "events", "stream=" + S.escape(stream))
                path = os.path.join(d, part)
                t = pq.read_table(path)
                t = t.filter(pc.invert(pc.fill_null(pc.is_in(row_keys(t), value_set=gone),
                                                    False)))
                os.unlink(path)
                if t.num_rows:
                    S.write_parquet(t, path)
                for old in glob.glob(os.path.join(stage, "messages", "stream=" + S.escape(stream),
                                                  "date=*", part)):
                    os.unlink(old)
                S.write_messages(t, stage, stream, part)

    def _existing_quarantine(self, files):
        """(file, line) already quarantined for the batch's files."""
        import pyarrow.dataset as ds
        path = self.table("quarantine")
        if not os.path.isdir(path):
            return set()
        t = ds.dataset(path, format="parquet").to_table(
            columns=["file", "line"], filter=ds.field("file").isin(files))
        return set(zip(t["file"].to_pylist(), t["line"].to_pylist()))

    def process_files(self, files, stop=None):
        """Ingest one micro-batch: the feed files ``files`` (names)."""
        batch_id = self.next_batch
        self.next_batch += 1
        self._reading = None
        try:
            self._process_files(files, batch_id)
        except Exception:
            if stop is not None and stop.is_set():
                return  # cancelled: the staging is discarded, the batch redone next time
            stage, self._reading = self._reading, None
            gone = [n for n in files if not os.path.exists(os.path.join(self.feed, n))]
            if stage is None or not gone:
                raise
            # Removed (by hand, or by a retention job) between the listing and
            # the tasks' reading: its records cannot be ingested any more, the
            # rest of the batch can. Nothing of it was committed.
            shutil.rmtree(stage, ignore_errors=True)
            self.stats.gone += len(gone)
            s, them = ("s", "them") if len(gone) > 1 else ("", "it")
            self.say("warning: feed file%s %s removed before batch %d read %s: not ingested;"
                     " the batch is done again without %s"
                     % (s, ", ".join(gone), batch_id, them, them))
            rest = [n for n in files if n not in gone]
            if rest:
                self.process_files(rest, stop)

    def _process_files(self, names, batch_id):
        import datetime

        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        from natsbroker.spark import stage as S

        t0 = time.time()
        self.mark("waiting")
        token, stage = self.committer.new_stage(batch_id)
        os.makedirs(stage, exist_ok=True)

        # The one pass over the batch's text, in Spark's Python workers: read,
        # parse, check, write the staged events and messages (spark/stage.py).
        # One task per group of files, the groups balanced by size.
        sc = self.spark.sparkContext
        groups = S.balance(self.feed, names, 2 * sc.defaultParallelism)
        self._reading = stage  # a failure from here to the end of the job: see process_files
        result = sc.parallelize(groups, len(groups)) \
            .mapPartitions(S.stage_partition(self.feed, stage, token)).collect()
        self._reading = None
        self.mark("parse")
        files = sorted({r[0] for r in result})
        n_lines = sum(r[1] for r in result if r[1] is not None)
        bad = sorted((r[0], r[2], r[3], r[4]) for r in result if r[2] is not None)
        n_bad = len(bad)
        n_valid = n_lines - n_bad

        tables = []
        counts = {}
        keys_dir = os.path.join(stage, "_keys")
        if n_valid and os.path.isdir(keys_dir):
            # the tasks' keys files in task order are in feed order: the tasks
            # hold consecutive runs of files (spark/stage.py: balance)
            key_files = [os.path.join(keys_dir, n) for n in sorted(os.listdir(keys_dir))
                         if n.endswith(".parquet")]
            # all but the ids: those are read where a hash is shared (_duplicates)
            keys = pa.concat_tables([pq.read_table(f, columns=list(S.KEYS_BUT_ID))
                                     for f in key_files])
            self.mark("keys read")
            drop = self._duplicates(keys, key_files)
            self.mark("duplicates")
            if drop.any():
                self._rewrite_without(stage, token, keys.filter(pa.array(drop)))
                self.mark("rewrite")
                keys = keys.filter(pa.array(~drop))
            for r in keys.group_by(["stream", "op"]).aggregate([("seq", "count")]).to_pylist():
                counts[(r["stream"], r["op"])] = r["seq_count"]
            shutil.rmtree(keys_dir, ignore_errors=True)
            if keys.num_rows:
                tables.append("events")
                if pc.any(pc.equal(keys["op"], "put")).as_py():
                    tables.append("messages")
            self.mark("events")
        n_new = sum(counts.values())

        n_quarantined = 0
        if n_bad:
            seen = self._existing_quarantine(files)
            bad = [b for b in bad if (b[0], b[1]) not in seen]
            if bad:
                now = datetime.datetime.now(datetime.timezone.utc)
                cols = list(zip(*bad))
                q = pa.table(list(cols) + [[token] * len(bad), [now] * len(bad)],
                             schema=S.QUARANTINE)
                S.write_parquet(q, os.path.join(stage, "quarantine", "part-%s.parquet" % token))
                n_quarantined = len(bad)
                tables.append("quarantine")
            self.mark("quarantine")

        streams = {s for s, _ in counts}
        derived = [t for t, prefix in (("kv", "KV_"), ("objects", "OBJ_"))
                   if any(s.startswith(prefix) for s in streams)]
        record = {"batch": batch_id, "feed": self.feed, "files": files, "lines": n_lines, "valid": n_valid,
                  "new": n_new, "duplicates": n_valid - n_new, "quarantined": n_quarantined,
                  "derived": derived, "time": round(time.time(), 3)}
        self.committer.commit(token, stage, tables, record, fault=self.fault)
        self.mark("commit")

        st = self.stats
        took = time.time() - t0
        st.batches += 1
        st.busy += took
        st.files += len(files)
        st.lines += n_lines
        st.valid += n_valid
        st.new += n_new
        st.quarantined += n_quarantined
        self.done_files.update(files)
        total = len(set(feed_files(self.feed)) | self.done_files)
        self.say("batch %d: %s files, %s records (%s new, %s duplicates, %s quarantined) in %.1fs,"
                 " %s records/s | %s/%s files done, %s records this run, %s records/s"
                 % (batch_id, _n(len(files)), _n(n_lines), _n(n_new), _n(n_valid - n_new),
                    _n(n_quarantined), took, _n(int(n_lines / max(took, 1e-6))),
                    _n(len(self.done_files)), _n(total), _n(st.lines), _n(st.rate(self))))
        if n_quarantined:
            self.say("warning: %s line(s) quarantined in batch %d, see %s"
                     % (_n(n_quarantined), batch_id, self.table("quarantine")))

    # -- derived tables --------------------------------------------------------------------

    def refresh_derived(self, table, token):
        """Recompute ``kv`` or ``objects`` from ``events`` and swap it in."""
        from pyspark.sql import functions as F

        from natsbroker.spark import derive, state
        from natsbroker.spark.stage import write_parquet

        compute = derive.kv_state if table == "kv" else derive.object_catalog
        prefix = "KV_" if table == "kv" else "OBJ_"
        path = self.table("events")
        events = state.read_events(path, prefix)
        if events is not None:  # few enough rows: in this process (spark/state.py)
            t = state.kv_state(events) if table == "kv" else state.object_catalog(events)
            _, stage = self.committer.new_stage(0)
            write_parquet(t, os.path.join(stage, table, "part-00000-%s.parquet"
                                          % os.path.basename(stage)))
            self.committer.install(stage, table, token)
            return
        try:
            parts = [n for n in os.listdir(path) if n.startswith("stream=" + prefix)]
        except FileNotFoundError:
            parts = []
        if parts:
            events = self.spark.read.schema(self.events_schema).parquet(path) \
                .where(F.col("stream").startswith(prefix))
            df = compute(events)
        else:  # nothing to derive: an empty table, without running the query
            schema = compute(self.spark.createDataFrame([], self.events_schema)).schema
            df = self.spark.createDataFrame([], schema)
        order = ["bucket", "key"] if table == "kv" else ["bucket", "object"]
        _, stage = self.committer.new_stage(0)
        df.coalesce(1).sortWithinPartitions(*order).write.parquet(os.path.join(stage, table))
        self.committer.install(stage, table, token)

    # -- running ---------------------------------------------------------------------------

    def pending(self):
        """Completed feed files not yet committed, oldest first."""
        return [n for n in feed_files(self.feed) if n not in self.done_files]

    def plan(self, names):
        """Split ``names`` into micro-batches: at most ``max_files`` files, or
        at most ``max_bytes`` bytes (a file is never split; a larger file is
        a batch of its own)."""
        batches, cur, size = [], [], 0
        for n in names:
            try:
                b = os.path.getsize(os.path.join(self.feed, n))
            except OSError:
                continue
            full = (len(cur) >= self.max_files) if self.max_files else (size + b > self.max_bytes)
            if cur and full:
                batches.append(cur)
                cur, size = [], 0
            cur.append(n)
            size += b
        if cur:
            batches.append(cur)
        return batches

    def _cancel_on(self, stop):
        """Cancel the running Spark job as soon as ``stop`` is set, so that a
        SIGTERM does not wait for a large batch (its staging is discarded; the
        batch is redone by the next run)."""
        def watch():
            stop.wait()
            if not self._finished:
                try:
                    self.spark.sparkContext.cancelAllJobs()
                except Exception:
                    pass
        threading.Thread(target=watch, name="natsbroker-ingest-stop", daemon=True).start()

    def run(self, once=True, trigger_seconds=10.0, stop=None):
        """Run to the end (``once``) or until ``stop`` (a threading.Event) is
        set; returns the Stats.

        Every ``trigger_seconds`` (once with ``once``) the feed directory is
        listed and the files not yet committed are ingested in micro-batches.
        Which files are done is the commit log's word (``_ingest/commits.jsonl``,
        per feed directory), so no other checkpoint is kept."""
        self.once = once
        self.derived_every = max(trigger_seconds, 5.0)
        self.started = time.time()
        self._finished = False
        stop = stop or threading.Event()
        self.mark("start")
        try:
            self.prepare()
            self._cancel_on(stop)
            names = feed_files(self.feed)
            pending = len(set(names) - self.done_files)
            if once:
                self.say("ingesting %s: %s feed files, %s not yet ingested"
                         % (self.feed, _n(len(names)), _n(pending)))
            else:
                self.say("following %s every %gs (%s feed files not yet ingested); Ctrl-C stops"
                         % (self.feed, trigger_seconds, _n(pending)))
            last_refresh = time.time()
            while not stop.is_set():
                for files in self.plan(self.pending()):
                    if stop.is_set():
                        break
                    self.process_files(files, stop)
                    if not once and time.time() - last_refresh >= self.derived_every:
                        last_refresh = time.time()
                        self.finish_tables()
                if once or stop.wait(trigger_seconds):
                    break
                if time.time() - last_refresh >= self.derived_every:
                    # following the feed: the derived tables catch up with the
                    # commits at most every derived_every seconds
                    last_refresh = time.time()
                    self.finish_tables()
            self.finish_tables()
        finally:
            self._finished = True
            stop.set()  # ends the watcher thread
            self.close()
        return self.stats

    def summary(self):
        st = self.stats
        elapsed = time.time() - self.started
        lines = ["%s: %s records from %s files in %.1fs%s (%s records/s): %s new, "
                 "%s duplicates dropped, %s quarantined"
                 % (PROG, _n(st.lines), _n(st.files), elapsed,
                    "" if self.once else ", %.1fs of it in %d batches" % (st.busy, st.batches),
                    _n(st.rate(self)), _n(st.new), _n(st.duplicates), _n(st.quarantined))]
        if st.quarantined:
            lines.append("%s: quarantined lines: SELECT file, line, error FROM parquet.`%s`"
                         % (PROG, self.table("quarantine")))
        if st.gone:
            lines.append("%s: %s feed file(s) removed before they were read: not ingested"
                         % (PROG, _n(st.gone)))
        return "\n".join(lines)


# -- command line ----------------------------------------------------------------------------

def parse_size(text):
    """'128m' -> 134217728 (k, m, g: powers of 1024; a plain number is bytes)."""
    text = text.strip().lower().rstrip("b")
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(text[-1:], 1)
    value = int(float(text[:-1] if mult > 1 else text) * mult)
    if value < 1:
        raise ValueError(text)
    return value


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Ingest natsbroker's change feed into Parquet tables, exactly once.")
    p.add_argument("--feed", required=True, metavar="DIR", help="the change-feed directory")
    p.add_argument("--out", required=True, metavar="DIR", help="where the tables are written")
    p.add_argument("--master", default="local[*]", help="Spark master (default: local[*])")
    p.add_argument("--once", action="store_true",
                   help="ingest what is there, then exit (default: keep following the feed)")
    # Spark's stream checkpoint is gone (the commit log says which files are
    # done); the option is still accepted, so that old command lines run.
    p.add_argument("--checkpoint", metavar="DIR", help=argparse.SUPPRESS)
    p.add_argument("--trigger-seconds", type=float, default=10.0, metavar="N",
                   help="continuous mode: look for new files every N seconds (default: 10)")
    p.add_argument("--max-batch-size", default="1g", metavar="SIZE",
                   help="feed bytes per micro-batch, e.g. 128m, 2g (default: 1g; "
                        "a file is never split)")
    p.add_argument("--max-files-per-batch", type=int, metavar="N",
                   help="feed files per micro-batch (instead of --max-batch-size)")
    p.add_argument("--driver-memory", default="2g", help="Spark driver memory (default: 2g)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="extra Spark configuration (repeatable)")
    p.add_argument("--verbose", action="store_true", help="Spark warnings and full tracebacks")
    args = p.parse_args(argv)
    if args.trigger_seconds <= 0:
        p.error("--trigger-seconds must be positive")
    if args.max_files_per_batch is not None and args.max_files_per_batch < 1:
        p.error("--max-files-per-batch must be at least 1")
    try:
        args.max_batch_bytes = parse_size(args.max_batch_size)
    except ValueError:
        p.error("--max-batch-size: expected a size like 128m, got %r" % args.max_batch_size)
    conf = {}
    for item in args.conf:
        if "=" not in item:
            p.error("--conf expects KEY=VALUE, got %r" % item)
        k, v = item.split("=", 1)
        conf[k] = v
    args.conf = conf
    return args


def _one_line(exc):
    text = str(exc).strip() or exc.__class__.__name__
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("Traceback", "File ", "at ")):
            return line[:500]
    return text.splitlines()[0][:500]


def main(argv=None):
    args = parse_args(argv)
    try:
        check_feed_dir(args.feed)
        try:
            os.makedirs(os.path.join(args.out, "_ingest"), exist_ok=True)
        except OSError as e:
            raise UsageError("cannot create output directory %s: %s" % (args.out, e.strerror))
        if not os.access(args.out, os.W_OK | os.X_OK):
            raise UsageError("output directory %s is not writable" % args.out)
        probe = Committer(args.out)
        probe.lock()  # fail fast, before Spark starts, if another ingest runs
        probe.unlock()
    except (UsageError, LockedError) as e:
        print("%s: error: %s" % (PROG, e), file=sys.stderr)
        return 2

    if args.checkpoint:
        print("%s: note: --checkpoint is no longer used: the commit log in %s says which "
              "feed files are done" % (PROG, os.path.join(args.out, "_ingest")), file=sys.stderr)
    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    from natsbroker.spark.session import build_session
    conf = dict(args.conf)
    conf.setdefault("spark.driver.memory", args.driver_memory)
    try:
        spark = build_session(args.master, conf=conf, verbose=args.verbose)
    except Exception as e:  # no Java, bad master, ...
        print("%s: error: cannot start Spark: %s" % (PROG, _one_line(e)), file=sys.stderr)
        return 1
    ingest = Ingest(spark, args.feed, args.out, checkpoint=args.checkpoint,
                    max_bytes_per_batch=args.max_batch_bytes,
                    max_files_per_batch=args.max_files_per_batch)
    status = 0
    try:
        ingest.run(once=args.once, trigger_seconds=args.trigger_seconds, stop=stop)
    except (LockedError, UsageError) as e:
        print("%s: error: %s" % (PROG, e), file=sys.stderr)
        status = 2
    except Exception as e:
        if args.verbose:
            import traceback
            traceback.print_exc()
        print("%s: error: ingest failed: %s" % (PROG, _one_line(e)), file=sys.stderr)
        status = 1
    if ingest.started is not None and status != 2:
        print(ingest.summary(), flush=True)
    try:
        spark.stop()
    except Exception:
        pass
    return status


if __name__ == "__main__":
    sys.exit(main())
