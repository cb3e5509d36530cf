"""TLS for the client port, the WebSocket port and monitoring, via pyOpenSSL.

``server_context(tls_config)`` checks a ``tls { }`` block the way nats-server
does at start-up (its error texts, which tools match on) and returns a Twisted
context factory. Certificates are read and verified by OpenSSL; what we read
from a peer certificate (its subject, SANs, public key) is read through
``cryptography``. Nothing here parses certificates or does crypto by hand.

The factory is also the reload point: ``reload()`` builds a new context from
the same files, and connections accepted afterwards use it (SIGHUP).
"""

import hashlib
import re

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from OpenSSL import SSL, crypto
from twisted.internet.interfaces import IOpenSSLServerConnectionCreator
from twisted.logger import Logger
from zope.interface import implementer

log = Logger()

# Go's TLS 1.2 cipher suite names (what nats-server's cipher_suites takes) and
# OpenSSL's names for the same suites. TLS 1.3 suites are not configurable in
# Go (nats-server accepts their names and ignores them); here they are passed
# to OpenSSL's TLS 1.3 list.
CIPHERS_TLS12 = {
    "TLS_RSA_WITH_RC4_128_SHA": "RC4-SHA",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA": "DES-CBC3-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA": "ECDHE-ECDSA-RC4-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA": "ECDHE-RSA-RC4-SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA": "ECDHE-RSA-DES-CBC3-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
}
CIPHERS_TLS13 = {
    "TLS_AES_128_GCM_SHA256": "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384": "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256": "TLS_CHACHA20_POLY1305_SHA256",
}
# Go's names for the TLS 1.2 suites of OpenSSL (for /connz tls_cipher_suite).
GO_CIPHER_NAMES = {v: k for k, v in CIPHERS_TLS12.items()}
GO_CIPHER_NAMES.update(CIPHERS_TLS13)

# nats-server's defaultCipherSuites for TLS 1.2, and Go's TLS 1.3 preference on
# machines with AES instructions (AES-128 first: also the cheapest here).
DEFAULT_TLS12 = [CIPHERS_TLS12[n] for n in (
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384")]
DEFAULT_TLS13 = ["TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"]

CURVES = {
    "CurveP256": "P-256", "CurveP384": "P-384", "CurveP521": "P-521", "X25519": "X25519",
}

_MIN_VERSIONS = {"1.2": SSL.TLS1_2_VERSION, "1.3": SSL.TLS1_3_VERSION}
_HEX_SHA256 = re.compile(r"[0-9a-fA-F]{64}")

# handshake_first: "auto": how long a silent client is waited for before INFO
# goes out first after all (nats-server's DEFAULT_TLS_HANDSHAKE_FIRST_FALLBACK_DELAY).
DEFAULT_TLS_FIRST_FALLBACK = 0.05

# The first byte of a TLS record carrying a handshake (a ClientHello).
TLS_HANDSHAKE_RECORD = 0x16


class TLSConfigError(ValueError):
    """A ``tls { }`` block nats-server would refuse, in its words."""


def check_block_values(tls):
    """Value checks made while the block is read (nats-server's parseTLS),
    raised as :class:`TLSConfigError` with its text."""
    if tls.min_version and tls.min_version not in _MIN_VERSIONS:
        raise TLSConfigError("error parsing tls config: unsupported TLS version: TLS %s"
                             % tls.min_version)
    for name in tls.cipher_suites:
        if name not in CIPHERS_TLS12 and name not in CIPHERS_TLS13:
            raise TLSConfigError("unrecognized cipher %s" % name)
    for name in tls.curve_preferences:
        if name not in CURVES:
            raise TLSConfigError("unrecognized curve preference %s" % name)
    for pin in tls.pinned_certs:
        if not _HEX_SHA256.fullmatch(pin):
            raise TLSConfigError(
                "error parsing tls config, 'pinned_certs' key %s does not look like "
                "hex-encoded sha256 of DER encoded SubjectPublicKeyInfo" % pin)


@implementer(IOpenSSLServerConnectionCreator)
class ServerTLS:
    """The server side of one ``tls { }`` block: what Twisted's TLS layer asks
    for a connection, peer checks after the handshake, and reload."""

    def __init__(self, tls):
        self.config = tls
        self._context = _make_context(tls)
        self.pinned = {p.lower() for p in tls.pinned_certs}

    def getContext(self):
        return self._context

    def serverConnectionForTLS(self, tlsProtocol):
        return SSL.Connection(self._context, None)

    def adopt(self, other):
        """Take ``other``'s settings and freshly read files (config reload):
        connections accepted from now on use them, open ones keep theirs."""
        self.config = other.config
        self._context = other._context
        self.pinned = other.pinned

    def check_pinned(self, cert):
        """None if ``cert`` (a pyOpenSSL X509 or None) passes pinned_certs,
        else nats-server's reason text."""
        if not self.pinned:
            return None
        if cert is None or spki_sha256(cert) not in self.pinned:
            return "Peer certificate not pinned"
        return None


def server_context(tls):
    """A context factory for ``tls`` (raises TLSConfigError in nats-server's words)."""
    return ServerTLS(tls)


def _make_context(tls):
    check_block_values(tls)
    if not tls.cert_file:
        raise TLSConfigError("missing 'cert_file' in TLS configuration")
    if not tls.key_file:
        raise TLSConfigError("missing 'key_file' in TLS configuration")
    ctx = SSL.Context(SSL.TLS_SERVER_METHOD)
    ctx.set_min_proto_version(_MIN_VERSIONS.get(tls.min_version, SSL.TLS1_2_VERSION))
    try:
        ctx.use_certificate_chain_file(tls.cert_file)
    except SSL.Error as e:
        raise TLSConfigError("error parsing X509 certificate/key pair: %s"
                             % _file_error(tls.cert_file, e, "certificate"))
    try:
        ctx.use_privatekey_file(tls.key_file)
        ctx.check_privatekey()
    except SSL.Error as e:
        raise TLSConfigError("error parsing X509 certificate/key pair: %s"
                             % _file_error(tls.key_file, e, "private key"))
    if tls.ca_file:
        try:
            with open(tls.ca_file, "rb") as f:
                pem = f.read()
        except OSError as e:
            raise TLSConfigError("open %s: %s" % (tls.ca_file, _strerror(e)))
        try:
            if b"-----BEGIN CERTIFICATE-----" not in pem:
                raise SSL.Error([])
            ctx.load_verify_locations(tls.ca_file)
        except SSL.Error:
            raise TLSConfigError("failed to parse root ca certificate") from None
    if tls.verify_clients:
        ctx.set_verify(SSL.VERIFY_PEER | SSL.VERIFY_FAIL_IF_NO_PEER_CERT, _verify_ok)
    elif tls.pinned_certs:
        # Pinning needs the peer's certificate; it is checked after the handshake.
        ctx.set_verify(SSL.VERIFY_PEER, _accept_any)
    twelve = [CIPHERS_TLS12[n] for n in tls.cipher_suites if n in CIPHERS_TLS12]
    ctx.set_cipher_list(":".join(twelve or DEFAULT_TLS12).encode())
    thirteen = [CIPHERS_TLS13[n] for n in tls.cipher_suites if n in CIPHERS_TLS13]
    ctx.set_tls13_ciphersuites(":".join(thirteen or DEFAULT_TLS13).encode())
    if tls.curve_preferences:
        groups = ":".join(CURVES[c] for c in tls.curve_preferences)
        try:
            ctx.set_groups(groups.encode())
        except AttributeError:
            pass  # an older pyOpenSSL: OpenSSL's default groups
    # Without a session id context OpenSSL refuses resumed sessions when it
    # verifies clients; with it, a reconnecting client may resume.
    ctx.set_session_id(b"natsbroker")
    ctx.set_options(SSL.OP_NO_COMPRESSION | SSL.OP_CIPHER_SERVER_PREFERENCE)
    return ctx


def _verify_ok(conn, cert, errno, depth, ok):
    return bool(ok)


def _accept_any(conn, cert, errno, depth, ok):
    return True


def _strerror(e):
    if isinstance(e, FileNotFoundError):
        return "no such file or directory"
    if isinstance(e, PermissionError):
        return "permission denied"
    return (e.strerror or str(e)).lower()


def _file_error(path, err, what):
    # Go's wording for the usual cases: a missing file, or the wrong PEM.
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        return "open %s: %s" % (path, _strerror(e))
    if what == "private key" and b"PRIVATE KEY" not in data and b"CERTIFICATE" in data:
        return "tls: found a certificate rather than a key in the PEM for the private key"
    if what == "certificate" and b"CERTIFICATE" not in data:
        return "tls: failed to find any PEM data in certificate input"
    if what == "private key" and b"PRIVATE KEY" not in data:
        return "tls: failed to find any PEM data in key input"
    if what == "private key":
        return "tls: private key does not match public key"
    return "tls: %s" % (err,)


def spki_sha256(cert):
    """Hex SHA-256 of a certificate's DER SubjectPublicKeyInfo (pinned_certs)."""
    c = cert.to_cryptography() if isinstance(cert, crypto.X509) else cert
    der = c.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()


def identities(cert):
    """The names ``verify_and_map`` tries for a client certificate, in
    nats-server's order (its checkClientTLSCertSubject): email SANs, DNS
    SANs, URI SANs; then the subject as a distinguished name (RFC 4514,
    only when every attribute is one go-ldap knows, as nats-server's DN
    match); then Go's ``Subject.ToRDNSequence().String()`` followed by the
    subject's domain components, and without them.

    Go's rendering keeps only the attributes pkix.Name has fields for, in
    its fixed order: an ``emailAddress`` (or any other) attribute is not
    part of it, so "CN=alice,O=Acme" names a certificate whose subject
    also carries an email address."""
    c = cert.to_cryptography() if isinstance(cert, crypto.X509) else cert
    names = []
    try:
        san = c.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        san = None
    if san is not None:
        names += san.get_values_for_type(x509.RFC822Name)
        names += san.get_values_for_type(x509.DNSName)
        names += san.get_values_for_type(x509.UniformResourceIdentifier)
    subject_name = c.subject
    if all(a.oid.dotted_string in _LDAP_TYPES for a in subject_name):
        names.append(subject_name.rfc4514_string())
    rdn = go_rdn_string(subject_name)
    dcs = ",".join("DC=" + a.value for a in subject_name
                   if a.oid == x509.NameOID.DOMAIN_COMPONENT and isinstance(a.value, str))
    if dcs:
        names.append(rdn + "," + dcs)
    names.append(rdn)
    out = []
    for n in names:
        if n and n not in out:
            out.append(n)
    return out


# The attribute types go-ldap's DN knows (nats-server's internal/ldap): a
# subject with any other is not matched as a DN.
_LDAP_TYPES = frozenset(("2.5.4.3", "2.5.4.5", "2.5.4.6", "2.5.4.7", "2.5.4.8", "2.5.4.9",
                         "2.5.4.10", "2.5.4.11", "2.5.4.17", "0.9.2342.19200300.100.1.25"))

# pkix.Name's fields in ToRDNSequence's order, with String()'s type names.
_GO_NAME_FIELDS = (("2.5.4.6", "C"), ("2.5.4.8", "ST"), ("2.5.4.7", "L"), ("2.5.4.9", "STREET"),
                   ("2.5.4.17", "POSTALCODE"), ("2.5.4.10", "O"), ("2.5.4.11", "OU"),
                   ("2.5.4.3", "CN"), ("2.5.4.5", "SERIALNUMBER"))
_GO_SINGLE = ("2.5.4.3", "2.5.4.5")  # CommonName and SerialNumber: the last one wins


def go_rdn_string(name):
    """Go's ``pkix.Name.ToRDNSequence().String()`` of a parsed subject
    (``name``: a cryptography x509.Name): the values of the attributes
    pkix.Name has fields for (FillFromRDNSequence), one RDN per type in
    ToRDNSequence's order, written last RDN first, several values of a
    type joined with "+"."""
    values = {}
    for attr in name:
        oid = attr.oid.dotted_string
        if not isinstance(attr.value, str):
            continue
        if oid in _GO_SINGLE:
            values[oid] = [attr.value]
        else:
            values.setdefault(oid, []).append(attr.value)
    rdns = [[(label, v) for v in values[oid]] for oid, label in _GO_NAME_FIELDS if values.get(oid)]
    return ",".join("+".join("%s=%s" % (label, _go_escape(v)) for label, v in rdn)
                    for rdn in reversed(rdns))


def _go_escape(value):
    # Go's RDNSequence.String() escaping: ,+"\<>; anywhere, a space first
    # or last, a # first. (Go compares the byte index of each rune with the
    # last byte's, which only a one-byte last rune can be.)
    out = []
    last = len(value.encode()) - 1
    at = 0
    for ch in value:
        if ch in ',+"\\<>;' or (ch == " " and (at == 0 or at == last)) or (ch == "#" and at == 0):
            out.append("\\")
        out.append(ch)
        at += len(ch.encode())
    return "".join(out)


def subject(cert):
    """The certificate's subject as an RFC 4514 string (for /connz)."""
    c = cert.to_cryptography() if isinstance(cert, crypto.X509) else cert
    return c.subject.rfc4514_string()


def describe_handshake_error(reason):
    """A TLS handshake failure in Go's words where they are well known (the
    log line tools grep for), else OpenSSL's."""
    text = str(getattr(reason, "value", reason))
    low = text.lower()
    if "peer did not return a certificate" in low or "certificate required" in low:
        return "tls: client didn't provide a certificate"
    if "certificate verify failed" in low or "unknown ca" in low:
        return "tls: failed to verify certificate: x509: certificate signed by unknown authority"
    if "certificate expired" in low or "certificate has expired" in low:
        return "tls: failed to verify certificate: x509: certificate has expired or is not yet valid"
    if "wrong version number" in low or "http request" in low or "unknown protocol" in low:
        return "tls: first record does not look like a TLS handshake"
    if "connection was closed cleanly" in low or "connectiondone" in low or "connection lost" in low:
        return "EOF"
    return text


def cert_not_after(path):
    """The certificate file's notAfter as a POSIX timestamp (None if unreadable)."""
    try:
        with open(path, "rb") as f:
            cert = x509.load_pem_x509_certificate(f.read())
    except (OSError, ValueError):
        return None
    return cert.not_valid_after_utc.timestamp()


def peer_certs(conn, leaf):
    """/connz's tls_peer_certs: the chain the peer presented, leaf first,
    each with its subject and the SHA-256 of its public key and of its DER."""
    chain = [leaf]
    for c in conn.get_peer_cert_chain() or []:
        if c.to_cryptography() != leaf.to_cryptography():
            chain.append(c)
    out = []
    for c in chain:
        cc = c.to_cryptography()
        out.append({"subject": go_subject(cc), "spki_sha256": spki_sha256(cc),
                    "cert_sha256": hashlib.sha256(cc.public_bytes(Encoding.DER)).hexdigest()})
    return out


def go_subject(cert):
    """Go's pkix.Name.String() of a certificate's subject: RFC 4514, most
    specific first, as cryptography's rfc4514_string also writes it."""
    return cert.subject.rfc4514_string()
