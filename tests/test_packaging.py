"""The two ways to run the server: the `natsbroker` script and `twistd natsbroker`."""

import os
import signal
import subprocess
import sys
import time

from tests.support.raw import exchange
from tests.support.servers import ROOT, wait_ports_file

BIN = os.path.dirname(sys.executable)


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def test_twistd_finds_the_plugin():
    out = subprocess.run([os.path.join(BIN, "twistd"), "natsbroker", "--help"],
                         capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "Usage: twistd [options] natsbroker [options]" in out.stdout
    assert "--listen" in out.stdout



def test_twistd_serves_on_a_listen_endpoint(tmp_path):
    proc = subprocess.Popen(
        [os.path.join(BIN, "twistd"), "-n", "--pidfile=", "natsbroker", "--port", "0",
         "--listen", "tcp:0:interface=127.0.0.1", "--ports_file_dir", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=_env(), cwd=str(tmp_path))
    try:
        ports = wait_ports_file(str(tmp_path), proc)
        port = int(ports["nats"][0].rsplit(":", 1)[1])
        out, closed = exchange(port, b'CONNECT {"verbose":false}\r\nSUB a 1\r\nPUB a 2\r\nhi\r\nPING\r\n')
        assert out == b"MSG a 1 2\r\nhi\r\nPONG\r\n" and not closed
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)


def test_sigterm_shuts_down_gracefully(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "natsbroker", "-a", "127.0.0.1", "-p", "-1",
                             "--ports_file_dir", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=_env())
    ports = wait_ports_file(str(tmp_path), proc)
    assert ports["nats"][0].startswith("nats://127.0.0.1:")
    proc.send_signal(signal.SIGTERM)
    log = proc.communicate(timeout=15)[0].decode()
    assert proc.returncode == 0
    assert "Server Exiting" in log
    # The ports file is removed on the way out, as nats-server does.
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".ports")]


def test_version_flag():
    out = subprocess.run([sys.executable, "-m", "natsbroker", "-v"], capture_output=True,
                         text=True, env=_env(), timeout=30)
    assert out.returncode == 0
    assert out.stdout.strip().startswith("natsbroker: v")


def test_trace_flag_logs_client_ops():
    from tests.support.servers import ServerProcess
    with ServerProcess("natsbroker", ["-V"]) as server:
        exchange(server.port, b'CONNECT {"verbose":false}\r\nSUB a 1\r\nPING\r\n')
        deadline = time.time() + 10  # the log line reaches the file soon after the PONG
        while ' - <<- [SUB a 1]' not in server.log() and time.time() < deadline:
            time.sleep(0.05)
        log = server.log()
    assert '[TRC]' in log and ' - <<- [SUB a 1]' in log
