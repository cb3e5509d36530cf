"""The server's keys and build facts, as nats-server announces its own.

nats-server names itself by the public key of an ed25519 nkey it makes at
start-up (``server_id``, ``N...``) and announces the public half of an X25519
curve key (``xkey``, ``X...``) that auth callout services encrypt to. Both are
real keys made by well-kept libraries (nkeys, PyNaCl); only their public halves
leave the process.
"""

import base64
import os
import platform
import subprocess

import nacl.public
import nkeys

# nkeys' prefix byte for curve keys ('X'); nkeys.py knows only the signing roles.
PREFIX_BYTE_CURVE = 23 << 3

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))


class ServerKeys:
    """The server's signing nkey and its curve key."""

    def __init__(self):
        seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_SERVER)
        self.nkey = nkeys.from_seed(bytearray(seed))
        self.server_id = self.nkey.public_key.decode()
        self.curve = nacl.public.PrivateKey.generate()
        self.xkey = encode_public(PREFIX_BYTE_CURVE, bytes(self.curve.public_key))

    def sign(self, data):
        """An ed25519 signature of ``data`` by the server's nkey."""
        return self.nkey.sign(data)


def encode_public(prefix, raw):
    """An nkey public key string: base32(prefix byte + key + CRC-16), unpadded."""
    body = bytes([prefix]) + raw
    return base64.b32encode(body + nkeys.crc16_checksum(body)).rstrip(b"=").decode()


def runtime():
    """What runs us, in the place nats-server names its Go toolchain ("go")."""
    return "%s%s" % (platform.python_implementation().lower().replace("cpython", "python"),
                     platform.python_version())


def _git_commit():
    # The source checkout's commit; an installed copy has none to name, and
    # then INFO and /varz leave the field out as nats-server does when empty.
    top = os.path.dirname(_PKG_DIR)
    if not os.path.exists(os.path.join(top, ".git")):
        return ""
    try:
        out = subprocess.run(["git", "-C", top, "rev-parse", "--short=7", "HEAD"],
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


GIT_COMMIT = _git_commit()
