"""Map a nats-server configuration file onto :class:`ServerConfig`.

The file is parsed by :mod:`natsbroker.conf`; this module gives the keys their
meaning.  Each block (top level, ``authorization``, ``jetstream``, ...) has a
table from key (and nats-server's aliases) to a handler that checks the value
and stores it under our field name, so a bad value is reported at its
``file:line:col``.

Keys nats-server knows but we do not implement only produce a warning, so that
an existing config file still starts the server.  The exceptions are the keys
that secure a server (TLS, accounts): ignoring those would quietly run it
less protected than its owner asked for, so they are errors.

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

from natsbroker import conf
from natsbroker import tls as tls_module
from natsbroker.config import (DEFAULT_PORT, AccountConfig, AccountJetStream, MapDest, NkeyUser,
                               Permissions, ServerConfig, ServiceExport, ServiceImport, StreamExport,
                               StreamImport, SubjectMapping, TLSConfig, User)
from natsbroker.fatal import read_file_error
from natsbroker.nkey import public_user_key
from natsbroker.mapping import MappingError, compile_mapping, go_quote
from natsbroker.subjects import is_valid_subject
from natsbroker.transform import TransformError

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
        seconds = conf.parse_duration(v)
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
    """Walks the parsed file, collecting warnings as it goes."""

    def __init__(self):
        self.warnings = []

    def block(self, m, table, where, unknown=None):
        """Check the map ``m`` against ``table``; return its overrides.

        An unknown key is warned about, or with ``unknown`` (a message with
        ``{key}``) refused, as nats-server refuses them in some blocks."""
        if not isinstance(m, dict):
            raise BadValue(f"expected a map, got {_show(m)}")
        out = {}
        positions = getattr(m, "positions", {})
        for key, value in m.items():
            at = _Where(*positions[key]) if key in positions else where
            handler = table.get(key.lower())  # nats-server matches keys case-insensitively
            if handler is None:
                if unknown is not None:
                    raise ConfigError(f"{at}: " + unknown.format(key=key))
                self.warnings.append(f'{at.file}:{at.line}: unknown field "{key}"')
                continue
            try:
                handler(self, value, at, out)
            except BadValue as e:
                raise ConfigError(f'{at}: invalid value for "{key}": {e}') from None
        return out


def _table(spec):
    """Expand ``{"alias1 alias2": handler}`` to one entry per alias."""
    return {alias: handler for aliases, handler in spec.items() for alias in aliases.split()}


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


def _refuse(why):
    def handle(ld, v, at, out):
        raise BadValue(f"not supported by natsbroker ({why})")

    return handle


def _permission(ld, v, at):
    """publish/subscribe: subjects (all allowed), or a map of allow/deny."""
    if isinstance(v, dict):
        return {"allow": [], "deny": [], **ld.block(v, _PERMISSION, at)}
    return {"allow": _subjects(v), "deny": []}


def _responses(ld, v, at):
    if isinstance(v, dict):
        # nats-server's {max, expires} limits; we only know on or off.
        ld.warnings.append(f"{at.file}:{at.line}: allow_responses limits are not supported, treated as true")
        return True
    return _boolean(v)


def _permissions(ld, v, at):
    return ld.block(v, _PERMISSIONS, at)


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
    out["authorization"] = auth


def _jetstream(ld, v, at, out):
    if isinstance(v, bool):
        out["jetstream"] = {"enabled": v}
    elif isinstance(v, str) and v.lower() in ("enabled", "enable", "disabled", "disable"):
        out["jetstream"] = {"enabled": v.lower().startswith("enable")}
    elif isinstance(v, dict):
        # A block turns JetStream on unless it says "enabled: false".
        out["jetstream"] = {"enabled": True, **ld.block(v, _JETSTREAM, at)}
    else:
        raise BadValue(f'expected true/false, "enabled"/"disabled" or a block, got {_show(v)}')


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


def _strings(v):
    if isinstance(v, str):
        return [v]
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise BadValue(f"expected a string or an array of strings, got {_show(v)}")
    return list(v)


def _sync(ld, v, at, out):
    if isinstance(v, str) and v.lower() == "always":
        out.update(sync_always=True, sync_interval=0.0)
    else:
        out.update(sync_always=False, sync_interval=_duration(v))


def _cluster(ld, v, at, out):
    out["cluster"] = ld.block(v, _CLUSTER, at)


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
            out.update(handshake_first=True, handshake_first_fallback=conf.parse_duration(v))
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
        return v.strftime("%Y-%m-%d %H:%M:%S +0000 UTC")
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
    out["accounts"] = accounts


def _account_nkey(v):
    from natsbroker.nkey import public_account_key
    if not isinstance(v, str) or public_account_key(v) is None:
        raise BadValue(f"Not a valid public nkey for an account: {go_quote(str(v))}")
    return v


def _account_users(ld, v, at, out):
    out["users"] = _users(ld, v, at)
    out["users_at"] = at


def _account_mappings(ld, v, at, out):
    _mappings(ld, v, at, out)


def _account_jetstream(ld, v, at, out):
    """``jetstream: enabled|disabled|true|false`` or a block of limits
    (nats-server's parseJetStreamForAccount)."""
    if isinstance(v, bool):
        out["jetstream"] = AccountJetStream() if v else None
    elif isinstance(v, str):
        word = v.lower()
        if word in ("enabled", "enable", "true"):
            out["jetstream"] = AccountJetStream()
        elif word in ("disabled", "disable", "false"):
            out["jetstream"] = None
        else:
            raise ConfigError(f"{at}: Expected 'enabled' or 'disabled' for string value, got '{v}'")
    elif isinstance(v, dict):
        out["jetstream"] = AccountJetStream(**ld.block(v, _ACCOUNT_JETSTREAM, at))
    else:
        raise ConfigError(f"{at}: Expected map, bool or string to define JetStream, got {_go_type(v)}")


def _limit(v):
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise BadValue(f"expected a number, got {_show(v)}")
    return _size(v) if isinstance(v, str) else int(v)


_ACCOUNT_JETSTREAM = _table(
    {
        "max_memory max_mem mem memory": _set("max_memory", _limit),
        "max_store max_file max_disk store disk": _set("max_file", _limit),
        "max_streams streams": _set("max_streams", _limit),
        "max_consumers consumers": _set("max_consumers", _limit),
        "max_ack_pending": _set("max_ack_pending", _limit),
        "mem_max_stream_bytes memory_max_stream_bytes": _set("memory_max_stream_bytes", _limit),
        "disk_max_stream_bytes store_max_stream_bytes": _set("store_max_stream_bytes", _limit),
        "max_bytes_required max_stream_bytes_required": _set("max_bytes_required", _boolean),
    }
)


def _export(ld, v, at):
    """One ``exports`` entry: ``{stream: subj}`` or ``{service: subj,
    response_type, response_threshold}``, with ``accounts [...]``."""
    if not isinstance(v, dict):
        raise ConfigError(f"{at}: Export Items should be a map with type entry, got {_go_type(v)}")
    kind = subject = None
    accounts, rt, threshold, trace = [], None, None, False
    for key, value in v.items():
        k = key.lower()
        if k in ("stream", "service"):
            if kind is not None and kind != k:
                raise ConfigError(f"{at}: Detected {k} {go_quote(str(value))} but already saw a {kind}")
            if not isinstance(value, str):
                raise ConfigError(f"{at}: Expected {k} name to be string, got {_go_type(value)}")
            kind, subject = k, value
        elif k in ("response", "response_type"):
            if not isinstance(value, str):
                raise ConfigError(f"{at}: Expected response type to be string, got {_go_type(value)}")
            rt = {"single": "Singleton", "singleton": "Singleton", "stream": "Stream",
                  "chunk": "Chunked", "chunked": "Chunked"}.get(value.lower())
            if rt is None:
                raise ConfigError(f"{at}: Unknown response type: {go_quote(value)}")
        elif k in ("threshold", "response_threshold", "response_max_time", "response_time"):
            threshold = _duration(value)
        elif k == "accounts":
            accounts = _strings(value)
        elif k == "allow_trace":
            trace = _boolean(value)
        elif k == "latency":
            ld.warnings.append(f"{at.file}:{at.line}: service latency tracking is not supported")
        else:
            ld.warnings.append(f'{at.file}:{at.line}: unknown field "{key}"')
    if kind is None:
        raise ConfigError(f"{at}: Export Items should be a map with type entry, got map[string]interface {{}}")
    if kind == "stream":
        if rt is not None:
            raise ConfigError(f"{at}: Detected response directive on non-service")
        return StreamExport(subject, accounts)
    e = ServiceExport(subject, accounts, rt or "Singleton", allow_trace=trace)
    if threshold is not None:
        e.response_threshold = threshold
    return e


def _import(ld, v, at):
    """One ``imports`` entry: ``{stream: {account, subject}, prefix|to}`` or
    ``{service: {account, subject}, to, share}``."""
    if not isinstance(v, dict):
        raise ConfigError(f"{at}: Import Items should be a map with type entry, got {_go_type(v)}")
    kind = None
    account = subject = ""
    prefix = to = ""
    share = False
    for key, value in v.items():
        k = key.lower()
        if k in ("stream", "service"):
            if not isinstance(value, dict):
                raise ConfigError(f"{at}: {k.capitalize()} entry should be an account map, got {_go_type(value)}")
            kind = k
            for ak, av in value.items():
                if ak.lower() == "account":
                    account = _string(av)
                elif ak.lower() == "subject":
                    subject = _string(av)
                else:
                    ld.warnings.append(f'{at.file}:{at.line}: unknown field "{ak}"')
        elif k == "prefix":
            prefix = _string(value)
        elif k == "to":
            to = _string(value)
        elif k == "share":
            share = _boolean(value)
        else:
            ld.warnings.append(f'{at.file}:{at.line}: unknown field "{key}"')
    if kind is None:
        raise ConfigError(f"{at}: Import Items should be a map with type entry, got map[string]interface {{}}")
    if kind == "stream":
        return StreamImport(account, subject, prefix, to)
    if prefix:
        raise ConfigError(f"{at}: Detected prefix directive on non-stream")
    return ServiceImport(account, subject, to, share)


def _items(parse, what):
    def handle(ld, v, at, out):
        if not isinstance(v, list):
            raise ConfigError(f"{at}: {what} should be an array, got {_go_type(v)}")
        positions = [getattr(item, "start", None) for item in v]
        out[what.lower()] = [parse(ld, item, _Where(*p) if p else at) for item, p in zip(v, positions)]
    return handle


_ACCOUNT = _table(
    {
        "users": _account_users,
        "nkey": _set("nkey", _account_nkey),
        "exports": _items(_export, "Exports"),
        "imports": _items(_import, "Imports"),
        "jetstream": _account_jetstream,
        "default_permissions": _set_block("default_permissions", _permissions),
        "mappings maps": _account_mappings,
    }
)


def validate_accounts(config):
    """What nats-server checks once every account is parsed: unique users
    across accounts, no single user or token beside account users, and
    exports/imports naming accounts that exist."""
    auth = config.authorization
    seen = {u.user for u in auth.users} | {u.nkey for u in auth.nkeys}
    names = {a.name for a in config.accounts}
    for acc in config.accounts:
        at = getattr(acc, "users_at", None)
        where = f"{at}: " if at is not None else ""
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
    for acc in config.accounts:
        for e in acc.exports:
            kind = "stream" if isinstance(e, StreamExport) else "service"
            for an in e.accounts:
                if an not in names:
                    raise ConfigError(f'"{an}" account not defined for {kind} export')
        for i in acc.imports:
            kind = "stream" if isinstance(i, StreamImport) else "service"
            if i.account not in names:
                raise ConfigError(f'"{i.account}" account not defined for {kind} import')
    if config.system_account and config.system_account not in names | {"$SYS"}:
        raise ConfigError(f"system account \"{config.system_account}\" not found")


_PERMISSION = _table({"allow": _set("allow", _subjects), "deny": _set("deny", _subjects)})

_PERMISSIONS = _table(
    {
        "publish pub": _set_block("publish", _permission),
        "subscribe sub": _set_block("subscribe", _permission),
        "allow_responses resp": _set_block("allow_responses", _responses),
    }
)

_USER = _table(
    {
        "user username": _set("user", _string),
        "password pass": _set("password", _string),
        "nkey": _set("nkey", _string),
        "permissions permission": _set_block("permissions", _permissions),
    }
)

_AUTHORIZATION = _table(
    {
        "user username": _set("user", _string),
        "password pass": _set("password", _string),
        "token": _set("token", _string),
        "timeout": _set("timeout", _duration),
        "users": _set_block("users", _users),
        "permissions default_permissions default_permission": _set_block("permissions", _permissions),
    }
)

_JETSTREAM = _table(
    {
        "enabled enable": _set("enabled", _boolean),
        "store_dir store storedir": _set("store_dir", _string),
        "max_memory_store max_mem_store max_mem": _set("max_memory_store", _size),
        "max_file_store max_file": _set("max_file_store", _size),
        "domain": _set("domain", _string),
        "sync_interval sync": _sync,
    }
)

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

_CLUSTER = _table(
    {
        "name": _set("name", _string),
        "listen": _listen("host", "port", check_port),
        "host net": _set("host", _string),
        "port": _set("port", check_port),
        "routes": _set("routes", routes),
    }
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
        "verify_and_map map_and_verify": _set("verify_and_map", _boolean),
        "verify_cert_and_check_known_urls": _set("verify_cert_and_check_known_urls", _boolean),
        "insecure": _set("insecure", _boolean),
        "timeout": _set("timeout", _tls_timeout),
        "handshake_first first": _handshake_first,
        "pinned_certs": _tls_checked("pinned_certs", _strings),
        "min_version": _tls_checked("min_version", _string),
        "cipher_suites": _tls_checked("cipher_suites", _strings),
        "curve_preferences": _tls_checked("curve_preferences", _strings),
    }
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
    }
)

_SERVER = _table(
    {
        "host net": _set("host", _string),
        "port": _set("port", check_client_port),
        "listen": _listen("host", "port", check_client_port),
        "server_name name": _set("server_name", _server_name),
        "client_advertise": _set("client_advertise", _string),
        "http": _listen("http_host", "http_port", check_port),
        "http_port monitor_port": _set("http_port", check_port),
        "http_host": _set("http_host", _string),
        "max_connections max_conn": _set("max_connections", _count),
        "max_control_line": _set("max_control_line", _positive_size),
        "max_payload": _set("max_payload", _positive_size),
        "max_pending max_pending_size": _set("max_pending", _positive_size),
        "max_subscriptions max_subs": _set("max_subscriptions", _count),
        "ping_interval": _interval("ping_interval"),
        "ping_max": _set("ping_max", _count),
        "write_deadline": _interval("write_deadline"),
        "authorization": _authorization,
        "no_auth_user": _set("no_auth_user", _string),
        "debug": _set("debug", _boolean),
        "trace": _set("trace", _boolean),
        "logtime": _set("logtime", _boolean),
        "log_file logfile": _set("log_file", _string),
        "pid_file pidfile": _set("pid_file", _string),
        "ports_file_dir": _set("ports_file_dir", _string),
        "jetstream": _jetstream,
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
        "operator operators trusted trusted_keys resolver resolver_preload": _refuse(
            "JWT authentication"),
    }
)


# -- entry points -----------------------------------------------------------------


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
    validate_accounts(config)
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


def _request_uri(text):
    # Go's url.ParseRequestURI: an absolute URI or an absolute path.
    return bool(re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", text)) or text.startswith("/") or text == "*"


def validate_websocket(config):
    """nats-server's checks of the websocket block, in its order and words."""
    ws = config.websocket
    if not ws.enabled:
        return
    if ws.tls is None and not ws.no_tls:
        raise ConfigError("websocket requires TLS configuration")
    for origin in ws.allowed_origins:
        if not _request_uri(origin):
            raise ConfigError(f'unable to parse allowed origin: parse "{origin}": invalid URI for request')
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
    if ws.jwt_cookie:
        # JWTs need trusted operators, which natsbroker does not have (yet).
        raise ConfigError("trusted operators or trusted keys configuration is required for "
                          f'JWT authentication via cookie "{ws.jwt_cookie}"')


def load_config(path, config=None):
    """Read the nats-server config file at ``path`` onto ``config`` (default:
    a fresh :class:`ServerConfig`).

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
        overrides = loader.block(tree, _SERVER, _Where(os.fspath(path), 1, 1))
    except BadValue as e:  # only if the top level is not a map, which conf never returns
        raise ConfigError(f"{os.fspath(path)}: {e}") from None
    overrides["config_file"] = os.path.abspath(path)
    config = apply_overrides(config if config is not None else ServerConfig(), overrides)
    validate(config)
    return config, loader.warnings
