"""Priority groups of a pull consumer (nats-server 2.11+, ADR-42), the parts
that do not need the consumer: which waiting pull request a message may go to
under the ``overflow`` and ``prioritized`` policies, the ``Nats-Pin-Id``
header and status of ``pinned_client``, and the pinned/unpinned advisories.

The pin itself (its id, timestamp and ``priority_timeout`` timer) lives on the
consumer, which hands it out in ``Consumer._next_waiting`` as nats-server's
``nextWaiting`` does.
"""

# A request without priority (a plain batch size, or a consumer without the
# prioritized policy) sorts after every 0-9 priority (nats-server: MaxInt32).
NO_PRIORITY = (1 << 31) - 1

# A waiting request that still carries a pin the consumer no longer has (the
# pin timed out or was unpinned): nats-server ends it with this status.
WRONG_PIN = (b"NATS/1.0 423 Nats-Wrong-Pin-Id\r\n"
             b"Nats-Pending-Messages: %d\r\nNats-Pending-Bytes: %d\r\n\r\n")
# A new request naming another pin than the current one is refused at once.
PIN_MISMATCH = b"NATS/1.0 423 Nats-Pin-Id mismatch\r\n\r\n"


def priority_of(wr):
    pg = wr.pg
    return NO_PRIORITY if pg is None else pg.priority


def insert_by_priority(waiting, wr):
    """Queue ``wr`` after every request of its priority or a better one
    (nats-server's insertAtPosition): lower numbers are served first, in
    arrival order within a priority."""
    p = priority_of(wr)
    for i, other in enumerate(waiting):
        if priority_of(other) > p:
            waiting.insert(i, wr)
            return
    waiting.append(wr)


def overflow_waits(pg, npc, num_ack_pending):
    """Whether an ``overflow`` request must let the message pass: it gets
    messages only once the consumer has at least ``min_pending`` messages
    pending (counting the one at hand) or ``min_ack_pending`` unacknowledged;
    without either threshold it is served like any request."""
    mp, map_ = pg.min_pending, pg.min_ack_pending
    if mp <= 0 and map_ <= 0:
        return False
    return not ((mp > 0 and mp <= npc + 1) or (map_ > 0 and map_ <= num_ack_pending))


def with_pin_header(hdr, pin_id):
    """The delivered message's headers plus ``Nats-Pin-Id`` (added last, as
    nats-server's genHeader; an empty id when no pin was handed out)."""
    base = hdr[:-2] if hdr and len(hdr) > 2 else b"NATS/1.0\r\n"
    return base + b"Nats-Pin-Id: %s\r\n\r\n" % pin_id.encode()


def pinned_advisory(stream, consumer, group, pin_id):
    return {"type": "io.nats.jetstream.advisory.v1.consumer_group_pinned", "account": "$G",
            "stream": stream, "consumer": consumer, "group": group, "pinned_id": pin_id}


def unpinned_advisory(stream, consumer, group, reason):
    """``reason``: "timeout" (priority_timeout passed without a request from the
    pinned client) or "admin" (CONSUMER.UNPIN)."""
    return {"type": "io.nats.jetstream.advisory.v1.consumer_group_unpinned", "account": "$G",
            "stream": stream, "consumer": consumer, "group": group, "reason": reason}
