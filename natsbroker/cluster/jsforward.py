"""JetStream through the cluster, for a server without JetStream of its own.

A clustered nats-server whose JetStream is off still serves JetStream to its
clients when other servers of the cluster run it ("mixed mode"): at start-up
(server.go ``Start``, JetStream not enabled) every account with JetStream
limits -- or ``$G`` when ``$G`` and the system account are the only accounts
and the server is not standalone (a cluster or gateway port) -- gets the
service import ``$JS.API.>`` -> system account ``$JS.API.>`` with ``share``
on (``enableAllJetStreamServiceImportsAndMappings``), and the system account
gets the public export ``$JS.API.>`` (``setupJetStreamExports``).

Everything else is the service import machinery of natsbroker.accounts.imports and the
interest-based routing of natsbroker.cluster.routes, as in nats-server:

* a client's ``$JS.API.X`` request goes on in ``$SYS`` with a
  ``Nats-Request-Info`` header (the client's details, the server and cluster:
  the JetStream servers read the account from it) and an ``_R_.<prefix>.<tok>``
  reply; the JetStream servers' ``RS+ $SYS $JS.API.>`` takes it there, our
  ``_R_.<prefix>.>`` subscription in ``$SYS`` is announced like any other so
  their answer comes back, and the response mapping takes it to the client's
  inbox;
* the rest (stream publishes and their acks, ``$JS.ACK`` acks, pull requests
  to ``$JS.API.CONSUMER.MSG.NEXT`` -- which also reach the consumer in the
  account by its own interest --, push deliveries, flow control) is ordinary
  routing in the account. A push or pull delivery routed by a JetStream
  server carries the stored message's subject after an ``@`` in its
  ``$JS.ACK`` reply (:func:`split_deliver_reply`), which the receiving server
  shows its clients as the MSG subject.
"""

from natsbroker.accounts.exports import SINGLETON, ResolvedServiceImport, ServiceExportRule
from natsbroker.accounts.imports import add_service_import, runtime_of

JS_ALL_API = "$JS.API.>"
_JS_ACK_PREFIX = b"$JS.ACK."
# A $JS.ACK reply has at least 8 dots before the deliver subject's '@' (the
# stream and consumer names may hold an '@' of their own): nats-server's
# jsAckDeliverIdx.
_ACK_DOTS = 8


def install(broker, force=False):
    """Give the accounts nats-server gives the ``$JS.API.>`` import to on a
    clustered server without JetStream. Returns the accounts given it.
    ``force``: JetStream is on but cannot serve in this cluster (a
    natsbroker server among nats-server JetStream servers): the same, and
    to every account with JetStream."""
    cfg = broker.config
    if (cfg.jetstream.enabled and not force) or (not cfg.cluster.port and not _gateway_port(cfg)):
        return []
    system = broker.system_account
    if system is None:
        return []
    out = [acc for acc in broker.accounts.values()
           if acc is not system and getattr(acc.account_config, "jetstream", None) is not None]
    gacc = broker.global_account
    if all(a is gacc or a is system for a in broker.accounts.values()):
        out = [gacc]
    if not out:
        return []
    # setupJetStreamExports: public, Singleton, the default response threshold.
    export = ServiceExportRule(account=system.name, subject=JS_ALL_API, response_type=SINGLETON)
    runtime = runtime_of(broker)
    done = []
    for acc in out:
        if _imports(acc, JS_ALL_API):
            continue  # serviceImportExists: a configured one stays
        ri = ResolvedServiceImport(acc.name, system.name, JS_ALL_API, JS_ALL_API, export,
                                   None, True, True)
        add_service_import(runtime, acc, system, ri)
        done.append(acc)
    return done


def split_deliver_reply(reply):
    """A routed ``$JS.ACK...@<subject>`` reply: ``(subject, ack reply)``;
    ``(None, reply)`` for any other reply."""
    if not reply.startswith(_JS_ACK_PREFIX) or len(reply) <= len(_JS_ACK_PREFIX):
        return None, reply
    dots = 0
    for i, c in enumerate(reply):
        if c == 46:  # '.'
            dots += 1
        elif c == 64 and dots >= _ACK_DOTS:  # '@'
            if i == len(reply) - 1:
                return None, reply
            return reply[i + 1:], reply[:i]
    return None, reply


def _gateway_port(cfg):
    gw = getattr(cfg, "gateway", None)
    return getattr(gw, "port", 0) if gw is not None else 0


def _imports(acc, subject):
    imp = acc.imports
    if imp is None:
        return False
    local = subject.encode()
    return any(sub.subject == local for sub in imp.service_subs)
