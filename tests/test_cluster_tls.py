"""TLS on routes (issue 15): ``cluster { tls { ... } }``.

As nats-server: TLS first (the handshake before the acceptor's INFO), the
peer's certificate always required and verified against ca_file, and the
server's certificate checked by the dialer (unless ``insecure``). Certificates
come from trustme: a CA, a certificate for 127.0.0.1 that both serves and
dials, and one from another CA. Mixed clusters are formed both ways.
"""

import json
import ssl
import time

import pytest
import trustme

from tests.support.clients import flushed
from tests.support.cluster import cluster_conf, peers, start_cluster, wait_mesh
from tests.support.raw import dial
from tests.support.servers import ServerProcess
from tests.test_cluster import NB, NS, close_all, connect_all, run, until_seen


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("rcerts")
    ca, other = trustme.CA(), trustme.CA()
    node = ca.issue_cert("127.0.0.1", "localhost")
    stranger = other.issue_cert("127.0.0.1", "localhost")
    paths = {}
    ca.cert_pem.write_to_path(d / "ca.pem")
    other.cert_pem.write_to_path(d / "other-ca.pem")
    for name, c in (("node", node), ("stranger", stranger)):
        c.cert_chain_pems[0].write_to_path(d / (name + "-cert.pem"))
        c.private_key_pem.write_to_path(d / (name + "-key.pem"))
        c.private_key_and_cert_chain_pem.write_to_path(d / (name + ".pem"))
    for f in d.iterdir():
        paths[f.name[:-4]] = str(f)
    return paths


def conf(tmp_path, certs, name, routes=(), who="node", ca="ca", tls_extra="", extra=""):
    tls = ('tls {\n    cert_file: "%s"\n    key_file: "%s"\n    ca_file: "%s"\n    timeout: 1\n    %s\n  }'
           % (certs[who + "-cert"], certs[who + "-key"], certs[ca], tls_extra))
    return cluster_conf(tmp_path, name, routes, extra, tls)


def _tls_talk(port, certs, who):
    """A raw TLS route peer: (handshake error or None, first line read)."""
    ctx = ssl.create_default_context(cafile=certs["ca"])
    if who:
        ctx.load_cert_chain(certs[who])
    s = dial(port, 5)
    try:
        ss = ctx.wrap_socket(s, server_hostname="127.0.0.1")
        ss.sendall(b'CONNECT {"verbose":false,"name":"NX","cluster":"c1","tls_required":true}\r\n')
        buf = b""
        while b"\r\n" not in buf:
            data = ss.recv(65536)
            if not data:
                break
            buf += data
        return None, buf.split(b"\r\n")[0]
    except (ssl.SSLError, OSError) as e:
        return type(e).__name__ + ":" + str(getattr(e, "reason", "")), b""
    finally:
        s.close()


@pytest.fixture(scope="module")
def tls_pair(tmp_path_factory, certs):
    tmp = tmp_path_factory.mktemp("tlspair")
    nodes = {k: ServerProcess(k, conf(tmp, certs, "t-" + k.replace("-", ""),
                                      extra='advertise: "10.1.2.3:7777"')).start(60) for k in (NB, NS)}
    yield nodes
    for n in nodes.values():
        n.stop()


def test_tls_first_info_with_advertise_matches_nats_server(tls_pair, certs):
    infos = {}
    for kind, node in tls_pair.items():
        err, line = _tls_talk(node.cluster_port, certs, "node")
        assert err is None and line.startswith(b"INFO "), (kind, err, line)
        infos[kind] = json.loads(line[5:])
    nb, ns = infos[NB], infos[NS]
    for key in ("tls_required", "tls_verify", "host", "port", "ip"):
        assert nb[key] == ns[key], key
    assert (nb["host"], nb["port"], nb["ip"]) == ("10.1.2.3", 7777, "nats-route://10.1.2.3:7777/")
    assert list(nb) == [k for k in ns if k in nb]


@pytest.mark.parametrize("who,log", [
    (None, "tls: client didn't provide a certificate"),
    ("stranger", "tls: failed to verify certificate: x509: certificate signed by unknown authority"),
], ids=["no-client-cert", "cert-from-another-ca"])
def test_peer_certificate_is_required_and_verified(tls_pair, certs, who, log):
    out = {}
    for kind, node in tls_pair.items():
        err, line = _tls_talk(node.cluster_port, certs, who)
        out[kind] = (err is not None, line)
        deadline = time.time() + 5
        while "TLS route handshake error: " + log not in node.log() and time.time() < deadline:
            time.sleep(0.1)
        assert "TLS route handshake error: " + log in node.log(), (kind, node.log()[-1500:])
    assert out[NB] == out[NS] == (True, b"")


@pytest.mark.parametrize("send", [b'CONNECT {"verbose":false,"name":"NX","cluster":"c1"}\r\n', b""],
                         ids=["plaintext", "silent"])
def test_plaintext_or_silent_peer_on_a_tls_port(tls_pair, send):
    out = {}
    for kind, node in tls_pair.items():
        s = dial(node.cluster_port, 5)
        t0 = time.time()
        if send:
            s.sendall(send)
        got = b""
        try:
            while True:
                data = s.recv(4096)
                if not data:
                    break
                got += data
        except OSError:
            pass
        s.close()
        out[kind] = (got, time.time() - t0 < 4)
    # Nothing said in plaintext; closed (at once, or after the 1 s TLS timeout).
    assert out[NB] == out[NS] == (b"", True)
    for node in tls_pair.values():
        text = ("tls: first record does not look like a TLS handshake" if send else "i/o timeout")
        deadline = time.time() + 5
        while text not in node.log() and time.time() < deadline:
            time.sleep(0.1)
        assert text in node.log()


@pytest.mark.parametrize("kinds", [(NB, NS), (NS, NB), (NB, NB), (NB, NS, NB)],
                         ids=["nb-seed", "ns-seed", "nb-only", "three-via-gossip"])
def test_mixed_cluster_over_tls(tmp_path, certs, kinds):
    nodes = start_cluster(kinds, lambda i, seed: conf(
        tmp_path, certs, "n%d" % i, ["nats-route://127.0.0.1:%d" % seed.cluster_port] if seed else []))
    try:

        async def main():
            ncs = await connect_all(nodes)
            sub = await ncs[-1].subscribe("tls.x")
            await until_seen(ncs[-1], ncs[:-1])
            for nc in ncs[:-1]:
                await nc.publish("tls.x", b"hi")
                await flushed(nc)
                assert (await sub.next_msg(10)).data == b"hi"
            await close_all(ncs)
        run(main())
    finally:
        for n in nodes:
            n.stop()


@pytest.mark.parametrize("kinds", [(NB, NS), (NS, NB)], ids=["nb-accepts", "ns-accepts"])
def test_a_dialer_with_a_stranger_certificate_is_refused(tmp_path, certs, kinds):
    """The dialer's certificate comes from a CA the acceptor does not trust
    (the dialer trusts both): no route, and the acceptor says why."""
    both = tmp_path / "both-ca.pem"
    both.write_text(open(certs["ca"]).read() + open(certs["other-ca"]).read())
    certs = dict(certs, both=str(both))
    acceptor = ServerProcess(kinds[0], conf(tmp_path, certs, "a")).start(60)
    dialer = ServerProcess(kinds[1], conf(tmp_path, certs, "d", ["nats-route://127.0.0.1:%d" % acceptor.cluster_port],
                                          who="stranger", ca="both")).start(60)
    try:
        text = "TLS route handshake error: tls: failed to verify certificate"
        deadline = time.time() + 20
        while acceptor.log().count(text) < 2 and time.time() < deadline:
            time.sleep(0.2)
        assert acceptor.log().count(text) >= 2, acceptor.log()[-2000:]  # and the dialer retries
        assert not peers(acceptor) and not peers(dialer)
    finally:
        dialer.stop()
        acceptor.stop()


def test_insecure_dialer_skips_the_server_check(tmp_path, certs):
    """insecure: the dialer (natsbroker) does not check the server's
    certificate (its ca_file is the other CA), the acceptor still checks the
    dialer's."""
    acceptor = ServerProcess(NS, conf(tmp_path, certs, "a")).start(60)
    dialer = ServerProcess(NB, conf(tmp_path, certs, "d", ["nats-route://127.0.0.1:%d" % acceptor.cluster_port],
                                    ca="other-ca", tls_extra="insecure: true")).start(60)
    try:
        wait_mesh([acceptor, dialer], timeout=30)
    finally:
        dialer.stop()
        acceptor.stop()
