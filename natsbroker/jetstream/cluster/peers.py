"""What a JetStream server knows about the other servers of its cluster:
nats-server's ``nodeToInfo`` map (server.go ``nodeInfo``), keyed by peer id.

Filled as nats-server fills it (events.go, route.go, server.go):

* our own entry at start-up, refreshed each time we send our statsz
  (:meth:`PeerTable.set_local`);
* a route's INFO, on the first connection to a remote: name, id, domain and
  the ``jetstream`` flag, but **our** version and cluster, no tags and no
  JetStream config or stats (:meth:`PeerTable.update_from_route_info`);
* ``$SYS.SERVER.<id>.STATSZ``: the whole entry is replaced (name, version,
  cluster, domain, tags, JetStream config and stats, capability flags) and
  marked online (:meth:`PeerTable.update_from_statsz`);
* ``$SYS.SERVER.<id>.SHUTDOWN`` and ``.LAMEDUCK``: offline
  (:meth:`PeerTable.server_shutdown`); a server silent for longer than the
  orphan limit: offline (:meth:`PeerTable.mark_offline`).

Entries are never removed: a server taken out of the meta group
(``$JS.API.SERVER.REMOVE``) leaves the meta peer set, not this table.
Placement (:mod:`.placement`) reads the table; a peer with no JetStream
config or stats yet ("never heard from") is not placeable.
"""

import json

import attrs

from natsbroker.cluster.raft.wire import peer_id

__all__ = [
    "JETSTREAM_ENABLED", "BINARY_STREAM_SNAPSHOT", "ACCOUNT_NRG",
    "JetStreamConfig", "JetStreamApiStats", "JetStreamStats", "NodeInfo", "PeerTable",
]

# ServerInfo.flags (events.go ServerCapability).
JETSTREAM_ENABLED = 1 << 0
BINARY_STREAM_SNAPSHOT = 1 << 1
ACCOUNT_NRG = 1 << 2


def _int(d, key):
    v = d.get(key)
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0


def _str(d, key):
    v = d.get(key)
    return v if isinstance(v, str) else ""


def _bool(d, key):
    return d.get(key) is True


def _obj(d, key):
    v = d.get(key)
    return v if isinstance(v, dict) else None


@attrs.frozen
class JetStreamConfig:
    """jetstream.go JetStreamConfig, as statsz carries it (``store_dir`` is
    blanked by the sender)."""
    max_memory: int = 0
    max_storage: int = 0
    store_dir: str = ""
    sync_interval: int = 0  # nanoseconds (a Go time.Duration)
    sync_always: bool = False
    domain: str = ""
    compress_ok: bool = False
    unique_tag: str = ""
    strict: bool = False

    @classmethod
    def from_json(cls, d):
        return cls(max_memory=_int(d, "max_memory"), max_storage=_int(d, "max_storage"),
                   store_dir=_str(d, "store_dir"), sync_interval=_int(d, "sync_interval"),
                   sync_always=_bool(d, "sync_always"), domain=_str(d, "domain"),
                   compress_ok=_bool(d, "compress_ok"), unique_tag=_str(d, "unique_tag"),
                   strict=_bool(d, "strict"))


@attrs.frozen
class JetStreamApiStats:
    level: int = 0
    total: int = 0
    errors: int = 0
    inflight: int = 0

    @classmethod
    def from_json(cls, d):
        return cls(level=_int(d, "level"), total=_int(d, "total"),
                   errors=_int(d, "errors"), inflight=_int(d, "inflight"))


@attrs.frozen
class JetStreamStats:
    """jetstream.go JetStreamStats. ``ha_assets`` counts the meta group too."""
    memory: int = 0
    storage: int = 0
    reserved_memory: int = 0
    reserved_storage: int = 0
    accounts: int = 0
    ha_assets: int = 0
    api: JetStreamApiStats = JetStreamApiStats()

    @classmethod
    def from_json(cls, d):
        return cls(memory=_int(d, "memory"), storage=_int(d, "storage"),
                   reserved_memory=_int(d, "reserved_memory"),
                   reserved_storage=_int(d, "reserved_storage"),
                   accounts=_int(d, "accounts"), ha_assets=_int(d, "ha_assets"),
                   api=JetStreamApiStats.from_json(_obj(d, "api") or {}))


@attrs.frozen
class NodeInfo:
    """One server as the meta layer sees it (server.go ``nodeInfo``).

    ``cfg``/``stats`` are ``None`` until a statsz with JetStream arrived:
    such a peer counts as offline for placement."""
    name: str
    version: str = ""
    cluster: str = ""
    domain: str = ""
    id: str = ""  # the server id (``NABC…``), not the peer id
    tags: tuple = ()
    cfg: JetStreamConfig = None
    stats: JetStreamStats = None
    offline: bool = False
    js: bool = False
    binary_stream_snapshot: bool = False
    account_nrg: bool = False

    @property
    def peer(self):
        """The 8-character peer id (nats-server's getHash of the name)."""
        return peer_id(self.name)


def _tags(v):
    return tuple(t for t in v if isinstance(t, str)) if isinstance(v, list) else ()


def _server_flags(si):
    """JetStream enabled / binary snapshots / account NRG, from a ServerInfo
    (the deprecated ``jetstream`` bool still counts, events.go JetStreamEnabled)."""
    flags = _int(si, "flags")
    return (bool(flags & JETSTREAM_ENABLED) or _bool(si, "jetstream"),
            bool(flags & BINARY_STREAM_SNAPSHOT), bool(flags & ACCOUNT_NRG))


def _decode(payload):
    if isinstance(payload, dict):
        return payload
    try:
        d = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return None
    return d if isinstance(d, dict) else None


@attrs.define
class _ServerUpdate:
    """events.go serverUpdate: a remote's last statsz sequence and when."""
    seq: int
    ltime: float


class PeerTable:
    """nats-server's ``nodeToInfo`` plus the ``sys.servers`` tracking that
    decides shutdowns; keyed by peer id, iterated as :class:`NodeInfo`.

    ``server_id``/``domain``: this server's id (its own statsz is ignored, as
    nats-server never hears itself) and JetStream domain (entries from
    another domain are kept out, events.go sameDomain)."""

    def __init__(self, server_id="", domain=""):
        self.server_id = server_id
        self.domain = domain
        self._nodes = {}
        self._servers = {}  # server id -> _ServerUpdate

    # -- reading -----------------------------------------------------------------

    def get(self, peer):
        return self._nodes.get(peer)

    def __getitem__(self, peer):
        return self._nodes[peer]

    def __contains__(self, peer):
        return peer in self._nodes

    def __iter__(self):
        return iter(list(self._nodes.values()))

    def __len__(self):
        return len(self._nodes)

    def peers(self):
        return list(self._nodes)

    def items(self):
        return list(self._nodes.items())

    def active_peers(self):
        """server.go ActivePeers: every peer not known to be offline (JetStream
        or not, stats or not): the seed of a new meta group."""
        return [p for p, ni in self._nodes.items() if not ni.offline]

    def tracked_jetstream_servers(self):
        """jetstream_cluster.go trackedJetStreamServers: (with JetStream, all)."""
        return sum(1 for ni in self._nodes.values() if ni.js), len(self._nodes)

    def jetstream_cluster_peers(self, meta_peers):
        """JetStreamClusterPeers: names of the meta peers that are online, have
        JetStream and have sent stats."""
        out = []
        for p in meta_peers:
            ni = self._nodes.get(p)
            if ni is not None and not ni.offline and ni.js and ni.stats is not None:
                out.append(ni.name)
        return out

    def name_of(self, peer):
        """peerSetToNames: the server name, or the id itself if unknown."""
        ni = self._nodes.get(peer)
        return ni.name if ni is not None else peer

    def known_servers(self):
        """Server ids with a statsz on record (events.go ``sys.servers``)."""
        return dict((sid, su.seq) for sid, su in self._servers.items())

    # -- filling -----------------------------------------------------------------

    def same_domain(self, domain):
        return not domain or not self.domain or domain == self.domain

    def set_local(self, name, server_id, cluster="", domain="", tags=(), version="",
                  cfg=None, stats=None):
        """Our own entry (server.go at start-up; sendStatsz refreshes cfg,
        stats and tags): JetStream on, binary snapshots and account NRG capable."""
        self.server_id = server_id
        self._nodes[peer_id(name)] = NodeInfo(
            name=name, version=version, cluster=cluster, domain=domain, id=server_id,
            tags=tuple(tags), cfg=cfg, stats=stats, offline=False, js=True,
            binary_stream_snapshot=True, account_nrg=True)

    def update_from_statsz(self, payload, now=0.0):
        """A ``$SYS.SERVER.<id>.STATSZ`` message (events.go remoteServerUpdate):
        the sender's entry is replaced and marked online, with the JetStream
        config and stats of ``statsz.jetstream`` (``None`` when the sender
        has no JetStream: it stays in the table, unplaceable, ``js`` per its
        flags). Returns the new :class:`NodeInfo`, or ``None`` when ignored
        (bad JSON, no name, another domain)."""
        ssm = _decode(payload)
        if ssm is None or not payload:
            return None
        si = _obj(ssm, "server") or {}
        name, sid = _str(si, "name"), _str(si, "id")
        if sid and sid != self.server_id:
            self._track(si, now)
        if not self.same_domain(_str(si, "domain")):
            return None
        if not name:
            # (nats-server would hash the empty name; nothing can be placed there)
            return None
        js_stats = _obj(_obj(ssm, "statsz") or {}, "jetstream")
        cfg = stats = None
        if js_stats is not None:
            if _obj(js_stats, "config") is not None:
                cfg = JetStreamConfig.from_json(js_stats["config"])
            if _obj(js_stats, "stats") is not None:
                stats = JetStreamStats.from_json(js_stats["stats"])
        js, binary, account_nrg = _server_flags(si)
        ni = NodeInfo(name=name, version=_str(si, "ver"), cluster=_str(si, "cluster"),
                      domain=_str(si, "domain"), id=sid, tags=_tags(si.get("tags")),
                      cfg=cfg, stats=stats, offline=False, js=js,
                      binary_stream_snapshot=binary, account_nrg=account_nrg)
        self._nodes[ni.peer] = ni
        return ni

    def _track(self, si, now):
        """events.go updateRemoteServer/processNewServer. An out-of-order
        sequence is only logged by nats-server: the entry is updated anyway."""
        sid, seq = _str(si, "id"), _int(si, "seq")
        su = self._servers.get(sid)
        if su is None:
            self._servers[sid] = _ServerUpdate(seq, now)
            if self.same_domain(_str(si, "domain")) and _str(si, "name"):
                peer = peer_id(si["name"])
                if peer not in self._nodes:
                    js, binary, account_nrg = _server_flags(si)
                    self._nodes[peer] = NodeInfo(
                        name=si["name"], version=_str(si, "ver"), cluster=_str(si, "cluster"),
                        domain=_str(si, "domain"), id=sid, tags=_tags(si.get("tags")),
                        js=js, binary_stream_snapshot=binary, account_nrg=account_nrg)
        elif seq > su.seq:
            su.seq, su.ltime = seq, now

    def update_from_route_info(self, info, local_cluster="", local_version=""):
        """A route's INFO on the first connection to that remote (route.go
        addRoute): the entry is **replaced** by one with the remote's name
        (``name``, else its id), id, domain and ``jetstream`` flag, but this
        server's cluster and version, no tags, no config/stats, and binary
        snapshots assumed (2.10+). Placement waits for the remote's statsz.
        ``info``: the route INFO as sent (``server_id``, ``server_name``)."""
        sid = _str(info, "server_id")
        name = _str(info, "server_name") or sid
        if not name or not self.same_domain(_str(info, "domain")):
            return None
        ni = NodeInfo(name=name, version=local_version, cluster=local_cluster,
                      domain=_str(info, "domain"), id=sid, tags=(), cfg=None, stats=None,
                      offline=False, js=_bool(info, "jetstream"),
                      binary_stream_snapshot=True, account_nrg=False)
        self._nodes[ni.peer] = ni
        return ni

    def server_shutdown(self, payload, subject=None):
        """``$SYS.SERVER.<id>.SHUTDOWN`` or ``.LAMEDUCK`` (events.go
        remoteServerShutdown): the entry of the ServerInfo's name goes offline;
        and if the subject's server id sent us statsz, the first entry with that
        id goes offline too and the id is forgotten. An empty or bad payload,
        or a subject with fewer than 4 tokens, is ignored."""
        if subject is not None and len(subject.split(".")) < 4:
            return False
        si = _decode(payload) if payload else None
        if si is None:
            return False
        peer = peer_id(_str(si, "name"))
        ni = self._nodes.get(peer)
        if ni is not None:
            self._nodes[peer] = attrs.evolve(ni, offline=True)
        sid = subject.split(".")[2] if subject is not None else _str(si, "id")
        if sid in self._servers:
            self.mark_offline(sid)
        return True

    def mark_offline(self, server_id):
        """events.go processRemoteServerShutdown (a shutdown, or an orphan: no
        statsz for the orphan limit): the entry with that server id goes
        offline and the id is no longer tracked."""
        for peer, ni in self._nodes.items():
            if ni.id == server_id:
                self._nodes[peer] = attrs.evolve(ni, offline=True)
                break
        self._servers.pop(server_id, None)

    def orphans(self, now, orphan_max):
        """checkRemoteServers: ids silent for longer than ``orphan_max``."""
        return [sid for sid, su in self._servers.items() if now - su.ltime > orphan_max]
