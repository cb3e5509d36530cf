"""Map a nats-server configuration file onto :class:`ServerConfig`.

The file is parsed by :mod:`natsbroker.config.syntax`; this module gives the keys their
meaning.  Each block (top level, ``authorization``, ``jetstream``, ...) has a
table from key (and nats-server's aliases) to a handler that checks the value
and stores it under our field name, so a bad value is reported at its
``file:line:col``.  This module holds the top level's table and the entry
points; each block's table and handlers are a module of their own
(:mod:`~natsbroker.config.authorization`, :mod:`~natsbroker.config.accounts`,
:mod:`~natsbroker.config.cluster`, :mod:`~natsbroker.config.tls`,
:mod:`~natsbroker.config.websocket`, :mod:`~natsbroker.config.jetstream`,
:mod:`~natsbroker.config.changefeed`, :mod:`~natsbroker.config.mappings`,
:mod:`~natsbroker.config.operator`), on the walk of
:mod:`~natsbroker.config.blocks` and the value checks of
:mod:`~natsbroker.config.values`.

A key is refused where nats-server refuses it, in its words
(``file:line:col: unknown field "foo"``, every such key reported, exit 1), so
a misspelled setting is never silently ignored.  A key nats-server knows but
natsbroker does not implement (``gateway``, ``leafnodes``, ``mqtt``, ...) is
refused too, saying so: running without a setting its owner asked for (an
encryption key, a TLS option, a connection-type restriction) would quietly
run the server less protected.  natsbroker's own keys (``changefeed``,
``plugins``, ``log_json``, ``http_host``) are the only ones nats-server would
not take.

Handlers produce *overrides*: nested dicts of field names, e.g.
``{"port": 4222, "jetstream": {"enabled": True}}``.  The command line
(:mod:`natsbroker.cli`) produces the same shape, and :func:`apply_overrides`
puts either onto a config, so flags and file share one mapping.
"""

import copy
import os

import attrs

from natsbroker.config import syntax as conf
from natsbroker.config.accounts import parse_accounts, validate_accounts
from natsbroker.config.authorization import identities, parse_authorization, validate_auth_callout
from natsbroker.config.blocks import Loader, Where, key_table, set_field, set_interval, set_listen
from natsbroker.config.changefeed import parse_changefeed
from natsbroker.config.cluster import COMPRESSION_MODES, parse_cluster
from natsbroker.config.jetstream import parse_jetstream, parse_store_dir
from natsbroker.config.mappings import parse_mappings
from natsbroker.config.model import ServerConfig
from natsbroker.config.operator import (
    parse_operators,
    parse_pinned_accounts,
    parse_resolver,
    parse_resolver_preload,
    parse_trusted_keys,
    validate_operator,
)
from natsbroker.config.tls import parse_tls
from natsbroker.config.values import (
    BadValue,
    ConfigError,
    check_boolean,
    check_client_port,
    check_count,
    check_integer,
    check_port,
    check_positive_size,
    check_size,
    check_string,
    check_strings,
    go_position,
    go_string,
    go_type,
    host_port,
    routes,
)
from natsbroker.config.websocket import parse_websocket, validate_websocket
from natsbroker.fatal import read_file_error
from natsbroker.gocompat.durations import (
    NANOS,
    format_duration as format_go_duration,
    parse_duration as parse_go_duration,
)

__all__ = [
    "BadValue",
    "ConfigError",
    "apply_overrides",
    "check_client_port",
    "check_port",
    "host_port",
    "load_config",
    "routes",
    "validate",
    "validate_lame_duck",
    "validate_start",
]


# -- top-level values -------------------------------------------------------------


def _server_tags(ld, v, at, out):
    """opts.go ``server_tags``: a string or an array of strings, each added
    as jwt.TagList.Add adds it (trimmed, lower-cased, once, none empty);
    anything else refused in nats-server's words."""
    where = go_position((at.file, at.line, at.col))
    if isinstance(v, str):
        items = [v]
    elif isinstance(v, list):
        items = v
        for t in v:
            if not isinstance(t, str):
                raise ConfigError(f"{where}: error parsing tags: unsupported type *conf.token "
                                  "where string is expected")
    else:
        raise ConfigError(f"{where}: error parsing tags: unsupported type {go_type(v)}")
    tags = []
    for t in items:
        t = t.strip().lower()
        if t and t not in tags:
            tags.append(t)
    out["server_tags"] = tuple(tags)


def _server_name(v):
    if " " in check_string(v):
        raise BadValue("server name cannot contain spaces")
    return v


def _plugins(v):
    names = check_strings(v)
    for name in names:
        module, _, obj = name.partition(":")
        if not module or not obj:
            raise BadValue(f'expected "module:object", got {name!r}')
    return names


# -- lame duck mode ---------------------------------------------------------------
# nats-server reads both as Go duration strings, in its words for each mistake.


def _lame_duck_value(key, v, at):
    where = go_position((at.file, at.line, at.col))
    text = go_string(v, where)
    try:
        return parse_go_duration(text)
    except ValueError as e:
        raise ConfigError(f"{where}: error parsing {key}: {e}") from None


def _lame_duck_duration(ld, v, at, out):
    ns = _lame_duck_value("lame_duck_duration", v, at)
    if ns < 30 * NANOS:
        raise ConfigError(f"{go_position((at.file, at.line, at.col))}: invalid lame_duck_duration of "
                          f"{format_go_duration(ns)}, minimum is 30 seconds")
    out["lame_duck_duration"] = ns / NANOS


def _lame_duck_grace_period(ld, v, at, out):
    ns = _lame_duck_value("lame_duck_grace_period", v, at)
    if ns < 0:
        raise ConfigError(f"{go_position((at.file, at.line, at.col))}: invalid lame_duck_grace_period, "
                          "needs to be positive")
    if ns:  # 0 is "not set": nats-server's default stays
        out["lame_duck_grace_period"] = ns / NANOS


def validate_start(config):
    """The checks nats-server makes when it starts (validateOptions), which
    ``-t`` does not make."""
    validate_lame_duck(config)
    if config.jetstream.enabled and config.cluster.port:
        # validateJetStreamOptions: a JetStream cluster names its servers
        # (their Raft ids are hashes of the names) and itself.
        if not config.server_name:
            raise ConfigError("jetstream cluster requires `server_name` to be set")
        if not config.cluster.name:
            raise ConfigError("jetstream cluster requires `cluster.name` to be set")
    mode = config.cluster.compression
    if mode and mode.lower() not in COMPRESSION_MODES:
        raise ConfigError(f'unsupported compression mode "{mode}"')
    # (then NewServer's: the URL resolver's server and the system account,
    # natsbroker.auth.jwt.operator.check_resolver_start, which fetches)


def validate_lame_duck(config):
    """nats-server's start-up check of the two (validateOptions, which ``-t``
    does not run)."""
    grace, duration = round(config.lame_duck_grace_period * NANOS), round(config.lame_duck_duration * NANOS)
    if duration > 0 and grace >= duration:
        raise ConfigError(f"lame duck grace period ({format_go_duration(grace)}) should be strictly "
                          f"lower than lame duck duration ({format_go_duration(duration)})")


_SERVER = key_table(
    {
        "host net": set_field("host", check_string),
        "port": set_field("port", check_client_port),
        "listen": set_listen("host", "port", check_client_port),
        "server_name": set_field("server_name", _server_name),
        "client_advertise": set_field("client_advertise", check_string),
        "http": set_listen("http_host", "http_port", check_port),
        "http_port monitor_port": set_field("http_port", check_port),
        "http_host": set_field("http_host", check_string),
        "max_connections max_conn": set_field("max_connections", check_count),
        "max_control_line": set_field("max_control_line", check_positive_size),
        "max_payload": set_field("max_payload", check_positive_size),
        "max_pending": set_field("max_pending", check_positive_size),
        "max_subscriptions max_subs": set_field("max_subscriptions", check_count),
        "disable_sublist_cache no_sublist_cache": set_field("no_sublist_cache", check_boolean),
        "ping_interval": set_interval("ping_interval"),
        "ping_max": set_field("ping_max", check_count),
        "write_deadline": set_interval("write_deadline"),
        "authorization": parse_authorization,
        "no_auth_user": set_field("no_auth_user", check_string),
        "debug": set_field("debug", check_boolean),
        "trace": set_field("trace", check_boolean),
        "logtime": set_field("logtime", check_boolean),
        "log_file logfile": set_field("log_file", check_string),
        "logtime_utc": set_field("logtime_utc", check_boolean),
        "logfile_size_limit log_size_limit": set_field("log_size_limit", check_size),
        "logfile_max_num log_max_num": set_field("log_max_num", check_integer),
        "syslog": set_field("syslog", check_boolean),
        "remote_syslog": set_field("remote_syslog", check_string),
        "log_json": set_field("log_json", check_boolean),
        "pid_file pidfile": set_field("pid_file", check_string),
        "ports_file_dir": set_field("ports_file_dir", check_string),
        "lame_duck_duration": _lame_duck_duration,
        "lame_duck_grace_period": _lame_duck_grace_period,
        "jetstream": parse_jetstream,
        "store_dir storedir": parse_store_dir,
        "changefeed change_feed": parse_changefeed,
        "cluster": parse_cluster,
        "websocket ws": parse_websocket,
        "plugins": set_field("plugins", _plugins),
        "tls": parse_tls,
        "allow_non_tls": set_field("allow_non_tls", check_boolean),
        "https_port": set_field("https_port", check_port),
        "https": set_listen("http_host", "https_port", check_port),
        "mappings maps": parse_mappings,
        "accounts": parse_accounts,
        "system_account system": set_field("system_account", check_string),
        "server_tags": _server_tags,
        "operator operators roots root root_operators root_operator": parse_operators,
        "trusted trusted_keys": parse_trusted_keys,
        "resolver account_resolver accounts_resolver": parse_resolver,
        "resolver_preload": parse_resolver_preload,
        "resolver_pinned_accounts": parse_pinned_accounts,
    },
    unsupported="trace_verbose trace_headers default_sentinel http_base_path gateway leaf leafnodes "
                "prof_port prof_block_rate proxy_protocol max_traced_msg_len max_sub_tokens "
                "max_subscription_tokens ocsp write_timeout resolver_tls no_system_account no_system "
                "no_sys_acc no_header_support connect_error_reports reconnect_error_reports mqtt "
                "server_metadata feature_flags default_js_domain ocsp_cache "
                "no_fast_producer_stall max_closed_clients proxies",
)


# -- entry points -----------------------------------------------------------------


def _with_plugin_blocks(tree, plugin_blocks):
    """The top-level table, plus the blocks plugins claim (an
    IBrokerPluginFactory's ``config_block``) among the keys it does not know:
    ``myplugin { ... }`` goes to ``config.plugin_config["myplugin"]``.
    ``plugin_blocks(specs)`` (natsbroker.discovery.config_blocks, handed in by
    the entry points: plugin discovery sits above the loader) finds them; it
    is asked only when there is such a key, and an unclaimed one stays
    nats-server's ``unknown field``. It raises ValueError (PluginLoadError)
    for a plugin that cannot be loaded."""
    unknown = [k for k in tree if k.lower() not in _SERVER]
    if not unknown or plugin_blocks is None:
        return _SERVER
    specs = [v for k, v in tree.items() if k.lower() == "plugins" and isinstance(v, list)]
    try:
        claimed = plugin_blocks([s for v in specs for s in v if isinstance(s, str)])
    except ValueError as e:
        raise ConfigError(str(e)) from None
    table = dict(_SERVER)
    for key in unknown:
        if key.lower() in claimed:
            table[key.lower()] = _plugin_block(key.lower())
    return table


def _plugin_block(name):
    def handler(ld, v, at, out):
        out.setdefault("plugin_config", {})[name] = _plain(v)
    return handler


def _plain(v):
    """A parsed value as plain dicts, lists, str, numbers and bools."""
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def apply_overrides(config, overrides):
    """Return a copy of ``config`` with ``overrides`` (nested field dicts) set."""
    config = copy.deepcopy(config)
    _merge(config, overrides)
    return config


def _merge(obj, overrides):
    for name, value in overrides.items():
        current = getattr(obj, name)
        if isinstance(value, dict) and attrs.has(type(current)):
            _merge(current, value)  # a block sets only the fields it names
        else:
            setattr(obj, name, value)


def validate(config):
    """Refuse combinations nats-server refuses; raise :class:`ConfigError`."""
    if config.https_port and config.tls is None:
        raise ConfigError("Can't start monitoring: TLS cert and key required for HTTPS")
    auth = config.authorization
    if auth.token and auth.user:
        raise ConfigError("cannot have a user/password and a token")
    if (auth.users or auth.nkeys) and (auth.user or auth.token):
        raise ConfigError("cannot have a single user/password or token and a users array")
    validate_operator(config)
    validate_accounts(config)
    validate_auth_callout(config)
    if config.no_auth_user:
        # As nats-server 2.15: no_auth_user may name an nkey user too, and a
        # user of any account.
        if not identities(config):
            raise ConfigError(f"no_auth_user {config.no_auth_user!r} present, but users are not defined")
        if config.no_auth_user not in identities(config):
            raise ConfigError(f"no_auth_user {config.no_auth_user!r} is not a user of the authorization block")
    validate_websocket(config)


def load_config(path, config=None, plugin_blocks=None):
    """Read the nats-server config file at ``path`` onto ``config`` (default:
    a fresh :class:`ServerConfig`). ``plugin_blocks``: how to find the
    plugins that claim top-level blocks (see :func:`_with_plugin_blocks`);
    without it every unknown key is refused.

    Returns ``(config, warnings)``; the given config is not modified.  Raises
    :class:`ConfigError` in nats-server's words: ``open FILE: <Go's text>`` for
    an unreadable file, ``Parse error on line N: '...' (file:line:col)`` for a
    syntax error, ``file:line:col: ...`` for a bad value.
    """
    try:
        tree = conf.parse_file(path)
    except OSError as e:
        raise ConfigError(read_file_error(path, e)) from e
    except conf.ConfError as e:
        raise ConfigError(e.nats_text()) from e
    loader = Loader()
    try:
        overrides = loader.block(tree, _with_plugin_blocks(tree, plugin_blocks), Where(os.fspath(path), 1, 1))
    except BadValue as e:  # only if the top level is not a map, which conf never returns
        raise ConfigError(f"{os.fspath(path)}: {e}") from None
    except ConfigError as e:
        # As nats-server: the keys refused so far, then what stopped us.
        raise ConfigError("\n".join(loader.errors + [str(e)])) from None
    if loader.errors:
        raise ConfigError("\n".join(loader.errors))
    overrides["config_file"] = os.path.abspath(path)
    config = apply_overrides(config if config is not None else ServerConfig(), overrides)
    validate(config)
    return config, loader.warnings
