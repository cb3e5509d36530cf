"""``websocket { jwt_cookie: name }`` in operator mode (issue 14 item 5):
a WebSocket client whose CONNECT has no ``jwt`` logs in with the user JWT
of that cookie (signing the nonce unless it is a bearer token), as with
nats-server."""

import pytest

from natsbroker.auth.jwt import claims as C
from tests.support.servers import both_started
from tests.test_jwt import Keys, sign
from tests.test_websocket import WSClient

P = C.public_key_of


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    keys = Keys()
    tmp = tmp_path_factory.mktemp("jwt-cookie")
    conf = keys.memory_config(tmp, "websocket { port: -1, no_tls: true, jwt_cookie: natsjwt }\n")
    with both_started(["-c", conf]) as started:
        yield keys, started


def _login(s, cookie, connect):
    headers = [(b"Cookie", b"other=1; natsjwt=" + cookie.encode())] if cookie else []
    ws = WSClient(s.ws_port, headers=headers)
    try:
        info = ws.info()
        ws.clear()
        ws.send(connect(info).encode() + b"PING\r\n")
        ws.wait(lambda: b"PONG\r\n" in ws.data() or b"-ERR" in ws.data() or ws.eof)
        return ws.data()
    finally:
        ws.close()


def test_user_jwt_from_the_cookie(servers):
    keys, started = servers
    token, seed = keys.user(keys.a)
    bearer, _ = keys.user(keys.a, bearer_token=True)

    def signed(info):
        return 'CONNECT {"verbose":false,"sig":"%s"}\r\n' % sign(seed, info["nonce"])

    def plain(info):
        return 'CONNECT {"verbose":false}\r\n'

    got = {}
    for kind, s in started.items():
        got[kind] = [_login(s, token, signed).split(b"\r\n")[0],
                     _login(s, bearer, plain).split(b"\r\n")[0],
                     _login(s, token, plain).split(b"\r\n")[0],
                     _login(s, "", plain).split(b"\r\n")[0]]
    assert got["natsbroker"] == got["nats-server"]
    assert got["natsbroker"][:2] == [b"PONG", b"PONG"]
    assert got["natsbroker"][2:] == [b"-ERR 'Authorization Violation'"] * 2
