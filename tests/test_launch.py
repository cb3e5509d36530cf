"""natsbroker.launch, the launcher behind embed, the test servers, the bench
and the soak: its argv, its readiness wait and its stop, on real processes."""

import os
import signal
import sys
import time

import pytest

from natsbroker import launch


def _python(code, tmp_path, **kw):
    log = open(tmp_path / "child.log", "wb")
    try:
        return launch.spawn([sys.executable, "-c", code], log=log, cwd=str(tmp_path), **kw)
    finally:
        log.close()


def test_argv_fills_in_what_the_args_leave_out():
    argv = launch.server_argv(["srv"], ["-js"], ports_dir="/d", store_dir="/s")
    assert argv == ["srv", "-p", "-1", "-a", "127.0.0.1", "-sd", "/s", "-js", "--ports_file_dir", "/d"]


def test_argv_keeps_what_the_args_give():
    args = ["--port=4222", "--net", "::1", "-m", "8222", "-js", "--store_dir", "/mine"]
    argv = launch.server_argv(["srv"], args, http_port=-1, jetstream=True, store_dir="/s")
    assert argv == ["srv"] + args


def test_argv_has_no_store_without_jetstream():
    assert launch.server_argv(["srv"], port=4222, store_dir="/s") == ["srv", "-p", "4222", "-a", "127.0.0.1"]


def test_child_env_puts_the_source_first(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    env = launch.child_env({"NATSBROKER_PURE": "1"}, source_root="/src")
    assert env["PYTHONPATH"] == os.pathsep.join(["/src", "/elsewhere"])
    assert env["NATSBROKER_PURE"] == "1"


def test_ready_when_the_ports_file_names_a_listening_port(tmp_path):
    with open(tmp_path / "server.log", "wb") as log:
        s = launch.spawn(launch.server_argv(launch.broker_command(), ports_dir=str(tmp_path)),
                         log=log, cwd=str(tmp_path), env=launch.child_env())
    try:
        ports = launch.await_ready(s, 30, ports_dir=str(tmp_path))
        assert launch.nats_ping("127.0.0.1", launch.port_of(ports["nats"][0]))
    finally:
        assert launch.stop(s) == 0


def test_an_early_exit_is_an_error_with_its_status(tmp_path):
    p = _python("import sys; sys.exit(3)", tmp_path)
    with pytest.raises(launch.LaunchError) as err:
        launch.await_ready(p, 30, ports_dir=str(tmp_path))
    assert err.value.returncode == 3


def test_a_missed_deadline_says_what_the_check_saw_last(tmp_path):
    p = _python("import time; time.sleep(60)", tmp_path)

    def ready(_ports):
        raise OSError("nobody home")

    try:
        t0 = time.monotonic()
        with pytest.raises(launch.LaunchError) as err:
            launch.await_ready(p, 0.3, ready=ready)
        assert time.monotonic() - t0 < 5
        assert err.value.returncode is None and err.value.last_error == "nobody home"
    finally:
        launch.kill(p)


def test_a_check_that_breaks_is_not_retried(tmp_path):
    p = _python("import time; time.sleep(60)", tmp_path)
    try:
        with pytest.raises(KeyError):
            launch.await_ready(p, 30, ready=lambda ports: {}["x"])
    finally:
        launch.kill(p)


def test_stop_kills_what_ignores_sigterm(tmp_path):
    p = _python("import signal, sys, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                "print('ready', flush=True)\ntime.sleep(60)", tmp_path)
    launch.await_ready(p, 30, ready=lambda _: b"ready" in (tmp_path / "child.log").read_bytes())
    assert launch.stop(p, timeout=0.5) == -signal.SIGKILL


def test_stop_by_group_takes_the_children_too(tmp_path):
    p = _python("import subprocess, sys\n"
                "c = subprocess.Popen(['sleep', '60'])\n"
                "print(c.pid, flush=True)\nc.wait()", tmp_path, new_session=True)
    log = tmp_path / "child.log"
    launch.await_ready(p, 30, ready=lambda _: log.read_bytes().strip().isdigit())
    child = int(log.read_bytes())
    launch.stop(p, group=True)
    deadline = time.monotonic() + 10
    while _alive(child):
        assert time.monotonic() < deadline, "the child outlived its group's stop"
        time.sleep(0.02)


def _alive(pid):
    """Running, not gone nor a zombie waiting for whoever inherited it."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
