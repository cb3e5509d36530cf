"""Fault runs for natsbroker's Raft over real processes (`make chaos`).

Three natsbroker servers run one NRG group (tests/support/raftprobe.py). The
leader is paused (SIGSTOP, by pid) long enough for the others to elect a new
leader and commit without it, then resumed: it must step down on seeing the
higher term, and what it was asked to propose while cut off (it still
believed itself leader when paused) must never be applied anywhere, while
everything the new leader committed reaches it.
"""

import os
import signal

import pytest

from natsbroker.cluster.raft.wire import peer_id
from tests.support.http import get_json, http
from tests.support.servers import ServerProcess, free_port
from tests.support.wait import eventually
from tests.test_raft_interop import NBS, _nb_group_conf, raftz

pytestmark = pytest.mark.chaos


def test_a_paused_leader_is_replaced_and_rejoins_without_its_stale_proposals(tmp_path):
    ports = {n: free_port() for n in NBS}
    servers = {n: ServerProcess("natsbroker", _nb_group_conf(tmp_path, n, ports)).start(60) for n in NBS}

    def leader(exclude=()):
        for n, s in servers.items():
            if n not in exclude and raftz(s)["state"] == "leader":
                return n
        return None
    try:
        old = eventually(leader, timeout=60, what="a leader")
        get_json(servers[old].http_port, "/raftprobez?propose=before")
        for n in NBS:
            eventually(lambda: raftz(servers[n])["normal"] == ["before"], timeout=10)
        os.kill(servers[old].proc.pid, signal.SIGSTOP)
        try:
            new = eventually(lambda: leader(exclude=(old,)), timeout=60, what="a leader while %s is paused" % old)
            get_json(servers[new].http_port, "/raftprobez?propose=during")
            for n in NBS:
                if n != old:
                    eventually(lambda: raftz(servers[n])["normal"] == ["before", "during"], timeout=10)
        finally:
            os.kill(servers[old].proc.pid, signal.SIGCONT)
        # Woken, it may serve one request still believing it leads: that
        # proposal has no quorum and must vanish when it hears the new term.
        http(servers[old].http_port, "/raftprobez?propose=stale")
        eventually(lambda: raftz(servers[old])["leader"] == peer_id(new), timeout=30,
                   what="%s following %s" % (old, new))
        for n in NBS:
            eventually(lambda: raftz(servers[n])["normal"] == ["before", "during"], timeout=20,
                       what="%s converged" % n)
        get_json(servers[new].http_port, "/raftprobez?propose=after")
        for n in NBS:
            eventually(lambda: raftz(servers[n])["normal"] == ["before", "during", "after"], timeout=20)
    finally:
        for s in servers.values():
            s.stop()
