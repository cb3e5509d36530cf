"""The broker's side of the feed's writer process (``changefeed_writer``).

``WriterProcess`` starts a Python running ``changefeed_writer.main`` and
hands it the feed's batches. In the reactor, ``submit`` only turns a
batch into one frame (puts become plain tuples, ``marshal``led in one C
call); a pump thread writes the frames to the pipe, the GIL released while
it blocks, and a reader thread takes the writer's answers (``opened <n>`` for
the age timers, ``completed``, ``error``). Everything else -- formatting,
files, fsync, the checkpoint -- costs the writer's CPU, not the reactor's.

The feed directory's ``writer.lock`` is taken here before the directory is
read and handed to the writer, which holds it until it exits: a broker
restarted after a crash waits until the previous writer has finished with
its pipe's last frames, and two brokers cannot share one feed directory.
"""

import fcntl
import os
import queue
import subprocess
import sys
import threading
import time

from twisted.logger import Logger

from natsbroker import private
from natsbroker.changefeed.writer import frame

log = Logger()

LOCK = "writer.lock"
WRITER_MAIN = ("import sys; from natsbroker.changefeed.writer import main; "
               "sys.exit(main())")
_PIPE_SIZE = 1 << 20  # bytes the pipe buffers (Linux F_SETPIPE_SZ), fewer wake-ups
_F_SETPIPE_SZ = 1031


class FeedDirBusy(Exception):
    """Another writer holds the feed directory."""


def lock_dir(directory, timeout):
    """Take ``writer.lock`` in ``directory`` (an open fd), waiting up to
    ``timeout`` seconds for a writer that is still finishing."""
    fd = private.open_file(os.path.join(directory, LOCK), os.O_RDWR | os.O_CREAT)
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                raise FeedDirBusy("change feed directory %s is in use by another writer"
                                  % directory) from None
            time.sleep(0.01)


def _source_root():
    """The directory natsbroker is imported from, for the writer's sys.path."""
    import natsbroker
    return os.path.dirname(os.path.dirname(os.path.abspath(natsbroker.__file__)))


class WriterProcess:
    """The writer process, fed in feed order. From the reader thread,
    ``opened(n)`` is called when the writer opens file ``n``, and
    ``died(self, status)`` if it ends without having been stopped."""

    def __init__(self, directory, max_file_size, file_no, checkpoint, replay_pos, opened,
                 lock_fd, died=None):
        self.dir = directory
        self.opened = opened
        self.died = died
        self._stopping = False
        self.records = 0  # records in completed files, as the writer reports them
        self.completed_files = 0
        self._settings = {"dir": directory, "max_file_size": max_file_size,
                          "file_no": file_no, "checkpoint": checkpoint,
                          "replay_pos": dict(replay_pos)}
        self._lock_fd = lock_fd
        self._queue = queue.SimpleQueue()
        self._proc = None
        self._pump = self._reader = None
        self._broken = False

    def start(self):
        env = dict(os.environ)
        root = _source_root()
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self._proc = subprocess.Popen(
            # -c, not -m: runpy cannot run a compiled module as __main__.
            [sys.executable, "-c", WRITER_MAIN],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=self.dir,
            pass_fds=(self._lock_fd,), start_new_session=True, bufsize=0)
        # The writer holds the lock now (the same open file); ours goes.
        os.close(self._lock_fd)
        self._lock_fd = None
        try:
            fcntl.fcntl(self._proc.stdin.fileno(), _F_SETPIPE_SZ, _PIPE_SIZE)
        except OSError:
            pass
        self._queue.put(frame(self._settings))
        self._pump = threading.Thread(target=self._run_pump, name="changefeed-pump", daemon=True)
        self._reader = threading.Thread(target=self._run_reader, name="changefeed-reader",
                                        daemon=True)
        self._pump.start()
        self._reader.start()

    # -- from the reactor ---------------------------------------------------------

    def submit(self, batch):
        """Queue a batch: a list of the items ``changefeed_writer`` takes,
        puts as runs of their fields (not ``StreamEvent``s, which marshal
        cannot carry)."""
        if batch:
            self._queue.put(frame(batch))

    def stop(self, timeout=60.0):
        """Write what was submitted, let the writer complete the open file, wait for it."""
        if self._proc is None:
            return
        self._stopping = True
        self._queue.put(frame(None))
        self._queue.put(None)
        self._pump.join()
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log.error("change feed: the writer did not finish in {t:g}s; stopping it", t=timeout)
            self._proc.kill()
            self._proc.wait()
        self._reader.join(5)
        if self._proc.returncode:
            log.error("change feed: the writer exited with status {s}", s=self._proc.returncode)
        self._proc = None

    def close(self):
        """After ``died``: end the threads, reap the process."""
        if self._proc is None:
            return
        self._stopping = True
        self._queue.put(None)
        self._pump.join()
        self._proc.wait()
        self._proc = None

    # -- threads --------------------------------------------------------------------

    def _run_pump(self):
        fd = self._proc.stdin.fileno()
        get = self._queue.get
        while True:
            data = get()
            if data is None:
                break
            # Frames queued meanwhile go in the same write.
            more = []
            while True:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self._queue.put(None)
                    break
                more.append(nxt)
            if more:
                data = b"".join([data, *more])
            if self._broken:
                continue
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            except OSError:
                self._broken = True  # the writer is gone: the reader thread tells
        try:
            self._proc.stdin.close()
        except OSError:
            pass

    def _run_reader(self):
        for raw in self._proc.stdout:
            word, _, rest = raw.decode("utf-8", "replace").rstrip("\n").partition(" ")
            if word == "opened":
                self.opened(int(rest))
            elif word == "completed":
                no, records = rest.split()
                self.completed_files = int(no)
                self.records = int(records)
            elif word == "error":
                log.error("change feed: writing the feed failed: {e}", e=rest)
        if not self._stopping and self.died is not None:
            self.died(self, self._proc.wait())
