"""The ``accounts`` block: each account's users, nkey, exports and imports,
JetStream limits, mappings and default permissions, checked in nats-server's
words (parseAccounts), and the checks made once every account is known.
"""

from natsbroker.accounts.exports import resolve as resolve_exports
from natsbroker.config.authorization import parse_permissions, parse_users
from natsbroker.config.blocks import Where, key_table, set_block, set_field
from natsbroker.config.mappings import parse_mappings
from natsbroker.config.model import (
    AccountConfig,
    AccountJetStream,
    NkeyUser,
    Permissions,
    ServiceExport,
    ServiceImport,
    StreamExport,
    StreamImport,
    User,
)
from natsbroker.config.values import (
    BadValue,
    ConfigError,
    check_string,
    converter,
    go_panic,
    go_position,
    go_type,
    go_value,
    key_position,
    show_value,
)
from natsbroker.gocompat.durations import parse_duration as parse_go_duration
from natsbroker.gocompat.quote import go_quote


def parse_accounts(ld, v, at, out):
    """``accounts { NAME { users, exports, imports, jetstream, mappings,
    default_permissions, nkey } }`` or ``accounts [NAME, ...]``, checked in
    nats-server's words (parseAccounts); exports and imports are resolved
    once every account is known."""
    accounts = []
    if isinstance(v, list):
        seen = set()
        for item in v:
            name = check_string(item)
            if name == "$G":
                raise ConfigError(f'{at}: "$G" is a Reserved Account')
            if name in seen:
                raise ConfigError(f"{at}: Duplicate Account Entry: {name}")
            seen.add(name)
            accounts.append(AccountConfig(name))
        out["accounts"] = accounts
        return
    if not isinstance(v, dict):
        raise BadValue(f"expected a map or an array of account names, got {show_value(v)}")
    positions = getattr(v, "positions", {})
    for name, body in v.items():
        acc_at = Where(*positions[name]) if name in positions else at
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
            acc.default_permissions = converter.structure(defaults, Permissions)
        for u in fields.get("users", ()):
            if defaults is not None:
                u.setdefault("permissions", defaults)
            if "nkey" in u:
                acc.nkeys.append(converter.structure(u, NkeyUser))
            else:
                acc.users.append(converter.structure(u, User))
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
    out["users"] = parse_users(ld, v, at)
    out["users_at"] = at


def _account_mappings(ld, v, at, out):
    parse_mappings(ld, v, at, out)


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
        raise ConfigError(f"Expected map, bool or string to define JetStream, got {go_type(v)}")


def _account_jetstream_limits(m):
    """A ``jetstream { }`` block of account limits: every field -1 (none)
    unless given. Unknown fields are errors here, as in nats-server (every
    field it knows is known here), collected with the first bad value."""
    positions = getattr(m, "positions", {})
    quoted = getattr(m, "quoted", ())
    fields = {}
    errors = []
    for key, value in m.items():
        at = go_position(positions[key], key in quoted) if key in positions else "?"
        field = _ACCOUNT_JETSTREAM.get(key.lower())
        if field is None:
            errors.append(f"{at}: unknown field {go_quote(key)}")
            continue
        if field == "max_bytes_required":
            if not isinstance(value, bool):
                errors.append(f"{at}: Expected a parseable bool for {go_quote(key)}, "
                              f"got {go_value(value)}")
                raise ConfigError("\n".join(errors))
        elif field == "cluster_traffic":
            if not isinstance(value, str):
                errors.append(f"{at}: Expected either 'system' or 'owner' string value for "
                              f"{go_quote(key)}, got {go_value(value)}")
                raise ConfigError("\n".join(errors))
            if value not in ("", "system", "owner"):
                errors.append(f"{at}: Expected 'system' or 'owner' string value for "
                              f"{go_quote(key)}, got {value}")
                raise ConfigError("\n".join(errors))
        elif not _limit(value):
            errors.append(f"{at}: Expected a parseable size for {go_quote(key)}, "
                          f"got {go_value(value)}")
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
        raise ConfigError(f"{at}: Export Items should be a map with type entry, got {go_type(v)}")
    kind = subject = None
    accounts = []
    rt = rt_at = lat_at = trace_at = None
    threshold = None
    token_pos = 0
    trace = False
    for key, value in v.items():
        k = key.lower()
        kat = key_position(v, key, at)
        if k == "stream":
            if kind == "service":
                raise ConfigError(f"{kat}: Detected stream {go_quote(str(value))} but already saw a service")
            if rt_at is not None:
                raise ConfigError(f"{rt_at}: Detected response directive on non-service")
            if lat_at is not None:
                raise ConfigError(f"{lat_at}: Detected latency directive on non-service")
            if not isinstance(value, str):
                raise ConfigError(f"{kat}: Expected stream name to be string, got {go_type(value)}")
            kind, subject = "stream", value
        elif k == "service":
            if kind == "stream":
                raise ConfigError(f"{kat}: Detected service {go_quote(str(value))} but already saw a stream")
            if not isinstance(value, str):
                raise ConfigError(f"{kat}: Expected service name to be string, got {go_type(value)}")
            kind, subject = "service", value
        elif k in ("response", "response_type"):
            if rt_at is not None:
                raise ConfigError(f"{kat}: Duplicate response type definition")
            rt_at = kat
            if not isinstance(value, str):
                raise ConfigError(f"{kat}: Expected response type to be string, got {go_type(value)}")
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
                                  f"duration, got {go_type(value)}")
            try:
                threshold = parse_go_duration(value) / 1e9
            except ValueError:
                raise ConfigError(f"{kat}: Expected response threshold to be a parseable time "
                                  f"duration, got {go_quote(value)}") from None
            if kind == "stream":
                raise ConfigError(f"{kat}: Detected response directive on non-service")
        elif k == "accounts":
            if not isinstance(value, list):
                raise go_panic(kat, value, "[]interface {}")
            for name in value:
                if not isinstance(name, str):
                    raise go_panic(kat, name, "string")
            accounts = list(value)
        elif k == "latency":
            lat_at = kat
            if not isinstance(value, (str, dict)):
                raise ConfigError(f"{kat}: Expected latency entry to be a map/struct or string, "
                                  f"got {go_type(value)}")
            if kind == "stream":
                raise ConfigError(f"{kat}: Detected latency directive on non-service")
            ld.warnings.append(f"{kat}: service latency tracking is not supported")
        elif k == "account_token_position":
            if isinstance(value, bool) or not isinstance(value, int):
                raise go_panic(kat, value, "int64")
            token_pos = value
        elif k == "allow_trace":
            if not isinstance(value, bool):
                raise go_panic(kat, value, "bool")
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
        kat = key_position(m, key, at)
        if k == "account":
            if not isinstance(value, str):
                raise go_panic(kat, value, "string")
            account = value
        elif k == "subject":
            if not isinstance(value, str):
                raise go_panic(kat, value, "string")
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
        raise ConfigError(f"{at}: Import Items should be a map with type entry, got {go_type(v)}")
    stream = service = None
    prefix = to = ""
    share = False
    trace_at = None
    for key, value in v.items():
        k = key.lower()
        kat = key_position(v, key, at)
        if k in ("stream", "service"):
            other = service if k == "stream" else stream
            if other is not None:
                seen = "service" if k == "stream" else "stream"
                raise ConfigError(f"{kat}: Detected {k} but already saw a {seen}")
            if not isinstance(value, dict):
                raise ConfigError(f"{kat}: {k.capitalize()} entry should be an account map, "
                                  f"got {go_type(value)}")
            account, subject = _import_account(value, kat)
            if not account or not subject:
                raise ConfigError(f"{kat}: Expect an account name and a subject")
            if k == "stream":
                stream = StreamImport(account, subject, prefix, to)
            else:
                service = ServiceImport(account, subject, to or subject, share)
        elif k == "prefix":
            if not isinstance(value, str):
                raise go_panic(kat, value, "string")
            prefix = value
            if stream is not None:
                stream.prefix = prefix
        elif k == "to":
            if not isinstance(value, str):
                raise go_panic(kat, value, "string")
            to = value
            if service is not None:
                service.to = to
            if stream is not None:
                stream.to = to
                if stream.prefix:
                    raise ConfigError(f"{kat}: Stream import can not have a 'prefix' and a 'to' property")
        elif k == "share":
            if not isinstance(value, bool):
                raise go_panic(kat, value, "bool")
            share = value
            if service is not None:
                service.share = share
        elif k == "allow_trace":
            if not isinstance(value, bool):
                raise go_panic(kat, value, "bool")
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
        key_at = go_position((at.file, at.line, at.col))
        if not isinstance(v, list):
            raise ConfigError(f"{key_at}: {what} should be an array, got {go_type(v)}")
        items = []
        services = {}
        for item in v:
            end = getattr(item, "end", None)
            item_at = go_position(end) if end else key_at
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
        where = go_position((at.file, at.line, at.col))
        raise ConfigError("\n".join(f"{where}: {e}" for e in errors))


_RESPONSE_TYPES = {"single": "Singleton", "singleton": "Singleton", "stream": "Stream",
                   "chunk": "Chunked", "chunked": "Chunked"}


_ACCOUNT = key_table(
    {
        "users": _account_users,
        "nkey": set_field("nkey", _account_nkey),
        "exports": _items(_export, "Exports"),
        "imports": _items(_import, "Imports"),
        "jetstream": _account_jetstream,
        "default_permissions": set_block("default_permissions", parse_permissions),
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
        where = f"{go_position((at.file, at.line, at.col))}: " if at is not None else ""
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
