"""Operator mode at run time: trusted keys, accounts made from their JWTs,
and the login of a user JWT, as nats-server's (server/auth.go
``processClientOrLeafAuthentication``, server/accounts.go, server/jwt.go).

A client sends its user JWT in CONNECT (``jwt``) and, unless the JWT is a
bearer token, ``sig``: its signature of the INFO ``nonce`` with the user's
key. The JWT must be issued by its account's key or one of the account's
signing keys; the account JWT, found by the resolver, by a trusted operator
key. Every refusal is nats-server's ``-ERR 'Authorization Violation'`` with
its debug line saying why. The account is made (``Broker.add_account``) the
first time one of its users logs in.
"""

import time

from twisted.logger import Logger
from zope.interface import implementer

from natsbroker import COMPAT_VERSION
from natsbroker.accounts.imports import unwire
from natsbroker.auth import callout_policy
from natsbroker.auth.jwt import claims as C, jslimits, links
from natsbroker.auth.jwt.resolver import (
    CacheResolver,
    DirResolver,
    FetchPending,
    MemoryResolver,
    ResolverError,
    URLResolver,
    fetch_blocking,
)
from natsbroker.auth.jwt.trust import ACCOUNT_VALIDATION, trusted_keys, verify_account
from natsbroker.auth.jwt.user_limits import (
    JwtUser,
    permission_limits_empty,
    permissions_from_jwt,
    process_template,
    validate_src,
    validate_times,
)
from natsbroker.auth.nkey import decode_signature
from natsbroker.auth.users import connection_type
from natsbroker.config.model import CONNECTION_TYPES, MapDest, SubjectMapping
from natsbroker.config.operator import OperatorError
from natsbroker.gocompat.durations import format_duration
from natsbroker.gocompat.quote import go_quote
from natsbroker.gocompat.times import go_time_string, rfc3339
from natsbroker.interfaces import IBrokerPlugin, IClientObserver, ISystemEvents

log = Logger()

ERR_MAX_ACCOUNT_CONNECTIONS = "maximum account active connections exceeded"
ERR_MAX_SUBS = "maximum subscriptions exceeded"
ERR_EXPIRED = "User Authentication Expired"


# -- start-up checks ---------------------------------------------------------------


def check_resolver_start(config):
    """What nats-server's NewServer checks of a URL resolver, before it
    serves anyone (and before the reactor runs): no preloads, its server
    answers ``GET <url>``; then it fetches the system account (kept in
    ``config.resolver.fetched``; without it the server bootstraps one).
    Raises :class:`OperatorError`. Run by the commands that start a server
    (``natsbroker``, ``twistd natsbroker``), not by ``-t``."""
    rc = config.resolver
    if not config.operators or rc is None or rc.type != "URL":
        return
    if config.resolver_preload:
        raise OperatorError("resolver preloads only available for writeable resolver types "
                            "MEM/DIR/CACHE_DIR")
    try:
        fetch_blocking(rc.url)
    except ResolverError as e:
        raise OperatorError(str(e)) from None
    sys_key = config.system_account
    if len(config.operators) == 1 and sys_key and sys_key != "$SYS" and C.is_public_key(sys_key, "A"):
        try:
            rc.fetched[sys_key] = fetch_blocking(rc.url + sys_key)
        except ResolverError:
            pass


# -- accounts ---------------------------------------------------------------------


class JwtAccount:
    """An account as its JWT says: the broker's :class:`Account` and the
    claims that govern it. Its exports (``streams``, ``services``) and the
    imports wired for it (``stream_imports``, ``service_imports``) are in
    the shape :mod:`natsbroker.accounts.exports` checks imports against."""

    def __init__(self, account, claims, operator=None):
        self.account = account
        self.operator = operator
        self.stream_imports = []
        self.service_imports = []
        self.streams = {}
        self.services = {}
        self.expired_flag = False
        self._expiry = None
        self.update(claims)

    name = property(lambda self: self.account.name)

    @property
    def trace_label(self):
        """nats-server's traceLabel: ``<key>/<name>``."""
        return "%s/%s" % (self.name, self.name_tag) if self.name_tag else self.name

    def update(self, claims):
        self.claims = claims
        self.name_tag = claims.name
        self.signing_keys = claims.signing_keys()
        self.revocations = claims.revocations()
        limits = claims.limits()
        self.max_conns = _limit(limits.get("conn"))
        self.max_subs = _limit(limits.get("subs"))
        self.max_payload = _limit(limits.get("payload"))
        self.disallow_bearer = bool(limits.get("disallow_bearer"))
        self.expires = claims.expires
        self.default_permissions = permissions_from_jwt(claims.nats.get("default_permissions"))
        if self.operator is not None:
            self.streams, self.services = links.make_exports(self.operator, self)
            self._check_expiration()

    def _check_expiration(self):
        """nats-server's checkExpiration: an account JWT that expires later
        takes its clients with it then (a reactor timer)."""
        self.cancel_expiry()
        if not self.expires:
            self.expired_flag = False
            return
        left = self.expires - int(time.time())
        if left <= 0:
            self.expired_flag = True
            return
        self.expired_flag = False
        self._expiry = self.operator.broker.reactor.callLater(left, self.operator.account_expired, self)

    def cancel_expiry(self):
        if self._expiry is not None and self._expiry.active():
            self._expiry.cancel()
        self._expiry = None

    def has_issuer(self, issuer):
        """``(known, scope)``: the account's own key or one of its signing
        keys (scope: a user_scope dict, or None)."""
        if issuer == self.account.name:
            return True, None
        if issuer in self.signing_keys:
            return True, self.signing_keys[issuer]
        return False, None

    def revoked(self, subject, issued_at):
        """nats-server's isRevoked: revoked at or after the JWT was issued."""
        rev = self.revocations
        if not rev:
            return False
        t = rev.get(subject)
        if t is None or t < issued_at:
            t = rev.get("*")
            if t is None or t < issued_at:
                return False
        return True

    def expired(self, now=None):
        if self.expired_flag:
            return True
        now = time.time() if now is None else now
        return bool(self.expires) and now > self.expires


def _limit(v):
    """A JWT limit as nats-server reads it: -1 is no limit, and an absent
    one is Go's zero value, 0 (an account JWT without limits takes no
    connections)."""
    if v is None:
        return 0
    return int(v)


def _min_limit(value, limit):
    """nats-server's minLimit: the lower of two limits, -1 meaning none."""
    if value != C.NO_LIMIT:
        if limit != C.NO_LIMIT and limit < value:
            return limit
        return value
    return limit


def _mappings(claims):
    out = []
    for source, dests in (claims.nats.get("mappings") or {}).items():
        out.append(SubjectMapping(source, [MapDest(d.get("subject", ""), d.get("weight") or 100,
                                                   d.get("cluster") or "") for d in dests or ()]))
    return out


# -- connection types -----------------------------------------------------------------


def _connection_type_allowed(limits, client, debug):
    """nats-server's check of a JWT user's allowed_connection_types: the
    types it knows (upper cased) must include this connection's; a list
    naming only types it does not know refuses every connection."""
    types = limits.get("allowed_connection_types")
    if not types:
        return True
    known = [t.upper() for t in types if t.upper() in CONNECTION_TYPES]
    unknown = [t.upper() for t in types if t.upper() not in CONNECTION_TYPES]
    if unknown:
        debug("invalid connection types [%s]" % " ".join(go_quote(t) for t in unknown))
        if not known:
            return False
    if connection_type(client) not in known:
        debug("Connection type not allowed")
        return False
    return True


# -- the mode itself -------------------------------------------------------------------


@implementer(IBrokerPlugin, IClientObserver)
class OperatorMode:
    """Operator mode for one broker: its trusted keys, its resolver, the
    accounts loaded from JWTs; the login of user JWTs; the limits and
    expiry of JWT users' connections. A broker plugin so that it starts
    (the resolver's requests, the store checks) and stops with the server."""

    name = "operator"

    def __init__(self, broker, config):
        self.broker = broker
        self.config = config
        self.operators = [C.decode_operator(j) for j in config.operators]
        self.trusted = set(trusted_keys(config, self.operators))
        first = self.operators[0] if self.operators else None
        self.operator_key = first.subject if first else ""
        self.strict = bool(first and first.strict_signing_key_usage)
        # getOperatorKeys: who may send a delete request.
        self.operator_keys = set()
        if first:
            if not self.strict:
                self.operator_keys.add(first.subject)
            self.operator_keys.update(first.signing_keys)
        self.pinned = set(config.resolver_pinned_accounts)
        if self.pinned and config.system_account:
            self.pinned.add(config.system_account)
        self.accounts = {}  # public key -> JwtAccount
        self._wire_queue = []
        self._wiring = False
        self._activation_timers = {}  # importer key -> [IDelayedCall]
        self._seq = 0
        rc = config.resolver
        if rc is None:
            self.resolver = None
        elif rc.type == "FULL":
            self.resolver = DirResolver(rc.dir, rc.limit, rc.allow_delete, rc.interval, rc.timeout)
        elif rc.type == "CACHE":
            self.resolver = CacheResolver(rc.dir, rc.limit, rc.ttl, rc.timeout)
        elif rc.type == "URL":
            # (with the system account's JWT, fetched at start: check_resolver_start)
            self.resolver = URLResolver(rc.url, rc.fetched)
        else:
            self.resolver = MemoryResolver()
        self._preload_errors = []
        if self.resolver is not None:
            for key, token in config.resolver_preload.items():
                try:
                    self.resolver.store(key, token)
                except (ResolverError, C.JWTError, OSError) as e:
                    self._preload_errors.append("preload account error for %s: %s" % (go_quote(key), e))
        self._bootstrap_system_account()

    def _bootstrap_system_account(self):
        sys_acc = self.broker.system_account
        name = sys_acc.name
        self.bootstrapped = False
        if not C.is_public_key(name, "A") or self.resolver is None:
            return
        try:
            if isinstance(self.resolver, URLResolver):
                # (fetched at start, or bootstrapped until a login fetches it)
                token = self.resolver.cached(name)
            else:
                token = self.resolver.fetch(name)
        except ResolverError:
            token = None
        claims = verify_account(token, name, self.trusted) if token is not None else None
        if claims is None:
            # The full resolver starts without one (nats-server's
            # "bootstrapping system account").
            self.bootstrapped = True
            return
        self.accounts[name] = JwtAccount(sys_acc, claims, self)

    # -- IBrokerPlugin -----------------------------------------------------

    def start(self, broker):
        log.info("Trusted Operators")
        for op in self.operators:
            log.info("  System  : {a}", a=go_quote(op.data.get("aud") or ""))
            log.info("  Operator: {n}", n=go_quote(op.name))
            log.info("  Issued  : {t}", t=go_time_string(op.issued_at))
            log.info("  Expires : {t}", t=go_time_string(op.expires) if op.expires else "Never")
        for text in self._preload_errors:
            log.error("{t}", t=text)
        if self.resolver is not None:
            self.resolver.start(self)
        self.wire(list(self.accounts))
        if self.bootstrapped and self.config.resolver is not None and self.config.resolver.type != "MEMORY":
            log.info("Using bootstrapping system account")

    def stop(self):
        if self.resolver is not None:
            self.resolver.stop()
        for jacc in self.accounts.values():
            jacc.cancel_expiry()
        for key in list(self._activation_timers):
            self._cancel_activation_timers(key)

    # -- IClientObserver ---------------------------------------------------

    def client_connected(self, client):
        pass

    def client_closed(self, client):
        call = getattr(client, "_jwt_expiry", None)
        if call is not None and call.active():
            call.cancel()

    # -- accounts ------------------------------------------------------------

    def lookup_account(self, name):
        """``(JwtAccount, None)`` or ``(None, why)`` (nats-server's
        LookupAccount with the resolver behind it)."""
        jacc = self.accounts.get(name)
        if jacc is not None:
            return jacc, None
        if not C.is_public_key(name, "A"):
            return None, "will only fetch valid account keys"
        if self.resolver is None:
            return None, "Account Resolver Missing"
        began = time.monotonic()
        fetched = isinstance(self.resolver, URLResolver) and self.resolver.known(name)
        try:
            token = self.resolver.fetch(name)
        except FetchPending as e:
            # (asynchronous: account_fetched loads it for whom it waits)
            return None, str(e)
        except ResolverError as e:
            if not fetched:
                self._fetch_took(name, began)
                log.warn("Account fetch failed: {e}", e=e)
            return None, str(e)
        if not fetched:
            self._fetch_took(name, began)
        claims = verify_account(token, name, self.trusted)
        if claims is None:
            try:
                C.decode_account(token)
            except C.JWTError as e:
                return None, str(e)
            return None, ACCOUNT_VALIDATION
        log.debug("Updating account claims: {a}/{n}", a=name, n=claims.name)
        account = self.broker.add_account(name, mappings=_mappings(claims))
        jacc = self.accounts[name] = JwtAccount(account, claims, self)
        # Its imports, and those of accounts that were waiting for it.
        self.wire([name] + self._importers_of(name))
        # Then JetStream, as its JWT says (after the imports: one of
        # $JS.API from another account stands in for its own answers).
        jslimits.configure(self.broker, jacc, system=account.is_system)
        return jacc, None

    # -- exports and imports ---------------------------------------------------

    def _importers_of(self, name):
        return [k for k, j in self.accounts.items() if k != name and links.imports_from(j, name)]

    def wire(self, names):
        """Wire the imports of the accounts ``names`` anew. Accounts looked
        up while doing so (exporters) queue theirs: one pass, each account
        once, however they import from each other."""
        self._wire_queue.extend(names)
        if self._wiring:
            return
        self._wiring = True
        done = set()
        try:
            while self._wire_queue:
                name = self._wire_queue.pop(0)
                jacc = self.accounts.get(name)
                if name in done or jacc is None:
                    continue
                done.add(name)
                self._cancel_activation_timers(name)
                links.wire(self, jacc)
        finally:
            self._wiring = False

    def activation_expires(self, importer, seconds):
        """An activation token of ``importer``'s expires in ``seconds``: its
        imports are checked again then (nats-server's activationExpired)."""
        call = self.broker.reactor.callLater(seconds, self._activation_expired, importer)
        self._activation_timers.setdefault(importer, []).append(call)

    def _activation_expired(self, importer):
        jacc = self.accounts.get(importer)
        if jacc is not None and not jacc.expired():
            self.wire([importer])

    def _cancel_activation_timers(self, name):
        for call in self._activation_timers.pop(name, ()):
            if call.active():
                call.cancel()

    def account_expired(self, jacc):
        """An account JWT's ``exp`` came (nats-server's expiredTimeout): its
        clients go, and no one logs in to it any more."""
        jacc._expiry = None
        jacc.expired_flag = True
        for client in self._clients_of(jacc):
            _account_auth_expired(client)

    def _clients_of(self, jacc):
        return [c for c in list(self.broker.clients()) if c.account is jacc.account and not c.closed]

    def account_fetched(self, name, began, why):
        """The URL resolver's fetch of ``name`` ended (``why``: None, or why
        it failed): nats-server's debug and warning lines; an account whose
        imports wait for it is loaded."""
        self._fetch_took(name, began)
        if why is not None:
            log.warn("Account fetch failed: {e}", e=why)
            return
        if name not in self.accounts and (self._importers_of(name) or name == self.broker.system_account.name):
            self.lookup_account(name)

    def prefetch_login(self, opts, client):
        """A Deferred when the account of the user JWT in ``opts`` (and the
        exporters of its imports) must be fetched before the login can be
        decided (the URL resolver), else None. It fires (never fails) when
        they are at hand."""
        resolver = self.resolver
        if not isinstance(resolver, URLResolver):
            return None
        token = opts.jwt or _cookie_jwt(client)
        try:
            juc = C.decode_user(token) if token else None
        except C.JWTError:
            juc = None
        if juc is None:
            return None
        vr = C.ValidationResults()
        juc.validate(vr)
        if vr.is_blocking(True):
            return None
        issuer = juc.issuer_account or juc.issuer
        if self.pinned and issuer not in self.pinned:
            return None
        if issuer in self.accounts or not C.is_public_key(issuer, "A") or resolver.cached(issuer):
            return None
        from twisted.internet import defer
        seen = set()

        def fetch(name):
            seen.add(name)
            return resolver.fetch_async(name).addCallbacks(exporters, lambda f: None)

        def exporters(token):
            # The accounts its imports name are looked up when it loads.
            try:
                claims = C.decode_account(token)
            except C.JWTError:
                return None
            wanted = []
            for imp in claims.nats.get("imports") or ():
                name = imp.get("account") if isinstance(imp, dict) else None
                if (isinstance(name, str) and name not in seen and name not in self.accounts
                        and C.is_public_key(name, "A") and not resolver.cached(name)):
                    wanted.append(fetch(name))
            return defer.DeferredList(wanted) if wanted else None

        return fetch(issuer)

    def _fetch_took(self, name, began):
        ns = int((time.monotonic() - began) * 1e9)
        log.debug("Account [{a}] fetch took {d}", a=name, d=format_duration(max(ns, 1)))

    def account_changed(self, key, token):
        """The full resolver stored a new JWT for ``key``: a loaded account
        takes its new claims."""
        if key in self.accounts:
            err = self.update_account(key, token)
            if err is None:
                pass
            elif isinstance(self.resolver, CacheResolver):
                log.error("DirResolver - Update resulted in error {e}", e=err)
            else:
                log.error('DirResolver - Update for account "{a}" resulted in error {e}', a=key, e=err)

    def update_account(self, key, token):
        """A loaded account takes the claims of ``token`` (limits, signing
        keys, revocations, mappings); its users now revoked are
        disconnected. Returns None, or why the JWT was refused."""
        jacc = self.accounts.get(key)
        if jacc is None:
            return None
        claims = verify_account(token, key, self.trusted)
        if claims is None:
            return ACCOUNT_VALIDATION
        log.debug("Updating account claims: {a}/{n}", a=key, n=claims.name)
        old_keys = dict(jacc.signing_keys)
        jacc.update(claims)
        jacc.account.set_mappings(_mappings(claims))
        # Its imports, and those of the accounts importing from it.
        self.wire([key] + self._importers_of(key))
        # JetStream enabled, its limits changed, or disabled (stores kept).
        jslimits.configure(self.broker, jacc, system=jacc.account.is_system)
        self._apply_to_clients(jacc, claims, old_keys)
        self.broker.account_event("account_updated", jacc.account)
        return None

    def _apply_to_clients(self, jacc, claims, old_keys):
        """What an account JWT update does to the account's clients, in
        nats-server's order: the oldest over the connection limit go, the
        others take the new limits, revoked users and bearer users the
        account no longer allows go, then the users of a signing key that
        was removed or whose scope changed."""
        # (Over the connection limit, the newest connections go: nats-server
        # keeps the ones that came first.)
        clients = sorted(self._clients_of(jacc), key=lambda c: c.start)
        revocations = claims.nats.get("revocations") is not None
        for i, client in enumerate(clients):
            if jacc.max_conns != C.NO_LIMIT and i >= jacc.max_conns:
                _error(client, ERR_MAX_ACCOUNT_CONNECTIONS)
                client.send_err(ERR_MAX_ACCOUNT_CONNECTIONS, close=True,
                                reason="Maximum Account Connections Exceeded")
                continue
            user = client.user
            if not isinstance(user, JwtUser):
                continue
            self._apply_limits(client, jacc, user, at_login=False)
            if not (revocations or jacc.disallow_bearer):
                continue
            juc = user.claims
            # (The login's bearer flag, a scope's included: nats-server
            # re-reads only the JWT's own, so keeps a scoped bearer user the
            # account now forbids; a leaked JWT must not outlive that here.)
            if getattr(user, "bearer", False) and jacc.disallow_bearer:
                log.debug("{prefix} - Bearer User JWT not allowed", prefix=client.log_prefix())
                client.send_err("Authorization Violation", close=True,
                                reason="Authentication Failure")
            elif jacc.revoked(juc.subject, juc.issued_at):
                log.debug("{prefix} - User Authentication Revoked - Account:{a}/{n} - jwt:{u}",
                          prefix=client.log_prefix(), a=jacc.name, n=jacc.name_tag, u=str(user))
                client.send_err("User Authentication Revoked", close=True, reason="Credentials Revoked")
        new_keys = jacc.signing_keys
        if new_keys == old_keys:
            return
        for client in self._clients_of(jacc):
            user = client.user
            if not isinstance(user, JwtUser) or not user.claims.issuer_account:
                continue
            sk = user.claims.issuer
            if sk not in new_keys or new_keys[sk] != old_keys.get(sk):
                client.close("Authentication Failure")

    def account_deleted(self, key):
        """The resolver deleted ``key``'s JWT: no one logs in to it any more
        (nats-server's removeCb locks new clients out)."""
        jacc = self.accounts.get(key)
        if jacc is None:
            return
        log.debug("Disable account {a} due to remove", a=key)
        jacc.max_conns = jacc.max_subs = jacc.max_payload = 0
        # (removeCb: expired, its clients gone, its service imports too)
        jacc.expired_flag = True
        for client in self._clients_of(jacc):
            _account_auth_expired(client)
        unwire(jacc.account)
        jacc.cancel_expiry()
        # (removeCb: its JetStream goes too; its stores stay)
        jslimits.disable(self.broker, jacc)
        self.broker.account_event("account_removed", jacc.account)

    def server_response(self, body, server_last=False):
        """A system-account reply: ``{"server": <ServerInfo>, ...body}``
        (``server_last``: after the body, as a Go map marshals it)."""
        import json
        b = self.broker
        speakers = b.providers(ISystemEvents)
        if speakers:
            # The system account's ServerInfo and its one sequence number.
            info = speakers[0].server_info()
        else:
            self._seq += 1
            info = {"name": b.server_name, "host": b.host or "0.0.0.0", "id": b.server_id,
                    "ver": COMPAT_VERSION, "jetstream": bool(b.config.jetstream.enabled),
                    "flags": 0, "seq": self._seq, "time": rfc3339(time.time_ns())}
        out = dict(body) if server_last else {"server": info}
        if server_last:
            out["server"] = info
        else:
            out.update(body)
        return json.dumps(out, separators=(",", ":")).encode()

    # -- login ----------------------------------------------------------------

    def authenticate(self, opts, nonce, client, note):
        """``(ok, JwtUser, Permissions|None, account name)`` for a CONNECT in
        operator mode; ``note(text)`` hears why a login was refused (at
        debug level, as nats-server; the reasons it logs as errors are
        logged here with the client's prefix)."""
        refused = (False, None, None, None)
        debug = note or (lambda text: None)
        token = opts.jwt or _cookie_jwt(client)
        if not token:
            debug("Authentication requires a user JWT")
            return refused
        try:
            juc = C.decode_user(token)
        except C.JWTError:
            # (nats-server 2.15 says the same of a token it cannot decode.)
            debug("Authentication requires a user JWT")
            return refused
        vr = C.ValidationResults()
        juc.validate(vr)
        if vr.is_blocking(True):
            debug("User JWT no longer valid: %s" % vr)
            return refused
        nats = juc.nats
        issuer = juc.issuer_account or juc.issuer
        if self.pinned and issuer not in self.pinned:
            debug("Account %s not listed as operator pinned account" % issuer)
            return refused
        jacc, why = self.lookup_account(issuer)
        if jacc is None:
            debug("Account JWT lookup error: %s" % why)
            return refused
        # Auth callout (natsbroker.auth.callout_policy): from here on, an account
        # whose JWT turns callout on has its service decide refused logins
        # and the logins of users other than its auth_users.
        refused = callout_policy.operator_refusal(client, opts, jacc, refused)
        if jacc.claims.issuer not in self.trusted:
            debug("Account JWT not signed by trusted operator")
            return refused
        known, scope = jacc.has_issuer(juc.issuer)
        limits = nats
        if not known:
            debug("User JWT issuer is not known")
            return refused
        if scope is not None:
            if scope.get("key") != juc.issuer:
                debug("User JWT is not valid: issuer not the scoped signer")
                return refused
            if not permission_limits_empty(nats):
                debug("User JWT is not valid: scoped users require no permissions or limits set")
                return refused
            try:
                limits = process_template(scope.get("template") or {}, juc, jacc)
            except ValueError:
                debug("User JWT generated invalid permissions")
                return refused
        # As nats-server, after the scoped signer's template replaced the
        # user's limits: its allowed_connection_types are the ones that count.
        if not _connection_type_allowed(limits, client, debug):
            return refused
        if jacc.expired():
            debug("Account JWT has expired")
            return refused
        # The bearer flag that counts is the one the login goes by: for a
        # scoped signing key its template's (the user JWT may set none), as
        # nats-server replaces the JWT's UserPermissionLimits by the template
        # before both checks. (Reading the JWT's own flag here let a scope
        # with "bearer_token": true skip the signature where the account
        # disallows bearer tokens.)
        bearer = bool(limits.get("bearer_token"))
        if bearer and jacc.disallow_bearer:
            debug("Account does not allow bearer tokens")
            return refused
        if not bearer:
            why = _check_sig(juc.subject, opts.sig, nonce)
            if why is not None:
                debug(why)
                return refused
        if jacc.revoked(juc.subject, juc.issued_at):
            debug("User authentication revoked")
            return refused
        host = getattr(client, "host", "") if client is not None else ""
        if not validate_src(limits, host):
            _error(client, "Bad src Ip %s" % host)
            return refused
        allowed, valid_for = validate_times(limits)
        if not allowed:
            _error(client, "Outside connect times")
            return refused
        perms = permissions_from_jwt(limits)
        if perms is None:
            perms = jacc.default_permissions
        user = JwtUser(juc.subject)
        user.claims = juc
        user.account = jacc
        user.log_tag = "%s/%s/jwt:%s" % (jacc.account.name, jacc.name_tag, juc.subject)
        user.valid_for = valid_for
        user.bearer = bearer
        user_limits = {k: limits.get(k, 0) for k in ("subs", "payload")}
        user.claims_limits = user_limits
        return callout_policy.operator_login(client, opts, jacc, juc, (True, user, perms, jacc.account.name))

    def admit(self, client):
        """After the login of a JWT user: the account's connection limit,
        the connection's payload and subscription limits, the expiry timer.
        False if the connection was refused (and is closing)."""
        user = client.user
        if not isinstance(user, JwtUser):
            return True
        jacc = user.account
        if jacc.max_conns != C.NO_LIMIT:
            n = sum(1 for c in self.broker.clients() if c.account is jacc.account and c is not client
                    and c.connect_received)
            if n >= jacc.max_conns:
                _error(None, "%s - %s" % (_peer_prefix(client), ERR_MAX_ACCOUNT_CONNECTIONS))
                client.send_err(ERR_MAX_ACCOUNT_CONNECTIONS, close=True,
                                reason="Maximum Account Connections Exceeded")
                _error(None, "%s - %s" % (_peer_prefix(client), ERR_MAX_ACCOUNT_CONNECTIONS))
                return False
        self._apply_limits(client, jacc, user, at_login=True)
        juc = user.claims
        self._set_expiration(client, juc.expires, user.valid_for)
        log.debug('{prefix} - Authenticated JWT: Client "{u}" (claim-name: "{n}", claim-tags: [{t}]) '
                  'signed with "{i}" by Account "{a}" (claim-name: "{an}", claim-tags: [{at}]) '
                  'signed with "{ai}" has mappings {m}',
                  prefix=_peer_prefix(client), u=juc.subject, n=juc.name,
                  t=" ".join(go_quote(x) for x in juc.tags), i=juc.issuer, a=jacc.account.name,
                  an=jacc.name_tag, at=" ".join(go_quote(x) for x in jacc.claims.tags),
                  ai=jacc.claims.issuer, m="true" if jacc.account.mappings is not None else "false")
        return True

    def _apply_limits(self, client, jacc, user, at_login):
        """nats-server's applyAccountLimits: the lower of the user's and the
        account's payload and subscription limits, then the server's. A
        client at its subscription limit is told and closed a moment later."""
        lim = user.claims_limits
        scope = jacc.signing_keys.get(user.claims.issuer) if user.claims.issuer_account else None
        if not at_login and scope is not None:
            # (the scope's template as the account JWT says it now)
            lim = scope.get("template") or {}
        payload = _min_limit(int(lim.get("payload") or 0), jacc.max_payload)
        subs = _min_limit(int(lim.get("subs") or 0), jacc.max_subs)
        cfg = self.broker.config
        if payload == C.NO_LIMIT or (cfg.max_payload and payload > cfg.max_payload):
            payload = cfg.max_payload
        if subs == C.NO_LIMIT:
            subs = cfg.max_subscriptions or C.NO_LIMIT
        elif cfg.max_subscriptions and cfg.max_subscriptions < subs:
            subs = cfg.max_subscriptions
        client.parser.max_payload = payload
        client.max_payload = payload
        if subs != C.NO_LIMIT and len(client.subs) >= subs:
            # At the limit already (none allowed at all, at login): nats-server
            # says so and closes the connection a moment later.
            client.max_subs = -1 if subs == 0 else subs
            self.broker.reactor.callLater(0, _max_subs_exceeded, client)
        else:
            client.max_subs = 0 if subs == C.NO_LIMIT else subs  # (0: no limit)

    def _set_expiration(self, client, expires, valid_for):
        at = 0.0
        if expires:
            at = max(expires - time.time(), 0.0)
            if valid_for and valid_for < at:
                at = valid_for
        elif valid_for:
            at = valid_for
        else:
            return
        client._jwt_expiry = self.broker.reactor.callLater(at, self._expired, client)

    def _expired(self, client):
        client._jwt_expiry = None
        if client.closed:
            return
        user = client.user
        log.debug("{prefix} - User Authentication Expired - Account:{a}/{n} - jwt:{u}",
                  prefix=client.log_prefix(), a=user.account.account.name,
                  n=user.account.name_tag, u=str(user))
        client.send_err(ERR_EXPIRED, close=True, reason="Authentication Expired")


def _cookie_jwt(client):
    """The user JWT of a WebSocket client's ``jwt_cookie`` cookie (used
    when its CONNECT has none, as nats-server does), or ''."""
    ws = getattr(getattr(client, "transport", None), "_ws", None)
    return getattr(ws, "jwt_cookie", "") or ""


def _account_auth_expired(client):
    # nats-server's accountAuthExpired.
    log.debug("{prefix} - Account Authentication Expired", prefix=client.log_prefix())
    client.send_err("Account Authentication Expired", close=True, reason="Authentication Expired")


def _max_subs_exceeded(client):
    # As nats-server (in a goroutine of its own, after the CONNECT is
    # answered): the error, and the close 20 ms later.
    if client.closed:
        return
    _error(client, ERR_MAX_SUBS)
    client.send_err(ERR_MAX_SUBS)
    client.broker.reactor.callLater(0.02, _close_later, client)


def _close_later(client):
    if not client.closed:
        client.close("Maximum Subscriptions Exceeded")


def _check_sig(subject, sig, nonce):
    """The nonce signature check of a (non-bearer) user JWT, with
    nats-server's debug lines."""
    if not sig:
        return "Signature missing"
    raw = decode_signature(sig)
    if raw is None:
        return "Signature not valid base64"
    if C.public_key_raw(subject) is None:
        return "User nkey not valid: nkeys: invalid public key"
    if not nonce or not C.verify(subject, nonce.encode(), raw):
        return "Signature not verified"
    return None


def _peer_prefix(client):
    return "%s:%s - cid:%d" % (client.host, client.port, client.cid)


def _error(client, text):
    if client is None:
        log.error("{t}", t=text)
    else:
        log.error("{prefix} - {t}", prefix=client.log_prefix(), t=text)


