"""Priority groups of pull consumers (nats-server 2.11+, ADR-42), against
nats-server 2.15.1 and natsbroker side by side.

Policies: ``overflow`` (a request names ``min_pending``/``min_ack_pending``
and gets messages only past them), ``pinned_client`` (one client's requests
get everything; its messages carry ``Nats-Pin-Id``; the pin moves on after
``priority_timeout`` without a request from it, or on
``$JS.API.CONSUMER.UNPIN``) and ``prioritized`` (requests with a lower
``priority`` are served first).

Each scenario below runs on a raw connection against each server and turns
what it receives into a transcript: API replies as JSON (timestamps and
version metadata normalised, as in test_js_differential), status lines and
headers byte for byte, pin ids renamed PIN1, PIN2... in order of appearance,
advisories without their id and timestamp, ack reply subjects without their
timestamp. natsbroker's transcript must equal nats-server's, line by line;
a few lines nats-server gives are also asserted, so that a scenario that
stopped exercising anything would be noticed.

Timers that only the clock decides (``priority_timeout`` to the nanosecond)
are checked in-process on a ``task.Clock`` (the harness of
test_js_consumer_timers); the behaviour was observed from nats-server in real
time (a 1 s and a 3 s timeout) and the real-time scenario here checks it again,
as test_observed_live.py does for the fake-clock tests' own scenarios.
"""

import json
import os
import re
import subprocess
import textwrap
import time

import pytest

from tests.support.raw import Raw, count
from tests.support.servers import ROOT, ServerProcess
from tests.test_js_consumer_timers import MS, SEC, advisory_body, h  # noqa: F401  (fixture)
from tests.test_js_differential import check_times, normalise
from tests.test_observed_live import rfc3339_ns

pytestmark = pytest.mark.timeout(180)

KINDS = ["nats-server", "natsbroker"]
NEXT = "$JS.API.CONSUMER.MSG.NEXT.%s.%s"
PIN_HDR = re.compile(rb"Nats-Pin-Id: ([A-Za-z0-9]*)")
PIN_JSON = re.compile(r'"(pinned_id|pinned_client_id)":"([A-Za-z0-9]+)"')
LOADED = time.time_ns()
TS = re.compile(r'"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z)"')


# --------------------------------------------------------------------------
# a raw client that writes transcripts


class Wire:
    """One raw connection; each pull request gets its own inbox (and sid) so
    that a transcript says which request got what."""

    def __init__(self, port, advisories=("PINNED", "UNPINNED")):
        self.r = Raw(port)
        self.names = {}
        self.sid = 100
        self.n = 0
        self.pins = {}
        for kind in advisories:
            self._sub("$JS.EVENT.ADVISORY.CONSUMER.%s.>" % kind, "ADV")
        self._sub("_API.>", "API")
        self.out = []
        self.ack_pending = True  # keep the pending count of ack reply subjects
        self.opened = time.time_ns()

    def close(self):
        self.r.close()

    def _sub(self, subject, name):
        self.sid += 1
        self.names[self.sid] = name
        self.r.sub(subject, self.sid)

    # -- pins ----------------------------------------------------------------

    def _pin(self, raw_id):
        if not raw_id:
            return ""
        if raw_id not in self.pins:
            self.pins[raw_id] = "PIN%d" % (len(self.pins) + 1)
        return self.pins[raw_id]

    def pin(self, name):
        """The real pin id called ``name`` (PIN1...) in the transcript."""
        return {v: k for k, v in self.pins.items()}[name]

    # -- normalising -----------------------------------------------------------

    def _json(self, payload):
        if payload.startswith(b"{"):
            # The times normalise blanks out: RFC 3339, none from the future
            # (this connection's scenarios set no pause_until), and the
            # reply's own ts (the server's now) since this connection opened;
            # the rest since this module was loaded (before any server).
            check_times(payload, LOADED, self.opened, time.time_ns(), "priority")
        text = payload.decode()
        text = PIN_JSON.sub(lambda m: '"%s":"%s"' % (m.group(1), self._pin(m.group(2))), text)
        try:
            return normalise(text.encode())
        except ValueError:  # not JSON (an ack confirmation, a publish reply)
            return repr(payload)

    def line(self, name, f):
        if name == "ADV":
            body = json.loads(PIN_JSON.sub(
                lambda m: '"%s":"%s"' % (m.group(1), self._pin(m.group(2))), f.payload.decode()))
            assert re.fullmatch(r"[A-Za-z0-9]{22}", body.pop("id", "")), body
            stamp = rfc3339_ns(body["timestamp"])
            assert self.opened <= stamp <= time.time_ns(), body["timestamp"]  # sent to us
            body["timestamp"] = "TS" if TS.fullmatch('"%s"' % body.get("timestamp")) else "?"
            return "ADV %s %s" % (f.subject, json.dumps(body))
        if name == "API":
            return "API %s" % self._json(f.payload)
        hdr = PIN_HDR.sub(lambda m: b"Nats-Pin-Id: " + self._pin(m.group(1).decode()).encode(),
                          f.header)
        return "%s %s %s %r %r" % (name, f.subject, _ack_subject(f.reply or "", self.ack_pending),
                                   hdr, f.payload)

    # -- requests ----------------------------------------------------------------

    def api(self, subject, body=b"", record=True, linger=0.0, wait=3.0):
        """An API request; its reply (JSON-normalised), or "NO REPLY".

        ``linger``: also record what comes within that many seconds after
        the reply, listed after it (nats-server sends an UNPIN's advisory
        and its reply from different goroutines: either may come first).
        ``wait``: how long a reply may take (after that: "NO REPLY")."""
        if isinstance(body, dict):
            body = json.dumps(body).encode()
        self.n += 1
        reply = "_API.%d" % self.n
        self.r.pub(subject, body, reply)
        fs = self.r.frames(until=count(1, lambda f: f.subject == reply), limit=wait)
        if linger:
            fs += self.r.frames(until=None, limit=linger)
        got = "NO REPLY"
        before, after = [], []
        for f in fs:
            name = self.names.get(f.sid)
            if f.subject == reply:
                got = self.line("API", f)
            else:
                (after if linger or got != "NO REPLY" else before).append(self.line(name, f))
        if record:
            self.out += before
            self.out.append("%s %s -> %s" % (_ack_subject(subject), body.decode(errors="replace"),
                                             got))
            self.out += after
        return got

    def pull(self, stream, consumer, name, body):
        """A pull request from inbox ``name`` (answered asynchronously)."""
        if isinstance(body, dict):
            body = json.dumps(body).encode()
        self._sub("_IN.%s" % name, name)
        self.r.pub(NEXT % (stream, consumer), body, "_IN.%s" % name)

    def pub(self, subject, data):
        self.r.pub(subject, data)

    def take(self, n, limit=5.0, quiet=0.25):
        """Record the next ``n`` frames (waiting up to ``limit`` s), then any
        that follow within ``quiet`` s."""
        fs = self.r.frames(until=count(n), limit=limit)
        fs += self.r.frames(until=None, limit=quiet)
        self.out += [self.line(self.names.get(f.sid, f.sid), f) for f in fs]
        return fs

    def settle(self):
        """Wait until the server has taken every request sent so far (a PING
        round trip, then a moment: nats-server queues pull requests)."""
        fs = self.r.wait_pong()
        self.out += [self.line(self.names.get(f.sid, f.sid), f) for f in fs]
        time.sleep(0.2)

    def note(self, text):
        self.out.append("-- " + text)


def _ack_subject(subject, pending=True):
    """An ack reply subject without its timestamp token (and pending count)."""
    if subject.startswith("$JS.ACK."):
        t = subject.split(".")
        t[7] = "TS"
        if not pending:
            t[8] = "N"
        subject = ".".join(t)
    return subject


def _stream(w, name, n=0):
    w.api("$JS.API.STREAM.CREATE.%s" % name, {"name": name, "subjects": [name.lower() + ".>"]},
          record=False)
    for i in range(n):
        w.api("%s.m" % name.lower(), b"m%d" % (i + 1), record=False)


def _consumer(w, stream, name, **cfg):
    cfg.setdefault("durable_name", name)
    cfg.setdefault("ack_policy", "explicit")
    return w.api("$JS.API.CONSUMER.CREATE.%s.%s" % (stream, name),
                 {"stream_name": stream, "config": cfg})


# --------------------------------------------------------------------------
# scenarios (each returns its transcript)


def scenario_config(w):
    """Config validation and the priority fields of a created consumer."""
    _stream(w, "CF", 2)
    bad = [
        {"priority_policy": "pinned_client"},
        {"priority_groups": ["g"]},
        {"priority_policy": "none", "priority_groups": ["g"]},
        {"priority_timeout": 1000000000},
        {"priority_policy": "overflow", "priority_groups": [""]},
        {"priority_policy": "overflow", "priority_groups": ["g.x"]},
        {"priority_policy": "overflow", "priority_groups": ["abcdefghijklmnopq"]},
        {"priority_policy": "overflow", "priority_groups": ["ok", "b*d"]},
        {"priority_policy": "bogus", "priority_groups": ["g"]},
        {"priority_policy": "overflow", "priority_groups": ["g"], "deliver_subject": "out.cf"},
        {"priority_groups": ["g"], "deliver_subject": "nowhere.cf"},
    ]
    for cfg in bad:
        _consumer(w, "CF", "BAD", **cfg)
    good = [
        ("OV", {"priority_policy": "overflow", "priority_groups": ["g"]}),
        ("OT", {"priority_policy": "overflow", "priority_groups": ["g"],
                "priority_timeout": 1000000000}),
        ("PC", {"priority_policy": "pinned_client", "priority_groups": ["A-z_0/9=", "two"]}),
        ("PT", {"priority_policy": "pinned_client", "priority_groups": ["g"],
                "priority_timeout": 5000000000}),
        ("PR", {"priority_policy": "prioritized", "priority_groups": ["g"],
                "priority_timeout": -5}),
        ("NO", {"priority_policy": "none"}),
    ]
    for name, cfg in good:
        _consumer(w, "CF", name, **cfg)
    w.api("$JS.API.CONSUMER.INFO.CF.PC")
    w.api("$JS.API.CONSUMER.LIST.CF")
    # Updates: the policy and groups may change like other plain fields.
    _consumer(w, "CF", "OV", priority_policy="pinned_client", priority_groups=["h"])
    _consumer(w, "CF", "NO", priority_policy="prioritized", priority_groups=["g"])
    return w.out


def scenario_pull_status(w):
    """Pull requests nats-server refuses with a status, byte for byte."""
    _stream(w, "PS", 3)
    _consumer(w, "PS", "NONE")
    _consumer(w, "PS", "OV", priority_policy="overflow", priority_groups=["g"])
    _consumer(w, "PS", "PIN", priority_policy="pinned_client", priority_groups=["g"])
    _consumer(w, "PS", "PRI", priority_policy="prioritized", priority_groups=["g"])
    cases = [
        ("NONE", {"batch": 1, "min_pending": 1}),
        ("NONE", {"batch": 1, "id": "x"}),
        ("NONE", {"batch": 1, "priority": 10}),
        ("OV", {"batch": 1}),
        ("OV", {"batch": 1, "group": "other"}),
        ("OV", {"batch": 1, "group": "g", "id": "x"}),
        ("OV", {"batch": 1, "group": "g", "min_pending": -1, "priority": -1}),
        ("PIN", {"batch": 1, "group": "g", "min_ack_pending": 3}),
        ("PIN", {"batch": 1, "priority": 3}),
        ("PRI", {"batch": 1, "group": "g", "priority": 10}),
        ("PRI", {"batch": 1, "group": "g", "priority": -1}),
        ("PRI", {"batch": 1, "group": "g", "id": "x"}),
        ("PRI", {"batch": 1, "priority": 2}),
        ("PRI", {"group": 5}),
    ]
    for i, (consumer, body) in enumerate(cases):
        w.note("%s %s" % (consumer, json.dumps(body)))
        w.pull("PS", consumer, "r%d" % i, body)
        w.take(1)
    # Not JSON: no priority group, no priority checks.
    w.note("NONE group ignored")
    w.pull("PS", "NONE", "plain", {"batch": 1, "group": "whatever", "no_wait": True})
    w.take(1)
    w.note("PRI bare batch size")
    w.pull("PS", "PRI", "bare", b"1")
    w.take(1)
    return w.out


def scenario_pinned(w):
    """The pin: who gets it, the header, requests with another or no pin,
    consumer info, CONSUMER.UNPIN and the advisories."""
    _stream(w, "PN")
    _consumer(w, "PN", "P", deliver_policy="new", priority_policy="pinned_client",
              priority_groups=["g"], priority_timeout=30 * SEC)
    w.api("$JS.API.CONSUMER.INFO.PN.P")
    w.note("a request with a made-up pin, before there is one: ends when a message comes")
    w.pull("PN", "P", "made_up", {"batch": 1, "group": "g", "id": "MADEUP", "expires": 10 * SEC})
    w.note("two clients wait; the first gets the pin")
    w.pull("PN", "P", "A", {"batch": 3, "group": "g", "expires": 60 * SEC})
    w.pull("PN", "P", "B", {"batch": 3, "group": "g", "expires": 60 * SEC})
    w.settle()
    w.pub("pn.x", b"one")
    w.take(3)
    w.pub("pn.x", b"two")
    w.take(1)
    w.api("$JS.API.CONSUMER.INFO.PN.P")
    pin1 = w.pin("PIN1")
    w.note("the pinned client asks again, with its pin (A still wants one: A gets it)")
    w.pull("PN", "P", "A2", {"batch": 1, "group": "g", "id": pin1, "expires": 10 * SEC})
    w.settle()
    w.pub("pn.x", b"three")
    w.take(1)
    w.note("another pin: refused at once")
    w.pull("PN", "P", "wrong", {"batch": 1, "group": "g", "id": "NOTTHEPIN"})
    w.take(1)
    w.note("no pin, no_wait: nothing may go to it")
    w.pull("PN", "P", "nopin", {"batch": 1, "group": "g", "no_wait": True})
    w.take(1)
    w.note("no pin, with expires: it waits behind the pin until it expires")
    w.pull("PN", "P", "later", {"batch": 1, "group": "g", "no_wait": True, "expires": SEC})
    w.take(1)
    w.note("unpinned: with the next message A2 (the old pin) ends, B gets a new pin")
    w.api("$JS.API.CONSUMER.UNPIN.PN.P", {"group": "g"}, linger=0.3)
    w.pub("pn.x", b"four")
    w.take(3)
    w.api("$JS.API.CONSUMER.INFO.PN.P")
    w.pub("pn.x", b"five")
    w.take(1)
    w.note("unpin without a pin still advises")
    w.api("$JS.API.CONSUMER.UNPIN.PN.P", {"group": "g"}, linger=0.3)
    w.api("$JS.API.CONSUMER.UNPIN.PN.P", {"group": "g"}, linger=0.3)
    w.note("B (the old pin) ends; a bare batch size takes the message, its pin header empty")
    w.pull("PN", "P", "bare", b"1")
    w.settle()
    w.pub("pn.x", b"six")
    w.take(2)
    w.api("$JS.API.CONSUMER.INFO.PN.P")
    w.note("a nak'd message goes back to the pinned client with the pin")
    w.pull("PN", "P", "C", {"batch": 2, "group": "g", "expires": 10 * SEC})
    w.settle()
    w.pub("pn.x", b"seven")
    fs = w.take(2)
    msg = [f for f in fs if f.payload == b"seven"][0]
    w.api(msg.reply, b"-NAK")
    w.take(1)
    w.note("deleting the consumer ends its requests")
    w.pull("PN", "P", "D", {"batch": 1, "group": "g", "id": w.pin("PIN3"), "expires": 60 * SEC})
    w.settle()
    w.api("$JS.API.CONSUMER.DELETE.PN.P", linger=0.3)
    return w.out


def scenario_unpin_api(w):
    """CONSUMER.UNPIN's checks, in nats-server's order."""
    _stream(w, "UP")
    _consumer(w, "UP", "P", priority_policy="pinned_client", priority_groups=["g", "h"])
    _consumer(w, "UP", "O", priority_policy="overflow", priority_groups=["g"])
    _consumer(w, "UP", "N")
    for subject, body in [
        ("UP.P", b""), ("UP.P", b" "), ("UP.P", b"{}"), ("UP.P", b"null"), ("UP.P", b"[1]"),
        ("UP.P", b"{bad"), ("UP.P", b'{"group":5}'), ("UP.P", b'{"group":""}'),
        ("UP.P", b'{"group":"a.b"}'), ("UP.P", b'{"group":"zz"}'), ("UP.P", b'{"Group":"h"}'),
        ("UP.P", b'{"group":"g","other":1}'), ("UP.O", b'{"group":"g"}'),
        ("UP.N", b'{"group":"g"}'),
        ("UP.NOPE", b'{"group":"g"}'), ("NOPE.P", b'{"group":"g"}'), ("NOPE.P", b"{bad"),
        ("NOPE.P", b'{"group":"a.b"}'), ("UP", b'{"group":"g"}'), ("UP.P.x", b'{"group":"g"}'),
    ]:
        w.api("$JS.API.CONSUMER.UNPIN." + subject, body, linger=0.2,
              wait=1.0 if subject.count(".") != 1 else 3.0)
    w.api("$JS.API.INFO")
    return w.out


def scenario_overflow(w):
    """Overflow requests: served once the consumer has min_pending messages
    pending (the one at hand included) or min_ack_pending unacknowledged."""
    _stream(w, "OV", 6)
    _consumer(w, "OV", "O", priority_policy="overflow", priority_groups=["g"])
    steps = [
        ("above", {"batch": 1, "group": "g", "min_pending": 7, "expires": SEC}),
        ("at", {"batch": 1, "group": "g", "min_pending": 6, "expires": 5 * SEC}),
        ("ack1", {"batch": 1, "group": "g", "min_ack_pending": 1, "expires": 5 * SEC}),
        ("ack5", {"batch": 1, "group": "g", "min_ack_pending": 5, "no_wait": True}),
        ("both", {"batch": 2, "group": "g", "min_pending": 3, "min_ack_pending": 50,
                  "expires": 5 * SEC}),
        ("plain", {"batch": 1, "group": "g", "no_wait": True}),
        ("late", {"batch": 1, "group": "g", "min_pending": 50, "no_wait": True}),
    ]
    for name, body in steps:
        w.note(name)
        w.pull("OV", "O", name, body)
        w.take(1, limit=3)
    w.api("$JS.API.CONSUMER.INFO.OV.O")
    return w.out


def scenario_prioritized(w):
    """Prioritized: lower priorities first, arrival order within one; a
    request that still wants more goes behind its equals."""
    _stream(w, "PZ")
    _consumer(w, "PZ", "P", deliver_policy="new", priority_policy="prioritized",
              priority_groups=["g"])
    for i, p in enumerate([5, 1, 5, 0, 9, 1]):
        w.pull("PZ", "P", "r%d_p%d" % (i, p),
               {"batch": 2, "group": "g", "priority": p, "expires": 3 * SEC})
    w.pull("PZ", "P", "bare", b"2")
    w.settle()
    w.api("$JS.API.CONSUMER.INFO.PZ.P")
    w.ack_pending = False  # (how many are pending at each delivery depends on timing)
    for i in range(11):
        w.pub("pz.x", b"n%d" % i)
    w.take(11)
    w.take(1, limit=5)  # r4_p9 times out wanting one more; "bare" has no expiry
    return w.out


def scenario_pin_timeout(w):
    """priority_timeout (1 s) in real time: a request from the pinned client
    restarts it, deliveries do not; when it passes the pin is gone (advisory
    "timeout") and the old pin's waiting request ends with a 423."""
    _stream(w, "PT")
    _consumer(w, "PT", "P", deliver_policy="new", priority_policy="pinned_client",
              priority_groups=["g"], priority_timeout=SEC)
    w.pull("PT", "P", "A", {"batch": 5, "group": "g", "expires": 8 * SEC})
    w.settle()
    w.pub("pt.x", b"one")
    w.take(2)
    w.take(1, limit=3)  # UNPINNED (timeout), about 1 s after the pin
    w.api("$JS.API.CONSUMER.INFO.PT.P")
    w.pull("PT", "P", "B", {"batch": 1, "group": "g", "expires": 8 * SEC})
    w.settle()
    w.pub("pt.x", b"two")
    w.take(3)
    return w.out


def scenario_full_queue(w):
    """A full wait queue (prioritized here; the rule is every pull
    consumer's): a request with idle_heartbeat is dropped without a 409."""
    _stream(w, "FQ")
    _consumer(w, "FQ", "P", max_waiting=1, priority_policy="prioritized", priority_groups=["g"])
    w.pull("FQ", "P", "first", {"batch": 1, "group": "g", "expires": 3 * SEC})
    w.settle()
    w.pull("FQ", "P", "hb", {"batch": 1, "group": "g", "expires": 2 * SEC,
                             "idle_heartbeat": 500 * MS})
    w.pull("FQ", "P", "nohb", {"batch": 1, "group": "g", "expires": 2 * SEC})
    w.take(1, limit=2)
    w.take(1, limit=4)  # "first" times out; "hb" never had an answer
    return w.out


SCENARIOS = [scenario_config, scenario_pull_status, scenario_pinned, scenario_unpin_api,
             scenario_overflow, scenario_prioritized, scenario_pin_timeout, scenario_full_queue]


@pytest.fixture(scope="module")
def transcripts():
    got = {}
    for kind in KINDS:
        got[kind] = {}
        with ServerProcess(kind, ["-js"]) as s:
            for fn in SCENARIOS:
                w = Wire(s.port)
                try:
                    got[kind][fn.__name__] = fn(w)
                except Exception as e:  # the transcript shows how far it got
                    got[kind][fn.__name__] = w.out + ["FAILED %r" % e]
                finally:
                    w.close()
    return got


def _lines(transcripts, name, kind="nats-server"):
    return transcripts[kind][name]


@pytest.mark.parametrize("name", [fn.__name__ for fn in SCENARIOS])
def test_same_transcript_as_nats_server(transcripts, name):
    ref = _lines(transcripts, name)
    assert not any(line.startswith("FAILED") for line in ref), ref
    assert _lines(transcripts, name, "natsbroker") == ref


# -- what nats-server said, so that the scenarios keep exercising it -----------


def _has(transcripts, name, *needles):
    text = "\n".join(_lines(transcripts, name))
    for needle in needles:
        assert needle in text, (needle, text)


def test_config_errors_observed(transcripts):
    _has(transcripts, "scenario_config",
         '"err_code": 10159, "description": "Setting PriorityPolicy requires at least one '
         'PriorityGroup to be set"',
         '"err_code": 10196, "description": "consumer can not have priority groups when policy '
         'is none"',
         '"err_code": 10197, "description": "PinnedTTL cannot be set when PriorityPolicy is none"',
         '"err_code": 10161, "description": "Group name cannot be an empty string"',
         '"err_code": 10162',
         '"err_code": 10178, "description": "priority groups can not be used with push consumers"',
         'invalid JSON: unknown priority policy: \\"bogus\\"',
         '"priority_timeout": 120000000000',
         '"priority_groups": [{"group": "A-z_0/9=", "pinned_ts": "TS0"}]')


def test_pull_statuses_observed(transcripts):
    _has(transcripts, "scenario_pull_status",
         "NATS/1.0 400 Bad Request - Not a Overflow Priority consumer",
         "NATS/1.0 400 Bad Request - Not a Pinned Client Priority consumer",
         "NATS/1.0 400 Bad Request - Priority must be between 0 and 9",
         "NATS/1.0 400 Bad Request - Priority Group missing",
         "NATS/1.0 400 Bad Request - Invalid Priority Group")


def test_pinned_observed(transcripts):
    _has(transcripts, "scenario_pinned",
         "b'NATS/1.0 423 Nats-Wrong-Pin-Id\\r\\nNats-Pending-Messages: 1\\r\\n"
         "Nats-Pending-Bytes: 0\\r\\n\\r\\n'",
         "b'NATS/1.0 423 Nats-Pin-Id mismatch\\r\\n\\r\\n'",
         "b'NATS/1.0\\r\\nNats-Pin-Id: PIN1\\r\\n\\r\\n' b'one'",
         "b'NATS/1.0\\r\\nNats-Pin-Id: PIN2\\r\\n\\r\\n' b'four'",
         "b'NATS/1.0\\r\\nNats-Pin-Id: \\r\\n\\r\\n' b'six'",
         'ADV $JS.EVENT.ADVISORY.CONSUMER.PINNED.PN.P {"type": '
         '"io.nats.jetstream.advisory.v1.consumer_group_pinned", "timestamp": "TS", '
         '"account": "$G", "stream": "PN", "consumer": "P", "group": "g", "pinned_id": "PIN1"}',
         'ADV $JS.EVENT.ADVISORY.CONSUMER.UNPINNED.PN.P {"type": '
         '"io.nats.jetstream.advisory.v1.consumer_group_unpinned", "timestamp": "TS", '
         '"account": "$G", "stream": "PN", "consumer": "P", "group": "g", "reason": "admin"}',
         '"priority_groups": [{"group": "g", "pinned_client_id": "PIN1", "pinned_ts": "TS"}]',
         '-> API {"type": "io.nats.jetstream.api.v1.consumer_unpin_response"}')


def test_unpin_errors_observed(transcripts):
    _has(transcripts, "scenario_unpin_api",
         'invalid JSON: unexpected end of JSON input',
         'invalid JSON: consumer group not specified',
         '"err_code": 10160, "description": "Provided priority group does not exist for this '
         'consumer"',
         '$JS.API.CONSUMER.UNPIN.NOPE.P {"group":"g"} -> API {"type": '
         '"io.nats.jetstream.api.v1.consumer_unpin_response", "error": {"code": 404, '
         '"err_code": 10059, "description": "stream not found"}}',
         '$JS.API.CONSUMER.UNPIN.UP {"group":"g"} -> NO REPLY')


def test_full_queue_observed(transcripts):
    _has(transcripts, "scenario_full_queue", "nohb _IN.nohb  b'NATS/1.0 409 Exceeded MaxWaiting")
    assert not any(line.startswith("hb ") for line in _lines(transcripts, "scenario_full_queue"))


def test_pin_timeout_observed(transcripts):
    _has(transcripts, "scenario_pin_timeout", '"reason": "timeout"',
         "b'NATS/1.0 423 Nats-Wrong-Pin-Id")


# --------------------------------------------------------------------------
# priority_timeout on a fake clock (natsbroker in-process)


def _pin_of(frame):
    return PIN_HDR.search(frame.hdr).group(1).decode()


def test_pin_timeout_exact(h):  # noqa: F811  (the timers harness fixture)
    """nats-server (priority_timeout 1 s and 3 s, real time): the pin ends
    exactly priority_timeout after it was handed out or after the pinned
    client's last request; deliveries in between do not extend it."""
    h.stream("PT")
    h.consumer("PT", "P", ack_policy="explicit", deliver_policy="new",
               priority_policy="pinned_client", priority_groups=["g"], priority_timeout=2 * SEC)
    h.pull("PT", "P", b"_R.a", batch=10, group="g", expires=60 * SEC)
    h.wait(0.5)
    h.pub(b"pt.x", b"one")
    first = h.delivered(b"pt.")[-1]
    pin = _pin_of(first)
    pinned = h.advisories(b"CONSUMER.PINNED")
    assert [advisory_body(f)[0] for f in pinned] == [{
        "type": "io.nats.jetstream.advisory.v1.consumer_group_pinned", "account": "$G",
        "stream": "PT", "consumer": "P", "group": "g", "pinned_id": pin}]
    assert advisory_body(pinned[0])[1] == ["type", "id", "timestamp", "account", "stream",
                                           "consumer", "group", "pinned_id"]
    info = h.info("PT", "P")["priority_groups"]
    assert info == [{"group": "g", "pinned_client_id": pin,
                     "pinned_ts": info[0]["pinned_ts"]}]
    # A request with the pin at 1.5 s restarts the 2 s: the pin lasts to 3.5 s.
    h.wait(1.0)
    h.pull("PT", "P", b"_R.b", batch=1, group="g", id=pin, expires=60 * SEC)
    h.wait(1.0)
    h.pub(b"pt.x", b"two")  # a delivery at 2.5 s extends nothing
    assert _pin_of(h.delivered(b"pt.")[-1]) == pin
    h.advance_to(3.5 - 0.001)
    assert h.advisories(b"CONSUMER.UNPINNED") == []
    h.advance_to(3.5)
    gone = h.advisories(b"CONSUMER.UNPINNED")
    assert [(f.t, advisory_body(f)[0]) for f in gone] == [(3500 * MS, {
        "type": "io.nats.jetstream.advisory.v1.consumer_group_unpinned", "account": "$G",
        "stream": "PT", "consumer": "P", "group": "g", "reason": "timeout"})]
    assert h.info("PT", "P")["priority_groups"] == [{"group": "g",
                                                     "pinned_ts": "0001-01-01T00:00:00Z"}]
    # The old pin's requests (the first, which took both messages and went
    # to the back of the queue after the second, and the second, still
    # waiting) end with a 423 as the next message comes, in queue order; a
    # new request without a pin gets it.
    h.pull("PT", "P", b"_R.c", batch=1, group="g", expires=60 * SEC)
    h.pub(b"pt.x", b"three")
    ends = [f for f in h.frames if f.hdr.startswith(b"NATS/1.0 423")]
    assert [(f.dest, f.hdr) for f in ends] == [
        (b"_R.b", b"NATS/1.0 423 Nats-Wrong-Pin-Id\r\nNats-Pending-Messages: 1\r\n"
                  b"Nats-Pending-Bytes: 0\r\n\r\n"),
        (b"_R.a", b"NATS/1.0 423 Nats-Wrong-Pin-Id\r\nNats-Pending-Messages: 8\r\n"
                  b"Nats-Pending-Bytes: 0\r\n\r\n")]
    last = h.delivered(b"pt.")[-1]
    assert (last.dest, last.data) == (b"_R.c", b"three")
    assert _pin_of(last) not in ("", pin)


def test_pin_survives_expired_request_not_restart(h):  # noqa: F811
    """The pin outlives the pinned client's requests (only priority_timeout or
    an unpin ends it), but not a restart of the consumer (nats-server keeps
    pins in memory only)."""
    h.stream("PS", 2)
    h.consumer("PS", "P", ack_policy="explicit", priority_policy="pinned_client",
               priority_groups=["g"], priority_timeout=60 * SEC)
    h.pull("PS", "P", b"_R.a", batch=1, group="g", expires=SEC)
    pin = _pin_of(h.delivered(b"ps.")[-1])
    h.wait(2)
    assert h.info("PS", "P")["priority_groups"][0]["pinned_client_id"] == pin
    h.pull("PS", "P", b"_R.b", batch=1, group="g", no_wait=True)
    assert [f.hdr for f in h.on(b"_R.b")] == [b"NATS/1.0 404 No Messages\r\n\r\n"]
    h.pull("PS", "P", b"_R.c", batch=1, group="g", id=pin, no_wait=True)
    assert [(f.data, _pin_of(f)) for f in h.on(b"_R.c")] == [(b"m2", pin)]


# --------------------------------------------------------------------------
# the next-generation client (nats-jetstream 0.3.0, Python 3.13)


CLIENT_SCENARIO = textwrap.dedent('''
    import asyncio, json, sys
    from nats.client import connect
    from nats.jetstream import new

    async def main(url):
        nc = await connect(url)
        js = new(nc, strict=True)
        out = {}
        s = await js.create_stream(name="NG", subjects=["ng.>"])
        for i in range(5):
            await js.publish("ng.x", b"m%d" % i)
        c = await s.create_consumer(name="O", durable_name="O", ack_policy="explicit",
                                    priority_policy="overflow", priority_groups=["g"])
        out["config"] = [c.info.config.priority_policy, c.info.config.priority_groups]
        out["state"] = c.info.priority_groups
        b = await c.fetch(max_messages=2, max_wait=1.0, priority_group="g", min_pending=10)
        out["below"] = [m.data.decode() async for m in b]
        b = await c.fetch(max_messages=2, max_wait=1.0, priority_group="g", min_pending=5)
        got = [m async for m in b]
        out["at"] = [m.data.decode() for m in got]
        for m in got:
            await m.ack()
        p = await s.create_consumer(name="P", durable_name="P", ack_policy="explicit",
                                    priority_policy="prioritized", priority_groups=["g"])
        b = await p.fetch(max_messages=3, max_wait=1.0, priority_group="g", priority=3)
        out["prioritized"] = [m.data.decode() async for m in b]
        await nc.close()
        print(json.dumps(out))

    asyncio.run(main(sys.argv[1]))
''')


def test_nats_jetstream_client_priority_fetch():
    from tests.test_nats_core import _interpreter
    py = _interpreter()
    got = {}
    for kind in KINDS:
        with ServerProcess(kind, ["-js"]) as s:
            run = subprocess.run([py, "-c", CLIENT_SCENARIO, s.url], capture_output=True,
                                 text=True, timeout=90, cwd=ROOT, env=dict(os.environ))
            assert run.returncode == 0, (kind, run.stdout, run.stderr)
            got[kind] = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["nats-server"] == {
        "config": ["overflow", ["g"]],
        "state": [{"group": "g", "pinned_ts": "0001-01-01T00:00:00Z"}],
        "below": [], "at": ["m0"], "prioritized": ["m0", "m1", "m2"]}
    assert got["natsbroker"] == got["nats-server"]


# --------------------------------------------------------------------------
# the pieces, without a server


def test_unpin_request_checks_in_nats_server_order():
    from natsbroker.jetstream import consumer_requests as CR
    from natsbroker.jetstream.errors import ApiError

    def err(raw):
        with pytest.raises(ApiError) as e:
            CR.parse_unpin_request(raw)
        return (e.value.code, e.value.err_code, e.value.description)
    assert CR.parse_unpin_request(b'{"group":"g","other":[1]}') == "g"
    assert CR.parse_unpin_request(b'{"GROUP":"A-z_0/9="}') == "A-z_0/9="
    assert err(b"") == (400, 10025, "invalid JSON: unexpected end of JSON input")
    assert err(b"null") == (400, 10025, "invalid JSON: consumer group not specified")
    assert err(b'{"group":""}') == (400, 10025, "invalid JSON: consumer group not specified")
    assert err(b'{"group":5}') == (400, 10025, "invalid JSON: json: cannot unmarshal number into "
                                   "Go struct field JSApiConsumerUnpinRequest.group of type string")
    assert err(b"[1]") == (400, 10025, "invalid JSON: json: cannot unmarshal array into Go value "
                           "of type server.JSApiConsumerUnpinRequest")
    assert err(b'{"group":"g.x"}')[1] == 10162
    assert err(b'{"group":"abcdefghijklmnopq"}')[1] == 10162


def test_overflow_thresholds():
    from natsbroker.jetstream.consumer_models import NextRequest
    from natsbroker.jetstream.priority import overflow_waits
    # npc: pending after the message at hand was taken (nats-server checks npc + 1).
    assert not overflow_waits(NextRequest(), 0, 0)
    assert overflow_waits(NextRequest(min_pending=6), 4, 0)
    assert not overflow_waits(NextRequest(min_pending=6), 5, 0)
    assert overflow_waits(NextRequest(min_ack_pending=2), 0, 1)
    assert not overflow_waits(NextRequest(min_ack_pending=2), 0, 2)
    # Either threshold reached is enough.
    assert not overflow_waits(NextRequest(min_pending=50, min_ack_pending=2), 0, 2)
    assert overflow_waits(NextRequest(min_pending=-1, min_ack_pending=2), 100, 0)


def test_prioritized_queue_order():
    import collections

    from natsbroker.jetstream.consumer import WaitingRequest
    from natsbroker.jetstream.consumer_models import NextRequest
    from natsbroker.jetstream.priority import insert_by_priority
    q = collections.deque()
    for name, pg in [("a5", NextRequest(priority=5)), ("bare", None),
                     ("b1", NextRequest(priority=1)), ("c5", NextRequest(priority=5)),
                     ("d0", NextRequest(priority=0))]:
        wr = WaitingRequest(name, 1, 0, 0, 0, 0, False, pg)
        insert_by_priority(q, wr)
    assert [wr.reply for wr in q] == ["d0", "b1", "a5", "c5", "bare"]


def test_pin_header_is_added_last():
    from natsbroker.jetstream.priority import with_pin_header
    assert with_pin_header(None, "ID") == b"NATS/1.0\r\nNats-Pin-Id: ID\r\n\r\n"
    assert with_pin_header(b"", "") == b"NATS/1.0\r\nNats-Pin-Id: \r\n\r\n"
    assert with_pin_header(b"NATS/1.0\r\nA: b\r\n\r\n", "ID") == (
        b"NATS/1.0\r\nA: b\r\nNats-Pin-Id: ID\r\n\r\n")
