"""JetStream consumer data model: configuration, info and API requests, as nats-server 2.15.1.

The consumer counterpart of ``stream_models.py``: attrs classes for the wire
types with nats-server's field names, in nats-server's order (the Go-compatible
decoder and ``GoType`` descriptors of ``gojson.py`` and ``to_json`` of
``marshal.py`` are reused here), and the JSON of the replies
(``consumer_config_json`` is the ``config`` object of every reply).  The
create pipeline (parsing, defaults, checks) is
:mod:`natsbroker.jetstream.consumer_config`'s; the bodies of CONSUMER.MSG.NEXT,
UNPIN, RESET, PAUSE and NAMES/LIST are parsed by
:mod:`natsbroker.jetstream.consumer_requests`.  Everything was checked against
the real server (nats-server 2.15.1, standalone, ``-js``);
``tests/test_js_consumer_models.py`` holds the cases and a differential test
against the binary.
"""

import re
from typing import Optional

import attrs

from natsbroker.gocompat import gojson, times as gotime
from natsbroker.gocompat.gojson import (
    BOOL,
    DURATION,
    INT,
    INT64,
    STRING,
    STRING_MAP,
    STRINGS,
    TIME,
    UINT64,
    GoJSONError,
    SliceOf,
    Struct,
)
from natsbroker.gocompat.times import NS_PER_SEC, go_parse_rfc3339, rfc3339
from natsbroker.jetstream import marshal, stream_models as SM
from natsbroker.jetstream.marshal import (
    gofield as _f,  # short: every field below is one
    to_json,
)
from natsbroker.jetstream.stream_models import ClusterInfo
from natsbroker.jetstream.versions import API_LEVEL, META_SERVER_LEVEL, META_SERVER_VERSION, SERVER_VERSION

# ---------------------------------------------------------------------------
# Constants
# ---------------------------------------------------------------------------

DELIVER_POLICIES = ("all", "last", "new", "by_start_sequence", "by_start_time", "last_per_subject")
ACK_POLICIES = ("none", "all", "explicit", "flow_control")
REPLAY_POLICIES = ("instant", "original")
PRIORITY_POLICIES = ("none", "overflow", "pinned_client", "prioritized")

ACTION_CREATE_OR_UPDATE = ""
ACTION_CREATE = "create"
ACTION_UPDATE = "update"
CONSUMER_ACTIONS = (ACTION_CREATE_OR_UPDATE, ACTION_CREATE, ACTION_UPDATE)

ACK_WAIT_DEFAULT = 30 * NS_PER_SEC              # JsAckWaitDefault
EPHEMERAL_INACTIVE_THRESHOLD = 5 * NS_PER_SEC   # JsDeleteWaitTimeDefault
DEFAULT_MAX_ACK_PENDING = 1000                  # JsDefaultMaxAckPending
WAIT_QUEUE_DEFAULT_MAX = 512                    # JSWaitQueueDefaultMax
DEFAULT_PINNED_TTL = 120 * NS_PER_SEC           # JsDefaultPinnedTTL
FLOW_CONTROL_HEARTBEAT = NS_PER_SEC             # sourceHealthHB
MIN_HEARTBEAT = NS_PER_SEC // 10
MIN_MAX_EXPIRES = 1_000_000
MAX_FILE_NAME = 255      # a longer consumer name can not be a directory of the file store

_API = "io.nats.jetstream.api.v1."
TYPE_CONSUMER_CREATE = _API + "consumer_create_response"
TYPE_CONSUMER_INFO = _API + "consumer_info_response"
TYPE_CONSUMER_NAMES = _API + "consumer_names_response"
TYPE_CONSUMER_LIST = _API + "consumer_list_response"
TYPE_CONSUMER_PAUSE = _API + "consumer_pause_response"
TYPE_CONSUMER_LEADER_STEPDOWN = _API + "consumer_leader_stepdown_response"
TYPE_CONSUMER_UNPIN = _API + "consumer_unpin_response"
TYPE_CONSUMER_RESET = _API + "consumer_reset_response"

GO_ZERO_NS = -62135596800 * NS_PER_SEC
GROUP_NAME = re.compile(r"[a-zA-Z0-9/_=-]{1,16}\Z")


# ---------------------------------------------------------------------------
# Go types of the consumer enums
# ---------------------------------------------------------------------------

class _RawEnum(gojson.EnumType):
    """An enum whose UnmarshalJSON error shows the raw JSON with ``%v``
    (``unknown priority policy: "x"``, ``unknown consumer action: 5``)."""

    def __init__(self, name, values, message):
        super().__init__(name, values)
        self.message = message

    def decode(self, raw):
        try:
            return super().decode(raw)
        except GoJSONError:
            raise GoJSONError(self.message % bytes(raw).decode("utf-8", "gojson")) from None


DELIVER_POLICY = gojson.EnumType("server.DeliverPolicy", DELIVER_POLICIES,
                                 extra={b'"undefined"': "all"})
ACK_POLICY = gojson.EnumType("server.AckPolicy", ACK_POLICIES)
REPLAY_POLICY = gojson.EnumType("server.ReplayPolicy", REPLAY_POLICIES)
PRIORITY_POLICY = _RawEnum("server.PriorityPolicy", PRIORITY_POLICIES, "unknown priority policy: %s")
CONSUMER_ACTION = _RawEnum("server.ConsumerAction", CONSUMER_ACTIONS, "unknown consumer action: %s")
DURATIONS = SliceOf(DURATION, "[]time.Duration")


# ---------------------------------------------------------------------------
# Models (attribute = JSON name, nats-server's field order)
# ---------------------------------------------------------------------------

@attrs.define
class ConsumerConfig:
    """A consumer's configuration.  Durations are nanoseconds; ``opt_start_time``
    and ``pause_until`` are RFC 3339 text as Go marshals it back (offset kept),
    ``None`` when unset; enums are their JSON strings."""
    __go_name__ = "ConsumerConfig"
    durable_name: str = _f(STRING, "", omit=True)
    name: str = _f(STRING, "", omit=True)
    description: str = _f(STRING, "", omit=True)
    deliver_policy: str = _f(DELIVER_POLICY, "all")
    opt_start_seq: int = _f(UINT64, 0, omit=True)
    opt_start_time: Optional[str] = _f(TIME, None, omit=True)
    ack_policy: str = _f(ACK_POLICY, "none")
    ack_wait: int = _f(DURATION, 0, omit=True)
    max_deliver: int = _f(INT, 0, omit=True)
    backoff: Optional[list] = _f(DURATIONS, None, omit=True)
    filter_subject: str = _f(STRING, "", omit=True)
    filter_subjects: Optional[list] = _f(STRINGS, None, omit=True)
    replay_policy: str = _f(REPLAY_POLICY, "instant")
    rate_limit_bps: int = _f(UINT64, 0, omit=True)
    sample_freq: str = _f(STRING, "", omit=True)
    max_waiting: int = _f(INT, 0, omit=True)
    max_ack_pending: int = _f(INT, 0, omit=True)
    flow_control: bool = _f(BOOL, False, omit=True)
    headers_only: bool = _f(BOOL, False, omit=True)
    max_batch: int = _f(INT, 0, omit=True)
    max_expires: int = _f(DURATION, 0, omit=True)
    max_bytes: int = _f(INT, 0, omit=True)
    deliver_subject: str = _f(STRING, "", omit=True)
    deliver_group: str = _f(STRING, "", omit=True)
    idle_heartbeat: int = _f(DURATION, 0, omit=True)
    inactive_threshold: int = _f(DURATION, 0, omit=True)
    num_replicas: int = _f(INT, 0)
    mem_storage: bool = _f(BOOL, False, omit=True)
    direct: bool = _f(BOOL, False, omit=True)
    sourcing: bool = _f(BOOL, False, omit=True)
    metadata: Optional[dict] = _f(STRING_MAP, None, omit=True)
    pause_until: Optional[str] = _f(TIME, None, omit=True)
    priority_groups: Optional[list] = _f(STRINGS, None, omit=True)
    priority_policy: str = _f(PRIORITY_POLICY, "none", omit=True, omit_value="none")
    priority_timeout: int = _f(DURATION, 0, omit=True)

    @property
    def is_pull(self):
        return not self.deliver_subject

    @property
    def filters(self):
        """gatherSubjectFilters: ``filter_subjects`` plus ``filter_subject``."""
        out = list(self.filter_subjects or ())
        if self.filter_subject:
            out.append(self.filter_subject)
        return out


@attrs.define
class SequenceInfo:
    """``delivered``/``ack_floor``; ``last_active`` Unix ns, ``None`` if never."""
    consumer_seq: int = _f(UINT64, 0)
    stream_seq: int = _f(UINT64, 0)
    last_active: Optional[int] = _f(None, None, omit=True, time=True)


@attrs.define
class PriorityGroupState:
    """``pinned_ts`` is a ``time.Time`` with omitempty: always sent (zero time)."""
    group: str = _f(STRING, "")
    pinned_client_id: str = _f(STRING, "", omit=True)
    pinned_ts: int = _f(None, 0, time=True)


@attrs.define
class ConsumerInfo:
    """``created``/``ts`` Unix ns.  Use ``consumer_info_json`` for the wire form."""
    stream_name: str = _f(STRING, "")
    name: str = _f(STRING, "")
    created: int = _f(None, 0, time=True)
    config: Optional[ConsumerConfig] = _f(None, None, omit=True)
    delivered: SequenceInfo = _f(None, factory=SequenceInfo)
    ack_floor: SequenceInfo = _f(None, factory=SequenceInfo)
    num_ack_pending: int = _f(INT, 0)
    num_redelivered: int = _f(INT, 0)
    num_waiting: int = _f(INT, 0)
    num_pending: int = _f(UINT64, 0)
    cluster: Optional[ClusterInfo] = _f(None, None, omit=True)
    push_bound: bool = _f(BOOL, False, omit=True)
    paused: bool = _f(BOOL, False, omit=True)
    pause_remaining: int = _f(DURATION, 0, omit=True)
    ts: int = _f(None, 0, time=True)
    priority_groups: Optional[list] = _f(None, None, omit=True)


@attrs.define
class CreateConsumerRequest:
    __go_name__ = "CreateConsumerRequest"
    stream_name: str = _f(STRING, "")
    config: ConsumerConfig = _f(Struct(ConsumerConfig), factory=ConsumerConfig)
    action: str = _f(CONSUMER_ACTION, ACTION_CREATE_OR_UPDATE)
    pedantic: bool = _f(BOOL, False, omit=True)


@attrs.define
class ConsumersRequest:
    """CONSUMER.NAMES / CONSUMER.LIST body (strict: ``subject`` is unknown)."""
    __go_name__ = "JSApiConsumersRequest"
    offset: int = _f(INT, 0)


@attrs.define
class ConsumerPauseRequest:
    """CONSUMER.PAUSE body; ``pause_until`` ``None`` (or null) means resume."""
    __go_name__ = "JSApiConsumerPauseRequest"
    pause_until: Optional[str] = _f(TIME, None, omit=True)


@attrs.define
class NextRequest:
    """CONSUMER.MSG.NEXT (``JSApiConsumerGetNextRequest`` + ``PriorityGroup``).

    ``priority_group`` is True for the JSON form (nats-server then checks the
    priority fields), False for an empty body or a bare batch size."""
    __go_name__ = ""      # json.Unmarshal into **T: errors say "Go struct field .batch"
    expires: int = _f(DURATION, 0, omit=True)
    batch: int = _f(INT, 0, omit=True)
    max_bytes: int = _f(INT, 0, omit=True)
    no_wait: bool = _f(BOOL, False, omit=True)
    idle_heartbeat: int = _f(DURATION, 0, omit=True)
    group: str = _f(STRING, "", omit=True)
    min_pending: int = _f(INT64, 0, omit=True)
    min_ack_pending: int = _f(INT64, 0, omit=True)
    id: str = _f(STRING, "", omit=True)
    priority: int = _f(INT, 0, omit=True)
    priority_group: bool = attrs.field(default=False, metadata={"omit": True, "skip": True})


# --- responses ---------------------------------------------------------------

@attrs.define
class ConsumerCreateResponse:
    type: str = _f(STRING, TYPE_CONSUMER_CREATE)
    error: Optional[SM.ApiErrorBody] = _f(None, None, omit=True)
    info: Optional[ConsumerInfo] = _f(None, None, omit=True, embed=True)


@attrs.define
class ConsumerInfoResponse:
    type: str = _f(STRING, TYPE_CONSUMER_INFO)
    error: Optional[SM.ApiErrorBody] = _f(None, None, omit=True)
    info: Optional[ConsumerInfo] = _f(None, None, omit=True, embed=True)


@attrs.define
class ConsumerNamesResponse:
    """``consumers`` is always a list, ``[]`` when empty and on errors."""
    type: str = _f(STRING, TYPE_CONSUMER_NAMES)
    error: Optional[SM.ApiErrorBody] = _f(None, None, omit=True)
    total: int = _f(INT, 0)
    offset: int = _f(INT, 0)
    limit: int = _f(INT, 0)
    consumers: list = _f(None, factory=list)


@attrs.define
class ConsumerListResponse:
    """``consumers``: ``ConsumerInfo`` list; their configs carry no
    ``_nats.ver``/``_nats.level`` (as nats-server)."""
    type: str = _f(STRING, TYPE_CONSUMER_LIST)
    error: Optional[SM.ApiErrorBody] = _f(None, None, omit=True)
    total: int = _f(INT, 0)
    offset: int = _f(INT, 0)
    limit: int = _f(INT, 0)
    consumers: list = _f(None, factory=list)
    missing: Optional[list] = _f(None, None, omit=True)


@attrs.define
class ConsumerPauseResponse:
    """``pause_until`` Unix ns (0 = zero time), always sent, in UTC."""
    type: str = _f(STRING, TYPE_CONSUMER_PAUSE)
    error: Optional[SM.ApiErrorBody] = _f(None, None, omit=True)
    paused: bool = _f(BOOL, False)
    pause_until: int = _f(None, 0, time=True)
    pause_remaining: int = _f(DURATION, 0, omit=True)


# --- structuring (decode_request ends with converter.structure) -------------

def structure(cls, value):
    if isinstance(value, cls):
        return value
    kwargs = {}
    for f in attrs.fields(cls):
        if f.name not in value:
            continue
        v = value[f.name]
        go = f.metadata.get("go")
        if v is None and isinstance(f.default, attrs.Factory):
            continue                    # null into a non-pointer struct: zero value kept
        if isinstance(go, gojson.StructType) and v is not None:
            v = structure(go.cls, v)
        kwargs[f.name] = v
    return cls(**kwargs)


@attrs.define
class ConsumerUnpinRequest:
    """CONSUMER.UNPIN body (decoded like ``json.Unmarshal``: unknown fields ignored)."""
    __go_name__ = "JSApiConsumerUnpinRequest"
    group: str = _f(STRING, "", omit=True)


@attrs.define
class ConsumerResetRequest:
    """CONSUMER.RESET body; ``seq`` 0 (or no body) means the ack floor + 1."""
    __go_name__ = "JSApiConsumerResetRequest"
    seq: int = _f(UINT64, 0, omit=True)


for _cls in (ConsumerConfig, CreateConsumerRequest, ConsumersRequest, ConsumerPauseRequest,
             NextRequest, ConsumerUnpinRequest, ConsumerResetRequest):
    marshal.converter.register_structure_hook(_cls, (lambda c: lambda v, _: structure(c, v))(_cls))


def clone_config(cfg):
    return attrs.evolve(cfg, backoff=_copy(cfg.backoff), filter_subjects=_copy(cfg.filter_subjects),
                        metadata=_copy(cfg.metadata), priority_groups=_copy(cfg.priority_groups))


def _copy(v):
    return None if v is None else type(v)(v)


def consumer_config_from_json(value):
    """A ``ConsumerConfig`` from its JSON dict (e.g. stored); the reply-only
    ``_nats.ver``/``_nats.level`` are dropped from ``metadata``."""
    cfg = structure(ConsumerConfig, value)
    if cfg.metadata:
        cfg.metadata = {k: v for k, v in cfg.metadata.items()
                        if k not in (META_SERVER_VERSION, META_SERVER_LEVEL)}
    return cfg


# --- times -----------------------------------------------------------------

def parse_time_ns(text):
    """Unix ns of an RFC 3339 string; Go's zero time is ``GO_ZERO_NS``."""
    return go_parse_rfc3339(text)[0]


def is_zero_time(text):
    return text is None or parse_time_ns(text) == GO_ZERO_NS


# ---------------------------------------------------------------------------
# JSON output
# ---------------------------------------------------------------------------

def consumer_config_json(cfg, *, dynamic=True, version=SERVER_VERSION, api_level=API_LEVEL):
    """The ``config`` object of a reply, field order and omitempty as nats-server.

    ``metadata`` (keys sorted) gets ``_nats.ver``/``_nats.level`` unless
    ``dynamic=False`` (CONSUMER.LIST and storage): it is then the stored map.
    """
    out = {}
    for f in attrs.fields(ConsumerConfig):
        value = getattr(cfg, f.name)
        if f.name == "metadata" and dynamic:
            meta = dict(value or {})
            meta[META_SERVER_VERSION] = version
            meta[META_SERVER_LEVEL] = str(api_level)
            out["metadata"] = {k: meta[k] for k in sorted(meta)}
            continue
        if f.metadata.get("omit") and marshal.is_empty(value, f):
            continue
        out[f.name] = to_json(value)
    return out


def consumer_info_json(info, *, dynamic=True, version=SERVER_VERSION, api_level=API_LEVEL):
    """``ConsumerInfo`` as nats-server sends it (config via ``consumer_config_json``)."""
    out = to_json(info)
    if info.config is not None:
        out["config"] = consumer_config_json(info.config, dynamic=dynamic, version=version,
                                             api_level=api_level)
    return out


def consumer_response_json(resp, *, version=SERVER_VERSION, api_level=API_LEVEL):
    """Any consumer response object as the dict nats-server sends (for ``go_json_dumps``)."""
    out = {}
    for f in attrs.fields(type(resp)):
        value = getattr(resp, f.name)
        if f.metadata.get("omit") and marshal.is_empty(value, f):
            continue
        if f.metadata.get("embed"):
            out.update(consumer_info_json(value, version=version, api_level=api_level))
        elif f.name == "consumers" and isinstance(resp, ConsumerListResponse):
            out[f.name] = [consumer_info_json(i, dynamic=False) for i in value]
        elif f.metadata.get("time"):
            out[f.name] = rfc3339(value)
        else:
            out[f.name] = to_json(value)
    return out


def pause_state(pause_until, now_ns):
    """``(paused, pause_remaining)`` of a consumer at ``now_ns``."""
    if pause_until is None:
        return False, 0
    until = parse_time_ns(pause_until)
    if now_ns < until:
        return True, until - now_ns
    return False, 0


def make_consumer_info(stream_name, name, cfg, created, *, ts=None, delivered=None, ack_floor=None,
                       num_ack_pending=0, num_redelivered=0, num_waiting=0, num_pending=0,
                       push_bound=False, cluster=None, pinned=None):
    """A ``ConsumerInfo`` as nats-server fills it (paused/pause_remaining from
    ``pause_until``; ``priority_groups`` state for the first group; ``num_redelivered``
    0 when ``max_deliver`` is 1).  ``pinned``: ``(client_id, pinned_ts_ns)``."""
    ts = gotime.now_ns() if ts is None else ts
    paused, remaining = pause_state(cfg.pause_until, ts)
    groups = None
    if cfg.priority_groups:
        pid, pts = pinned or ("", 0)
        groups = [PriorityGroupState(group=cfg.priority_groups[0], pinned_client_id=pid,
                                     pinned_ts=pts)]
    return ConsumerInfo(
        stream_name=stream_name, name=name, created=created, config=cfg,
        delivered=delivered or SequenceInfo(), ack_floor=ack_floor or SequenceInfo(),
        num_ack_pending=num_ack_pending,
        num_redelivered=0 if cfg.max_deliver == 1 else num_redelivered,
        num_waiting=num_waiting, num_pending=num_pending, cluster=cluster,
        push_bound=push_bound and bool(cfg.deliver_subject), paused=paused,
        pause_remaining=remaining, ts=ts, priority_groups=groups)


def pause_response(pause_until, now_ns=None):
    """CONSUMER.PAUSE reply for the stored ``pause_until`` (text or ``None``)."""
    now_ns = gotime.now_ns() if now_ns is None else now_ns
    until = 0 if is_zero_time(pause_until) else parse_time_ns(pause_until)
    paused, remaining = pause_state(pause_until, now_ns)
    return ConsumerPauseResponse(paused=paused, pause_until=until, pause_remaining=remaining)


__all__ = [name for name in dir() if not name.startswith("_") and name not in (
    "attrs", "re", "Optional", "gojson", "gotime", "marshal", "SM")]
