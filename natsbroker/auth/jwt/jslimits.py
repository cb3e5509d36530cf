"""An account JWT's JetStream limits, and the JetStream plugins told of them.

nats-server (server/accounts.go ``updateAccountClaimsWithRefresh``) gives an
account JetStream when its JWT's ``limits`` have ``mem_storage`` or
``disk_storage`` other than 0, or ``tiered_limits``; then, whenever the
server runs JetStream, ``configJetStream`` enables, updates or disables it
as the account is registered and each time its JWT changes (and disables it
when the JWT is deleted). Here the plugins providing
:class:`~natsbroker.interfaces.IAccountJetStream` are told the same.
"""

from natsbroker.config.model import AccountJetStream
from natsbroker.interfaces import IAccountJetStream


def _int(v):
    return int(v or 0)


def _or_unlimited(v):
    # nats-server's toMaxAckPending and the stream byte limits: a JWT's 0
    # (or absent: omitempty) means no limit.
    v = _int(v)
    return -1 if v == 0 else v


def _tier(lim):
    """One ``JetStreamLimits`` of the JWT as nats-server's
    ``JetStreamAccountLimits`` (the other fields as they are: 0 streams
    or consumers is no limit to nats-server's checks, 0 bytes allows none)."""
    return AccountJetStream(
        max_memory=_int(lim.get("mem_storage")),
        max_file=_int(lim.get("disk_storage")),
        max_streams=_int(lim.get("streams")),
        max_consumers=_int(lim.get("consumer")),
        max_ack_pending=_or_unlimited(lim.get("max_ack_pending")),
        memory_max_stream_bytes=_or_unlimited(lim.get("mem_max_stream_bytes")),
        store_max_stream_bytes=_or_unlimited(lim.get("disk_max_stream_bytes")),
        max_bytes_required=bool(lim.get("max_bytes_required")))


def jetstream_limits(claims):
    """``{tier: AccountJetStream}`` of an account JWT's claims, or ``None``
    when the JWT gives no JetStream."""
    limits = claims.limits() or {}
    if _int(limits.get("mem_storage")) or _int(limits.get("disk_storage")):
        return {"": _tier(limits)}
    tiered = limits.get("tiered_limits")
    if isinstance(tiered, dict) and tiered:
        return {t: _tier(lim if isinstance(lim, dict) else {}) for t, lim in tiered.items()}
    return None


def configure(broker, jacc, system=False):
    """Tell the JetStream plugins what ``jacc``'s JWT says now (nats-server's
    ``configJetStream``, which leaves the system account alone)."""
    if system:
        return
    # /jsz names a JWT account by its JWT's name (its key is the id).
    jacc.account.name_tag = jacc.name_tag
    limits = jetstream_limits(jacc.claims)
    for js in broker.providers(IAccountJetStream):
        if limits is None:
            js.disable_account(jacc.account)
        else:
            js.enable_account(jacc.account, limits)


def disable(broker, jacc):
    """``jacc``'s JWT was deleted: no JetStream there any more, and no answer
    on its ``$JS.API`` either (nats-server's removeCb takes every service
    import of the account away, the one answering 10039 included)."""
    for js in broker.providers(IAccountJetStream):
        js.disable_account(jacc.account, answer=False)
