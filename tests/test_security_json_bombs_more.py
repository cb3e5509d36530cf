"""S5 (issue 29): deeply nested JSON inside a user JWT, on both servers.

A user JWT's claims are JSON too: nats-server decodes them with Go's
encoding/json (up to 10,000 levels, "exceeded max depth" beyond).  A user JWT
whose (ignored) ``nats.x`` claim nests 2,000 levels logs in on both servers;
10,001 levels and more is refused as a bad login on both.  Neither may log a
traceback, and both keep serving.
"""

import pytest

from natsbroker import jsonbound
from natsbroker.jwtauth import claims as C
from tests.test_jwt import KINDS, Keys, _shape, login
from tests.support.servers import ServerProcess


def nested(depth):
    value = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.fixture(scope="module")
def keys():
    return Keys()


@pytest.fixture(scope="module")
def servers(keys, tmp_path_factory):
    # A nested JWT is longer than the 4 KB default control line.
    conf = keys.memory_config(tmp_path_factory.mktemp("jwt-bomb"), "max_control_line: 262144\n")
    started = {}
    try:
        for kind in KINDS:
            started[kind] = ServerProcess(kind, ["-c", conf]).start()
        yield started
    finally:
        for s in started.values():
            s.stop()


def _user_with(keys, depth):
    u = C.new_keypair("U")
    claims = dict(C.user_nats(), x=nested(depth))
    with jsonbound.room(3 * depth + 1000):      # json.dumps recurses once a level
        token = C.encode(C.USER, C.public_key_of(u), keys.a, nats=claims)
    return token, C.seed_of(u)


def _no_traceback(server):
    log = server.log()
    assert "Traceback" not in log and "RecursionError" not in log, log[-3000:]


@pytest.mark.parametrize("depth", [900, 2000, 9990, 10001, 20000])
def test_nested_user_jwt_claims(servers, keys, depth):
    token, seed = _user_with(keys, depth)
    outcomes = {}
    for kind, server in servers.items():
        _info, out, closed = login(server.port, token, seed)
        outcomes[kind] = (_shape(out), closed)
        _no_traceback(server)
        # Still serving: a fresh plain login works.
        good, gseed = keys.user(keys.a)
        assert b"PONG" in login(server.port, good, gseed)[1]
    assert outcomes["natsbroker"] == outcomes["nats-server"], outcomes
    if depth <= 9990:
        assert b"PONG" in outcomes["nats-server"][0] and b"-ERR" not in outcomes["nats-server"][0]
    else:
        assert b"-ERR 'Authorization Violation'" in outcomes["nats-server"][0]
