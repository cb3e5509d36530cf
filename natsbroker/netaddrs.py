"""The host's addresses, as nats-server lists them for a server listening on
every interface (0.0.0.0 or ::).

nats-server's getNonLocalIPsIfHostIsIPAny walks ``net.Interfaces()`` and
keeps each interface's global unicast addresses (Go's ``IsGlobalUnicast``:
private ranges included; loopback, link-local, multicast and unspecified
left out). Those are what it gives clients in ``connect_urls``, so a client
on another host fails over to an address it can reach. Resolving the host
name instead gives 127.0.1.1 on many systems (or nothing at all), and a
client elsewhere would be sent to its own loopback.

The addresses come from psutil (getifaddrs): the standard library has no
interface enumeration.
"""

import ipaddress
import socket

import psutil

__all__ = ["global_unicast_addresses"]


def _is_global_unicast(text):
    """Go's net.IP.IsGlobalUnicast (and not unspecified)."""
    ip = ipaddress.ip_address(text)
    if ip.is_loopback or ip.is_link_local or ip.is_multicast or ip.is_unspecified:
        return False
    return text != "255.255.255.255"


def global_unicast_addresses():
    """The host's global unicast addresses (IPv4 and IPv6), once each, in
    interface order; an empty list if they cannot be read."""
    try:
        interfaces = psutil.net_if_addrs()
    except OSError:
        return []
    out = []
    for addrs in interfaces.values():
        for a in addrs:
            if a.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            text = a.address.split("%", 1)[0]  # (a link-local zone; those are left out anyway)
            if _is_global_unicast(text) and text not in out:
                out.append(text)
    return out
