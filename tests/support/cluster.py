"""Clusters for tests: node arguments, config files, start-up and the mesh.

Every node listens for routes on an ephemeral port; the first node started
is the seed every other one routes to, so in a cluster of three the other
two meet only through gossip.
"""

import contextlib
import json
import os
import signal
import uuid

from tests.support.http import get_json
from tests.support.servers import ServerProcess, free_port
from tests.support.wait import eventually


def node_args(name, routes=(), cluster_port=-1, extra=()):
    """Command-line arguments of a node of cluster c1 routing to ``routes`` (ports)."""
    args = ["-m", "-1", "--cluster", "nats://127.0.0.1:%d" % cluster_port,
            "--cluster_name", "c1", "-n", name]
    if routes:
        args += ["--routes", ",".join("nats://127.0.0.1:%d" % p for p in routes)]
    return args + list(extra)


def cluster_conf(tmp, name, routes=(), *blocks):
    """``["-c", path]`` of a config file written in ``tmp`` for node ``name``
    of cluster c1, routing to ``routes`` (URLs, or ports on 127.0.0.1);
    ``blocks`` are added inside ``cluster { }`` (auth, tls, permissions...)."""
    urls = [r if isinstance(r, str) else "nats://127.0.0.1:%d" % r for r in routes]
    inside = "".join("  %s\n" % b.strip() for b in blocks if b and b.strip())
    path = tmp / ("%s-%s.conf" % (name, uuid.uuid4().hex[:8]))
    path.write_text("server_name: %s\nhttp_port: -1\ncluster {\n  name: c1\n"
                    "  listen: 127.0.0.1:-1\n  routes: %s\n%s}\n" % (name, json.dumps(urls), inside))
    return ["-c", str(path)]


def peers(node):
    """The server ids ``node`` has routes to."""
    try:
        return {r["remote_id"] for r in get_json(node, "/routez")["routes"]}
    except OSError:
        return set()


def server_id(node):
    return get_json(node, "/varz")["server_id"]


def wait_mesh(nodes, timeout=60):
    """Every node routed to every other (by server id)."""
    ids = [server_id(n) for n in nodes]

    def meshed():
        return all(peers(n) >= set(ids[:i] + ids[i + 1:]) for i, n in enumerate(nodes))
    try:
        eventually(meshed, timeout=timeout, interval=0.1, ignore=())
    except AssertionError:
        raise AssertionError("no full mesh: %s\n%s" % (
            [sorted(peers(n)) for n in nodes], "\n".join(n.log()[-3000:] for n in nodes))) from None


def start_cluster(kinds, args=None):
    """Nodes of ``kinds``, in order, started and fully meshed. ``args(i,
    seed)`` gives node i's arguments (``seed`` is the first node, None for
    itself); by default :func:`node_args` routing to the seed."""
    def default(i, seed):
        return node_args("n%d" % i, [seed.cluster_port] if seed else ())
    args = args or default
    nodes = []
    try:
        for i, kind in enumerate(kinds):
            nodes.append(ServerProcess(kind, args(i, nodes[0] if nodes else None)).start(60))
        wait_mesh(nodes)
    except BaseException:
        for n in nodes:
            n.stop()
        raise
    return nodes


def start_node(kind, make_args, ports, name, timeout=60, attempts=4):
    """Start node ``name`` of a cluster whose route ports were picked in
    advance (``ports``: name -> port, so that every node can list the
    others): ``make_args(ports)`` gives its arguments. A port another test
    took between being picked and being bound ("address already in use")
    is replaced by a new one in ``ports`` and the node started again; the
    others still list the old port, and learn the new one by gossip."""
    from tests.support.servers import free_port
    for attempt in range(attempts):
        try:
            return ServerProcess(kind, make_args(ports)).start(timeout)
        except RuntimeError as e:
            if "address already in use" not in str(e) or attempt == attempts - 1:
                raise
            ports[name] = free_port()


def meta_formed(http_ports, size=3):
    """The JetStream meta group of the servers on ``http_ports`` is whole:
    every server names the same leader, the group has ``size`` members, and
    the leader has heard from each of them lately (the meta leader places
    nothing on a member it has not heard from, so a replicated stream made
    before this may be refused 10005, as nats-server refuses it)."""
    metas, names = [], []
    for port in http_ports:
        try:
            metas.append(get_json(port, "/jsz").get("meta_cluster") or {})
            names.append(get_json(port, "/varz")["server_name"])
        except (OSError, AssertionError, ValueError):
            return False  # (still starting)
    leaders = {m.get("leader") or "" for m in metas}
    if len(leaders) != 1 or "" in leaders or any(m.get("cluster_size") != size for m in metas):
        return False
    leader = metas[names.index(leaders.pop())] if metas[0].get("leader") in names else None
    return leader is not None and len(leader.get("replicas") or ()) == size - 1 and all(
        r.get("current") for r in leader["replicas"])


def wait_meta_formed(http_ports, size=3, timeout=60):
    eventually(lambda: meta_formed(http_ports, size), timeout=timeout, interval=0.1, ignore=(),
               what="a whole JetStream meta group of %d" % size)


@contextlib.contextmanager
def js_cluster(start, names, formed=True):
    """``(ports, servers)``: a server per name, ``start(ports, name)`` each
    (``ports`` maps names to route ports, chosen here), stopped on the way
    out, whichever servers ``servers`` holds by then (a test restarting one
    puts the new one there). ``formed``: first wait for the whole meta group."""
    ports = {n: free_port() for n in names}
    servers = {}
    try:
        for n in names:
            servers[n] = start(ports, n)
        if formed:
            wait_meta_formed([s.http_port for s in servers.values()], len(names))
        yield ports, servers
    except BaseException:
        # (pytest shows a failing test's output: the servers' last words)
        for name, s in servers.items():
            print("----- %s (%s) -----\n%s" % (name, s.url if s.port else "-",
                                              "\n".join(s.log().splitlines()[-60:])))
        raise
    finally:
        for s in servers.values():
            if s.proc is not None and s.proc.poll() is None:
                try:
                    os.kill(s.proc.pid, signal.SIGCONT)  # (a test may have paused it)
                except OSError:
                    pass
            s.stop()


def run_on_cluster(tmp_path, kind, conf, scenario, names=("js-a", "js-b", "js-c")):
    """A differential step: ``scenario(servers)`` (a coroutine function) run
    on a fresh cluster of ``kind`` ("nats-server" or "natsbroker") whose
    nodes ``conf(dir, name, ports)`` configures, each kind in its own
    directory under ``tmp_path``; returns what the scenario returned."""
    import asyncio
    home = tmp_path / kind
    home.mkdir()

    def start(ports, name):
        return start_node(kind, lambda p: conf(home, name, p), ports, name)
    with js_cluster(start, names) as (_ports, servers):
        return asyncio.run(scenario(servers))
