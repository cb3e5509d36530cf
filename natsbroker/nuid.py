"""NUID-shaped identifiers: 22 base62 characters, as nats-server's advisory ids
and inbox tokens look."""

import os

_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def nuid():
    """A random 22-character base62 id."""
    n = int.from_bytes(os.urandom(17), "big")
    out = []
    for _ in range(22):
        n, r = divmod(n, 62)
        out.append(_ALPHABET[r])
    return "".join(out)
