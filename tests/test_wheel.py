"""The built wheel, installed into a fresh virtualenv: what it holds and what runs from it.

The sdist and the wheel are built from the checkout (`python -m build`, the
wheel from the unpacked sdist, so a file missing from either shows). The
fresh venv gets the wheel without dependencies; it sees this venv's third-party
packages through a path line in a .pth file, which does not run the .pth files
found there (the editable install's pointer to the checkout among them), and
the commands run with neither the checkout on PYTHONPATH nor in their working
directory: they can only import what the wheel installed.
"""

import glob
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import textwrap
import venv
import zipfile

import pytest

from natsbroker import __version__
from tests.support.raw import exchange
from tests.support.servers import ROOT, wait_ports_file

# The first test builds the wheel, compiling the hot modules (minutes, not seconds).
# One worker builds the wheel once for the module (xdist_group; make test's
# --dist loadgroup): concurrent builds from one checkout share its build/ and
# egg-info and break each other's wheels.
pytestmark = [pytest.mark.timeout(900), pytest.mark.long, pytest.mark.xdist_group("wheel")]

# Repository directory -> its path in the wheel.
PACKAGE_DIRS = {"natsbroker": "natsbroker", "plugins": "natsbroker/plugins",
                "spark": "natsbroker/spark"}

DATA = "natsbroker-%s.data" % __version__
DIST_INFO = "natsbroker-%s.dist-info" % __version__

# A third-party drop-in: answers requests on echo.> (no headers, for a raw-socket check).
DROPIN = textwrap.dedent('''
    from twisted.plugin import IPlugin
    from zope.interface import implementer

    from natsbroker.interfaces import IBrokerPlugin, IBrokerPluginFactory


    @implementer(IBrokerPlugin)
    class Echo:
        name = "wheel-echo"

        def __init__(self, config):
            pass

        def start(self, broker):
            self.broker = broker
            self.sub = broker.subscribe("echo.>", self.on_msg)

        def stop(self):
            self.broker.unsubscribe(self.sub)

        def on_msg(self, sub, subject, reply, hdr_len, raw):
            if reply:
                self.broker.publish(reply, b"echo:" + raw[hdr_len:])


    @implementer(IPlugin, IBrokerPluginFactory)
    class EchoFactory:
        name = "wheel-echo"
        order = 50

        def make_plugin(self, config):
            return Echo(config)


    echo = EchoFactory()
''')


def _tracked(*paths):
    out = subprocess.run(["git", "-C", ROOT, "ls-files", "-s", "--", *paths],
                         capture_output=True, text=True, check=True).stdout
    # mode 120000: a symbolic link (natsbroker/plugins, natsbroker/spark), not a file
    return [line.split("\t", 1)[1] for line in out.splitlines() if not line.startswith("120000")]


def _checkout_copy(dest):
    """The checkout's files (tracked and untracked, not ignored) as they are on
    disk, copied to ``dest``: the build writes its egg-info, build/ and release
    tree there, not into the checkout that other test processes (make test's
    parallel workers) read and write meanwhile."""
    out = subprocess.run(["git", "-C", ROOT, "ls-files", "-z", "--cached", "--others",
                          "--exclude-standard"], capture_output=True, check=True).stdout
    for rel in sorted(set(os.fsdecode(p) for p in out.split(b"\0") if p)):
        src, dst = os.path.join(ROOT, rel), os.path.join(dest, rel)
        if not os.path.lexists(src):
            continue  # deleted in the work tree, not yet in the index
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if os.path.islink(src):
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)
    return dest


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    src = _checkout_copy(tmp_path_factory.mktemp("checkout"))
    r = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(src)],
                       capture_output=True, text=True, timeout=900)  # compiles the hot modules
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "Deprecat" not in r.stderr + r.stdout
    wheel, = glob.glob(str(out / "natsbroker-*.whl"))
    return wheel


@pytest.fixture(scope="module")
def fresh(built, tmp_path_factory):
    """A venv holding only the wheel (its dependencies seen from this venv)."""
    env_dir = tmp_path_factory.mktemp("venv")
    venv.create(env_dir, with_pip=False)
    py = str(env_dir / "bin" / "python")
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(site, "deps-from-test-venv.pth"), "w") as f:
        f.write(sysconfig.get_path("purelib") + "\n")
    r = subprocess.run([sys.executable, "-m", "pip", "--python", py, "install", "--no-deps",
                        "--no-index", "--quiet", built], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr.lower(), r.stderr
    return {"dir": env_dir, "bin": env_dir / "bin", "site": site, "python": py}


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(extra)
    return env



def _stop(proc):
    proc.send_signal(signal.SIGTERM)
    log = proc.communicate(timeout=20)[0].decode()
    assert "Server Exiting" in log, log
    return proc.returncode, log


def test_wheel_holds_every_package_file_and_the_man_pages(built):
    names = set(zipfile.ZipFile(built).namelist())
    expected = {"twisted/plugins/natsbroker_plugin.py"}
    for path in _tracked(*PACKAGE_DIRS):
        if path.endswith(".md"):
            continue
        top, rest = path.split("/", 1)
        expected.add(PACKAGE_DIRS[top] + "/" + rest)
    for page in _tracked("man"):
        name = os.path.basename(page)
        expected.add("%s/data/share/man/man%s/%s" % (DATA, name.rsplit(".", 1)[1], name))
    assert expected - names == set()
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {"natsbroker", "twisted", DATA, DIST_INFO}
    assert not [n for n in names if n.endswith("dropin.cache") or "__pycache__" in n]
    entry_points = zipfile.ZipFile(built).read(DIST_INFO + "/entry_points.txt").decode()
    assert "natsbroker-ingest = natsbroker.spark.ingest:main" in entry_points


def test_installed_layout(fresh):
    site = fresh["site"]
    assert not os.path.exists(os.path.join(site, "plugins"))
    assert not os.path.exists(os.path.join(site, "spark"))
    assert os.path.isfile(os.path.join(site, "natsbroker", "jetstream", "plugin.py"))
    assert os.path.isfile(os.path.join(site, "natsbroker", "plugins", "jetstream_plugin.py"))
    assert os.path.isfile(os.path.join(site, "twisted", "plugins", "natsbroker_plugin.py"))
    for page in ("man1/natsbroker-admin.1", "man5/natsbroker.conf.5", "man8/natsbroker.8"):
        assert os.path.isfile(os.path.join(fresh["dir"], "share", "man", page)), page
    for script in ("natsbroker", "natsbroker-admin", "natsbroker-ingest"):
        assert os.access(os.path.join(fresh["bin"], script), os.X_OK), script
    code = ("import os, natsbroker, natsbroker.jetstream, natsbroker.spark.ingest\n"
            "print(natsbroker.__file__); print(natsbroker.jetstream.__file__)\n"
            "print(natsbroker.spark.ingest.__file__)\n"
            "from natsbroker.spark import session\n"
            "print(all(map(os.path.isfile, (session.LOG4J_QUIET, session.LOG4J_VERBOSE))))\n"
            "for bare in ('plugins', 'spark'):\n"
            "    try:\n"
            "        __import__(bare)\n"
            "    except ModuleNotFoundError:\n"
            "        print('no', bare)\n")
    r = subprocess.run([fresh["python"], "-c", code], capture_output=True, text=True,
                       env=_env(), cwd=str(fresh["dir"]), timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert [line.startswith(site + os.sep) for line in lines[:3]] == [True] * 3, lines
    assert lines[3:] == ["True", "no plugins", "no spark"]


def test_natsbroker_runs_builtin_and_dropin_plugins(fresh, tmp_path):
    dropins = tmp_path / "thirdparty" / "natsbroker" / "plugins"
    dropins.mkdir(parents=True)
    (dropins / "wheel_echo.py").write_text(DROPIN)
    proc = subprocess.Popen(
        [str(fresh["bin"] / "natsbroker"), "-a", "127.0.0.1", "-p", "-1", "-js",
         "--store_dir", str(tmp_path / "js"), "--ports_file_dir", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=str(tmp_path),
        env=_env(PYTHONPATH=str(tmp_path / "thirdparty")))
    try:
        port = int(wait_ports_file(str(tmp_path), proc)["nats"][0].rsplit(":", 1)[1])
        out, closed = exchange(port, b'CONNECT {"verbose":false,"headers":true}\r\n'
                                     b'SUB r 1\r\nPUB echo.x r 2\r\nhi\r\nPING\r\n')
        assert out == b"MSG r 1 7\r\necho:hi\r\nPONG\r\n" and not closed
        # JetStream (a built-in plugin) answers its API.
        out, _ = exchange(port, b'CONNECT {"verbose":false}\r\nSUB r 1\r\nPUB $JS.API.INFO r 0\r\n\r\n',
                          marker=b"}\r\n")
        assert b'"type":"io.nats.jetstream.api.v1.account_info_response"' in out, out
    finally:
        status, log = _stop(proc)
    assert status == 0, log
    assert "Warning:" not in log and "PEP 302" not in log, log


def test_twistd_natsbroker(fresh, tmp_path):
    # twistd is Twisted's script (Twisted comes from this venv, not installed there):
    # what it runs, with the fresh venv's interpreter.
    twistd = [fresh["python"], "-c", "import sys; from twisted.scripts.twistd import run; sys.exit(run())"]
    proc = subprocess.Popen(
        twistd + ["-n", "--pidfile=", "natsbroker", "--port", "0",
         "--listen", "tcp:0:interface=127.0.0.1", "--ports_file_dir", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=str(tmp_path), env=_env())
    try:
        port = int(wait_ports_file(str(tmp_path), proc)["nats"][0].rsplit(":", 1)[1])
        out, closed = exchange(port, b'CONNECT {"verbose":false}\r\nSUB a 1\r\nPUB a 2\r\nhi\r\nPING\r\n')
        assert out == b"MSG a 1 2\r\nhi\r\nPONG\r\n" and not closed
    finally:
        # twistd ends by re-raising the SIGTERM it handled: no exit status to check
        _, log = _stop(proc)
    assert "Warning:" not in log, log


def test_natsbroker_ingest(fresh, tmp_path):
    r = subprocess.run([str(fresh["bin"] / "natsbroker-ingest"), "--help"], capture_output=True,
                       text=True, env=_env(), cwd=str(tmp_path), timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: natsbroker-ingest ")
    # main() past the arguments, before Spark (a real run takes minutes here: the
    # Spark tests run it from the checkout, and the wheel's log4j2 files are checked above).
    r = subprocess.run([str(fresh["bin"] / "natsbroker-ingest"), "--feed", str(tmp_path / "nope"),
                        "--out", str(tmp_path / "out"), "--once"],
                       capture_output=True, text=True, env=_env(), cwd=str(tmp_path), timeout=60)
    assert r.returncode == 2
    assert r.stderr == "natsbroker-ingest: error: feed directory %s does not exist\n" % (tmp_path / "nope")
