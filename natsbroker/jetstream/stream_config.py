"""A stream's configuration checked as nats-server checks it (2.15.1).

Every check was compared with the real server (``-js``): the defaults
``checkStreamCfg`` fills in, the validation errors (code, err_code and exact
description) and the update rules.  In nats-server's order::

    cfg = parse_stream_config(body, subject_name)   # JSON + create-time checks
    limits.precheck_create(...)                      # stream count, limits as sent (10027...)
    cfg = fill_defaults(cfg, lookup=..., account_limits=...)  # checkStreamCfg (10113/10122 too)
    check_create(cfg)                                # replicas > 1 standalone (10074)
    ... existing stream with a different config -> stream_name_exist() (10058)
    limits.check_create(...)                         # 10026 / 10028 / 10047
    ... subjects overlap another stream         -> stream_subject_overlap() (10065)

and for STREAM.UPDATE::

    cfg = parse_stream_config(body, subject_name, update=True)
    ... stream missing -> stream_not_found()
    cfg = check_update(old_cfg, fill_defaults(cfg))  # returns the config to store
"""

import attrs

from natsbroker.gocompat.durations import format_duration as go_duration
from natsbroker.gocompat.quote import go_quote
from natsbroker.gocompat.times import NS_PER_SEC
from natsbroker.jetstream import errors as E
from natsbroker.jetstream.limits import check_max_bytes
from natsbroker.jetstream.marshal import converter, decode_request
from natsbroker.jetstream.stream_models import (
    COMPRESSIONS,
    DEFAULT_DUPLICATE_WINDOW,
    DISCARD_POLICIES,
    JS_MAX_DESCRIPTION_LEN,
    JS_MAX_METADATA_LEN,
    JS_MAX_NAME_LEN,
    RETENTION_POLICIES,
    STORAGE_TYPES,
    STREAM_MAX_REPLICAS,
    Placement,
    StreamConfig,
    config_required_level,
)
from natsbroker.jetstream.subject_rules import (
    is_valid_name,
    subject_is_valid,
    subject_is_valid_literal,
    subject_transform_error,
    validate_mapping,
)
from natsbroker.jetstream.versions import META_REQUIRED_LEVEL, META_SERVER_LEVEL, META_SERVER_VERSION
from natsbroker.subjects.sublist import subject_is_subset_match, subjects_collide


def parse_stream_config(raw, subject_name=None, *, update=False, lookup=None, account_limits=None):
    """Decode a STREAM.CREATE/UPDATE body and run the checks nats-server runs
    before ``checkStreamCfg`` (create) or around it (update).

    Create (``update=False``), in order: JSON (10025), name vs. the name in
    the subject (10056, only if ``subject_name`` is given), ``/`` or ``\\`` in
    the name (10128), ``sealed`` (10052 "stream configuration for create can
    not be sealed"), ``mirror_direct`` without a mirror (10052).

    Update: JSON, then the whole ``checkStreamCfg`` (so an empty body is 10052
    "stream name is required...", not 10056), then the name check (10056).

    Returns the config as sent (not defaulted); ``cfg.pedantic`` carries the
    request's ``pedantic`` flag.  With no ``subject_name`` only the JSON is
    checked (e.g. loading a stored config).
    """
    cfg = decode_request(raw, StreamConfig)
    if subject_name is None:
        return cfg
    if update:
        fill_defaults(cfg, lookup=lookup, account_limits=account_limits)
        if cfg.name != subject_name:
            raise E.stream_mismatch()
        return cfg
    if cfg.name != subject_name:
        raise E.stream_mismatch()
    if "/" in subject_name or "\\" in subject_name:
        raise E.stream_name_contains_path_separators()
    if cfg.sealed:
        raise E.stream_invalid_config("stream configuration for create can not be sealed")
    if cfg.mirror_direct and cfg.mirror is None:
        raise E.stream_invalid_config("stream has no mirror but does have mirror direct")
    return cfg


def _clone(cfg):
    return converter.structure(_clone_dict(cfg), StreamConfig)


def _clone_dict(obj):
    if attrs.has(type(obj)):
        return {f.name: _clone_dict(getattr(obj, f.name)) for f in attrs.fields(type(obj))}
    if isinstance(obj, list):
        return [_clone_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: _clone_dict(v) for k, v in obj.items()}
    return obj


def fill_defaults(cfg, *, lookup=None, pedantic=None, max_duplicate_window=0, account_limits=None):
    """nats-server's ``checkStreamCfg``: validate and return a defaulted copy.

    Defaults: ``subjects`` -> ``[name]`` (no mirror/sources); ``storage`` file;
    ``num_replicas`` 1; ``max_msgs``, ``max_bytes``, ``max_msgs_per_subject``,
    ``max_msg_size``, ``max_consumers`` -> -1 when 0 or below -1;
    ``duplicate_window`` 2m (or ``max_age`` if shorter; not for mirrors and
    sourcing streams); ``subject_delete_marker_ttl`` turns on ``allow_msg_ttl``
    and roll-ups, ``allow_msg_schedules`` turns on roll-ups (and off
    ``deny_purge``); an empty ``placement`` is dropped; ``republish.src``
    defaults to ``>``; ``metadata`` gets ``_nats.req.level`` and loses the
    dynamic ``_nats.ver``/``_nats.level`` (added back by ``stream_config_json``).

    Raises the ``ApiError`` nats-server raises (mostly 500/10052 with its
    text; pedantic mode 10157).  ``lookup(name) -> StreamConfig | None`` lets
    mirror/source checks see existing streams (mirror inherits
    ``allow_direct`` as ``mirror_direct``; max message sizes; cycles).
    ``account_limits`` (an ``AccountJetStream``): the account's
    ``max_bytes_required`` (10113) and per-stream maximum (10122), checked
    where nats-server checks them (after the subjects).
    """
    if pedantic is None:
        pedantic = cfg.pedantic
    lookup = lookup or (lambda name: None)
    if not is_valid_name(cfg.name):
        raise E.stream_invalid_config(
            "stream name is required and can not contain '.', '*', '>', '\\', '/'")
    if len(cfg.name.encode("utf-8")) > JS_MAX_NAME_LEN:
        raise E.stream_invalid_config(
            "stream name is too long, maximum allowed is %d" % JS_MAX_NAME_LEN)
    if len(cfg.description.encode("utf-8")) > JS_MAX_DESCRIPTION_LEN:
        raise E.stream_invalid_config(
            "stream description is too long, maximum allowed is %d" % JS_MAX_DESCRIPTION_LEN)
    meta_len = sum(len(k.encode("utf-8")) + len(v.encode("utf-8"))
                   for k, v in (cfg.metadata or {}).items())
    if meta_len > JS_MAX_METADATA_LEN:
        raise E.stream_invalid_config(
            "stream metadata exceeds maximum size of %d bytes" % JS_MAX_METADATA_LEN)

    cfg = _clone(cfg)
    cfg.pedantic = pedantic
    if cfg.retention not in RETENTION_POLICIES:
        raise E.stream_invalid_config("invalid retention")
    if cfg.discard not in DISCARD_POLICIES:
        raise E.stream_invalid_config("invalid discard policy")
    if cfg.compression not in COMPRESSIONS:
        raise E.stream_invalid_config("invalid compression")
    if not cfg.storage:
        cfg.storage = "file"
    if cfg.storage not in STORAGE_TYPES:
        raise E.stream_invalid_config("invalid storage type")

    if cfg.num_replicas == 0:
        cfg.num_replicas = 1
    if cfg.num_replicas > STREAM_MAX_REPLICAS:
        raise E.stream_invalid_config("maximum replicas is %d" % STREAM_MAX_REPLICAS)
    if cfg.num_replicas < 0:
        raise E.replicas_count_cannot_be_negative()
    for name in ("max_msgs", "max_msgs_per_subject", "max_bytes", "max_msg_size", "max_consumers"):
        v = getattr(cfg, name)
        if v == 0 or v < -1:
            if pedantic and v < -1:
                raise E.pedantic("%s must be set to -1" % name)
            setattr(cfg, name, -1)
    if cfg.max_age < 0:
        raise E.stream_invalid_config("max age can not be negative")
    if cfg.max_age != 0 and cfg.max_age < NS_PER_SEC // 10:
        raise E.stream_invalid_config("max age needs to be >= 100ms")

    if cfg.duplicate_window == 0 and cfg.mirror is None and not cfg.sources:
        max_window = DEFAULT_DUPLICATE_WINDOW
        if max_duplicate_window > 0 and max_window > max_duplicate_window:
            if pedantic:
                raise E.pedantic("duplicate window limits are higher than current limits")
            max_window = max_duplicate_window
        if cfg.max_age != 0 and cfg.max_age < max_window:
            if pedantic:
                raise E.pedantic("duplicate window cannot be bigger than max age")
            cfg.duplicate_window = cfg.max_age
        else:
            cfg.duplicate_window = max_window
    if cfg.duplicate_window < 0:
        raise E.stream_invalid_config("duplicates window can not be negative")
    if cfg.max_age != 0 and cfg.duplicate_window > cfg.max_age:
        raise E.stream_invalid_config("duplicates window can not be larger then max age")
    if max_duplicate_window > 0 and cfg.duplicate_window > max_duplicate_window:
        raise E.stream_invalid_config("duplicates window can not be larger then server limit of %s"
                                      % go_duration(max_duplicate_window))
    if 0 < cfg.duplicate_window < NS_PER_SEC // 10:
        raise E.stream_invalid_config("duplicates window needs to be >= 100ms")

    if cfg.deny_purge and cfg.allow_rollup_hdrs:
        raise E.stream_invalid_config("roll-ups require the purge permission")

    if cfg.allow_msg_counter:
        if cfg.discard == "new":
            raise E.stream_invalid_config("counter stream cannot use discard new")
        if cfg.allow_msg_ttl:
            raise E.stream_invalid_config("counter stream cannot use message TTLs")
        if cfg.allow_msg_schedules:
            raise E.stream_invalid_config("counter stream cannot use message schedules")
        if cfg.retention != "limits":
            raise E.stream_invalid_config("counter stream can only use limits retention")

    if cfg.discard_new_per_subject:
        if cfg.discard != "new":
            raise E.stream_invalid_config(
                "discard new per subject requires discard new policy to be set")
        if cfg.max_msgs_per_subject <= 0:
            raise E.stream_invalid_config(
                "discard new per subject requires max msgs per subject > 0")

    if cfg.subject_delete_marker_ttl > 0:
        if cfg.subject_delete_marker_ttl < NS_PER_SEC:
            raise E.stream_invalid_config("subject delete marker TTL must be at least 1 second")
        if not cfg.allow_msg_ttl:
            if pedantic:
                raise E.stream_invalid_config(
                    "subject delete marker cannot be set if message TTLs are disabled")
            cfg.allow_msg_ttl = True
        if not cfg.allow_rollup_hdrs:
            if pedantic:
                raise E.stream_invalid_config(
                    "subject delete marker cannot be set if roll-ups are disabled")
            cfg.allow_rollup_hdrs, cfg.deny_purge = True, False
    elif cfg.subject_delete_marker_ttl < 0:
        raise E.stream_invalid_config("subject delete marker TTL must not be negative")

    if cfg.allow_msg_schedules:
        if cfg.discard == "new":
            raise E.stream_invalid_config("message scheduling cannot use discard new")
        if not cfg.allow_rollup_hdrs:
            if pedantic:
                raise E.stream_invalid_config(
                    "message scheduling cannot be set if roll-ups are disabled")
            cfg.allow_rollup_hdrs, cfg.deny_purge = True, False

    if cfg.persist_mode == "async":
        if cfg.storage != "file":
            raise E.stream_invalid_config("async persist mode is only supported on file storage")
        if cfg.num_replicas > 1:
            raise E.stream_invalid_config(
                "async persist mode is not supported on replicated streams")
        if cfg.allow_atomic:
            raise E.stream_invalid_config(
                "async persist mode is not supported with atomic batch publish")

    _check_mirror_and_sources(cfg, lookup, pedantic)

    if not cfg.subjects:
        if cfg.mirror is None and not cfg.sources:
            cfg.subjects = [cfg.name]
    else:
        if cfg.mirror is not None:
            raise E.mirror_with_subjects()
        seen = set()
        for i, subj in enumerate(cfg.subjects):
            if not subject_is_valid(subj):
                raise E.stream_invalid_config("invalid subject")
            if subj in seen:
                raise E.stream_invalid_config("duplicate subjects detected")
            if subj == ">":
                if not cfg.no_ack:
                    raise E.stream_invalid_config("capturing all subjects requires no-ack to be true")
                if cfg.num_replicas != 1:
                    raise E.stream_invalid_config("capturing all subjects requires replicas of 1")
            if not cfg.no_ack:
                for ns in ("$JS.>", "$JSC.>", "$NRG.>"):
                    if subjects_collide(subj, ns) and not subject_is_subset_match(subj, "$JS.EVENT.>"):
                        raise E.stream_invalid_config(
                            "subjects that overlap with jetstream api require no-ack to be true")
                if subjects_collide(subj, "$SYS.>") and not subject_is_subset_match(subj, "$SYS.ACCOUNT.>"):
                    raise E.stream_invalid_config(
                        "subjects that overlap with system api require no-ack to be true")
            for other in cfg.subjects[i + 1:]:
                if subjects_collide(other, subj):
                    raise E.stream_invalid_config(
                        "subject %s overlaps with %s" % (go_quote(subj), go_quote(other)))
            seen.add(subj)

    if not cfg.subjects and not cfg.sources and cfg.mirror is None:
        raise E.stream_invalid_config(
            "stream needs at least one configured subject or be a source/mirror")

    if account_limits is not None:
        check_max_bytes(account_limits, cfg)

    if cfg.subject_transform is not None:
        st = cfg.subject_transform
        if st.src and not subject_is_valid(st.src):
            raise E.stream_transform_invalid_source("invalid subject " + st.src)
        err = validate_mapping(st.src, st.dest)
        if err:
            raise E.stream_transform_invalid_destination(err)

    if cfg.republish is not None:
        rp = cfg.republish
        if not rp.src:
            if pedantic:
                raise E.pedantic("republish source can not be empty")
            rp.src = ">"
        if (rp.dest == ">" and rp.src == ">" and cfg.subject_transform is not None
                and len(cfg.subjects or ()) == 1 and cfg.subject_transform.src == cfg.subjects[0]):
            if pedantic:
                raise E.pedantic("implicit republish based on subject transform")
            rp.src = rp.dest = cfg.subject_transform.dest
        if any(subjects_collide(rp.dest, s) for s in cfg.subjects or ()):
            raise E.stream_invalid_config(
                "stream configuration for republish destination forms a cycle")
        if subject_transform_error(rp.src, rp.dest):
            raise E.stream_invalid_config(
                "stream configuration for republish with transform from '%s' to '%s' not valid"
                % (rp.src, rp.dest))

    if cfg.placement is not None and cfg.placement == Placement():
        cfg.placement = None
    if cfg.placement is not None and cfg.placement.preferred:
        raise E.stream_invalid_config("preferred server not permitted in placement")

    # setStaticStreamMetadata: the dynamic keys are only ever added to replies.
    meta = dict(cfg.metadata or {})
    meta.pop(META_SERVER_VERSION, None)
    meta.pop(META_SERVER_LEVEL, None)
    meta[META_REQUIRED_LEVEL] = str(config_required_level(cfg))
    cfg.metadata = meta
    return cfg


def _check_mirror_and_sources(cfg, lookup, pedantic):
    stream_subs, delivery_prefixes, api_prefixes = [], [], []
    m = cfg.mirror
    if m is not None:
        if cfg.first_seq > 0:
            raise E.mirror_with_first_seq()
        if cfg.subjects:
            raise E.mirror_with_subjects()
        if cfg.sources:
            raise E.mirror_with_sources()
        if cfg.allow_msg_counter:
            raise E.mirror_with_counters()
        if cfg.allow_atomic:
            raise E.mirror_with_atomic_publish()
        if cfg.allow_batched:
            raise E.mirror_with_batch_publish()
        if cfg.allow_msg_schedules:
            raise E.mirror_with_msg_schedules()
        if m.consumer is not None:
            c = m.consumer
            if (not is_valid_name(c.name) or not subject_is_valid_literal(c.deliver_subject)
                    or m.opt_start_seq or m.opt_start_time is not None or m.filter_subject):
                raise E.mirror_durable_consumer_cfg_invalid()
        if m.filter_subject and m.subject_transforms:
            raise E.mirror_multiple_filters_not_allowed()
        if cfg.subject_delete_marker_ttl > 0:
            raise E.stream_invalid_config("subject delete markers forbidden on mirrors")
        for i, tr in enumerate(m.subject_transforms or ()):
            if tr.src and not subject_is_valid(tr.src):
                raise E.mirror_invalid_subject_filter("invalid subject " + tr.src)
            err = validate_mapping(tr.src, tr.dest)
            if err:
                raise E.mirror_invalid_transform_destination(err)
            for j, other in enumerate(m.subject_transforms):
                if i != j and subjects_collide(tr.src, other.src):
                    raise E.mirror_overlapping_subject_filters()
        if m.external is None:
            if not is_valid_name(m.name):
                raise E.mirror_invalid_stream_name()
            origin = lookup(m.name)
            if origin is not None:
                stream_subs.extend(origin.subjects or ())
                if cfg.max_msg_size > 0 and origin.max_msg_size > 0 \
                        and cfg.max_msg_size < origin.max_msg_size:
                    raise E.mirror_max_message_size_too_big()
                if pedantic and cfg.mirror_direct != origin.allow_direct:
                    raise E.pedantic("origin stream has direct get set, mirror has it disabled")
                cfg.mirror_direct = origin.allow_direct
        else:
            if m.external.deliver:
                delivery_prefixes.append(m.external.deliver)
            if m.external.api:
                api_prefixes.append(m.external.api)

    if cfg.sources and cfg.allow_msg_schedules:
        raise E.source_with_msg_schedules()
    inames, cnames = set(), set()
    for src in cfg.sources or ():
        if src is None or not is_valid_name(src.name):
            raise E.source_invalid_stream_name()
        iname = _source_iname(src)
        if iname in inames:
            raise E.source_duplicate_detected()
        inames.add(iname)
        if src.filter_subject and src.subject_transforms:
            raise E.source_multiple_filters_not_allowed()
        for tr in src.subject_transforms or ():
            if tr.src and not subject_is_valid(tr.src):
                raise E.source_invalid_subject_filter("invalid subject " + tr.src)
            err = validate_mapping(tr.src, tr.dest)
            if err:
                raise E.source_invalid_transform_destination(err)
        trs = src.subject_transforms or ()
        for i, tr in enumerate(trs):
            for j, other in enumerate(trs):
                if i != j and subject_is_subset_match(tr.src, other.src):
                    raise E.source_overlapping_subject_filters()
        if src.consumer is not None:
            c = src.consumer
            if (not is_valid_name(c.name) or not subject_is_valid_literal(c.deliver_subject)
                    or src.opt_start_seq or src.opt_start_time is not None or src.filter_subject):
                raise E.source_durable_consumer_cfg_invalid()
            cname = (src.name, c.name)
            if cname in cnames:
                raise E.source_durable_consumer_duplicate_detected()
            cnames.add(cname)
        if src.external is None:
            origin = lookup(src.name)
            if origin is not None:
                stream_subs.extend(origin.subjects or ())
                if cfg.max_msg_size > 0 and origin.max_msg_size > 0 \
                        and cfg.max_msg_size < origin.max_msg_size:
                    raise E.source_max_message_size_too_big()
        else:
            if src.external.deliver:
                delivery_prefixes.append(src.external.deliver)
            if src.external.api:
                api_prefixes.append(src.external.api)

    for pfx in delivery_prefixes:
        if not subject_is_valid_literal(pfx):
            raise E.stream_invalid_external_delivery_subj(pfx)
        for sub in stream_subs:
            if subjects_collide(sub, "%s.%s" % (pfx, sub)):
                raise E.stream_external_del_prefix_overlaps(pfx, sub)
    for pfx in api_prefixes:
        if not subject_is_valid_literal(pfx):
            raise E.stream_invalid_config(
                "stream external api prefix %s must be a valid subject without wildcards"
                % go_quote(pfx))
        if subjects_collide(pfx, "$JS.API"):
            raise E.stream_external_api_overlap(pfx, "$JS.API")

    # Cycles through sources and mirrors of streams we can see.
    to_visit, visited = [cfg], set()
    while to_visit:
        c = to_visit.pop(0)
        visited.add(c.name)
        for src in c.sources or ():
            if src is None or src.external is not None:
                continue
            if src.name in visited:
                if not src.filter_subject or any(subjects_collide(s, src.filter_subject)
                                                 for s in c.subjects or ()):
                    raise E.stream_invalid_config("detected cycle")
            else:
                other = lookup(src.name)
                if other is not None:
                    to_visit.append(other)
        if c.mirror is not None and c.mirror.external is None:
            if c.mirror.name in visited:
                raise E.stream_invalid_config("detected cycle")
            other = lookup(c.mirror.name)
            if other is not None:
                to_visit.append(other)


def _source_iname(src):
    # composeIName: name, external api, filter and transforms identify a source.
    parts = [src.name]
    if src.external is not None:
        parts.append(src.external.api)
    parts.append(src.filter_subject)
    for tr in src.subject_transforms or ():
        parts.append(tr.src + ">" + tr.dest)
    return " ".join(parts)


def check_create(cfg, *, clustered=False):
    """What nats-server's ``addStream`` checks after ``checkStreamCfg``, before
    comparing with an existing stream: ``num_replicas`` > 1 on a standalone
    server is 500/10074 "replicas > 1 not supported in non-clustered mode"."""
    if not clustered and cfg.num_replicas > 1:
        raise E.stream_replicas_not_supported()


def check_resources(cfg, *, max_memory=-1, max_storage=-1, reserved_memory=0, reserved_storage=0):
    """nats-server's ``checkBytesLimits`` for a new stream: does its ``max_bytes``
    (at least 1 byte when unlimited) still fit next to what other streams of the
    same storage type reserve (``reserved_*``: the sum of their positive
    ``max_bytes``)?  ``max_memory``/``max_storage``: the JetStream limits, -1 for
    none.  Raises 500/10028 "insufficient memory resources available" or
    500/10047 "insufficient storage resources available".

    On create nats-server checks, in order: ``fill_defaults``, ``check_create``
    (10074), an existing stream of that name (10058 unless identical), this, and
    then subject overlap with other streams (10065).
    """
    add = cfg.max_bytes * max(cfg.num_replicas, 1) if cfg.max_bytes > 0 else 1
    if cfg.storage == "memory":
        if max_memory >= 0 and reserved_memory + add > max_memory:
            raise E.memory_resources_exceeded()
    elif max_storage >= 0 and reserved_storage + add > max_storage:
        raise E.storage_resources_exceeded()


def check_update(old, new, *, clustered=False):
    """nats-server's ``configUpdateCheck`` after ``checkStreamCfg``.

    ``old`` is the stored config, ``new`` the defaulted request
    (``fill_defaults``).  Returns the config to store -- sealing a stream also
    sets ``max_age`` 0, ``discard`` new, ``deny_delete``/``deny_purge`` and
    clears ``allow_rollup_hdrs``, so use the return value.  Raises, in this
    order: name changed, replicas > 1 standalone (10074), storage, retention
    to/from workqueue, unseal, cancel deny delete, cancel deny purge, mirror
    changed (10055), discard new per subject preconditions, message TTLs
    disabled, counter setting changed, schedules disabled, persist mode
    changed -- all 500/10052 with nats-server's text unless noted.  Allowed:
    limits, subjects, description, metadata, discard, retention limits <->
    interest, compression, sources, first_seq, allow_direct, removing the
    mirror (promotion), turning deny_* / sealed on...
    """
    cfg = _clone(new)
    if cfg.name != old.name:
        raise E.stream_invalid_config("stream configuration name must match original")
    if not clustered and cfg.num_replicas > 1:
        raise E.stream_replicas_not_supported()
    if cfg.storage != old.storage:
        raise E.stream_invalid_config("stream configuration update can not change storage type")
    if cfg.retention != old.retention and "workqueue" in (cfg.retention, old.retention):
        raise E.stream_invalid_config(
            "stream configuration update can not change retention policy to/from workqueue")
    if not cfg.sealed and old.sealed:
        raise E.stream_invalid_config("stream configuration update can not unseal a sealed stream")
    if not cfg.deny_delete and old.deny_delete:
        raise E.stream_invalid_config(
            "stream configuration update can not cancel deny message deletes")
    if not cfg.deny_purge and old.deny_purge:
        raise E.stream_invalid_config("stream configuration update can not cancel deny purge")
    if cfg.mirror is not None and cfg.mirror != old.mirror:
        raise E.stream_mirror_not_updatable()
    if cfg.discard_new_per_subject:
        if cfg.discard != "new":
            raise E.stream_invalid_config(
                "discard new per subject requires discard new policy to be set")
        if cfg.max_msgs_per_subject <= 0:
            raise E.stream_invalid_config(
                "discard new per subject requires max msgs per subject > 0")
    if old.allow_msg_ttl and not cfg.allow_msg_ttl:
        raise E.stream_invalid_config("message TTL status can not be disabled")
    if cfg.allow_msg_counter != old.allow_msg_counter:
        raise E.stream_invalid_config(
            "stream configuration update can not change message counter setting")
    if old.allow_msg_schedules and not cfg.allow_msg_schedules:
        raise E.stream_invalid_config("message schedules can not be disabled")
    if old.persist_mode != cfg.persist_mode:
        raise E.stream_invalid_config("stream configuration update can not change persist mode")
    if cfg.sealed:
        cfg.max_age = 0
        cfg.discard = "new"
        cfg.deny_delete = cfg.deny_purge = True
        cfg.allow_rollup_hdrs = False
    return cfg
