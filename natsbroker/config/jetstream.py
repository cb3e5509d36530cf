"""The ``jetstream`` key (a switch or a block of limits) and the top-level
``store_dir``.
"""

from natsbroker.config.blocks import key_table, set_field
from natsbroker.config.values import (
    BadValue,
    ConfigError,
    check_boolean,
    check_duration,
    check_size,
    check_string,
    go_panic,
    go_type,
    go_where,
    show_value,
)
from natsbroker.gocompat.durations import parse_duration as parse_go_duration


def parse_jetstream(ld, v, at, out):
    js = out.setdefault("jetstream", {})  # (merged with a top-level store_dir)
    if isinstance(v, bool):
        js["enabled"] = v
    elif isinstance(v, str) and v.lower() in ("enabled", "enable", "disabled", "disable"):
        js["enabled"] = v.lower().startswith("enable")
    elif isinstance(v, dict):
        # A block turns JetStream on unless it says "enabled: false".
        ld.top_at = at  # (where nats-server places a panic inside it)
        js.update({"enabled": True, **ld.block(v, _JETSTREAM, at)})
    else:
        raise BadValue(f'expected true/false, "enabled"/"disabled" or a block, got {show_value(v)}')


def parse_store_dir(ld, v, at, out):
    # nats-server's top-level store_dir: JetStream's directory (JetStream
    # itself is still turned on by the jetstream key).
    out.setdefault("jetstream", {})["store_dir"] = check_string(v)


def _sync(ld, v, at, out):
    if isinstance(v, str) and v.lower() == "always":
        out.update(sync_always=True, sync_interval=0.0)
    else:
        out.update(sync_always=False, sync_interval=check_duration(v))


_JETSTREAM = key_table(
    {
        "enabled enable": set_field("enabled", check_boolean),
        "store_dir store storedir": set_field("store_dir", check_string),
        "max_memory_store max_mem_store max_mem": set_field("max_memory_store", check_size),
        "max_file_store max_file": set_field("max_file_store", check_size),
        "domain": set_field("domain", check_string),
        # (opts.go: strings.ToLower(strings.TrimSpace(...)))
        "unique_tag": set_field("unique_tag", lambda v: check_string(v).strip().lower()),
        "sync_interval sync": _sync,
        "limits": lambda ld, v, at, out: out.__setitem__("limits", _js_limits(ld, v, at)),
    },
    unsupported="strict key ek encryption_key prev_key prev_ek prev_encryption_key cipher extension_hint "
                "tpm max_outstanding_catchup max_buffered_size max_buffered_msgs "
                "request_queue_limit info_queue_limit meta_compact meta_compact_size meta_compact_sync "
                "max_concurrent_io",
)


def _js_limits(ld, v, at):
    """nats-server's parseJetStreamLimits: ``max_ack_pending``,
    ``max_ha_assets``, ``max_request_batch`` (integers), ``duplicate_window``
    (a Go duration string) and ``batch { max_inflight_per_stream,
    max_inflight_total, max_msgs, timeout }``, refused in its words: a value of
    the wrong type is its type-assertion panic (placed at the top-level key),
    a bad duration Go's error alone."""
    if not isinstance(v, dict):
        raise ConfigError(f"{go_where(at)}: Expected a map to define JetStreamLimits, got {go_type(v)}")
    top = getattr(ld, "top_at", at)
    out = {}

    def integer(field):
        def handle(ld, value, where, out):
            if isinstance(value, bool) or not isinstance(value, int):
                raise go_panic(go_where(top), value, "int64")
            out[field] = value
        return handle

    def duration(field, scale):
        def handle(ld, value, where, out):
            if not isinstance(value, str):
                raise go_panic(go_where(top), value, "string")
            try:
                ns = parse_go_duration(value)
            except ValueError as e:
                ld.errors.append(str(e))
                return
            out[field] = ns if scale == 1 else ns / scale
        return handle

    def batch(ld, value, where, out):
        if not isinstance(value, dict):
            raise ConfigError(f"{go_where(where)}: Expected a map to define batch limits, got {go_type(value)}")
        out.update(ld.block(value, key_table({
            "max_inflight_per_stream": integer("batch_max_inflight_per_stream"),
            "max_inflight_total": integer("batch_max_inflight_total"),
            "max_msgs": integer("batch_max_msgs"),
            "timeout": duration("batch_timeout", 1e9),
        }), where))

    out.update(ld.block(v, key_table({
        "max_ack_pending": integer("max_ack_pending"),
        "max_ha_assets": integer("max_ha_assets"),
        "max_request_batch": integer("max_request_batch"),
        "duplicate_window": duration("duplicate_window", 1),
        "batch": batch,
    }), at))
    return out
