"""Imports between accounts at run time, as nats-server applies them.

What :mod:`natsbroker.accounts.exports` accepted at start-up is wired here into the
accounts' Sublists (server/accounts.go and server/client.go are the model):

* **Stream imports** are *shadow subscriptions*. When something in the
  importing account subscribes to a subject that meets a stream import, a
  copy of the subscription goes into the exporting account's Sublist, on the
  exporter's subject (``addShadowSubscriptions``). A message published there
  reaches it like any other subscriber and is delivered to the importer's
  subscription under the imported subject; without such interest the
  exporter's publish reaches no one (and a request gets no-responders). Queue
  subscriptions keep their group, which joins the exporter's group of the same
  name, as in nats-server. The copies go when the subscription goes.

* **Service imports** are internal subscriptions in the importing account, on
  the import's local subject. A request that reaches one goes on in the
  exporting account under the exported subject (``processServiceImport``),
  with a ``Nats-Request-Info`` header saying who asked, and its reply subject
  replaced by a fresh ``_R_.<account prefix>.<token>`` of the exporting
  account. That reply is a *response mapping*: the exporter's wildcard
  subscription on ``_R_.<prefix>.>`` takes the responder's answer back to the
  original reply subject in the requesting account. A ``Singleton`` export's
  mapping goes after one response, a ``Stream``/``Chunked`` one after an empty
  message or when it has been idle for the export's response threshold
  (checked on a timer: ``broker.reactor.callLater``), and any of them when the
  requester's interest in the reply goes. A request the exporting account
  delivers to no one is no delivery: the requester gets no-responders (503).

Accounts without imports or exports get none of this, and their PUB path is
untouched; an account with service imports routes through
``Account._route_full`` (deliveries counted, for the 503 above).
"""

import json
import random

from zope.interface import implementer

from natsbroker import jsonbound
from natsbroker.accounts.exports import SINGLETON, resolve
from natsbroker.gocompat.times import rfc3339_local
from natsbroker.interfaces import IMessageSink
from natsbroker.subjects.sublist import FWC, PWC, Subscription, is_literal, is_valid_subject, subset_of

REPLY_PREFIX = b"_R_."
CLIENT_INFO_HDR = b"Nats-Request-Info"
_JS_ACK_PREFIX = b"$JS.ACK."  # replies passed through as they are (pull consumers across accounts)
_JS_ALL_API = b"$JS.API.>"
_JS_NOOP_PREFIXES = (b"$JS.API.CONSUMER.MSG.NEXT.", b"$JS.API.DIRECT.GET.")
_HDR_LINE = b"NATS/1.0\r\n"
_DIGITS = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_CACHE_MAX = 1024

# ClientInfo's fields in nats-server's struct order (server/events.go): the
# header's JSON is written in this order, empty fields left out.
_CLIENT_INFO_FIELDS = ("start", "host", "id", "acc", "svc", "user", "name", "lang", "ver", "rtt",
                       "server", "cluster", "alts", "stop", "jwt", "issuer_key", "name_tag", "tags",
                       "kind", "client_type", "client_id", "nonce", "reply")


def wire(broker):
    """Apply the configured exports and imports to ``broker.accounts``;
    returns the :class:`CrossAccount` (``None`` when there are none)."""
    configs = broker.config.accounts
    res, errors = resolve(configs)
    if errors:
        raise ValueError("\n".join(errors))
    if not res.stream_imports and not res.service_imports:
        return None
    runtime = CrossAccount(broker)
    accounts = broker.accounts
    for name, imports in res.stream_imports.items():
        importer = runtime.imports_of(accounts[name])
        for ri in imports:
            exporter = accounts[ri.exporter]
            importer.stream_imports.append(_StreamImport(ri, exporter))
            runtime.imports_of(exporter)
            exporter.shadowed = True
    for name, imports in res.service_imports.items():
        importer_acc = accounts[name]
        importer = runtime.imports_of(importer_acc)
        for ri in imports:
            exporter = runtime.imports_of(accounts[ri.exporter])
            si = _ServiceImport(ri, importer_acc, exporter, runtime.export_state(exporter, ri.export))
            sub = Subscription(si.local, b"si%d" % runtime.next_sid(), ServiceImportSink(runtime, si))
            importer_acc.sublist.insert(sub)
            importer.service_subs.append(sub)
        # Its requests must know whether the import delivered (no-responders).
        importer_acc.count_deliveries()
    return runtime


# -- run-time wiring (operator mode: account JWTs come and change) ---------------------


def runtime_of(broker):
    """The broker's :class:`CrossAccount`, made the first time an account
    JWT brings imports."""
    if getattr(broker, "cross_account", None) is None:
        broker.cross_account = CrossAccount(broker)
    return broker.cross_account


def unwire(account):
    """Take an account's imports away (its JWT changed or went): its
    service import subscriptions and the shadow subscriptions its stream
    imports made in the exporters. Response mappings under way stay."""
    imp = account.imports
    if imp is None:
        return
    for sub in imp.service_subs:
        account.sublist.remove(sub)
    imp.service_subs = []
    for shadows in imp.shadows.values():
        for acc, shadow in shadows:
            acc.sublist.remove(shadow)
    imp.shadows = {}
    imp.stream_imports = []


def add_stream_import(runtime, importer, exporter, ri):
    """Wire the :class:`~natsbroker.accounts.exports.ResolvedStreamImport` ``ri`` of
    account ``importer`` from account ``exporter`` (subscriptions made
    before it get their shadows from :func:`reshadow`)."""
    runtime.imports_of(importer).stream_imports.append(_StreamImport(ri, exporter))
    runtime.imports_of(exporter)
    exporter.shadowed = True


def add_service_import(runtime, importer, exporter, ri):
    """Wire the :class:`~natsbroker.accounts.exports.ResolvedServiceImport` ``ri``."""
    imports = runtime.imports_of(importer)
    dest = runtime.imports_of(exporter)
    si = _ServiceImport(ri, importer, dest, runtime.export_state(dest, ri.export))
    sub = Subscription(si.local, b"si%d" % runtime.next_sid(), ServiceImportSink(runtime, si))
    importer.sublist.insert(sub)
    imports.service_subs.append(sub)
    # Its requests must know whether the import delivered (no-responders).
    importer.count_deliveries()


def reshadow(account):
    """Give the account's subscriptions the shadows its stream imports call
    for now (nats-server's processSubsOnConfigReload)."""
    imp = account.imports
    if imp is None or not imp.stream_imports:
        return
    for sub in account.sublist.all_subscriptions():
        if sub.owner.__class__ in _OWN_SINKS or sub.closed:
            continue
        imp.sub_added(sub)


class CrossAccount:
    """The broker-wide part: service import processing, and the chain of
    service imports the message being routed has gone through (nats-server's
    ``c.pa.psi``, for header chaining and cycle detection)."""

    def __init__(self, broker):
        self.broker = broker
        self.reactor = broker.reactor
        self.chain = []
        self._sids = 0
        self._states = {}
        self._rand = random.Random()

    def next_sid(self):
        self._sids += 1
        return self._sids

    def imports_of(self, account):
        if account.imports is None:
            account.imports = AccountImports(self, account)
        return account.imports

    def export_state(self, owner, rule):
        state = self._states.get(id(rule))
        if state is None:
            state = self._states[id(rule)] = _ExportState(self, owner, rule)
        return state

    def random_token(self):
        # newServiceReply: six base-62 digits of a random 64-bit number.
        n = self._rand.getrandbits(64)
        out = bytearray(6)
        for i in range(6):
            out[i] = _DIGITS[n % 62]
            n //= 62
        return bytes(out)

    # -- processServiceImport ------------------------------------------------

    def process(self, si, acc, subject, reply, hdr_len, raw):
        """A message in ``acc`` reached service import (or response mapping)
        ``si``: send it on to ``si.dest``. Returns True if anyone there got it."""
        chain = self.chain
        for prev in chain:
            if prev.export is si.export:
                return False  # a cycle: dropped, as nats-server drops it
        is_response = si.is_response
        if not is_response and si.js_api and subject.startswith(_JS_NOOP_PREFIXES):
            # As nats-server: the JetStream servers do nothing with these in
            # the system account (the consumer and the stream get them in the
            # account itself), so no response mapping is left waiting.
            return False
        broker = self.broker
        source = broker.route_source
        rsi = nrr = None
        if reply:
            if reply.startswith(_JS_ACK_PREFIX):
                nrr = reply
            else:
                rsi = si.dest_imports.add_response(acc, reply, si)
                nrr = rsi.subject
        to = si.target(subject)
        dest = si.dest
        if dest.mappings is not None and to is not None:
            mapped = dest.mappings.map(to)
            to = mapped if mapped.__class__ is bytes else None
        empty = not hdr_len and not raw
        if not is_response:
            share = chain[-1].share if chain else si.share
            hdr_len, raw = self._stamp(si, acc, source, share, bool(chain), hdr_len, raw)
        chain.append(si)
        try:
            n = self._route(dest, to, nrr, hdr_len, raw) if to is not None else 0
        finally:
            chain.pop()
            broker.route_source = source
        delivered = n > 0
        if is_response:
            if delivered and si.rt != SINGLETON:
                si.ts = self.reactor.seconds()
            if not delivered or si.rt == SINGLETON or empty:
                si.owner.remove_response(si)
        elif not delivered and rsi is not None:
            si.dest_imports.remove_response(rsi)
        return delivered

    def _route(self, account, subject, reply, hdr_len, raw):
        """processMsgResults for a message that came through a service import:
        shadow subscriptions are left out (nothing imported as a service is
        exported again as a stream). Returns the deliveries made."""
        r = account._match_cache.get(subject)
        if r is None:
            r = account.sublist.match(subject)
        psubs, qgroups = r
        n = 0
        for sub in psubs:
            if sub.owner.__class__ is ShadowSink:
                continue
            if self._deliver(sub, subject, reply, hdr_len, raw) is not False:
                n += 1
        for group in qgroups:
            members = tuple(s for s in group if s.owner.__class__ is not ShadowSink)
            if members:
                sub = account._pick(members, None)
                if self._deliver(sub, subject, reply, hdr_len, raw) is not False:
                    n += 1
        return n

    def _deliver(self, sub, subject, reply, hdr_len, raw):
        owner = sub.owner
        if owner.__class__ is ServiceImportSink:
            return owner.deliver(sub, subject, reply, hdr_len, raw)  # the chain goes on
        # Anything this subscriber publishes now (JetStream answering at
        # once) is a message of its own, with a chain of its own.
        chain, self.chain = self.chain, []
        try:
            return owner.deliver(sub, subject, reply, hdr_len, raw)
        finally:
            self.chain = chain

    # -- the Nats-Request-Info header ------------------------------------------------

    def _stamp(self, si, acc, source, share, chained, hdr_len, raw):
        broker = self.broker
        is_sys = si.dest is broker.system_account
        ci = None
        if chained and hdr_len:
            ci = _read_client_info(raw[:hdr_len])
            if ci is not None:
                ci["svc"] = acc.name
                if not share and (si.share or is_sys):
                    self._add_server(ci)
        if ci is None:
            ci = self._client_info(source, acc, share)
            if not share and is_sys:
                self._add_server(ci)
        return set_header(hdr_len, raw, CLIENT_INFO_HDR, _client_info_json(ci))

    def _add_server(self, ci):
        ci["server"] = self.broker.server_name
        # (The cluster's name now: a generated one may have been swapped for a peer's.)
        routes = getattr(self.broker, "cluster", None)
        cluster = routes.name if routes is not None else self.broker.config.cluster.name
        if cluster:
            ci["cluster"] = cluster

    def _client_info(self, source, acc, detailed):
        """getClientInfo: the account and RTT always, the rest when shared."""
        ci = {}
        if detailed:
            self._add_server(ci)
        if source is None:
            ci["acc"] = acc.name
            return ci
        ci["acc"] = source.account.name
        rtt = int(getattr(source, "rtt", 0) * 1e9)
        if rtt:
            ci["rtt"] = rtt
        if detailed:
            ci["start"] = rfc3339_local(source.start)
            ci["host"] = source.host
            ci["id"] = source.cid
            if source.user:
                ci["user"] = str(source.user)
            opts = source.opts
            ci["name"] = opts.name
            ci["lang"] = opts.lang
            ci["ver"] = opts.version
            ci["kind"] = "Client"
            ci["client_type"] = getattr(source, "client_type", "nats")
        return ci


class AccountImports:
    """One account's side of the imports: its stream imports (and the shadow
    subscriptions made for them), its service import subscriptions, the
    response mappings it answers through and the replies it waits on."""

    def __init__(self, runtime, account):
        self.runtime = runtime
        self.account = account
        self.stream_imports = []
        self.service_subs = []
        self.shadows = {}  # the importer's Subscription -> [(exporting Account, shadow Subscription)]
        self.responses = {}  # _R_ reply subject in this account -> _Response
        self.rr_map = {}  # reply subject in this account -> [_Response] answering to it
        self.reply_prefix = None

    # -- stream imports: shadow subscriptions --------------------------------------

    def sub_added(self, sub):
        """A subscription was inserted in this account's Sublist."""
        if not self.stream_imports:
            return
        shadows = []
        for im, subject in self._shadow_subjects(sub.subject):
            if not is_valid_subject(subject):
                break  # nats-server stops at the first it cannot insert
            shadow = Subscription(subject, sub.sid, ShadowSink(sub, im), sub.queue)
            im.exporter.sublist.insert(shadow)
            shadows.append((im.exporter, shadow))
        if shadows:
            self.shadows[sub] = shadows

    def sub_removed(self, sub):
        """A subscription left this account's Sublist."""
        shadows = self.shadows.pop(sub, None)
        if shadows:
            for acc, shadow in shadows:
                acc.sublist.remove(shadow)
        if self.rr_map:
            self._check_reverse(sub.subject)

    def _shadow_subjects(self, subject):
        """(import, subject in the exporting account) for each stream import
        a subscription on ``subject`` meets (addShadowSubscriptions): the
        import's own subject when it is met exactly or contained, else the
        part of the subscription inside the import, mapped back."""
        toks = subject.split(b".")
        has_wc = PWC in toks or toks[-1] == FWC
        out = []
        for im in self.stream_imports:
            if subject == im.local:
                out.append((im, im.remote))
                continue
            # Otherwise the subscription is (partly) inside the import.
            overlap = None
            if not subset_of(subject, im.local):
                if not has_wc:
                    continue
                if subset_of(im.local, subject):
                    out.append((im, im.remote))
                    continue
                overlap = _overlap(toks, im.local_tokens)
                if overlap is None:
                    continue
            if not im.use_pub and im.transform is not None:
                rtr = im.reverse()
                if rtr is None:
                    continue
                out.append((im, rtr.transform(overlap or subject)))
            elif not im.use_pub or overlap:
                out.append((im, overlap or im.remote))
            else:
                out.append((im, subject))
        return out

    # -- service imports: response mappings ------------------------------------------

    def new_reply(self):
        """newServiceReply: ``_R_.<account prefix>.<token>``; the first one
        subscribes this account to ``_R_.<prefix>.>`` for the responses."""
        runtime = self.runtime
        if self.reply_prefix is None:
            self.reply_prefix = REPLY_PREFIX + runtime.random_token() + b"."
            sub = Subscription(self.reply_prefix + b">", b"si%d" % runtime.next_sid(),
                               ResponseSink(self))
            self.account.sublist.insert(sub)
        return self.reply_prefix + runtime.random_token()

    def add_response(self, back_to, reply, osi):
        """addRespServiceImport: a reply subject of this account that takes
        an answer back to ``reply`` in ``back_to`` (the account the message
        came from)."""
        runtime = self.runtime
        rsi = _Response(self, self.new_reply(), back_to, runtime.imports_of(back_to), reply, osi)
        rsi.ts = runtime.reactor.seconds()
        self.responses[rsi.subject] = rsi
        if osi.export is not None:
            osi.export.arm()
        rsi.dest_imports.rr_map.setdefault(reply, []).append(rsi)
        return rsi

    def remove_response(self, rsi):
        if self.responses.pop(rsi.subject, None) is None:
            return
        waiting = rsi.dest_imports.rr_map.get(rsi.to)
        if waiting is not None:
            if rsi in waiting:
                waiting.remove(rsi)
            if not waiting:
                del rsi.dest_imports.rr_map[rsi.to]

    def _check_reverse(self, subject):
        """checkForReverseEntry: the requester no longer listens on a reply
        subject, so the response mappings pointing at it go."""
        if is_literal(subject):
            keys = [subject] if subject in self.rr_map else ()
        else:
            keys = [k for k in self.rr_map if subset_of(k, subject)]
        for reply in keys:
            if self.account.sublist.has_interest(reply):
                continue
            for rsi in self.rr_map.pop(reply, ()):
                rsi.owner.responses.pop(rsi.subject, None)


class _StreamImport:
    """A stream import of one account, as its shadow subscriptions use it."""

    __slots__ = ("exporter", "remote", "local", "local_tokens", "transform", "use_pub",
                 "_reverse", "_cache")

    def __init__(self, ri, exporter):
        self.exporter = exporter
        self.remote = ri.remote.encode()
        self.local = ri.local.encode()
        self.local_tokens = self.local.split(b".")
        self.transform = ri.transform
        self.use_pub = ri.use_pub
        self._reverse = False
        self._cache = {}

    def reverse(self):
        if self._reverse is False:
            self._reverse = self.transform.reverse()
        return self._reverse

    def delivered_subject(self, subject):
        """The subject a message published under ``subject`` in the
        exporting account has in the importing one."""
        if self.transform is not None:
            return _transformed(self._cache, self.transform, subject)
        if self.use_pub:
            return subject
        return self.local


@implementer(IMessageSink)
class ShadowSink:
    """Owner of a shadow subscription: delivers to the importer's own
    subscription, under the imported subject.

    It delivers through a copy of that subscription (same sid, queue and
    subject), as nats-server's shadow is a copy: what comes through an
    import does not count towards the subscription's ``UNSUB <sid> <max>``
    and never ends it."""

    __slots__ = ("sub", "im", "view")

    def __init__(self, sub, im):
        self.sub = sub
        self.im = im
        self.view = Subscription(sub.subject, sub.sid, sub.owner, sub.queue)

    def deliver(self, shadow, subject, reply, hdr_len, raw):
        if self.sub.closed:
            return False
        view = self.view
        return view.owner.deliver(view, self.im.delivered_subject(subject), reply, hdr_len, raw)

    def deliver_stored(self, shadow, subject, reply, hdr_len, raw):
        """A message routed by another subject than the one it is shown
        under (JetStream delivering a stored message to a deliver subject):
        nats-server keeps the shown subject as it is."""
        if self.sub.closed:
            return False
        view = self.view
        return view.owner.deliver(view, subject, reply, hdr_len, raw)


class _ServiceImport:
    """A service import as requests use it (nats-server's serviceImport)."""

    __slots__ = ("importer", "dest", "dest_imports", "export", "local", "remote", "transform",
                 "use_pub", "share", "rt", "_cache", "js_api")

    is_response = False

    def __init__(self, ri, importer, exporter_imports, export):
        self.importer = importer
        self.dest = exporter_imports.account
        self.dest_imports = exporter_imports
        self.export = export
        self.local = ri.local.encode()
        self.remote = ri.remote.encode()
        self.transform = ri.transform
        self.use_pub = ri.use_pub
        self.share = ri.share
        self.rt = ri.export.response_type if ri.export is not None else SINGLETON
        self._cache = {}
        # JetStream's API imported from the system account (jsAllAPI): pull
        # requests and direct gets are left out (see CrossAccount.process).
        self.js_api = self.remote == _JS_ALL_API and getattr(self.dest, "is_system", False)

    def target(self, subject):
        """The exported subject a request to ``subject`` goes to."""
        if self.transform is not None:
            return _transformed(self._cache, self.transform, subject)
        if self.use_pub:
            return subject
        return self.remote


class _Response:
    """A response mapping (a "response service import"): ``subject`` (an
    ``_R_`` reply of ``owner``'s account) leads back to ``to`` in ``dest``."""

    __slots__ = ("owner", "subject", "dest", "dest_imports", "to", "export", "rt", "share", "ts")

    is_response = True

    def __init__(self, owner, subject, dest, dest_imports, to, osi):
        self.owner = owner
        self.subject = subject
        self.dest = dest
        self.dest_imports = dest_imports
        self.to = to
        self.export = osi.export
        self.rt = osi.rt
        self.share = osi.share
        self.ts = 0.0

    def target(self, subject):
        return self.to


class _ExportState:
    """A service export's response threshold timer (nats-server's
    ``setResponseThresholdTimer``/``checkExpiredResponses``): armed by the
    first response mapping, it drops those idle for the threshold and runs
    again while any are left."""

    __slots__ = ("runtime", "owner", "rule", "threshold", "timer")

    def __init__(self, runtime, owner, rule):
        self.runtime = runtime
        self.owner = owner
        self.rule = rule
        self.threshold = rule.threshold if rule is not None else 120.0
        self.timer = None

    def arm(self):
        if self.timer is None:
            self.timer = self.runtime.reactor.callLater(self.threshold, self.check)

    def check(self):
        self.timer = None
        oldest = self.runtime.reactor.seconds() - self.threshold
        mine = [rsi for rsi in self.owner.responses.values() if rsi.export is self]
        expired = [rsi for rsi in mine if rsi.ts <= oldest]
        for rsi in expired:
            self.owner.remove_response(rsi)
        if len(mine) > len(expired):
            self.arm()


@implementer(IMessageSink)
class ServiceImportSink:
    """Owner of a service import's subscription in the importing account."""

    __slots__ = ("runtime", "si")

    def __init__(self, runtime, si):
        self.runtime = runtime
        self.si = si

    def deliver(self, sub, subject, reply, hdr_len, raw):
        # (False: the exporting account had no one for it; the importer's
        # route counts that as no delivery.)
        si = self.si
        return self.runtime.process(si, si.importer, subject, reply, hdr_len, raw)


@implementer(IMessageSink)
class ResponseSink:
    """Owner of an account's ``_R_.<prefix>.>`` subscription: answers to
    requests that came in through a service import."""

    __slots__ = ("imports",)

    def __init__(self, imports):
        self.imports = imports

    def deliver(self, sub, subject, reply, hdr_len, raw):
        imports = self.imports
        rsi = imports.responses.get(subject)
        if rsi is not None:
            imports.runtime.process(rsi, imports.account, subject, reply, hdr_len, raw)
        # (Delivered either way: nats-server never sends a responder 503 here.)


# -- helpers ------------------------------------------------------------------------------


def _transformed(cache, transform, subject):
    """``transform`` applied to ``subject``, through a bounded per-import cache."""
    out = cache.get(subject)
    if out is None:
        if len(cache) >= _CACHE_MAX:
            cache.clear()
        out = cache[subject] = transform.transform(subject)
    return out


def _overlap(toks, itoks):
    """The part of a wildcard subscription inside an import's subject that
    neither contains the other (nats-server fills the subscription's
    wildcards in from the import's tokens), or None if they do not meet."""
    t = list(toks)
    n = len(itoks)
    for i, tk in enumerate(t):
        if i >= n:
            break
        if tk == PWC and itoks[i] != FWC:
            t[i] = itoks[i]
    size = len(t)
    if t[-1] == FWC and n >= size:
        t[-1] = itoks[size - 1]
        if n > size:
            t.extend(itoks[size:])
    overlap = b".".join(t)
    if overlap != b".".join(toks) and subset_of(overlap, b".".join(itoks)):
        return overlap
    return None


def set_header(hdr_len, raw, key, value):
    """nats-server's setHeader: ``key: value`` replaces any ``key`` line and
    ends the message's header block (one is made if there is none).
    Returns the new ``(hdr_len, raw)``."""
    line = key + b": " + value + b"\r\n"
    if hdr_len > 2:
        head = _remove_header(raw[:hdr_len - 2], key) or _HDR_LINE
        block = head + line + b"\r\n"
    else:
        block = _HDR_LINE + line + b"\r\n"
    return len(block), block + raw[hdr_len:]


def _header_key_index(head, key):
    # getHeaderKeyIndex: the first ``key`` (exact case) that starts a line
    # (after "\r\n") and is followed by ':'; -1 if none.
    offset = 0
    while True:
        index = head.find(key, offset)
        if index < 2:
            return -1
        if index >= len(head) - 1 or head[index - 2:index] != b"\r\n":
            offset = index + len(key)
            continue
        if index + len(key) >= len(head):
            return -1
        if head[index + len(key):index + len(key) + 1] != b":":
            offset = index + len(key)
            continue
        return index


def _remove_header(head, key):
    # removeHeaderIfPresent: every line of ``key``, so that a client cannot
    # slip a second copy (say a forged Nats-Request-Info) past the one
    # removed.  Exact case, as nats-server (it leaves "nats-request-info:").
    while True:
        start = _header_key_index(head, key)
        if start < 1:
            return head
        end = head.find(b"\r\n", start)
        if end < 0:
            return head
        head = head[:start] + head[end + 2:]
        if len(head) <= len(_HDR_LINE) + 2:
            return None


def _read_client_info(block):
    """The ClientInfo of a header block's Nats-Request-Info, or None."""
    at = block.find(b"\r\n" + CLIENT_INFO_HDR + b":")
    if at < 0:
        return None
    start = at + len(CLIENT_INFO_HDR) + 3
    end = block.find(b"\r\n", start)
    try:
        data = jsonbound.loads(block[start:end if end >= 0 else len(block)].strip())
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    return {k: v for k, v in data.items() if k in _CLIENT_INFO_FIELDS}


def _client_info_json(ci):
    out = {k: ci[k] for k in _CLIENT_INFO_FIELDS if ci.get(k) not in (None, "", 0, [], {})}
    text = json.dumps(out, separators=(",", ":"), ensure_ascii=False)
    # Go's encoder escapes these for HTML safety.
    for a, b in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                 ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(a, b)
    return text.encode()


# Owners of the subscriptions this module makes itself (never shadowed).
_OWN_SINKS = (ShadowSink, ServiceImportSink, ResponseSink)
