"""Log lines that an outsider can trigger at will (failed logins, permission
violations), bounded so that a flood of them cannot fill the disk.

Per kind of event, at most ``burst`` lines are written per ``period``
seconds; the rest are counted, and the count is reported once the window
ends, with the next line of that kind or by a timer, whichever is first.
Time comes from the reactor, so tests drive it with a ``task.Clock``.
"""

from twisted.logger import Logger

log = Logger()


class RateLimitedLog:
    """``error(kind, format, **fields)``: a rate-limited ERR line."""

    def __init__(self, reactor, burst=20, period=1.0):
        self.reactor = reactor
        self.burst = burst
        self.period = period
        self._windows = {}  # kind -> [window start, lines written, lines dropped, timer]

    def error(self, kind, fmt, **fields):
        now = self.reactor.seconds()
        w = self._windows.get(kind)
        if w is None or now - w[0] >= self.period:
            if w is not None:
                self._report(kind, w)
            w = self._windows[kind] = [now, 0, 0, None]
        if w[1] < self.burst:
            w[1] += 1
            log.error(fmt, **fields)
            return True
        w[2] += 1
        if w[3] is None:
            w[3] = self.reactor.callLater(w[0] + self.period - now, self._window_over, kind)
        return False

    def _window_over(self, kind):
        w = self._windows.pop(kind, None)
        if w is not None:
            w[3] = None
            self._report(kind, w)

    def _report(self, kind, w):
        if w[3] is not None and w[3].active():
            w[3].cancel()
        w[3] = None
        if w[2]:
            log.warn("{n} more {kind} lines suppressed in {period}s", n=w[2], kind=kind,
                     period=self.period)
            w[2] = 0
