"""Client authentication (user/password, bcrypt hashes, tokens, nkeys) and permissions.

Passwords starting with ``$2`` are bcrypt hashes, as in nats-server; anything
else is compared in constant time. Nkey users sign their INFO nonce
(:mod:`natsbroker.auth.nkey`).
"""

import hmac
import time

import bcrypt
from twisted.logger import Logger

from natsbroker.accounts.account import GLOBAL_ACCOUNT
from natsbroker.config.model import Permission, Permissions, ResponsePermission
from natsbroker.gocompat.quote import go_quote
from natsbroker.auth.nkey import check_signature
from natsbroker.subjects.sublist import is_literal

log = Logger()


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
    """One connection's permissions, compiled, with its caches and its
    allow_responses state (every connection gets its own instance).

    The rules are nats-server's (client.go ``canSubscribe``,
    ``pubAllowedFullCheck``, ``deliverMsg``), as observed of nats-server 2.15:

    * A pattern matches the tokens of a subject as a Sublist does, the
      subject's own ``*``/``>`` being plain tokens ("foo.*" allows SUB
      "foo.>"); a subject with an empty token matches no pattern.
    * Subscribe entries may carry a queue group: "subject queue". A plain
      subscription needs a plain allow entry. A queue subscription is
      allowed by a plain entry unless queue entries also match its subject:
      then its queue must be one of theirs (a queue entry's group may have
      wildcards). A matching plain deny entry, or a queue deny entry of its
      group, refuses it.
    * Deny entries also filter what wildcard subscriptions receive
      (:meth:`delivery_denied`): SUB "foo.*" is allowed next to a deny of
      "foo.secret", but a message on foo.secret is not delivered to it.
    * allow_responses: when publishing is not allowed otherwise, a client may
      publish to the reply subject of a message it received, up to
      ``max_msgs`` times within ``expires`` seconds; with allow_responses
      and no publish allow list, nothing else may be published.
    """

    __slots__ = ("pub_allow", "pub_deny", "sub_allow", "sub_deny", "allow_responses",
                 "response_max", "response_expires", "pub_cache", "wildcard_subs",
                 "clock", "deny_cache", "_replies")

    def __init__(self, perms, clock=time.monotonic):
        pub, sub = perms.publish, perms.subscribe
        self.allow_responses = bool(perms.allow_responses)
        self.pub_allow = _compile(pub.allow, False) if pub is not None and pub.allow else None
        if self.pub_allow is None and self.allow_responses:
            self.pub_allow = ()  # nats-server turns off the blanket allow
        self.pub_deny = _compile(pub.deny, False) if pub is not None and pub.deny else None
        self.sub_allow = _compile(sub.allow, True) if sub is not None and sub.allow else None
        self.sub_deny = _compile(sub.deny, True) if sub is not None and sub.deny else None
        limits = perms.response or _DEFAULT_RESPONSE
        # 0 is nats-server's default (validateResponsePermissions), < 0 no limit.
        self.response_max = limits.max_msgs or _DEFAULT_RESPONSE.max_msgs
        self.response_expires = limits.expires or _DEFAULT_RESPONSE.expires
        # Publish subject -> allowed by the allow/deny lists (reply grants aside).
        self.pub_cache = {}
        # Subjects of this client's wildcard subscriptions whose deliveries
        # are checked against the deny list.
        self.wildcard_subs = set()
        self.clock = clock
        # Delivered subject -> True (denied), False (no deny entry matches) or
        # the queue groups of the deny entries it matches.
        self.deny_cache = {}
        # Reply subject -> [granted at, replies published] (allow_responses).
        self._replies = {}

    # -- publish ---------------------------------------------------------

    def can_publish(self, subject):
        """May this client publish to ``subject`` (bytes)? A reply it is
        granted counts as used."""
        ok = self.pub_cache.get(subject)
        if ok is None:
            ok = _pub_allowed(self.pub_allow, self.pub_deny, subject)
            if len(self.pub_cache) >= _CACHE_MAX:
                self.pub_cache.clear()
            self.pub_cache[subject] = ok
        if ok:
            return True
        return bool(self._replies) and self._reply_allowed(subject)

    def allows_publish(self, subject):
        """Do the allow and deny lists let this client publish to ``subject``
        (bytes)? Reply grants play no part (what a plugin acting for the
        client asks: IClient.may_publish)."""
        ok = self.pub_cache.get(subject)
        if ok is None:
            ok = _pub_allowed(self.pub_allow, self.pub_deny, subject)
            if len(self.pub_cache) >= _CACHE_MAX:
                self.pub_cache.clear()
            self.pub_cache[subject] = ok
        return ok

    def grant_response(self, reply):
        """A message with ``reply`` was delivered to this client
        (allow_responses). As nats-server: a fresh grant, or, while the
        last grant for that reply subject is neither used up nor expired,
        one more use counted against it."""
        replies = self._replies
        now = self.clock()
        grant = replies.get(reply)
        if grant is not None and (self.response_max < 0 or grant[1] < self.response_max) and (
                self.response_expires < 0 or now - grant[0] <= self.response_expires):
            grant[1] += 1
            return
        replies[reply] = [now, 0]
        if len(replies) > _REPLY_PRUNE_AT:
            self._prune_replies(now)

    def _reply_allowed(self, subject):
        grant = self._replies.get(subject)
        if grant is None:
            return False
        grant[1] += 1
        if 0 < self.response_max < grant[1] or (
                self.response_expires > 0 and self.clock() - grant[0] > self.response_expires):
            del self._replies[subject]
            return False
        return True

    def _prune_replies(self, now):
        # nats-server's pruneReplyPerms: drop grants used up or expired.
        mx, ttl = self.response_max, self.response_expires
        for reply, (at, n) in list(self._replies.items()):
            if (mx > 0 and n >= mx) or (ttl > 0 and now - at > ttl):
                del self._replies[reply]

    # -- subscribe -------------------------------------------------------

    def can_subscribe(self, subject, queue=None):
        """May this client subscribe to ``subject`` (in queue group ``queue``)?"""
        tokens = subject.split(b".")
        allowed = True
        if self.sub_allow is not None:
            allowed, queues = _match(self.sub_allow, tokens)
            if queue and queues:
                allowed = _queue_in(queue, queues)
        if allowed and self.sub_deny is not None:
            denied, queues = _match(self.sub_deny, tokens)
            allowed = not denied and not (queue and queues and _queue_in(queue, queues))
        return allowed

    def checks_deliveries(self, subject, queue=None):
        """After an allowed SUB: True if deliveries to a subscription on
        ``subject`` (in ``queue``) must be checked with :meth:`delivery_denied`,
        and remembers the subject in :attr:`wildcard_subs`. Only a wildcard
        subscription can receive a denied subject, and only if some deny
        entry (for it) overlaps its subject."""
        if self.sub_deny is None or is_literal(subject):
            return False
        tokens = subject.split(b".")
        if not any(_overlap(pattern, tokens) for pattern, group in self.sub_deny
                   if group is None or queue):
            return False
        self.wildcard_subs.add(subject)
        return True

    def delivery_denied(self, subject, queue):
        """Must a message on ``subject`` not reach a wildcard subscription
        (of queue group ``queue``)? (nats-server's deny filter, checkDenySub.)"""
        r = self.deny_cache.get(subject)
        if r is None:
            denied, queues = _match(self.sub_deny, subject.split(b"."))
            r = True if denied else tuple(queues) or False
            if len(self.deny_cache) >= _CACHE_MAX:
                self.deny_cache.clear()
            self.deny_cache[subject] = r
        if r is True or r is False:
            return r
        return bool(queue) and _queue_in(queue, r)


_CACHE_MAX = 1024  # subjects remembered per connection (publish, deny filter)
_DEFAULT_RESPONSE = ResponsePermission()  # nats-server's: 1 reply within 2 minutes
_REPLY_PRUNE_AT = 4096  # nats-server's replyPermLimit


def _compile(entries, with_queues):
    """Permission entries to ``(tokens, queue)`` pairs, ``queue`` None for a
    plain entry. Only subscribe entries are split into subject and queue;
    a publish entry is a subject even with a space in it (it then matches
    nothing), as nats-server inserts it."""
    out = []
    for entry in entries:
        queue = None
        if with_queues:
            fields = entry.split()
            if not fields or len(fields) > 2:
                continue  # nats-server logs and skips it; the config check refuses it
            entry = fields[0]
            if len(fields) == 2:
                queue = fields[1].encode()
        out.append((tuple(entry.encode().split(b".")), queue))
    return tuple(out)


def _tokens_match(pattern, tokens):
    n = len(tokens)
    for i, p in enumerate(pattern):
        if p == b">":
            return n > i
        if i >= n or (p != b"*" and p != tokens[i]):
            return False
    return len(pattern) == n


def _overlap(pattern, tokens):
    """Could a subject match both ``pattern`` and the subscription
    ``tokens`` (both with wildcards)?"""
    for i, p in enumerate(pattern):
        if i >= len(tokens):
            return False
        t = tokens[i]
        if p == b">" or t == b">":
            return True
        if p != t and p != b"*" and t != b"*":
            return False
    return len(pattern) == len(tokens)


def _match(entries, tokens):
    """``(a plain entry matches, [queue groups of matching queue entries])``."""
    plain = False
    queues = []
    if b"" in tokens:
        return plain, queues  # as nats-server's Sublist: no match at all
    for pattern, queue in entries:
        if _tokens_match(pattern, tokens):
            if queue is None:
                plain = True
            else:
                queues.append(queue)
    return plain, queues


def _pub_allowed(allow, deny, subject):
    tokens = subject.split(b".")
    if b"" in tokens:
        return allow is None  # matches no entry
    if allow is not None and not any(_tokens_match(p, tokens) for p, _ in allow):
        return False
    if deny is not None and any(_tokens_match(p, tokens) for p, _ in deny):
        return False
    return True


def _queue_in(queue, groups):
    """nats-server's queueMatches: the queue group is one of ``groups``, or
    within one that has wildcards ("q.*" takes "q.a")."""
    for group in groups:
        if queue == group or ((b"*" in group or b">" in group) and _subset_match(queue, group)):
            return True
    return False


def _subset_match(subject, test):
    """nats-server's subjectIsSubsetMatch: every subject ``subject`` matches,
    ``test`` matches too."""
    tokens = subject.split(b".")
    tests = test.split(b".")
    for i, t2 in enumerate(tests):
        if i >= len(tokens) or not t2:
            return False
        if t2 == b">":
            return True
        t1 = tokens[i]
        if not t1 or t1 == b">":
            return False
        if t1 == b"*":
            if t2 != b"*":
                return False
            continue
        if t2 != b"*" and t1 != t2:
            return False
    return len(tokens) == len(tests)


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
        # decides (natsbroker.auth.callout); None without one.
        self.callout = None
        if a.auth_callout is not None and not self.operator_mode:
            from natsbroker.auth.callout import CalloutPolicy
            self.callout = CalloutPolicy(config)
        elif self.operator_mode:
            # Operator mode: account JWTs turn callout on, per login.
            from natsbroker.auth.callout import OperatorCalloutPolicy
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
        :class:`natsbroker.auth.jwt.operator.JwtUser`."""
        if self.operator_mode:
            operator = getattr(getattr(client, "broker", None), "operator", None)
            if operator is None:
                return _REFUSED
            ok, user, perms, account = operator.authenticate(opts, nonce, client, note)
            return ok, user, _resolve(perms), account
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
            if found is not None and type_allowed(found[0], kind):
                return True, name, _resolve(found[0].permissions), found[1]
            return _REFUSED
        found = self._users.get(name)
        if found is not None and type_allowed(found[0], kind) and _password_ok(
                found[0].password, opts.password):
            return True, name, _resolve(found[0].permissions), found[1]
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
        if not _password_ok(user.password or None, opts.password):
            return _REFUSED
        return True, name, _resolve(user.permissions), account

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
        return True, NkeyName(nk), _resolve(u.permissions), account


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


def deny_publish(perms, subjects):
    """``perms`` (ResolvedPermissions or None) with publishing to
    ``subjects`` denied as well (nats-server's mergeDenyPermissions)."""
    if perms is None:
        return ResolvedPermissions(Permissions(publish=Permission(deny=list(subjects))))
    perms.pub_deny = (perms.pub_deny or ()) + _compile(subjects, False)
    perms.pub_cache.clear()
    return perms


def _resolve(perms):
    return ResolvedPermissions(perms) if perms is not None else None
