"""Account resolvers: where operator mode finds an account's JWT.

* :class:`MemoryResolver` - ``resolver: MEMORY``: the JWTs of
  ``resolver_preload``, in memory.
* :class:`DirResolver` - ``resolver { type: full, dir: ... }``: one file
  per account (``<public key>.jwt``) in a directory, and the system
  account's ``$SYS.REQ.CLAIMS.*`` / ``$SYS.REQ.ACCOUNT.<key>.CLAIMS.*``
  requests that keep it up to date, answered as nats-server's
  DirAccResolver answers them.
"""

import hashlib
import os
import time

from twisted.internet import task
from twisted.logger import Logger

from natsbroker.auth.jwt import claims as C
from natsbroker.gocompat.quote import go_quote

log = Logger()

ACCOUNT_MISSING = "account missing"

# nats-server's subjects (events.go).
CLAIMS_UPDATE = "$SYS.REQ.CLAIMS.UPDATE"
ACCOUNT_CLAIMS_UPDATE = "$SYS.REQ.ACCOUNT.*.CLAIMS.UPDATE"
ACCOUNT_CLAIMS_UPDATE_OLD = "$SYS.ACCOUNT.*.CLAIMS.UPDATE"
ACCOUNT_CLAIMS_LOOKUP = "$SYS.REQ.ACCOUNT.*.CLAIMS.LOOKUP"
CLAIMS_PACK = "$SYS.REQ.CLAIMS.PACK"
CLAIMS_LIST = "$SYS.REQ.CLAIMS.LIST"
CLAIMS_DELETE = "$SYS.REQ.CLAIMS.DELETE"


class ResolverError(Exception):
    """A JWT the resolver cannot give (nats-server's error text)."""


class _Responder:
    """Replies to the system account's claims requests."""

    operator = None
    _sys = None

    def _reply(self, reply, payload):
        if reply:
            self._sys.publish(reply, payload)

    def _respond(self, reply, account, message, err=None):
        """nats-server's respondToUpdate: the log line, then the reply."""
        if err is None:
            if account:
                log.debug("{m} - {a}", m=message, a=account)
            else:
                log.debug("{m}", m=message)
        elif account:
            log.error("{m} - {a} - {e}", m=message, a=account, e=err)
        else:
            log.error("{m} - {e}", m=message, e=err)
        if not reply:
            return
        data = {}
        if account:
            data["account"] = account
        if err is None:
            data["code"] = 200
            data["message"] = message
            body = {"data": data}
        else:
            data["code"] = 500
            data["description"] = "%s - %s" % (message, err)
            body = {"error": data}
        self._reply(reply, self.operator.server_response(body))


class MemoryResolver(_Responder):
    """``resolver: MEMORY``: JWTs by account public key, in memory. An
    account update request changes an account already loaded (nats-server's
    accountClaimUpdate); others are skipped."""

    kind = "MEMORY"

    def __init__(self, preload=None):
        self._jwts = dict(preload or {})
        self._subs = []

    def fetch(self, name):
        """The JWT of account ``name``; :class:`ResolverError` if none."""
        try:
            return self._jwts[name]
        except KeyError:
            raise ResolverError(ACCOUNT_MISSING) from None

    def store(self, name, token):
        self._jwts[name] = token

    def start(self, operator):
        self.operator = operator
        self._sys = operator.broker.system_account
        for subject in (ACCOUNT_CLAIMS_UPDATE_OLD, ACCOUNT_CLAIMS_UPDATE):
            self._subs.append(self._sys.subscribe(subject, self._on_account_update))

    def stop(self):
        for sub in self._subs:
            self._sys.unsubscribe(sub)
        self._subs = []

    def _on_account_update(self, sub, subject, reply, hdr_len, raw):
        key = _account_of(subject)
        if key is None:
            log.debug("Received account claims update on bad subject {s}",
                      s=go_quote(_text(subject)))
            return
        reply = _text(reply)
        token = _text(raw[hdr_len:])
        if not token:
            self._respond(reply, key, "jwt update error", "request body is empty")
            return
        try:
            claim = C.decode_account(token)
        except C.JWTError as e:
            self._respond(reply, key, "jwt update resulted in error", e)
            return
        if claim.subject != key:
            self._respond(reply, key, "jwt update resulted in error",
                          "subject does not match jwt content")
            return
        if key not in self.operator.accounts:
            self._respond(reply, key, "jwt update skipped")
            return
        err = self.operator.update_account(key, token)
        if err is not None:
            self._respond(reply, key, "jwt update resulted in error", err)
            return
        self._jwts[key] = token
        self._respond(reply, key, "jwt updated")


def _account_of(subject):
    """The account key in an account claims update subject (new or old
    form), or None."""
    tokens = bytes(subject).split(b".")
    if len(tokens) == 6:
        return tokens[3].decode(errors="replace")
    if len(tokens) == 5:
        return tokens[2].decode(errors="replace")
    return None


class DirResolver(_Responder):
    """The ``full`` resolver: every account JWT in ``directory``.

    The store's hash is nats-server's: the XOR of the SHA-256 of every JWT
    file, which ``$SYS.REQ.CLAIMS.PACK`` requests compare."""

    kind = "FULL"

    def __init__(self, directory, limit=0, allow_delete=False, interval=60.0, timeout=1.9):
        self.directory = directory
        self.limit = limit or None
        self.allow_delete = allow_delete
        self.interval = interval
        self.timeout = timeout
        self._hashes = {}  # public key -> sha256 of its file
        self._loop = None
        self._subs = []
        self.operator = None
        os.makedirs(directory, exist_ok=True)
        for name in sorted(os.listdir(directory)):
            if name.endswith(".jwt"):
                try:
                    with open(os.path.join(directory, name), "rb") as f:
                        self._hashes[name[:-4]] = hashlib.sha256(f.read()).digest()
                except OSError:
                    pass

    # -- the store ---------------------------------------------------------

    def _path(self, key):
        if len(key) < 2 or C.public_key_raw(key) is None:
            return None
        return os.path.join(self.directory, key + ".jwt")

    def load(self, key):
        """The stored JWT of ``key``; ResolverError("invalid public key"),
        or FileNotFoundError if there is none."""
        path = self._path(key)
        if path is None:
            raise ResolverError("invalid public key")
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def fetch(self, name):
        try:
            return self.load(name)
        except FileNotFoundError:
            # nats-server asks the other servers, and times out alone.
            raise ResolverError("fetching jwt timed out") from None
        except OSError as e:
            raise ResolverError(str(e)) from None

    def hash(self):
        h = bytearray(32)
        for digest in self._hashes.values():
            for i, b in enumerate(digest):
                h[i] ^= b
        return bytes(h)

    def _write(self, key, token):
        """Write ``token`` as ``key``'s JWT; True if it changed."""
        path = self._path(key)
        if path is None:
            raise ResolverError("invalid public key")
        data = token.encode()
        digest = hashlib.sha256(data).digest()
        old = self._hashes.get(key)
        if old == digest:
            return False
        if old is None and self.limit is not None and len(self._hashes) >= self.limit:
            raise ResolverError("jwt store is full")
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        self._hashes[key] = digest
        return True

    def save(self, key, token):
        """Store ``token`` (an update request's): nats-server's ``save``."""
        if self._write(key, token) and self.operator is not None:
            self.operator.account_changed(key, token)

    def store(self, key, token):
        """Store ``token`` unless the stored one is newer or the same
        (nats-server's ``saveIfNewer``: preloads and lookups)."""
        path = self._path(key)
        if path is None:
            raise ResolverError("invalid public key")
        if os.path.exists(path):
            new = C.decode(token)
            try:
                existing = C.decode(self.load(key))
            except (C.JWTError, OSError):
                existing = None
            if existing is not None:
                if existing.id == new.id or existing.issued_at > new.issued_at:
                    return
                if new.subject != key:
                    raise ResolverError("jwt subject nkey and provided nkey do not match")
                if existing.subject != new.subject:
                    raise ResolverError("subject of existing and new jwt do not match")
        if self._write(key, token) and self.operator is not None:
            self.operator.account_changed(key, token)

    def delete(self, key):
        path = self._path(key)
        if not self.allow_delete:
            raise ResolverError("store is not set up to for delete")
        try:
            os.rename(path, path + ".deleted")
        except FileNotFoundError:
            return
        self._hashes.pop(key, None)
        if self.operator is not None:
            self.operator.account_deleted(key)

    def pack(self):
        """``pubkey|jwt`` of every stored, unexpired JWT, in file order."""
        out = []
        now = time.time()
        for key in sorted(self._hashes):
            try:
                token = self.load(key)
            except OSError:
                continue
            try:
                claims = C.decode(token)
                if claims.expires and claims.expires < now:
                    continue
            except C.JWTError:
                pass
            out.append("%s|%s" % (key, token))
        return out

    def merge(self, pack):
        for line in pack.split("\n"):
            if not line:
                continue
            parts = line.split("|")
            if len(parts) != 2:
                raise ResolverError("line in package didn't contain 2 entries: %s" % go_quote(line))
            if not C.is_public_key(parts[0], "A"):
                raise ResolverError("key to merge is not a valid public account key")
            self.store(parts[0], parts[1])

    # -- the system account's requests ---------------------------------------

    def _answer_claims(self, operator, lookup):
        """Subscribe the claims update/list/delete requests (and lookups, if
        ``lookup``) in the system account; returns that account."""
        self.operator = operator
        sys_acc = self._sys = operator.broker.system_account
        handlers = [(ACCOUNT_CLAIMS_UPDATE_OLD, self._on_account_update),
                    (ACCOUNT_CLAIMS_UPDATE, self._on_account_update),
                    (CLAIMS_UPDATE, self._on_update)]
        if lookup:
            handlers.append((ACCOUNT_CLAIMS_LOOKUP, self._on_lookup))
        handlers += [(CLAIMS_LIST, self._on_list), (CLAIMS_DELETE, self._on_delete)]
        for subject, handler in handlers:
            self._subs.append(sys_acc.subscribe(subject, handler))
        return sys_acc

    def start(self, operator):
        """Answer the claims requests in the system account."""
        sys_acc = self._answer_claims(operator, lookup=True)
        self._subs.append(sys_acc.subscribe(CLAIMS_PACK, self._on_pack, queue="responder"))
        self._pack_inbox = "$SYS._INBOX_.%s.pack" % operator.broker.server_id[:8]
        self._subs.append(sys_acc.subscribe(self._pack_inbox, self._on_pack_response))
        log.info("Managing all jwt in exclusive directory {dir}", dir=self.directory)
        if self.interval > 0:
            self._loop = task.LoopingCall(self._check_store)
            self._loop.clock = operator.broker.reactor
            self._loop.start(self.interval, now=False)

    def stop(self):
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        self._loop = None
        for sub in self._subs:
            self._sys.unsubscribe(sub)
        self._subs = []

    def _check_store(self):
        digest = self.hash()
        log.debug("DirResolver - Checking store state: {h}", h=digest.hex())
        self._sys.publish(CLAIMS_PACK, digest, reply=self._pack_inbox)

    def _update(self, reply, token, subject_key):
        op = self.operator
        try:
            claim = C.decode_account(token)
        except C.JWTError as e:
            self._respond(reply, "n/a", "jwt update resulted in error", e)
            return
        if subject_key is None:
            # $SYS.REQ.CLAIMS.UPDATE: the strictness check comes first.
            if claim.issuer == op.operator_key and op.strict:
                self._respond(reply, claim.subject, "jwt update resulted in error",
                              "operator requires issuer to be a signing key")
                return
        vr = C.ValidationResults()
        claim.validate(vr)
        if vr.is_blocking(False):
            self._respond(reply, claim.subject, "jwt validation failed",
                          "validation errors: [%s]" % " ".join(vr.errors()))
            return
        if subject_key is not None:
            if claim.subject != subject_key:
                self._respond(reply, subject_key, "jwt update resulted in error",
                              "subject does not match jwt content")
                return
            if claim.issuer == op.operator_key and op.strict:
                self._respond(reply, subject_key, "jwt update resulted in error",
                              "operator requires issuer to be a signing key")
                return
        key = claim.subject
        try:
            self.save(key, token)
        except (ResolverError, OSError) as e:
            self._respond(reply, key, "jwt update resulted in error", e)
            return
        self._respond(reply, key, "jwt updated")

    def _on_update(self, sub, subject, reply, hdr_len, raw):
        self._update(_text(reply), _text(raw[hdr_len:]), None)

    def _on_account_update(self, sub, subject, reply, hdr_len, raw):
        key = _account_of(subject)
        if key is None:
            log.debug("DirResolver - jwt update skipped due to bad subject {s}",
                      s=go_quote(_text(subject)))
            return
        self._update(_text(reply), _text(raw[hdr_len:]), key)

    def _on_lookup(self, sub, subject, reply, hdr_len, raw):
        if not reply:
            return
        tokens = subject.split(b".")
        if len(tokens) != 6:
            return
        key = tokens[3].decode(errors="replace")
        try:
            token = self.load(key)
        except FileNotFoundError:
            log.debug('DirResolver - Could not find account "{a}"', a=key)
            self._reply(_text(reply), b"")  # no JWT here
            return
        except (OSError, ResolverError) as e:
            log.error('DirResolver - Error looking up account "{a}": {e}', a=key, e=e)
            return
        self._reply(_text(reply), token.encode())

    def _on_pack(self, sub, subject, reply, hdr_len, raw):
        if not reply:
            return
        reply = _text(reply)
        theirs = raw[hdr_len:]
        ours = self.hash()
        if bytes(theirs) == ours:
            self._reply(reply, b"")
            log.debug("DirResolver - Pack request matches hash {h}", h=ours.hex())
            return
        for line in self.pack():
            self._reply(reply, line.encode())
        log.debug("DirResolver - Pack request hash {t} - finished responding with hash {h}",
                  t=bytes(theirs).hex(), h=ours.hex())
        self._reply(reply, b"")

    def _on_pack_response(self, sub, subject, reply, hdr_len, raw):
        msg = _text(raw[hdr_len:])
        if not msg:
            log.debug("DirResolver - Merging finished and resulting in: {h}", h=self.hash().hex())
            return
        before = self.hash()
        try:
            self.merge(msg)
        except (ResolverError, C.JWTError, OSError) as e:
            log.error("DirResolver - Merging resulted in error: {e}", e=e)
            return
        log.debug("DirResolver - Merging succeeded and changed {a} to {b}", a=before.hex(),
                  b=self.hash().hex())

    def _on_list(self, sub, subject, reply, hdr_len, raw):
        if not reply:
            return
        ids = [line.split("|", 1)[0] for line in self.pack()]
        log.debug("list request responded with {n} account ids", n=len(ids))
        self._reply(_text(reply), self.operator.server_response({"data": ids}, server_last=True))

    def _on_delete(self, sub, subject, reply, hdr_len, raw):
        reply = _text(reply)
        op = self.operator
        subj = ""
        err = None
        ids = []
        try:
            claim = C.decode_generic(_text(raw[hdr_len:]))
        except C.JWTError as e:
            err = str(e)
        else:
            subj = claim.subject
            accounts = claim.nats.get("accounts")
            if not self.allow_delete:
                err = "delete must be enabled in server config"
            elif subj != claim.issuer:
                err = "not self signed"
            elif claim.issuer not in op.operator_keys:
                err = "not trusted"
            elif not isinstance(accounts, list):
                err = "malformed request"
            else:
                ids = accounts
                for entry in ids:
                    if not isinstance(entry, str) or not C.is_public_key(entry, "A"):
                        err = "malformed request"
                        break
                    if entry == op.broker.system_account.name:
                        err = "not allowed to delete system account"
                        break
        if err is not None:
            self._respond(reply, "", "delete accounts request by %s failed" % subj, err)
            return
        errors = []
        passed = 0
        for key in ids:
            try:
                self.delete(key)
                passed += 1
            except (ResolverError, OSError) as e:
                errors.append(str(e))
        if not errors:
            self._respond(reply, "", "deleted %d accounts" % passed)
        else:
            self._respond(reply, "", "deleted %d accounts, failed for %d" % (passed, len(errors)),
                          "\n".join(errors))


def _text(b):
    if b is None:
        return ""
    if isinstance(b, str):
        return b
    return bytes(b).decode("utf-8", errors="replace")


# -- the URL resolver ----------------------------------------------------------------------

# nats-server's http.Client timeout for account fetches (DEFAULT_ACCOUNT_FETCH_TIMEOUT).
URL_FETCH_TIMEOUT = 1.9


class FetchPending(ResolverError):
    """The JWT is being fetched: the lookup is answered when it arrives."""


class URLResolver(MemoryResolver):
    """``resolver: URL("http://host/jwt/v1/accounts/")``: an account's JWT
    is ``GET <url><public key>`` (nats-server's URLAccResolver). Fetches
    are asynchronous (``fetch_async``); the synchronous :meth:`fetch`
    answers from what was fetched, and starts a fetch for what was not
    (:class:`FetchPending`; ``operator.account_fetched`` hears when it
    ends). Account update requests are the MEMORY resolver's."""

    kind = "URL"

    def __init__(self, url, fetched=None):
        super().__init__(fetched)
        self.url = url if url.endswith("/") else url + "/"
        self._errors = {}  # key -> why its last fetch failed (read once)
        self._inflight = {}  # key -> [Deferred waiting]
        self._agent = None

    def fetch(self, name):
        if name in self._jwts:
            return self._jwts[name]
        if name in self._errors:
            raise ResolverError(self._errors.pop(name))
        self.fetch_async(name)
        raise FetchPending("fetching jwt in progress")

    def cached(self, name):
        """``name``'s fetched JWT, or None."""
        return self._jwts.get(name)

    def known(self, name):
        """Whether ``name``'s JWT (or why it could not be had) is at hand."""
        return name in self._jwts or name in self._errors

    def fetch_async(self, name):
        """A Deferred firing with ``name``'s JWT (or failing with
        :class:`ResolverError`); the outcome is also kept for :meth:`fetch`."""
        from twisted.internet import defer
        d = defer.Deferred()
        waiting = self._inflight.get(name)
        if waiting is not None:
            waiting.append(d)
            return d
        self._inflight[name] = [d]
        began = time.monotonic()
        get = http_get(self._reactor(), self.url + name, URL_FETCH_TIMEOUT)
        get.addCallbacks(self._fetched, self._failed, callbackArgs=(name, began),
                         errbackArgs=(name, began))
        return d

    def _reactor(self):
        if self.operator is not None:
            return self.operator.broker.reactor
        from twisted.internet import reactor
        return reactor

    def _fetched(self, token, name, began):
        self._errors.pop(name, None)
        self._jwts[name] = token
        self._done(name, began, token, None)

    def _failed(self, failure, name, began):
        why = failure.value if failure.check(ResolverError) else ResolverError(str(failure.value))
        self._jwts.pop(name, None)
        self._errors[name] = str(why)
        self._done(name, began, None, why)

    def _done(self, name, began, token, why):
        waiting = self._inflight.pop(name, [])
        if self.operator is not None:
            self.operator.account_fetched(name, began, why)
        for d in waiting:
            if why is None:
                d.callback(token)
            else:
                d.errback(why)


def http_get(reactor, url, timeout):
    """``GET url`` with twisted.web's Agent: a Deferred firing with the body
    (text) of a 200, failing with :class:`ResolverError` in nats-server's
    words (``could not fetch <"url">: ...``) otherwise."""
    from twisted.internet import error as terror
    from twisted.web.client import Agent, HTTPConnectionPool, PartialDownloadError, readBody

    where = 'could not fetch <%s>: ' % go_quote(url)
    pool = HTTPConnectionPool(reactor, persistent=False)
    pool._factory = _quiet_factory()
    agent = Agent(reactor, connectTimeout=timeout, pool=pool)
    try:
        d = agent.request(b"GET", url.encode())
    except Exception as e:  # (a URL Agent cannot take)
        from twisted.internet import defer
        return defer.fail(ResolverError(where + 'Get %s: %s' % (go_quote(url), e)))

    def got(response):
        if response.code != 200:
            response.deliverBody(_Discard())
            phrase = response.phrase.decode("latin-1") if response.phrase else ""
            raise ResolverError(where + ("%d %s" % (response.code, phrase)).rstrip())
        def partial(failure):
            # (a body that ends with the connection, as HTTP/1.0 sends it)
            failure.trap(PartialDownloadError)
            return failure.value.response

        body = readBody(response).addErrback(partial)
        return body.addCallback(lambda b: b.decode("utf-8", errors="replace"))

    def failed(failure):
        if failure.check(ResolverError):
            return failure
        e = failure.value
        dial = "dial tcp %s" % _host_port(url)
        if failure.check(terror.ConnectionRefusedError):
            why = "%s: connect: connection refused" % dial
        elif failure.check(defer_timeout_errors()):
            why = "context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
        elif failure.check(terror.DNSLookupError):
            why = "%s: lookup %s: no such host" % (dial, _host_port(url).rsplit(":", 1)[0])
        else:
            why = str(e) or e.__class__.__name__
        raise ResolverError(where + "Get %s: %s" % (go_quote(url), why))

    d.addCallback(got)
    d.addTimeout(timeout, reactor)
    d.addErrback(failed)
    return d


def _quiet_factory():
    # The pool's HTTP client factory, without its "Starting factory" log lines.
    from twisted.web.client import _HTTP11ClientFactory

    class QuietFactory(_HTTP11ClientFactory):
        noisy = False

    return QuietFactory


def defer_timeout_errors():
    from twisted.internet import defer, error as terror
    return (defer.TimeoutError, defer.CancelledError, terror.TimeoutError)


def _host_port(url):
    from urllib.parse import urlsplit
    u = urlsplit(url)
    port = u.port or (443 if u.scheme == "https" else 80)
    return "%s:%d" % (u.hostname or "", port)


class _Discard:
    """A body protocol that drops what it is given (a refused fetch's body)."""

    def makeConnection(self, transport):
        pass

    def dataReceived(self, data):
        pass

    def connectionLost(self, reason):
        pass


def fetch_blocking(url, timeout=URL_FETCH_TIMEOUT):
    """``GET url`` before the reactor runs (nats-server's start-up checks):
    the body of a 200, or :class:`ResolverError` in nats-server's words."""
    import socket
    import urllib.error
    import urllib.request

    where = 'could not fetch <%s>: ' % go_quote(url)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as e:
        raise ResolverError(where + ("%d %s" % (e.code, e.reason or "")).rstrip()) from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        dial = "dial tcp %s" % _host_port(url) if "://" in url else ""
        if isinstance(reason, ConnectionRefusedError):
            why = "%s: connect: connection refused" % dial
        elif isinstance(reason, (socket.timeout, TimeoutError)):
            why = "context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
        elif isinstance(reason, socket.gaierror):
            why = "%s: lookup %s: no such host" % (dial, _host_port(url).rsplit(":", 1)[0])
        elif isinstance(e, ValueError) or "unknown url type" in str(reason):
            scheme = url.split(":", 1)[0] if "://" in url else ""
            why = "unsupported protocol scheme %s" % go_quote(scheme)
        else:
            why = str(reason)
        raise ResolverError(where + "Get %s: %s" % (go_quote(url), why)) from None


# -- the cache resolver --------------------------------------------------------------------


class CacheResolver(DirResolver):
    """``resolver { type: cache, dir, ttl, limit }`` (nats-server's
    CacheDirAccResolver): some account JWTs in ``directory``, each kept
    ``ttl`` (0: for ever), ``limit`` of them at most (1000 by default; the
    least recently used goes first). A server alone has no one to fetch the
    others from: their lookups time out. Update requests change only the
    accounts loaded (``jwt updated cache``)."""

    kind = "CACHE"

    def __init__(self, directory, limit=0, ttl=0.0, timeout=1.9):
        super().__init__(directory, limit if limit and limit > 0 else 1000, False, 0, timeout)
        self.allow_delete = True  # (HardDelete: delete requests remove the file)
        self.ttl = ttl
        self._used = {}  # key -> last use (LRU order)
        for key in self._hashes:
            self._used[key] = self._mtime(key)

    def _mtime(self, key):
        try:
            return os.path.getmtime(os.path.join(self.directory, key + ".jwt"))
        except OSError:
            return 0.0

    def _expired(self, key):
        return bool(self.ttl) and self._mtime(key) + self.ttl < time.time()

    def load(self, key):
        path = self._path(key)
        if path is not None and key in self._hashes and self._expired(key):
            self._remove(key)
        token = super().load(key)
        self._used[key] = time.monotonic()
        return token

    def _remove(self, key):
        try:
            os.remove(os.path.join(self.directory, key + ".jwt"))
        except OSError:
            pass
        self._hashes.pop(key, None)
        self._used.pop(key, None)

    def _write(self, key, token):
        if key not in self._hashes and self.limit is not None and len(self._hashes) >= self.limit:
            # evictOnLimit: the least recently used makes room.
            oldest = min(self._hashes, key=lambda k: self._used.get(k, 0.0))
            self._remove(oldest)
        changed = super()._write(key, token)
        self._used[key] = time.monotonic()
        return changed

    def delete(self, key):
        if self._path(key) is None:
            raise ResolverError("invalid public key")
        if key not in self._hashes:
            return
        self._remove(key)
        if self.operator is not None:
            self.operator.account_deleted(key)

    def start(self, operator):
        self._answer_claims(operator, lookup=False)
        log.info("Managing some jwt in exclusive directory {dir}", dir=self.directory)

    def _update(self, reply, token, subject_key):
        op = self.operator
        try:
            claim = C.decode_account(token)
        except C.JWTError as e:
            self._respond(reply, subject_key or "n/a", "jwt update cache resulted in error", e)
            return
        key = subject_key or claim.subject
        if subject_key is not None and claim.subject != subject_key:
            self._respond(reply, key, "jwt update cache resulted in error",
                          "subject does not match jwt content")
            return
        if claim.issuer == op.operator_key and op.strict:
            self._respond(reply, key, "jwt update cache resulted in error",
                          "operator requires issuer to be a signing key")
            return
        if key not in op.accounts:
            self._respond(reply, key, "jwt update cache skipped")
            return
        vr = C.ValidationResults()
        claim.validate(vr)
        if vr.is_blocking(False):
            self._respond(reply, claim.subject, "jwt update cache validation failed",
                          "validation errors: [%s]" % " ".join(vr.errors()))
            return
        try:
            self.save(key, token)
        except (ResolverError, OSError) as e:
            self._respond(reply, key, "jwt update cache resulted in error", e)
            return
        self._respond(reply, key, "jwt updated cache")

    def _on_account_update(self, sub, subject, reply, hdr_len, raw):
        key = _account_of(subject)
        if key is None:
            log.debug("DirResolver - jwt update cache skipped due to bad subject {s}",
                      s=go_quote(_text(subject)))
            return
        self._update(_text(reply), _text(raw[hdr_len:]), key)
