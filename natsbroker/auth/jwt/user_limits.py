"""What a user JWT allows, as nats-server reads it: its permissions, a scoped
signing key's template applied to it, its time windows and source networks.

Both logins that take a user JWT use it: operator mode
(:mod:`natsbroker.auth.jwt.operator`) and the auth callout service's answer
(:mod:`natsbroker.auth.callout`).
"""

import datetime
import ipaddress
import itertools

from natsbroker.auth.jwt import claims as C
from natsbroker.config.model import Permission, Permissions, ResponsePermission
from natsbroker.subjects.sublist import is_valid_subject


class JwtUser(str):
    """The identity of a client logged in with a user JWT: its public key.
    ``log_tag`` is nats-server's ``"<account>/<account name>/jwt:<user>"``;
    ``bearer``: it logged in without signing the nonce (its JWT's own
    ``bearer_token``, or its scoped signing key's template's)."""

    __slots__ = ("claims", "account", "log_tag", "valid_for", "claims_limits", "bearer")


def permissions_from_jwt(p):
    """nats-server's buildPermissionsFromJwt: a :class:`Permissions`, or
    None when the JWT sets none."""
    if not p:
        return None
    out = None
    pub, sub, resp = p.get("pub") or {}, p.get("sub") or {}, p.get("resp")
    if pub.get("allow") or pub.get("deny"):
        out = Permissions()
        out.publish = Permission(list(pub.get("allow") or []), list(pub.get("deny") or []))
    if sub.get("allow") or sub.get("deny"):
        out = out or Permissions()
        out.subscribe = Permission(list(sub.get("allow") or []), list(sub.get("deny") or []))
    if resp is not None:
        out = out or Permissions()
        out.allow_responses = True
        max_msgs = int(resp.get("max") or 0)
        ttl = int(resp.get("ttl") or 0)
        out.response = ResponsePermission(max_msgs=max_msgs or 1,
                                          expires=ttl / 1e9 if ttl else 120.0)
    return out


# -- scoped signing keys --------------------------------------------------------------

_UPL_LISTS = ("src", "times", "allowed_connection_types")


def permission_limits_empty(nats):
    """Go's ``UserPermissionLimits.Empty()`` (reflect.DeepEqual with the zero
    value): a scoped user's JWT may set none of them."""
    for which in ("pub", "sub"):
        p = nats.get(which)
        if isinstance(p, dict) and (p.get("allow") is not None or p.get("deny") is not None):
            return False
    if nats.get("resp") is not None:
        return False
    for key in _UPL_LISTS:
        if nats.get(key) is not None:
            return False
    if nats.get("times_location"):
        return False
    for key in ("subs", "data", "payload"):
        if nats.get(key):
            return False
    return not nats.get("bearer_token")


def _apply_template(entries, user, acc, fail_on_bad):
    """nats-server's processUserPermissionsTemplate for one list."""
    if not any(t.startswith("{{") and t.endswith("}}") for e in entries for t in e.split(".")):
        return list(entries)
    out = []
    for entry in entries:
        tokens = entry.split(".")
        new_tokens = []
        tag_values = []
        for tk in tokens:
            if tk.startswith("{{") and tk.endswith("}}"):
                op = tk[2:-2].lower()
                if op == "name()":
                    tk = user.name
                elif op == "subject()":
                    tk = user.subject
                elif op == "account-name()":
                    tk = acc.name_tag
                elif op == "account-subject()":
                    tk = user.issuer_account
                elif (op.startswith("tag(") or op.startswith("account-tag(")) and op.endswith(")"):
                    tk = ""
                    if op.startswith("account-tag("):
                        tags = acc.claims.tags
                        prefix = op[len("account-tag("):-1].lower() + ":"
                    else:
                        tags = user.tags
                        prefix = op[len("tag("):-1].lower() + ":"
                    values = [t[len(prefix):] for t in tags if t.startswith(prefix)]
                    if values:
                        tag_values.append(values)
                else:
                    tk = " "
            new_tokens.append(tk)
        if not tag_values:
            candidates = [".".join(new_tokens)]
        else:
            candidates = []
            for combo in itertools.product(*tag_values):
                combo = list(combo)
                parts = []
                for tk in new_tokens:
                    parts.append(combo.pop(0) if tk == "" else tk)
                candidates.append(".".join(parts))
        for subj in candidates:
            if is_valid_subject(subj.encode()):
                out.append(subj)
            elif fail_on_bad:
                raise ValueError("generated invalid subject")
    return out


def process_template(template, user, acc):
    """A scoped signing key's user template applied to ``user`` of ``acc``
    (nats-server's processUserPermissionsTemplate)."""
    lim = dict(template)
    pub = dict(lim.get("pub") or {})
    sub = dict(lim.get("sub") or {})
    sub_allow_was = bool(sub.get("allow"))
    pub_allow_was = bool(pub.get("allow"))
    sub["allow"] = _apply_template(sub.get("allow") or [], user, acc, False)
    sub["deny"] = _apply_template(sub.get("deny") or [], user, acc, True)
    pub["allow"] = _apply_template(pub.get("allow") or [], user, acc, False)
    pub["deny"] = _apply_template(pub.get("deny") or [], user, acc, True)
    if sub_allow_was and not sub["allow"] and ">" not in sub["deny"]:
        sub["deny"].append(">")
    if pub_allow_was and not pub["allow"] and ">" not in pub["deny"]:
        pub["deny"].append(">")
    lim["pub"], lim["sub"] = pub, sub
    return lim


# -- time windows ---------------------------------------------------------------------


def validate_times(nats, now=None):
    """nats-server's validateTimes: ``(allowed now, seconds left or 0)``."""
    ranges = nats.get("times") or []
    if not ranges:
        return True, 0
    tz = None
    loc = nats.get("times_location") or ""
    if loc:
        tz = C.load_zone(loc)
        if tz is None:
            return False, 0
    current = datetime.datetime.now(tz) if now is None else now
    if tz is None:
        current = current.astimezone()
    midnight = current.replace(hour=0, minute=0, second=0, microsecond=0)
    for tr in ranges:
        start = C.parse_clock(tr.get("start"))
        end = C.parse_clock(tr.get("end"))
        if start is None or end is None:
            return False, 0
        s = midnight + datetime.timedelta(seconds=start)
        e = midnight + datetime.timedelta(seconds=end)
        if start > end:
            e += datetime.timedelta(days=1)
        if s < current < e:
            return True, (e - current).total_seconds()
    return False, 0


def validate_src(nats, host):
    """nats-server's validateSrc."""
    cidrs = C.cidr_list(nats.get("src"))
    if not cidrs:
        return True
    if not host:
        return False
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    for text in cidrs:
        net = C.parse_cidr(text)
        if net is None:
            return False
        if ip.version == net.version and ip in net:
            return True
    return False
