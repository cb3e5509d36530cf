"""Start-up failures in nats-server's words.

A server that cannot start says why in one line and exits with status 1, as
nats-server does (``s.Fatalf``); operators and scripts match on its wording,
which includes Go's texts for system errors ("open X: no such file or
directory", "listen tcp H:P: bind: address already in use").  Stdlib only, so
the config parser can use it before any reactor exists.
"""

import errno
import ipaddress
import os
import socket

__all__ = ["StartupError", "go_strerror", "join_host_port", "listen_error", "path_error", "read_file_error"]


class StartupError(Exception):
    """The server cannot start; the message is nats-server's [FTL] line
    (without the level), logged as the server's last line.  Plugins raise it
    from ``start`` for a failure that is the operator's to fix."""


# Go's syscall error texts.  They are glibc's with a lower-case first letter;
# the table keeps them so on any libc (musl words several differently).
_GO_ERRNO = {
    errno.EPERM: "operation not permitted",
    errno.ENOENT: "no such file or directory",
    errno.EIO: "input/output error",
    errno.ENXIO: "no such device or address",
    errno.EACCES: "permission denied",
    errno.EBUSY: "device or resource busy",
    errno.EEXIST: "file exists",
    errno.EXDEV: "invalid cross-device link",
    errno.ENODEV: "no such device",
    errno.ENOTDIR: "not a directory",
    errno.EISDIR: "is a directory",
    errno.EINVAL: "invalid argument",
    errno.ENFILE: "too many open files in system",
    errno.EMFILE: "too many open files",
    errno.ETXTBSY: "text file busy",
    errno.EFBIG: "file too large",
    errno.ENOSPC: "no space left on device",
    errno.EROFS: "read-only file system",
    errno.ENAMETOOLONG: "file name too long",
    errno.ENOTEMPTY: "directory not empty",
    errno.ELOOP: "too many levels of symbolic links",
    errno.EDQUOT: "disk quota exceeded",
    errno.EAFNOSUPPORT: "address family not supported by protocol",
    errno.EADDRINUSE: "address already in use",
    errno.EADDRNOTAVAIL: "cannot assign requested address",
}


def go_strerror(err):
    """Go's text for the system error in ``err`` (an OSError)."""
    if isinstance(err, socket.gaierror):
        return "no such host"  # Go's resolver says this for every failed lookup
    text = _GO_ERRNO.get(err.errno)
    if text is None:
        text = err.strerror or (os.strerror(err.errno) if err.errno else str(err))
        text = text[:1].lower() + text[1:]
    return text


def path_error(op, path, err):
    """Go's ``*os.PathError``: ``"open /etc/x.conf: no such file or directory"``."""
    return f"{op} {os.fspath(path)}: {go_strerror(err)}"


def read_file_error(path, err):
    """Go's error for ``os.ReadFile(path)``, which opens a directory and fails
    reading it (Python fails opening it)."""
    return path_error("read" if err.errno == errno.EISDIR else "open", path, err)


def join_host_port(host, port):
    """Go's ``net.JoinHostPort``: IPv6 literals in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def listen_error(host, port, err):
    """Go's error for a failed ``net.Listen("tcp", host:port)``, e.g.
    ``listen tcp 127.0.0.1:4222: bind: address already in use``."""
    if isinstance(err, socket.gaierror):
        return f"listen tcp: lookup {host}: {go_strerror(err)}"
    return f"listen tcp {join_host_port(_resolved(host), port)}: bind: {go_strerror(err)}"


def _resolved(host):
    # Go names the address it tried to bind, "localhost" as 127.0.0.1.
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        return socket.getaddrinfo(host, None, family, socket.SOCK_STREAM)[0][4][0]
    except OSError:
        return host
