"""A consumer's configuration parsed, defaulted and checked as nats-server does it (2.15.1).

The consumer counterpart of ``stream_config.py``; the model is
:mod:`natsbroker.jetstream.consumer_models`'s.  Everything was checked against
the real server (nats-server 2.15.1, standalone, ``-js``);
``tests/test_js_consumer_models.py`` holds the cases and a differential test
against the binary.

Pipeline of ``$JS.API.CONSUMER.CREATE.<stream>[.<name>[.<filter>]]`` and
``$JS.API.CONSUMER.DURABLE.CREATE.<stream>.<durable>``, in nats-server's order::

    where = parse_create_subject(subject)        # None: nats-server does not answer
    req = parse_consumer_request(body, stream, name, filter, legacy_durable=...)
                                                 # JSON 10025, 10056, 10127, 10018/10017/10020,
                                                 # 10137, 10131, replicas > 1 10074
    ... stream missing                           -> E.stream_not_found() (10059)
    existing = consumers.get(req.config.durable_name or req.config.name)
    cfg = fill_consumer_defaults(req.config, stream_cfg, pedantic=req.pedantic, existing=existing)
                                                 # setStaticConsumerMetadata + setConsumerConfigDefaults
    cfg = check_consumer_config(cfg, stream_cfg, req.action, consumers=consumers)
                                                 # checkConsumerCfg + the rest of addConsumer;
                                                 # returns the config to store
    consumer_config_json(cfg)                    # the reply's "config"

``process_consumer_create`` runs all of it.  What surprised (all verified):

* the name: the new API and the legacy durable API both set ``name`` to the
  name in the subject (a legacy durable ``{"durable_name":"D","name":"X"}``
  becomes ``name: "D"``); a legacy ephemeral keeps the ``name`` of the body,
  and when it has none the generated name is *not* put in the stored config;
* ephemerals get ``inactive_threshold`` 5s only *after* all checks (it is not
  part of ``setConsumerConfigDefaults``), so re-creating an ephemeral with
  ``action: "create"`` and an identical body answers 10148;
* on create-or-update of an existing consumer ``pause_until`` of the request is
  replaced by the stored one (use CONSUMER.PAUSE);
* ``_nats.req.level`` is computed *before* the defaults (``priority_timeout: -1``
  gives level 1 though it is then reset to 0): pause_until (not zero time),
  priority policy/groups/timeout 1, ack policy ``flow_control`` 4;
* ``backoff`` sets ``ack_wait`` to its first value even for ack none;
* ``deliver_policy: "undefined"`` is accepted as ``all``; enum values are
  compared on the raw JSON (``"\\u0061ll"`` is an error), ``null`` included;
* CONSUMER.LIST sends configs *without* ``_nats.ver``/``_nats.level``;
* CONSUMER.MSG.NEXT decodes with ``json.Unmarshal``: no unknown-field errors,
  syntax messages without offsets, and the type-error path is ``.batch``;
  so do CONSUMER.UNPIN and CONSUMER.RESET (paths ``JSApiConsumerUnpinRequest.group``,
  ``JSApiConsumerResetRequest.seq``; an empty UNPIN body is an error, an
  empty RESET body is "the ack floor").
"""

import random
import string

from natsbroker.gocompat.durations import format_duration as go_duration
from natsbroker.gocompat.times import rfc3339
from natsbroker.jetstream import errors as E, marshal, subject_rules as SR
from natsbroker.jetstream.consumer_models import (
    ACK_POLICIES,
    ACK_WAIT_DEFAULT,
    ACTION_CREATE,
    ACTION_CREATE_OR_UPDATE,
    ACTION_UPDATE,
    DEFAULT_MAX_ACK_PENDING,
    DEFAULT_PINNED_TTL,
    EPHEMERAL_INACTIVE_THRESHOLD,
    FLOW_CONTROL_HEARTBEAT,
    GROUP_NAME,
    MAX_FILE_NAME,
    MIN_HEARTBEAT,
    MIN_MAX_EXPIRES,
    REPLAY_POLICIES,
    WAIT_QUEUE_DEFAULT_MAX,
    CreateConsumerRequest,
    clone_config,
    is_zero_time,
    parse_time_ns,
)
from natsbroker.jetstream.errors import go_quote
from natsbroker.jetstream.stream_models import JS_MAX_DESCRIPTION_LEN, JS_MAX_METADATA_LEN, JS_MAX_NAME_LEN
from natsbroker.jetstream.versions import META_REQUIRED_LEVEL, META_SERVER_LEVEL, META_SERVER_VERSION
from natsbroker.subjects.sublist import subject_is_subset_match, subjects_collide

_BAD_NAME_CHARS = " \t\r\n\f.*>\\/"


# ---------------------------------------------------------------------------
# Requests
# ---------------------------------------------------------------------------

def parse_create_subject(subject):
    """``(stream, consumer, filter, legacy_durable)`` for a consumer-create subject.

    ``$JS.API.CONSUMER.CREATE.S`` -> ``("S", None, None, False)`` (legacy
    ephemeral); ``...CREATE.S.N`` -> ``("S", "N", None, False)``;
    ``...CREATE.S.N.a.b`` -> ``("S", "N", "a.b", False)``;
    ``$JS.API.CONSUMER.DURABLE.CREATE.S.D`` -> ``("S", "D", None, True)``.
    ``None`` for anything else (nats-server sends no reply to e.g.
    ``DURABLE.CREATE.S`` or ``DURABLE.CREATE.S.D.x``).
    """
    t = subject.split(".")
    if t[:4] == ["$JS", "API", "CONSUMER", "CREATE"] and len(t) >= 5:
        if len(t) == 5:
            return t[4], None, None, False
        return t[4], t[5], (".".join(t[6:]) or None), False
    if t[:5] == ["$JS", "API", "CONSUMER", "DURABLE", "CREATE"] and len(t) == 7:
        return t[5], t[6], None, True
    return None


def parse_consumer_request(raw, stream_name, subject_consumer_name=None, subject_filter=None, *,
                           legacy_durable=False, clustered=False):
    """Decode a consumer-create body and run the API handler's checks, in order.

    ``stream_name``/``subject_consumer_name``/``subject_filter``: from the
    subject (see ``parse_create_subject``); ``legacy_durable`` for
    ``CONSUMER.DURABLE.CREATE``.  Checks: JSON (400/10025 with Go's text,
    unknown fields rejected), stream name (10056), ``/`` or ``\\`` in the
    subject's consumer name (10127), then legacy durable: no durable (10018),
    durable != subject name (10017); new API: durable set and != subject name
    (10017); legacy ephemeral: durable set (10020); filter in subject with
    ``filter_subjects`` (10137) or != ``filter_subject`` (10131); ``num_replicas``
    > 1 standalone (500/10074).  The new API and legacy durables get ``name`` =
    the subject's name.  The stream lookup (10059) comes next, in the caller.
    """
    req = marshal.decode_request(raw, CreateConsumerRequest)
    if req.stream_name != stream_name:
        raise E.stream_mismatch()
    cname = subject_consumer_name or ""
    if cname and ("/" in cname or "\\" in cname):
        raise E.consumer_name_contains_path_separators()
    cfg = req.config
    if legacy_durable:
        if not cfg.durable_name:
            raise E.consumer_durable_name_not_set()
        if cfg.durable_name != cname:
            raise E.consumer_durable_name_not_match_subject()
        cfg.name = cname
    elif cname:
        if cfg.durable_name and cfg.durable_name != cname:
            raise E.consumer_durable_name_not_match_subject()
        cfg.name = cname
    elif cfg.durable_name:
        raise E.consumer_ephemeral_with_durable_name()
    if subject_filter:
        if cfg.filter_subjects:
            raise E.consumer_multiple_filters_not_allowed()
        if cfg.filter_subject != subject_filter:
            raise E.consumer_create_filter_subject_mismatch()
    if not clustered and cfg.num_replicas > 1:
        raise E.stream_replicas_not_supported()
    return req


# ---------------------------------------------------------------------------
# Metadata
# ---------------------------------------------------------------------------

def consumer_required_level(cfg):
    """The API level the config needs (setStaticConsumerMetadata, 2.15.1)."""
    level = 0
    if not is_zero_time(cfg.pause_until):
        level = 1
    if cfg.priority_policy != "none" or cfg.priority_timeout != 0 or cfg.priority_groups:
        level = max(level, 1)
    if cfg.ack_policy == "flow_control":
        level = max(level, 4)
    return level


def set_static_metadata(cfg):
    """In place: drop ``_nats.ver``/``_nats.level``, set ``_nats.req.level``."""
    meta = dict(cfg.metadata or {})
    meta.pop(META_SERVER_VERSION, None)
    meta.pop(META_SERVER_LEVEL, None)
    meta[META_REQUIRED_LEVEL] = str(consumer_required_level(cfg))
    cfg.metadata = meta
    return cfg


def _copy_metadata(cfg, prev):
    """copyConsumerMetadata: ``cfg`` takes ``prev``'s ``_nats.req.level`` (for equality)."""
    meta = None if cfg.metadata is None else dict(cfg.metadata)
    if meta is not None:
        meta.pop(META_SERVER_VERSION, None)
        meta.pop(META_SERVER_LEVEL, None)
    if prev is None or prev.metadata is None:
        if meta is not None:
            meta.pop(META_REQUIRED_LEVEL, None)
            if not meta:
                meta = None
    elif META_REQUIRED_LEVEL in prev.metadata:
        meta = meta if meta is not None else {}
        meta[META_REQUIRED_LEVEL] = prev.metadata[META_REQUIRED_LEVEL]
    elif meta is not None:
        meta.pop(META_REQUIRED_LEVEL, None)
    cfg.metadata = meta
    return cfg


# ---------------------------------------------------------------------------
# Defaults (setConsumerConfigDefaults)
# ---------------------------------------------------------------------------

def fill_consumer_defaults(cfg, stream_cfg, *, pedantic=False, existing=None,
                           server_max_ack_pending=0, account_max_ack_pending=0,
                           server_max_request_batch=0):
    """Return a defaulted copy of ``cfg``, as nats-server before its checks.

    First what the API handler does: an ``existing`` consumer of that name
    keeps its ``pause_until``; ``_nats.req.level`` is set (computed on the
    request, before defaults).  Then setConsumerConfigDefaults: ``max_deliver``
    0 or < -1 -> -1; negative ``max_waiting``/``max_batch``/``max_expires``/
    ``max_bytes``/``idle_heartbeat``/``inactive_threshold``/``priority_timeout``
    -> 0 and ``max_ack_pending`` < -1 -> -1 (pedantic: 10157 instead); pull
    ``max_waiting`` 512; ``ack_wait`` 30s for ack explicit/all; ``backoff[0]``
    overrides ``ack_wait``; the stream's ``consumer_limits`` fill
    ``max_ack_pending``/``inactive_threshold``; ``max_ack_pending`` 1000 (or a
    lower server/account limit) unless ack none; pull ``max_batch`` from the
    server limit; ``priority_timeout`` 2m for pinned_client; ack
    ``flow_control`` forces ``flow_control`` and a 1s heartbeat (not pedantic).

    Not here (as in nats-server): the ephemeral ``inactive_threshold`` of 5s,
    applied by ``check_consumer_config`` after the checks.
    """
    cfg = clone_config(cfg)
    if existing is not None:
        cfg.pause_until = existing.pause_until
    set_static_metadata(cfg)

    def ped(text):
        return E.pedantic(text)

    if cfg.max_deliver == 0 or cfg.max_deliver < -1:
        if pedantic and cfg.max_deliver < -1:
            raise ped("max_deliver must be set to -1")
        cfg.max_deliver = -1
    for attr, text in (("max_waiting", "max_waiting must not be negative"),):
        if getattr(cfg, attr) < 0:
            if pedantic:
                raise ped(text)
            setattr(cfg, attr, 0)
    if cfg.max_ack_pending < -1:
        if pedantic:
            raise ped("max_ack_pending must be set to -1")
        cfg.max_ack_pending = -1
    for attr, json_name in (("max_batch", "max_batch"), ("max_expires", "max_expires"),
                            ("max_bytes", "max_bytes"), ("idle_heartbeat", "idle_heartbeat"),
                            ("inactive_threshold", "inactive_threshold"),
                            ("priority_timeout", "priority_timeout")):
        if getattr(cfg, attr) < 0:
            if pedantic:
                raise ped("%s must not be negative" % json_name)
            setattr(cfg, attr, 0)

    if not cfg.deliver_subject and cfg.max_waiting == 0:
        cfg.max_waiting = WAIT_QUEUE_DEFAULT_MAX
    if cfg.ack_wait == 0 and cfg.ack_policy in ("explicit", "all"):
        cfg.ack_wait = ACK_WAIT_DEFAULT
    if cfg.backoff:
        if pedantic and cfg.ack_wait != cfg.backoff[0]:
            raise ped("first backoff value has to equal batch AckWait")
        cfg.ack_wait = cfg.backoff[0]
    limits = stream_cfg.consumer_limits
    if cfg.max_ack_pending == 0:
        if pedantic and limits.max_ack_pending > 0:
            raise ped("max_ack_pending must be set if it's configured in stream limits")
        cfg.max_ack_pending = limits.max_ack_pending
    if cfg.inactive_threshold == 0:
        if pedantic and limits.inactive_threshold > 0:
            raise ped("inactive_threshold must be set if it's configured in stream limits")
        cfg.inactive_threshold = limits.inactive_threshold
    if cfg.max_ack_pending == 0 and cfg.ack_policy != "none":
        pending = DEFAULT_MAX_ACK_PENDING
        if 0 < server_max_ack_pending < pending:
            pending = server_max_ack_pending
        if 0 < account_max_ack_pending < pending:
            pending = account_max_ack_pending
        cfg.max_ack_pending = pending
    if not cfg.deliver_subject and cfg.max_batch == 0 and server_max_request_batch > 0:
        if pedantic:
            raise ped("max_request_batch must be set if it's JetStream limits are set")
        cfg.max_batch = server_max_request_batch
    if cfg.priority_policy == "pinned_client" and cfg.priority_timeout == 0:
        cfg.priority_timeout = DEFAULT_PINNED_TTL
    if cfg.ack_policy == "flow_control" and not pedantic:
        cfg.flow_control = True
        cfg.idle_heartbeat = FLOW_CONTROL_HEARTBEAT
    return cfg


# ---------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------

def _valid_name(name):
    return bool(name) and not any(c in name for c in _BAD_NAME_CHARS)


def go_atoi(text):
    """Go's ``strconv.Atoi``: ``(value, None)`` or ``(None, error text)``."""
    s = text
    if s[:1] in ("+", "-"):
        s = s[1:]
    if not s or not s.isascii() or not s.isdigit():
        return None, "strconv.Atoi: parsing %s: invalid syntax" % go_quote(text)
    v = int(text)
    if not -(1 << 63) <= v < (1 << 63):
        return None, "strconv.Atoi: parsing %s: value out of range" % go_quote(text)
    return v, None


def check_consumer_cfg(cfg, stream_cfg, *, recovering=False, server_max_ack_pending=0,
                       account_max_ack_pending=0, server_max_request_batch=0):
    """nats-server's ``checkConsumerCfg`` on a defaulted config, in its order.

    Names (500/10052), replicas (10126, 10133, 10134), backoff/ack wait
    negative (10184, 10183), ack flow_control rules (10218-10222, 10052),
    backoff vs ``max_deliver`` (10116), description (10107), push: deliver
    subject wildcards/invalid/cycle (10079, 10112, 10081), ``max_waiting``
    (10080), ``max_ack_pending`` with ack none (10082), heartbeat < 100ms
    (10083); pull: ack none on workqueue (10084), rate limit (10086),
    heartbeat (10088), flow control (10089), ``max_expires`` < 1ms (10115),
    ``max_batch`` limit (10125); ``max_ack_pending`` limits (10121),
    ``inactive_threshold`` limit (10153), direct (10090, 10091), filters
    (10136, 10052 "invalid subject", 10139, 10138), deliver policy vs start
    seq/time (10094), ``sample_freq`` (10095), flow control without heartbeat
    (10108), durable/name (10132), metadata size (10135), priority groups
    (10178, 10159, 10161, 10162, 10196, 10197).  Filters need not be subsets of
    the stream's subjects (nats-server 2.15 accepts ``zzz`` on a ``s.>`` stream).
    """
    if cfg.name and not _valid_name(cfg.name):
        raise E.stream_invalid_config("consumer name can not contain '.', '*', '>', '\\', '/'")
    if cfg.durable_name and not _valid_name(cfg.durable_name):
        raise E.stream_invalid_config(
            "consumer durable name can not contain '.', '*', '>', '\\', '/'")
    if cfg.num_replicas > 0 and cfg.num_replicas > stream_cfg.num_replicas:
        raise E.consumer_replicas_exceeds_stream()
    if cfg.num_replicas < 0:
        raise E.replicas_count_cannot_be_negative()
    if stream_cfg.retention in ("interest", "workqueue") and not recovering \
            and cfg.num_replicas != 0 and cfg.num_replicas != stream_cfg.num_replicas:
        raise E.consumer_replicas_should_match_stream()
    if cfg.ack_policy not in ACK_POLICIES:
        raise E.consumer_ack_policy_invalid()
    if cfg.replay_policy not in REPLAY_POLICIES:
        raise E.consumer_replay_policy_invalid()
    if any(b < 0 for b in cfg.backoff or ()):
        raise E.consumer_back_off_negative()
    if cfg.ack_wait < 0:
        raise E.consumer_ack_wait_negative()

    if cfg.ack_policy == "flow_control":
        if not cfg.deliver_subject:
            raise E.consumer_ack_fc_requires_push()
        if not cfg.flow_control:
            raise E.consumer_ack_fc_requires_fc()
        if cfg.idle_heartbeat != FLOW_CONTROL_HEARTBEAT:
            raise E.stream_invalid_config("flow control ack policy heartbeat needs to be 1s")
        if cfg.max_ack_pending <= 0:
            raise E.consumer_ack_fc_requires_max_ack_pending()
        if cfg.ack_wait != 0 or cfg.backoff:
            raise E.consumer_ack_fc_requires_no_ack_wait()
        if cfg.max_deliver > 0:
            raise E.consumer_ack_fc_requires_no_max_deliver()

    if cfg.backoff and cfg.max_deliver != -1 and len(cfg.backoff) > cfg.max_deliver:
        raise E.consumer_max_deliver_backoff()
    if len(cfg.description.encode("utf-8")) > JS_MAX_DESCRIPTION_LEN:
        raise E.consumer_description_too_long(JS_MAX_DESCRIPTION_LEN)

    if cfg.deliver_subject:
        if not SR.subject_is_literal(cfg.deliver_subject):
            raise E.consumer_deliver_to_wildcards()
        if not SR.subject_is_valid(cfg.deliver_subject):
            raise E.consumer_invalid_deliver_subject()
        if any(subject_is_subset_match(cfg.deliver_subject, s) for s in stream_cfg.subjects or ()):
            raise E.consumer_deliver_cycle()
        if cfg.max_waiting != 0:
            raise E.consumer_push_max_waiting()
        if cfg.max_ack_pending > 0 and cfg.ack_policy == "none":
            raise E.consumer_max_pending_ack_policy_required()
        if 0 < cfg.idle_heartbeat < MIN_HEARTBEAT:
            raise E.consumer_small_heartbeat()
    else:
        if cfg.ack_policy == "none" and stream_cfg.retention == "workqueue":
            raise E.consumer_pull_requires_ack()
        if cfg.rate_limit_bps > 0:
            raise E.consumer_pull_with_rate_limit()
        if cfg.max_waiting < 0:
            raise E.consumer_max_waiting_negative()
        if cfg.idle_heartbeat > 0:
            raise E.consumer_hb_requires_push()
        if cfg.flow_control:
            raise E.consumer_fc_requires_push()
        if cfg.max_batch < 0:
            raise E.consumer_max_request_batch_negative()
        if cfg.max_expires != 0 and cfg.max_expires < MIN_MAX_EXPIRES:
            raise E.consumer_max_request_expires_too_small()
        if server_max_request_batch > 0 and cfg.max_batch > server_max_request_batch:
            raise E.consumer_max_request_batch_exceeded(server_max_request_batch)
    if server_max_ack_pending > 0 and cfg.max_ack_pending > server_max_ack_pending:
        raise E.consumer_max_pending_ack_excess(server_max_ack_pending)
    if account_max_ack_pending > 0 and cfg.max_ack_pending > account_max_ack_pending:
        raise E.consumer_max_pending_ack_excess(account_max_ack_pending)
    limits = stream_cfg.consumer_limits
    if limits.max_ack_pending > 0 and cfg.max_ack_pending > limits.max_ack_pending:
        raise E.consumer_max_pending_ack_excess(limits.max_ack_pending)
    if limits.inactive_threshold > 0 and cfg.inactive_threshold > limits.inactive_threshold:
        raise E.consumer_inactive_threshold_excess(go_duration(limits.inactive_threshold))

    if cfg.direct:
        if not cfg.deliver_subject:
            raise E.consumer_direct_requires_push()
        if cfg.durable_name:
            raise E.consumer_direct_requires_ephemeral()

    if cfg.filter_subject and cfg.filter_subjects:
        raise E.consumer_duplicate_filter_subjects()
    if cfg.filter_subject and not SR.subject_is_valid(cfg.filter_subject):
        raise E.stream_invalid_config("invalid subject")
    if any(f == "" for f in cfg.filter_subjects or ()):
        raise E.consumer_empty_filter()
    filters = cfg.filters
    for i, subj in enumerate(filters):
        if not SR.subject_is_valid(subj):
            raise E.stream_invalid_config("invalid subject")
        for j, other in enumerate(filters):
            if i != j and subject_is_subset_match(subj, other):
                raise E.consumer_overlapping_subject_filters()

    _check_start(cfg)

    if cfg.sample_freq:
        s = cfg.sample_freq[:-1] if cfg.sample_freq.endswith("%") else cfg.sample_freq
        value, err = go_atoi(s)
        if err is not None or value < 0:
            raise E.consumer_invalid_sampling(err if err is not None else "<nil>")

    if cfg.flow_control and cfg.idle_heartbeat == 0:
        raise E.consumer_with_flow_control_needs_heartbeats()
    if cfg.durable_name and cfg.name and cfg.name != cfg.durable_name:
        raise E.consumer_create_durable_and_name_mismatch()
    meta_len = sum(len(k.encode("utf-8")) + len(v.encode("utf-8"))
                   for k, v in (cfg.metadata or {}).items())
    if meta_len > JS_MAX_METADATA_LEN:
        raise E.consumer_metadata_length("%dKB" % (JS_MAX_METADATA_LEN // 1024))

    if cfg.priority_policy != "none":
        if cfg.deliver_subject:
            raise E.consumer_push_with_priority_group()
        if not cfg.priority_groups:
            raise E.consumer_priority_policy_without_group()
        for group in cfg.priority_groups:
            if group == "":
                raise E.consumer_empty_group_name()
            if not GROUP_NAME.match(group):
                raise E.consumer_invalid_group_name()
    else:
        if cfg.priority_groups:
            raise E.consumer_priority_group_with_policy_none()
        if cfg.priority_timeout > 0:
            raise E.consumer_pinned_ttl_without_priority_policy_none()

    placement = getattr(stream_cfg, "placement", None)
    if placement is not None and placement.preferred:
        raise E.stream_invalid_config("preferred server not permitted in placement")


def _check_start(cfg):
    def bad(dp, start):
        return E.consumer_invalid_policy(
            "consumer delivery policy is deliver %s, but optional start %s is also set" % (dp, start))

    def not_set(dp, what):
        return E.consumer_invalid_policy(
            "consumer delivery policy is deliver %s, but optional %s is not set" % (dp, what))

    dp, seq, t = cfg.deliver_policy, cfg.opt_start_seq, cfg.opt_start_time
    names = {"all": "all", "last": "last", "last_per_subject": "last per subject", "new": "new"}
    if dp in names:
        if seq > 0:
            raise bad(names[dp], "sequence")
        if t is not None:
            raise bad(names[dp], "time")
        if dp == "last_per_subject" and not cfg.filters:
            raise not_set("last per subject", "filter subject")
    elif dp == "by_start_sequence":
        if seq == 0:
            raise not_set("by start sequence", "start sequence")
        if t is not None:
            raise bad("by start sequence", "time")
    elif dp == "by_start_time":
        if t is None:
            raise not_set("by start time", "start time")
        if seq != 0:
            raise bad("by start time", "start sequence")


def _limitable(consumers):
    """The consumers nats-server counts and partitions (not direct, not sourcing)."""
    return {n: c for n, c in consumers.items() if not c.direct and not c.sourcing}


def _partition_unique(name, filters, consumers):
    for subj in filters:
        for n, other in _limitable(consumers).items():
            if n == name:
                continue
            ofilters = other.filters
            if not ofilters:
                return False
            if any(subjects_collide(subj, f) for f in ofilters):
                return False
    return True


def check_consumer_update(old, new, *, deliver_subject_has_interest=False):
    """nats-server's ``checkNewConsumerConfig`` + ``updateConfig``: may the stored
    config ``old`` become ``new`` (defaulted and checked)?  Returns the config to
    store (``pause_until`` in UTC, an ephemeral's ``inactive_threshold`` 5s).

    Raises 500/10012 with nats-server's text for: deliver policy, storage type,
    direct, sourcing, start sequence, start time, ack policy, replay policy,
    heart beats, flow control, pull <-> push, max waiting; 10013 if the push
    deliver subject changes while it has interest; 10116 backoff vs max deliver.
    Everything else (description, ack wait, max deliver, backoff, filters,
    max ack pending, rate limit, sample freq, headers only, limits, metadata,
    inactive threshold, deliver subject/group of a push consumer...) may change.
    """
    if old != new:
        checks = (
            (old.deliver_policy != new.deliver_policy, "deliver policy can not be updated"),
            (old.mem_storage != new.mem_storage, "storage type can not be updated"),
            (old.direct != new.direct, "direct can not be updated"),
            (old.sourcing != new.sourcing, "sourcing can not be updated"),
            (old.opt_start_seq != new.opt_start_seq, "start sequence can not be updated"),
            (_start_time_changed(old.opt_start_time, new.opt_start_time),
             "start time can not be updated"),
            (old.ack_policy != new.ack_policy, "ack policy can not be updated"),
            (old.replay_policy != new.replay_policy, "replay policy can not be updated"),
            (old.idle_heartbeat != new.idle_heartbeat, "heart beats can not be updated"),
            (old.flow_control != new.flow_control, "flow control can not be updated"),
        )
        for failed, text in checks:
            if failed:
                raise E.consumer_create(text)
        if old.deliver_subject != new.deliver_subject:
            if not old.deliver_subject:
                raise E.consumer_create("can not update pull consumer to push based")
            if not new.deliver_subject:
                raise E.consumer_create("can not update push consumer to pull based")
            if deliver_subject_has_interest:
                raise E.consumer_name_exist()
        if old.max_waiting != new.max_waiting:
            raise E.consumer_create("max waiting can not be updated")
        if new.backoff and new.max_deliver != -1 and len(new.backoff) > new.max_deliver:
            raise E.consumer_max_deliver_backoff()
    cfg = clone_config(new)
    if cfg.pause_until is not None:
        cfg.pause_until = rfc3339(parse_time_ns(cfg.pause_until), zero_is_unset=False)
    return _finalise(cfg)


def _start_time_changed(a, b):
    if a is not None and b is not None:
        return parse_time_ns(a) != parse_time_ns(b)
    return (a is None) != (b is None)


def _finalise(cfg):
    # updateInactiveThreshold: ephemerals always get one (5s, stamped sans jitter).
    if not cfg.durable_name and cfg.inactive_threshold <= 0:
        cfg.inactive_threshold = EPHEMERAL_INACTIVE_THRESHOLD
    return cfg


def check_consumer_config(cfg, stream_cfg, action=ACTION_CREATE_OR_UPDATE, *, consumers=None,
                          clustered=False, recovering=False, max_consumers=0,
                          deliver_subject_has_interest=False, server_max_ack_pending=0,
                          account_max_ack_pending=0, server_max_request_batch=0):
    """``checkConsumerCfg`` then the rest of nats-server's ``addConsumer``, in order.

    ``cfg``: a ``fill_consumer_defaults`` result; ``stream_cfg``: the stream's
    (defaulted) ``StreamConfig``; ``consumers``: ``{name: stored ConsumerConfig}``
    of the stream (``max_consumers``: the account limit, 0 = none).  After
    ``check_consumer_cfg``: an existing consumer of that name (durable, else
    ``name``) -> action create with a different config 10148, workqueue
    partition clash 10100, else ``check_consumer_update``; action update of a
    missing consumer 10149; consumer limit 10026; workqueue stream (unless
    direct/sourcing): ack not explicit/flow_control 10098, not deliver all
    10101, another unfiltered consumer 10099, overlapping filters 10100;
    durable longer than 255 bytes 10102; a file-backed ephemeral name longer
    than 255 bytes 500/10012 "error creating store for consumer".

    Returns the config to store (an ephemeral gets ``inactive_threshold`` 5s).
    A legacy ephemeral without ``name`` is stored without one; its name is
    generated by the caller (``new_consumer_name``).
    """
    check_consumer_cfg(cfg, stream_cfg, recovering=recovering,
                       server_max_ack_pending=server_max_ack_pending,
                       account_max_ack_pending=account_max_ack_pending,
                       server_max_request_batch=server_max_request_batch)
    consumers = consumers or {}
    cname = cfg.durable_name or cfg.name
    workqueue = stream_cfg.retention == "workqueue"
    existing = consumers.get(cname) if cname else None
    if existing is not None:
        if action == ACTION_CREATE and _copy_metadata(clone_config(cfg), existing) != existing:
            raise E.consumer_already_exists()
        if workqueue and not _partition_unique(cname, cfg.filters, consumers):
            raise E.consumer_wq_consumer_not_unique()
        return check_consumer_update(existing, cfg,
                                     deliver_subject_has_interest=deliver_subject_has_interest)
    if action == ACTION_UPDATE:
        raise E.consumer_does_not_exist()

    limitable = _limitable(consumers)
    if not clustered and not recovering:
        maxc = stream_cfg.max_consumers
        if maxc <= 0 or (0 < max_consumers < maxc):
            maxc = max_consumers
        if maxc > 0 and len(limitable) >= maxc:
            raise E.maximum_consumers_limit()
    if workqueue and not cfg.direct and not cfg.sourcing:
        if cfg.ack_policy not in ("explicit", "flow_control"):
            raise E.consumer_wq_requires_explicit_ack()
        if cfg.deliver_policy != "all":
            raise E.consumer_wq_consumer_not_deliver_all()
        if limitable:
            if not cfg.filters:
                raise E.consumer_wq_multiple_unfiltered()
            if not _partition_unique(cname, cfg.filters, consumers):
                raise E.consumer_wq_consumer_not_unique()
    if cfg.durable_name and len(cfg.durable_name.encode("utf-8")) > JS_MAX_NAME_LEN:
        raise E.consumer_name_too_long(JS_MAX_NAME_LEN)
    if cname and not _valid_name(cname):
        raise E.consumer_bad_durable_name()
    file_store = not cfg.mem_storage and getattr(stream_cfg, "storage", "file") == "file"
    if file_store and not cfg.direct and len(cname.encode("utf-8")) > MAX_FILE_NAME:
        raise E.consumer_create("error creating store for consumer")
    return _finalise(clone_config(cfg))


def process_consumer_create(subject, raw, stream_cfg, consumers=None, *, clustered=False, **limits):
    """The whole consumer-create path for one request, as nats-server standalone.

    ``stream_cfg``: the stream's ``StreamConfig`` or ``None`` (-> 10059);
    ``consumers``: ``{name: stored ConsumerConfig}``; ``limits``: the keyword
    limits of ``check_consumer_config``.  Returns the config to store (the
    consumer's name is ``durable_name or name``, else generate one), ``None``
    if nats-server does not answer that subject; raises ``ApiError``.
    """
    where = parse_create_subject(subject)
    if where is None:
        return None
    stream, cname, filt, legacy_durable = where
    req = parse_consumer_request(raw, stream, cname, filt, legacy_durable=legacy_durable,
                                 clustered=clustered)
    if stream_cfg is None:
        raise E.stream_not_found()
    consumers = consumers or {}
    key = req.config.durable_name or req.config.name
    existing = consumers.get(key) if key else None
    fill_kw = {k: v for k, v in limits.items()
               if k in ("server_max_ack_pending", "account_max_ack_pending",
                        "server_max_request_batch")}
    cfg = fill_consumer_defaults(req.config, stream_cfg, pedantic=req.pedantic, existing=existing,
                                 **fill_kw)
    return check_consumer_config(cfg, stream_cfg, req.action, consumers=consumers,
                                 clustered=clustered, **limits)


_NAME_CHARS = string.ascii_letters + string.digits


def new_consumer_name(taken=()):
    """A generated ephemeral name like nats-server's (8 alphanumerics)."""
    while True:
        name = "".join(random.choice(_NAME_CHARS) for _ in range(8))
        if name not in taken:
            return name


__all__ = [name for name in dir() if not name.startswith("_") and name not in (
    "random", "string", "E", "SR", "marshal")]
