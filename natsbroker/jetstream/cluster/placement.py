"""Where the meta leader places a stream: nats-server's selectPeerGroup,
createGroupForStream, createGroupForConsumer and raftGroup.setPreferred
(jetstream_cluster.go), step by step.

:func:`select_peer_group` walks the meta peers in a shuffled order and keeps
a peer only if it is

1. known (else "miscellaneous issue") and in the target cluster (else
   skipped, no reason);
2. heard from: JetStream config and stats from a statsz (else "peer
   offline");
3. not ignored, not already in the group (``existing`` go first, as given);
4. not tagged ``!jetstream`` ("exclude tag set");
5. carrying every placement tag and none of the ``!`` ones ("tags not
   matched [...]", "tags excluded [...]"; the first failing tag is the one
   reported);
6. with room for ``max_bytes`` in the stream's storage, free being
   ``max_* - max(used, reserved)`` ("insufficient storage");
7. under the HA asset limit: ``stats.ha_assets > max_ha_assets`` refuses, as
   the count includes ``_meta_`` ("miscellaneous issue");
8. the first seen with its ``unique_tag`` value; a peer with no tag of that
   prefix is refused too ("server tag not unique"). A placement tag with the
   prefix turns the rule off.

Too few kept (or fewer online than a quorum): :class:`PlacementError`, the
JetStream API's 10005 whose text lists every reason met on the way, in
nats-server's order. Else the kept peers are sorted: online first, most free
space, fewest streams; for R>1 then (stably) fewest HA assets; the first R
are taken. Randomness (the shuffle, the preferred leader) comes from ``rng``.

nats-server writes a reason's tags from a Go map, in random order; here they
come sorted (one of its orders, and the same for the same inputs).
"""

import random

import attrs

from natsbroker.jetstream.cluster.peers import PeerTable
from natsbroker.jetstream.errors import ApiError, insufficient_resources

__all__ = ["JS_EXCLUDE_PLACEMENT", "PlacementError", "PlacementRequest", "select_peer_group",
           "create_group_for_stream", "create_group_for_consumer", "select_preferred"]

# jetstream_cluster.go jsExcludePlacement: a server that takes no assets.
JS_EXCLUDE_PLACEMENT = "!jetstream"


class PlacementError(ApiError):
    """selectPeerError: why no peer set could be chosen. As an API error it
    is JSClusterNoPeersErrF, 400/10005, the description being the reasons."""

    def __init__(self, offline=False, exclude_tag=False, no_storage=False, unique_tag=False,
                 misc=False, no_js_cluster=False, no_match_tags=(), exclude_tags=()):
        self.offline = offline
        self.exclude_tag = exclude_tag
        self.no_storage = no_storage
        self.unique_tag = unique_tag
        self.misc = misc
        self.no_js_cluster = no_js_cluster
        self.no_match_tags = list(dict.fromkeys(no_match_tags))
        self.exclude_tags = list(dict.fromkeys(exclude_tags))
        super().__init__(400, 10005, self.text(), "JSClusterNoPeersErrF")

    def text(self):
        """selectPeerError.Error()."""
        parts = ["no suitable peers for placement"]
        for flag, reason in ((self.offline, "peer offline"),
                             (self.exclude_tag, "exclude tag set"),
                             (self.no_storage, "insufficient storage"),
                             (self.unique_tag, "server tag not unique"),
                             (self.misc, "miscellaneous issue"),
                             (self.no_js_cluster, "jetstream not enabled in cluster")):
            if flag:
                parts.append(reason)
        for label, tags in (("tags not matched", self.no_match_tags),
                            ("tags excluded", self.exclude_tags)):
            if tags:
                parts.append("%s [%s]" % (label, ", ".join("'%s'" % t for t in sorted(tags))))
        return ", ".join(parts)

    def accumulate(self, other):
        """selectPeerError.accumulate: the union of both reason sets."""
        if other is None:
            return self
        return PlacementError(
            offline=self.offline or other.offline, exclude_tag=self.exclude_tag or other.exclude_tag,
            no_storage=self.no_storage or other.no_storage,
            unique_tag=self.unique_tag or other.unique_tag, misc=self.misc or other.misc,
            no_js_cluster=self.no_js_cluster or other.no_js_cluster,
            no_match_tags=self.no_match_tags + other.no_match_tags,
            exclude_tags=self.exclude_tags + other.exclude_tags)


@attrs.frozen
class PlacementRequest:
    """The parts of a StreamConfig placement reads."""
    replicas: int = 0
    storage: str = "file"  # "file" | "memory"
    max_bytes: int = 0
    cluster: str = ""
    tags: tuple = ()
    preferred: str = ""

    @classmethod
    def of(cls, config):
        """From a StreamConfig JSON dict, a stream_models.StreamConfig, or itself."""
        if isinstance(config, cls):
            return config

        def get(obj, key, default=None):
            if obj is None:
                return default
            if isinstance(obj, dict):
                return obj.get(key, default)
            return getattr(obj, key, default)
        placement = get(config, "placement")
        storage = get(config, "storage", "file")
        storage = getattr(storage, "value", storage)
        return cls(replicas=int(get(config, "num_replicas", get(config, "replicas", 0)) or 0),
                   storage=str(storage).lower(), max_bytes=int(get(config, "max_bytes", 0) or 0),
                   cluster=get(placement, "cluster", "") or "",
                   tags=tuple(get(placement, "tags", ()) or ()),
                   preferred=get(placement, "preferred", "") or "")


@attrs.define
class _Candidate:
    """selectPeerGroup's ``wn``."""
    id: str
    avail: int
    off: bool
    ha: int
    ns: int


def _nodes_of(peers):
    if isinstance(peers, PeerTable):
        return dict(peers.items())
    if isinstance(peers, dict):
        return dict(peers)
    return {ni.peer: ni for ni in peers}


def _counts(assignments):
    """Streams and HA streams per peer, from the peer lists of the current
    stream assignments (unsupported ones left out by the caller)."""
    streams, ha = {}, {}
    for group in assignments:
        group = list(group)
        for p in group:
            streams[p] = streams.get(p, 0) + 1
            if len(group) > 1:
                ha[p] = ha.get(p, 0) + 1
    return streams, ha


def _available(ni, storage):
    """Free bytes of the stream's storage kind: max - max(used, reserved),
    0 when over (uint64 arithmetic in nats-server, never negative)."""
    if storage == "memory":
        used = max(ni.stats.reserved_memory, ni.stats.memory)
        limit = ni.cfg.max_memory
    elif storage == "file":
        used = max(ni.stats.reserved_storage, ni.stats.storage)
        limit = ni.cfg.max_storage
    else:
        return 0
    return limit - used if limit > used else 0


def _first_tag_with(tags, prefix):
    for t in tags:
        if t.startswith(prefix):
            return t
    return None


def select_peer_group(peers, cluster, config, existing=(), ignore=(), unique_tag=None,
                      max_ha_assets=0, replicas=None, replace_first_existing=0,
                      meta_peers=None, assignments=(), rng=None):
    """selectPeerGroup: ``replicas`` peer ids (default: the config's, at least
    1) of ``cluster`` for a stream, or raise :class:`PlacementError`.

    ``peers``: a :class:`PeerTable`, a ``{peer: NodeInfo}`` dict or NodeInfos.
    ``meta_peers``: the meta group's peer ids, the only candidates (default:
    every peer in ``peers``). ``existing``: peers kept, first in the result
    (all of them when there are at least ``replicas``); ``ignore``: never
    chosen. ``unique_tag``/``max_ha_assets``: this server's
    ``jetstream.unique_tag`` and ``limits.max_ha_assets``. ``assignments``: the
    peer lists of the streams already placed (stream and HA counts).
    """
    cfg = PlacementRequest.of(config)
    rng = rng if rng is not None else random.Random()
    if not cluster or config is None:
        raise PlacementError(misc=True)
    r = replicas if replicas is not None else max(cfg.replicas, 1)
    nodes = _nodes_of(peers)
    ids = list(meta_peers) if meta_peers is not None else list(nodes)

    tag_rules = [(t[1:], True) if t.startswith("!") else (t, False) for t in cfg.tags]
    prefix = unique_tag or ""
    if prefix and any(t.startswith(prefix) for t, _ in tag_rules):
        prefix = ""  # an explicit tag of that kind overrides uniqueness
    owners = {}

    def unique(ni):
        # (a peer without a tag of the prefix is refused, like a duplicate)
        t = _first_tag_with(ni.tags, prefix)
        if t is None or t in owners:
            return False
        owners[t] = ni
        return True

    existing = list(existing)
    if existing:
        if len(existing) >= r:
            return existing[:r]
        if prefix:
            for i, p in enumerate(existing):
                ni = nodes.get(p)
                if ni is not None and i >= replace_first_existing:
                    unique(ni)  # claims its tag value, never refused
    existing_set, ignored = set(existing), set(ignore)
    stream_counts, ha_counts = _counts(assignments)

    flags = {"no_match_tags": [], "exclude_tags": []}
    chosen, online = [], 0
    rng.shuffle(ids)
    for p in ids:
        ni = nodes.get(p)
        if ni is None:
            flags["misc"] = True
            continue
        if ni.cluster != cluster:
            continue
        if ni.cfg is None or ni.stats is None:
            flags["offline"] = True  # never heard from
            continue
        if p in ignored or p in existing_set:
            continue
        if JS_EXCLUDE_PLACEMENT in ni.tags:
            flags["exclude_tag"] = True
            continue
        refused = False
        for tag, exclude in tag_rules:
            # (jwt.TagList.Contains: trimmed and lower-cased, as tags are kept)
            present = tag.strip().lower() in ni.tags
            if exclude and present:
                flags["exclude_tags"].append(tag)
                refused = True
                break
            if not exclude and not present:
                flags["no_match_tags"].append(tag)
                refused = True
                break
        if refused:
            continue
        avail = _available(ni, cfg.storage)
        if cfg.max_bytes > 0 and cfg.max_bytes > avail:
            flags["no_storage"] = True
            continue
        if max_ha_assets > 0 and ni.stats.ha_assets > max_ha_assets:
            flags["misc"] = True
            continue
        if prefix and not unique(ni):
            flags["unique_tag"] = True
            continue
        chosen.append(_Candidate(p, avail, ni.offline, ha_counts.get(p, 0),
                                 stream_counts.get(p, 0)))
        if not ni.offline:
            online += 1

    missing_quorum = online + len(existing) < r // 2 + 1
    missing_nodes = len(chosen) < r - len(existing)
    if missing_nodes or missing_quorum:
        if not ids:
            flags["no_js_cluster"] = True
        elif not missing_nodes and missing_quorum:
            flags["offline"] = True
        raise PlacementError(**flags)

    # Online first, then most free space, then fewest streams.
    chosen.sort(key=lambda c: (c.off, -c.avail, c.ns))
    if cfg.replicas > 1:
        # Balancing HA assets matters more for replicated streams (a stable re-sort).
        chosen.sort(key=lambda c: (c.off, c.ha))
    return existing + [c.id for c in chosen[:r - len(existing)]]


def create_group_for_stream(peers, client_cluster, config, alternates=(), **kwargs):
    """createGroupForStream: the cluster named by the placement, else the
    client's and then its alternates, each tried in turn; returns
    ``(cluster, peer ids)`` or raises the union of the clusters' reasons."""
    cfg = PlacementRequest.of(config)
    replicas = cfg.replicas or 1
    clusters = [cfg.cluster] if cfg.cluster else [client_cluster] + list(alternates)
    errs = PlacementError()
    for cn in clusters:
        try:
            chosen = select_peer_group(peers, cn, cfg, replicas=replicas, **kwargs)
        except PlacementError as e:
            errs = errs.accumulate(e)
            continue
        if len(chosen) >= replicas:
            return cn, chosen
    raise errs


def select_preferred(group, peers, rng=None):
    """raftGroup.setPreferred: the only peer of an R1 group; else a random
    online peer; if none is online, a random peer."""
    group = list(group)
    if not group:
        return ""
    if len(group) == 1:
        return group[0]
    rng = rng if rng is not None else random.Random()
    nodes = _nodes_of(peers)
    online = [p for p in group if p in nodes and not nodes[p].offline]
    if not online:
        return group[rng.randrange(len(group))]
    if len(online) == 1:
        return online[0]
    return online[rng.randrange(len(online))]


def create_group_for_consumer(stream_peers, replicas, peers, rng=None):
    """createGroupForConsumer: the stream's peers, or for fewer replicas a
    random choice among its online ones. ``replicas``: the consumer's, already
    resolved against the stream's (ConsumerConfig.replicas). The consumer create API answers any
    failure with "insufficient resources" (503/10023), raised here."""
    stream_peers = list(stream_peers)
    if not stream_peers or replicas > len(stream_peers):
        raise insufficient_resources()
    nodes = _nodes_of(peers)
    active = [p for p in stream_peers if p in nodes and not nodes[p].offline]
    if replicas // 2 + 1 > len(active):
        raise insufficient_resources()
    if 0 < replicas < len(stream_peers):
        if len(active) < replicas:
            raise insufficient_resources()
        rng = rng if rng is not None else random.Random()
        rng.shuffle(active)
        return active[:replicas]
    return stream_peers
