"""User nkeys: public key checks, INFO nonces and CONNECT signatures, as nats-server.

With nkey users configured, every client's INFO carries a fresh ``nonce``
(11 random bytes, base64url without padding). A client proves it holds the
seed of its public ``nkey`` by sending ``sig``, the ed25519 signature of the
nonce's text, base64url without padding or, as nats-server also accepts,
standard base64 with padding. The keys are the nkeys package's encoding;
the signature check is libsodium's (PyNaCl), never our own arithmetic.
"""

import base64
import binascii
import os
import re

import nacl.exceptions
import nacl.signing
import nkeys

NONCE_RAW_LEN = 11  # nats-server's nonceRawLen: 15 characters once encoded

# Go's base64.RawURLEncoding and StdEncoding, strict about the alphabet and
# the padding as Go is (its decoder skips CR and LF, and so do we).
_RAW_URL = re.compile(r"[A-Za-z0-9_-]*\Z")
_STD = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?\Z")

# Why a signature was refused: nats-server's debug line for each case.
SIG_MISSING = "Signature missing"
SIG_NOT_BASE64 = "Signature not valid base64"
SIG_NOT_VERIFIED = "Signature not verified"


def new_nonce():
    """A fresh nonce for a client's INFO."""
    return base64.urlsafe_b64encode(os.urandom(NONCE_RAW_LEN)).rstrip(b"=").decode()


def public_user_key(text):
    """The raw 32-byte ed25519 key of a public user nkey (``U...``), or None
    if ``text`` is not one (a seed, another role's key, a typo: nats-server's
    ``nkeys.IsValidPublicUserKey``)."""
    return _public_key(text, nkeys.PREFIX_BYTE_USER)


def public_account_key(text):
    """Like :func:`public_user_key`, for an account's public key (``A...``)."""
    return _public_key(text, nkeys.PREFIX_BYTE_ACCOUNT)


def _public_key(text, prefix):
    if not isinstance(text, str) or not text or len(text) % 8 in (1, 3, 6):
        return None
    try:
        raw = base64.b32decode(text + "=" * (-len(text) % 8))
    except (binascii.Error, ValueError):
        return None
    if len(raw) != 35 or raw[0] != prefix:
        return None
    body, crc = raw[:-2], raw[-2:]
    if nkeys.crc16(bytearray(body)) != int.from_bytes(crc, "little"):
        return None
    return body[1:]


def decode_signature(sig):
    """CONNECT's ``sig`` as bytes, or None if it is neither base64url without
    padding nor standard base64 with padding."""
    text = sig.replace("\r", "").replace("\n", "")
    if _RAW_URL.match(text) and len(text) % 4 != 1:
        padded = text.replace("-", "+").replace("_", "/") + "=" * (-len(text) % 4)
        return base64.b64decode(padded)
    if len(text) % 4 == 0 and _STD.match(text):
        return base64.b64decode(text)
    return None


def check_signature(public_key, sig, nonce):
    """None if ``sig`` (CONNECT's text) signs ``nonce`` with the user nkey
    ``public_key``; otherwise nats-server's reason."""
    if not sig:
        return SIG_MISSING
    raw = decode_signature(sig)
    if raw is None:
        return SIG_NOT_BASE64
    key = public_user_key(public_key)
    if key is None or not nonce:
        return SIG_NOT_VERIFIED
    try:
        nacl.signing.VerifyKey(key).verify(nonce.encode(), raw)
    except (nacl.exceptions.BadSignatureError, nacl.exceptions.ValueError, ValueError):
        return SIG_NOT_VERIFIED
    return None
