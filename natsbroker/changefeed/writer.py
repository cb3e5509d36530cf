"""The change feed's files: records in feed order into ``feed-<n>.tmp``,
completed by fsync and rename to ``feed-<n>.jsonl``, then the checkpoint.

A ``FeedWriter`` owns the files. The broker runs it in a process of its own
(``main``, started and fed by ``changefeed_process``): formatting the puts (base64 of the payload, the
template line) and all disk work happen there, beside the broker's reactor
rather than under its GIL (a writer thread in the broker held the GIL for a
microsecond or more per record, which the reactor waited for).

A batch is a list of items, in feed order:

* puts as a run: ``stream`` (a ``str``, which is how a run is told apart),
  ``stream_created, seq, count``, then ``ts, subject, hdr, data`` for each of
  ``count`` puts of that stream, their sequences ``seq``, ``seq + 1``, ...
  (what crosses the pipe: no tuple per message, and the stream, its
  creation time and the sequence once a run); or a ``StreamEvent``;
  formatted here;
* ``bytes``: a record already formatted (removals, purges, stream events);
* ``(REPLAY_POS, stream, seq)``: the start-up replay of ``stream`` has
  written everything before ``seq`` (``None``: all of it); the checkpoint
  may not pass it;
* ``(AGE, n)``: file ``n`` is ``max_file_age`` old: complete it.

The pipe: frames of a 4-byte little-endian length and a ``marshal``ed value.
The first is the writer's settings (a dict), then batches (lists), then
``None``: complete the open file and exit. End of input without ``None``
means the broker is gone: exit leaving the open file as a crash would (the
next start removes it and writes its puts again). The writer answers on its
standard output, one line each: ``opened <n>`` (for the file's age timer),
``completed <n> <records>``, ``error <text>``. It holds ``writer.lock`` in the
feed directory (a lock its parent took and handed over) until it exits, so a
new broker never works on files a previous writer is still finishing.
"""

import binascii
import json
import marshal
import os
import signal
import struct
import sys

from natsbroker import private
from natsbroker.changefeed.lines import PutLines
from natsbroker.store.base import StoredMsg, StreamEvent

CHUNK = 256  # records per write()
REPLAY_POS = "replay_pos"
AGE = "age"
CHECKPOINT = "checkpoint.json"


def keep_mtime_order(prev_path, fd):
    """Give the file open as ``fd`` a modification time at least 1 ms after
    the previous feed file's. natsbroker-ingest takes files in name order,
    but a reader using Spark's file source (or anything else that sorts by
    age) takes them oldest first by modification time in milliseconds, ties
    in directory order; two files completed within one millisecond could be
    read out of name order, and then a record repeated after a crash keeps
    the later file's position."""
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
        self.completed = None  # called with (file number, records so far) after each rename

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
        i = 0
        n = len(batch)
        left = 0  # puts still to come in the current run
        stream = created = tpl = None
        seq = 0
        while i < n:
            if left:
                ts = batch[i]
                subject = batch[i + 1]
                hdr = batch[i + 2]
                data = batch[i + 3]
                i += 4
                left -= 1
                if tpl is None:
                    tpl = templates.get((stream, created))
                subj = subjects.get(subject)
                if tpl is not None and subj is not None and not hdr:
                    line = tpl % (seq, seq, ts, subj, b"null", b2a(data, newline=False))
                else:
                    line = lines.put(StreamEvent(stream, created, "put", seq, ts,
                                                 msg=StoredMsg(seq, subject, hdr, data, ts)))
                    tpl = None  # the first put of a stream makes its template
                puts[stream] = (created, seq)
                seq += 1
            else:
                item = batch[i]
                i += 1
                cls = item.__class__
                if cls is str:
                    stream = item
                    created = batch[i]
                    seq = batch[i + 1]
                    left = batch[i + 2]
                    i += 3
                    tpl = None
                    continue
                if cls is StreamEvent:
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
                        self._finish(out, size)
                        out, size, puts = [], 0, self._puts
                    continue
            if self._fd is None:
                self._open()
            out.append(line)
            size += len(line)
            if size >= limit:
                self._finish(out, size)
                out, size, puts = [], 0, self._puts
            elif len(out) >= CHUNK:
                self._append(out)
                out = []
        self._size = size
        self._append(out)

    def _finish(self, out, size):
        """Write ``out``, the open file's last lines (``size`` bytes in all),
        and complete the file; a new one opens with the next line. (``puts``
        is then a new dict: write() takes it again.)"""
        self._size = size
        self._append(out)
        self.complete()

    def _append(self, out):
        if out:
            # Unbuffered: one write per chunk.
            data = b"".join(out)
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view):]
            self.records += len(out)

    def _path(self, no, ext):
        return os.path.join(self.dir, "feed-%020d.%s" % (no, ext))

    def _open(self):
        self.file_no += 1
        # A new file (the broker removed unfinished ones before starting
        # this writer): never written through something planted there.
        self._fd = private.open_file(self._path(self.file_no, "tmp"),
                                     os.O_WRONLY | os.O_CREAT | os.O_EXCL)
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
        if self.completed is not None:
            self.completed(no, self.records)

    def _fsync_dir(self):
        fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _save_checkpoint(self):
        # A new temporary file (O_EXCL | O_NOFOLLOW, unique name, 0600),
        # renamed over the checkpoint: a planted symlink is never followed.
        private.write_atomic(os.path.join(self.dir, CHECKPOINT),
                             json.dumps(self.checkpoint).encode())


# -- the writer process ---------------------------------------------------------------

FRAME = struct.Struct("<I")


def frame(value):
    """``value`` as one frame of the pipe (marshal version 2: no table of
    shared references to keep per object, which the values do not have)."""
    data = marshal.dumps(value, 2)
    return FRAME.pack(len(data)) + data


def _read_frame(stream):
    head = stream.read(FRAME.size)
    if len(head) < FRAME.size:
        return EOFError
    n = FRAME.unpack(head)[0]
    data = stream.read(n)
    if len(data) < n:
        return EOFError
    return marshal.loads(data)


def main():
    # The broker stops the writer through the pipe: a Ctrl-C or SIGTERM meant
    # for the broker must not cut the feed short.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    source = sys.stdin.buffer
    out = sys.stdout

    def say(text):
        out.write(text + "\n")
        out.flush()

    cfg = _read_frame(source)
    if cfg is EOFError:
        return 0
    w = FeedWriter(cfg["dir"], cfg["max_file_size"], cfg["file_no"], cfg["checkpoint"],
                   cfg["replay_pos"], lambda no: say("opened %d" % no))
    w.completed = lambda no, records: say("completed %d %d" % (no, records))
    while True:
        batch = _read_frame(source)
        if batch is EOFError:
            return 0  # the broker is gone: leave the open file as a crash would
        try:
            if batch is None:
                w.complete()
                return 0
            w.write(batch)
        except Exception as e:
            say("error %s" % (" ".join(("%s: %s" % (e.__class__.__name__, e)).split()),))


if __name__ == "__main__":
    sys.exit(main())
