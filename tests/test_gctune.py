"""The broker process tunes its garbage collector (natsbroker/gctune.py):
after start-up, ``gc.freeze()`` and thresholds of (10000, 20, 100), under
``natsbroker`` and under ``twistd natsbroker``; ``NATSBROKER_GC=default``
keeps CPython's settings.

The server processes report their collector's state at exit through a
``sitecustomize`` module put on their path (the real server, nothing mocked).
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from natsbroker import gctune
from tests.support.servers import ROOT, ServerProcess

# At exit, and every 50 ms from a thread (twistd ends itself with the signal
# it got, so no atexit hook runs there).
REPORTER = textwrap.dedent('''
    import atexit, gc, json, os, threading, time

    def _report():
        path = os.environ["GC_REPORT"]
        with open(path + ".tmp", "w") as f:
            json.dump({"threshold": gc.get_threshold(), "frozen": gc.get_freeze_count()}, f)
        os.replace(path + ".tmp", path)

    def _loop():
        while True:
            _report()
            time.sleep(0.05)

    atexit.register(_report)
    threading.Thread(target=_loop, daemon=True).start()
''')


def _env(tmp_path, **extra):
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(REPORTER)
    env = {"PYTHONPATH": os.pathsep.join([ROOT, str(site)]),
           "GC_REPORT": str(tmp_path / "gc.json")}
    env.update(extra)
    return env


def _report(tmp_path):
    with open(tmp_path / "gc.json") as f:
        return json.load(f)


def _run_broker(tmp_path, **extra):
    with ServerProcess("natsbroker", env=_env(tmp_path, **extra)) as server:
        server.stop()
    return _report(tmp_path)


def test_broker_process_is_tuned(tmp_path):
    got = _run_broker(tmp_path)
    assert tuple(got["threshold"]) == gctune.THRESHOLDS
    assert got["frozen"] > 10_000  # Twisted, the plugins, the modules


def test_default_keeps_cpythons_settings(tmp_path):
    got = _run_broker(tmp_path, NATSBROKER_GC="default")
    assert tuple(got["threshold"]) == (700, 10, 10) and got["frozen"] == 0


def test_other_thresholds_and_a_bad_value(tmp_path):
    assert tuple(_run_broker(tmp_path, NATSBROKER_GC="5000,15,50")["threshold"]) == (5000, 15, 50)
    with ServerProcess("natsbroker", env=_env(tmp_path, NATSBROKER_GC="lots")) as server:
        server.stop()
        log = server.log()
    assert "NATSBROKER_GC='lots' is not 'default'" in log
    assert tuple(_report(tmp_path)["threshold"]) == gctune.THRESHOLDS


def test_twistd_is_tuned(tmp_path):
    env = dict(os.environ, **_env(tmp_path))
    twistd = os.path.join(os.path.dirname(sys.executable), "twistd")
    out = open(tmp_path / "out.log", "wb")
    proc = subprocess.Popen([twistd, "-n", "--pidfile", "", "natsbroker", "--port", "0", "--listen",
                             "tcp:0:interface=127.0.0.1", "--http_port", "-1"],
                            stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path, env=env)
    try:
        deadline = time.time() + 60
        while "Server is ready" not in (tmp_path / "out.log").read_text():
            assert proc.poll() is None and time.time() < deadline, \
                (tmp_path / "out.log").read_text()
            time.sleep(0.1)
        while _report(tmp_path)["frozen"] == 0:  # tune() runs once the reactor does
            assert time.time() < deadline, _report(tmp_path)
            time.sleep(0.05)
        got = _report(tmp_path)
    finally:
        time.sleep(0.5)  # the reactor's signal handlers (see test_logging)
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        out.close()
    assert tuple(got["threshold"]) == gctune.THRESHOLDS and got["frozen"] > 10_000


@pytest.mark.parametrize("spec,want", [
    (None, gctune.THRESHOLDS), ("", gctune.THRESHOLDS), ("default", None), (" Default ", None),
    ("1,2,3", (1, 2, 3)), ("0,0,0", (0, 0, 0)),
])
def test_thresholds(spec, want):
    assert gctune.thresholds(spec) == want


@pytest.mark.parametrize("spec", ["1,2", "1,2,3,4", "a,b,c", "-1,2,3", "lots"])
def test_thresholds_refused(spec):
    with pytest.raises(ValueError):
        gctune.thresholds(spec)
