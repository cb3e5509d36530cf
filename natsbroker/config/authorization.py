"""The ``authorization { }`` block: users, nkey users, permissions and
``auth_callout``, in nats-server's words (also read by the cluster and
accounts blocks, for their users and permissions).
"""

from natsbroker.auth.nkey import public_user_key
from natsbroker.config.blocks import key_table, set_block, set_field
from natsbroker.config.model import CONNECTION_TYPES, AuthCallout, NkeyUser, Permissions, User
from natsbroker.config.values import (
    BadValue,
    ConfigError,
    check_duration,
    check_integer,
    check_string,
    check_strings,
    check_subjects,
    converter,
    go_position,
    go_string,
    go_type,
    go_value,
    go_where,
    key_position,
    show_value,
)
from natsbroker.gocompat.durations import duration_seconds
from natsbroker.gocompat.quote import go_quote
from natsbroker.subjects.sublist import is_valid_subject


def _permission(ld, v, at):
    """publish: subjects (all allowed), or a map of allow/deny."""
    if isinstance(v, dict):
        return {"allow": [], "deny": [], **ld.block(v, _PERMISSION, at, unknown=_UNKNOWN_ALLOW_DENY)}
    return {"allow": check_subjects(v), "deny": []}


def _sub_permission(ld, v, at):
    """subscribe: as publish, and an entry may be "subject queue"."""
    if isinstance(v, dict):
        return {"allow": [], "deny": [], **ld.block(v, _SUB_PERMISSION, at, unknown=_UNKNOWN_ALLOW_DENY)}
    return {"allow": _sub_subjects(v), "deny": []}


def _sub_subjects(v):
    """Subscribe permission entries: a subject, or a subject and a queue group
    separated by white space (nats-server's checkPermSubjectArray)."""
    entries = check_strings(v)
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
        raise BadValue(f'expected a duration such as "1m", got {show_value(v)}') from None


def parse_permissions(ld, v, at):
    return ld.block(v, _PERMISSIONS, at, unknown='Unknown field "{key}" parsing permissions')


def parse_users(ld, v, at):
    if not isinstance(v, list):
        raise BadValue(f"expected an array of users, got {show_value(v)}")
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
                return go_position(pos)
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
    where = go_position((at.file, at.line, at.col))
    what = "error parsing allowed connection types"
    if isinstance(v, str):
        v = [v]
    elif not isinstance(v, list):
        raise ConfigError(f"{where}: {what}: unsupported type {go_type(v)}")
    for item in v:
        if not isinstance(item, str):
            raise ConfigError(f"{where}: {what}: unsupported type in array {go_type(item)}")
    types = []
    for item in v:
        if item.upper() not in types:
            types.append(item.upper())
    unknown = [t for t in (item.upper() for item in v) if t not in CONNECTION_TYPES]
    if unknown:
        raise ConfigError(f"{where}: invalid connection types [{' '.join(go_quote(t) for t in unknown)}]")
    return types


def parse_authorization(ld, v, at, out):
    auth = ld.block(v, AUTHORIZATION, at)
    defaults = auth.get("permissions")
    users, nkeys = [], []
    for fields in auth.get("users", ()):
        # As nats-server: users without permissions of their own get the block's.
        if defaults is not None:
            fields.setdefault("permissions", defaults)
        if "nkey" in fields:
            if any(u.nkey == fields["nkey"] for u in nkeys):
                where = go_position((at.file, at.line, at.col))
                raise ConfigError(f'{where}: Duplicate nkey "{fields["nkey"]}" detected')
            nkeys.append(converter.structure(fields, NkeyUser))
        else:
            users.append(converter.structure(fields, User))
    if "users" in auth:
        auth["users"] = users
        auth["nkeys"] = nkeys
    if defaults is not None:
        auth["permissions"] = converter.structure(defaults, Permissions)
    if "auth_callout" in auth:
        auth["auth_callout"] = converter.structure(auth["auth_callout"], AuthCallout)
    out["authorization"] = auth


# -- auth_callout { } ------------------------------------------------------------
# nats-server's parseAuthCallout: its words, at the key it was reading.


def _auth_callout(ld, v, at, out):
    from natsbroker.auth.jwt.claims import is_public_key, public_key_raw
    where = go_where(at)
    if not isinstance(v, dict):
        raise ConfigError(f"{where}: Expected authorization callout to be a map/struct, got {go_value(v)}")
    fields = {}
    unknown = []
    last = where  # nats-server points at the last key it read
    for key, value in v.items():
        kat = last = key_position(v, key, where)
        name = key.lower()
        if name == "issuer":
            issuer = go_string(value, kat)
            if not is_public_key(issuer, "A"):
                raise ConfigError(f"{kat}: Expected callout user to be a valid public account nkey, "
                                  f"got {go_quote(issuer)}")
            fields["issuer"] = issuer
        elif name in ("account", "acc"):
            fields["account"] = go_string(value, kat)
        elif name in ("auth_users", "users"):
            if not isinstance(value, list):
                raise ConfigError(f"{kat}: Expected auth_users field to be an array, got *conf.token")
            fields["auth_users"] = [go_string(u, kat) for u in value]
        elif name in ("xkey", "key"):
            xkey = go_string(value, kat)
            if not (xkey.startswith("X") and public_key_raw(xkey) is not None):
                raise ConfigError(f"{kat}: Expected callout xkey to be a valid public xkey, got {go_quote(xkey)}")
            fields["xkey"] = xkey
        elif name == "allowed_accounts":
            if not isinstance(value, list):
                raise ConfigError(f"{kat}: Expected allowed accounts field to be an array, got *conf.token")
            fields["allowed_accounts"] = [go_string(a, kat) for a in value]
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


_PERMISSION = key_table({"allow": set_field("allow", check_subjects), "deny": set_field("deny", check_subjects)})


_SUB_PERMISSION = key_table({"allow": set_field("allow", _sub_subjects), "deny": set_field("deny", _sub_subjects)})


_UNKNOWN_ALLOW_DENY = ('Unknown field name "{key}" parsing subject permissions, '
                       "only 'allow' or 'deny' are permitted")


_RESPONSES = key_table(
    {
        "max max_msgs max_messages max_responses": set_field("max_msgs", check_integer),
        "expires expiration ttl": set_field("expires", _response_expires),
    }
)


# (import/export: nats-server's names for publish/subscribe on routes, also
# taken here.)
_PERMISSIONS = key_table(
    {
        "publish pub import": set_block("publish", _permission),
        "subscribe sub export": set_block("subscribe", _sub_permission),
        "allow_responses publish_allow_responses": _allow_responses,
    }
)


_USER = key_table(
    {
        "user username": set_field("user", check_string),
        "password pass": set_field("password", check_string),
        "nkey": set_field("nkey", check_string),
        "permissions permission authorization": set_block("permissions", parse_permissions),
        "allowed_connection_types connection_types clients": lambda ld, v, at, out: out.update(
            allowed_connection_types=_connection_types(v, at)),
    },
    unsupported="proxy_required",
)


AUTHORIZATION = key_table(
    {
        "user username": set_field("user", check_string),
        "password pass": set_field("password", check_string),
        "token": set_field("token", check_string),
        "timeout": set_field("timeout", check_duration),
        "users": set_block("users", parse_users),
        "permissions default_permissions default_permission": set_block("permissions", parse_permissions),
        "auth_callout auth_hook": _auth_callout,
    },
    unsupported="proxy_required",
)


def identities(config):
    """The names users are known by (user names and public nkeys), of the
    authorization block and of every account."""
    auth = config.authorization
    names = {u.user for u in auth.users} | {u.nkey for u in auth.nkeys}
    for acc in config.accounts:
        names |= {u.user for u in acc.users} | {u.nkey for u in acc.nkeys}
    return names
