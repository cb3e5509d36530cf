"""The compiled build (setup.py, natsbroker/_build.py): the hot modules compiled
by Cython from their own source, NATSBROKER_PURE=1 for the interpreted build,
stale extensions refused, /varz and the start-up log saying which runs, and
plugins seeing every message either way.

`make test` sets NATSBROKER_REQUIRE_COMPILED=1: there a missing compiled build
fails instead of skipping.
"""

import ast
import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from importlib.machinery import EXTENSION_SUFFIXES

import nats
import pytest

from natsbroker import _build
from natsbroker.monitoring.endpoints import VARZ_OWN
from tests.support.http import get_json
from tests.support.servers import ROOT, ServerProcess


def compiled_paths():
    """setup.py's COMPILED: the list of source paths it compiles."""
    with open(os.path.join(ROOT, "setup.py")) as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [t.id for t in node.targets] == ["COMPILED"]:
            return ast.literal_eval(node.value)
    raise AssertionError("setup.py has no COMPILED list")


def module_name(path):
    return os.path.splitext(path)[0].replace("/", ".")


def extension_of(path):
    """The built extension beside ``path`` (with its source hash), or None."""
    stem = os.path.join(ROOT, os.path.splitext(path)[0])
    for suffix in EXTENSION_SUFFIXES:
        if os.path.isfile(stem + suffix) and os.path.isfile(stem + suffix + ".sha256"):
            return stem + suffix
    return None


PARSER = "natsbroker/protocol/parser.py"


def need_build():
    """Skip without a compiled build, unless `make test` requires one."""
    missing = [p for p in compiled_paths() if extension_of(p) is None]
    if missing:
        if os.environ.get("NATSBROKER_REQUIRE_COMPILED"):
            pytest.fail("no compiled build of %s: run `python setup.py build_ext --inplace` "
                        "(needs Cython and a C compiler)" % ", ".join(missing))
        pytest.skip("no compiled build (no C compiler or Cython when installed)")


def env(pure):
    return {"NATSBROKER_PURE": "1" if pure else "0"}


def probe(pure, root=ROOT):
    """In a fresh interpreter: the parser's __file__ and _build.info() after
    importing every compiled module."""
    code = textwrap.dedent("""
        import importlib, json, sys
        mods = [importlib.import_module(m) for m in sys.argv[1:]]
        from natsbroker import _build
        print(json.dumps([[m.__file__ for m in mods], _build.info()]))
    """)
    out = subprocess.run([sys.executable, "-c", code] + [module_name(p) for p in compiled_paths()],
                         capture_output=True, text=True, timeout=120, cwd=root,
                         env=dict(os.environ, PYTHONPATH=root, **env(pure)))
    assert out.returncode == 0, out.stderr
    files, info = json.loads(out.stdout)
    return dict(zip(compiled_paths(), files)), info


def varz(server):
    return get_json(server, "/varz")


def build_line(log):
    lines = [line for line in log.splitlines() if "] Build: " in line]
    assert len(lines) == 1, log
    return lines[0].split("] Build: ", 1)[1]


# -- this process -------------------------------------------------------------------------------


def test_this_run_is_the_build_it_says():
    """The suite itself runs against the compiled build (or, with
    NATSBROKER_PURE=1, against the sources), judged by each module's __file__."""
    import importlib
    mods = {p: importlib.import_module(module_name(p)) for p in compiled_paths()}
    info = _build.info()
    if _build.pure_requested():
        assert all(m.__file__.endswith(".py") for m in mods.values())
        assert info["compiled"] == [] and info["kind"] == "interpreted"
        return
    need_build()
    for path, m in mods.items():
        assert m.__file__ == extension_of(path), (path, m.__file__)
    assert sorted(info["compiled"]) == sorted(module_name(p) for p in compiled_paths())
    assert info == {"kind": "compiled", "compiled": info["compiled"], "interpreted": {}}


def test_pure_env_loads_the_sources():
    need_build()
    files, info = probe(pure=True)
    for path, f in files.items():
        assert f == os.path.join(ROOT, path)
    assert info["kind"] == "interpreted" and info["compiled"] == []
    assert info["interpreted"] == {module_name(p): "NATSBROKER_PURE=1" for p in compiled_paths()}


def test_without_pure_env_loads_the_extensions():
    need_build()
    files, info = probe(pure=False)
    for path, f in files.items():
        assert f == extension_of(path)
    assert info["kind"] == "compiled" and info["interpreted"] == {}


def test_source_hash_matches_setup_py():
    """What the extension's .sha256 records is what _build recomputes from the source."""
    need_build()
    for path in compiled_paths():
        with open(extension_of(path) + ".sha256") as f:
            recorded, name = f.read().split()
        assert name == os.path.basename(path)
        assert recorded == _build.source_hash(os.path.join(ROOT, path))
        with open(os.path.join(ROOT, path), "rb") as f:
            source = f.read()
        pxd = os.path.join(ROOT, os.path.splitext(path)[0] + ".pxd")
        if os.path.exists(pxd):
            with open(pxd, "rb") as f:
                source += f.read()
        assert recorded == hashlib.sha256(source).hexdigest()


# -- the server: /varz and the start-up log ------------------------------------------------------


@pytest.mark.parametrize("pure", [False, True], ids=["compiled", "pure"])
def test_varz_and_startup_log_name_the_build(pure, tmp_path):
    need_build()
    names = sorted(module_name(p) for p in compiled_paths())
    # With JetStream and the change feed on, every compiled module is in use
    # (the store, JetStream and change-feed modules are imported only then).
    conf = tmp_path / "feed.conf"
    conf.write_text("changefeed { dir: %s }\n" % json.dumps(str(tmp_path / "feed")))
    with ServerProcess("natsbroker", ["-m", "-1", "-js", "-sd", str(tmp_path), "-c", str(conf)],
                       env=env(pure)) as server:
        field = varz(server)[list(VARZ_OWN)[0]]
        line = build_line(server.log())
    if pure:
        assert field == {"kind": "interpreted", "compiled": [],
                         "interpreted": {n: "NATSBROKER_PURE=1" for n in names}}
        assert line == "interpreted (NATSBROKER_PURE=1)"
    else:
        assert field["kind"] == "compiled" and field["interpreted"] == {}
        assert sorted(field["compiled"]) == names
        assert line == "compiled (%s)" % ", ".join(field["compiled"])


def test_stale_extension_is_refused(tmp_path):
    """A source edited after the build runs as source, with a warning, and /varz says so."""
    need_build()
    for top in {p.split("/")[0] for p in compiled_paths()}:
        shutil.copytree(os.path.join(ROOT, top), tmp_path / top,
                        ignore=shutil.ignore_patterns("__pycache__", "dropin.cache"))
    with open(tmp_path / PARSER, "a") as f:
        f.write("\n# edited after the build\n")
    files, info = probe(pure=False, root=str(tmp_path))
    assert files[PARSER] == str(tmp_path / PARSER)
    assert info["kind"] == "mixed"
    assert info["interpreted"] == {module_name(PARSER): "stale"}
    others = [p for p in compiled_paths() if p != PARSER]
    assert sorted(info["compiled"]) == sorted(module_name(p) for p in others)
    for path in others:
        assert files[path].endswith(os.path.basename(extension_of(path)))
    with ServerProcess("natsbroker", ["-m", "-1"],
                       env=dict(env(False), PYTHONPATH=str(tmp_path))) as server:
        field = varz(server)[list(VARZ_OWN)[0]]
        log = server.log()
    assert field["interpreted"] == {module_name(PARSER): "stale"}
    assert build_line(log).startswith("mixed (compiled: ")
    assert "[WRN] Compiled %s is older than its source" % module_name(PARSER) in log


# -- the plugin seam -----------------------------------------------------------------------------

# A third-party drop-in that sees every message through the public plugin API
# (IBroker.subscribe on ">") and answers "observer.digest" with what it saw.
OBSERVER = textwrap.dedent('''
    import hashlib

    from twisted.plugin import IPlugin
    from zope.interface import implementer

    from natsbroker.interfaces import IBrokerPlugin, IBrokerPluginFactory, IClientObserver


    @implementer(IBrokerPlugin, IClientObserver)
    class Observer:
        name = "observer"

        def __init__(self, config):
            self.seen = []
            self.clients = 0

        def start(self, broker):
            self.broker = broker
            self.sub = broker.subscribe(">", self.on_msg)

        def stop(self):
            self.broker.unsubscribe(self.sub)

        def on_msg(self, sub, subject, reply, hdr_len, raw):
            if subject == b"observer.digest":
                digest = hashlib.sha256(b"".join(self.seen)).hexdigest()
                self.broker.publish(reply, b"%d %d %s" % (len(self.seen), self.clients,
                                                          digest.encode()))
            elif subject.startswith(b"load."):
                self.seen.append(b"%s|%d|%s;" % (subject, hdr_len, bytes(raw)))

        def client_connected(self, client):
            self.clients += 1

        def client_closed(self, client):
            pass


    @implementer(IPlugin, IBrokerPluginFactory)
    class ObserverFactory:
        name = "observer"
        order = 50

        def make_plugin(self, config):
            return Observer(config)


    observer = ObserverFactory()
''')


def test_dropin_observer_sees_every_message(tmp_path):
    """With the compiled core (asserted), a third-party plugin still sees every
    message: plain, with headers, with and without subscribers, queue groups."""
    need_build()
    # A drop-in directory: natsbroker/plugins (no __init__.py) on PYTHONPATH.
    (tmp_path / "natsbroker" / "plugins").mkdir(parents=True)
    (tmp_path / "natsbroker" / "plugins" / "observer_dropin.py").write_text(OBSERVER)
    n = 3000

    async def main(url):
        pub, sub = await nats.connect(url), await nats.connect(url)
        got = []

        async def handler(msg):
            got.append(msg.subject)

        await sub.subscribe("load.a.*", cb=handler)
        await sub.subscribe("load.>", queue="q", cb=handler)
        await sub.flush()
        expected = []
        for i in range(n):
            subject = ("load.a.%d" % (i % 7), "load.b", "load.none.%d" % i)[i % 3]
            body = b"m%d" % i
            if i % 5 == 0:
                await pub.publish(subject, body, headers={"K": str(i)})
                hdr = ("NATS/1.0\r\nK: %d\r\n\r\n" % i).encode()
                expected.append(b"%s|%d|%s;" % (subject.encode(), len(hdr), hdr + body))
            else:
                await pub.publish(subject, body)
                expected.append(b"%s|0|%s;" % (subject.encode(), body))
        await pub.flush()
        reply = await pub.request("observer.digest", b"", timeout=20)
        for _ in range(200):
            if len(got) >= n + len(range(0, n, 3)):
                break
            await asyncio.sleep(0.05)
        await pub.close()
        await sub.close()
        return reply.data, expected, got

    path = str(tmp_path) + os.pathsep + ROOT
    with ServerProcess("natsbroker", ["-m", "-1"], env=dict(env(False), PYTHONPATH=path)) as server:
        assert "natsbroker.protocol.parser" in varz(server)[list(VARZ_OWN)[0]]["compiled"]
        data, expected, got = asyncio.run(main(server.url))
    count, clients, digest = data.split()
    assert int(count) == n
    assert int(clients) == 2
    assert digest.decode() == hashlib.sha256(b"".join(expected)).hexdigest()
    # Every message reached the queue group; load.a.* also reached the plain subscriber.
    assert len(got) == n + len(range(0, n, 3))


# -- the property tests, interpreted too ------------------------------------------------------


@pytest.mark.timeout(900)
def test_property_tests_pass_interpreted():
    """The parser and subject-index hypothesis tests, run again with
    NATSBROKER_PURE=1 (the suite itself runs them against the compiled build)."""
    files = []
    for name in sorted(os.listdir(os.path.join(ROOT, "tests"))):
        if name.startswith(("test_parser", "test_subject")) and name.endswith(".py"):
            with open(os.path.join(ROOT, "tests", name)) as f:
                if "hypothesis" in f.read():
                    files.append("tests/" + name)
    assert "tests/test_parser.py" in files and "tests/test_subjects.py" in files
    code = textwrap.dedent("""
        import sys
        import pytest
        import natsbroker.protocol.parser, natsbroker.subjects.sublist
        for m in (natsbroker.protocol.parser, natsbroker.subjects.sublist):
            assert m.__file__.endswith(".py"), m.__file__
        sys.exit(pytest.main(["-q", "-p", "no:cacheprovider"] + sys.argv[1:]))
    """)
    out = subprocess.run([sys.executable, "-c", code] + files, capture_output=True, text=True,
                         cwd=ROOT, timeout=880,
                         env=dict(os.environ, PYTHONPATH=ROOT, NATSBROKER_PURE="1"))
    assert out.returncode == 0, out.stdout[-5000:] + out.stderr[-5000:]
    assert " passed" in out.stdout.splitlines()[-1], out.stdout[-2000:]
