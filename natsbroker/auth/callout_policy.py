"""Who is asked about: which CONNECTs the auth callout service decides.

In config mode (``authorization { auth_callout { } }``) a :class:`CalloutPolicy`
picks them; in operator mode an account JWT with an ``authorization`` claim
turns callout on for its logins (:func:`operator_refusal`,
:func:`operator_login`, called by ``OperatorMode.authenticate``). The request
itself, its encryption and the service's answer are
:mod:`natsbroker.auth.callout`'s. The authenticators import this module, and
the callout module imports them: the policy sits below both.
"""

import attrs

from natsbroker.accounts.account import GLOBAL_ACCOUNT
from natsbroker.auth.permissions import deny_publish
from natsbroker.config.model import Permission, Permissions

AUTH_CALLOUT_SUBJECT = "$SYS.REQ.USER.AUTH"
# What a token is in client_info.user (nats-server 2.15 never sends it).
REDACTED = "[REDACTED]"
# The reason of an account's auth error event when no callout refused.
AUTH_FAILURE = "Authentication Failure"


# -- who is asked about ----------------------------------------------------------------------


def raw_auth_user(opts, no_auth_user=""):
    """nats-server's getRawAuthUser: what a CONNECT calls itself (its nkey,
    its user name, or the redacted token); the no_auth_user for a CONNECT
    without credentials."""
    if opts.nkey:
        return opts.nkey
    if opts.user:
        return opts.user
    if opts.auth_token:
        return REDACTED
    if no_auth_user and opts.password is None:
        return no_auth_user
    return ""


class CalloutPolicy:
    """Which CONNECTs go to the auth service (the configuration's
    ``authorization { auth_callout { } }``)."""

    def __init__(self, config):
        self.config = config
        self.callout = config.authorization.auth_callout
        self.account = self.callout.account or GLOBAL_ACCOUNT
        self.auth_users = frozenset(self.callout.auth_users)

    def wanted(self, opts, ok, account):
        """As nats-server (processClientOrLeafAuthentication's deferred
        check): one of the ``auth_users`` is decided by its own login; so
        is a user of an account of its own that ``allowed_accounts`` leaves
        out; anyone else (a failed login, a user of ``$G``, a user of any
        account when ``allowed_accounts`` is empty, or of one it lists) is
        the service's to decide, whatever its password said."""
        if ok and account not in (None, GLOBAL_ACCOUNT):
            allowed = self.callout.allowed_accounts
            if allowed and account not in allowed:
                return False
        return raw_auth_user(opts, self.config.no_auth_user) not in self.auth_users

    def admitted(self, perms, account):
        """A client of the callout account may not publish authorization
        requests itself: its permissions with that publish denied."""
        if account != self.account:
            return perms
        return deny_publish(perms, [AUTH_CALLOUT_SUBJECT])


# -- operator mode ---------------------------------------------------------------------------


def external_auth(jacc):
    """An account JWT's ``authorization`` claim when it turns callout on
    (nats-server: ``auth_users`` not empty), else None."""
    ext = jacc.claims.nats.get("authorization")
    if isinstance(ext, dict) and isinstance(ext.get("auth_users"), list) and ext["auth_users"]:
        return ext
    return None


class CalloutAccount(str):
    """The account of an operator-mode login whose CONNECT the account's
    auth service decides (what :meth:`OperatorCalloutPolicy.wanted` looks
    for)."""


class OperatorRoute:
    """Where an operator-mode callout goes: ``callout`` the JwtAccount with
    the ``authorization`` claim, ``request`` the Account the request is sent
    in (the client's: the callout account after the user JWT logged in, else
    ``$G``, where no service listens, as nats-server), ``user`` the user JWT's
    claims when it logged in (None otherwise)."""

    __slots__ = ("callout", "request", "user")

    def __init__(self, callout, request, user):
        self.callout = callout
        self.request = request
        self.user = user


def operator_refusal(client, opts, jacc, refused):
    """The answer of ``OperatorMode.authenticate`` when a user JWT of
    ``jacc`` is refused from here on: unchanged without callout; with it, a
    CONNECT that names one of the ``auth_users`` (its nkey or user field)
    stays refused (the account hears of it), any other goes to the service."""
    ext = external_auth(jacc)
    if client is None or ext is None:
        return refused
    if (opts.nkey or opts.user or "") in ext["auth_users"]:
        client.auth_error = (jacc.account, AUTH_FAILURE, {})
        return refused
    client.callout_route = OperatorRoute(jacc, client.account, None)
    return refused[:3] + (CalloutAccount(""),)


def operator_login(client, opts, jacc, juc, result):
    """The answer of ``OperatorMode.authenticate`` for a user JWT of
    ``jacc`` that logged in: unchanged without callout; one of the
    ``auth_users`` (by nkey, user or the JWT's key) is in, and may not
    publish authorization requests; anyone else goes to the service."""
    ext = external_auth(jacc)
    if client is None or ext is None:
        return result
    client.auth_error = None
    ok, user, perms, account = result
    if (opts.nkey or opts.user or juc.subject) in ext["auth_users"]:
        return ok, user, deny_callout_subject(perms), account
    client.callout_route = OperatorRoute(jacc, jacc.account, juc)
    return ok, user, perms, CalloutAccount(account)


def deny_callout_subject(perms):
    """``perms`` (a :class:`Permissions` or None, not changed) with
    publishing to the callout subject denied (mergeDenyPermissions)."""
    pub = perms.publish if perms is not None else None
    out = attrs.evolve(perms) if perms is not None else Permissions()
    out.publish = Permission(list(pub.allow) if pub else [],
                             (list(pub.deny) if pub else []) + [AUTH_CALLOUT_SUBJECT])
    return out


class OperatorCalloutPolicy:
    """Operator mode: which CONNECTs go to an auth service is decided per
    account by the login itself (:func:`operator_refusal`,
    :func:`operator_login`)."""

    operator_mode = True

    def wanted(self, opts, ok, account):
        """Did the login mark this CONNECT for its account's service?"""
        return isinstance(account, CalloutAccount)

    def admitted(self, perms, account):
        return perms
