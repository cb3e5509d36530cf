"""CONNECT keys as Go's json.Unmarshal matches them: exactly, or else
case-insensitively with Unicode simple folding, each key in turn (a later
one wins). nats-server therefore takes ``{"USER":..,"PASS":..}`` as a login;
a server that ignored the differently-cased keys would let such a client in
anonymously where no_auth_user is set, or refuse it where nats-server admits."""

import json

import pytest

from tests.support.raw import Conversation
from tests.support.servers import both_started

CONF = """
authorization {
  users = [
    {user: alice, password: secret}
    {user: bob, password: other}
  ]
}
"""


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    conf = tmp_path_factory.mktemp("keys") / "users.conf"
    conf.write_text(CONF)
    with both_started(["-c", str(conf)]) as started:
        yield started


def outcome(port, connect):
    """What the server answers a CONNECT (sent as raw text) and a PING:
    ``ok`` (PONG), the -ERR line, or ``nothing`` (closed without a word)."""
    c = Conversation(port)
    c.send(b"CONNECT " + connect.encode() + b"\r\nPING\r\n")
    got = c.read_pongs(1)
    c.close()
    for line in got.split(b"\r\n"):
        if line.startswith(b"-ERR"):
            return line.decode()
        if line == b"PONG":
            return "ok"
    return "nothing"


CASES = [
    '{"user":"alice","pass":"secret"}',
    '{"USER":"alice","PASS":"secret"}',
    '{"User":"alice","Pass":"secret"}',
    '{"user":"alice","pass":"wrong","PASS":"secret"}',
    '{"user":"alice","PASS":"secret","pass":"wrong"}',
    '{"USER":"bob","user":"alice","pass":"secret"}',
    '{"user":"bob","pass":"other","USER":"alice"}',
    # Unicode simple folding: long s for s, Kelvin sign for k.
    '{"u\\u017fer":"alice","pa\\u017f\\u017f":"secret"}',
    '{"user":"alice","pass":"secret","\\u212aey":1}',
    '{"uSeR ":"alice","pass":"secret"}',
    '{"USER":"alice"}',
    '{"VERBOSE":true,"user":"alice","pass":"secret"}',
    '{"Pedantic":"yes","user":"alice","pass":"secret"}',
]


@pytest.mark.parametrize("connect", CASES)
def test_connect_keys_match_as_in_go(servers, connect):
    json.loads(connect)  # (every case is valid JSON)
    got = {kind: outcome(s.port, connect) for kind, s in servers.items()}
    assert got["natsbroker"] == got["nats-server"], got
