"""The host's addresses, as nats-server lists them for a server listening on
every interface (0.0.0.0 or ::).

nats-server's getNonLocalIPsIfHostIsIPAny walks ``net.Interfaces()`` and
keeps each interface's global unicast addresses (Go's ``IsGlobalUnicast``:
private ranges included; loopback, link-local, multicast and unspecified
left out). Those are what it gives clients in ``connect_urls``, so a client
on another host fails over to an address it can reach. Resolving the host
name instead gives 127.0.1.1 on many systems (or nothing at all), and a
client elsewhere would be sent to its own loopback.

The addresses come from ``getifaddrs(3)`` (through ctypes: the standard
library has no interface enumeration).
"""

import ctypes
import ctypes.util
import ipaddress
import socket
import sys

__all__ = ["global_unicast_addresses"]

if sys.platform.startswith("freebsd") or sys.platform == "darwin":
    _FAMILY = [("sa_len", ctypes.c_uint8), ("sa_family", ctypes.c_uint8)]
else:
    _FAMILY = [("sa_family", ctypes.c_ushort)]


class _SockAddr(ctypes.Structure):
    _fields_ = _FAMILY


class _SockAddrIn(ctypes.Structure):
    _fields_ = _FAMILY + [("port", ctypes.c_ushort), ("addr", ctypes.c_ubyte * 4)]


class _SockAddrIn6(ctypes.Structure):
    _fields_ = _FAMILY + [("port", ctypes.c_ushort), ("flowinfo", ctypes.c_uint32),
                          ("addr", ctypes.c_ubyte * 16)]


class _IfAddrs(ctypes.Structure):
    pass


_IfAddrs._fields_ = [
    ("next", ctypes.POINTER(_IfAddrs)),
    ("name", ctypes.c_char_p),
    ("flags", ctypes.c_uint),
    ("addr", ctypes.POINTER(_SockAddr)),
    ("netmask", ctypes.POINTER(_SockAddr)),
    ("dstaddr", ctypes.POINTER(_SockAddr)),
    ("data", ctypes.c_void_p),
]

_FAMILIES = {socket.AF_INET: _SockAddrIn, socket.AF_INET6: _SockAddrIn6}


def _interface_addresses():
    """Every (family, address text) getifaddrs reports, in its order."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    head = ctypes.POINTER(_IfAddrs)()
    if libc.getifaddrs(ctypes.byref(head)) != 0:
        raise OSError(ctypes.get_errno(), "getifaddrs failed")
    out = []
    try:
        node = head
        while node:
            sa = node.contents.addr
            if sa:
                family = sa.contents.sa_family
                kind = _FAMILIES.get(family)
                if kind is not None:
                    packed = bytes(ctypes.cast(sa, ctypes.POINTER(kind)).contents.addr)
                    out.append((family, socket.inet_ntop(family, packed)))
            node = node.contents.next
    finally:
        libc.freeifaddrs(head)
    return out


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
        found = _interface_addresses()
    except (OSError, AttributeError):  # (no getifaddrs in this libc)
        return []
    out = []
    for _, text in found:
        if _is_global_unicast(text) and text not in out:
            out.append(text)
    return out
