"""A traced CONNECT never shows a secret (issue 29, S6).

With ``-DV`` both servers trace every CONNECT. nats-server replaces the value
of every ``pass*``, ``auth_token*``, ``sig``, ``proxy_sig`` and ``nkey`` field
with ``[REDACTED]`` (every occurrence); natsbroker replaced only the first
``"pass"``, so ``{"pass":"decoy","pass":"<real>"}`` logged the real one.

* ordinary CONNECTs are traced byte for byte as nats-server traces them;
* generated CONNECT bodies (repeated keys, escaped keys and values, other
  cases, odd spacing, malformed JSON) never put a secret in the log: a
  property of the redaction itself, and of a running broker's log.
"""

import json
import re
import string
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from natsbroker.protocol.redact import is_secret_key, redact_secrets
from tests.support.raw import Conversation
from tests.support.servers import ServerProcess

KINDS = ["nats-server", "natsbroker"]
TRACE = re.compile(r"<<- \[CONNECT (.*)\]$", re.M)


@pytest.fixture(scope="module")
def tracing():
    servers = {}
    try:
        for kind in KINDS:
            servers[kind] = ServerProcess(kind, ["-DV"]).start()
        yield servers
    finally:
        for s in servers.values():
            s.stop()


def _traced(server, bodies, limit=10.0):
    """Send each CONNECT body on its own connection; the traced CONNECT
    lines that the log gained, in order."""
    before = len(server.log())
    for body in bodies:
        c = Conversation(server.port)
        c.send(b"CONNECT " + body + b"\r\nPING\r\n")
        c.read_until(b"PONG\r\n", quiet=0.5)
        c.sock.close()
    end = time.monotonic() + limit
    while time.monotonic() < end:
        lines = TRACE.findall(server.log()[before:])
        if len(lines) >= len(bodies):
            return lines
        time.sleep(0.05)
    return TRACE.findall(server.log()[before:])


ORDINARY = [
    b'{"verbose":false,"user":"root","pass":"decoy","pass":"s3cret-real"}',
    b'{"verbose":false,"user":"derek","pass":"s3cr3t"}',
    b'{"verbose":false,"auth_token":"tok-123","name":"c1"}',
    b'{"verbose":false,"nkey":"UABC","sig":"c2lnbmF0dXJl","proxy_sig":"cHJveHk"}',
    b'{"verbose":false, "pass" : "spaced", "password":"other","passwd":"third"}',
    b'{"verbose":false,"pass":"","auth_token_x":"tx"}',
    b'{"verbose":false,"pass":42,"lang":"go"}',
    b'{"verbose":false,"name":"pass=inname","user":"u"}',
]


def test_ordinary_connects_traced_as_nats_server(tracing):
    got = {kind: _traced(s, ORDINARY) for kind, s in tracing.items()}
    assert len(got["nats-server"]) == len(ORDINARY), tracing["nats-server"].log()[-2000:]
    assert got["natsbroker"] == got["nats-server"]
    assert '"pass":"[REDACTED]","pass":"[REDACTED]"' in got["natsbroker"][0]


# Where nats-server's patterns leak (the value ends at any quote or comma;
# keys are matched as written), natsbroker redacts the whole value.
LEAKY = [
    (b'{"verbose":false,"pass":"ab\\"LEAK1"}', b"LEAK1"),
    (b'{"verbose":false,"pass":"ab,LEAK2"}', b"LEAK2"),
    (b'{"verbose":false,"p\\u0061ss":"LEAK3"}', b"LEAK3"),
    (b'{"verbose":false,"PASS":"LEAK4"}', b"LEAK4"),
    (b'{"verbose":false,"auth_token":"x}LEAK5"}', b"LEAK5"),
    (b'{"verbose":false,"pass":{"nested":"LEAK6"}}', b"LEAK6"),
]


def test_values_nats_server_s_patterns_leak_are_redacted(tracing):
    lines = _traced(tracing["natsbroker"], [body for body, _ in LEAKY])
    assert len(lines) == len(LEAKY)
    for line, (_, secret) in zip(lines, LEAKY):
        assert secret.decode() not in line, line
    assert all(s.decode() not in tracing["natsbroker"].log() for _, s in LEAKY)


# -- generated CONNECT bodies -------------------------------------------------------

_SECRET_KEYS = ["pass", "password", "auth_token", "sig", "proxy_sig", "nkey", "PASS", "Pass",
                "Auth_Token", "SIG", "passwd"]
_OTHER_KEYS = ["user", "name", "lang", "verbose", "jwt", "version", "echo"]


@st.composite
def _connect_bodies(draw):
    """``(body bytes, [secrets])``: a CONNECT-like JSON object with secret
    fields (repeated, keys and values JSON-escaped or not, odd spacing),
    sometimes cut short or with trailing junk."""
    secrets = []
    items = []
    for _ in range(draw(st.integers(1, 6))):
        if draw(st.booleans()):
            key = draw(st.sampled_from(_SECRET_KEYS))
            secret = "Zq" + draw(st.text(string.ascii_letters + string.digits + ' "\\,:}{=\r\n\t/é',
                                         min_size=6, max_size=16)) + "Xk"
            secrets.append(secret)
            value = json.dumps(secret, ensure_ascii=draw(st.booleans()))
        else:
            key = draw(st.sampled_from(_OTHER_KEYS))
            value = json.dumps(draw(st.sampled_from(["u", "pass", "sig:x", True, 1, None])))
        k = json.dumps(key)
        if draw(st.booleans()):
            k = '"' + "".join("\\u%04x" % ord(ch) if draw(st.booleans()) else ch for ch in key) + '"'
        sp = draw(st.sampled_from(["", " ", "\t", "  "]))
        items.append(k + sp + ":" + sp + value)
    body = "{" + ",".join(items) + "}"
    cut = draw(st.sampled_from([None, "cut", "junk"]))
    if cut == "cut":
        body = body[:draw(st.integers(1, len(body)))]
    elif cut == "junk":
        body += draw(st.sampled_from(["x", ',"pass"', "}}"]))
    return body.encode(), secrets


def _leaks(out, secrets, cut):
    text = out.decode("utf-8", "replace")
    found = []
    for s in secrets:
        forms = {s, json.dumps(s)[1:-1], json.dumps(s, ensure_ascii=False)[1:-1]}
        # A secret cut short by a truncated body only counts whole.
        found += [f for f in forms if len(f) >= 8 and f in text]
    return found


@settings(max_examples=400, deadline=None)
@given(_connect_bodies())
def test_redaction_never_shows_a_secret(case):
    body, secrets = case
    out = redact_secrets(body)
    assert not _leaks(out, secrets, False), (body, out)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200))
def test_redaction_takes_any_bytes(data):
    out = redact_secrets(data)
    # Nothing outside secret values changes: without a secret field name the
    # bytes are the same.
    if not re.search(rb"(?i)pass|auth_token|sig|nkey|\\u", data):
        assert out == data


def test_is_secret_key_folds_case_as_go():
    assert all(is_secret_key(k) for k in _SECRET_KEYS + ["pa\u017fs", "PASSWORD"])
    assert not any(is_secret_key(k) for k in _OTHER_KEYS + ["signature", "nkeys", "xpass"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_connect_bodies(), min_size=1, max_size=4))
def test_broker_log_never_shows_a_secret(tracing, cases):
    broker = tracing["natsbroker"]
    before = len(broker.log())
    lines = _traced(broker, [body for body, _ in cases])
    assert len(lines) == len(cases)
    log = broker.log()[before:].encode()
    for body, secrets in cases:
        assert not _leaks(log, secrets, False), (body, log[-3000:])
