"""Message schedules (``allow_msg_schedules``): ``Nats-Schedule`` and its timer.

A message published with ``Nats-Schedule: <pattern>`` and
``Nats-Schedule-Target: <subject>`` is a schedule: it stays on its own
subject (a new one rolls up the old: ``Nats-Rollup: sub`` is added) and, when
the pattern comes due, the stream stores a copy on the target -- the
schedule's headers less the scheduling ones, plus ``Nats-Scheduler: <schedule
subject>`` and ``Nats-Schedule-Next: purge`` (a one-shot ``@at``: storing it
removes the schedule) or the next due time (``@every``, cron).
``Nats-Schedule-TTL`` becomes the copy's ``Nats-TTL``, ``Nats-Schedule-Rollup``
its ``Nats-Rollup``, ``Nats-Schedule-Source`` takes the copy's body and
headers from that subject's latest message.

Patterns, as nats-server 2.15 reads them: ``@at <RFC 3339>``, ``@every <Go
duration of at least 1s>``, six-field cron (seconds first, names, ranges,
steps, ``?``), ``@yearly``/``@annually``/``@monthly``/``@weekly``/``@daily``/
``@midnight``/``@hourly``; ``Nats-Schedule-Time-Zone`` (an IANA name, cron
only).  A schedule that would have fired several times while the server was
down fires once, then keeps its rhythm from now.

Timing: one reactor timer per stream for the earliest due schedule, never
sooner than 250 ms from when it is set (nats-server's floor), and never moved
later by a new schedule (so a busy stream cannot starve it).  Nothing but the
stored messages is kept: on start the index is rebuilt from the schedules and
the ``Nats-Schedule-Next`` times of the copies they made.
"""

import datetime
import heapq
import re
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from twisted.logger import Logger

from natsbroker.gocompat import times as gotime
from natsbroker.gocompat.durations import parse_duration
from natsbroker.jetstream import errors as E, headers as HB, subject_rules as SR
from natsbroker.subjects.sublist import subjects_collide

log = Logger()

NANOS = 1_000_000_000

H_SCHEDULE = b"Nats-Schedule"
H_TARGET = b"Nats-Schedule-Target"
H_TTL = b"Nats-Schedule-TTL"
H_SOURCE = b"Nats-Schedule-Source"
H_ROLLUP = b"Nats-Schedule-Rollup"
H_TZ = b"Nats-Schedule-Time-Zone"
H_SCHEDULER = b"Nats-Scheduler"
H_NEXT = b"Nats-Schedule-Next"
NEXT_PURGE = b"purge"

MIN_DELAY = 0.25  # seconds: nats-server never fires sooner than this after arming

_UTC = datetime.timezone.utc


# -- time zones ---------------------------------------------------------------

def load_zone(name):
    """Go's ``time.LoadLocation`` for a header value: a tzinfo, or None.
    An empty value is refused (the header was given, with nothing in it)."""
    if not name:
        return None
    if name == "UTC":
        return _UTC
    if name == "Local":
        return datetime.datetime.now().astimezone().tzinfo
    try:
        return ZoneInfo(name)
    except (ValueError, OSError, ZoneInfoNotFoundError):
        return None


# -- cron (nats-server's cron.go, itself robfig/cron) --------------------------

class _Bounds:
    __slots__ = ("lo", "hi", "names")

    def __init__(self, lo, hi, names=None):
        self.lo, self.hi, self.names = lo, hi, names


_SECONDS = _Bounds(0, 59)
_MINUTES = _Bounds(0, 59)
_HOURS = _Bounds(0, 23)
_DOM = _Bounds(1, 31)
_MONTHS = _Bounds(1, 12, {n: i for i, n in enumerate(
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1)})
_DOW = _Bounds(0, 6, {n: i for i, n in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))})
_STAR = 1 << 63
_ATOI = re.compile(r"[+-]?[0-9]+\Z")

_PREDEFINED = {"@yearly": "0 0 0 1 1 *", "@annually": "0 0 0 1 1 *",
               "@monthly": "0 0 0 1 * *", "@weekly": "0 0 0 * * 0",
               "@daily": "0 0 0 * * *", "@midnight": "0 0 0 * * *",
               "@hourly": "0 0 * * * *"}


def _atoi(expr):
    if not _ATOI.match(expr):
        raise ValueError("failed to parse int from %s" % expr)
    n = int(expr)
    if n < 0:
        raise ValueError("negative number (%d) not allowed: %s" % (n, expr))
    return n


def _int_or_name(expr, names):
    if names is not None and expr.lower() in names:
        return names[expr.lower()]
    return _atoi(expr)


def _bits(lo, hi, step):
    if step == 1:
        return ((1 << (hi + 1)) - 1) & ~((1 << lo) - 1)
    out = 0
    for i in range(lo, hi + 1, step):
        out |= 1 << i
    return out


def _range(expr, b):
    range_and_step = expr.split("/")
    low_high = range_and_step[0].split("-")
    single = len(low_high) == 1
    extra = 0
    if low_high[0] in ("*", "?"):
        start, end, extra = b.lo, b.hi, _STAR
    else:
        start = _int_or_name(low_high[0], b.names)
        if len(low_high) == 1:
            end = start
        elif len(low_high) == 2:
            end = _int_or_name(low_high[1], b.names)
        else:
            raise ValueError("too many hyphens: %s" % expr)
    if len(range_and_step) == 1:
        step = 1
    elif len(range_and_step) == 2:
        step = _atoi(range_and_step[1])
        if single:
            end = b.hi
        if step > 1:
            extra = 0
    else:
        raise ValueError("too many slashes: %s" % expr)
    if start < b.lo or end > b.hi or start > end or step == 0:
        raise ValueError("bad range: %s" % expr)
    return _bits(start, end, step) | extra


def _field(text, b):
    out = 0
    for expr in text.split(","):
        if expr:
            out |= _range(expr, b)
    return out


def _to_sec(y, mo, d, h, mi, s, loc):
    """Go's ``time.Date`` (overflowing fields normalised) as Unix seconds."""
    y += (mo - 1) // 12
    mo = (mo - 1) % 12 + 1
    naive = datetime.datetime(y, mo, 1) + datetime.timedelta(days=d - 1, hours=h,
                                                            minutes=mi, seconds=s)
    return int(naive.replace(tzinfo=loc).timestamp())


def _wall(sec, loc):
    return datetime.datetime.fromtimestamp(sec, tz=loc)


def _weekday(t):
    return (t.weekday() + 1) % 7  # Go: Sunday is 0


def _day_matches(dom, dow, t):
    dom_match = (1 << t.day) & dom
    dow_match = (1 << _weekday(t)) & dow
    if dom & _STAR or dow & _STAR:
        return bool(dom_match and dow_match)
    return bool(dom_match or dow_match)


def cron_next(pattern, loc, ts):
    """The first time after ``ts`` (ns) that the six-field ``pattern`` matches
    in zone ``loc``, as ``(unix seconds, utc offset seconds)``; ValueError if
    the pattern is bad or matches nothing within five years."""
    fields = pattern.split()
    if len(fields) != 6:
        raise ValueError("pattern requires 6 fields, got %d" % len(fields))
    second = _field(fields[0], _SECONDS)
    minute = _field(fields[1], _MINUTES)
    hour = _field(fields[2], _HOURS)
    dom = _field(fields[3], _DOM)
    month = _field(fields[4], _MONTHS)
    dow = _field(fields[5], _DOW)
    sec = _round_sec(ts) + 1
    truncated = False
    year_limit = _wall(sec, loc).year + 5
    while True:  # WRAP
        t = _wall(sec, loc)
        if t.year > year_limit:
            raise ValueError("pattern exceeds maximum range")
        wrapped = False
        while not (1 << t.month) & month:
            if not truncated:
                truncated = True
                sec = _to_sec(t.year, t.month, 1, 0, 0, 0, loc)
                t = _wall(sec, loc)
            sec = _to_sec(t.year, t.month + 1, t.day, t.hour, t.minute, t.second, loc)
            t = _wall(sec, loc)
            if t.month == 1:
                wrapped = True
                break
        if wrapped:
            continue
        while not _day_matches(dom, dow, t):
            if not truncated:
                truncated = True
                sec = _to_sec(t.year, t.month, t.day, 0, 0, 0, loc)
                t = _wall(sec, loc)
            sec = _to_sec(t.year, t.month, t.day + 1, t.hour, t.minute, t.second, loc)
            t = _wall(sec, loc)
            if t.day == 1:
                wrapped = True
                break
        if wrapped:
            continue
        while not (1 << t.hour) & hour:
            if not truncated:
                truncated = True
                sec = _to_sec(t.year, t.month, t.day, t.hour, 0, 0, loc)
            sec += 3600
            t = _wall(sec, loc)
            if t.hour == 0:
                wrapped = True
                break
        if wrapped:
            continue
        while not (1 << t.minute) & minute:
            if not truncated:
                truncated = True
                sec -= sec % 60
            sec += 60
            t = _wall(sec, loc)
            if t.minute == 0:
                wrapped = True
                break
        if wrapped:
            continue
        while not (1 << t.second) & second:
            truncated = True
            sec += 1
            t = _wall(sec, loc)
            if t.second == 0:
                wrapped = True
                break
        if wrapped:
            continue
        return sec, int(t.utcoffset().total_seconds())


# -- patterns -------------------------------------------------------------------

def _round_sec(ns):
    """Go's ``Time.Round(time.Second)`` in Unix seconds (halves up)."""
    return (ns + NANOS // 2) // NANOS


def next_fire(pattern, tz, ts, now):
    """When a schedule with ``pattern`` (str) in zone ``tz`` (str or None)
    next fires after ``ts`` (ns), seen at ``now`` (ns): ``(deadline ns, utc
    offset seconds, repeats)``.  ValueError if the pattern is invalid (which
    includes a zone with ``@at``/``@every``)."""
    if pattern.startswith("@at "):
        if tz is not None:
            raise ValueError("time zone not supported for @at")
        at, offset = gotime.go_parse_rfc3339(pattern[4:])
        return at, offset, False
    if pattern.startswith("@every "):
        if tz is not None:
            raise ValueError("time zone not supported for @every")
        every = parse_duration(pattern[7:])
        if every < NANOS:
            raise ValueError("interval below a second")
        nxt = _round_sec(ts) * NANOS + every
        if nxt < now:
            nxt = _round_sec(now) * NANOS + every
        return nxt, 0, True
    pattern = _PREDEFINED.get(pattern, pattern)
    loc = _UTC if tz is None else load_zone(tz)
    if loc is None:
        raise ValueError("unknown time zone")
    sec, offset = cron_next(pattern, loc, ts)
    if sec * NANOS < now:
        sec, offset = cron_next(pattern, loc, _round_sec(now) * NANOS)
    return sec * NANOS, offset, True


def format_next(ns, offset):
    """A due time as Go's ``Format(time.RFC3339)``: whole seconds."""
    return gotime.rfc3339(ns - ns % NANOS, offset).encode()


def _text(value):
    return value.decode("utf-8", "surrogateescape")


# -- publish checks ---------------------------------------------------------------

def check_schedule(pattern, h, hdr, subject, cfg, now, parse_ttl):
    """The checks of a publish carrying a ``Nats-Schedule`` (non-empty) in
    nats-server's order; returns ``hdr`` with the ``Nats-Rollup: sub`` a
    schedule is stored with (its due time is reckoned from its stamp, once
    stored)."""
    if not cfg.allow_msg_schedules:
        raise E.message_schedules_disabled()
    tz = h.get(H_TZ)
    if tz is not None:
        tz = _text(tz)
        if load_zone(tz) is None:
            raise E.message_schedules_time_zone_invalid()
    try:
        next_fire(_text(pattern), tz, now, now)
    except ValueError:
        raise E.message_schedules_pattern_invalid() from None
    ttl = h.get(H_TTL)
    if ttl:
        try:
            parse_ttl(ttl)
        except E.ApiError:
            raise E.message_schedules_ttl_invalid() from None
        if not cfg.allow_msg_ttl:
            raise E.message_ttl_disabled()
    rollup = h.get(H_ROLLUP)
    if rollup and rollup != b"sub":
        raise E.message_schedules_rollup_invalid()
    subj = _text(subject)
    target = _text(h.get(H_TARGET) or b"")
    if (not target or not SR.subject_is_valid_literal(target) or target == subj
            or not any(subjects_collide(s, target) for s in cfg.subjects or ())):
        raise E.message_schedules_target_invalid()
    source = h.get(H_SOURCE)
    if source:
        source = _text(source)
        if (not SR.subject_is_valid_literal(source) or source in (subj, target)
                or not any(subjects_collide(s, source) for s in cfg.subjects or ())):
            raise E.message_schedules_source_invalid()
    own = h.get(b"Nats-Rollup")
    if not own:
        hdr = HB.gen_header(hdr, b"Nats-Rollup", b"sub")
    elif own.lower() != b"sub":
        raise E.message_schedules_rollup_invalid()
    return hdr


def check_scheduler(h, subject, cfg, store):
    """The checks of ``Nats-Schedule-Next``/``Nats-Scheduler`` from a client:
    only a purge of another subject's schedule.  Returns the schedule subject
    to purge once stored, or None."""
    nxt = h.get(H_NEXT)
    scheduler = h.get(H_SCHEDULER)
    if not nxt:
        if scheduler:
            raise E.message_schedules_scheduler_invalid()
        return None
    if nxt != NEXT_PURGE:
        raise E.message_schedules_scheduler_invalid()
    if not cfg.allow_msg_schedules:
        raise E.message_schedules_disabled()
    if not scheduler or scheduler == subject or not SR.subject_is_valid_literal(_text(scheduler)):
        raise E.message_schedules_scheduler_invalid()
    # Only a schedule may be purged this way; a subject with nothing on it
    # is let through (nats-server stays lenient there).
    last = store.load_last(scheduler)
    if last is not None and not HB.exact(last.hdr, (H_SCHEDULE,)).get(H_SCHEDULE):
        raise E.message_schedules_scheduler_invalid()
    return scheduler


# -- the timer ---------------------------------------------------------------------

class Schedules:
    """One stream's schedules: subject -> (seq of the schedule, due time),
    a heap of due times (stale entries skipped), one reactor timer."""

    def __init__(self, stream):
        self.stream = stream
        self.due = {}    # schedule subject -> (seq, deadline ns)
        self._heap = []  # (deadline, seq, subject)
        self._call = None
        self._call_at = None
        self._running = False

    def __len__(self):
        return len(self.due)

    def add(self, seq, subject, deadline, arm=True):
        self.due[subject] = (seq, deadline)
        heapq.heappush(self._heap, (deadline, seq, subject))
        if arm:
            self.arm()

    def update(self, subject, deadline):
        """A schedule fired and comes due again at ``deadline``."""
        cur = self.due.get(subject)
        if cur is not None:
            self.add(cur[0], subject, deadline)

    def remove(self, subject):
        self.due.pop(subject, None)

    def _earliest(self):
        heap, due = self._heap, self.due
        while heap:
            deadline, seq, subject = heap[0]
            if due.get(subject) == (seq, deadline):
                return deadline
            heapq.heappop(heap)
        return None

    def _leads(self):
        """Only a stream's leader fires its schedules (a replica of a
        replicated stream keeps the index, for when it leads)."""
        stream = self.stream
        if stream.config.num_replicas <= 1:
            return True
        group = getattr(stream, "group", None)
        return group is not None and group.is_leader

    def arm(self):
        """Set the timer for the earliest schedule (see the module doc)."""
        if self._running:
            return
        if not self._leads():
            self.stop()
            return
        deadline = self._earliest()
        if deadline is None:
            self.stop()
            return
        now = self.stream.now()
        delay = max((deadline - now) / NANOS, MIN_DELAY)
        at = now + int(delay * NANOS)
        if self._call is not None and self._call.active():
            if at >= self._call_at:
                return
            self._call.cancel()
        self._call_at = at
        self._call = self.stream.clock.callLater(delay, self.fire)

    def stop(self):
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None
        self._call_at = None

    def fire(self):
        """Store a copy on the target of every schedule that is due."""
        self._call = None
        self._call_at = None
        stream = self.stream
        if not self._leads():
            return
        if getattr(stream.store, "write_error", None) is not None:
            # The store cannot write (disk full): try again once it may.
            self._call_at = stream.now() + NANOS
            self._call = stream.clock.callLater(1.0, self.fire)
            return
        self._running = True
        try:
            now = stream.now()
            due = []
            heap = self._heap
            taken = set()
            while heap and heap[0][0] <= now:
                deadline, seq, subject = heapq.heappop(heap)
                if self.due.get(subject) != (seq, deadline) or subject in taken:
                    # (stale; or the same due time pushed twice: a replicated
                    # stream's leader moves a schedule on when it proposes the
                    # copy, and again when the copy is applied)
                    continue
                taken.add(subject)
                msg = stream.store.load(seq)
                out = self._copy(msg, subject, deadline, now) if msg is not None else None
                if out is None:
                    self.due.pop(subject, None)
                    continue
                due.append((seq, subject, deadline, out))
            due.sort(key=lambda d: d[0])
            group = getattr(stream, "group", None)
            for seq, subject, deadline, (target, hdr, data, nxt) in due:
                try:
                    if group is not None:
                        # Replicated: the copy is proposed, and every replica
                        # stores it and moves the schedule on when it applies.
                        group.propose_scheduled(target, hdr, data)
                    else:
                        stream.accept(target, hdr, data, scheduled=True)
                except E.ApiError as e:
                    log.warn("JetStream stream {s}: schedule {subj} could not store on {t}: {e}",
                             s=stream.name, subj=subject, t=target, e=e.description)
                if self.due.get(subject) == (seq, deadline):
                    # The copy did not move it on (refused): go on from here.
                    if nxt is None:
                        self.due.pop(subject, None)
                    else:
                        self.add(seq, subject, nxt, arm=False)
        finally:
            self._running = False
            self.arm()
            stream.on_change()

    def _copy(self, msg, subject, deadline, now):
        """``(target, hdr, data, next due or None)`` for a due schedule, or
        None when the stored schedule is not (or no longer) a valid one."""
        h = HB.exact(msg.hdr, (H_SCHEDULE, H_TZ, H_TTL, H_TARGET, H_ROLLUP, H_SOURCE))
        pattern = h.get(H_SCHEDULE)
        target = h.get(H_TARGET)
        if not pattern or not target:
            return None
        tz = h.get(H_TZ)
        try:
            nxt, offset, repeat = next_fire(_text(pattern), None if tz is None else _text(tz),
                                            deadline, now)
        except ValueError:
            return None
        ttl = h.get(H_TTL)
        rollup = h.get(H_ROLLUP)
        src = msg
        source = h.get(H_SOURCE)
        if source:
            last = self.stream.store.load_last(source)
            if last is not None:
                src = last
        hdr = src.hdr or b""
        hdr = HB.remove_header(hdr, H_SCHEDULE)
        hdr = HB.remove_prefixed(hdr, b"Nats-Schedule-")
        hdr = HB.remove_prefixed(hdr, b"Nats-Expected-")
        hdr = HB.remove_header(hdr, b"Nats-Msg-Id")
        hdr = HB.remove_header(hdr, b"Nats-TTL")
        hdr = HB.remove_header(hdr, b"Nats-Rollup")
        hdr = HB.gen_header(hdr, H_SCHEDULER, subject)
        hdr = HB.gen_header(hdr, H_NEXT, format_next(nxt, offset) if repeat else NEXT_PURGE)
        if ttl:
            hdr = HB.gen_header(hdr, b"Nats-TTL", ttl)
        if rollup:
            hdr = HB.gen_header(hdr, b"Nats-Rollup", rollup)
        return target, hdr, src.data, (nxt - nxt % NANOS if repeat else None)

    # -- after a store ----------------------------------------------------------

    def stored(self, seq, subject, hdr, h, deadline):
        """Index what a stored message means for schedules: a new schedule
        (``deadline``), or a copy that purges or moves one on."""
        if deadline is not None:
            self.add(seq, subject, deadline)
        scheduler = h.get(H_SCHEDULER)
        nxt = h.get(H_NEXT)
        if not scheduler or not nxt:
            return
        if nxt == NEXT_PURGE:
            self.remove(scheduler)
            self.stream.purge("schedule", subject=scheduler)
            return
        try:
            at, _ = gotime.go_parse_rfc3339(_text(nxt))
        except ValueError:
            return
        self.update(scheduler, at)

    def recover(self, msg):
        """Rebuild from one stored message (in sequence order, at start).

        A schedule is due when it was due before the restart (its first time
        after it was stored, or the time its latest copy named): one missed
        while the server was down fires once, right away, then keeps time
        from then on, as nats-server does with its saved schedule state."""
        h = HB.exact(msg.hdr, (H_SCHEDULE, H_TZ, H_SCHEDULER, H_NEXT))
        pattern = h.get(H_SCHEDULE)
        if pattern:
            tz = h.get(H_TZ)
            try:
                deadline, _, _ = next_fire(_text(pattern), None if tz is None else _text(tz),
                                           msg.ts, 0)
            except ValueError:
                deadline = None
            if deadline is not None:
                self.add(msg.seq, msg.subject, deadline, arm=False)
        scheduler, nxt = h.get(H_SCHEDULER), h.get(H_NEXT)
        if scheduler and nxt and nxt != NEXT_PURGE:
            cur = self.due.get(scheduler)
            if cur is not None and cur[0] < msg.seq:
                try:
                    at, _ = gotime.go_parse_rfc3339(_text(nxt))
                except ValueError:
                    return
                self.add(cur[0], scheduler, at, arm=False)
