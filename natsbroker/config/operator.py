"""Operator mode in a configuration: the ``operator``, ``trusted``,
``resolver``, ``resolver_preload`` and ``resolver_pinned_accounts`` keys, in
nats-server's words for each mistake at the key's position (a value of the
wrong type inside a resolver block is Go's panic text, as nats-server says
it), and the checks nats-server makes when it loads such a configuration
(validateTrustedOperators, no_auth_user, the system account, the default
resolver). The URL resolver's own start check fetches over HTTP and is
operator mode's (``natsbroker.auth.jwt.operator``), run by the commands that
start a server.
"""


import os
import re

from natsbroker import COMPAT_VERSION
from natsbroker.auth.jwt import claims as C
from natsbroker.auth.jwt.trust import ACCOUNT_VALIDATION, trusted_keys, verify_account
from natsbroker.config.blocks import Where
from natsbroker.config.model import ResolverConfig
from natsbroker.config.values import ConfigError, go_type, go_where
from natsbroker.fatal import path_error, read_file_error
from natsbroker.gocompat.durations import format_duration as format_go_duration, parse_duration as parse_go_duration
from natsbroker.gocompat.quote import go_quote


class OperatorError(Exception):
    """A configuration nats-server refuses to start with (its words)."""


def _version(text):
    parts = text.split(".") if text else []
    if not text:
        return 0, 0, 0
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ValueError("invalid version string format %s" % text)
    return tuple(int(p) for p in parts)


def check_operator_config(config):
    """nats-server's validateTrustedOperators and the operator-mode parts of
    its start (no_auth_user, the system account, the default resolver).
    Sets ``config.system_account`` from the operator JWT when the config
    names none. Raises :class:`OperatorError`."""
    if not config.operators:
        if config.trusted_keys and config.no_auth_user:
            raise OperatorError("no_auth_user not compatible with Trusted Operator")
        return
    operators = [C.decode_operator(j) for j in config.operators]
    if len(operators) == 1:
        if config.resolver is None and config.resolver_url is None:
            config.resolver_url = (operators[0].account_server_url or "") + "/accounts"
        if not config.system_account:
            config.system_account = operators[0].system_account
    if config.resolver is None and config.resolver_url is None:
        raise OperatorError("operators require an account resolver to be configured")
    if config.accounts:
        raise OperatorError("operators do not allow Accounts to be configured directly")
    auth = config.authorization
    if auth.users or auth.nkeys:
        raise OperatorError("operators do not allow users to be configured directly")
    if config.trusted_keys:
        raise OperatorError("conflicting options for 'TrustedKeys' and 'TrustedOperators'")
    if config.system_account:
        non_empty = [op.system_account for op in operators if op.system_account]
        if non_empty and config.system_account not in non_empty:
            raise OperatorError("system_account in config and operator JWT must be identical")
    elif config.resolver is not None and config.resolver.type in ("FULL", "CACHE"):
        raise OperatorError("using nats based account resolver - the system account needs to be "
                            "specified in configuration or the operator jwt")
    server = _version(COMPAT_VERSION.split("-")[0])
    for op in operators:
        try:
            want = _version(op.assert_server_version)
        except ValueError as e:
            raise OperatorError("operator %s expects version %s got error instead: %s"
                                % (op.subject, op.assert_server_version, e)) from None
        for i, what in enumerate(("major", "minor", "update")):
            if want[i] > server[i]:
                raise OperatorError("operator %s expected %s version %d > server %s version %d"
                                    % (op.subject, what, want[i], what, server[i]))
            if server[i] > want[i]:
                break
    for key in trusted_keys(config, operators):
        if not C.is_public_key(key, "O"):
            raise OperatorError("trusted Keys %s are required to be a valid public operator nkey"
                                % go_quote(key))
    for key in config.resolver_pinned_accounts:
        if not C.is_public_key(key, "A"):
            raise OperatorError("pinned account key %s is not a valid public account nkey" % go_quote(key))
    if config.no_auth_user:
        raise OperatorError("no_auth_user not compatible with Trusted Operator")
    if config.resolver is None:
        # The operator's account server: a URL resolver (checked at start).
        url = config.resolver_url or ""
        config.resolver = ResolverConfig("URL", url=url if url.endswith("/") else url + "/")
    sys_key = config.system_account
    if sys_key and config.resolver.type == "MEMORY":
        # The system account is looked up when the server starts.
        if not C.is_public_key(sys_key, "A"):
            raise OperatorError("error resolving system account: will only fetch valid account keys")
        token = config.resolver_preload.get(sys_key)
        if token is None:
            raise OperatorError("error resolving system account: account missing")
        if verify_account(token, sys_key, set(trusted_keys(config, operators))) is None:
            raise OperatorError("error resolving system account: " + ACCOUNT_VALIDATION)



def parse_operators(ld, v, at, out):
    from natsbroker.auth.jwt import claims
    w = go_where(at)  # where nats-server says the error is
    if isinstance(v, str):
        names = [v]
    elif isinstance(v, list) and all(isinstance(x, str) for x in v):
        names = list(v)
    else:
        raise ConfigError(f"{w}: error parsing operators: unsupported type {go_type(v)}")
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


def parse_trusted_keys(ld, v, at, out):
    from natsbroker.auth.jwt.claims import is_public_key
    w = go_where(at)  # where nats-server says the error is
    if isinstance(v, str):
        keys = [v]
    elif isinstance(v, list):
        keys = []
        for item in v:
            if not isinstance(item, str):
                raise ConfigError(f"{w}: error parsing trusted: unsupported type in array {go_type(item)}")
            keys.append(item)
    else:
        raise ConfigError(f"{w}: error parsing trusted: unsupported type {go_type(v)}")
    for key in keys:
        if not is_public_key(key, "O"):
            raise ConfigError(f'{w}: trust key {go_quote(key)} required to be a valid public operator nkey')
    out["trusted_keys"] = keys


_RESOLVER_ERROR = ('error parsing account resolver, should be MEM or  URL("url") or a map containing '
                   "dir and type state=[FULL|CACHE])")


_MEM_RESOLVER = re.compile(r"(?i)(MEM|MEMORY)\s*")


_URL_RESOLVER = re.compile(r'(?i)(?:URL)(?:\(\s*"?([^\s"]*)"?\s*\))?\s*')


def parse_resolver(ld, v, at, out):
    """``resolver: MEMORY`` or ``resolver { type: full, dir, allow_delete,
    interval, limit, timeout }`` (nats-server's parse, checks and order)."""
    w = go_where(at)  # where nats-server says the error is
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
        raise ConfigError(f"{w}: error parsing operator resolver, wrong type {go_type(v)}")
    positions = getattr(v, "positions", {})

    def get(key, typ):
        if key not in v:
            return None
        value = v[key]
        ok = isinstance(value, typ) and not (typ is int and isinstance(value, bool))
        if not ok:
            where = Where(*positions[key]) if key in positions else at
            want = {str: "string", bool: "bool", int: "int64"}[typ]
            raise ConfigError(f"{go_where(where)}: interface conversion: interface {{}} is "
                              f"{go_type(value)}, not {want}")
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


def parse_resolver_preload(ld, v, at, out):
    from natsbroker.auth.jwt import claims
    w = go_where(at)  # where nats-server says the error is
    if not isinstance(v, dict):
        raise ConfigError(f"{w}: preload should be a map of account_public_key:account_jwt")
    positions = getattr(v, "positions", {})
    preload = {}
    for key, value in v.items():
        where = Where(*positions[key]) if key in positions else at
        if not isinstance(value, str):
            raise ConfigError(f"{go_where(where)}: preload map value should be a string JWT")
        try:
            claims.decode_account(value)
        except claims.JWTError:
            raise ConfigError(f"{go_where(where)}: invalid account JWT") from None
        preload[key] = value
    out["resolver_preload"] = preload


def parse_pinned_accounts(ld, v, at, out):
    w = go_where(at)  # where nats-server says the error is
    if isinstance(v, str):
        out["resolver_pinned_accounts"] = [v]
        return
    if not isinstance(v, list):
        raise ConfigError(f"{w}: error parsing resolver_pinned_accounts: unsupported type {go_type(v)}")
    for item in v:
        if not isinstance(item, str):
            raise ConfigError(f"{w}: error parsing resolver_pinned_accounts: unsupported type in array "
                              f"{go_type(item)}")
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
