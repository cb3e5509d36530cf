"""Log output as nats-server writes it: ``[pid] date time [INF] message`` on
stderr or in a file (rotated at a size limit), or to syslog; or, natsbroker's
own option, one JSON object a line.

Operators' tooling (and client test harnesses that wait for "Server is ready")
read these lines, so the shapes follow nats-server's (its ``logger`` package).
Twisted's own chatter (ports starting and closing, factories, the main loop)
is not news to a NATS operator and is left out, here and under twistd.
"""

import datetime
import json
import os
import re
import socket
import sys
import time
import urllib.parse

from twisted.application import service
from twisted.logger import (
    FilteringLogObserver,
    LogLevel,
    PredicateResult,
    formatEvent,
    globalLogBeginner,
    globalLogPublisher,
)

from natsbroker.gocompat.quote import go_quote

_LABELS = {
    LogLevel.debug: "DBG", LogLevel.info: "INF", LogLevel.warn: "WRN",
    LogLevel.error: "ERR", LogLevel.critical: "FTL",
}
# nats-server's colours, on a terminal only.
_COLOURS = {"INF": "32", "DBG": "36", "WRN": "0;93", "ERR": "31", "FTL": "31", "TRC": "33"}
_JSON_LEVELS = {"DBG": "debug", "INF": "info", "WRN": "warn", "ERR": "error", "FTL": "fatal",
                "TRC": "trace"}


def label(event):
    """The event's nats-server level label: INF, DBG, TRC, WRN, ERR or FTL."""
    if event.get("nats_trace"):
        return "TRC"
    return _LABELS.get(event.get("log_level"), "INF")


def event_text(event):
    text = formatEvent(event)
    failure = event.get("log_failure")
    if failure is not None:
        text += "\n" + failure.getTraceback()
    return text


# -- what is left out --------------------------------------------------------------

# Twisted's lines that say nothing to a NATS operator: tcp.Port's (through
# the legacy log, so matched by text), the factories' (without noisy = False)
# and the reactor's last words.
_TWISTED_LEGACY = re.compile(r"\S.* starting on \S+$|\((?:TCP |UDP |UNIX )?Port \S+ Closed\)$")
_TWISTED_FORMATS = {"Starting factory {factory!r}", "Stopping factory {factory!r}",
                    "Main loop terminated."}


def twisted_noise(event):
    """True for Twisted's start/stop lines (see above)."""
    if event.get("log_format") in _TWISTED_FORMATS:
        return True
    if event.get("log_namespace") == "log_legacy" and not event.get("isError"):
        message = event.get("message") or ()
        return len(message) == 1 and bool(_TWISTED_LEGACY.match(str(message[0])))
    return False


class LevelPredicate:
    """nats-server's levels: [DBG] with ``debug`` (-D), [TRC] with ``trace``
    (-V), each on its own; everything else always; Twisted's noise never."""

    def __init__(self, debug=False, trace=False):
        self.debug = debug
        self.trace = trace

    def __call__(self, event):
        if twisted_noise(event):
            return PredicateResult.no
        if event.get("nats_trace"):
            return PredicateResult.maybe if self.trace else PredicateResult.no
        if event.get("log_level") == LogLevel.debug and not self.debug:
            return PredicateResult.no
        return PredicateResult.maybe


# -- line formats --------------------------------------------------------------------


def _stamp(t, utc):
    # Go's log.LstdFlags | log.Lmicroseconds
    parts = time.gmtime(t) if utc else time.localtime(t)
    return "%s.%06d " % (time.strftime("%Y/%m/%d %H:%M:%S", parts), int((t % 1) * 1e6))


class NatsLineFormat:
    """``[pid] 2026/01/02 15:04:05.000000 [INF] text``, nats-server's lines."""

    def __init__(self, logtime=True, utc=False, colours=False):
        self.logtime = logtime
        self.utc = utc
        self.colours = colours
        self.prefix = "[%d] " % os.getpid()

    def line(self, level, text, t=None, event=None, end="\n"):
        stamp = _stamp(time.time() if t is None else t, self.utc) if self.logtime else ""
        if self.colours:
            level = "\x1b[%sm%s\x1b[0m" % (_COLOURS[level], level)
        return "%s%s[%s] %s%s" % (self.prefix, stamp, level, text, end)

    def direct(self, level, text):
        # nats-server's file logger writes its own rotation notices (logDirect):
        # local time always, and a CRLF.
        stamp = _stamp(time.time(), False) if self.logtime else ""
        return "%s%s[%s] %s\r\n" % (self.prefix, stamp, level, text)


_EVENT_KEYS = {"format", "message", "isError", "system", "time", "why", "failure",
               "nats_trace", "nats_fatal"}


def _plain(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


class JsonLineFormat:
    """natsbroker's own: one JSON object a line, with the event's fields.

    ``{"time": "2026-01-02T15:04:05.000000Z", "level": "info", "pid": 1,
    "msg": "Server is ready", "logger": "natsbroker.server", ...fields}``"""

    def __init__(self, logtime=True):
        self.logtime = logtime
        self.pid = os.getpid()

    def line(self, level, text, t=None, event=None, end="\n"):
        record = {}
        if self.logtime:
            t = time.time() if t is None else t
            record["time"] = datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime(
                "%Y-%m-%dT%H:%M:%S.%fZ")
        record["level"] = _JSON_LEVELS[level]
        record["pid"] = self.pid
        record["msg"] = text
        if event is not None:
            if event.get("log_namespace") and event["log_namespace"] != "log_legacy":
                record["logger"] = event["log_namespace"]
            failure = event.get("log_failure")
            if failure is not None:
                record["msg"] = formatEvent(event)
                record["traceback"] = failure.getTraceback()
            for key, value in event.items():
                if key.startswith("log_") or key in _EVENT_KEYS or key in record:
                    continue
                record[key] = _plain(value)
        return json.dumps(record, ensure_ascii=False, default=str) + "\n"

    def direct(self, level, text):
        return self.line(level, text)


# -- where lines go ----------------------------------------------------------------


class LogFile:
    """The ``-l`` file, rotated as nats-server's: past ``limit`` bytes it is
    renamed ``<name>.YYYY.MM.DD.hh.mm.ss.nnnnnnnnn`` and started afresh; with
    ``max_num``, only that many files are kept (the live one among them)."""

    def __init__(self, path, fmt, limit=0, max_num=0):
        self.path = path
        self.fmt = fmt
        self.limit = limit
        self.max_num = max_num
        self.stream = self.open(path)
        self.size = os.fstat(self.stream.fileno()).st_size

    @staticmethod
    def open(path):
        # 0640, as nats-server's (defaultLogPerms)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        return os.fdopen(fd, "a", encoding="utf-8", newline="")

    def write(self, text):
        self.stream.write(text)
        self.stream.flush()
        self.size += len(text.encode("utf-8", "replace"))
        if self.limit > 0 and self.size > self.limit:
            self.rotate()

    def flush(self):
        self.stream.flush()

    def close(self):
        self.stream.close()

    def rotate(self):
        self.stream.close()
        now = time.time_ns()
        parts = time.localtime(now // 10**9)
        backup = "%s.%s.%09d" % (self.path, time.strftime("%Y.%m.%d.%H.%M.%S", parts), now % 10**9)
        try:
            os.rename(self.path, backup)
        except OSError:
            pass  # as nats-server: carry on in the same file
        self.stream = self.open(self.path)
        line = self.fmt.direct("INF", 'Rotated log, backup saved as %s' % go_quote(backup))
        self.stream.write(line)
        self.stream.flush()
        self.size = len(line.encode())
        if self.max_num > 0:
            self.purge()

    def purge(self):
        directory, base = os.path.split(self.path)
        try:
            names = sorted(os.listdir(directory or "."))
        except OSError as e:
            self._direct("ERR", "Unable to read directory %s for log purge (%s), will attempt next "
                         "rotation" % (go_quote(directory), e.strerror))
            return
        stamp = re.compile(re.escape(base) + r"\.\d{4}(?:\.\d{2}){5}\.\d{1,9}$")
        backups = [n for n in names if stamp.match(n)]
        for name in backups[:max(0, len(backups) - (self.max_num - 1))]:
            try:
                os.remove(os.path.join(directory, name))
            except OSError as e:
                self._direct("ERR", "Unable to remove backup log file %s (%s), will attempt next "
                             "rotation" % (go_quote(name), e.strerror))
                return
            self._direct("INF", "Purged log file %s" % go_quote(name))

    def _direct(self, level, text):
        self.stream.write(self.fmt.direct(level, text))
        self.stream.flush()


class StreamObserver:
    """Writes each event as one line (nats-server's, or JSON) to ``stream``."""

    def __init__(self, stream, fmt):
        self.stream = stream
        self.fmt = fmt
        self.closed = False

    def __call__(self, event):
        if self.closed:
            return
        # A failed start's [FTL] line (``nats_fatal``) is the last line, as
        # nats-server exits right after it: the shutdown that follows is not news.
        self.closed = bool(event.get("nats_fatal"))
        self.stream.write(self.fmt.line(label(event), event_text(event), event.get("log_time"), event))
        self.stream.flush()


class NatsLineObserver(StreamObserver):
    """nats-server's lines to ``stream`` (kept for callers that build one)."""

    def __init__(self, stream, logtime=True):
        super().__init__(stream, NatsLineFormat(logtime))


# -- syslog --------------------------------------------------------------------------

# severities (RFC 5424) for nats-server's calls: Noticef, Warnf, Errorf, Fatalf
# (Crit), Debugf; Tracef is a notice too.
_SEVERITY = {"INF": 5, "TRC": 5, "WRN": 4, "ERR": 3, "FTL": 2, "DBG": 7}
_LOCAL_SOCKETS = ("/dev/log", "/var/run/syslog", "/var/run/log")


class SyslogError(Exception):
    """Syslog cannot be reached; the text is nats-server's."""


def syslog_tag():
    """nats-server's GetSysLoggerTag: the program's base name."""
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if not name or name.startswith("__main__"):
        name = "natsbroker"
    return name


def _go_dial_error(network, address, e):
    from natsbroker.fatal import go_strerror

    if isinstance(e, socket.gaierror):
        host = address.rpartition(":")[0] if network != "unix" else address
        return "dial %s: lookup %s: no such host" % (network, host)
    return "dial %s %s: connect: %s" % (network, address, go_strerror(e))


class SyslogObserver:
    """Go's log/syslog writer, as nats-server uses it: ``-s`` to the local
    daemon (facility daemon, ``<29>Jan _2 15:04:05 tag[pid]: text``), ``-r``
    to a remote one (facility kern, ``<5>2006-01-02T15:04:05Z07:00 host
    tag[pid]: text``).  The level is the severity; there is no label."""

    def __init__(self, url=None):
        self.tag = syslog_tag()
        self.pid = os.getpid()
        self.hostname = socket.gethostname()
        if url is None:
            self.facility, self.local = 3 << 3, True
            self.connect = self._local
        else:
            self.facility = 0
            self.network, self.address = _syslog_address(url)
            self.local = self.network == "unix"
            self.connect = self._dial
        self.sock = self.connect()

    def _local(self):
        for path in _LOCAL_SOCKETS:
            for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
                s = socket.socket(socket.AF_UNIX, kind)
                try:
                    s.connect(path)
                    return s
                except OSError:
                    s.close()
        raise SyslogError('error connecting to syslog: "Unix syslog delivery error"')

    def _dial(self):
        network, address = self.network, self.address
        try:
            if network == "unix":
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(address)
                return s
            host, _, port = address.rpartition(":")
            kind = socket.SOCK_DGRAM if network == "udp" else socket.SOCK_STREAM
            family, _, _, _, addr = socket.getaddrinfo(host.strip("[]"), int(port), 0, kind)[0]
            s = socket.socket(family, kind)
            s.connect(addr)
            return s
        except (OSError, ValueError) as e:
            if isinstance(e, ValueError):
                e = OSError(0, "invalid port")
            raise SyslogError("error connecting to syslog: %s"
                              % go_quote(_go_dial_error(network, address, e))) from None

    def format(self, level, text, t=None):
        priority = self.facility | _SEVERITY[level]
        t = time.time() if t is None else t
        nl = "" if text.endswith("\n") else "\n"
        if self.local:
            stamp = time.strftime("%b ", time.localtime(t)) + "%2d" % time.localtime(t).tm_mday + \
                time.strftime(" %H:%M:%S", time.localtime(t))
            return "<%d>%s %s[%d]: %s%s" % (priority, stamp, self.tag, self.pid, text, nl)
        stamp = datetime.datetime.fromtimestamp(int(t)).astimezone().isoformat()
        stamp = stamp.replace("+00:00", "Z")
        return "<%d>%s %s %s[%d]: %s%s" % (priority, stamp, self.hostname, self.tag, self.pid, text, nl)

    def __call__(self, event):
        data = self.format(label(event), event_text(event), event.get("log_time")).encode()
        try:
            self.sock.send(data)
        except OSError:
            # Go's writeAndRetry: connect again once, then give up on the line.
            try:
                self.sock.close()
                self.sock = self.connect()
                self.sock.send(data)
            except (OSError, SyslogError):
                pass


def _syslog_address(url):
    """nats-server's getNetworkAndAddr for ``-r``: (network, address)."""
    if "://" not in url and ":" in url.split("/")[0] and not re.match(r"[A-Za-z][\w+.-]*:", url):
        raise SyslogError('parse "%s": first path segment in URL cannot contain colon' % url)
    parts = urllib.parse.urlsplit(url)
    network = parts.scheme
    if network in ("udp", "tcp"):
        return network, parts.netloc
    if network == "unix":
        return network, parts.path
    raise SyslogError("error invalid network type: %s" % go_quote(network))


# -- setting it up -------------------------------------------------------------------

_line_observer = None  # the one start_logging set up, for reopen()


def make_observer(config):
    """The observer for ``config``'s destination, in nats-server's order of
    precedence: ``log_file``, then ``remote_syslog``, then ``syslog``, then
    stderr.  Raises OSError (the file) or SyslogError."""
    fmt = (JsonLineFormat(config.logtime) if config.log_json
           else NatsLineFormat(config.logtime, config.logtime_utc))
    if config.log_file:
        return StreamObserver(LogFile(config.log_file, fmt, config.log_size_limit, config.log_max_num), fmt)
    if config.remote_syslog:
        return SyslogObserver(config.remote_syslog)
    if config.syslog:
        return SyslogObserver()
    if isinstance(fmt, NatsLineFormat):
        try:
            fmt.colours = os.isatty(sys.stderr.fileno())
        except (AttributeError, OSError, ValueError):
            pass
    return StreamObserver(sys.stderr, fmt)


def start_logging(config):
    """Send twisted.logger events where ``config`` says (the natsbroker command).

    Raises OSError when the log file cannot be opened, SyslogError when
    syslog cannot be reached."""
    global _line_observer
    _line_observer = make_observer(config)
    predicate = LevelPredicate(config.debug, config.trace)
    globalLogBeginner.beginLoggingTo([FilteringLogObserver(_line_observer, [predicate])],
                                     redirectStandardIO=False)
    stream = getattr(_line_observer, "stream", None)
    if isinstance(stream, LogFile) and 0 < stream.limit < stream.size:
        from twisted.logger import Logger

        # nats-server's words; the next line rotates it
        Logger(namespace="natsbroker.logs").info("Rotating logfile...")


def reopen(path):
    """Log to ``path`` opened afresh (SIGUSR1, after the file was rotated).

    As nats-server, a file that cannot be opened ends the process, in Go's
    plain log format; returns False when logging is not set up here."""
    observer = _line_observer
    if not isinstance(observer, StreamObserver):
        return False
    if isinstance(observer.stream, LogFile):
        log_file = observer.stream
        try:
            stream = log_file.open(path)
        except OSError as e:
            _fatal_open(path, e)
        old, log_file.path, log_file.stream = log_file.stream, path, stream
        log_file.size = os.fstat(stream.fileno()).st_size
        old.close()
        return True
    try:
        stream = open(path, "a")
    except OSError as e:
        _fatal_open(path, e)
    old, observer.stream = observer.stream, stream
    if old is not sys.stderr:
        old.close()
    return True


def _fatal_open(path, e):
    from natsbroker.fatal import path_error

    sys.stderr.write("%s error opening file: %s\n" % (time.strftime("%Y/%m/%d %H:%M:%S"),
                                                      path_error("open", path, e)))
    sys.stderr.flush()
    os._exit(1)


def quiet_observers(config, publisher=globalLogPublisher):
    """Filter the observers already logging (twistd's) as start_logging's
    are: no Twisted noise, nats-server's levels."""
    predicate = LevelPredicate(config.debug, config.trace)
    for observer in list(getattr(publisher, "_observers", ())):
        if isinstance(observer, FilteringLogObserver):
            continue
        publisher.removeObserver(observer)
        publisher.addObserver(FilteringLogObserver(observer, [predicate]))


class TwistdLogFilter(service.Service):
    """Under twistd, which starts its logging after makeService and before
    the services: filters twistd's log observer (see quiet_observers)."""

    name = "natsbroker-log-filter"

    def __init__(self, config):
        self.config = config

    def privilegedStartService(self):
        quiet_observers(self.config)
        super().privilegedStartService()
