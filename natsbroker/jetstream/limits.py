"""Account and server JetStream limits, checked where and as nats-server checks them.

An account's limits are its ``jetstream { ... }`` block
(:class:`natsbroker.config.model.AccountJetStream`, -1 meaning none), or its
account JWT's ``limits`` (natsbroker/auth/jwt/jslimits.py); the global
account of a server without accounts has none (nats-server's "dynamic"
limits). They are kept by tier, as nats-server keeps them: ``""`` for
every stream, or ``"R1"``, ``"R3"``... for the streams with that many
replicas (a JWT's ``tiered_limits``; a single server only has R1 streams).
The server's ``max_memory_store``/``max_file_store`` bound all accounts
together (natsbroker: -1, the default, is no bound).

What each check is in nats-server (jetstream.go, jetstream_api.go, stream.go):

* :func:`precheck_create` -- ``jsNonClusteredStreamLimitsCheck``, run on the
  create request as sent, before the config is defaulted and validated: the
  stream count (10027), then ``checkLimits``: ``max_consumers`` (10026) and the
  bytes (10028/10047) -- the bytes only when the request names its storage,
  since an unset storage type matches neither case of nats-server's switch.
* :func:`check_max_bytes` -- in ``checkStreamCfg``: ``max_bytes_required``
  (10113) and the per-stream maximum (10122).
* :func:`check_create` -- ``addStream``'s ``checkAllLimits`` on the defaulted
  config, after the "name in use" comparison.
* :func:`check_update` -- ``configUpdateCheck``: only the growth of
  ``max_bytes`` is reserved anew.
* :func:`would_exceed` -- a publish: the server's usage already past its
  maximum is 503/10023 "insufficient resources"; the account's usage with the
  message past its limit is 400/10002 "resource limits exceeded for account".
"""

from natsbroker.config.model import AccountJetStream
from natsbroker.jetstream import errors as E

# The global account without accounts configured, and accounts with
# ``jetstream: enabled``: nothing is limited.
UNLIMITED = AccountJetStream()

# nats-server 2.15's ``jetstream { limits { default_max_consumers } }``
# default: the consumers of a stream without its own ``max_consumers`` in an
# account without a consumer limit (/jsz and /varz show it under ``limits``).
DEFAULT_MAX_CONSUMERS = 1000


# What a tiered account has for a tier it has no limits for (nats-server's
# selectLimits finding nothing): creates, consumers and publishes there are
# refused with 400/10120. All zeros, as ACCOUNT.INFO shows the account-wide
# limits of a tiered account and a tier it lists without limits.
NO_TIER = AccountJetStream(max_memory=0, max_file=0, max_streams=0, max_consumers=0,
                           max_ack_pending=0, memory_max_stream_bytes=0,
                           store_max_stream_bytes=0)


def tier_name(replicas):
    """nats-server's tierName: ``R<replicas>`` (0 counts as 1)."""
    return "R%d" % (replicas if replicas and replicas > 0 else 1)


def select(tiers, replicas):
    """``(limits, tier)`` for a stream of ``replicas`` (nats-server's
    selectLimits): the account-wide limits if there are, else its tier's,
    else :data:`NO_TIER`."""
    lim = tiers.get("")
    if lim is not None:
        return lim, ""
    tier = tier_name(replicas)
    return tiers.get(tier, NO_TIER), tier


def selected(js, replicas):
    """The limits a new stream or consumer of ``replicas`` is checked against;
    400/10120 when the account's tiers have none for it."""
    lim, _ = select(js.tiers, replicas)
    if lim is NO_TIER:
        raise E.no_limits()
    return lim


def limits_json(lim):
    """nats-server's ``JetStreamAccountLimits`` (ACCOUNT.INFO ``limits``)."""
    return {"max_memory": lim.max_memory, "max_storage": lim.max_file,
            "max_streams": lim.max_streams, "max_consumers": lim.max_consumers,
            "max_ack_pending": lim.max_ack_pending,
            "memory_max_stream_bytes": lim.memory_max_stream_bytes,
            "storage_max_stream_bytes": lim.store_max_stream_bytes,
            "max_bytes_required": lim.max_bytes_required}


def check_max_bytes(lim, cfg):
    """``checkStreamCfg``'s account part (a defaulted ``cfg``): 400/10113 when
    the account requires ``max_bytes`` and it is unset, 400/10122 when it is
    over the account's per-stream maximum for the storage type."""
    if lim.max_bytes_required and cfg.max_bytes <= 0:
        raise E.stream_max_bytes_required()
    limit = lim.memory_max_stream_bytes if cfg.storage == "memory" else lim.store_max_stream_bytes
    if limit > 0 and cfg.max_bytes > limit:
        raise E.stream_max_stream_bytes_exceeded()


def check_bytes(lim, add, storage, reserved, server_reserved, server_max):
    """``checkBytesLimits``: ``add`` bytes more (below 0: 1) next to the
    account's ``reserved`` and the server's ``server_reserved`` for ``storage``
    (``"memory"``, ``"file"``, or ``None``: nothing is checked)."""
    if add < 0:
        add = 1
    if storage == "memory":
        if lim.max_memory >= 0 and reserved + add > lim.max_memory:
            raise E.memory_resources_exceeded()
        if server_max >= 0 and server_reserved + add > server_max:
            raise E.memory_resources_exceeded()
    elif storage == "file":
        if lim.max_file >= 0 and reserved + add > lim.max_file:
            raise E.storage_resources_exceeded()
        if server_max >= 0 and server_reserved + add > server_max:
            raise E.storage_resources_exceeded()


def _check_limits(js, max_consumers, add, storage, reserved, lim=None):
    lim = js.limits if lim is None else lim
    if max_consumers > 0 and lim.max_consumers > 0 and max_consumers > lim.max_consumers:
        raise E.maximum_consumers_limit()
    if storage is not None:
        server = js.server
        check_bytes(lim, add, storage, reserved, server.reserved_bytes(storage),
                    server.max_bytes(storage))


def precheck_create(js, raw, storage_given):
    """Before the config is defaulted: the stream count, ``max_consumers`` and
    (``storage_given``: the request named its storage) the bytes, as sent."""
    lim = selected(js, raw.num_replicas)
    if lim.max_streams > 0:
        others = sum(1 for name in js.streams if name != raw.name)
        if others >= lim.max_streams:
            raise E.maximum_streams_limit()
    storage = raw.storage if storage_given else None
    reserved = js.reservation(storage, exclude=raw.name) if storage else 0
    _check_limits(js, raw.max_consumers, raw.max_bytes, storage, reserved, lim)


def check_create(js, cfg):
    """A new stream (defaulted ``cfg``): ``max_consumers``, then its
    ``max_bytes`` (1 byte when unlimited) next to the other streams'."""
    _check_limits(js, cfg.max_consumers, cfg.max_bytes, cfg.storage,
                  js.reservation(cfg.storage, exclude=cfg.name), selected(js, cfg.num_replicas))


def check_update(js, old, new):
    """An update: ``max_consumers``, and only what ``max_bytes`` grows by is
    reserved anew (a shrink reserves nothing)."""
    diff = max(new.max_bytes, 0) - max(old.max_bytes, 0)
    if diff < 0:
        diff = 0
    reserved = js.reservation(new.storage, exclude=new.name) + max(new.max_bytes - diff, 0)
    _check_limits(js, new.max_consumers, diff, new.storage, reserved,
                  selected(js, new.num_replicas))


def check_restore(js, cfg):
    """A restore: the stream count and limits of a create."""
    precheck_create(js, cfg, True)


def publish_guard(js, stream):
    """The check a publish to ``stream`` needs, or ``None`` when neither the
    server nor the account bounds its storage type (then a publish costs
    nothing more)."""
    lim = js.tiers.get(getattr(stream, "tier", ""))
    if lim is None:
        # Made under limits its account no longer has for its tier
        # (nats-server's wouldExceedLimits): every publish is refused.
        def no_limits(subject, hdr, data):
            raise E.no_limits()
        return no_limits
    storage = stream.config.storage
    if storage == "memory":
        account_max, stream_max = lim.max_memory, lim.memory_max_stream_bytes
    else:
        account_max, stream_max = lim.max_file, lim.store_max_stream_bytes
    server_max = js.server.max_bytes(storage)
    if account_max < 0 and stream_max <= 0 and server_max < 0:
        return None
    server = js.server
    size = stream.store.msg_size

    def would_exceed(subject, hdr, data):
        if server_max >= 0 and server.used_bytes(storage) > server_max:
            raise E.insufficient_resources()
        if account_max >= 0 or stream_max > 0:
            total = js.used_bytes(storage) + size(subject, hdr, data)
            if (stream_max > 0 and total > stream_max) or (0 <= account_max < total):
                raise E.account_resources_exceeded()
    return would_exceed
