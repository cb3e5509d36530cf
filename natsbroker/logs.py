"""Log output in nats-server's line format: ``[pid] date time [INF] message``.

Operators' tooling (and client test harnesses that wait for "Server is ready")
read these lines, so the shape follows nats-server's.
"""

import os
import sys
import time

from twisted.logger import (FilteringLogObserver, LogLevel, LogLevelFilterPredicate,
                            formatEvent, globalLogBeginner)

_LEVELS = {
    LogLevel.debug: "DBG", LogLevel.info: "INF", LogLevel.warn: "WRN",
    LogLevel.error: "ERR", LogLevel.critical: "FTL",
}


class NatsLineObserver:
    """Writes each event as one nats-server style line."""

    def __init__(self, stream, logtime=True):
        self.stream = stream
        self.logtime = logtime
        self.pid = os.getpid()
        self.closed = False

    def __call__(self, event):
        if self.closed:
            return
        # A failed start's [FTL] line (``nats_fatal``) is the last line, as
        # nats-server exits right after it: the shutdown that follows is not news.
        self.closed = bool(event.get("nats_fatal"))
        text = formatEvent(event)
        failure = event.get("log_failure")
        if failure is not None:
            text += "\n" + failure.getTraceback()
        level = "TRC" if event.get("nats_trace") else _LEVELS.get(event.get("log_level"), "INF")
        if self.logtime:
            t = event.get("log_time") or time.time()
            stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(t))
            line = "[%d] %s.%06d [%s] %s\n" % (self.pid, stamp, int((t % 1) * 1e6), level, text)
        else:
            line = "[%d] [%s] %s\n" % (self.pid, level, text)
        self.stream.write(line)
        self.stream.flush()


_line_observer = None  # the one start_logging set up, for reopen()


def start_logging(config):
    """Send twisted.logger events to stderr or ``config.log_file``."""
    global _line_observer
    stream = open(config.log_file, "a") if config.log_file else sys.stderr
    level = LogLevel.debug if (config.debug or config.trace) else LogLevel.info
    predicate = LogLevelFilterPredicate(defaultLogLevel=level)
    _line_observer = NatsLineObserver(stream, config.logtime)
    observer = FilteringLogObserver(_line_observer, [predicate])
    globalLogBeginner.beginLoggingTo([observer], redirectStandardIO=False)


def reopen(path):
    """Log to ``path`` opened afresh (SIGUSR1, after the file was rotated).

    As nats-server, a file that cannot be opened ends the process, in Go's
    plain log format; returns False when logging is not set up here."""
    observer = _line_observer
    if observer is None:
        return False
    try:
        stream = open(path, "a")
    except OSError as e:
        from natsbroker.fatal import path_error

        sys.stderr.write("%s error opening file: %s\n" % (time.strftime("%Y/%m/%d %H:%M:%S"),
                                                          path_error("open", path, e)))
        sys.stderr.flush()
        os._exit(1)
    old, observer.stream = observer.stream, stream
    if old is not sys.stderr:
        old.close()
    return True
