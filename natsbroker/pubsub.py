"""Core NATS pub/sub: PUB, HPUB, SUB and UNSUB, as a plugin.

Handlers are closures over one connection's state, built once when the client
connects, so the PUB path does no attribute lookups it can avoid.
"""

from zope.interface import implementer

from natsbroker.interfaces import IBrokerPlugin, IClientOps
from natsbroker.protocol import parser as P, wire
from natsbroker.subjects.sublist import Subscription, is_valid_literal_subject, is_valid_subject

ERR_INVALID_SUBJECT = "Invalid Subject"
ERR_INVALID_PUB_SUBJECT = "Invalid Publish Subject"
ERR_MAX_SUBS = "maximum subscriptions exceeded"

# First bytes of the subjects nats-server reserves ("_" and "$").
RESERVED_FIRST = frozenset(b"_$")


def is_reserved_reply(reply):
    """nats-server's isReservedReply: a service import reply (``_R_.``), a
    JetStream ack (``$JS.ACK.``) or a gateway reply a client may not use as
    its own reply subject."""
    return (reply[:4] == b"_R_." or (len(reply) > 8 and reply[:8] == b"$JS.ACK.")
            or is_gateway_reply(reply))


def is_gateway_reply(subject):
    """nats-server's hasGWRoutedReplyPrefix (``_GR_.`` and the old ``$GR.``)."""
    return (len(subject) > 5 and subject[:5] == b"_GR_.") or (len(subject) > 4 and subject[:4] == b"$GR.")


@implementer(IBrokerPlugin, IClientOps)
class PubSub:
    """Client-facing core NATS messaging."""

    name = "pubsub"

    def __init__(self, config):
        self.config = config
        self.broker = None
        # Publish subjects already checked for pedantic clients.
        self._literal_ok = {}

    def start(self, broker):
        self.broker = broker

    def stop(self):
        pass

    def _valid_pub(self, subject):
        ok = self._literal_ok.get(subject)
        if ok is None:
            ok = is_valid_literal_subject(subject)
            if len(self._literal_ok) > 4096:
                self._literal_ok.clear()
            self._literal_ok[subject] = ok
        return ok

    def client_ops(self, client):
        valid_pub = self._valid_pub
        OK = wire.OK

        # on_pub and on_hpub repeat the same checks on purpose: PUB is the hot
        # path, and a shared helper would cost a call per message.
        def on_pub(op):
            _, subject, reply, payload = op
            client.in_msgs += 1
            client.in_bytes += len(payload)
            if subject[0] in RESERVED_FIRST and is_gateway_reply(subject):
                # (nats-server's gateway reply subjects: no client publishes there)
                client.permission_violation(subject)
                return
            if client.pedantic and not valid_pub(subject):
                # (still routed, as nats-server does: a wildcard subject is
                # delivered, one with an empty token reaches no one)
                client.send_err(ERR_INVALID_PUB_SUBJECT)
            perms = client.permissions
            # (an allowed subject is a dict hit: no call)
            if perms is not None and not (perms.pub_cache.get(subject) or perms.can_publish(subject)):
                client.permission_violation(subject)
                return
            if reply and reply[0] in RESERVED_FIRST and is_reserved_reply(reply):
                client.reply_violation(reply)
                return
            if client.verbose:
                client.send(OK)
            client.account.route(client, subject, reply, 0, payload)

        def on_pubs(op):
            # PUBs that repeat one control line: the subject checks hold for
            # all of them, so they are made once. Anything that answers per
            # message (a refusal, +OK, a reply subject) takes them one by one.
            _, subject, reply, payloads = op
            if (reply is None and not client.verbose
                    and not (subject[0] in RESERVED_FIRST and is_gateway_reply(subject))
                    and not (client.pedantic and not valid_pub(subject))):
                perms = client.permissions
                # (only a subject the permissions allow outright: a granted
                # reply is used up per message)
                if perms is None or perms.pub_cache.get(subject):
                    acc = client.account
                    n = len(payloads)
                    if acc.route_run(client, subject, payloads):
                        client.in_msgs += n
                        client.in_bytes += n * len(payloads[0])
                        return
            for payload in payloads:
                on_pub((P.OP_PUB, subject, reply, payload))
                if client.closed:
                    return

        def on_hpub(op):
            if not client.headers:
                # nats-server hangs up on HPUB from a client that did not
                # announce headers support.
                client.close("Protocol Violation")
                return
            subject = op[1]
            raw = op[4]
            client.in_msgs += 1
            client.in_bytes += len(raw)
            if subject[0] in RESERVED_FIRST and is_gateway_reply(subject):
                # (nats-server's gateway reply subjects: no client publishes there)
                client.permission_violation(subject)
                return
            if client.pedantic and not valid_pub(subject):
                client.send_err(ERR_INVALID_PUB_SUBJECT)
            perms = client.permissions
            # (an allowed subject is a dict hit: no call)
            if perms is not None and not (perms.pub_cache.get(subject) or perms.can_publish(subject)):
                client.permission_violation(subject)
                return
            reply = op[2]
            if reply and reply[0] in RESERVED_FIRST and is_reserved_reply(reply):
                client.reply_violation(reply)
                return
            if client.verbose:
                client.send(OK)
            client.account.route(client, subject, reply, op[3], raw)

        def on_sub(op):
            _, subject, queue, sid = op
            if not is_valid_subject(subject):
                client.send_err(ERR_INVALID_SUBJECT)
                return
            perms = client.permissions
            if perms is not None:
                if not perms.can_subscribe(subject, queue):
                    client.permission_violation(subject, sid, queue)
                    return
                if perms.checks_deliveries(subject, queue):
                    # A wildcard subscription next to deny entries: what it
                    # receives is checked against them (nats-server's mperms).
                    client.check_deliveries()
            subs = client.subs
            if sid not in subs:
                max_subs = client.max_subs  # (a JWT user's limit is its own)
                if max_subs and len(subs) >= max_subs:
                    client.send_err(ERR_MAX_SUBS)
                    return
                sub = Subscription(subject, sid, client, queue)
                subs[sid] = sub
                acc = client.account
                acc.sublist.insert(sub)
                if acc.imports is not None:
                    # Stream imports: shadow subscriptions in the exporters.
                    acc.imports.sub_added(sub)
            if client.verbose:
                client.send(OK)

        def on_unsub(op):
            _, sid, max_msgs = op
            sub = client.subs.get(sid)
            if sub is not None:
                if max_msgs and max_msgs > sub.delivered:
                    sub.max_msgs = max_msgs
                else:
                    client.remove_sub(sub)
            if client.verbose:
                client.send(OK)

        return {P.OP_PUB: on_pub, P.OP_PUBS: on_pubs, P.OP_HPUB: on_hpub,
                P.OP_SUB: on_sub, P.OP_UNSUB: on_unsub}
