"""natsbroker's Raft as a member of nats-server's own JetStream meta group.

Two nats-server nodes run a JetStream cluster; a natsbroker node routed to
them runs one NRG node on ``_meta_`` in the system account
(tests/support/raftprobe.py: natsbroker.cluster.raft's node, transport and
LevelDB storage, nothing above them, never campaigning). The nats-server
meta leader must find it, catch it up, add it to the group, and then need
it: with one nats-server node stopped, the meta group of three keeps its
quorum only through natsbroker's vote and acknowledgements.
"""

import asyncio
import json

import nats
import pytest

from natsbroker.cluster.raft.wire import peer_id
from tests.support.http import get_json
from tests.support.servers import ServerProcess, free_port
from tests.support.wait import eventually

# Three-server clusters run one at a time (one xdist worker for the group):
# several at once on a 2-core machine starve their elections.
pytestmark = [pytest.mark.long, pytest.mark.xdist_group("clusters")]

NS = ("ns-a", "ns-b")
NB = "nb-c"

ACCOUNTS = """
accounts {
  SYS { users [ {user: sys, password: pw} ] }
  APP { jetstream: enabled, users [ {user: app, password: pw} ] }
}
system_account: SYS
"""


def _routes(ports, skip):
    return json.dumps(["nats://127.0.0.1:%d" % p for n, p in ports.items() if n != skip])


def _ns_conf(tmp_path, name, ports):
    path = tmp_path / ("%s.conf" % name)
    path.write_text("server_name: %s\nlisten: 127.0.0.1:-1\nhttp: 127.0.0.1:-1\n"
                    "jetstream { store_dir: %s }\n"
                    "cluster { name: nrg, listen: 127.0.0.1:%d, routes: %s }\n%s"
                    % (name, json.dumps(str(tmp_path / name)), ports[name], _routes(ports, name), ACCOUNTS))
    return ["-c", str(path)]


def _nb_conf(tmp_path, ports):
    path = tmp_path / "nb.conf"
    path.write_text('server_name: %s\nlisten: 127.0.0.1:-1\nhttp: 127.0.0.1:-1\nstore_dir: %s\n'
                    'plugins: ["tests.support.raftprobe:factory"]\n'
                    "raftprobe { group: _meta_, observer: true }\n"
                    "cluster { name: nrg, listen: 127.0.0.1:%d, routes: %s }\n%s"
                    % (NB, json.dumps(str(tmp_path / NB)), ports[NB], _routes(ports, NB), ACCOUNTS))
    return ["-c", str(path)]


def raftz(server):
    return get_json(server.http_port, "/raftprobez")


def meta(server):
    return get_json(server.http_port, "/jsz")["meta_cluster"]


async def _add_stream(url, name):
    nc = await nats.connect(url, user="app", password="pw")
    try:
        js = nc.jetstream(timeout=5)
        for _ in range(100):
            try:
                await js.add_stream(name=name, subjects=[name.lower() + ".>"])
                return True
            except Exception:
                await asyncio.sleep(0.2)
        return False
    finally:
        await nc.close()


def test_natsbroker_joins_nats_server_meta_group_and_holds_its_quorum(tmp_path):
    ports = {n: free_port() for n in NS + (NB,)}
    servers = {}
    try:
        for name in NS:
            servers[name] = ServerProcess("nats-server", _ns_conf(tmp_path, name, ports)).start(60)
        nb = servers[NB] = ServerProcess("natsbroker", _nb_conf(tmp_path, ports)).start(60)
        ids = {peer_id(n): n for n in NS + (NB,)}
        me = peer_id(NB)

        # The nats-server leader finds natsbroker's node, catches it up and
        # adds it: the group grows to three everywhere.
        eventually(lambda: raftz(nb)["leader"] in ids and raftz(nb)["cluster_size"] == 3,
                   timeout=60, what="natsbroker following a nats-server meta leader in a group of 3")
        assert asyncio.run(_add_stream(servers["ns-a"].url, "ONE"))
        eventually(lambda: any("ONE" in d for d in raftz(nb)["normal"]), timeout=20,
                   what="the ONE stream assignment committed on natsbroker")
        state = raftz(nb)
        assert set(state["peers"]) == set(ids) and state["state"] == "follower", state
        # The assignment, decoded and applied as natsbroker's meta layer does:
        # an R1 stream of the APP account on one of the nats-server nodes.
        one = state["streams"]["APP/ONE"]
        assert len(one["peers"]) == 1 and ids[one["peers"][0]] in NS and one["group"].startswith("S-R1F-"), one
        assert state["commit"] == state["pindex"], state

        # Stop the meta leader: the other nats-server node can only win, and
        # the group can only commit, with natsbroker's vote and acks.
        leader = ids[raftz(nb)["leader"]]
        survivor = next(n for n in NS if n != leader)
        term = raftz(nb)["term"]
        servers[leader].stop()
        eventually(lambda: raftz(nb)["leader"] == peer_id(survivor) and raftz(nb)["term"] > term,
                   timeout=60, what="%s elected with natsbroker's vote" % survivor)
        assert asyncio.run(_add_stream(servers[survivor].url, "TWO"))
        eventually(lambda: any("TWO" in d for d in raftz(nb)["normal"]), timeout=20,
                   what="the TWO stream assignment committed on natsbroker")
        assert set(raftz(nb)["streams"]) == {"APP/ONE", "APP/TWO"}
        m = meta(servers[survivor])
        assert m["leader"] == survivor and m.get("cluster_size") == 3, m
        assert me not in ids or raftz(nb)["state"] == "follower"
    finally:
        for s in servers.values():
            s.stop()


NBS = ("nb-1", "nb-2", "nb-3")


def _nb_group_conf(tmp_path, name, ports):
    path = tmp_path / ("%s.conf" % name)
    path.write_text('server_name: %s\nlisten: 127.0.0.1:-1\nhttp: 127.0.0.1:-1\nstore_dir: %s\n'
                    'plugins: ["tests.support.raftprobe:factory"]\n'
                    "raftprobe { group: T, peers: %s }\n"
                    "cluster { name: nbr, listen: 127.0.0.1:%d, routes: %s }\n%s"
                    % (name, json.dumps(str(tmp_path / name)), json.dumps(list(NBS)), ports[name],
                       _routes(ports, name), ACCOUNTS))
    return ["-c", str(path)]


def test_a_natsbroker_only_group_elects_replicates_fails_over_and_catches_up(tmp_path):
    ports = {n: free_port() for n in NBS}
    servers = {}

    def start(name):
        servers[name] = ServerProcess("natsbroker", _nb_group_conf(tmp_path, name, ports)).start(60)

    def leader():
        views = {n: raftz(s) for n, s in servers.items() if s.proc.poll() is None}
        leads = [n for n, v in views.items() if v["state"] == "leader"]
        return leads[0] if len(leads) == 1 else None

    def applied(name, items):
        return raftz(servers[name])["normal"] == items
    try:
        for name in NBS:
            start(name)
        first = eventually(leader, timeout=60, what="a leader among three natsbroker nodes")
        get_json(servers[first].http_port, "/raftprobez?propose=one&propose=two")
        for name in NBS:
            eventually(lambda: applied(name, ["one", "two"]), timeout=10, what="%s applied" % name)
        servers[first].stop()
        second = eventually(lambda: leader() not in (None, first) and leader(), timeout=60,
                            what="a new leader after %s stopped" % first)
        get_json(servers[second].http_port, "/raftprobez?propose=three")
        start(first)  # back on the same store: restores, then catches up
        for name in NBS:
            eventually(lambda: applied(name, ["one", "two", "three"]), timeout=30, what="%s applied" % name)
        assert raftz(servers[first])["leader"] == peer_id(second)
    finally:
        for s in servers.values():
            s.stop()
