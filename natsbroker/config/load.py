"""Map a nats-server configuration file onto :class:`ServerConfig`.

The file is parsed by :mod:`natsbroker.config.syntax`; this module gives the keys their
meaning.  Each block (top level, ``authorization``, ``jetstream``, ...) has a
table from key (and nats-server's aliases) to a handler that checks the value
and stores it under our field name, so a bad value is reported at its
``file:line:col``.

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
import datetime
import decimal
import os
import re

import attrs
import cattrs

from natsbroker.accounts.exports import resolve as resolve_exports
from natsbroker.auth.nkey import public_user_key
from natsbroker.config import syntax as conf
from natsbroker.config.model import (
    CONNECTION_TYPES,
    DEFAULT_PORT,
    AccountConfig,
    AccountJetStream,
    AuthCallout,
    MapDest,
    NkeyUser,
    Permissions,
    ResolverConfig,
    ServerConfig,
    ServiceExport,
    ServiceImport,
    StreamExport,
    StreamImport,
    SubjectMapping,
    TLSConfig,
    User,
)
from natsbroker.config.operator import OperatorError, check_operator_config
from natsbroker.connection import tls as tls_module
from natsbroker.fatal import path_error, read_file_error
from natsbroker.gocompat.durations import (
    NANOS,
    duration_seconds,
    format_duration as format_go_duration,
    parse_duration as parse_go_duration,
)
from natsbroker.gocompat.quote import go_quote
from natsbroker.gocompat.times import go_time_string
from natsbroker.gocompat.urls import host_and_port, parse_origin
from natsbroker.subjects.mapping import MappingError, compile_mapping
from natsbroker.subjects.sublist import is_valid_subject
from natsbroker.subjects.transform import TransformError

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
]


class ConfigError(ValueError):
    """A configuration the server cannot run with; the message says where."""


class BadValue(Exception):
    """Raised by value checks; the caller says where (file position or flag)."""


# cattrs turns the checked, normalised dicts into the nested attrs classes.
_converter = cattrs.Converter()


# -- value checks: a raw value in, the field's value out, BadValue on error ------


def _show(v):
    kind = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array"}
    return f"{kind.get(type(v), 'map' if isinstance(v, dict) else type(v).__name__)} {v!r}"


def _string(v):
    if not isinstance(v, str):
        raise BadValue(f"expected a string, got {_show(v)}")
    return v


def _boolean(v):
    if not isinstance(v, bool):
        raise BadValue(f"expected true or false, got {_show(v)}")
    return v


def _integer(v):
    if isinstance(v, bool) or not isinstance(v, int):
        raise BadValue(f"expected an integer, got {_show(v)}")
    return v


def _count(v):
    if _integer(v) < 0:
        raise BadValue(f"expected a number >= 0, got {v}")
    return v


def check_port(v):
    """A TCP port; -1 asks for a random one, as in nats-server."""
    if not -1 <= _integer(v) <= 65535:
        raise BadValue(f"port {v} is out of range (-1..65535)")
    return v


def check_client_port(v):
    # nats-server treats a client port of 0 as "not set" and uses 4222.
    return check_port(v) or DEFAULT_PORT


def _size(v):
    try:
        return conf.parse_size(v)
    except ValueError:
        raise BadValue(f'expected a size such as 1048576 or "1MB", got {_show(v)}') from None


def _positive_size(v):
    size = _size(v)
    if size <= 0:
        raise BadValue(f"expected a size > 0, got {v!r}")
    return size


def _duration(v):
    try:
        seconds = duration_seconds(v)
    except ValueError:
        raise BadValue(f'expected a duration such as "2m" or seconds, got {_show(v)}') from None
    if seconds < 0:
        raise BadValue(f"expected a duration >= 0, got {v!r}")
    return seconds


def _strings(v):
    """A string or an array of strings, as nats-server allows for lists."""
    if isinstance(v, str):
        return [v]
    if isinstance(v, list) and all(isinstance(s, str) for s in v):
        return list(v)
    raise BadValue(f"expected a string or an array of strings, got {_show(v)}")


def _subjects(v):
    subjects = _strings(v)
    for s in subjects:
        if not is_valid_subject(s.encode()):
            raise BadValue(f"{s!r} is not a valid subject")
    return subjects


def _server_name(v):
    if " " in _string(v):
        raise BadValue("server name cannot contain spaces")
    return v


def _plugins(v):
    names = _strings(v)
    for name in names:
        module, _, obj = name.partition(":")
        if not module or not obj:
            raise BadValue(f'expected "module:object", got {name!r}')
    return names


def host_port(v):
    """``4222``, ``":4222"``, ``"host:4222"`` or ``"[::1]:4222"`` to (host, port).

    host is "" when not given (the configured host then stays)."""
    if isinstance(v, int) and not isinstance(v, bool):
        return "", check_port(v)
    host, sep, number = _string(v).rpartition(":")
    if not sep or not number.lstrip("-").isdigit():
        raise BadValue(f'expected "host:port" or a port, got {v!r}')
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]  # IPv6 literal
    return host, check_port(int(number))


def routes(v):
    """Route URLs: an array, or one string that may hold several, comma-separated."""
    if isinstance(v, str):
        v = v.split(",")
    return [r.strip() for r in _strings(v) if r.strip()]


# -- blocks -------------------------------------------------------------------


@attrs.frozen
class _Where:
    file: str
    line: int
    col: int

    def __str__(self):
        return f"{self.file}:{self.line}:{self.col}"


class _Loader:
    """Walks the parsed file, collecting warnings and refused keys as it goes."""

    def __init__(self):
        self.warnings = []
        # Keys refused as nats-server refuses them: it reports every one
        # (and carries on reading), so they are raised together at the end.
        self.errors = []

    def block(self, m, table, where, unknown=None):
        """Check the map ``m`` against ``table``; return its overrides.

        An unknown key is nats-server's ``unknown field "key"`` (collected),
        or with ``unknown`` (a message with ``{key}``) that error, raised at
        once, as nats-server's blocks with their own words do; a key of
        ``table``'s unsupported ones is refused as not supported."""
        if not isinstance(m, dict):
            raise BadValue(f"expected a map, got {_show(m)}")
        out = {}
        positions = getattr(m, "positions", {})
        for key, value in m.items():
            at = _Where(*positions[key]) if key in positions else where
            handler = table.get(key.lower())  # nats-server matches keys case-insensitively
            if handler is None or handler is _NOT_SUPPORTED:
                self._refuse(m, key, at, handler, unknown)
                continue
            try:
                handler(self, value, at, out)
            except BadValue as e:
                raise ConfigError(f'{at}: invalid value for "{key}": {e}') from None
        return out

    def _refuse(self, m, key, at, handler, unknown):
        go_at = _go_at((at.file, at.line, at.col), key in getattr(m, "quoted", ()))
        if handler is _NOT_SUPPORTED:
            error = f'{go_at}: field "{key}" is known to nats-server but not supported by natsbroker'
            if unknown is not None:  # (a block nats-server stops reading at its first bad key)
                raise ConfigError(error)
            self.errors.append(error)
        elif unknown is not None:
            raise ConfigError(f"{go_at}: " + unknown.format(key=key))
        elif key not in getattr(m, "used", ()):  # (a variable used elsewhere is no field)
            self.errors.append(f'{go_at}: unknown field "{key}"')


def _NOT_SUPPORTED(ld, v, at, out):
    """The handler of keys nats-server knows that natsbroker does not
    implement (the loader refuses them before calling it)."""
    raise AssertionError("not called")


def _table(spec, unsupported=""):
    """Expand ``{"alias1 alias2": handler}`` to one entry per alias, and
    mark the keys in ``unsupported`` (nats-server knows them, natsbroker
    does not implement them) as refused."""
    table = {alias: _NOT_SUPPORTED for alias in unsupported.split()}
    table.update({alias: handler for aliases, handler in spec.items() for alias in aliases.split()})
    return table


def _set(field, check):
    def handle(ld, v, at, out):
        out[field] = check(v)

    return handle


def _set_block(field, parse):
    """Like _set, for values that are blocks themselves (parse gets the loader)."""

    def handle(ld, v, at, out):
        out[field] = parse(ld, v, at)

    return handle


def _interval(field):
    def handle(ld, v, at, out):
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            # As nats-server warns: unquoted "2m" is the size 2000000, not 2 minutes.
            ld.warnings.append(f'{at.file}:{at.line}: {field} should be converted to a duration such as "2m"'
                               f" ({v} is taken as seconds)")
        out[field] = _duration(v)

    return handle


def _listen(host_field, port_field, port_check):
    def handle(ld, v, at, out):
        host, number = host_port(v)
        if host:
            out[host_field] = host
        out[port_field] = port_check(number)

    return handle


def _permission(ld, v, at):
    """publish: subjects (all allowed), or a map of allow/deny."""
    if isinstance(v, dict):
        return {"allow": [], "deny": [], **ld.block(v, _PERMISSION, at, unknown=_UNKNOWN_ALLOW_DENY)}
    return {"allow": _subjects(v), "deny": []}


def _sub_permission(ld, v, at):
    """subscribe: as publish, and an entry may be "subject queue"."""
    if isinstance(v, dict):
        return {"allow": [], "deny": [], **ld.block(v, _SUB_PERMISSION, at, unknown=_UNKNOWN_ALLOW_DENY)}
    return {"allow": _sub_subjects(v), "deny": []}


def _sub_subjects(v):
    """Subscribe permission entries: a subject, or a subject and a queue group
    separated by white space (nats-server's checkPermSubjectArray)."""
    entries = _strings(v)
    for s in entries:
        if is_valid_subject(s.encode()):
            continue
        fields = s.split()
        if len(fields) != 2:
            raise BadValue(f"{s!r} is not a valid subject")
        if not is_valid_subject(fields[0].encode()):
            raise BadValue(f"{fields[0]!r} is not a valid subject")
        if not is_valid_subject(fields[1].encode()):
            raise BadValue(f"queue {fields[1]!r} is not a valid queue")
    return entries


def _allow_responses(ld, v, at, out):
    """``true``/``false``, or nats-server's ``{max: N, expires: "1m"}``; a
    limit left out or 0 is nats-server's default (1 reply, 2 minutes), a
    negative one no limit."""
    if isinstance(v, dict):
        limits = ld.block(v, _RESPONSES, at, unknown='Unknown field "{key}" parsing permissions')
        out["allow_responses"] = True
        out["response"] = {"max_msgs": limits.get("max_msgs") or 1,
                           "expires": limits.get("expires") or 120.0}
        return
    if not isinstance(v, bool):
        raise BadValue("error parsing response permissions, expected a boolean or a map")
    out["allow_responses"] = v


def _response_expires(v):
    # nats-server takes only a duration string here (a number is an error).
    if not isinstance(v, str):
        raise BadValue("error parsing expires, not a duration string")
    try:
        return duration_seconds(v)
    except ValueError:
        raise BadValue(f'expected a duration such as "1m", got {_show(v)}') from None


def _permissions(ld, v, at):
    return ld.block(v, _PERMISSIONS, at, unknown='Unknown field "{key}" parsing permissions')


def _users(ld, v, at):
    if not isinstance(v, list):
        raise BadValue(f"expected an array of users, got {_show(v)}")
    users = []
    for n, entry in enumerate(v, 1):
        fields = ld.block(entry, _USER, at)
        if fields.get("nkey"):
            _nkey_user(entry, fields, at)
            users.append(fields)
            continue
        fields.pop("nkey", None)  # nkey: "" is no nkey
        if "user" not in fields:
            raise BadValue(f"user entry #{n} requires a user")
        if any(u.get("user") == fields["user"] for u in users):
            raise BadValue(f"duplicate user {fields['user']!r}")
        users.append(fields)
    return users


def _nkey_user(entry, fields, at):
    """Check a users entry with an nkey as nats-server's parseUsers does; its
    errors point at the entry's key (nats-server: the last one it read)."""
    positions = getattr(entry, "positions", {})

    def where(*names):
        for key, pos in positions.items():
            if key.lower() in names:
                return _go_at(pos)
        return None

    if public_user_key(fields["nkey"]) is None:
        raise ConfigError(f"{where('nkey') or at}: Not a valid public nkey for a user")
    other = where("user", "username", "password", "pass")
    if other is not None:
        raise ConfigError(f"{other}: Nkey users do not take usernames or passwords")


def _connection_types(v, at):
    """A user's ``allowed_connection_types`` as nats-server reads it
    (parseAllowedConnectionTypes): a string or an array of strings, upper
    cased; a type it does not know refuses the file, in its words."""
    where = _go_at((at.file, at.line, at.col))
    what = "error parsing allowed connection types"
    if isinstance(v, str):
        v = [v]
    elif not isinstance(v, list):
        raise ConfigError(f"{where}: {what}: unsupported type {_go_type(v)}")
    for item in v:
        if not isinstance(item, str):
            raise ConfigError(f"{where}: {what}: unsupported type in array {_go_type(item)}")
    types = []
    for item in v:
        if item.upper() not in types:
            types.append(item.upper())
    unknown = [t for t in (item.upper() for item in v) if t not in CONNECTION_TYPES]
    if unknown:
        raise ConfigError(f"{where}: invalid connection types [{' '.join(go_quote(t) for t in unknown)}]")
    return types


def _authorization(ld, v, at, out):
    auth = ld.block(v, _AUTHORIZATION, at)
    defaults = auth.get("permissions")
    users, nkeys = [], []
    for fields in auth.get("users", ()):
        # As nats-server: users without permissions of their own get the block's.
        if defaults is not None:
            fields.setdefault("permissions", defaults)
        if "nkey" in fields:
            if any(u.nkey == fields["nkey"] for u in nkeys):
                where = _go_at((at.file, at.line, at.col))
                raise ConfigError(f'{where}: Duplicate nkey "{fields["nkey"]}" detected')
            nkeys.append(_converter.structure(fields, NkeyUser))
        else:
            users.append(_converter.structure(fields, User))
    if "users" in auth:
        auth["users"] = users
        auth["nkeys"] = nkeys
    if defaults is not None:
        auth["permissions"] = _converter.structure(defaults, Permissions)
    if "auth_callout" in auth:
        auth["auth_callout"] = _converter.structure(auth["auth_callout"], AuthCallout)
    out["authorization"] = auth


# -- auth_callout { } ------------------------------------------------------------
# nats-server's parseAuthCallout: its words, at the key it was reading.


def _auth_callout(ld, v, at, out):
    from natsbroker.auth.jwt.claims import is_public_key, public_key_raw
    where = _op_at(at)
    if not isinstance(v, dict):
        raise ConfigError(f"{where}: Expected authorization callout to be a map/struct, got {_go_value(v)}")
    fields = {}
    unknown = []
    last = where  # nats-server points at the last key it read
    for key, value in v.items():
        kat = last = _key_at(v, key, where)
        name = key.lower()
        if name == "issuer":
            issuer = _go_string(value, kat)
            if not is_public_key(issuer, "A"):
                raise ConfigError(f"{kat}: Expected callout user to be a valid public account nkey, "
                                  f"got {go_quote(issuer)}")
            fields["issuer"] = issuer
        elif name in ("account", "acc"):
            fields["account"] = _go_string(value, kat)
        elif name in ("auth_users", "users"):
            if not isinstance(value, list):
                raise ConfigError(f"{kat}: Expected auth_users field to be an array, got *conf.token")
            fields["auth_users"] = [_go_string(u, kat) for u in value]
        elif name in ("xkey", "key"):
            xkey = _go_string(value, kat)
            if not (xkey.startswith("X") and public_key_raw(xkey) is not None):
                raise ConfigError(f"{kat}: Expected callout xkey to be a valid public xkey, got {go_quote(xkey)}")
            fields["xkey"] = xkey
        elif name == "allowed_accounts":
            if not isinstance(value, list):
                raise ConfigError(f"{kat}: Expected allowed accounts field to be an array, got *conf.token")
            fields["allowed_accounts"] = [_go_string(a, kat) for a in value]
        else:
            unknown.append(f'{kat}: Unknown field "{key}" parsing authorization callout')
    if unknown:
        raise ConfigError("\n".join(unknown))
    if not fields.get("issuer"):
        raise ConfigError(f"{last}: Authorization callouts require an issuer to be specified")
    if not fields.get("auth_users"):
        raise ConfigError(f"{last}: Authorization callouts require authorized users to be specified")
    out["auth_callout"] = fields


def validate_auth_callout(config):
    """nats-server's start-up check of auth_callout: every allowed account
    is a configured one. (Unknown auth users and callout accounts are
    found when a client connects, as nats-server finds them.)"""
    callout = config.authorization.auth_callout
    if callout is None:
        return
    names = {a.name for a in config.accounts}
    for name in callout.allowed_accounts:
        if name not in names:
            raise ConfigError(f'auth_callout allowed account "{name}" not found in configured accounts')


def _jetstream(ld, v, at, out):
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
        raise BadValue(f'expected true/false, "enabled"/"disabled" or a block, got {_show(v)}')


def _top_store_dir(ld, v, at, out):
    # nats-server's top-level store_dir: JetStream's directory (JetStream
    # itself is still turned on by the jetstream key).
    out.setdefault("jetstream", {})["store_dir"] = _string(v)


def _changefeed(ld, v, at, out):
    if isinstance(v, bool):
        out["changefeed"] = {"enabled": v}
    elif isinstance(v, dict):
        out["changefeed"] = {"enabled": True, **ld.block(v, _CHANGEFEED, at)}
    else:
        raise BadValue(f"expected true/false or a block, got {_show(v)}")


def _tls_timeout(v):
    # nats-server reads a plain number as seconds (a float is allowed).
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if v < 0:
            raise BadValue(f"expected a duration >= 0, got {_show(v)}")
        return float(v)
    return _duration(v)


def _sync(ld, v, at, out):
    if isinstance(v, str) and v.lower() == "always":
        out.update(sync_always=True, sync_interval=0.0)
    else:
        out.update(sync_always=False, sync_interval=_duration(v))


def _cluster(ld, v, at, out):
    out["cluster"] = ld.block(v, _CLUSTER, at)


def _cluster_authorization(ld, v, at, out):
    # One user/password for every route, in nats-server's words for the rest.
    auth = ld.block(v, _AUTHORIZATION, at)
    where = _go_at((at.file, at.line, at.col))
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
    out["permissions"] = _route_permissions(_permissions(ld, v, at), _go_at((at.file, at.line, at.col)))


def _route_permissions(fields, where):
    """Cluster permissions: ``import`` (publish) is what we ask the peers
    for, ``export`` (subscribe) what we send them (nats-server's
    RoutePermissions). Replies are not granted on routes."""
    if fields.get("allow_responses"):
        raise ConfigError(f"{where}: Cluster permissions do not support dynamic responses")
    return _converter.structure(fields, Permissions)


def _websocket(ld, v, at, out):
    ws = ld.block(v, _WEBSOCKET, at)
    ws.update(ws.pop("authorization", {}))
    out["websocket"] = ws


def _tls_block(ld, v, at):
    """A ``tls { }`` block (client port, websocket): nats-server refuses
    unknown keys here, and checks the certificate files while reading."""
    out = ld.block(v, _TLS, at, unknown='error parsing tls config, unknown field "{key}"')
    cfg = _converter.structure(out, TLSConfig)
    try:
        # As nats-server: the files are loaded now, so -t and start-up fail
        # early; the error points at the block's line, column 0.
        tls_module.server_context(cfg)
    except tls_module.TLSConfigError as e:
        raise ConfigError(f"{at.file}:{at.line}:0: {e}") from None
    return cfg


def _tls_checked(field, check):
    """A tls key whose values nats-server checks while reading the block."""
    def handle(ld, v, at, out):
        value = check(v)
        try:
            tls_module.check_block_values(TLSConfig(**{field: value}))
        except tls_module.TLSConfigError as e:
            raise ConfigError(f"{at}: {e}") from None
        out[field] = value

    return handle


def _handshake_first(ld, v, at, out):
    # true/false, or a duration (or "auto") that also allows falling back
    # to the INFO-first flow after that long without a ClientHello.
    if isinstance(v, bool):
        out["handshake_first"] = v
        return
    if isinstance(v, str):
        if v.lower() in ("auto", "auto_fallback"):
            out.update(handshake_first=True, handshake_first_fallback=tls_module.DEFAULT_TLS_FIRST_FALLBACK)
            return
        try:
            out.update(handshake_first=True, handshake_first_fallback=duration_seconds(v))
            return
        except ValueError:
            pass
    shown = '"%s"' % v if isinstance(v, str) else _show(v)
    raise ConfigError(f'{at}: field "handshake_first"\'s value {shown} is invalid')


def _top_tls(ld, v, at, out):
    out["tls"] = _tls_block(ld, v, at)


# -- mappings { } ---------------------------------------------------------------
# nats-server's parseAccountMappings/parseAccountMapDest (for the global
# account): its texts, and its positions, so an error reads as its does.


def _go_at(pos, quoted=False):
    """nats-server's ``file:line:col`` of a key (or of the end of a map in an
    array): its lexer counts columns from 0 on the first line and from 1 after,
    and places a quoted key inside the quotes."""
    file, line, col = pos
    return f"{file}:{line}:{col - (line == 1) + quoted}"


def _go_type(v):
    """The Go type nats-server's config parser gives a value (for its panics'
    "interface conversion" texts)."""
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int64"
    if isinstance(v, float):
        return "float64"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "[]interface {}"
    if isinstance(v, dict):
        return "map[string]interface {}"
    return "time.Time"


def _go_value(v):
    """Go's ``%v`` of a config value."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            return "NaN" if v != v else ("+Inf" if v > 0 else "-Inf")
        d = decimal.Decimal(repr(v))
        return format(d.normalize(), "f") if -4 <= d.adjusted() < 21 else repr(v)
    if isinstance(v, list):
        return "[" + " ".join(_go_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "map[" + " ".join(f"{k}:{_go_value(v[k])}" for k in sorted(v)) + "]"
    if isinstance(v, datetime.datetime):
        return go_time_string(v)
    return str(v)


def _go_string(v, at):
    if not isinstance(v, str):
        raise ConfigError(f"{at}: interface conversion: interface {{}} is {_go_type(v)}, not string")
    return v


def _map_weight(v, at):
    if isinstance(v, str):
        text = v[:-1] if v.endswith("%") else v
        # Go's strconv.Atoi: an optional sign and decimal digits, in int64.
        n = int(text) if re.fullmatch(r"[+-]?[0-9]+", text) else None
        if n is None or not -(2**63) <= n < 2**63:
            raise ConfigError(f"{at}: Invalid weight {go_quote(text)} for mapping destination")
    elif isinstance(v, int) and not isinstance(v, bool):
        n = v
    else:
        raise ConfigError(f"{at}: Unknown entry type for weight of {_go_value(v)}\n")
    if n > 100 or n < 0:
        raise ConfigError(f"{at}: Invalid weight {n} for mapping destination")
    return n


def _map_dest(v, at):
    """One ``{destination, weight, cluster}``; ``at`` is where nats-server
    places the entry (the key of a lone entry, the end of one in an array)."""
    if not isinstance(v, dict):
        raise ConfigError(f"{at}: Expected an entry for the mapping destination")
    positions = getattr(v, "positions", {})
    quoted = getattr(v, "quoted", ())
    subject, weight, cluster = "", None, ""
    for key, value in v.items():
        key_at = _go_at(positions[key], key in quoted) if key in positions else at
        name = key.lower()
        if name in ("dest", "destination"):
            subject = _go_string(value, at)
        elif name == "weight":
            weight = _map_weight(value, key_at)
        elif name == "cluster":
            cluster = _go_string(value, at)
        else:
            raise ConfigError(f"{key_at}: Unknown field {go_quote(key)} for mapping destination")
    if weight is None:
        raise ConfigError(f"{at}: Missing weight for mapping destination {go_quote(subject)}")
    return MapDest(subject, weight, cluster)


def _mappings(ld, v, at, out):
    """``mappings { source: destination(s) }``: checked and compiled as
    nats-server adds them, so a bad one stops the server as it stops nats-server."""
    block_at = _go_at((at.file, at.line, at.col))
    if not isinstance(v, dict):
        raise ConfigError(f"{block_at}: interface conversion: interface {{}} is {_go_type(v)}, "
                          "not map[string]interface {}")
    positions = getattr(v, "positions", {})
    quoted = getattr(v, "quoted", ())
    entries = []
    for source, value in v.items():
        if not is_valid_subject(source.encode()):
            raise ConfigError(f"{block_at}: Subject {go_quote(source)} is not a valid subject")
        key_at = _go_at(positions[source], source in quoted) if source in positions else block_at
        if isinstance(value, str):
            dests = [MapDest(value)]
            what = f"{go_quote(source)} to {go_quote(value)}"
        else:
            if isinstance(value, list):
                # An array element is placed at its own end (a map's '}').
                dests = [_map_dest(item, _go_at(item.end) if getattr(item, "end", None) else key_at)
                         for item in value]
            else:
                dests = [_map_dest(value, key_at)]
            what = go_quote(source)
        try:
            compile_mapping(source, dests)
        except (MappingError, TransformError) as e:
            raise ConfigError(f"{key_at}: Error adding mapping for {what} : {e}") from None
        entries.append(SubjectMapping(source, dests))
    out["mappings"] = entries


# -- accounts ---------------------------------------------------------------------


def _accounts(ld, v, at, out):
    """``accounts { NAME { users, exports, imports, jetstream, mappings,
    default_permissions, nkey } }`` or ``accounts [NAME, ...]``, checked in
    nats-server's words (parseAccounts); exports and imports are resolved
    once every account is known."""
    accounts = []
    if isinstance(v, list):
        seen = set()
        for item in v:
            name = _string(item)
            if name == "$G":
                raise ConfigError(f'{at}: "$G" is a Reserved Account')
            if name in seen:
                raise ConfigError(f"{at}: Duplicate Account Entry: {name}")
            seen.add(name)
            accounts.append(AccountConfig(name))
        out["accounts"] = accounts
        return
    if not isinstance(v, dict):
        raise BadValue(f"expected a map or an array of account names, got {_show(v)}")
    positions = getattr(v, "positions", {})
    for name, body in v.items():
        acc_at = _Where(*positions[name]) if name in positions else at
        if not isinstance(body, dict):
            raise ConfigError(f"{acc_at}: Expected map entries for accounts")
        if name == "$G":
            raise ConfigError(f'{acc_at}: "$G" is a Reserved Account')
        fields = ld.block(body, _ACCOUNT, acc_at)
        acc = AccountConfig(name)
        acc.nkey = fields.get("nkey", "")
        acc.exports = fields.get("exports", [])
        acc.imports = fields.get("imports", [])
        acc.jetstream = fields.get("jetstream")
        acc.mappings = fields.get("mappings", [])
        defaults = fields.get("default_permissions")
        if defaults is not None:
            acc.default_permissions = _converter.structure(defaults, Permissions)
        for u in fields.get("users", ()):
            if defaults is not None:
                u.setdefault("permissions", defaults)
            if "nkey" in u:
                acc.nkeys.append(_converter.structure(u, NkeyUser))
            else:
                acc.users.append(_converter.structure(u, User))
        acc.users_at = fields.get("users_at", acc_at)
        accounts.append(acc)
    _check_imports(accounts, at)
    out["accounts"] = accounts


def _account_nkey(v):
    from natsbroker.auth.nkey import public_account_key
    if not isinstance(v, str) or public_account_key(v) is None:
        raise BadValue(f"Not a valid public nkey for an account: {go_quote(str(v))}")
    return v


def _account_users(ld, v, at, out):
    out["users"] = _users(ld, v, at)
    out["users_at"] = at


def _account_mappings(ld, v, at, out):
    _mappings(ld, v, at, out)


def _account_jetstream(ld, v, at, out):
    """``jetstream: enabled|disabled|true|false`` or a block of limits, checked
    as nats-server's parseJetStreamForAccount checks them (its texts; the
    value errors outside a block carry no position there)."""
    if isinstance(v, bool):
        out["jetstream"] = AccountJetStream() if v else None
    elif isinstance(v, str):
        word = v.lower()
        if word in ("enabled", "enable"):
            out["jetstream"] = AccountJetStream()
        elif word in ("disabled", "disable"):
            out["jetstream"] = None
        else:
            raise ConfigError(f"Expected 'enabled' or 'disabled' for string value, got '{v}'")
    elif isinstance(v, dict):
        out["jetstream"] = _account_jetstream_limits(v)
    else:
        raise ConfigError(f"Expected map, bool or string to define JetStream, got {_go_type(v)}")


def _account_jetstream_limits(m):
    """A ``jetstream { }`` block of account limits: every field -1 (none)
    unless given. Unknown fields are errors here, as in nats-server (every
    field it knows is known here), collected with the first bad value."""
    positions = getattr(m, "positions", {})
    quoted = getattr(m, "quoted", ())
    fields = {}
    errors = []
    for key, value in m.items():
        at = _go_at(positions[key], key in quoted) if key in positions else "?"
        field = _ACCOUNT_JETSTREAM.get(key.lower())
        if field is None:
            errors.append(f"{at}: unknown field {go_quote(key)}")
            continue
        if field == "max_bytes_required":
            if not isinstance(value, bool):
                errors.append(f"{at}: Expected a parseable bool for {go_quote(key)}, "
                              f"got {_go_value(value)}")
                raise ConfigError("\n".join(errors))
        elif field == "cluster_traffic":
            if not isinstance(value, str):
                errors.append(f"{at}: Expected either 'system' or 'owner' string value for "
                              f"{go_quote(key)}, got {_go_value(value)}")
                raise ConfigError("\n".join(errors))
            if value not in ("", "system", "owner"):
                errors.append(f"{at}: Expected 'system' or 'owner' string value for "
                              f"{go_quote(key)}, got {value}")
                raise ConfigError("\n".join(errors))
        elif not _limit(value):
            errors.append(f"{at}: Expected a parseable size for {go_quote(key)}, "
                          f"got {_go_value(value)}")
            raise ConfigError("\n".join(errors))
        fields[field] = value
    if errors:
        raise ConfigError("\n".join(errors))
    return AccountJetStream(**fields)


def _limit(v):
    """nats-server's account limits are int64 values (``1K`` and ``1KB`` are
    integers to the config lexer; a quoted "1K" is a string, refused)."""
    return isinstance(v, int) and not isinstance(v, bool)


# Account limit keys (any case) -> AccountJetStream field.
_ACCOUNT_JETSTREAM = {
    alias: field
    for aliases, field in {
        "max_memory max_mem mem memory": "max_memory",
        "max_store max_file max_disk store disk": "max_file",
        "max_streams streams": "max_streams",
        "max_consumers consumers": "max_consumers",
        "max_bytes_required max_stream_bytes max_bytes": "max_bytes_required",
        "mem_max_stream_bytes memory_max_stream_bytes": "memory_max_stream_bytes",
        "disk_max_stream_bytes store_max_stream_bytes": "store_max_stream_bytes",
        "max_ack_pending": "max_ack_pending",
        "cluster_traffic": "cluster_traffic",
    }.items()
    for alias in aliases.split()
}


def _export(ld, v, at):
    """One ``exports`` entry, as parseExportStreamOrService reads it (keys in
    file order): ``{stream: subject}`` or ``{service: subject, response_type,
    response_threshold, latency, allow_trace}``, with ``accounts [...]`` and
    ``account_token_position``. An entry with neither stream nor service is
    ignored (``None``), as nats-server ignores it."""
    if not isinstance(v, dict):
        raise ConfigError(f"{at}: Export Items should be a map with type entry, got {_go_type(v)}")
    kind = subject = None
    accounts = []
    rt = rt_at = lat_at = trace_at = None
    threshold = None
    token_pos = 0
    trace = False
    for key, value in v.items():
        k = key.lower()
        kat = _key_at(v, key, at)
        if k == "stream":
            if kind == "service":
                raise ConfigError(f"{kat}: Detected stream {go_quote(str(value))} but already saw a service")
            if rt_at is not None:
                raise ConfigError(f"{rt_at}: Detected response directive on non-service")
            if lat_at is not None:
                raise ConfigError(f"{lat_at}: Detected latency directive on non-service")
            if not isinstance(value, str):
                raise ConfigError(f"{kat}: Expected stream name to be string, got {_go_type(value)}")
            kind, subject = "stream", value
        elif k == "service":
            if kind == "stream":
                raise ConfigError(f"{kat}: Detected service {go_quote(str(value))} but already saw a stream")
            if not isinstance(value, str):
                raise ConfigError(f"{kat}: Expected service name to be string, got {_go_type(value)}")
            kind, subject = "service", value
        elif k in ("response", "response_type"):
            if rt_at is not None:
                raise ConfigError(f"{kat}: Duplicate response type definition")
            rt_at = kat
            if not isinstance(value, str):
                raise ConfigError(f"{kat}: Expected response type to be string, got {_go_type(value)}")
            rt = _RESPONSE_TYPES.get(value.lower())
            if rt is None:
                raise ConfigError(f"{kat}: Unknown response type: {go_quote(value)}")
            if kind == "stream":
                raise ConfigError(f"{kat}: Detected response directive on non-service")
        elif k in ("threshold", "response_threshold", "response_max_time", "response_time"):
            if threshold is not None:
                raise ConfigError(f"{kat}: Duplicate response threshold detected")
            if not isinstance(value, str):
                raise ConfigError(f"{kat}: Expected response threshold to be a parseable time "
                                  f"duration, got {_go_type(value)}")
            try:
                threshold = parse_go_duration(value) / 1e9
            except ValueError:
                raise ConfigError(f"{kat}: Expected response threshold to be a parseable time "
                                  f"duration, got {go_quote(value)}") from None
            if kind == "stream":
                raise ConfigError(f"{kat}: Detected response directive on non-service")
        elif k == "accounts":
            if not isinstance(value, list):
                raise _panic(kat, value, "[]interface {}")
            for name in value:
                if not isinstance(name, str):
                    raise _panic(kat, name, "string")
            accounts = list(value)
        elif k == "latency":
            lat_at = kat
            if not isinstance(value, (str, dict)):
                raise ConfigError(f"{kat}: Expected latency entry to be a map/struct or string, "
                                  f"got {_go_type(value)}")
            if kind == "stream":
                raise ConfigError(f"{kat}: Detected latency directive on non-service")
            ld.warnings.append(f"{kat}: service latency tracking is not supported")
        elif k == "account_token_position":
            if isinstance(value, bool) or not isinstance(value, int):
                raise _panic(kat, value, "int64")
            token_pos = value
        elif k == "allow_trace":
            if not isinstance(value, bool):
                raise _panic(kat, value, "bool")
            trace, trace_at = value, kat
        else:
            raise ConfigError(f'{kat}: unknown field "{key}"')
    if kind == "stream" and trace_at is not None:
        raise ConfigError(f"{trace_at}: Detected allow_trace directive on non-service")
    if kind == "stream":
        return StreamExport(subject, accounts, account_token_position=token_pos)
    if kind == "service":
        e = ServiceExport(subject, accounts, rt or "Singleton", allow_trace=trace,
                          account_token_position=token_pos)
        if threshold:  # (0 keeps the default, as in nats-server)
            e.response_threshold = threshold
        return e
    return None


def _import_account(m, at):
    """The ``{account, subject}`` map of an import (parseAccount)."""
    account = subject = ""
    for key, value in m.items():
        k = key.lower()
        kat = _key_at(m, key, at)
        if k == "account":
            if not isinstance(value, str):
                raise _panic(kat, value, "string")
            account = value
        elif k == "subject":
            if not isinstance(value, str):
                raise _panic(kat, value, "string")
            subject = value
        else:
            raise ConfigError(f'{kat}: unknown field "{key}"')
    return account, subject


def _import(ld, v, at):
    """One ``imports`` entry, as parseImportStreamOrService reads it (keys in
    file order): ``{stream: {account, subject}, prefix | to}`` or
    ``{service: {account, subject}, to, share}``; ``None`` for an entry with
    neither, which nats-server ignores."""
    if not isinstance(v, dict):
        raise ConfigError(f"{at}: Import Items should be a map with type entry, got {_go_type(v)}")
    stream = service = None
    prefix = to = ""
    share = False
    trace_at = None
    for key, value in v.items():
        k = key.lower()
        kat = _key_at(v, key, at)
        if k in ("stream", "service"):
            other = service if k == "stream" else stream
            if other is not None:
                seen = "service" if k == "stream" else "stream"
                raise ConfigError(f"{kat}: Detected {k} but already saw a {seen}")
            if not isinstance(value, dict):
                raise ConfigError(f"{kat}: {k.capitalize()} entry should be an account map, "
                                  f"got {_go_type(value)}")
            account, subject = _import_account(value, kat)
            if not account or not subject:
                raise ConfigError(f"{kat}: Expect an account name and a subject")
            if k == "stream":
                stream = StreamImport(account, subject, prefix, to)
            else:
                service = ServiceImport(account, subject, to or subject, share)
        elif k == "prefix":
            if not isinstance(value, str):
                raise _panic(kat, value, "string")
            prefix = value
            if stream is not None:
                stream.prefix = prefix
        elif k == "to":
            if not isinstance(value, str):
                raise _panic(kat, value, "string")
            to = value
            if service is not None:
                service.to = to
            if stream is not None:
                stream.to = to
                if stream.prefix:
                    raise ConfigError(f"{kat}: Stream import can not have a 'prefix' and a 'to' property")
        elif k == "share":
            if not isinstance(value, bool):
                raise _panic(kat, value, "bool")
            share = value
            if service is not None:
                service.share = share
        elif k == "allow_trace":
            if not isinstance(value, bool):
                raise _panic(kat, value, "bool")
            trace_at = kat
        else:
            raise ConfigError(f'{kat}: unknown field "{key}"')
    if service is not None and trace_at is not None:
        raise ConfigError(f"{trace_at}: Detected allow_trace directive on a non-stream")
    return stream or service


def _items(parse, what):
    """``exports``/``imports``: an array of entries (parseAccountExports/
    parseAccountImports). An entry map is placed where it ends, as nats-server
    places it; anything else at the array's key."""
    def handle(ld, v, at, out):
        key_at = _go_at((at.file, at.line, at.col))
        if not isinstance(v, list):
            raise ConfigError(f"{key_at}: {what} should be an array, got {_go_type(v)}")
        items = []
        services = {}
        for item in v:
            end = getattr(item, "end", None)
            item_at = _go_at(end) if end else key_at
            entry = parse(ld, item, item_at)
            if entry is None:
                continue
            if isinstance(entry, ServiceImport):
                dup = services.get(entry.to)
                if dup is not None:
                    raise ConfigError(
                        f"{item_at}: Duplicate service import subject {go_quote(entry.to)}, "
                        f"previously used in import for account {go_quote(dup.account)}, "
                        f"subject {go_quote(dup.subject)}")
                services[entry.to] = entry
            items.append(entry)
        out[what.lower()] = items
    return handle


def _check_imports(accounts, at):
    """nats-server's second pass over the accounts block: exports, then
    imports, each checked against the other accounts (natsbroker.accounts.exports);
    every error is reported, at the ``accounts`` key, as nats-server does."""
    _, errors = resolve_exports(accounts)
    if errors:
        where = _go_at((at.file, at.line, at.col))
        raise ConfigError("\n".join(f"{where}: {e}" for e in errors))


_RESPONSE_TYPES = {"single": "Singleton", "singleton": "Singleton", "stream": "Stream",
                   "chunk": "Chunked", "chunked": "Chunked"}


def _key_at(m, key, fallback):
    """Where nats-server puts an error about ``key`` of the map ``m``."""
    positions = getattr(m, "positions", {})
    if key in positions:
        return _go_at(positions[key], key in getattr(m, "quoted", ()))
    return fallback


def _panic(at, v, want):
    # A Go type assertion in nats-server's parser that fails: the panic it
    # turns into an error. (It points at the value; we know the key's place.)
    return ConfigError(f"{at}: interface conversion: interface {{}} is {_go_type(v)}, not {want}")


_ACCOUNT = _table(
    {
        "users": _account_users,
        "nkey": _set("nkey", _account_nkey),
        "exports": _items(_export, "Exports"),
        "imports": _items(_import, "Imports"),
        "jetstream": _account_jetstream,
        "default_permissions": _set_block("default_permissions", _permissions),
        "mappings maps": _account_mappings,
    },
    unsupported="limits msg_trace trace_dest",
)


def validate_accounts(config):
    """What nats-server checks once every account is parsed: unique users
    across accounts, no single user or token beside account users, and the
    exports and imports (see :mod:`natsbroker.accounts.exports`)."""
    auth = config.authorization
    seen = {u.user for u in auth.users} | {u.nkey for u in auth.nkeys}
    names = {a.name for a in config.accounts}
    for acc in config.accounts:
        at = getattr(acc, "users_at", None)
        where = f"{_go_at((at.file, at.line, at.col))}: " if at is not None else ""
        if acc.users or acc.nkeys:
            if auth.user:
                raise ConfigError(f"{where}Can not have a single user/pass and accounts")
            if auth.token:
                raise ConfigError(f"{where}Can not have a token and accounts")
        for u in acc.nkeys:
            if u.nkey in seen:
                raise ConfigError(f'{where}Duplicate nkey "{u.nkey}" detected')
            seen.add(u.nkey)
        for u in acc.users:
            if u.user in seen:
                raise ConfigError(f'{where}Duplicate user "{u.user}" detected')
            seen.add(u.user)
    # (A config file had these checked where its accounts block was read;
    # this is for a configuration built in code.)
    _, errors = resolve_exports(config.accounts)
    if errors:
        raise ConfigError("\n".join(errors))
    if config.system_account and config.system_account not in names | {"$SYS"} and not config.operator_mode:
        raise ConfigError(f"system account \"{config.system_account}\" not found")


# -- JWT operator mode ---------------------------------------------------------------
#
# nats-server's words for each mistake, at the key's position; a value of the
# wrong type inside a resolver block is Go's panic text, as nats-server says it.


def _op_at(at):
    # nats-server's position of a key (see _go_at).
    return _go_at((at.file, at.line, at.col))


def _operators(ld, v, at, out):
    from natsbroker.auth.jwt import claims
    w = _op_at(at)  # where nats-server says the error is
    if isinstance(v, str):
        names = [v]
    elif isinstance(v, list) and all(isinstance(x, str) for x in v):
        names = list(v)
    else:
        raise ConfigError(f"{w}: error parsing operators: unsupported type {_go_type(v)}")
    jwts = []
    for name in names:
        # A file name, or the JWT itself ("eyJ...").
        try:
            with open(name, "rb") as f:
                text = f.read().decode(errors="replace")
        except OSError as e:
            if not name.startswith("eyJ"):
                raise ConfigError(f"{w}: error parsing operator JWT: {read_file_error(name, e)}") from None
            text = name
        token = claims.parse_decorated(text)
        try:
            claims.decode_operator(token)
        except claims.JWTError as e:
            raise ConfigError(f"{w}: error parsing operator JWT: {e}") from None
        jwts.append(token)
    out["operators"] = jwts


def _trusted_keys(ld, v, at, out):
    from natsbroker.auth.jwt.claims import is_public_key
    w = _op_at(at)  # where nats-server says the error is
    if isinstance(v, str):
        keys = [v]
    elif isinstance(v, list):
        keys = []
        for item in v:
            if not isinstance(item, str):
                raise ConfigError(f"{w}: error parsing trusted: unsupported type in array {_go_type(item)}")
            keys.append(item)
    else:
        raise ConfigError(f"{w}: error parsing trusted: unsupported type {_go_type(v)}")
    for key in keys:
        if not is_public_key(key, "O"):
            raise ConfigError(f'{w}: trust key {go_quote(key)} required to be a valid public operator nkey')
    out["trusted_keys"] = keys


_RESOLVER_ERROR = ('error parsing account resolver, should be MEM or  URL("url") or a map containing '
                   "dir and type state=[FULL|CACHE])")
_MEM_RESOLVER = re.compile(r"(?i)(MEM|MEMORY)\s*")
_URL_RESOLVER = re.compile(r'(?i)(?:URL)(?:\(\s*"?([^\s"]*)"?\s*\))?\s*')


def _resolver(ld, v, at, out):
    """``resolver: MEMORY`` or ``resolver { type: full, dir, allow_delete,
    interval, limit, timeout }`` (nats-server's parse, checks and order)."""
    w = _op_at(at)  # where nats-server says the error is
    if isinstance(v, str):
        out["resolver_url"] = None
        if _MEM_RESOLVER.search(v):
            out["resolver"] = ResolverConfig("MEMORY")
            return
        m = _URL_RESOLVER.search(v)
        if m is not None:
            url = (m.group(1) or "").strip()
            if not _url_parses(url):
                raise ConfigError(f'{w}: error parsing account resolver url [{go_quote(url)}]')
            out["resolver"] = ResolverConfig("URL", url=url if url.endswith("/") else url + "/")
            return
        raise ConfigError(f"{w}: {_RESOLVER_ERROR}")
    if not isinstance(v, dict):
        raise ConfigError(f"{w}: error parsing operator resolver, wrong type {_go_type(v)}")
    positions = getattr(v, "positions", {})

    def get(key, typ):
        if key not in v:
            return None
        value = v[key]
        ok = isinstance(value, typ) and not (typ is int and isinstance(value, bool))
        if not ok:
            where = _Where(*positions[key]) if key in positions else at
            want = {str: "string", bool: "bool", int: "int64"}[typ]
            raise ConfigError(f"{_op_at(where)}: interface conversion: interface {{}} is "
                              f"{_go_type(value)}, not {want}")
        return value

    directory = get("dir", str) or ""
    kind = get("type", str) or ""
    delete = bool(get("allow_delete", bool))
    limit = get("limit", int) or 0
    ttl = get("ttl", str)
    interval = get("interval", str)
    timeout = get("timeout", str)
    durations = {}
    for key, text in (("ttl", ttl), ("interval", interval), ("timeout", timeout)):
        if text is None:
            continue
        try:
            durations[key] = parse_go_duration(text)
        except ValueError as e:
            raise ConfigError(f'{w}: {e}') from None  # (Go's err.Error())
    if "timeout" in durations and durations["timeout"] <= 0:
        raise ConfigError(f"{w}: Fetch timeout {format_go_duration(durations['timeout'])} is too smal")
    if not directory:
        raise ConfigError(f"{w}: dir has no value and needs to point to a directory\n"
                          f"{w}: mkdir : no such file or directory")
    if os.path.exists(directory) and (not os.path.isdir(directory) or not os.stat(directory).st_mode & 0o200):
        why = "not a directory" if not os.path.isdir(directory) else "permission denied"
        raise ConfigError(f"{w}: dir needs to point to an accessible directory\n"
                          f"{w}: mkdir {directory}: {why}")
    kind = kind.upper()
    if kind not in ("FULL", "CACHE"):
        raise ConfigError(f"{w}: {_RESOLVER_ERROR}")
    if kind == "CACHE":
        errors = []
        if durations.get("interval"):
            errors.append(f"{w}: CACHE does not accept sync")
        if delete:
            errors.append(f"{w}: CACHE does not accept allow_delete")
        if errors:
            raise ConfigError("\n".join(errors))
    elif "ttl" in durations:
        raise ConfigError(f"{w}: FULL does not accept ttl")
    try:
        # As nats-server: the directory is made when the config is read.
        os.makedirs(directory, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"{w}: {path_error('mkdir', directory, e)}") from None
    resolver = {"type": kind, "dir": os.path.abspath(directory), "allow_delete": delete,
                "limit": limit}
    if kind == "CACHE":
        resolver["ttl"] = durations.get("ttl", 0) / 1e9
    if durations.get("interval", 0) > 0:
        resolver["interval"] = durations["interval"] / 1e9
    if "timeout" in durations:
        resolver["timeout"] = durations["timeout"] / 1e9
    out["resolver"] = ResolverConfig(**resolver)
    out["resolver_url"] = None


def _url_parses(text):
    """Go's url.Parse accepts it (what the account resolver's URL is checked with)."""
    from urllib.parse import urlsplit
    if any(ord(c) < 0x20 or c == "\x7f" for c in text) or " " in text.split("://", 1)[0]:
        return False
    if re.match(r"[^/?#]*:", text) and not re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", text):
        return False  # "missing protocol scheme"
    try:
        urlsplit(text).port
    except ValueError:
        return False
    return True


def _resolver_preload(ld, v, at, out):
    from natsbroker.auth.jwt import claims
    w = _op_at(at)  # where nats-server says the error is
    if not isinstance(v, dict):
        raise ConfigError(f"{w}: preload should be a map of account_public_key:account_jwt")
    positions = getattr(v, "positions", {})
    preload = {}
    for key, value in v.items():
        where = _Where(*positions[key]) if key in positions else at
        if not isinstance(value, str):
            raise ConfigError(f"{_op_at(where)}: preload map value should be a string JWT")
        try:
            claims.decode_account(value)
        except claims.JWTError:
            raise ConfigError(f"{_op_at(where)}: invalid account JWT") from None
        preload[key] = value
    out["resolver_preload"] = preload


def _pinned_accounts(ld, v, at, out):
    w = _op_at(at)  # where nats-server says the error is
    if isinstance(v, str):
        out["resolver_pinned_accounts"] = [v]
        return
    if not isinstance(v, list):
        raise ConfigError(f"{w}: error parsing resolver_pinned_accounts: unsupported type {_go_type(v)}")
    for item in v:
        if not isinstance(item, str):
            raise ConfigError(f"{w}: error parsing resolver_pinned_accounts: unsupported type in array "
                              f"{_go_type(item)}")
    out["resolver_pinned_accounts"] = list(v)


def validate_operator(config):
    """What nats-server checks of operator mode when it starts
    (validateTrustedOperators, validateNoAuthUser, the system account):
    raises :class:`ConfigError`; sets ``system_account`` from the operator
    JWT when the config names none, and the default resolver."""
    try:
        check_operator_config(config)
    except OperatorError as e:
        raise ConfigError(str(e)) from None


_PERMISSION = _table({"allow": _set("allow", _subjects), "deny": _set("deny", _subjects)})

_SUB_PERMISSION = _table({"allow": _set("allow", _sub_subjects), "deny": _set("deny", _sub_subjects)})

_UNKNOWN_ALLOW_DENY = ('Unknown field name "{key}" parsing subject permissions, '
                       "only 'allow' or 'deny' are permitted")

_RESPONSES = _table(
    {
        "max max_msgs max_messages max_responses": _set("max_msgs", _integer),
        "expires expiration ttl": _set("expires", _response_expires),
    }
)

# (import/export: nats-server's names for publish/subscribe on routes, also
# taken here.)
_PERMISSIONS = _table(
    {
        "publish pub import": _set_block("publish", _permission),
        "subscribe sub export": _set_block("subscribe", _sub_permission),
        "allow_responses publish_allow_responses": _allow_responses,
    }
)

_USER = _table(
    {
        "user username": _set("user", _string),
        "password pass": _set("password", _string),
        "nkey": _set("nkey", _string),
        "permissions permission authorization": _set_block("permissions", _permissions),
        "allowed_connection_types connection_types clients": lambda ld, v, at, out: out.update(
            allowed_connection_types=_connection_types(v, at)),
    },
    unsupported="proxy_required",
)

_AUTHORIZATION = _table(
    {
        "user username": _set("user", _string),
        "password pass": _set("password", _string),
        "token": _set("token", _string),
        "timeout": _set("timeout", _duration),
        "users": _set_block("users", _users),
        "permissions default_permissions default_permission": _set_block("permissions", _permissions),
        "auth_callout auth_hook": _auth_callout,
    },
    unsupported="proxy_required",
)

_JETSTREAM = _table(
    {
        "enabled enable": _set("enabled", _boolean),
        "store_dir store storedir": _set("store_dir", _string),
        "max_memory_store max_mem_store max_mem": _set("max_memory_store", _size),
        "max_file_store max_file": _set("max_file_store", _size),
        "domain": _set("domain", _string),
        "sync_interval sync": _sync,
        "limits": lambda ld, v, at, out: out.__setitem__("limits", _js_limits(ld, v, at)),
    },
    unsupported="strict key ek encryption_key prev_key prev_ek prev_encryption_key cipher extension_hint "
                "tpm unique_tag max_outstanding_catchup max_buffered_size max_buffered_msgs "
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
        raise ConfigError(f"{_op_at(at)}: Expected a map to define JetStreamLimits, got {_go_type(v)}")
    top = getattr(ld, "top_at", at)
    out = {}

    def integer(field):
        def handle(ld, value, where, out):
            if isinstance(value, bool) or not isinstance(value, int):
                raise _panic(_op_at(top), value, "int64")
            out[field] = value
        return handle

    def duration(field, scale):
        def handle(ld, value, where, out):
            if not isinstance(value, str):
                raise _panic(_op_at(top), value, "string")
            try:
                ns = parse_go_duration(value)
            except ValueError as e:
                ld.errors.append(str(e))
                return
            out[field] = ns if scale == 1 else ns / scale
        return handle

    def batch(ld, value, where, out):
        if not isinstance(value, dict):
            raise ConfigError(f"{_op_at(where)}: Expected a map to define batch limits, got {_go_type(value)}")
        out.update(ld.block(value, _table({
            "max_inflight_per_stream": integer("batch_max_inflight_per_stream"),
            "max_inflight_total": integer("batch_max_inflight_total"),
            "max_msgs": integer("batch_max_msgs"),
            "timeout": duration("batch_timeout", 1e9),
        }), where))

    out.update(ld.block(v, _table({
        "max_ack_pending": integer("max_ack_pending"),
        "max_ha_assets": integer("max_ha_assets"),
        "max_request_batch": integer("max_request_batch"),
        "duplicate_window": duration("duplicate_window", 1),
        "batch": batch,
    }), at))
    return out


_CHANGEFEED = _table(
    {
        "enabled enable": _set("enabled", _boolean),
        "dir directory": _set("dir", _string),
        "streams": _set("streams", _strings),
        "max_file_size max_file_bytes": _set("max_file_size", _size),
        "max_file_age": _set("max_file_age", _duration),
        "retention retain": _set("retention", _duration),
    }
)

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
                raise ConfigError(f'{_go_at(pos, key in getattr(v, "quoted", ()))}: unknown field "{key}"')
        for t in thresholds if isinstance(thresholds, list) else [thresholds]:
            _duration(t)
    else:
        mode = v
    if isinstance(mode, bool):
        mode = "on" if mode else "off"
    out["compression"] = _string(mode)


_CLUSTER = _table(
    {
        "name": _set("name", _string),
        "listen": _listen("host", "port", check_port),
        "host net": _set("host", _string),
        "port": _set("port", check_port),
        "routes": _set("routes", routes),
        "no_advertise": _set("no_advertise", _boolean),
        "connect_retries": _set("connect_retries", _integer),
        "advertise cluster_advertise": _set("advertise", _string),
        "authorization": _cluster_authorization,
        "permissions": _cluster_permissions,
        "tls": _set_block("tls", _tls_block),
        "ping_interval": _interval("ping_interval"),
        "ping_max": _set("ping_max", _integer),
        "pool_size": _set("pool_size", _integer),
        "compression": _cluster_compression,
    },
    unsupported="connect_backoff permissions accounts write_deadline write_timeout",
)

_WS_AUTHORIZATION = _table(
    {
        "user username": _set("username", _string),
        "password pass": _set("password", _string),
        "token": _set("token", _string),
        "timeout": _set("auth_timeout", _duration),
    }
)

# The keys of a tls { } block (client port and websocket listener).
_TLS = _table(
    {
        "cert_file": _set("cert_file", _string),
        "key_file": _set("key_file", _string),
        "ca_file": _set("ca_file", _string),
        "verify": _set("verify", _boolean),
        "verify_and_map": _set("verify_and_map", _boolean),
        "verify_cert_and_check_known_urls": _set("verify_cert_and_check_known_urls", _boolean),
        "insecure": _set("insecure", _boolean),
        "timeout": _set("timeout", _tls_timeout),
        "handshake_first first immediate": _handshake_first,
        "pinned_certs": _tls_checked("pinned_certs", _strings),
        "min_version": _tls_checked("min_version", _string),
        "cipher_suites": _tls_checked("cipher_suites", _strings),
        "curve_preferences": _tls_checked("curve_preferences", _strings),
    },
    unsupported="allow_insecure_cipher_suites connection_rate_limit cert_store cert_match_by cert_match "
                "ca_certs_match cert_match_skip_invalid ocsp_peer certs certificates",
)

_WEBSOCKET = _table(
    {
        "host net": _set("host", _string),
        "port": _set("port", check_port),
        "listen": _listen("host", "port", check_port),
        "advertise": _set("advertise", _string),
        "no_tls": _set("no_tls", _boolean),
        "tls": _set_block("tls", _tls_block),
        "compression compress": _set("compression", _boolean),
        "same_origin": _set("same_origin", _boolean),
        "allowed_origins allowed_origin allow_origins allow_origin origins origin": _set(
            "allowed_origins", _strings),
        "handshake_timeout": _set("handshake_timeout", _duration),
        "authorization authentication": _set_block(
            "authorization", lambda ld, v, at: ld.block(v, _WS_AUTHORIZATION, at)),
        "no_auth_user": _set("no_auth_user", _string),
        "jwt_cookie": _set("jwt_cookie", _string),
    },
    unsupported="user_cookie pass_cookie token_cookie headers ping_interval",
)

# -- lame duck mode ---------------------------------------------------------------
# nats-server reads both as Go duration strings, in its words for each mistake.


def _lame_duck_value(key, v, at):
    where = _go_at((at.file, at.line, at.col))
    text = _go_string(v, where)
    try:
        return parse_go_duration(text)
    except ValueError as e:
        raise ConfigError(f"{where}: error parsing {key}: {e}") from None


def _lame_duck_duration(ld, v, at, out):
    ns = _lame_duck_value("lame_duck_duration", v, at)
    if ns < 30 * NANOS:
        raise ConfigError(f"{_go_at((at.file, at.line, at.col))}: invalid lame_duck_duration of "
                          f"{format_go_duration(ns)}, minimum is 30 seconds")
    out["lame_duck_duration"] = ns / NANOS


def _lame_duck_grace_period(ld, v, at, out):
    ns = _lame_duck_value("lame_duck_grace_period", v, at)
    if ns < 0:
        raise ConfigError(f"{_go_at((at.file, at.line, at.col))}: invalid lame_duck_grace_period, "
                          "needs to be positive")
    if ns:  # 0 is "not set": nats-server's default stays
        out["lame_duck_grace_period"] = ns / NANOS


_COMPRESSION_MODES = {"on", "enabled", "true", "not supported", "not_supported", "disabled", "off",
                      "false", "accept", "auto", "s2_auto", "uncompressed", "s2_uncompressed",
                      "fast", "s2_fast", "better", "s2_better", "best", "s2_best"}


def validate_start(config):
    """The checks nats-server makes when it starts (validateOptions), which
    ``-t`` does not make."""
    validate_lame_duck(config)
    mode = config.cluster.compression
    if mode and mode.lower() not in _COMPRESSION_MODES:
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


_SERVER = _table(
    {
        "host net": _set("host", _string),
        "port": _set("port", check_client_port),
        "listen": _listen("host", "port", check_client_port),
        "server_name": _set("server_name", _server_name),
        "client_advertise": _set("client_advertise", _string),
        "http": _listen("http_host", "http_port", check_port),
        "http_port monitor_port": _set("http_port", check_port),
        "http_host": _set("http_host", _string),
        "max_connections max_conn": _set("max_connections", _count),
        "max_control_line": _set("max_control_line", _positive_size),
        "max_payload": _set("max_payload", _positive_size),
        "max_pending": _set("max_pending", _positive_size),
        "max_subscriptions max_subs": _set("max_subscriptions", _count),
        "disable_sublist_cache no_sublist_cache": _set("no_sublist_cache", _boolean),
        "ping_interval": _interval("ping_interval"),
        "ping_max": _set("ping_max", _count),
        "write_deadline": _interval("write_deadline"),
        "authorization": _authorization,
        "no_auth_user": _set("no_auth_user", _string),
        "debug": _set("debug", _boolean),
        "trace": _set("trace", _boolean),
        "logtime": _set("logtime", _boolean),
        "log_file logfile": _set("log_file", _string),
        "logtime_utc": _set("logtime_utc", _boolean),
        "logfile_size_limit log_size_limit": _set("log_size_limit", _size),
        "logfile_max_num log_max_num": _set("log_max_num", _integer),
        "syslog": _set("syslog", _boolean),
        "remote_syslog": _set("remote_syslog", _string),
        "log_json": _set("log_json", _boolean),
        "pid_file pidfile": _set("pid_file", _string),
        "ports_file_dir": _set("ports_file_dir", _string),
        "lame_duck_duration": _lame_duck_duration,
        "lame_duck_grace_period": _lame_duck_grace_period,
        "jetstream": _jetstream,
        "store_dir storedir": _top_store_dir,
        "changefeed change_feed": _changefeed,
        "cluster": _cluster,
        "websocket ws": _websocket,
        "plugins": _set("plugins", _plugins),
        "tls": _top_tls,
        "allow_non_tls": _set("allow_non_tls", _boolean),
        "https_port": _set("https_port", check_port),
        "https": _listen("http_host", "https_port", check_port),
        "mappings maps": _mappings,
        "accounts": _accounts,
        "system_account system": _set("system_account", _string),
        "operator operators roots root root_operators root_operator": _operators,
        "trusted trusted_keys": _trusted_keys,
        "resolver account_resolver accounts_resolver": _resolver,
        "resolver_preload": _resolver_preload,
        "resolver_pinned_accounts": _pinned_accounts,
    },
    unsupported="trace_verbose trace_headers default_sentinel http_base_path gateway leaf leafnodes "
                "prof_port prof_block_rate proxy_protocol max_traced_msg_len max_sub_tokens "
                "max_subscription_tokens ocsp write_timeout resolver_tls no_system_account no_system "
                "no_sys_acc no_header_support connect_error_reports reconnect_error_reports mqtt "
                "server_tags server_metadata feature_flags default_js_domain ocsp_cache "
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
        if not _identities(config):
            raise ConfigError(f"no_auth_user {config.no_auth_user!r} present, but users are not defined")
        if config.no_auth_user not in _identities(config):
            raise ConfigError(f"no_auth_user {config.no_auth_user!r} is not a user of the authorization block")
    validate_websocket(config)


def _identities(config):
    """The names users are known by (user names and public nkeys), of the
    authorization block and of every account."""
    auth = config.authorization
    names = {u.user for u in auth.users} | {u.nkey for u in auth.nkeys}
    for acc in config.accounts:
        names |= {u.user for u in acc.users} | {u.nkey for u in acc.nkeys}
    return names


def validate_websocket(config):
    """nats-server's checks of the websocket block, in its order and words."""
    ws = config.websocket
    if not ws.enabled:
        return
    if ws.tls is None and not ws.no_tls:
        raise ConfigError("websocket requires TLS configuration")
    for origin in ws.allowed_origins:
        try:
            scheme, host = parse_origin(origin)
        except ValueError as e:
            raise ConfigError(f"unable to parse allowed origin: {e}") from None
        if scheme not in ("http", "https"):
            raise ConfigError(f'unable to parse allowed origin "{origin}": allowed origins must be '
                              "absolute URLs with http or https scheme")
        if not host:
            raise ConfigError(f'unable to parse allowed origin "{origin}": host is required')
        try:
            host_and_port(scheme == "https", host)
        except ValueError as e:
            raise ConfigError(f"unable to parse allowed origin: {e}") from None
    users = config.authorization.users + config.authorization.nkeys
    for acc in config.accounts:
        users = users + acc.users + acc.nkeys
    if ws.no_auth_user:
        if not users:
            raise ConfigError(f'no_auth_user: "{ws.no_auth_user}" present, but users/nkeys are not defined')
        if ws.no_auth_user not in _identities(config):
            raise ConfigError(f'no_auth_user: "{ws.no_auth_user}" not present as user or nkey in '
                              "authorization block or account configuration")
    if users and ws.username:
        raise ConfigError("websocket authentication username not compatible with presence of users/nkeys")
    if users and ws.token:
        raise ConfigError("websocket authentication token not compatible with presence of users/nkeys")
    if ws.jwt_cookie and not config.operator_mode:
        # (nats-server: a cookie JWT needs trusted operators.)
        raise ConfigError("trusted operators or trusted keys configuration is required for "
                          f'JWT authentication via cookie "{ws.jwt_cookie}"')


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
    loader = _Loader()
    try:
        overrides = loader.block(tree, _with_plugin_blocks(tree, plugin_blocks), _Where(os.fspath(path), 1, 1))
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
