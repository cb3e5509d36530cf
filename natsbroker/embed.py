"""Run natsbroker from other programs and their tests: start a broker (or a
meshed cluster) on ephemeral ports, get its URL, stop it.

    from natsbroker import embed

    with embed.start() as broker:          # JetStream on, store in a temp dir
        ...connect a client to broker.url...

    async with embed.BrokerProcess(jetstream=False) as broker:
        ...

Each broker is a child process (``python -m natsbroker``), never a reactor
in a thread of the caller: Twisted's reactor runs once per process and owns
its signals, and a child cannot leak state into the caller's event loop. The
child listens on ports the kernel picks (``-p -1 -m -1``) and names them in
its ports file (``--ports_file_dir``), which is what :meth:`BrokerProcess.start`
waits for (starting, waiting and stopping are :mod:`natsbroker.launch`'s,
shared with the test suite, the benchmark and the soak). Nothing here imports
Twisted, so importing it is cheap (the pytest plugin,
:mod:`natsbroker.pytest_plugin`, loads it in every pytest run).
"""

import asyncio
import json
import os
import shutil
import tempfile
import time
import urllib.request
import weakref

from natsbroker import launch

__all__ = ["BrokerProcess", "BrokerStartError", "Cluster", "start", "start_cluster"]

_POLL = 0.02  # seconds between looks at the ports file


class BrokerStartError(RuntimeError):
    """The broker exited, or did not listen, before ``timeout``; the message
    ends with the broker's log."""


def _reap(proc, log, workdir, remove):
    """Stop a child and tidy up after it (also run by the finalizer of a
    :class:`BrokerProcess` nobody stopped)."""
    if proc is not None:
        launch.stop(proc)
    if log is not None and not log.closed:
        log.close()
    if remove and workdir:
        shutil.rmtree(workdir, ignore_errors=True)


class BrokerProcess:
    """One natsbroker process on ephemeral ports.

    ``config_text``: a config file's text (nats-server syntax), written to
    the work directory and passed with ``-c``; ``args``: more command-line
    flags (nats-server's). Flags override the config file, so ``port=-1``
    and ``http_port=-1`` (the defaults) win over ports in ``config_text``:
    pass ``None`` to keep the file's. ``jetstream=True`` adds ``-js`` with
    the store in ``store_dir`` (default: ``<workdir>/store``).

    ``workdir`` holds the config, the ports file, the log and the default
    store; without one a temporary directory is made and removed by
    :meth:`stop` (unless ``keep=True``). A given ``workdir`` is never removed.
    """

    def __init__(self, config_text=None, *, jetstream=True, args=(), host="127.0.0.1",
                 port=-1, http_port=-1, store_dir=None, workdir=None, keep=False, env=None,
                 timeout=30.0):
        self.config_text = config_text
        self.jetstream = jetstream
        self.args = list(args)
        self.host = host
        self.port = port if port is not None and port > 0 else None
        self._port_flag = port
        self._http_flag = http_port
        self.http_port = None
        self.cluster_port = None
        self.ws_port = None
        self.ports = {}  # the ports file: {"nats": [...], "monitoring": [...], ...}
        self.env = env
        self.timeout = timeout
        self.keep = keep
        self._own_workdir = workdir is None
        self.workdir = None if workdir is None else os.fspath(workdir)
        self.store_dir = None if store_dir is None else os.fspath(store_dir)
        self.proc = None
        self._log = None
        self._finalizer = None

    # -- what a client needs -------------------------------------------------------

    @property
    def url(self):
        """The client URL, ``nats://127.0.0.1:<port>``."""
        return self.ports["nats"][0] if self.ports.get("nats") else None

    @property
    def http_url(self):
        """The monitoring URL (``/varz``, ``/jsz``...), or None without one."""
        mon = self.ports.get("monitoring")
        return mon[0] if mon else None

    @property
    def cluster_url(self):
        """The route URL other nodes give to ``--routes``, or None."""
        cl = self.ports.get("cluster")
        return cl[0] if cl else None

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    @property
    def running(self):
        return self.proc is not None and self.proc.poll() is None

    @property
    def log_path(self):
        return os.path.join(self.workdir, "natsbroker.log") if self.workdir else None

    def log(self):
        """Everything the broker wrote to stdout and stderr so far."""
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")
        except (OSError, TypeError):
            return ""

    # -- life cycle ----------------------------------------------------------------

    def command(self):
        """The child's argv (the work directory must exist)."""
        config_path = None
        if self.config_text is not None:
            config_path = os.path.join(self.workdir, "natsbroker.conf")
            with open(config_path, "w") as f:
                f.write(self.config_text)
        if self.jetstream and self.store_dir is None and not launch.has_flag(self.args,
                                                                             launch.STORE_FLAGS):
            self.store_dir = os.path.join(self.workdir, "store")
        return launch.server_argv(launch.broker_command(), self.args, ports_dir=self.workdir,
                                  config_path=config_path, host=self.host, port=self._port_flag,
                                  http_port=self._http_flag, jetstream=self.jetstream,
                                  store_dir=self.store_dir if self.jetstream else None)

    def start(self):
        """Start the broker and return once it accepts clients (self).
        Starting a running broker does nothing."""
        if self.running:
            return self
        if self.workdir is None:
            self.workdir = tempfile.mkdtemp(prefix="natsbroker-")
        else:
            os.makedirs(self.workdir, exist_ok=True)
        launch.clear_ports(self.workdir)
        env = launch.child_env(self.env)
        cmd = self.command()
        self._log = open(self.log_path, "ab")
        self.proc = launch.spawn(cmd, log=self._log, cwd=self.workdir, env=env)
        self._finalizer = weakref.finalize(self, _reap, self.proc, self._log, self.workdir,
                                           self._own_workdir and not self.keep)
        try:
            self._take_ports(launch.await_ready(self.proc, self.timeout, ports_dir=self.workdir,
                                                poll=_POLL))
        except launch.LaunchError as e:
            self.stop()
            if e.returncode is not None:
                raise BrokerStartError("natsbroker exited with status %s:\n%s"
                                       % (e.returncode, self.log())) from None
            raise BrokerStartError("natsbroker did not start in %gs:\n%s"
                                   % (self.timeout, self.log())) from None
        except BaseException:
            self.stop()
            raise
        return self

    def _take_ports(self, info):
        self.ports = info
        self.port = launch.port_of(info["nats"][0])
        self.http_port = launch.port_of(self.http_url) if self.http_url else None
        self.cluster_port = launch.port_of(self.cluster_url) if self.cluster_url else None
        ws = info.get("websocket")
        self.ws_port = launch.port_of(ws[0]) if ws else None

    def stop(self, timeout=10.0):
        """SIGTERM (a clean shutdown: JetStream's store closed), SIGKILL after
        ``timeout`` seconds; remove a temporary work directory unless kept.
        Returns the exit status (None if it never started)."""
        proc = self.proc
        if proc is not None:
            launch.stop(proc, timeout=timeout)
        if self._finalizer is not None:
            self._finalizer()  # closes the log, removes the temp dir; runs once
            self._finalizer = None
        return proc.returncode if proc is not None else None

    async def start_async(self):
        """:meth:`start` without blocking the event loop."""
        return await asyncio.to_thread(self.start)

    async def stop_async(self, timeout=10.0):
        """:meth:`stop` without blocking the event loop."""
        return await asyncio.to_thread(self.stop, timeout)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    async def __aenter__(self):
        return await self.start_async()

    async def __aexit__(self, *exc):
        await self.stop_async()

    def __repr__(self):
        return "<BrokerProcess %s pid=%s>" % (self.url or "(not started)", self.pid)


def start(config_text=None, **options):
    """Start a broker (:class:`BrokerProcess` options) and return it running;
    use it as a context manager (``with``/``async with``) or call ``stop()``."""
    return BrokerProcess(config_text, **options).start()


class Cluster:
    """``size`` brokers routed to each other in one cluster (a full mesh:
    each node is given the first node's route URL and learns the rest from
    it, as nats-server's gossip does). ``options`` go to every
    :class:`BrokerProcess` (JetStream is off by default: natsbroker serves
    JetStream on single servers only). With a ``workdir``, node ``i`` works
    in ``<workdir>/n<i>`` (kept); otherwise each in a temporary directory."""

    def __init__(self, size=3, *, name="natsbroker", config_text=None, args=(), jetstream=False,
                 workdir=None, timeout=60.0, **options):
        if size < 1:
            raise ValueError("a cluster needs at least one node")
        self.size = size
        self.name = name
        self.config_text = config_text
        self.args = list(args)
        self.jetstream = jetstream
        self.workdir = None if workdir is None else os.fspath(workdir)
        self.timeout = timeout
        self.options = options
        self.servers = []

    def _node(self, i):
        routes = ["--routes", self.servers[0].cluster_url] if self.servers else []
        args = ["--cluster", "nats://127.0.0.1:-1", "--cluster_name", self.name,
                "-n", "%s-%d" % (self.name, i), *routes, *self.args]
        workdir = os.path.join(self.workdir, "n%d" % i) if self.workdir else None
        return BrokerProcess(self.config_text, jetstream=self.jetstream, args=args,
                             workdir=workdir, timeout=self.timeout, **self.options)

    @property
    def urls(self):
        """The client URLs, one per node."""
        return [s.url for s in self.servers]

    def __getitem__(self, i):
        return self.servers[i]

    def __len__(self):
        return len(self.servers)

    def __iter__(self):
        return iter(self.servers)

    def start(self):
        if self.servers:
            return self
        try:
            for i in range(self.size):
                self.servers.append(self._node(i).start())
            self._await_mesh()
        except BaseException:
            self.stop()
            raise
        return self

    def _get(self, server, path):
        with urllib.request.urlopen(server.http_url + path, timeout=5) as r:
            return json.load(r)

    def _await_mesh(self):
        """Until every node has a route to every other (``/routez`` by server id)."""
        if self.size == 1:
            return
        ids = [self._get(s, "/varz")["server_id"] for s in self.servers]
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            try:
                peers = [{r.get("remote_id") for r in self._get(s, "/routez").get("routes") or ()}
                         for s in self.servers]
            except OSError:
                peers = None
            if peers and all(p >= set(ids) - {ids[i]} for i, p in enumerate(peers)):
                return
            time.sleep(0.05)
        raise BrokerStartError("the cluster did not mesh in %gs:\n%s" % (
            self.timeout, "\n".join("-- %s --\n%s" % (s.url, s.log()[-3000:]) for s in self.servers)))

    def stop(self):
        for s in reversed(self.servers):
            s.stop()
        self.servers = []

    async def start_async(self):
        return await asyncio.to_thread(self.start)

    async def stop_async(self):
        await asyncio.to_thread(self.stop)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    async def __aenter__(self):
        return await self.start_async()

    async def __aexit__(self, *exc):
        await self.stop_async()


def start_cluster(size=3, **options):
    """Start a meshed :class:`Cluster` of ``size`` nodes and return it running."""
    return Cluster(size, **options).start()
