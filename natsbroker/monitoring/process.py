"""The process as nats-server's monitoring shows it: memory, CPUs, CPU use, uptime,
the config digest, and Go's forms of durations and seconds."""

import hashlib
import os
import sys
import time

from natsbroker.gocompat.durations import format_duration

try:
    import resource as _resource  # the stdlib module (getrusage), not twisted.web's
except ImportError:  # there is no such module on Windows
    _resource = None


def go_duration(seconds):
    """Go's time.Duration.String() of a float number of seconds."""
    return format_duration(int(round(seconds * 1e9)))


def nanoseconds(seconds):
    """Seconds -> nanoseconds (Go's time.Duration in JSON)."""
    return int(round(seconds * 1e9))


def uptime_text(seconds):
    """nats-server's myUptime: whole seconds as "1y2d3h4m5s", leading zero units dropped."""
    s = max(int(seconds), 0)
    m, h, d = s // 60, s // 3600, s // 86400
    y = d // 365
    if y:
        return "%dy%dd%dh%dm%ds" % (y, d % 365, h % 24, m % 60, s % 60)
    if d:
        return "%dd%dh%dm%ds" % (d, h % 24, m % 60, s % 60)
    if h:
        return "%dh%dm%ds" % (h, m % 60, s % 60)
    if m:
        return "%dm%ds" % (m, s % 60)
    return "%ds" % s


def rss():
    """Resident set size in bytes (nats-server's "mem")."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        pass
    if _resource is None:
        return 0
    # Not Linux: the peak RSS is the best the platform offers (bytes on macOS, KiB elsewhere).
    peak = _resource.getrusage(_resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def num_cpus():
    # Go's runtime.NumCPU counts the CPUs this process may run on.
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


class CpuSampler:
    """CPU use in percent of one core, like nats-server's "cpu".

    nats-server samples once a second in the background; we sample when asked,
    at most once a second, and report the use since the previous sample.
    """

    def __init__(self):
        self._wall = time.monotonic()
        self._cpu = _cpu_seconds()
        self._pcpu = 0.0

    def percent(self):
        wall = time.monotonic()
        if wall - self._wall >= 1.0:
            cpu = _cpu_seconds()
            self._pcpu = round((cpu - self._cpu) / (wall - self._wall) * 100, 1)
            self._wall, self._cpu = wall, cpu
        return self._pcpu


def _cpu_seconds():
    t = os.times()
    return t.user + t.system


def config_digest(path):
    """"sha256:<hex>" of the config file's bytes as loaded; "" without one.

    nats-server digests its parsed configuration, so the values differ; both
    change exactly when the configuration file does.
    """
    if not path:
        return ""
    try:
        with open(path, "rb") as f:
            return "sha256:" + hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return ""


def go_seconds(value):
    # A Go float64 of whole seconds marshals without a fraction (2, not 2.0).
    return int(value) if float(value).is_integer() else value

