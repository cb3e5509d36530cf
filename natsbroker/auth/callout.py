"""Auth callout: a CONNECT decided by an external service (nats-server's
``auth_callout``, server/auth_callout.go), in config mode and in operator mode.

A client that is not one of the callout's ``auth_users`` is held while the
server publishes an ``authorization_request`` JWT, signed with the server's
own nkey, to ``$SYS.REQ.USER.AUTH`` in the callout account, and encrypted to
the service's curve key when ``xkey`` is configured (with the server's own
curve key in the ``Nats-Server-Xkey`` header). The service answers on the
reply subject with an ``authorization_response`` JWT signed by the callout
``issuer``: either an ``error`` or a user JWT for the user nkey made for this
request, whose ``aud`` names the account the client goes to and whose claims
carry its permissions. No answer within the auth timeout is a refusal.

In operator mode an account JWT's ``authorization`` claim (``auth_users``,
``allowed_accounts``, ``xkey``) turns callout on for that account: a user JWT
of the account that is not one of its ``auth_users`` (a "sentinel", usually a
bearer JWT) is held in the same way, the request going out in the account and
signed for it; the answer's user JWT is signed by the account or one of its
signing keys (``issuer_account`` naming the account), or by another account
listed in ``allowed_accounts`` (``*``: any), and the client joins the account
that signed it. :func:`operator_refusal` and :func:`operator_login` are the
hook in ``OperatorMode.authenticate``.

The checks, their order and their words (a refusal is logged as a warning,
first letter raised) are those of nats-server 2.15. Curve encryption is
nkeys' "xkv1" framing (the version tag, the 24-byte nonce, then the NaCl box)
made by PyNaCl; JWTs are :mod:`natsbroker.auth.jwt.claims`'.
"""

import os
import time

import nacl.exceptions
import nacl.public
import nacl.utils
from twisted.logger import Logger

from natsbroker import COMPAT_VERSION
from natsbroker.auth.callout_policy import AUTH_CALLOUT_SUBJECT, deny_callout_subject, external_auth, raw_auth_user
from natsbroker.auth.jwt import claims as C
from natsbroker.auth.jwt.user_limits import (
    JwtUser,
    permission_limits_empty,
    permissions_from_jwt,
    process_template,
    validate_times,
)
from natsbroker.auth.permissions import ResolvedPermissions

log = Logger()

AUTH_REQUEST_AUDIENCE = "nats-authorization-request"
XKEY_HEADER = "Nats-Server-Xkey"
AUTHORIZATION_REQUEST = "authorization_request"
AUTHORIZATION_RESPONSE = "authorization_response"

# nkeys' curve box framing: version tag, nonce, NaCl box.
XKEY_VERSION = b"xkv1"
_NONCE_LEN = nacl.public.Box.NONCE_SIZE

# nkeys' error texts (nats-server puts them in its log lines).
ERR_INVALID_ENCRYPTED = "nkeys: encrypted input is not valid"
ERR_INVALID_ENC_VERSION = "nkeys: encrypted input wrong version"
ERR_INVALID_SENDER = "nkeys: not a valid sender public curve key"
ERR_COULD_NOT_DECRYPT = "nkeys: could not decrypt input"

ANY_ACCOUNT = "*"

_CONNECTION_TYPES = ("STANDARD", "WEBSOCKET", "LEAFNODE", "LEAFNODE_WS", "MQTT", "MQTT_WS",
                     "IN_PROCESS")


# -- curve encryption (nkeys' Seal / Open) ------------------------------------------------


def seal(private_key, recipient, data):
    """nkeys' ``Seal``: ``data`` encrypted from ``private_key`` (a PyNaCl
    PrivateKey) to the public curve key ``recipient`` (``X...``)."""
    raw = C.public_key_raw(recipient)
    box = nacl.public.Box(private_key, nacl.public.PublicKey(raw))
    # PyNaCl's encrypt() returns nonce + ciphertext: nkeys' layout after the tag.
    return XKEY_VERSION + bytes(box.encrypt(data, nacl.utils.random(_NONCE_LEN)))


def open_sealed(private_key, sender, data):
    """nkeys' ``Open``: the plaintext of ``data`` sealed by ``sender`` (an
    ``X...`` key) for ``private_key``; ValueError with nkeys' text if not."""
    if len(data) <= len(XKEY_VERSION) + _NONCE_LEN:
        raise ValueError(ERR_INVALID_ENCRYPTED)
    if data[:len(XKEY_VERSION)] != XKEY_VERSION:
        raise ValueError(ERR_INVALID_ENC_VERSION)
    raw = C.public_key_raw(sender)
    if raw is None or not sender.startswith("X"):
        raise ValueError(ERR_INVALID_SENDER)
    box = nacl.public.Box(private_key, nacl.public.PublicKey(raw))
    rest = data[len(XKEY_VERSION):]
    try:
        return box.decrypt(rest[_NONCE_LEN:], rest[:_NONCE_LEN])
    except nacl.exceptions.CryptoError:
        raise ValueError(ERR_COULD_NOT_DECRYPT) from None


# -- one request -----------------------------------------------------------------------------


class Admission:
    """What the service decided for a client: its user name, permissions,
    account and how long its user JWT lets it stay (seconds, 0: forever)."""

    __slots__ = ("user", "permissions", "account", "expires_in")

    def __init__(self, user, permissions, account, expires_in):
        self.user = user
        self.permissions = permissions
        self.account = account
        self.expires_in = expires_in


class CalloutRefused(Exception):
    """The service refused the client, or its answer is not acceptable:
    ``str()`` is nats-server's reason (its warning)."""


class PendingCallout:
    """One held CONNECT: the request sent, the reply awaited until the auth
    timeout. ``done(admission_or_None, reason)`` is called once, unless
    :meth:`cancel` is called first (the client went away)."""

    def __init__(self, policy, client, opts, done):
        self.policy = policy
        self.client = client
        self.opts = opts
        self.done = done
        broker = client.broker
        self.broker = broker
        # A user key of its own: the answer must be for this key, so no
        # answer to another request can be replayed for this one.
        self.user_nkey = C.public_key_of(C.new_keypair("U"))
        self._sub = None
        self._timer = None
        self._acc = None
        # Operator mode: where the login sent this CONNECT (OperatorRoute).
        self.route = None
        if getattr(policy, "operator_mode", False):
            self.route = client.callout_route
            client.callout_route = None
            ext = external_auth(self.route.callout)
            # nats-server encrypts to the xkey of the account the request goes in.
            self.xkey = (ext or {}).get("xkey") or "" if self.route.request is self.route.callout.account else ""
            self.account_name = self.route.request.name
            self.issuer = self.account_name
        else:
            self.xkey = policy.callout.xkey
            self.account_name = policy.account
            self.issuer = policy.callout.issuer

    def start(self):
        """Send the request. Returns None, or the reason it could not be sent
        (the client is then refused at once)."""
        b = self.broker
        name = self.account_name
        acc = self.route.request if self.route is not None else b.accounts.get(name)
        if acc is None:
            return 'No valid account "%s" for auth callout request: account missing' % name
        self._acc = acc
        timeout = b.config.auth_timeout
        token = C.encode(AUTHORIZATION_REQUEST, self.issuer, b.keys.nkey,
                         nats=self._request_claims(), audience=AUTH_REQUEST_AUDIENCE,
                         expires=int(time.time() + timeout))
        payload = token.encode()
        headers = None
        if self.xkey:
            payload = seal(b.keys.curve, self.xkey, payload)
            headers = {XKEY_HEADER: b.keys.xkey}
        reply = "$SYS._INBOX.%s.%s" % (_token(), _token())
        self._sub = acc.subscribe(reply, self._on_reply)
        self._timer = b.reactor.callLater(timeout, self._on_timeout)
        acc.publish(AUTH_CALLOUT_SUBJECT, payload, reply=reply, headers=headers)
        return None

    def cancel(self):
        """Forget the request (the client closed)."""
        self.done = None
        self._finish()

    def _finish(self):
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
        if self._sub is not None:
            self._acc.unsubscribe(self._sub)
            self._sub = None

    def _answer(self, admission, reason):
        done, self.done = self.done, None
        self._finish()
        if admission is None:
            # The account's auth error event (natsbroker/system/plugin.py) says why
            # (nothing, after a timeout), in the callout account.
            where = self.route.callout.account if self.route is not None else self._acc
            self.client.auth_error = (where, reason or "", self._was())
        if done is not None:
            done(admission, reason)

    def _on_timeout(self):
        self._timer = None
        log.debug('Authorization callout response not received in time on account "{a}"',
                  a=self.account_name)
        self._answer(None, None)

    def _on_reply(self, sub, subject, reply, hdr_len, raw):
        if self.done is None:
            return
        try:
            admission = self._decide(bytes(raw[hdr_len:]))
        except CalloutRefused as e:
            text = str(e)
            self._answer(None, text[:1].upper() + text[1:])
            return
        self._answer(admission, None)

    def _was(self):
        """What nats-server's event says of a client whose user JWT had
        logged in to the callout account before the service refused it (the
        account it was in, the JWT's signer and tags); {} otherwise."""
        juc = self.route.user if self.route is not None else None
        if juc is None:
            return {}
        jacc = self.route.callout
        out = {"issuer_key": juc.issuer if juc.issuer_account else jacc.name, "name_tag": jacc.name_tag}
        if juc.tags:
            out["tags"] = juc.tags
        return out

    # -- the request ----------------------------------------------------------------

    def _request_claims(self):
        b, c, o = self.broker, self.client, self.opts
        server = {"name": b.server_name, "host": b.host, "id": b.server_id,
                  "version": COMPAT_VERSION}
        if b.config.cluster.name:
            server["cluster"] = b.config.cluster.name
        if self.xkey:
            server["xkey"] = b.keys.xkey
        info = {"host": c.host, "id": c.cid}
        juc = self.route.user if self.route is not None else None
        if self.route is not None:
            # getRawAuthUser: a JWT user is its key once it logged in (the
            # CONNECT always has a JWT here).
            user = o.nkey or o.user or (juc.subject if juc is not None else "")
        else:
            user = raw_auth_user(o)
        if user:
            info["user"] = user
        if o.name:
            info["name"] = o.name
        if juc is not None:
            if juc.tags:
                info["tags"] = juc.tags
            if juc.name:
                info["name_tag"] = juc.name
        info["kind"] = "Client"
        info["type"] = "websocket" if getattr(c, "websocket", None) is not None else "nats"
        if o.sig and c.nonce:
            info["nonce"] = c.nonce
        opts = {}
        for key, value in (("jwt", o.jwt), ("nkey", o.nkey), ("sig", o.sig),
                           ("auth_token", o.auth_token), ("user", o.user), ("pass", o.password),
                           ("name", o.name), ("lang", o.lang), ("version", o.version)):
            if value:
                opts[key] = value
        opts["protocol"] = o.protocol
        out = {"server_id": server, "user_nkey": self.user_nkey, "client_info": info,
               "connect_opts": opts}
        tls = _client_tls(c)
        if tls:
            out["client_tls"] = tls
        return out

    # -- the answer -----------------------------------------------------------------

    def _decide(self, msg):
        """The checks of nats-server's processReply, in its order."""
        account = self.account_name
        if not msg:
            raise CalloutRefused('auth callout violation: "no reason supplied" on account "%s"' % account)
        encrypted = False
        if self.xkey and not msg.startswith(b"eyJ"):
            try:
                msg = open_sealed(self.broker.keys.curve, self.xkey, msg)
            except ValueError as e:
                raise CalloutRefused('error decrypting auth callout response on account "%s": %s'
                                     % (account, e)) from None
            encrypted = True
        response = _decode_response(msg)
        vr = C.ValidationResults()
        _validate_response(response, vr)
        if vr.issues:
            raise CalloutRefused("authorization response had validation errors: %s" % vr.issues[0][0])
        if response.subject != self.user_nkey:
            raise CalloutRefused("auth callout violation: auth callout response is not for expected user")
        if response.data.get("aud") != self.broker.server_id:
            raise CalloutRefused("auth callout violation: auth callout response is not for server")
        # (An encrypted answer came from the holder of the xkey: its signer
        # is not checked, as nats-server does not.)
        if self.route is not None:
            if not encrypted:
                signer = response.nats.get("issuer_account") or response.issuer
                jacc = self.broker.operator.accounts.get(account)
                if signer != account and (jacc is None or signer not in jacc.signing_keys):
                    raise CalloutRefused("auth callout signing key is unknown")
        elif not encrypted and response.issuer != self.issuer:
            raise CalloutRefused("auth callout signing key is unknown")
        nats = response.nats
        if nats.get("error"):
            raise CalloutRefused("auth callout service returned an error: %s" % nats["error"])
        try:
            user = C.decode_user(nats.get("jwt") or "")
        except C.JWTError as e:
            raise CalloutRefused(str(e)) from None
        vr = C.ValidationResults()
        user.validate(vr)
        if vr.issues:
            raise CalloutRefused("Error validating user JWT: %s" % vr.issues[0][0])
        if user.subject != self.user_nkey:
            raise CalloutRefused('Expected authorized user of "%s" but got "%s" on account "%s"'
                                 % (self.user_nkey, user.subject, account))
        allowed, valid_for = validate_times(user.nats)
        if not allowed:
            log.error("{prefix} - Outside connect times", prefix=self.client.log_prefix())
            raise CalloutRefused('authorized user on account "%s" outside of valid connect times' % account)
        types = user.nats.get("allowed_connection_types") or []
        if types and not any(t.upper() in _CONNECTION_TYPES for t in types):
            raise CalloutRefused('authorized user on account "%s" using invalid connection type' % account)
        if self.route is not None:
            return self._operator_admission(user, valid_for)
        if user.issuer_account:
            raise CalloutRefused('error non operator mode account "%s": attempted to use issuer_account'
                                 % account)
        issuer = self.issuer
        if user.issuer != issuer:
            raise CalloutRefused('wrong issuer for auth callout response on account "%s", expected "%s" got "%s"'
                                 % (account, issuer, user.issuer))
        # Config mode: the user JWT's audience names the account it goes to.
        target = user.data.get("aud") or ""
        if target not in self.broker.accounts:
            raise CalloutRefused('no valid account "%s" for auth callout response on account "%s": '
                                 "account missing" % (target, account))
        perms = permissions_from_jwt(user.nats)
        resolved = ResolvedPermissions(perms) if perms is not None else None
        resolved = self.policy.admitted(resolved, target)
        expires_in = 0.0
        if user.expires:
            expires_in = max(user.expires - time.time(), 0.0)
        if valid_for and (not expires_in or valid_for < expires_in):
            expires_in = valid_for
        # nats-server: a name in the user JWT is the client's user name from now on.
        name = user.name or self.opts.user or None
        return Admission(name, resolved, target, expires_in)


    def _operator_admission(self, user, valid_for):
        """Operator mode's assignAccountAndPermissions: the account that
        signed the user JWT (the callout account or one it allows), and its
        scoped signing key's template if it signed with one."""
        account = self.account_name
        signer = user.issuer_account or user.issuer
        if signer != account:
            request = self.broker.operator.accounts.get(account)
            ext = external_auth(request) if request is not None else None
            allowed = (ext or {}).get("allowed_accounts") or []
            if not (allowed == [ANY_ACCOUNT] or signer in allowed):
                raise CalloutRefused('account "%s" not permitted as valid account option for auth '
                                     'callout for account "%s"' % (user.issuer, account))
        target, why = self.broker.operator.lookup_account(signer)
        if target is None:
            raise CalloutRefused('no valid account "%s" for auth callout response on account "%s": %s'
                                 % (signer, account, why))
        known, scope = target.has_issuer(user.issuer)
        limits = user.nats
        if not known:
            raise CalloutRefused('user JWT issuer "%s" is not known' % user.issuer)
        if scope is not None:
            if scope.get("key") != user.issuer:
                raise CalloutRefused("user JWT is not valid: issuer not the scoped signer")
            if not permission_limits_empty(user.nats):
                raise CalloutRefused("user JWT is not valid: scoped users require no permissions "
                                     "or limits set")
            try:
                limits = process_template(scope.get("template") or {}, user, target)
            except ValueError as e:
                raise CalloutRefused("user JWT generated invalid permissions: %s" % e) from None
        perms = permissions_from_jwt(limits)
        if perms is None:
            perms = target.default_permissions
        if target is self.route.callout:
            perms = deny_callout_subject(perms)
        # As nats-server: the sentinel's JWT is forgotten (it has no say in
        # the connection from now on), and a name in the user JWT is the
        # client's user name.
        self.opts.jwt = ""
        if user.name:
            self.opts.user = user.name
            self.opts.nkey = ""
            self.opts.auth_token = None
        juser = JwtUser(user.subject)
        juser.claims = user
        juser.account = target
        juser.log_tag = "%s/%s/jwt:%s" % (target.account.name, target.name_tag, user.subject)
        juser.valid_for = valid_for
        juser.bearer = False  # (the service vouched for it; its JWT is forgotten)
        # (nats-server applies only the account's limits: the user JWT it
        # decodes for its own is the one just forgotten.)
        juser.claims_limits = {"subs": C.NO_LIMIT, "payload": C.NO_LIMIT}
        return Admission(juser, ResolvedPermissions(perms) if perms is not None else None,
                         target.account.name, 0.0)


def _decode_response(msg):
    """jwt.DecodeAuthorizationResponseClaims, with Go's error texts."""
    try:
        token = msg.decode("utf-8")
    except UnicodeDecodeError:
        raise CalloutRefused("expected 3 chunks") from None
    try:
        claims = C.decode_authorization_response(token)
    except C.JWTError as e:
        raise CalloutRefused(str(e)) from None
    if claims.nats.get("type") != AUTHORIZATION_RESPONSE:
        raise CalloutRefused("not an authorization request claim")
    return claims


def _validate_response(r, vr):
    """AuthorizationResponseClaims.Validate."""
    nats = r.nats
    if not C.is_public_key(r.subject, "U"):
        vr.add_error("Subject must be a user public key")
    if not C.is_public_key(r.data.get("aud") or "", "N"):
        vr.add_error("Audience must be a server public key")
    error, token = nats.get("error") or "", nats.get("jwt") or ""
    if not error and not token:
        vr.add_error("Error or Jwt is required")
    if error and token:
        vr.add_error("Only Error or Jwt can be set")
    ia = nats.get("issuer_account") or ""
    if ia and not C.is_public_key(ia, "A"):
        vr.add_error("issuer_account is not an account public key")
    r.validate(vr)


def _client_tls(client):
    """client_tls: the TLS session's version and cipher, and the client's
    certificate (PEM) when it sent one."""
    version = getattr(client, "tls_version", "")
    if not version:
        return None
    out = {"version": version, "cipher": client.tls_cipher}
    cert = getattr(client, "tls_peer_cert", None)
    if cert is not None:
        from OpenSSL import crypto
        pem = crypto.dump_certificate(crypto.FILETYPE_PEM, cert).decode()
        if client.listener.tls is not None and client.listener.tls.config.verify_clients:
            out["verified_chains"] = [[pem]]
        else:
            out["certs"] = [pem]
    return out


_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _token():
    # Eight base-62 characters, as nats-server's inbox tokens.
    return "".join(_ALPHABET[b % 62] for b in os.urandom(8))
