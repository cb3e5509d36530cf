"""Accounts: isolated subject spaces, as nats-server's accounts are.

Every client belongs to one account (``$G``, the global account, unless the
configuration puts its user in another). Each account has its own Sublist, so
a subject published in one account never reaches a subscription in another;
what crosses between accounts does so through exports and imports, which are
ordinary subscriptions in a Sublist whose owner forwards the message.

An :class:`Account` is also the broker as seen from inside that account: it
provides the :class:`~natsbroker.interfaces.IBroker` calls that route by
subject (``route``, ``publish``, ``deliver``, ``subscribe``, ``unsubscribe``,
``sublist``) on its own Sublist and hands everything else (the reactor,
``begin``/``end``, INFO fields, monitoring endpoints...) to the broker. So a
plugin that serves each account separately (JetStream) runs one instance per
account with the account as its broker, unchanged.

Routing has four loops, each for a reason (tools/bench/PERF.md measures the
first): ``route`` is the PUB path of an account without mappings, service
imports or filtered clients, nothing in it but the match and the calls;
``_route_full`` replaces it per account when any of those exist (mapping,
counted deliveries, a refused queue member passing the message on);
``route_run`` hands a run of messages to each connection at once; and
``_deliver_to`` is the server's delivery of a stored message under its own
subject (JetStream), where a stream import's shadow subscription must see it.
Folding the first two costs the common path a check per message; the last
two deliver something other than one message under its own subject.
"""

import itertools

from twisted.logger import Logger
from zope.interface import implementer

from natsbroker.accounts.imports import ShadowSink
from natsbroker.interfaces import IBroker, IMessageSink
from natsbroker.protocol import wire
from natsbroker.subjects.mapping import SubjectMappings
from natsbroker.subjects.sublist import CACHE_MAX, Sublist, Subscription, subject_matches

log = Logger()

GLOBAL_ACCOUNT = "$G"
DEFAULT_SYSTEM_ACCOUNT = "$SYS"

# The no-responders status nats-server sends back to a requester.
_NO_RESPONDERS = b"NATS/1.0 503\r\nNats-Subject: %s\r\n\r\n"

_internal_sids = itertools.count(1)


@implementer(IMessageSink)
class InternalSink:
    """Delivers to a plugin's callback: the owner of internal subscriptions."""

    __slots__ = ("callback",)

    def __init__(self, callback):
        self.callback = callback

    def deliver(self, sub, subject, reply, hdr_len, raw):
        try:
            self.callback(sub, subject, reply, hdr_len, raw)
        except Exception:
            # A plugin's fault is logged; it never reaches the publishing
            # client's connection nor the other subscribers of the subject.
            log.failure("plugin subscription {sub}: delivery of {subject} failed",
                        sub=sub.subject.decode(errors="replace"),
                        subject=subject.decode(errors="replace"))


@implementer(IBroker)
class Account:
    """One account: its Sublist, its subject mappings, its configuration.

    ``config`` is the account's :class:`~natsbroker.config.model.AccountConfig`
    (``None`` for ``$G`` and an implicit system account)."""

    # Its side of the exports and imports (natsbroker.accounts.imports.AccountImports),
    # or None for an account that has none.
    imports = None
    # True when another account imports streams from this one (its Sublist
    # may then hold shadow subscriptions).
    shadowed = False

    def __init__(self, broker, name, config=None, mappings=None, is_system=False):
        self.broker = broker
        self.name = name
        self.account_config = config
        self.is_system = is_system
        self.sublist = Sublist(0 if broker.config.no_sublist_cache else CACHE_MAX)
        # The Sublist's cache, read directly on the PUB path (a hit costs one
        # dict lookup instead of a method call).
        self._match_cache = self.sublist.cache
        # Subject mappings: only when some are configured does route() look
        # the subject up first, so without them a publish costs nothing more.
        self.mappings = None
        self._counted = False
        self._rr = 0
        # Plugins' subscriptions made with hidden=True: not in /subsz and the
        # counts (as nats-server's internal clients' are not), and how many
        # such were ever made and removed (Sublist stats count them too).
        self.hidden_subscriptions = {}
        self.hidden_inserts = self.hidden_removes = 0
        if mappings:
            self.set_mappings(mappings)

    def __repr__(self):
        return "<Account %s>" % self.name

    def __getattr__(self, name):
        # Everything that is not per account is the broker's (see the module
        # docstring); only reached for names this class does not define.
        return getattr(self.broker, name)

    def account(self, name):
        return self.broker.accounts.get(name)

    @property
    def num_clients(self):
        return sum(1 for c in self.broker.clients() if c.account is self)

    # -- routing ---------------------------------------------------------

    def route(self, source, subject, reply, hdr_len, raw):
        self.broker.route_source = source
        r = self._match_cache.get(subject)
        if r is None:
            r = self.sublist.match(subject)
        psubs, qgroups = r
        if not psubs and not qgroups:
            if reply and source is not None and source.no_responders:
                self._no_responders(source, subject, reply)
            return 0
        if source is None or source.echo:
            # (the usual case: a loop with nothing in it but the call)
            for sub in psubs:
                sub.owner.deliver(sub, subject, reply, hdr_len, raw)
            if not qgroups:
                return len(psubs)
            n = len(psubs)
            no_echo = False
        else:
            n = 0
            no_echo = True
            for sub in psubs:
                owner = sub.owner
                if owner is not source:
                    owner.deliver(sub, subject, reply, hdr_len, raw)
                    n += 1
        for group in qgroups:
            sub = self._pick(group, source if no_echo else None)
            if sub is not None:
                sub.owner.deliver(sub, subject, reply, hdr_len, raw)
                n += 1
        return n

    def route_run(self, source, subject, payloads):
        """Route messages published one after the other by ``source`` to the
        same ``subject`` (no reply, no headers) in one go, when that makes
        no difference: every subscription belongs to a client connection that
        takes runs (see ClientProtocol.deliver_run), each connection has just
        one of them, and no queue group is involved. False, with nothing
        routed, when it would; then route() each message."""
        if "route" in self.__dict__:
            return False  # mappings or counted deliveries
        r = self._match_cache.get(subject)
        if r is None:
            r = self.sublist.match(subject)
        psubs, qgroups = r
        if qgroups:
            return False  # (round robin is per message)
        self.broker.route_source = source
        if not psubs:
            return True
        if len(psubs) > 1:
            # A connection with two subscriptions gets the messages
            # interleaved, message by message, as nats-server sends them.
            owners = set()
            for sub in psubs:
                owner = sub.owner
                if owner in owners or not getattr(owner, "takes_runs", False):
                    return False
                owners.add(owner)
        elif not getattr(psubs[0].owner, "takes_runs", False):
            return False
        echo = source.echo
        for sub in psubs:
            owner = sub.owner
            if echo or owner is not source:
                owner.deliver_run(sub, subject, payloads)
        return True

    def _route_full(self, source, subject, reply, hdr_len, raw):
        """route() for an account with subject mappings, service imports or
        clients whose deliveries are filtered. A mapping gives the message the
        subject its mapping picks (as nats-server: mapped once, before
        matching; the reply subject is left alone). A delivery that did not
        happen (a service import whose exporting account had no one for the
        request, a filtered client: ``deliver`` returns False) does not count:
        a queue group's next member gets the message, and a requester that
        reached no one gets no-responders, as nats-server's didDeliver has it."""
        self.broker.route_source = source
        if self.mappings is not None:
            dest = self._mapped.get(subject)
            if dest is None:
                dest = self.mappings.resolve(subject)
            if dest.__class__ is not bytes:
                dest = dest.pick(subject)
                if dest.__class__ is not bytes:
                    if reply and source is not None and source.no_responders:
                        self._no_responders(source, dest.subject, reply)
                    return 0
            subject = dest
        r = self._match_cache.get(subject)
        if r is None:
            r = self.sublist.match(subject)
        psubs, qgroups = r
        n = 0
        no_echo = source is not None and not source.echo
        for sub in psubs:
            owner = sub.owner
            if no_echo and owner is source:
                continue
            if owner.deliver(sub, subject, reply, hdr_len, raw) is not False:
                n += 1
        for group in qgroups:
            if self._deliver_to_group(group, source if no_echo else None,
                                      subject, reply, hdr_len, raw):
                n += 1
        if not n and reply and source is not None and source.no_responders:
            self._no_responders(source, subject, reply)
        return n

    def _deliver_to_group(self, group, skip_owner, subject, reply, hdr_len, raw):
        """One member of a queue group gets the message; a member that
        refuses it (its permissions filter the subject) passes it on to the
        next, as nats-server does. True if someone took it."""
        size = len(group)
        self._rr += 1
        start = self._rr % size
        for i in range(size):
            sub = group[(start + i) % size]
            if skip_owner is not None and sub.owner is skip_owner:
                continue
            if sub.owner.deliver(sub, subject, reply, hdr_len, raw) is not False:
                return True
        return False

    def count_deliveries(self):
        """Route with delivery counting from now on (a client of this account
        may refuse deliveries, see ClientProtocol.check_deliveries; a service
        import may find no one)."""
        self._counted = True
        self.route = self._route_full

    def set_mappings(self, mappings):
        """The account's subject mappings (at start, or from an account JWT
        update); empty: none. Only an account with mappings or counted
        deliveries routes through _route_full."""
        if mappings:
            self.mappings = SubjectMappings(mappings, self.broker.config.cluster.name)
            self._mapped = self.mappings.cache
            self.route = self._route_full
        else:
            self.mappings = None
            if not self._counted:
                self.__dict__.pop("route", None)

    def _pick(self, group, skip_owner):
        # Rotate through members so each gets an even share.
        size = len(group)
        self._rr += 1
        start = self._rr % size
        for i in range(size):
            sub = group[(start + i) % size]
            if skip_owner is None or sub.owner is not skip_owner:
                return sub
        return None

    def _no_responders(self, source, subject, reply):
        # Only the requester's own subscription to its reply subject gets it.
        for sub in source.subs.values():
            if subject_matches(sub.subject, reply):
                raw = _NO_RESPONDERS % subject
                source.deliver(sub, reply, None, len(raw), raw)
                return

    # -- internal pub/sub (the plugin API, in this account) ------------------

    def publish(self, subject, payload, reply=None, headers=None):
        broker = self.broker
        broker.internal_publishes += 1
        subject = _b(subject)
        reply = _b(reply) if reply else None
        hdr_len, raw = _message(payload, headers)
        # A publish made while a message is delivered (a responder's answer)
        # leaves that delivery's source as it was for the subscribers after.
        source, request = broker.route_source, broker.route_request
        broker.route_request = False  # a response, an advisory: never a request
        try:
            return self.route(None, subject, reply, hdr_len, raw)
        finally:
            broker.route_source, broker.route_request = source, request

    def request(self, subject, payload, reply=None, headers=None):
        """An internal request to a server-side service (IBroker.request)."""
        broker = self.broker
        broker.internal_publishes += 1
        subject = _b(subject)
        reply = _b(reply) if reply else None
        hdr_len, raw = _message(payload, headers)
        source, request = broker.route_source, broker.route_request
        broker.route_request = True
        try:
            return self.route(None, subject, reply, hdr_len, raw)
        finally:
            broker.route_source, broker.route_request = source, request

    def serving_request(self):
        broker = self.broker
        return broker.route_source is not None or broker.route_request

    def deliver(self, dest, subject, payload, reply=None, headers=None):
        """Publish internally to the subscribers of ``dest``, with ``subject``
        on the MSG line (JetStream delivers a stored message to a consumer's
        inbox under the subject it was stored with). Returns the count reached."""
        broker = self.broker
        broker.internal_publishes += 1
        if headers is None:
            hdr_len, raw = 0, payload
        else:
            hdr_len, raw = len(headers), headers + payload
        source, request = broker.route_source, broker.route_request
        broker.route_source = None
        broker.route_request = False
        try:
            return self._deliver_to(dest, subject, reply, hdr_len, raw)
        finally:
            broker.route_source, broker.route_request = source, request

    def _deliver_to(self, dest, subject, reply, hdr_len, raw):
        r = self._match_cache.get(dest)
        if r is None:
            r = self.sublist.match(dest)
        psubs, qgroups = r
        # A stream import's shadow subscription shows such a message under
        # its own subject, not the import's (nats-server's deliver subject).
        stored = self.shadowed and subject != dest
        n = 0
        for sub in psubs:
            owner = sub.owner
            if stored and owner.__class__ is ShadowSink:
                owner.deliver_stored(sub, subject, reply, hdr_len, raw)
            elif subject != dest and getattr(owner, "remote", False):
                owner.deliver(sub, dest, _deliver_reply(reply, subject), hdr_len, raw)
            else:
                owner.deliver(sub, subject, reply, hdr_len, raw)
            n += 1
        for group in qgroups:
            sub = self._pick(group, None)
            if sub is not None:
                owner = sub.owner
                if stored and owner.__class__ is ShadowSink:
                    owner.deliver_stored(sub, subject, reply, hdr_len, raw)
                elif subject != dest and getattr(owner, "remote", False):
                    owner.deliver(sub, dest, _deliver_reply(reply, subject), hdr_len, raw)
                else:
                    owner.deliver(sub, subject, reply, hdr_len, raw)
                n += 1
        return n

    def subscribe(self, subject, callback, queue=None, hidden=False):
        sid = b"i%d" % next(_internal_sids)
        sub = Subscription(_b(subject), sid, InternalSink(callback),
                           _b(queue) if queue else None)
        if hidden:
            self.hidden_subscriptions[id(sub)] = sub
            self.hidden_inserts += 1
        self.sublist.insert(sub)
        if self.imports is not None:
            # (An internal subscriber gets stream imports as a client does.)
            self.imports.sub_added(sub)
        return sub

    def unsubscribe(self, sub):
        if not sub.closed:
            sub.closed = True
            if self.hidden_subscriptions.pop(id(sub), None) is not None:
                self.hidden_removes += 1
            self.sublist.remove(sub)
            if self.imports is not None:
                self.imports.sub_removed(sub)


def _deliver_reply(reply, subject):
    """What a server sends on to another for a delivery to one subject shown
    under another (a JetStream consumer's): the message goes to the deliver
    subject, and the subject to show rides after an ``@`` at the end of its
    reply, as nats-server routes it (processMsgResults); the receiving server
    takes it off again. Without a reply there is nowhere to put it."""
    if not reply or (reply.startswith(b"$JS.ACK.") and b"@" in reply):
        return reply
    return reply + b"@" + subject


def _message(payload, headers):
    """``(hdr_len, raw)`` of an internal publish: ``headers`` is None, a ready
    ``NATS/1.0`` block, or name/value pairs."""
    payload = _b(payload)
    if headers is None:
        return 0, payload
    block = headers if isinstance(headers, bytes) else wire.encode_headers(headers)
    return len(block), block + payload


def _b(v):
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    return str(v).encode()
