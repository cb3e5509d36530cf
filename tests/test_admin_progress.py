"""``natsbroker-admin`` progress bars (issue 17 item 6): drawn (tqdm) when
stderr is a terminal, absent when it is not. The tool runs as a subprocess,
its stderr on a pseudo-terminal (``pty.openpty``) or on a pipe."""

import asyncio
import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios

import nats
import pytest

from natsbroker import embed
from tests.support.servers import ROOT

pytestmark = pytest.mark.timeout(300)

BAR = "100%|"  # tqdm's finished bar: percentage, then the bar's left edge


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONIOENCODING"] = "utf-8"
    env.pop("TQDM_DISABLE", None)
    return env


def admin_on_tty(*args, timeout=240):
    """Run the tool with stderr on a pseudo-terminal 120 columns wide:
    ``(exit status, everything the terminal received)``."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    try:
        proc = subprocess.Popen([sys.executable, "-m", "natsbroker.admin", *args],
                                stdin=subprocess.DEVNULL, stdout=slave, stderr=slave,
                                env=_env(), cwd=ROOT)
    finally:
        os.close(slave)
    received = []
    try:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every copy of the slave end is closed
                break
            if not data:
                break
            received.append(data)
        status = proc.wait(timeout)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return status, b"".join(received).decode("utf-8", errors="replace")


def admin_piped(*args, timeout=240):
    return subprocess.run([sys.executable, "-m", "natsbroker.admin", *args], capture_output=True,
                          text=True, env=_env(), cwd=ROOT, timeout=timeout,
                          stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A broker with stream S holding about 1.5 MB."""
    with embed.start(workdir=tmp_path_factory.mktemp("progress")) as b:
        async def fill():
            nc = await nats.connect(b.url)
            js = nc.jetstream()
            await js.add_stream(name="S", subjects=["s.>"])
            for i in range(300):
                await js.publish("s.%d" % (i % 7), os.urandom(5000))
            await nc.close()
        asyncio.run(asyncio.wait_for(fill(), 120))
        yield b


def test_backup_verify_restore_draw_bars_on_a_terminal(broker, tmp_path):
    d = str(tmp_path / "b")
    status, tty = admin_on_tty("backup", "S", d, "--server", broker.url, "--chunk-size", "16384")
    assert status == 0, tty
    assert "backup S" in tty and BAR in tty and "chunks" in tty, tty
    assert "\r" in tty  # redrawn in place
    assert "backed up stream S" in tty  # the summary as well

    status, tty = admin_on_tty("verify", d)
    assert status == 0 and "verify stream.tar.s2" in tty and BAR in tty and "OK" in tty, tty

    with embed.start() as target:  # an empty server: S's subjects are free there
        status, tty = admin_on_tty("restore", d, "--server", target.url, "--chunk-size", "16384")
    assert status == 0, tty
    assert "restore S" in tty and BAR in tty and "restored stream S" in tty, tty

    # --quiet: the summary only.
    status, tty = admin_on_tty("verify", d, "--quiet")
    assert status == 0 and "OK" in tty and BAR not in tty and "\r" not in tty.replace("\r\n", ""), tty


def test_no_bar_without_a_terminal(broker, tmp_path):
    d = str(tmp_path / "b")
    out = admin_piped("backup", "S", d, "--server", broker.url, "--chunk-size", "16384")
    assert out.returncode == 0, out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("backed up stream S"), out.stderr
    assert "\r" not in out.stderr and "%|" not in out.stderr

    out = admin_piped("verify", d)
    assert out.returncode == 0 and out.stderr.splitlines() == [out.stderr.strip()], out.stderr
    assert out.stderr.strip().endswith(": OK") and "%|" not in out.stderr

    with embed.start() as target:
        out = admin_piped("restore", d, "--server", target.url)
    assert out.returncode == 0, out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("restored stream S"), out.stderr


def test_store_verify_bar_on_a_terminal_only(tmp_path):
    with embed.start(workdir=tmp_path / "w") as b:
        async def fill():
            nc = await nats.connect(b.url)
            js = nc.jetstream()
            for name in ("A", "B"):
                await js.add_stream(name=name, subjects=[name.lower()])
                await js.publish(name.lower(), b"x")
            await nc.close()
        asyncio.run(asyncio.wait_for(fill(), 60))
    store = b.store_dir  # the server has stopped: its store may be examined

    status, tty = admin_on_tty("verify", store)
    assert status == 0 and "2 stream(s) verified: OK" in tty, tty
    assert "verify:" in tty and "stream" in tty and "%|" in tty, tty

    out = admin_piped("verify", store)
    assert out.returncode == 0 and "2 stream(s) verified: OK" in out.stdout, out.stdout
    assert out.stderr == ""
