"""Lame duck mode and signals, against nats-server 2.15 (differential).

Each scenario runs against a nats-server and a natsbroker process given the
same flags and config file, and compares what clients and operators see:
the INFO a raw client gets, the listener refusing, when clients are closed,
the exit code, the log lines.  nats-server refuses a lame_duck_duration
under 30 s; with a 1 s grace period and a handful of clients it still ends
in a few seconds, as it closes at most one client a second.
"""

import asyncio
import json
import os
import re
import signal
import subprocess
import time

import pytest

from tests.support.http import get_json, http
from tests.support.raw import Wire, dial
from tests.support.servers import ROOT, ServerProcess, broker_command, nats_server_binary
from tests.support.wait import eventually

pytestmark = pytest.mark.skipif(nats_server_binary() is None, reason="nats-server binary not found")

KINDS = ("nats-server", "natsbroker")
LDM_CONF = "lame_duck_duration: 30s\nlame_duck_grace_period: 1s\n"
# The lines of a shutdown that both servers print (other lines are each its own).
_MESSAGES = re.compile(r"\[(?:INF|WRN|ERR)\] (Trapped .*|Entering lame duck mode.*|Closing existing clients|"
                       r"Initiating Shutdown\.\.\.|Initiating JetStream Shutdown\.\.\.|JetStream Shutdown|"
                       r"Server Exiting\.\.|File log re-open.*|Healthcheck failed.*)$")


def _messages(log):
    return [m.group(1) for m in map(_MESSAGES.search, log.splitlines()) if m]


def _conf(tmp_path, kind, text):
    path = tmp_path / ("%s.conf" % kind)
    path.write_text(text)
    return str(path)


def _varz(server):
    return get_json(server, "/varz", timeout=5)


def _wait_connections(server, n):
    # The start-up probe's connection must be gone, or it counts as a client.
    eventually(lambda: _varz(server)["connections"] == n, what="%d connections" % n)


def _refused(port):
    try:
        dial(port, timeout=2).close()
        return False
    except OSError:
        return True


class RawClient(Wire):
    """A raw socket client: INFO, CONNECT, optionally PING (and its PONG)."""

    def __init__(self, port, protocol=1, ping=True):
        super().__init__(port)
        self.sock.sendall(b'CONNECT {"verbose":false,"protocol":%d}\r\n' % protocol)
        if ping:
            self.sock.sendall(b"PING\r\n")
            while self.read_line() != b"PONG":
                pass
            if protocol >= 1:
                self.read_line()  # the INFO confirming the CONNECT
        self.received = []  # (seconds, line) after the mark
        self.closed_at = None

    def watch(self, t0, deadline):
        """Collect lines until the server closes the connection (or deadline)."""
        while time.time() < deadline:
            try:
                line = self._line(time.monotonic() + 0.2)
            except OSError:  # closed (or reset)
                self.closed_at = time.time() - t0
                return
            if line is None:
                continue
            if line == b"PING":
                self.sock.sendall(b"PONG\r\n")
            self.received.append((time.time() - t0, line))

    def ldm_infos(self):
        return [json.loads(line[5:]) for _, line in self.received if line.startswith(b"INFO ")]


def _ldm_run(kind, tmp_path, extra=(), conf=LDM_CONF, send=None):
    """Three raw clients, then lame duck mode; what each saw."""
    import threading

    server = ServerProcess(kind, ["-c", _conf(tmp_path, kind, conf), "-m", "-1"] + list(extra)).start()
    try:
        clients = {"p1": RawClient(server.port), "p0": RawClient(server.port, protocol=0),
                   "p1-noping": RawClient(server.port, ping=False)}
        _wait_connections(server, 3)
        t0 = time.time()
        (send or (lambda s: s.proc.send_signal(signal.SIGUSR2)))(server)
        threads = [threading.Thread(target=c.watch, args=(t0, t0 + 30)) for c in clients.values()]
        for t in threads:
            t.start()
        eventually(lambda: _refused(server.port), what="the client port to refuse")
        refused_at = time.time() - t0
        for t in threads:
            t.join()
        rc = server.proc.wait(30)
        return {"clients": clients, "refused_at": refused_at, "rc": rc, "log": server.log()}
    finally:
        server.stop()


def test_lame_duck_mode_as_nats_server(tmp_path):
    runs = {kind: _ldm_run(kind, tmp_path) for kind in KINDS}
    for kind, run in runs.items():
        clients = run["clients"]
        assert run["rc"] == 0, (kind, run["log"])
        assert run["refused_at"] < 5, kind  # (at once; generous for a loaded machine)
        # INFO with "ldm":true only to the protocol 1 client that had its PONG.
        infos = clients["p1"].ldm_infos()
        assert len(infos) == 1 and infos[0]["ldm"] is True, (kind, clients["p1"].received)
        assert clients["p0"].ldm_infos() == [] and clients["p1-noping"].ldm_infos() == [], kind
        # Everyone closed after the grace period, within the duration
        # (at most a second apart: here, a few seconds in all).
        closed = sorted(c.closed_at for c in clients.values())
        assert None not in closed, kind
        assert 0.9 <= closed[0] and closed[-1] < 30, (kind, closed)
        assert _messages(run["log"]) == [
            'Trapped "user defined signal 2" signal',
            "Entering lame duck mode, stop accepting new clients",
            "Closing existing clients",
            "Initiating Shutdown...",
            "Server Exiting..",
        ], (kind, run["log"])
    # The INFO is the server's own for that client, plus "ldm": same keys.
    keys = {kind: list(run["clients"]["p1"].ldm_infos()[0]) for kind, run in runs.items()}
    assert keys["natsbroker"] == keys["nats-server"]
    for kind, run in runs.items():
        info = run["clients"]["p1"].ldm_infos()[0]
        assert info["client_id"] == run["clients"]["p1"].info["client_id"]
        assert "connect_info" not in info and "nonce" not in info


def test_lame_duck_without_clients_stops_at_once(tmp_path):
    conf = "lame_duck_duration: 60s\nlame_duck_grace_period: 50s\n"
    for kind in KINDS:
        server = ServerProcess(kind, ["-c", _conf(tmp_path, kind, conf), "-m", "-1"]).start()
        try:
            _wait_connections(server, 0)
            t0 = time.time()
            server.proc.send_signal(signal.SIGUSR2)
            assert server.proc.wait(40) == 0
            # No grace period to wait out when nobody is connected.
            assert time.time() - t0 < 40, kind
            assert _messages(server.log()) == [
                'Trapped "user defined signal 2" signal',
                "Entering lame duck mode, stop accepting new clients",
                "Initiating Shutdown...",
                "Server Exiting..",
            ], (kind, server.log())
        finally:
            server.stop()


def test_signal_ldm_command_with_pid_file(tmp_path):
    """``--signal ldm=<pid file>`` does what SIGUSR2 does."""
    def command(kind):
        return [nats_server_binary()] if kind == "nats-server" else broker_command()

    for kind in KINDS:
        pid_file = str(tmp_path / ("%s.pid" % kind))

        def send(server, kind=kind, pid_file=pid_file):
            with open(pid_file) as f:
                assert f.read() == str(server.proc.pid)  # -P wrote it, no newline
            out = subprocess.run(command(kind) + ["--signal", "ldm=" + pid_file], capture_output=True,
                                 text=True, timeout=30, env=_env())
            assert (out.returncode, out.stdout, out.stderr) == (0, "", ""), kind

        run = _ldm_run(kind, tmp_path, extra=["-P", pid_file], send=send)
        assert run["rc"] == 0
        assert len(run["clients"]["p1"].ldm_infos()) == 1
        # As nats-server: left in place at exit, private to the owner.
        assert os.stat(pid_file).st_mode & 0o777 == 0o600, kind


def test_sigterm_during_lame_duck_is_ignored(tmp_path):
    def send(server):
        server.proc.send_signal(signal.SIGUSR2)
        eventually(lambda: "Entering lame duck mode" in server.log(), what="lame duck mode")
        server.proc.send_signal(signal.SIGTERM)
        eventually(lambda: 'Trapped "terminated"' in server.log(), what="SIGTERM trapped")

    for kind in KINDS:
        run = _ldm_run(kind, tmp_path, send=send)
        assert run["rc"] == 0
        # Still the graceful end: the grace period, then the clients closed.
        assert min(c.closed_at for c in run["clients"].values()) >= 0.9, kind
        assert _messages(run["log"]) == [
            'Trapped "user defined signal 2" signal',
            "Entering lame duck mode, stop accepting new clients",
            'Trapped "terminated" signal',
            "Closing existing clients",
            "Initiating Shutdown...",
            "Server Exiting..",
        ], (kind, run["log"])


class WebSocketClient:
    """A raw WebSocket NATS client: CONNECT (protocol 1) and PING sent."""

    def __init__(self, port):
        self.sock = dial(port)
        self.sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                          b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                          b"Sec-WebSocket-Version: 13\r\n\r\n")
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            self.buf += self.sock.recv(65536)
        self.buf = self.buf.split(b"\r\n\r\n", 1)[1]
        self.text = b""
        payload, mask = b'CONNECT {"protocol":1,"verbose":false}\r\nPING\r\n', b"\x01\x02\x03\x04"
        self.sock.sendall(bytes([0x82, 0x80 | len(payload)]) + mask
                          + bytes(c ^ mask[i % 4] for i, c in enumerate(payload)))
        self.lines()  # INFO, PONG ...
        self.lines(until=b"INFO ")  # ... and the INFO after the CONNECT

    def _frame(self):
        def need(n):
            while len(self.buf) < n:
                data = self.sock.recv(65536)
                if not data:
                    raise EOFError
                self.buf += data
        need(2)
        size, start = self.buf[1] & 0x7F, 2
        if size == 126:
            need(4)
            size, start = int.from_bytes(self.buf[2:4], "big"), 4
        need(start + size)
        data, self.buf = self.buf[start:start + size], self.buf[start + size:]
        return data

    def lines(self, until=b"PONG"):
        """NATS lines up to the one starting with ``until`` (INFOs as dicts)."""
        out = []
        while True:
            while b"\r\n" not in self.text:
                self.text += self._frame()
            line, self.text = self.text.split(b"\r\n", 1)
            out.append(json.loads(line[5:]) if line.startswith(b"INFO ") else line)
            if line.startswith(until):
                return out


def test_sigint_during_lame_duck_stops_at_once(tmp_path):
    def send(server):
        server.proc.send_signal(signal.SIGUSR2)
        eventually(lambda: "Entering lame duck mode" in server.log(), what="lame duck mode")
        server.proc.send_signal(signal.SIGINT)

    conf = "lame_duck_duration: 60s\nlame_duck_grace_period: 50s\n"
    for kind in KINDS:
        run = _ldm_run(kind, tmp_path, conf=conf, send=send)
        assert run["rc"] == 0
        assert max(c.closed_at for c in run["clients"].values()) < 40, kind
        assert _messages(run["log"]) == [
            'Trapped "user defined signal 2" signal',
            "Entering lame duck mode, stop accepting new clients",
            'Trapped "interrupt" signal',
            "Initiating Shutdown...",
            "Server Exiting..",
        ], (kind, run["log"])


def test_lame_duck_closes_websocket_listener_and_fails_healthz(tmp_path):
    conf = LDM_CONF.replace("1s", "5s") + "websocket { port: -1, no_tls: true }\n"
    seen = {}
    for kind in KINDS:
        server = ServerProcess(kind, ["-c", _conf(tmp_path, kind, conf), "-m", "-1"]).start()
        try:
            client = RawClient(server.port)
            ws = WebSocketClient(server.ws_port)
            _wait_connections(server, 2)
            server.proc.send_signal(signal.SIGUSR2)
            # WebSocket clients are told too, with the WebSocket listener's INFO.
            (info,) = ws.lines(until=b"INFO ")
            assert info["ldm"] is True and info["port"] == server.ws_port, kind
            seen.setdefault("ws-keys", []).append(list(info))
            eventually(lambda: _refused(server.port) and _refused(server.ws_port), what="listeners closed")
            answers = []
            for query in ("", "?details=true"):
                status, _, raw = http(server, "/healthz" + query, timeout=5)
                assert status >= 400, (status, raw)
                body = json.loads(raw)
                # nats-server lists the closed listeners in map order.
                for where in [body] + body.get("errors", []):
                    if "error" in where:
                        where["error"] = where["error"].replace("websocket, server", "server, websocket")
                answers.append((status, body))
            seen[kind] = answers
            ws.sock.close()
            assert "ldm" not in _varz(server)  # nats-server has no /varz field for it
            server.proc.send_signal(signal.SIGINT)
            assert server.proc.wait(20) == 0
            client.sock.close()
        finally:
            server.stop()
    assert seen["natsbroker"] == seen["nats-server"]
    assert seen["ws-keys"][0] == seen["ws-keys"][1]
    assert seen["nats-server"][0] == (500, {
        "status": "error", "error": "failed to be ready for connections after 1ms: server, websocket"})


def test_lame_duck_shuts_jetstream_down_first(tmp_path):
    for kind in KINDS:
        store = str(tmp_path / ("store-" + kind))
        server = ServerProcess(kind, ["-c", _conf(tmp_path, kind, LDM_CONF), "-m", "-1", "-js",
                                      "-sd", store]).start()
        try:
            asyncio.run(_add_stream(server.url))
            client = RawClient(server.port)
            _wait_connections(server, 1)
            server.proc.send_signal(signal.SIGUSR2)
            assert server.proc.wait(20) == 0
            assert _messages(server.log()) == [
                'Trapped "user defined signal 2" signal',
                "Entering lame duck mode, stop accepting new clients",
                "Initiating JetStream Shutdown...",
                "JetStream Shutdown",
                "Closing existing clients",
                "Initiating Shutdown...",
                "Server Exiting..",
            ], (kind, server.log())
            client.sock.close()
        finally:
            server.stop()
        # The store was closed cleanly: the stream and its message are there.
        again = ServerProcess(kind, ["-js", "-sd", store]).start()
        try:
            assert asyncio.run(_stream_messages(again.url)) == 1, kind
        finally:
            again.stop()


async def _add_stream(url):
    import nats

    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="LDM", subjects=["ldm.>"])
    await js.publish("ldm.x", b"kept")
    await nc.close()


async def _stream_messages(url):
    import nats

    nc = await nats.connect(url)
    try:
        return (await nc.jetstream().stream_info("LDM")).state.messages
    finally:
        await nc.close()


def test_nats_py_lame_duck_callback(tmp_path):
    async def scenario(server):
        import nats

        fired = asyncio.Event()

        async def on_ldm():
            fired.set()

        nc = await nats.connect(server.url, lame_duck_mode_cb=on_ldm, allow_reconnect=False)
        await nc.flush()
        await asyncio.get_running_loop().run_in_executor(None, _wait_connections, server, 1)
        server.proc.send_signal(signal.SIGUSR2)
        await asyncio.wait_for(fired.wait(), 10)
        await nc.close()

    for kind in KINDS:
        server = ServerProcess(kind, ["-c", _conf(tmp_path, kind, LDM_CONF), "-m", "-1"]).start()
        try:
            asyncio.run(scenario(server))
            assert server.proc.wait(20) == 0
        finally:
            server.stop()


# -- the other signals -------------------------------------------------------------------


def _log_lines_after(kind, args, actions):
    server = ServerProcess(kind, args).start()
    try:
        for act in actions:
            act(server)
        rc = server.proc.wait(20)
        return rc, server
    finally:
        server.stop()


def _signal_and_wait(sig, text):
    def act(server):
        server.proc.send_signal(sig)
        eventually(lambda: text in server.log() or server.proc.poll() is not None, what=text)
    return act


@pytest.mark.parametrize("sig,name", [(signal.SIGINT, "interrupt"), (signal.SIGTERM, "terminated")])
def test_sigint_and_sigterm_stop(sig, name):
    for kind in KINDS:
        rc, server = _log_lines_after(kind, [], [_signal_and_wait(sig, "Server Exiting")])
        assert rc == 0, kind
        assert _messages(server.log()) == ['Trapped "%s" signal' % name, "Initiating Shutdown...",
                                           "Server Exiting.."], (kind, server.log())


def test_sigterm_with_jetstream():
    for kind in KINDS:
        rc, server = _log_lines_after(kind, ["-js"], [_signal_and_wait(signal.SIGTERM, "Server Exiting")])
        assert rc == 0, kind
        assert _messages(server.log()) == ['Trapped "terminated" signal', "Initiating Shutdown...",
                                           "Initiating JetStream Shutdown...", "JetStream Shutdown",
                                           "Server Exiting.."], (kind, server.log())


def test_sigusr1_without_a_log_file():
    for kind in KINDS:
        rc, server = _log_lines_after(kind, [], [
            _signal_and_wait(signal.SIGUSR1, "File log re-open"),
            _signal_and_wait(signal.SIGINT, "Server Exiting")])
        assert _messages(server.log())[:2] == ['Trapped "user defined signal 1" signal',
                                               "File log re-open ignored, not a file logger"], kind


def test_sigusr1_reopens_the_log_file(tmp_path):
    for kind in KINDS:
        path = str(tmp_path / ("%s.log" % kind))

        def rotate(server, path=path):
            eventually(lambda: os.path.exists(path) and "Server is ready" in open(path).read(), what="log")
            os.rename(path, path + ".1")
            server.proc.send_signal(signal.SIGUSR1)
            eventually(lambda: os.path.exists(path) and "re-opened" in open(path).read(), what="new log")
            server.proc.send_signal(signal.SIGINT)

        rc, _ = _log_lines_after(kind, ["-l", path], [rotate])
        assert rc == 0
        with open(path + ".1") as f:
            assert _messages(f.read()) == ['Trapped "user defined signal 1" signal'], kind
        with open(path) as f:
            assert _messages(f.read()) == ["File log re-opened", 'Trapped "interrupt" signal',
                                           "Initiating Shutdown...", "Server Exiting.."], kind


def test_sighup_reloads(tmp_path):
    for kind in KINDS:
        conf = _conf(tmp_path, kind, "port: -1\n")
        rc, server = _log_lines_after(kind, ["-c", conf], [
            _signal_and_wait(signal.SIGHUP, "Reloaded server configuration"),
            _signal_and_wait(signal.SIGINT, "Server Exiting")])
        assert rc == 0
        assert _messages(server.log())[0] == 'Trapped "hangup" signal', kind
        assert "[INF] Reloaded server configuration" in server.log(), kind


def test_sigquit_dumps_stacks_and_exits_2():
    for kind in KINDS:
        server = ServerProcess(kind, []).start()
        try:
            server.proc.send_signal(signal.SIGQUIT)
            assert server.proc.wait(20) == 2, kind
            assert "SIGQUIT: quit\n" in server.log(), kind
        finally:
            server.stop()


# -- --signal errors ------------------------------------------------------------------------


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _signal_command(kind, value, cwd):
    base = [nats_server_binary()] if kind == "nats-server" else broker_command()
    out = subprocess.run(base + ["--signal", value], capture_output=True, text=True, timeout=30,
                         cwd=cwd, env=_env())
    return out.returncode, out.stdout, out.stderr.replace(kind, "<exe>")


def _dead_pid():
    # A pid no process can have: above the kernel's pid_max.
    with open("/proc/sys/kernel/pid_max") as f:
        return int(f.read()) + 12345


# Every one names its pid: a pid-less --signal would signal whatever single
# server runs on this (shared) machine.
@pytest.mark.parametrize("value", [
    "ldm=abc", "foo=123", "ldm=1=2", "ldm=1=2=3", "reload={dead}", "quit={dead}", "term={dead}",
    "stop={dead}", "reopen={dead}", "ldm={dead}", "bogus={dead}", "ldm=pidfile", "ldm=pidfile-nl",
    "=5",
])
def test_signal_command_errors(tmp_path, value):
    (tmp_path / "pidfile").write_text(str(_dead_pid()))
    (tmp_path / "pidfile-nl").write_text("%d\n" % _dead_pid())
    value = value.format(dead=_dead_pid())
    results = {kind: _signal_command(kind, value, str(tmp_path)) for kind in KINDS}
    assert results["natsbroker"] == results["nats-server"]


def test_lame_duck_config_errors(tmp_path):
    bad = [
        "lame_duck_duration: 3s\n",
        'lame_duck_duration: "20000ms"\n',
        'lame_duck_duration: "abc"\n',
        'lame_duck_duration: "5"\n',
        'lame_duck_duration: "5x"\n',
        "lame_duck_duration: 10\n",
        "lame_duck_duration: true\n",
        'port: 4222\n  lame_duck_duration: "3s"\n',
        'lame_duck_grace_period: "-5s"\n',
        'lame_duck_grace_period: "abc"\n',
        "lame_duck_grace_period: 2m\n",
        'lame_duck_duration: "30s"\nlame_duck_grace_period: "30s"\n',
        'lame_duck_duration: "1m"\nlame_duck_grace_period: "90s"\n',
        'lame_duck_grace_period: "3m"\n',
    ]
    for text in bad:
        (tmp_path / "c.conf").write_text(text)
        results = {}
        for kind in KINDS:
            base = [nats_server_binary()] if kind == "nats-server" else broker_command()
            outs = []
            for extra in (["-t"], ["-p", "-1", "-a", "127.0.0.1"]):
                out = subprocess.run(base + ["-c", "c.conf"] + extra, capture_output=True, text=True,
                                     timeout=30, cwd=str(tmp_path), env=_env())
                err = out.stderr.strip().replace(kind, "<exe>")
                err = re.sub(r" \(sha256:[0-9a-f]+\)", "", err)
                outs.append((out.returncode, err))
            results[kind] = outs
        assert results["natsbroker"] == results["nats-server"], text
