"""Client authentication (user/password, bcrypt hashes, tokens, nkeys).

What a login is allowed is :mod:`natsbroker.auth.permissions`.

Passwords starting with ``$2`` are bcrypt hashes, as in nats-server; anything
else is compared in constant time. Nkey users sign their INFO nonce
(:mod:`natsbroker.auth.nkey`).
"""

import hmac

import bcrypt
from twisted.logger import Logger

from natsbroker.accounts.account import GLOBAL_ACCOUNT
from natsbroker.auth.callout_policy import CalloutPolicy, OperatorCalloutPolicy
from natsbroker.auth.nkey import check_signature
from natsbroker.auth.permissions import resolve
from natsbroker.gocompat.quote import go_quote

log = Logger()


class NkeyName(str):
    """The identity of a client that authenticated as an nkey user: its public
    key. (nats-server names these ``nkey:U...`` in logs, ``user:...`` others.)"""

    __slots__ = ()


def password_ok(stored, given):
    """Does ``given`` match the configured ``stored`` password (bcrypt hashes
    start with ``$2``; anything else compares in constant time)?"""
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
        # JWT operator mode: every client logs in with a user JWT.
        self.operator_mode = config.operator_mode
        if self.operator_mode:
            self.required = True
        # Whether INFO carries a nonce to sign (nkey users, operator mode).
        self.nonce_required = self.operator_mode or bool(self._nkeys)
        # Auth callout (config mode): which CONNECTs an external service
        # decides (natsbroker.auth.callout_policy); None without one.
        self.callout = None
        if a.auth_callout is not None and not self.operator_mode:
            self.callout = CalloutPolicy(config)
        elif self.operator_mode:
            # Operator mode: account JWTs turn callout on, per login.
            self.callout = OperatorCalloutPolicy()

    def authenticate(self, opts, tls_names=None, nonce=None, note=None, client=None):
        """``(ok, user_name, ResolvedPermissions|None, account_name)`` for
        CONNECT options.

        ``tls_names`` (under ``verify_and_map``): the names a verified client
        certificate carries, in nats-server's order; the first that is a
        user's name is the identity, and no password is asked for.
        ``nonce``: the one the client's INFO carried, which an nkey user's
        ``sig`` must sign; ``note(text)`` hears why a signature was refused
        (nats-server's debug line). An nkey user's name is an :class:`NkeyName`.
        In operator mode the user JWT decides (``client``: the connection,
        whose broker holds the operator mode), and a JWT user's name is a
        :class:`natsbroker.auth.jwt.user_limits.JwtUser`."""
        if self.operator_mode:
            operator = getattr(getattr(client, "broker", None), "operator", None)
            if operator is None:
                return _REFUSED
            ok, user, perms, account = operator.authenticate(opts, nonce, client, note)
            return ok, user, resolve(perms), account
        kind = connection_type(client)
        if self.callout is not None:
            ok, user, perms, account = self._authenticate(opts, tls_names, nonce, note, kind)
            if ok:
                perms = self.callout.admitted(perms, account)
            return ok, user, perms, account
        return self._authenticate(opts, tls_names, nonce, note, kind)

    def wants_callout(self, opts, result):
        """Must the auth service decide this CONNECT, whatever ``result``
        (what :meth:`authenticate` said of it) is?"""
        return self.callout is not None and self.callout.wanted(opts, result[0], result[3])

    def _authenticate(self, opts, tls_names, nonce, note, kind):
        # ``kind``: the connection's type (CONNECTION_TYPES); a user whose
        # allowed_connection_types leave it out is refused, as nats-server.
        a = self.config.authorization
        if self._nkeys:
            nk = opts.nkey
            no_auth = self.config.no_auth_user
            if not nk and no_auth in self._nkeys and not (
                    opts.user or opts.password or opts.auth_token):
                nk = no_auth
            if nk:
                return self._nkey_user(nk, opts.sig, nonce, nk == no_auth, note, kind)
        if tls_names is not None:
            return self._tls_mapped_user(opts, tls_names, kind)
        if not self.required:
            return True, None, None, GLOBAL_ACCOUNT
        if a.token:
            if opts.auth_token is not None and hmac.compare_digest(
                    a.token.encode(), opts.auth_token.encode()):
                return True, None, resolve(a.permissions), GLOBAL_ACCOUNT
            return _REFUSED
        if a.user and opts.user == a.user:
            if password_ok(a.password, opts.password):
                return True, a.user, resolve(a.permissions), GLOBAL_ACCOUNT
            return _REFUSED
        name = opts.user
        if not (name or opts.password or opts.auth_token) and self.config.no_auth_user:
            # As nats-server: only a CONNECT without user, password and token
            # is the no_auth_user.
            name = self.config.no_auth_user
            found = self._users.get(name)
            if found is not None and type_allowed(found[0], kind):
                return True, name, resolve(found[0].permissions), found[1]
            return _REFUSED
        found = self._users.get(name)
        if found is not None and type_allowed(found[0], kind) and password_ok(
                found[0].password, opts.password):
            return True, name, resolve(found[0].permissions), found[1]
        return _REFUSED

    def _tls_mapped_user(self, opts, tls_names, kind):
        """verify_and_map: the first name of the certificate that is a
        user's is the identity, whatever CONNECT says. As nats-server, the
        connection's user name becomes that user's (logs, events, /connz,
        $SYS.REQ.USER.INFO name it, never the CONNECT's), and the CONNECT's
        password must still be that user's (none for a user without one).
        A user not allowed on this kind of connection is no candidate."""
        for name in tls_names:
            found = self._users.get(name)
            if found is not None and type_allowed(found[0], kind):
                break
        else:
            return _REFUSED
        user, account = found
        if opts.user:
            log.warn("User {user} found in connect proto, but user required from cert",
                     user=go_quote(opts.user))
        opts.user = name
        if not password_ok(user.password or None, opts.password):
            return _REFUSED
        return True, name, resolve(user.permissions), account

    def admit(self, client):
        """After a successful login: what the identity still asks of the
        connection (a JWT user's account connection limit, its payload and
        subscription limits, its expiry). False if it was refused and is
        closing."""
        operator = getattr(client.broker, "operator", None)
        if operator is None:
            return True
        return operator.admit(client)

    def _nkey_user(self, nk, sig, nonce, is_no_auth_user, note, kind):
        found = self._nkeys.get(nk)
        if found is None or not type_allowed(found[0], kind):
            return _REFUSED
        u, account = found
        # As nats-server 2.15: the no_auth_user's nkey is taken unsigned.
        if not is_no_auth_user:
            why = check_signature(nk, sig, nonce)
            if why is not None:
                if note is not None:
                    note(why)
                return _REFUSED
        return True, NkeyName(nk), resolve(u.permissions), account


_REFUSED = (False, None, None, None)


def raw_auth_user(client):
    """nats-server's getRawAuthUser: the nkey or user name the client sent
    in CONNECT, a JWT user's public key, ``[REDACTED]`` for a token, else
    ``""`` (/connz's ``authorized_user`` and ``user`` filter, and the
    system account's client events, show it)."""
    opts = getattr(client, "opts", None)
    if opts is None:
        return ""
    if getattr(opts, "nkey", None):
        return opts.nkey
    if opts.user:
        return opts.user
    if getattr(opts, "jwt", None):
        user = getattr(client, "user", None)
        return str(user) if user else ""
    if getattr(opts, "auth_token", None):
        return "[REDACTED]"
    return ""


def connection_type(client):
    """nats-server's connection type (jwt.ConnectionType*) of a client
    connection: WEBSOCKET over the websocket listener, else STANDARD."""
    return "WEBSOCKET" if getattr(client, "websocket", None) is not None else "STANDARD"


def type_allowed(user, kind):
    """May ``user`` (a configured User or NkeyUser) log in over a connection
    of type ``kind``? (nats-server's connectionTypeAllowed: an empty list
    allows every type.)"""
    types = user.allowed_connection_types
    return not types or kind in types
