"""Atomic, roll-forward commits of a micro-batch's Parquet files into the tables.

Layout under the output directory::

    events/ messages/ quarantine/ kv/ objects/      the tables (Parquet)
    _checkpoint/                                     Spark's stream checkpoint
    _ingest/lock                                     one writer at a time (flock)
    _ingest/staging/<token>/<table>/...              Spark writes a batch here
    _ingest/staging/<token>.commit                   the commit decision (manifest)
    _ingest/commits.jsonl                            one line per committed batch
    _ingest/derived-<table>.json                     last commit a derived table reflects

A batch is committed by (1) writing the manifest -- the list of file moves,
the batch's feed files and counts -- atomically (temp file, fsync, rename):
that is the commit point; (2) renaming every staged file into its table;
(3) appending the batch to ``commits.jsonl``; (4) removing the staging
directory and the manifest. A crash before (1) leaves only staging debris,
which the next run deletes (the batch is redone); a crash after (1) is
rolled forward by the next run (moves whose source is gone are done). So a
batch's rows appear in ``events``, ``messages`` and ``quarantine`` together
or not at all, as far as any later run can tell.
"""

import fcntl
import json
import os
import shutil
import uuid

TABLES = ("events", "messages", "quarantine")
DERIVED = ("kv", "objects")


class LockedError(Exception):
    pass


def _fsync_dir(path):
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic(path, text):
    tmp = "%s.tmp-%s" % (path, uuid.uuid4().hex[:8])
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(os.path.dirname(path))


class Committer:
    def __init__(self, out):
        self.out = os.path.abspath(out)
        self.meta = os.path.join(self.out, "_ingest")
        self.staging = os.path.join(self.meta, "staging")
        self.log_path = os.path.join(self.meta, "commits.jsonl")
        self._lock_fd = None
        # derived table -> token of the last commit touching it (kept up to
        # date by commits() and by this process's commits)
        self.last_derived = {}
        os.makedirs(self.staging, exist_ok=True)

    # -- locking -----------------------------------------------------------------

    def lock(self):
        fd = os.open(os.path.join(self.meta, "lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise LockedError("another ingest is writing to %s" % self.out)
        os.ftruncate(fd, 0)
        os.write(fd, b"%d\n" % os.getpid())
        self._lock_fd = fd

    def unlock(self):
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- the commit log ------------------------------------------------------------

    def commits(self, tail=None):
        """Committed batches, oldest first (a torn line is ignored); with
        ``tail``, only those in the last ``tail`` bytes of the log."""
        out = []
        try:
            with open(self.log_path, "rb") as f:
                if tail is not None:
                    f.seek(0, os.SEEK_END)
                    f.seek(max(0, f.tell() - tail))
                    if f.tell() > 0:
                        f.readline()  # most likely a partial line
                for line in f:
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
        except FileNotFoundError:
            pass
        for c in out:
            for table in c.get("derived", ()):
                self.last_derived[table] = c.get("token")
        return out

    def _append_log(self, record):
        line = json.dumps(record, separators=(",", ":")) + "\n"
        # A torn line from a crash mid-append must not glue onto this one.
        with open(self.log_path, "a+b") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() > 0:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    f.write(b"\n")
            f.write(line.encode())
            f.flush()
            os.fsync(f.fileno())

    # -- staging -------------------------------------------------------------------

    def new_stage(self, batch_id):
        token = "%010d-%s" % (batch_id, uuid.uuid4().hex[:12])
        return token, os.path.join(self.staging, token)

    def staged_files(self, stage, table):
        """(src, dst) for every data file Spark wrote for ``table`` in ``stage``."""
        root = os.path.join(stage, table)
        moves = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if not d.startswith(("_", "."))]
            for name in filenames:
                if name.startswith(("_", ".")):
                    continue  # _SUCCESS, .crc
                src = os.path.join(dirpath, name)
                rel = os.path.relpath(src, root)
                moves.append((src, os.path.join(self.out, table, rel)))
        return moves

    def commit(self, token, stage, tables, record, fault=None):
        """Commit the staged ``tables`` of batch ``token``; ``record`` (a dict)
        goes to the commit log. ``fault(step)`` is a test hook."""
        moves = []
        for table in tables:
            moves.extend(self.staged_files(stage, table))
        record = dict(record, token=token)
        manifest = {"token": token, "moves": moves, "record": record}
        if fault:
            fault("staged")
        write_atomic(os.path.join(self.staging, token + ".commit"), json.dumps(manifest))
        if fault:
            fault("manifest")
        self._roll_forward(manifest, fault)

    def _roll_forward(self, manifest, fault=None):
        token = manifest["token"]
        for i, (src, dst) in enumerate(manifest["moves"]):
            if os.path.exists(src):
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                os.replace(src, dst)
            if fault:
                fault("move:%d" % i)
        if not any(c.get("token") == token for c in self.commits(tail=1 << 20)):
            self._append_log(manifest["record"])
        for table in manifest["record"].get("derived", ()):
            self.last_derived[table] = token
        shutil.rmtree(os.path.join(self.staging, token), ignore_errors=True)
        try:
            os.unlink(os.path.join(self.staging, token + ".commit"))
        except FileNotFoundError:
            pass

    def recover(self):
        """Finish committed batches, discard uncommitted ones. Returns
        (rolled forward, discarded) counts."""
        done = dropped = 0
        names = sorted(os.listdir(self.staging))
        for name in names:
            if name.endswith(".commit"):
                path = os.path.join(self.staging, name)
                try:
                    with open(path) as f:
                        manifest = json.load(f)
                except (OSError, ValueError):
                    os.unlink(path)  # cannot happen: the manifest is renamed into place
                    continue
                self._roll_forward(manifest)
                done += 1
        for name in os.listdir(self.staging):
            path = os.path.join(self.staging, name)
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
                dropped += 1
            elif ".tmp-" in name:
                os.unlink(path)
        return done, dropped

    # -- derived tables --------------------------------------------------------------

    def derived_token(self, table):
        try:
            with open(os.path.join(self.meta, "derived-%s.json" % table)) as f:
                return json.load(f).get("token")
        except (OSError, ValueError):
            return None

    def install(self, stage, table, token=None):
        """Replace the whole ``<out>/<table>`` by ``<stage>/<table>``; for a
        derived table, remember that it reflects commit ``token``."""
        final = os.path.join(self.out, table)
        old = os.path.join(self.staging, "old-%s-%s" % (table, uuid.uuid4().hex[:8]))
        if os.path.exists(final):
            os.replace(final, old)
        os.replace(os.path.join(stage, table), final)
        if table in DERIVED:
            write_atomic(os.path.join(self.meta, "derived-%s.json" % table),
                         json.dumps({"token": token}))
        shutil.rmtree(old, ignore_errors=True)
        shutil.rmtree(stage, ignore_errors=True)
