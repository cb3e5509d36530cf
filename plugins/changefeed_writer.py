"""The change feed's files: records in feed order into ``feed-<n>.tmp``,
completed by fsync and rename to ``feed-<n>.jsonl``, then the checkpoint.

A ``FeedWriter`` runs in a thread of its own, fed batches in feed order
through a queue: formatting the puts (base64 of the payload, the template
line) and all disk work happen there, so the reactor only hands over the
events of a turn. The thread gives the GIL back at every ``write`` (each
chunk of ``CHUNK`` records), so the reactor never waits long for it.

A batch is a list of items, in feed order:

* a ``StreamEvent`` of a put: formatted here;
* ``bytes``: a record already formatted (removals, purges, stream events);
* ``(REPLAY_POS, stream, seq)``: the start-up replay of ``stream`` has
  written everything before ``seq`` (``None``: all of it); the checkpoint
  may not pass it;
* ``(AGE, n)``: file ``n`` is ``max_file_age`` old: complete it.
"""

import binascii
import json
import os
import queue
import threading

from twisted.logger import Logger

from natsbroker.store.base import StreamEvent
from natsbroker.plugins.changefeed_lines import PutLines

log = Logger()

CHUNK = 256  # records per write(): the GIL is given back in between
REPLAY_POS = "replay_pos"
AGE = "age"


def keep_mtime_order(prev_path, fd):
    """Give the file open as ``fd`` a modification time at least 1 ms after
    the previous feed file's. Spark's file source takes files oldest first by
    modification time in milliseconds, ties in directory order; two files
    completed within one millisecond could be read out of name order, and
    then a record repeated after a crash keeps the later file's position."""
    try:
        prev = os.stat(prev_path).st_mtime_ns // 1_000_000
    except OSError:
        return
    st = os.fstat(fd)
    if st.st_mtime_ns // 1_000_000 <= prev:
        os.utime(fd, ns=(st.st_atime_ns, (prev + 1) * 1_000_000))


class FeedWriter:
    """Owns the open feed file, the completed files and ``checkpoint.json``."""

    def __init__(self, directory, max_file_size, file_no, checkpoint, replay_pos, opened):
        self.dir = directory
        self.max_file_size = max_file_size
        self.file_no = file_no  # of the last file opened
        self.checkpoint = checkpoint  # stream -> {"created": ns, "seq": n}
        self.replay_pos = dict(replay_pos)  # stream -> next seq the replay writes
        self.opened = opened  # called in this thread with a new file's number
        self.lines = PutLines()
        self.records = 0
        self._fd = None
        self._size = 0
        self._puts = {}  # stream -> (created, last put seq) in the open file
        self._queue = queue.SimpleQueue()
        self._thread = None

    # -- from the reactor ---------------------------------------------------------

    def start(self):
        self._thread = threading.Thread(target=self._run, name="changefeed", daemon=True)
        self._thread.start()

    def submit(self, batch):
        self._queue.put(batch)

    def stop(self):
        """Write what was submitted, complete the open file, end the thread."""
        self._queue.put(None)
        self._thread.join()

    # -- in the thread ------------------------------------------------------------

    def _run(self):
        while True:
            batch = self._queue.get()
            try:
                if batch is None:
                    self.complete()
                    return
                self.write(batch)
            except Exception:
                log.failure("change feed: writing the feed failed")

    def write(self, batch):
        """Append the batch's records, completing files as they fill up."""
        out = []
        size = self._size
        limit = self.max_file_size
        puts = self._puts
        lines = self.lines
        subjects = lines.subjects
        templates = lines._templates
        b2a = binascii.b2a_base64
        for item in batch:
            cls = item.__class__
            if cls is StreamEvent:
                msg = item.msg
                tpl = templates.get((item.stream, item.stream_created))
                subj = subjects.get(msg.subject)
                if tpl is not None and subj is not None and not msg.hdr:
                    seq = item.seq
                    line = tpl % (seq, seq, item.ts, subj, b"null",
                                  b2a(msg.data, newline=False))
                else:
                    line = lines.put(item)
                puts[item.stream] = (item.stream_created, item.seq)
            elif cls is bytes:
                line = item
            else:
                if item[0] == REPLAY_POS:
                    if item[2] is None:
                        self.replay_pos.pop(item[1], None)
                    else:
                        self.replay_pos[item[1]] = item[2]
                elif item[0] == AGE and item[1] == self.file_no and self._fd is not None:
                    self._size = size
                    self._append(out)
                    out = []
                    self.complete()
                    size = 0
                    puts = self._puts
                continue
            if self._fd is None:
                self._open()
            out.append(line)
            size += len(line)
            if size >= limit:
                self._size = size
                self._append(out)
                out = []
                self.complete()
                size = 0
                puts = self._puts
            elif len(out) >= CHUNK:
                self._append(out)
                out = []
        self._size = size
        self._append(out)

    def _append(self, out):
        if out:
            # Unbuffered: one write per chunk, the GIL released meanwhile.
            data = b"".join(out)
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view):]
            self.records += len(out)

    def _path(self, no, ext):
        return os.path.join(self.dir, "feed-%020d.%s" % (no, ext))

    def _open(self):
        self.file_no += 1
        self._fd = os.open(self._path(self.file_no, "tmp"),
                           os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        self._size = 0
        self.opened(self.file_no)

    def complete(self):
        """fsync the open file, rename it to .jsonl, then move the checkpoint
        to the puts it holds (not past where the replay has got to)."""
        fd, no, puts = self._fd, self.file_no, self._puts
        if fd is None:
            return
        self._fd = None
        self._size = 0
        self._puts = {}
        try:
            keep_mtime_order(self._path(no - 1, "jsonl"), fd)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(self._path(no, "tmp"), self._path(no, "jsonl"))
        self._fsync_dir()
        for stream, (created, seq) in puts.items():
            pos = self.replay_pos.get(stream)
            if pos is not None:
                seq = min(seq, pos - 1)
            self.checkpoint[stream] = {"created": created, "seq": seq}
        self._save_checkpoint()

    def _fsync_dir(self):
        fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _save_checkpoint(self):
        path = os.path.join(self.dir, "checkpoint.json")
        with open(path + ".tmp", "w") as f:
            json.dump(self.checkpoint, f)
            f.flush()
            os.fsync(f.fileno())
        os.rename(path + ".tmp", path)
