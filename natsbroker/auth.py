"""Client authentication (user/password, bcrypt hashes, tokens, nkeys) and permissions.

Passwords starting with ``$2`` are bcrypt hashes, as in nats-server; anything
else is compared in constant time. Nkey users sign their INFO nonce
(:mod:`natsbroker.nkey`).
"""

import hmac

import bcrypt

from natsbroker.accounts import GLOBAL_ACCOUNT
from natsbroker.nkey import check_signature
from natsbroker.subjects import subject_matches


class NkeyName(str):
    """The identity of a client that authenticated as an nkey user: its public
    key. (nats-server names these ``nkey:U...`` in logs, ``user:...`` others.)"""

    __slots__ = ()


def _password_ok(stored, given):
    if stored is None:
        return given in (None, "")
    if given is None:
        return False
    if stored.startswith("$2"):
        try:
            return bcrypt.checkpw(given.encode(), stored.encode())
        except ValueError:
            return False
    return hmac.compare_digest(stored.encode(), given.encode())


class ResolvedPermissions:
    """A user's permissions as bytes patterns, with a per-subject decision cache."""

    __slots__ = ("pub_allow", "pub_deny", "sub_allow", "sub_deny",
                 "allow_responses", "_pub_cache", "_responses")

    def __init__(self, perms):
        def pats(p, which):
            if p is None:
                return None
            lst = getattr(p, which)
            if which == "allow" and not lst:
                return None  # empty allow list: everything allowed
            return [s.encode() for s in lst]

        self.pub_allow = pats(perms.publish, "allow")
        self.pub_deny = pats(perms.publish, "deny") or None
        self.sub_allow = pats(perms.subscribe, "allow")
        self.sub_deny = pats(perms.subscribe, "deny") or None
        self.allow_responses = perms.allow_responses
        self._pub_cache = {}
        # Reply subjects this client may publish to once (allow_responses).
        self._responses = {}

    def grant_response(self, reply):
        if len(self._responses) >= 10000:
            self._responses.clear()  # bounded: a client that never replies
        self._responses[reply] = True

    def can_publish(self, subject):
        if self._responses and self._responses.pop(subject, None):
            return True
        r = self._pub_cache.get(subject)
        if r is None:
            r = _allowed(self.pub_allow, self.pub_deny, subject)
            if len(self._pub_cache) > 1024:
                self._pub_cache.clear()
            self._pub_cache[subject] = r
        return r

    def can_subscribe(self, subject):
        # Patterns match the subscription's tokens literally, as nats-server's
        # permission sublist does (so "foo.*" allows SUB "foo.>").
        return _allowed(self.sub_allow, self.sub_deny, subject)


def _allowed(allow, deny, subject):
    if allow is not None and not any(subject_matches(p, subject) for p in allow):
        return False
    if deny is not None and any(subject_matches(p, subject) for p in deny):
        return False
    return True


class Authenticator:
    """Decides whether a CONNECT may in, with which identity, permissions
    and account."""

    def __init__(self, config):
        self.config = config
        a = config.authorization
        # name -> (User, account name); users of the authorization block
        # belong to $G, as in nats-server.
        self._users = {u.user: (u, GLOBAL_ACCOUNT) for u in a.users}
        self._nkeys = {u.nkey: (u, GLOBAL_ACCOUNT) for u in a.nkeys}
        for acc in config.accounts:
            for u in acc.users:
                self._users[u.user] = (u, acc.name)
            for u in acc.nkeys:
                self._nkeys[u.nkey] = (u, acc.name)
        self.required = a.enabled or bool(self._users or self._nkeys)

    def authenticate(self, opts, tls_names=None, nonce=None, note=None):
        """``(ok, user_name, ResolvedPermissions|None, account_name)`` for
        CONNECT options.

        ``tls_names`` (under ``verify_and_map``): the names a verified client
        certificate carries, in nats-server's order; the first that is a
        user's name is the identity, and no password is asked for.
        ``nonce``: the one the client's INFO carried, which an nkey user's
        ``sig`` must sign; ``note(text)`` hears why a signature was refused
        (nats-server's debug line). An nkey user's name is an :class:`NkeyName`."""
        a = self.config.authorization
        if self._nkeys:
            nk = opts.nkey
            no_auth = self.config.no_auth_user
            if not nk and no_auth in self._nkeys and not (
                    opts.user or opts.password or opts.auth_token):
                nk = no_auth
            if nk:
                return self._nkey_user(nk, opts.sig, nonce, nk == no_auth, note)
        if tls_names is not None:
            for name in tls_names:
                found = self._users.get(name)
                if found is not None:
                    return True, name, _resolve(found[0].permissions), found[1]
            return _REFUSED
        if not self.required:
            return True, None, None, GLOBAL_ACCOUNT
        if a.token:
            if opts.auth_token is not None and hmac.compare_digest(
                    a.token.encode(), opts.auth_token.encode()):
                return True, None, _resolve(a.permissions), GLOBAL_ACCOUNT
            return _REFUSED
        if a.user and opts.user == a.user:
            if _password_ok(a.password, opts.password):
                return True, a.user, _resolve(a.permissions), GLOBAL_ACCOUNT
            return _REFUSED
        name = opts.user
        if not (name or opts.password or opts.auth_token) and self.config.no_auth_user:
            # As nats-server: only a CONNECT without user, password and token
            # is the no_auth_user.
            name = self.config.no_auth_user
            found = self._users.get(name)
            if found is not None:
                return True, name, _resolve(found[0].permissions), found[1]
            return _REFUSED
        found = self._users.get(name)
        if found is not None and _password_ok(found[0].password, opts.password):
            return True, name, _resolve(found[0].permissions), found[1]
        return _REFUSED

    def _nkey_user(self, nk, sig, nonce, is_no_auth_user, note):
        found = self._nkeys.get(nk)
        if found is None:
            return _REFUSED
        u, account = found
        # As nats-server 2.15: the no_auth_user's nkey is taken unsigned.
        if not is_no_auth_user:
            why = check_signature(nk, sig, nonce)
            if why is not None:
                if note is not None:
                    note(why)
                return _REFUSED
        return True, NkeyName(nk), _resolve(u.permissions), account


_REFUSED = (False, None, None, None)


def _resolve(perms):
    return ResolvedPermissions(perms) if perms is not None else None
