"""NATS subject matching for the plugin's deny list (``*`` one token, ``>``
the rest), kept here so that the plugin needs nothing of the broker's
internals."""


def matches(pattern, subject):
    """Does ``subject`` (bytes) match ``pattern`` (bytes, may have wildcards)?"""
    ptoks = pattern.split(b".")
    stoks = subject.split(b".")
    for i, p in enumerate(ptoks):
        if p == b">":
            return len(stoks) > i
        if i >= len(stoks) or (p != b"*" and p != stoks[i]):
            return False
    return len(ptoks) == len(stoks)
