"""The ``cluster { }`` block: listen address, routes, the routes'
authorization and permissions, compression.
"""

from natsbroker.config.authorization import AUTHORIZATION, parse_permissions
from natsbroker.config.blocks import key_table, set_block, set_field, set_interval, set_listen
from natsbroker.config.model import Permissions
from natsbroker.config.tls import tls_block
from natsbroker.config.values import (
    ConfigError,
    check_boolean,
    check_duration,
    check_integer,
    check_port,
    check_string,
    converter,
    go_position,
    routes,
)


def parse_cluster(ld, v, at, out):
    out["cluster"] = ld.block(v, _CLUSTER, at)


def _cluster_authorization(ld, v, at, out):
    # One user/password for every route, in nats-server's words for the rest.
    auth = ld.block(v, AUTHORIZATION, at)
    where = go_position((at.file, at.line, at.col))
    if "users" in auth:
        raise ConfigError(f"{where}: Cluster authorization does not allow multiple users")
    if auth.get("token"):
        raise ConfigError(f"{where}: Cluster authorization does not support tokens")
    if "permissions" in auth:
        ld.warnings.append(f'{at.file}:{at.line}: setting "permissions" within cluster authorization '
                           "block is deprecated")
        # As nats-server: used unless the cluster block has its own (which
        # win whichever comes first in the file).
        out.setdefault("permissions", _route_permissions(auth["permissions"], where))
    for key, field in (("user", "username"), ("password", "password"), ("timeout", "auth_timeout")):
        if key in auth:
            out[field] = auth[key]


def _cluster_permissions(ld, v, at, out):
    out["permissions"] = _route_permissions(parse_permissions(ld, v, at), go_position((at.file, at.line, at.col)))


def _route_permissions(fields, where):
    """Cluster permissions: ``import`` (publish) is what we ask the peers
    for, ``export`` (subscribe) what we send them (nats-server's
    RoutePermissions). Replies are not granted on routes."""
    if fields.get("allow_responses"):
        raise ConfigError(f"{where}: Cluster permissions do not support dynamic responses")
    return converter.structure(fields, Permissions)


def _cluster_compression(ld, v, at, out):
    """nats-server's parseCompression: a boolean (on/off), a mode string, or a
    block with ``mode`` (and ``rtt_thresholds``, durations). The mode is
    checked when the cluster starts, as nats-server checks it (not by -t)."""
    if isinstance(v, dict):
        mode, thresholds = "", []
        for key, value in v.items():
            if key.lower() == "mode":
                mode = value
            elif key.lower() in ("rtt_thresholds", "thresholds", "rtts", "rtt"):
                thresholds = value
            else:  # nats-server stops at the first unknown key here
                pos = getattr(v, "positions", {}).get(key, (at.file, at.line, at.col))
                raise ConfigError(f'{go_position(pos, key in getattr(v, "quoted", ()))}: unknown field "{key}"')
        for t in thresholds if isinstance(thresholds, list) else [thresholds]:
            check_duration(t)
    else:
        mode = v
    if isinstance(mode, bool):
        mode = "on" if mode else "off"
    out["compression"] = check_string(mode)


_CLUSTER = key_table(
    {
        "name": set_field("name", check_string),
        "listen": set_listen("host", "port", check_port),
        "host net": set_field("host", check_string),
        "port": set_field("port", check_port),
        "routes": set_field("routes", routes),
        "no_advertise": set_field("no_advertise", check_boolean),
        "connect_retries": set_field("connect_retries", check_integer),
        "advertise cluster_advertise": set_field("advertise", check_string),
        "authorization": _cluster_authorization,
        "permissions": _cluster_permissions,
        "tls": set_block("tls", tls_block),
        "ping_interval": set_interval("ping_interval"),
        "ping_max": set_field("ping_max", check_integer),
        "pool_size": set_field("pool_size", check_integer),
        "compression": _cluster_compression,
    },
    unsupported="connect_backoff permissions accounts write_deadline write_timeout",
)


COMPRESSION_MODES = {"on", "enabled", "true", "not supported", "not_supported", "disabled", "off",
                      "false", "accept", "auto", "s2_auto", "uncompressed", "s2_uncompressed",
                      "fast", "s2_fast", "better", "s2_better", "best", "s2_best"}
