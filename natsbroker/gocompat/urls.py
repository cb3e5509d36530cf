"""Go's reading of addresses and URLs where nats-server shows its words:
net.SplitHostPort, url.ParseRequestURI's scheme and host of an Origin, and
nats-server's wsGetHostAndPort. Used by the websocket listener and by the
configuration loader's checks of its ``allowed_origins``.
"""

import re


class AddrError(ValueError):
    """Go's net.AddrError: why an address is not ``host:port``."""


def split_host_port(hostport):
    """Go's net.SplitHostPort, its refusals included."""
    i = hostport.rfind(":")
    if i < 0:
        raise AddrError("missing port in address")
    j = k = 0
    if hostport.startswith("["):
        end = hostport.find("]")
        if end < 0:
            raise AddrError("missing ']' in address")
        if end + 1 == len(hostport):
            raise AddrError("missing port in address")
        if end + 1 != i:
            if hostport[end + 1] == ":":
                raise AddrError("too many colons in address")
            raise AddrError("missing port in address")
        host = hostport[1:end]
        j, k = 1, end + 1
    else:
        host = hostport[:i]
        if ":" in host:
            raise AddrError("too many colons in address")
    if "[" in hostport[j:]:
        raise AddrError("unexpected '[' in address")
    if "]" in hostport[k:]:
        raise AddrError("unexpected ']' in address")
    return host, hostport[i + 1:]


def host_and_port(tls, hostport):
    """nats-server's wsGetHostAndPort: ``(host, port)``, a missing port
    being the scheme's (443 with TLS, else 80); ValueError for an address
    Go's SplitHostPort refuses otherwise."""
    try:
        host, port = split_host_port(hostport)
    except AddrError as e:
        if "missing port" not in str(e):
            raise ValueError("address %s: %s" % (hostport, e)) from None
        host, port = hostport, "443" if tls else "80"
    return host.lower(), port


_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")
_PORT = re.compile(r"(:[0-9]*)?\Z")


def parse_origin(origin):
    """``(scheme, host)`` of an Origin as Go's url.ParseRequestURI reads it
    (scheme lower-cased, user info dropped, the port checked); ValueError if
    it refuses the text. ``host`` keeps its port, as Go's ``URL.Host``."""
    if origin == "*":  # (Go's request URI for "the server itself")
        return "", ""
    m = _SCHEME.match(origin)
    rest = origin[m.end():] if m else origin
    if not rest.startswith("/"):
        raise ValueError('parse "%s": invalid URI for request' % origin)
    if not m or not rest.startswith("//"):
        return (m.group(1).lower() if m else ""), ""
    authority = rest[2:].split("?", 1)[0].split("/", 1)[0]
    host = authority[authority.rfind("@") + 1:]
    if host.startswith("["):
        end = host.rfind("]")
        if end < 0:
            raise ValueError('parse "%s": missing \']\' in host' % origin)
        port = host[end + 1:]
    else:
        colon = host.find(":")
        port = host[colon:] if colon >= 0 else ""
    if not _PORT.match(port):
        raise ValueError('parse "%s": invalid port "%s" after host' % (origin, port))
    return m.group(1).lower(), host
