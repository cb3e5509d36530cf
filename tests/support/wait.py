"""Polling with a deadline: one timeout behaviour for every test.

``eventually`` calls ``predicate`` until it returns something truthy and
returns that value. An exception from ``predicate`` (of the ``ignore`` types)
counts as "not yet". When ``timeout`` seconds pass first it raises
AssertionError naming ``what`` and the last value or exception seen, so a red
test says what it was waiting for rather than failing later on a falsy value.
"""

import asyncio
import inspect
import time

_UNSET = object()


class _Poll:
    def __init__(self, timeout, what, ignore):
        self.deadline = time.monotonic() + timeout
        self.timeout = timeout
        self.what = what
        self.ignore = ignore
        self.last = _UNSET
        self.error = None

    def record(self, value=_UNSET, error=None):
        self.last, self.error = value, error

    def expired(self):
        return time.monotonic() >= self.deadline

    def fail(self, predicate):
        what = self.what or getattr(predicate, "__name__", repr(predicate))
        if self.error is not None:
            last = "last raised %r" % (self.error,)
        else:
            last = "last value %r" % (self.last,)
        raise AssertionError("timed out after %gs waiting for %s (%s)" % (
            self.timeout, what, last)) from self.error


def eventually(predicate, timeout=15.0, interval=0.02, what=None, ignore=(Exception,)):
    """Poll ``predicate()`` until truthy; its value, or AssertionError on timeout."""
    poll = _Poll(timeout, what, ignore)
    while True:
        try:
            value = predicate()
        except poll.ignore as e:
            poll.record(error=e)
        else:
            if value:
                return value
            poll.record(value)
        if poll.expired():
            poll.fail(predicate)
        time.sleep(interval)


async def eventually_async(predicate, timeout=15.0, interval=0.02, what=None,
                           ignore=(Exception,)):
    """:func:`eventually` on the running loop; ``predicate`` may be a
    coroutine function or a plain one."""
    poll = _Poll(timeout, what, ignore)
    while True:
        try:
            value = predicate()
            if inspect.isawaitable(value):
                value = await value
        except poll.ignore as e:
            poll.record(error=e)
        else:
            if value:
                return value
            poll.record(value)
        if poll.expired():
            poll.fail(predicate)
        await asyncio.sleep(interval)
