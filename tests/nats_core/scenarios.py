"""Client scenarios for tests/test_nats_core.py, run by Python >= 3.13.

The official next-generation Python client (``nats-core``, import
``nats.client``; ``nats-jetstream``, import ``nats.jetstream``) needs Python
3.13, the project's venv is 3.11: so pytest runs this file with the
interpreter of ``.venv-client313`` (``make client313``), one scenario per
process::

    python scenarios.py SCENARIO URL [--user U --password P]

It prints one JSON object on its last stdout line: the values the test
compares exactly, with nothing that differs between two runs against the same
server (no ids, no times). A scenario that raises exits non-zero with the
traceback on stderr. Every wait has a deadline (``DEADLINE``); nothing sleeps.
"""

import argparse
import asyncio
import json
import logging
import re
import sys
import time
from datetime import datetime, timezone

import nats.client
import nats.jetstream
from nats.client.errors import NoRespondersError, StatusError
from nats.jetstream import headers as H
from nats.jetstream.errors import JetStreamError

DEADLINE = 15.0  # seconds, for any one wait: the machine is small and shared

SCENARIOS = {}


def scenario(fn):
    SCENARIOS[fn.__name__] = fn
    return fn


async def connect(args, **kw):
    kw.setdefault("allow_reconnect", False)  # a dead server fails the test, not a retry loop
    kw.setdefault("timeout", DEADLINE)
    if args.user is not None:
        kw.setdefault("user", args.user)
        kw.setdefault("password", args.password)
    return await nats.client.connect(args.url, **kw)


def text(b):
    return b.decode() if isinstance(b, (bytes, bytearray)) else b


def msg_view(m):
    return {
        "subject": m.subject,
        "data": text(m.data),
        "reply": m.reply,
        "headers": m.headers.asdict() if m.headers is not None else None,
        "status": [m.status.code, m.status.description] if m.status is not None else None,
    }


def port_of(url):
    return int(url.rsplit(":", 1)[1])


# --- core NATS -------------------------------------------------------------

@scenario
async def info(args):
    nc = await connect(args)
    si = nc.server_info
    out = {
        "status": nc.status.value,
        "server_id_ok": bool(re.fullmatch(r"N[A-Z0-9]{55}", si.server_id)),
        "version_ok": bool(re.fullmatch(r"\d+\.\d+\.\d+(-\S+)?", si.version)),
        "go_version_is_str": isinstance(si.go_version, str) and si.go_version != "",
        "host": si.host,
        "port_matches": si.port == port_of(args.url),
        "headers": si.headers,
        "auth_required": si.auth_required,
        "tls_required": si.tls_required,
        "tls_verify": si.tls_verify,
        "max_payload": si.max_payload,
        "proto": si.proto,
        "client_id_is_int": isinstance(si.client_id, int) and si.client_id > 0,
        "connect_urls": si.connect_urls,
        "jetstream": si.jetstream,
        "nonce": si.nonce,
        "rtt_positive": (await nc.rtt(timeout=DEADLINE)) > 0,
    }
    await nc.close()
    out["closed_status"] = nc.status.value
    return out


@scenario
async def pubsub(args):
    nc = await connect(args)
    other = await connect(args)
    star = await nc.subscribe("orders.*")
    full = await nc.subscribe("orders.>")
    exact = await other.subscribe("orders.new")
    await nc.flush(timeout=DEADLINE)
    await other.flush(timeout=DEADLINE)  # other's SUB is in before anything is published
    await nc.publish("orders.new", b"1")
    await nc.publish("orders.new.eu", b"2")
    await nc.publish("orders", b"3")  # matches none of them
    await nc.publish("orders.old", b"")  # empty payload
    await nc.flush(timeout=DEADLINE)
    got = {
        "star": [msg_view(await star.next(DEADLINE)) for _ in range(2)],
        "full": [msg_view(await full.next(DEADLINE)) for _ in range(3)],
        "exact": [msg_view(await exact.next(DEADLINE))],
    }
    # After a round trip nothing more is pending: no duplicate, no stray match.
    await nc.flush(timeout=DEADLINE)
    await other.flush(timeout=DEADLINE)
    got["pending_after"] = [star.pending[0], full.pending[0], exact.pending[0]]
    # Unsubscribed: the server stops delivering.
    await star.unsubscribe()
    await nc.publish("orders.new", b"4")
    await nc.flush(timeout=DEADLINE)
    got["after_unsub_full"] = msg_view(await full.next(DEADLINE))
    await nc.flush(timeout=DEADLINE)
    got["star_closed"] = star.closed
    st = nc.stats()
    got["stats"] = {"out_messages": st.out_messages, "in_messages": st.in_messages}
    await other.close()
    await nc.close()
    return got


async def _responder(nc, sub):
    async for m in sub:
        hdrs = {"Echo": m.headers.get_all("Ask")} if m.headers else None
        await nc.publish(m.reply, b"pong:" + m.data, headers=hdrs)


@scenario
async def request_reply(args):
    svc = await connect(args)
    nc = await connect(args)
    sub = await svc.subscribe("svc.echo")
    await svc.flush(timeout=DEADLINE)
    task = asyncio.create_task(_responder(svc, sub))
    replies = [await nc.request("svc.echo", b"%d" % i, timeout=DEADLINE) for i in range(20)]
    with_headers = await nc.request("svc.echo", b"h", timeout=DEADLINE,
                                    headers={"Ask": ["one", "two"]})
    # Many requests in flight at once, answered out of order by the one responder.
    many = await asyncio.gather(*(nc.request("svc.echo", b"c%d" % i, timeout=DEADLINE)
                                  for i in range(50)))
    await sub.unsubscribe()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    out = {
        "replies": [text(r.data) for r in replies],
        "reply_subjects_are_inboxes": all(r.subject.startswith("_INBOX.") for r in replies),
        "with_headers": msg_view(with_headers) | {"subject": None},
        "concurrent": [text(r.data) for r in many],
    }
    await nc.close()
    await svc.close()
    return out


@scenario
async def headers(args):
    nc = await connect(args)
    sub = await nc.subscribe("h.>")
    await nc.publish("h.multi", b"body", headers={"X-Multi": ["a", "b", "c"], "Trace-Id": "abc"})
    await nc.publish("h.one", b"", headers={"Only": "1"})
    await nc.publish("h.spaces", b"x", headers={"K": "value with spaces", "K2": ["", "x"]})
    hdrs = nats.client.Headers({"Case-Kept": "v"})
    hdrs.append("Case-Kept", "w")
    await nc.publish("h.obj", b"o", headers=hdrs)
    await nc.publish("h.none", b"plain")  # no headers: an ordinary MSG
    await nc.flush(timeout=DEADLINE)
    msgs = [await sub.next(DEADLINE) for _ in range(5)]
    first = msgs[0].headers
    out = {
        "messages": [msg_view(m) for m in msgs],
        "get": first.get("X-Multi"),
        "get_all": first.get_all("X-Multi"),
        "get_missing": first.get("x-multi"),  # the client's lookups are case-sensitive
    }
    await nc.close()
    return out


@scenario
async def queue_groups(args):
    pubc = await connect(args)
    nc = await connect(args)
    members = [await nc.subscribe("work", queue="workers") for _ in range(3)]
    other_group = await nc.subscribe("work", queue="auditors")
    plain = await nc.subscribe("work")
    await nc.flush(timeout=DEADLINE)
    n = 90
    for i in range(n):
        await pubc.publish("work", b"%d" % i)
    await pubc.flush(timeout=DEADLINE)
    # Everything for nc was written before the PONG that ends this flush: the
    # server handled pubc's PUBs before nc's PING only if pubc flushed first
    # (done above), and it writes MSGs to nc in order, before nc's PONG.
    await nc.flush(timeout=DEADLINE)
    per_member = []
    seen = []
    for s in members:
        k = s.pending[0]
        per_member.append(k)
        seen += [int(text((await s.next(DEADLINE)).data)) for _ in range(k)]
    auditors = [int(text((await other_group.next(DEADLINE)).data))
                for _ in range(other_group.pending[0])]
    everyone = [int(text((await plain.next(DEADLINE)).data)) for _ in range(plain.pending[0])]
    out = {
        "member_total": sum(per_member),
        "each_once": sorted(seen) == list(range(n)),
        "every_member_used": all(k > 0 for k in per_member),
        "other_group": auditors == list(range(n)),
        "plain": everyone == list(range(n)),
    }
    await pubc.close()
    await nc.close()
    return out


@scenario
async def no_responders(args):
    nc = await connect(args)
    out = {}
    try:
        await nc.request("nobody.home", b"x", timeout=DEADLINE)
        out["raised"] = None
    except NoRespondersError as e:
        out["raised"] = [type(e).__name__, e.status, e.description, e.subject, str(e)]
    m = await nc.request("nobody.home", b"x", timeout=DEADLINE, return_on_error=True)
    out["returned"] = msg_view(m) | {"subject": None}
    # A subscriber that is there but never answers is a timeout, not a 503.
    # (0.5 s is not a synchronisation: no answer can come, whatever the load.)
    await nc.subscribe("silent")
    quiet = logging.getLogger("nats.client")
    quiet.disabled = True  # the client logs the expected timeout with a traceback
    try:
        await nc.request("silent", b"x", timeout=0.5)
        out["silent"] = None
    except TimeoutError as e:
        out["silent"] = [type(e).__name__, str(e)]
    except StatusError as e:
        out["silent"] = [type(e).__name__, e.status]
    finally:
        quiet.disabled = False
    # JetStream publish with no stream for the subject: the 503 after its retries.
    js = nats.jetstream.new(nc)
    try:
        await js.publish("no.stream.here", b"x", retry_attempts=0, timeout=DEADLINE)
        out["js_publish"] = None
    except NoRespondersError as e:
        out["js_publish"] = [type(e).__name__, e.status]
    await nc.close()
    return out


@scenario
async def flush(args):
    pubc = await connect(args)
    subc = await connect(args)
    sub = await subc.subscribe("bulk")
    await subc.flush(timeout=DEADLINE)
    n = 2000
    for i in range(n):
        await pubc.publish("bulk", b"%d" % i)  # more than the client's 512-message buffer
    await pubc.flush(timeout=DEADLINE)
    await subc.flush(timeout=DEADLINE)
    pending_after_flush = sub.pending[0]
    got = [int(text((await sub.next(DEADLINE)).data)) for _ in range(n)]
    out = {
        "pending_after_flush": pending_after_flush,
        "in_order": got == list(range(n)),
        "stats_out": pubc.stats().out_messages,
        "stats_in": subc.stats().in_messages,
        "status": pubc.status.value,
    }
    await pubc.close()
    await subc.close()
    await pubc.flush(timeout=DEADLINE)  # on a closed client: a no-op, no error
    out["closed_flush_status"] = pubc.status.value
    return out


@scenario
async def drain_close(args):
    nc = await connect(args)
    watcher = await connect(args)
    sub = await nc.subscribe("d")
    await nc.flush(timeout=DEADLINE)
    for i in range(10):
        await watcher.publish("d", b"%d" % i)
    await watcher.flush(timeout=DEADLINE)
    await nc.flush(timeout=DEADLINE)  # the 10 are in sub's queue now
    await nc.drain(timeout=DEADLINE)
    out = {"after_drain": nc.status.value, "sub_closed": sub.closed}
    # Drained: what was queued is still delivered, then iteration ends.
    out["drained_msgs"] = [text(m.data) async for m in sub]
    try:
        await nc.publish("d", b"late")
        out["publish_after_drain"] = None
    except RuntimeError as e:
        out["publish_after_drain"] = str(e)
    await nc.drain()  # idempotent
    # close: pending subscription messages are discarded, further use fails.
    c2 = await connect(args)
    s2 = await c2.subscribe("d2")
    await c2.close()
    out["after_close"] = c2.status.value
    try:
        await c2.subscribe("d3")
        out["subscribe_after_close"] = None
    except RuntimeError as e:
        out["subscribe_after_close"] = str(e)
    try:
        await c2.request("d3", b"", timeout=DEADLINE)
        out["request_after_close"] = None
    except RuntimeError as e:
        out["request_after_close"] = str(e)
    await c2.close()  # idempotent
    out["s2_closed"] = s2.closed
    await watcher.close()
    return out


@scenario
async def echo_and_errors(args):
    out = {}
    quiet = await connect(args, no_echo=True)
    other = await connect(args)
    sub = await quiet.subscribe("e")
    await quiet.flush(timeout=DEADLINE)
    await quiet.publish("e", b"mine")  # not echoed back to its own connection
    await other.publish("e", b"theirs")
    await other.flush(timeout=DEADLINE)
    await quiet.flush(timeout=DEADLINE)
    out["no_echo"] = [text((await sub.next(DEADLINE)).data), sub.pending[0]]
    await quiet.close()
    # Over max_payload: the server answers -ERR and closes; the client hands the
    # text (quotes stripped) to its error callbacks and keeps it as last_error.
    nc = await connect(args)
    errors = asyncio.Queue()
    nc.add_error_callback(errors.put_nowait)
    logging.getLogger("nats.client").disabled = True  # it logs the -ERR as an error
    await nc.publish("big", b"x" * (nc.server_info.max_payload + 1))
    out["max_payload_error"] = await asyncio.wait_for(errors.get(), DEADLINE)
    logging.getLogger("nats.client").disabled = False
    out["last_error"] = nc.last_error
    await nc.close()
    # The other connection is unaffected.
    r = await other.subscribe("still")
    await other.publish("still", b"here")
    out["other_ok"] = text((await r.next(DEADLINE)).data)
    await other.close()
    return out


@scenario
async def auth(args):
    """--user a --pass b on the server; args carry the good credentials."""
    out = {}
    nc = await connect(args)
    sub = await nc.subscribe("secure")
    await nc.publish("secure", b"ok")
    await nc.flush(timeout=DEADLINE)
    out["good"] = [text((await sub.next(DEADLINE)).data), nc.server_info.auth_required]
    await nc.close()
    for label, creds in [("bad_password", {"user": args.user, "password": "wrong"}),
                         ("bad_user", {"user": "nobody", "password": args.password}),
                         ("none", {})]:
        try:
            c = await nats.client.connect(args.url, allow_reconnect=False, timeout=DEADLINE, **creds)
            await c.close()
            out[label] = None
        except ConnectionError as e:
            out[label] = [type(e).__name__, str(e)]
    return out


# --- JetStream ---------------------------------------------------------------

@scenario
async def jetstream(args):
    nc = await connect(args)
    js = nats.jetstream.new(nc, strict=args.strict)
    out = {"info_jetstream": nc.server_info.jetstream}
    stream = await js.create_stream(name="ORDERS", subjects=["orders.>"], storage="file")
    cfg = stream.info.config
    out["created"] = {"name": stream.name, "subjects": cfg.subjects, "retention": cfg.retention,
                      "storage": cfg.storage, "messages": stream.info.state.messages}
    acks = []
    for i in range(3):
        a = await js.publish("orders.new", b"order-%d" % i, timeout=DEADLINE)
        acks.append([a.stream, a.sequence, a.duplicate, a.domain])
    dup1 = await js.publish("orders.new", b"once", headers={"Nats-Msg-Id": "m1"}, timeout=DEADLINE)
    dup2 = await js.publish("orders.new", b"once", headers={"Nats-Msg-Id": "m1"}, timeout=DEADLINE)
    acks.append([dup1.stream, dup1.sequence, dup1.duplicate, dup1.domain])
    acks.append([dup2.stream, dup2.sequence, dup2.duplicate, dup2.domain])
    out["acks"] = acks
    info = await js.get_stream_info("ORDERS")
    out["state"] = {"messages": info.state.messages, "first": info.state.first_sequence,
                    "last": info.state.last_sequence, "consumers": info.state.consumer_count}
    sm = await js.get_message("ORDERS", 2)
    out["get_message"] = [sm.subject, sm.sequence, text(sm.data)]

    consumer = await stream.create_consumer(name="billing", durable_name="billing",
                                            ack_policy="explicit")
    out["consumer"] = {"name": consumer.name, "stream": consumer.stream_name,
                       "ack_policy": consumer.info.config.ack_policy,
                       "num_pending": consumer.info.num_pending}
    batch = await consumer.fetch(max_messages=3, max_wait=DEADLINE)
    fetched = []
    async for m in batch:
        md = m.metadata
        fetched.append([m.subject, text(m.data), md.stream, md.consumer, md.sequence.stream,
                        md.sequence.consumer, md.num_delivered, md.num_pending])
        await m.ack()  # fire and forget
    out["fetched"] = fetched
    out["batch_error"] = repr(batch.error) if batch.error else None
    # The fourth message, acked with a double ack: once the server confirms it,
    # the plain acks sent before it on this connection were handled too, so
    # CONSUMER.INFO below cannot race them (nats-server handles acks on the
    # consumer's own goroutine, not in the order of the API requests).
    last = await consumer.next(max_wait=DEADLINE)
    out["next"] = [text(last.data), last.metadata.sequence.stream]
    await last.double_ack(timeout=DEADLINE)
    # Nothing left: fetch_nowait ends at once (404 No Messages), with no error.
    empty = await consumer.fetch_nowait(max_messages=5)
    out["nowait"] = [[text(m.data) async for m in empty], repr(empty.error) if empty.error else None]
    ci = await js.get_consumer_info("ORDERS", "billing")
    seqs = ("consumer_seq", "stream_seq")  # not last_active: a time
    out["consumer_info"] = {"delivered": {k: ci.delivered.get(k) for k in seqs},
                            "ack_floor": {k: ci.ack_floor.get(k) for k in seqs},
                            "num_ack_pending": ci.num_ack_pending, "num_pending": ci.num_pending,
                            "num_redelivered": ci.num_redelivered}
    # Errors: the client maps err_code to its own exception classes.
    errors = {}
    try:
        await js.get_stream_info("NOPE")
    except JetStreamError as e:
        errors["stream_not_found"] = [type(e).__name__, e.code, e.error_code, e.description]
    try:
        await js.create_stream(name="ORDERS", subjects=["other.>"])
    except JetStreamError as e:
        errors["name_in_use"] = [type(e).__name__, e.code, e.error_code, e.description]
    try:
        await js.get_consumer_info("ORDERS", "nope")
    except JetStreamError as e:
        errors["consumer_not_found"] = [type(e).__name__, e.code, e.error_code, e.description]
    try:
        await js.get_message("ORDERS", 99)
    except JetStreamError as e:
        errors["message_not_found"] = [type(e).__name__, e.code, e.error_code, e.description]
    out["errors"] = errors
    out["stream_names"] = [n async for n in js.stream_names()]
    out["consumer_names"] = [n async for n in js.consumer_names("ORDERS")]
    out["delete_consumer"] = await js.delete_consumer("ORDERS", "billing")
    out["delete_stream"] = await js.delete_stream("ORDERS")
    await nc.close()
    return out


@scenario
async def js_consume(args):
    """An ordered consumer, and a durable one read through messages() (continuous pulls)."""
    nc = await connect(args)
    js = nats.jetstream.new(nc, strict=args.strict)
    stream = await js.create_stream(name="EVENTS", subjects=["ev.>"], storage="memory")
    for i in range(10):
        await js.publish("ev.%s" % "abc"[i % 3], b"e%d" % i, timeout=DEADLINE)
    out = {}
    oc = await stream.ordered_consumer(filter_subjects=["ev.a", "ev.b"])
    batch = await oc.fetch(max_messages=7, max_wait=DEADLINE)
    out["ordered"] = [[m.subject, text(m.data), m.metadata.sequence.stream] async for m in batch]
    out["ordered_error"] = repr(batch.error) if batch.error else None
    await oc.close()
    durable = await stream.create_consumer(name="reader", durable_name="reader",
                                           ack_policy="explicit")
    ms = await durable.messages(max_messages=4, max_wait=DEADLINE)
    got = []
    async for m in ms:
        got.append([m.subject, text(m.data), m.metadata.sequence.stream])
        if len(got) < 10:
            await m.ack()
        else:
            await m.double_ack(timeout=DEADLINE)  # orders the earlier acks before the info
            break
    await ms.stop()
    out["messages"] = got
    ci = await js.get_consumer_info("EVENTS", "reader")
    out["reader_info"] = {"ack_floor": ci.ack_floor.get("stream_seq"),
                          "num_ack_pending": ci.num_ack_pending, "num_pending": ci.num_pending}
    await js.delete_stream("EVENTS")
    await nc.close()
    return out


# --- JetStream: newer stream features (counters, schedules, atomic batches) ---
#
# Shared helpers: what a JetStream error, a stored message and a consumed
# message look like in the printed JSON (no times, no random ids).

def js_error(e):
    return [type(e).__name__, e.code, e.error_code, e.description]


def hdrs(h):
    return h.asdict() if h is not None else None


def stored(sm):
    """A StreamMessage (STREAM.MSG.GET or DIRECT.GET)."""
    return [sm.subject, sm.sequence, text(sm.data), hdrs(sm.headers)]


def consumed(m):
    """A JetStream message from a consumer: its subject, data and ack metadata."""
    md = m.metadata
    return [m.subject, text(m.data), md.sequence.stream, md.sequence.consumer,
            md.num_delivered, md.num_pending]


async def raw_pull(nc, stream, consumer, request, wait=DEADLINE):
    """One CONSUMER.MSG.NEXT by hand (for what the client's fetch cannot send,
    such as a pin id): the messages, then the status that ended the pull."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish("$JS.API.CONSUMER.MSG.NEXT.%s.%s" % (stream, consumer),
                     json.dumps(request).encode(), reply=inbox)
    got = []
    want = request.get("batch", 1)
    while True:
        m = await sub.next(wait)
        if m.status is None:
            got.append([m.subject, text(m.data), hdrs(m.headers)])
            if len(got) == want:
                break
        elif m.status.code != "100":
            got.append(["status", m.status.code, m.status.description, hdrs(m.headers)])
            break
    await sub.unsubscribe()
    return got


async def raw_api(nc, subject, payload=None):
    """A JetStream API request the client has no helper for: the decoded reply."""
    body = json.dumps(payload).encode() if payload is not None else b""
    reply = await nc.request(subject, body, timeout=DEADLINE)
    return json.loads(reply.data)


@scenario
async def js_counters(args):
    """ADR-49 counters: Nats-Incr publishes, the PubAck's val, the stored {"val"}."""
    nc = await connect(args)
    js = nats.jetstream.new(nc, strict=args.strict)
    stream = await js.create_stream(name="COUNTERS", subjects=["cnt.>"], allow_msg_counter=True)
    cfg = stream.info.config
    out = {"config": [cfg.allow_msg_counter, cfg.allow_direct, cfg.discard]}
    acks = []
    for subject, incr in [("cnt.a", "5"), ("cnt.a", "+3"), ("cnt.b", "1"), ("cnt.a", "-10"),
                          ("cnt.b", "18446744073709551615"), ("cnt.b", "+1"), ("cnt.a", "0")]:
        a = await js.publish(subject, b"", headers={"Nats-Incr": incr}, timeout=DEADLINE)
        acks.append([a.stream, a.sequence, a.value, a.duplicate, a.batch_id, a.batch_size])
    out["acks"] = acks
    # The stored message: {"val": "<total>"} with the increment kept in Nats-Incr.
    out["get_message"] = stored(await js.get_message("COUNTERS", 2))
    out["last_a"] = stored(await js.get_last_message_for_subject("COUNTERS", "cnt.a"))
    out["last_b"] = stored(await stream.get_last_message_for_subject("cnt.b"))
    errors = {}
    for label, subject, payload, headers in [
            ("no_incr", "cnt.a", b"x", None),
            ("bad_incr", "cnt.a", b"", {"Nats-Incr": "abc"}),
            ("payload_with_incr", "cnt.a", b"x", {"Nats-Incr": "1"})]:
        try:
            a = await js.publish(subject, payload, headers=headers, timeout=DEADLINE)
            errors[label] = ["ack", a.sequence, a.value]
        except JetStreamError as e:
            errors[label] = js_error(e)
    # Nats-Incr on a stream that is not a counter.
    await js.create_stream(name="PLAIN", subjects=["plain.>"])
    try:
        await js.publish("plain.a", b"", headers={"Nats-Incr": "1"}, timeout=DEADLINE)
        errors["not_a_counter"] = None
    except JetStreamError as e:
        errors["not_a_counter"] = js_error(e)
    out["errors"] = errors
    info = await js.get_stream_info("COUNTERS")
    out["state"] = [info.state.messages, info.state.first_sequence, info.state.last_sequence,
                    info.state.num_subjects]
    await js.delete_stream("PLAIN")
    await js.delete_stream("COUNTERS")
    await nc.close()
    return out


@scenario
async def js_schedules(args):
    """ADR-51: an "@at" schedule a second or two ahead fires once onto its target."""
    nc = await connect(args)
    js = nats.jetstream.new(nc, strict=args.strict)
    stream = await js.create_stream(name="SCHED", subjects=["sch.>"], allow_msg_schedules=True)
    cfg = stream.info.config
    # nats-server turns on allow_rollup_hdrs for a schedules stream.
    out = {"config": [cfg.allow_msg_schedules, cfg.allow_rollup_hdrs, cfg.allow_msg_ttl]}
    target = await stream.create_consumer(name="target", durable_name="target",
                                          filter_subject="sch.target", ack_policy="explicit")
    now = datetime.now(timezone.utc).timestamp()
    at = datetime.fromtimestamp(int(now) + 2, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    ack = await js.publish("sch.one", b"payload", timeout=DEADLINE, headers={
        H.NATS_SCHEDULE: "@at " + at, H.NATS_SCHEDULE_TARGET: "sch.target", "Extra": "kept"})
    out["ack"] = [ack.stream, ack.sequence]
    sched = await js.get_message("SCHED", 1)
    # Stored as published, plus the Nats-Rollup: sub the server adds.
    sh = sched.headers.asdict()
    out["schedule_stored"] = [sched.subject, text(sched.data), sorted(sh), sh["Nats-Rollup"],
                              sh[H.NATS_SCHEDULE_TARGET], sh[H.NATS_SCHEDULE] == ["@at " + at]]
    # Fires about two seconds later: the new message is on the target subject,
    # with the user headers and the scheduler's own, and no schedule headers.
    m = await target.next(max_wait=DEADLINE)
    out["fired"] = consumed(m) + [hdrs(m.headers)]
    await m.double_ack(timeout=DEADLINE)
    # A one-shot schedule is gone once it has fired ("Nats-Schedule-Next: purge").
    info = await js.get_stream_info("SCHED")
    out["after_fire"] = [info.state.messages, info.state.first_sequence, info.state.last_sequence]
    errors = {}
    for label, headers in [
            ("bad_pattern", {H.NATS_SCHEDULE: "@at nonsense", H.NATS_SCHEDULE_TARGET: "sch.t2"}),
            ("target_is_self", {H.NATS_SCHEDULE: "@at " + at, H.NATS_SCHEDULE_TARGET: "sch.two"}),
            ("no_target", {H.NATS_SCHEDULE: "@at " + at}),
            ("bad_ttl", {H.NATS_SCHEDULE: "@at " + at, H.NATS_SCHEDULE_TARGET: "sch.t2",
                         H.NATS_SCHEDULE_TTL: "soon"})]:
        try:
            a = await js.publish("sch.two", b"x", headers=headers, timeout=DEADLINE)
            errors[label] = ["ack", a.sequence]
        except JetStreamError as e:
            errors[label] = js_error(e)
    await js.create_stream(name="NOSCHED", subjects=["nosched.>"])
    try:
        await js.publish("nosched.one", b"x", timeout=DEADLINE, headers={
            H.NATS_SCHEDULE: "@at " + at, H.NATS_SCHEDULE_TARGET: "nosched.target"})
        errors["schedules_disabled"] = None
    except JetStreamError as e:
        errors["schedules_disabled"] = js_error(e)
    out["errors"] = errors
    await js.delete_stream("NOSCHED")
    await js.delete_stream("SCHED")
    await nc.close()
    return out


@scenario
async def js_atomic_batch(args):
    """ADR-50 atomic batch publish: Nats-Batch-Id/-Sequence/-Commit headers."""
    nc = await connect(args)
    js = nats.jetstream.new(nc, strict=args.strict)
    stream = await js.create_stream(name="ATOMIC", subjects=["atom.>"], allow_atomic=True)
    out = {"config": stream.info.config.allow_atomic}

    def batch(bid, seq, commit=None):
        h = {H.NATS_BATCH_ID: bid, H.NATS_BATCH_SEQUENCE: str(seq)}
        if commit is not None:
            h[H.NATS_BATCH_COMMIT] = commit
        return h
    # Message 1 without a reply; message 2 as a request (the server answers a
    # batch member that is not the commit with an empty message: flow control);
    # message 3 commits, and its ack is the batch's.
    await nc.publish("atom.a", b"one", headers=batch("b1", 1))
    middle = await nc.request("atom.a", b"two", headers=batch("b1", 2), timeout=DEADLINE)
    out["middle_reply"] = [text(middle.data), hdrs(middle.headers)]
    ack = await js.publish("atom.b", b"three", headers=batch("b1", 3, H.NATS_BATCH_COMMIT_FINAL),
                           timeout=DEADLINE)
    out["commit_ack"] = [ack.stream, ack.sequence, ack.batch_id, ack.batch_size, ack.duplicate,
                         ack.value]
    out["stored"] = [stored(await js.get_message("ATOMIC", seq)) for seq in (1, 2, 3)]
    # "eob": commits without storing the commit message itself.
    await nc.publish("atom.a", b"four", headers=batch("b2", 1))
    eob = await js.publish("atom.a", b"", headers=batch("b2", 2, H.NATS_BATCH_COMMIT_EOB),
                           timeout=DEADLINE)
    out["eob_ack"] = [eob.stream, eob.sequence, eob.batch_id, eob.batch_size]
    errors = {}
    # A gap: sequence 2 never sent, the commit fails and nothing of b3 is stored.
    await nc.publish("atom.a", b"x", headers=batch("b3", 1))
    for label, headers in [("gap", batch("b3", 3, "1")),
                           ("no_start", batch("b4", 2, "1")),
                           ("bad_commit", batch("b5", 1, "yes"))]:
        try:
            a = await js.publish("atom.b", b"x", headers=headers, timeout=DEADLINE)
            errors[label] = ["ack", a.sequence, a.batch_size]
        except JetStreamError as e:
            errors[label] = js_error(e)
    await js.create_stream(name="NOTATOMIC", subjects=["notatom.>"])
    try:
        await js.publish("notatom.a", b"x", headers=batch("b6", 1, "1"), timeout=DEADLINE)
        errors["atomic_disabled"] = None
    except JetStreamError as e:
        errors["atomic_disabled"] = js_error(e)
    out["errors"] = errors
    info = await js.get_stream_info("ATOMIC")
    out["state"] = [info.state.messages, info.state.first_sequence, info.state.last_sequence]
    await js.delete_stream("NOTATOMIC")
    await js.delete_stream("ATOMIC")
    await nc.close()
    return out


@scenario
async def js_first_seq(args):
    """first_seq on create: the stream's sequences start there."""
    nc = await connect(args)
    js = nats.jetstream.new(nc, strict=args.strict)
    stream = await js.create_stream(name="FIRST", subjects=["first.>"], first_seq=100)
    st = stream.info.state
    out = {"created": [stream.info.config.first_seq, st.messages, st.first_sequence,
                       st.last_sequence]}
    acks = [(await js.publish("first.a", b"%d" % i, timeout=DEADLINE)).sequence for i in range(3)]
    out["acks"] = acks
    out["get"] = stored(await js.get_message("FIRST", 101))
    try:
        await js.get_message("FIRST", 99)
        out["below_first"] = None
    except JetStreamError as e:
        out["below_first"] = js_error(e)
    await stream.purge()
    after = await js.publish("first.a", b"after purge", timeout=DEADLINE)
    info = await js.get_stream_info("FIRST")
    out["after_purge"] = [after.sequence, info.state.messages, info.state.first_sequence,
                          info.state.last_sequence, info.config.first_seq]
    await js.delete_stream("FIRST")
    await nc.close()
    return out


@scenario
async def js_direct_get(args):
    """allow_direct: Stream.get_message goes through $JS.API.DIRECT.GET; a
    missing message is the client's MessageNotFoundError either way."""
    nc = await connect(args)
    js = nats.jetstream.new(nc, strict=args.strict)
    stream = await js.create_stream(name="DIRECT", subjects=["dg.>"], allow_direct=True)
    out = {"allow_direct": stream.info.config.allow_direct}
    await js.publish("dg.a", b"a1", headers={"K": "v1"}, timeout=DEADLINE)
    await js.publish("dg.b", b"b1", timeout=DEADLINE)
    await js.publish("dg.a", b"a2", headers={"K": ["x", "y"]}, timeout=DEADLINE)
    out["direct_seq"] = stored(await stream.get_message(1))
    out["direct_seq_no_headers"] = stored(await stream.get_message(2))
    out["direct_last"] = stored(await stream.get_last_message_for_subject("dg.a"))
    out["api_seq"] = stored(await js.get_message("DIRECT", 3))  # STREAM.MSG.GET, same message
    missing = {}
    for label, call in [("direct_seq", lambda: stream.get_message(9)),
                        ("direct_subject", lambda: stream.get_last_message_for_subject("dg.zz")),
                        ("api_seq", lambda: js.get_message("DIRECT", 9)),
                        ("api_subject",
                         lambda: js.get_last_message_for_subject("DIRECT", "dg.zz"))]:
        try:
            await call()
            missing[label] = None
        except JetStreamError as e:
            missing[label] = js_error(e)
    out["missing"] = missing
    # The raw DIRECT.GET reply: the message with its Nats-* headers, or a 404 status.
    r = await nc.request("$JS.API.DIRECT.GET.DIRECT", b'{"seq": 1}', timeout=DEADLINE)
    out["raw_headers"] = sorted(r.headers.asdict())
    r = await nc.request("$JS.API.DIRECT.GET.DIRECT", b'{"seq": 9}', timeout=DEADLINE,
                         return_on_error=True)
    out["raw_missing"] = msg_view(r) | {"subject": None}
    await js.delete_stream("DIRECT")
    await nc.close()
    return out


@scenario
async def js_pause_resume(args):
    """Stream.pause_consumer / resume_consumer, and the paused state in CONSUMER.INFO."""
    nc = await connect(args)
    js = nats.jetstream.new(nc, strict=args.strict)
    stream = await js.create_stream(name="PAUSE", subjects=["pause.>"])
    for i in range(3):
        await js.publish("pause.a", b"p%d" % i, timeout=DEADLINE)
    consumer = await stream.create_consumer(name="worker", durable_name="worker",
                                            ack_policy="explicit")
    out = {"initial": [consumer.info.paused, consumer.info.pause_remaining,
                       consumer.info.config.pause_until]}
    until = time.time() + 600
    out["pause_returns"] = await stream.pause_consumer("worker", until)
    ci = await js.get_consumer_info("PAUSE", "worker")
    sent = datetime.fromtimestamp(until, tz=timezone.utc)
    out["paused_info"] = [ci.paused, 590 < ci.pause_remaining.total_seconds() <= 600,
                          ci.config.pause_until == sent, ci.num_pending]
    # Paused: a pull gets nothing and ends at its expiry (408), no error.
    batch = await consumer.fetch(max_messages=1, max_wait=1.0)
    out["fetch_while_paused"] = [[text(m.data) async for m in batch],
                                 repr(batch.error) if batch.error else None]
    out["resume_returns"] = await stream.resume_consumer("worker")
    ci = await js.get_consumer_info("PAUSE", "worker")
    out["resumed_info"] = [ci.paused, ci.pause_remaining, ci.config.pause_until]
    m = await consumer.next(max_wait=DEADLINE)
    out["after_resume"] = consumed(m)
    await m.double_ack(timeout=DEADLINE)
    # The raw PAUSE replies (the client does not parse them).
    paused = await raw_api(nc, "$JS.API.CONSUMER.PAUSE.PAUSE.worker",
                           {"pause_until": "2099-01-02T03:04:05Z"})
    out["raw_pause"] = [sorted(paused), paused["paused"], paused["pause_until"]]
    resumed = await raw_api(nc, "$JS.API.CONSUMER.PAUSE.PAUSE.worker")
    out["raw_resume"] = resumed
    # A pause time in the past resumes too.
    past = await raw_api(nc, "$JS.API.CONSUMER.PAUSE.PAUSE.worker",
                         {"pause_until": "2001-01-01T00:00:00Z"})
    out["raw_past"] = past
    try:
        await stream.pause_consumer("nobody", until)
        out["not_found"] = None
    except JetStreamError as e:
        out["not_found"] = js_error(e)
    # Created paused: pause_until in the consumer config.
    created = await stream.create_consumer(name="later", durable_name="later",
                                           ack_policy="explicit",
                                           pause_until=datetime(2099, 1, 1, tzinfo=timezone.utc))
    out["created_paused"] = [created.info.paused, created.info.config.pause_until.isoformat(),
                             created.info.pause_remaining is not None]
    await js.delete_stream("PAUSE")
    await nc.close()
    return out


@scenario
async def js_fetch_heartbeat(args):
    """A pull with idle_heartbeat that expires with nothing to deliver."""
    nc = await connect(args)
    js = nats.jetstream.new(nc, strict=args.strict)
    stream = await js.create_stream(name="HB", subjects=["hb.>"])
    await js.publish("hb.a", b"only", timeout=DEADLINE)
    consumer = await stream.create_consumer(name="idle", durable_name="idle",
                                            ack_policy="explicit")
    out = {}
    # One message, then heartbeats until the expiry: the client returns what came.
    batch = await consumer.fetch(max_messages=3, max_wait=1.5, heartbeat=0.5)
    got = []
    async for m in batch:
        got.append(consumed(m))
        await m.double_ack(timeout=DEADLINE)
    out["partial"] = [got, repr(batch.error) if batch.error else None]
    # Nothing at all: heartbeats (status 100) then 408 at the expiry, which the
    # client treats as the end of an empty batch, not an error.
    batch = await consumer.fetch(max_messages=1, max_wait=2.0, heartbeat=0.5)
    out["empty"] = [[text(m.data) async for m in batch], repr(batch.error) if batch.error else None]
    try:
        await consumer.next(max_wait=1.0, heartbeat=0.25)
        out["next"] = None
    except TimeoutError as e:
        out["next"] = [type(e).__name__, str(e)]
    # A heartbeat over half the expiry: 400, the batch's error.
    batch = await consumer.fetch(max_messages=1, max_wait=2.0, heartbeat=1.5)
    out["too_large"] = [[text(m.data) async for m in batch],
                        repr(batch.error) if batch.error else None]
    # What is on the wire (the client hides the status messages).
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish("$JS.API.CONSUMER.MSG.NEXT.HB.idle",
                     b'{"batch": 1, "expires": 2000000000, "idle_heartbeat": 500000000}',
                     reply=inbox)
    statuses = []
    while True:
        m = await sub.next(DEADLINE)
        statuses.append([m.status.code, m.status.description, hdrs(m.headers), text(m.data)])
        if m.status.code != "100":
            break
    await sub.unsubscribe()
    out["wire"] = {"heartbeats": len(statuses) > 1,
                   "heartbeat": statuses[0],
                   "all_heartbeats_same": all(s == statuses[0] for s in statuses[:-1]),
                   "end": statuses[-1]}
    ci = await js.get_consumer_info("HB", "idle")
    out["info"] = [ci.num_waiting, ci.num_pending, ci.num_ack_pending,
                   ci.delivered.get("stream_seq")]
    await js.delete_stream("HB")
    await nc.close()
    return out


@scenario
async def js_ordered(args):
    """Ordered consumers: messages() over a whole stream, and next() resuming."""
    nc = await connect(args)
    js = nats.jetstream.new(nc, strict=args.strict)
    stream = await js.create_stream(name="ORDERED", subjects=["o.>"], storage="memory")
    for i in range(6):
        await js.publish("o.%s" % "ab"[i % 2], b"m%d" % i, timeout=DEADLINE)
    out = {}
    oc = await stream.ordered_consumer(name_prefix="reader")
    cfg = oc.info.config
    out["config"] = [oc.name, cfg.ack_policy, cfg.deliver_policy, cfg.mem_storage,
                     cfg.num_replicas, cfg.inactive_threshold.total_seconds(), cfg.max_deliver,
                     cfg.durable_name, cfg.filter_subject]
    ms = await oc.messages(max_messages=4, max_wait=DEADLINE)
    got = []
    async for m in ms:
        # (num_pending of the two published while it runs depends on timing)
        got.append(consumed(m) if len(got) < 6 else consumed(m)[:-1])
        if len(got) == 6:
            # More while it is running: the pull loop picks them up.
            for i in range(6, 8):
                await js.publish("o.c", b"m%d" % i, timeout=DEADLINE)
        if len(got) == 8:
            break
    await ms.stop()
    out["messages"] = got
    await oc.close()
    # next() on an ordered consumer: each call after the first makes a new
    # server-side consumer starting after the last stream sequence it saw.
    oc2 = await stream.ordered_consumer(name_prefix="nx", filter_subjects=["o.b"],
                                        deliver_policy="by_start_sequence", opt_start_seq=3)
    nexts = []
    for _ in range(2):
        m = await oc2.next(max_wait=DEADLINE)
        c = oc2.info.config
        nexts.append([oc2.name, c.deliver_policy, c.opt_start_seq, c.filter_subject]
                     + consumed(m))
    out["next"] = nexts
    await oc2.close()
    try:
        await oc2.next(max_wait=1.0)
        out["after_close"] = None
    except JetStreamError as e:
        out["after_close"] = [type(e).__name__, str(e)]
    out["consumers_left"] = [n async for n in js.consumer_names("ORDERED")]
    await js.delete_stream("ORDERED")
    await nc.close()
    return out


# --- JetStream: consumer reset and priority groups (ADR-60, ADR-42) ----------

@scenario
async def js_reset_consumer(args):
    """Stream.reset_consumer / Consumer.reset: the ConsumerReset and what comes next."""
    nc = await connect(args)
    js = nats.jetstream.new(nc, strict=args.strict)
    stream = await js.create_stream(name="RESET", subjects=["reset.>"])
    for i in range(6):
        await js.publish("reset.a", b"m%d" % i, timeout=DEADLINE)
    consumer = await stream.create_consumer(name="r", durable_name="r", ack_policy="explicit")
    batch = await consumer.fetch(max_messages=3, max_wait=DEADLINE)
    msgs = [m async for m in batch]
    out = {"fetched": [consumed(m) for m in msgs]}
    await msgs[0].double_ack(timeout=DEADLINE)  # ack floor 1; 2 and 3 stay pending

    def view(res):
        i = res.info
        seqs = ("consumer_seq", "stream_seq")
        return {"reset_seq": res.reset_seq, "name": i.name, "stream": i.stream_name,
                "delivered": {k: i.delivered.get(k) for k in seqs},
                "ack_floor": {k: i.ack_floor.get(k) for k in seqs},
                "num_ack_pending": i.num_ack_pending, "num_pending": i.num_pending,
                "num_redelivered": i.num_redelivered, "num_waiting": i.num_waiting}
    # No sequence: back to one above the ack floor, pending acks forgotten.
    out["reset"] = view(await stream.reset_consumer("r"))
    m = await consumer.next(max_wait=DEADLINE)
    out["after_reset"] = consumed(m)
    # To a sequence, through the consumer's own reset().
    out["reset_to_5"] = view(await consumer.reset(5))
    m = await consumer.next(max_wait=DEADLINE)
    out["after_reset_to_5"] = consumed(m)
    await m.double_ack(timeout=DEADLINE)
    out["reset_zero"] = view(await stream.reset_consumer("r", 0))
    # by_start_sequence: not below its start.
    await stream.create_consumer(name="s", durable_name="s", ack_policy="explicit",
                                 deliver_policy="by_start_sequence", opt_start_seq=3)
    try:
        await stream.reset_consumer("s", 2)
        out["below_start"] = None
    except JetStreamError as e:
        out["below_start"] = js_error(e)
    out["past_end"] = view(await stream.reset_consumer("s", 100))
    await js.delete_stream("RESET")
    await nc.close()
    return out


@scenario
async def js_priority_groups(args):
    """Pull consumers with priority groups: "overflow" with min_pending, and
    "pinned_client" (the client cannot send a pin id: raw pulls for that)."""
    nc = await connect(args)
    js = nats.jetstream.new(nc, strict=args.strict)
    stream = await js.create_stream(name="PRIO", subjects=["prio.>"])
    for i in range(6):
        await js.publish("prio.a", b"m%d" % i, timeout=DEADLINE)
    out = {}
    over = await stream.create_consumer(name="over", durable_name="over", ack_policy="explicit",
                                        priority_groups=["A"], priority_policy="overflow")
    out["overflow_info"] = [over.info.config.priority_groups, over.info.config.priority_policy,
                            over.info.config.priority_timeout, over.info.priority_groups]

    async def fetch(consumer, **kw):
        batch = await consumer.fetch(max_messages=kw.pop("n", 1), max_wait=kw.pop("wait", 1.0),
                                     **kw)
        got = [consumed(m) + [hdrs(m.headers)] async for m in batch]
        return [got, repr(batch.error) if batch.error else None]
    out["overflow"] = {
        "no_group": await fetch(over),
        "unknown_group": await fetch(over, priority_group="B"),
        # 6 pending: min_pending 7 waits out its expiry, 6 is served.
        "min_pending_unmet": await fetch(over, priority_group="A", min_pending=7),
        "min_pending_met": await fetch(over, priority_group="A", min_pending=6),
        # 1 unacked now: min_ack_pending 2 waits, 1 is served.
        "min_ack_pending_unmet": await fetch(over, priority_group="A", min_ack_pending=2),
        "min_ack_pending_met": await fetch(over, priority_group="A", min_ack_pending=1, n=2),
    }
    ci = await js.get_consumer_info("PRIO", "over")
    out["overflow_after"] = [ci.num_ack_pending, ci.num_pending, ci.priority_groups]

    pinned = await stream.create_consumer(name="pin", durable_name="pin", ack_policy="explicit",
                                          priority_groups=["A"], priority_policy="pinned_client",
                                          priority_timeout=30_000_000_000)
    out["pinned_info"] = [pinned.info.config.priority_policy, pinned.info.config.priority_timeout,
                          pinned.info.priority_groups]
    first = await pinned.fetch(max_messages=1, max_wait=DEADLINE, priority_group="A")
    m = [m async for m in first][0]
    pin = m.headers.get("Nats-Pin-Id")
    ci = await js.get_consumer_info("PRIO", "pin")
    group = ci.priority_groups[0]
    out["pinned"] = {
        "first": consumed(m),
        "pin_id": [bool(re.fullmatch(r"[A-Za-z0-9]{22}", pin)), sorted(m.headers.asdict())],
        "info_group": [group["group"], group.get("pinned_client_id") == pin, sorted(group)],
        # The client sends no pin id: its next pull waits for the expiry.
        "client_fetch_again": await fetch(pinned, priority_group="A"),
        "raw_wrong_id": await raw_pull(nc, "PRIO", "pin", {"batch": 1, "expires": 1_000_000_000,
                                                           "group": "A", "id": "bogus"}),
    }
    right = await raw_pull(nc, "PRIO", "pin", {"batch": 1, "expires": 1_000_000_000,
                                                "group": "A", "id": pin})
    out["pinned"]["raw_right_id"] = [right[0][0], right[0][1],
                                     right[0][2] == {"Nats-Pin-Id": [pin]}]
    # Unpin (no client helper): the next pull with the old id is told so, and a
    # pull without one gets a new pin.
    out["pinned"]["unpin"] = await raw_api(nc, "$JS.API.CONSUMER.UNPIN.PRIO.pin", {"group": "A"})
    out["pinned"]["unpin_unknown"] = await raw_api(nc, "$JS.API.CONSUMER.UNPIN.PRIO.pin",
                                                   {"group": "Z"})
    ci = await js.get_consumer_info("PRIO", "pin")
    out["pinned"]["after_unpin"] = ci.priority_groups
    out["pinned"]["raw_old_id"] = await raw_pull(
        nc, "PRIO", "pin", {"batch": 1, "expires": 1_000_000_000, "group": "A", "id": pin})
    batch = await pinned.fetch(max_messages=1, max_wait=DEADLINE, priority_group="A")
    m = [m async for m in batch][0]
    new_pin = m.headers.get("Nats-Pin-Id")
    out["pinned"]["repinned"] = [consumed(m), new_pin != pin,
                                 bool(re.fullmatch(r"[A-Za-z0-9]{22}", new_pin))]
    await js.delete_stream("PRIO")
    await nc.close()
    return out


@scenario
async def nkey_auth(args):
    """Nkey users (test_nkeys.py): the server has the public key of the seed in
    NATSBROKER_NKEY_SEED (publish/subscribe "ok.>" only); the seed in
    NATSBROKER_NKEY_UNKNOWN is not a user; NATSBROKER_NKEY_SEED_FILE holds the
    first seed."""
    import base64
    import os
    from pathlib import Path

    import nkeys

    seed = os.environ["NATSBROKER_NKEY_SEED"]
    kp = nkeys.from_seed(bytearray(seed.encode()))
    out = {}

    async def round_trip(nc):
        sub = await nc.subscribe("ok.x")
        await nc.publish("ok.x", b"hi")
        await nc.flush(timeout=DEADLINE)
        return text((await sub.next(DEADLINE)).data)

    def url_safe(nonce):
        # base64url without padding: what nats-server itself would send.
        return base64.urlsafe_b64encode(kp.sign(nonce.encode())).rstrip(b"=")

    ways = {
        "seed": seed,
        "seed_file": Path(os.environ["NATSBROKER_NKEY_SEED_FILE"]),
        "handlers_raw_url": (lambda: kp.public_key.decode(), url_safe),
    }
    for label, nkey in ways.items():
        nc = await connect(args, nkey=nkey)
        nonce = nc.server_info.nonce
        out[label] = [await round_trip(nc), isinstance(nonce, str) and len(nonce) == 15,
                      nc.server_info.auth_required]
        await nc.close()
    bad = {
        "unknown_seed": os.environ["NATSBROKER_NKEY_UNKNOWN"],
        "bad_signature": (lambda: kp.public_key.decode(), lambda nonce: b"AAAA"),
        "not_base64": (lambda: kp.public_key.decode(), lambda nonce: b"!!"),
    }
    for label, nkey in bad.items():
        try:
            c = await connect(args, nkey=nkey)
            await c.close()
            out[label] = None
        except ConnectionError as e:
            out[label] = [type(e).__name__, str(e)]
    return out


# --- accounts, imports/exports, permissions, operator mode -------------------
#
# For tests/test_nats_core_accounts.py, which starts both servers with the same
# config file: accounts A (alice, amy, worker, mute) and B (bob, the
# no_auth_user) with the same subjects in use, services and a stream exported
# by A and imported by B, JetStream limits per account, C without JetStream.

INBOX_ID = re.compile(r"(?<=_INBOX\.)[0-9a-f]{32}(?=\.)")


def no_inbox(text_):
    """An error or subject with the client's random inbox token left out."""
    return INBOX_ID.sub("<id>", text_) if isinstance(text_, str) else text_


async def as_user(args, user, password):
    return await connect(args, user=user, password=password)


async def flush_all(*ncs):
    for nc in ncs:
        await nc.flush(timeout=DEADLINE)


async def until_end(sub):
    """Messages of ``sub`` up to the one whose payload is ``end`` (left out)."""
    got = []
    while True:
        m = await sub.next(DEADLINE)
        if m.data == b"end":
            return got
        got.append([m.subject, text(m.data)])


def reply_kind(reply):
    """What a responder sees as the reply subject, without its random part."""
    if reply is None:
        return None
    for prefix in ("_R_.", "_INBOX."):
        if reply.startswith(prefix):
            return prefix + "*"
    return reply


def request_info(h):
    """A request's headers as a service importer's responder sees them, with
    the rtt (a time) in Nats-Request-Info replaced by its type."""
    h = hdrs(h)
    if h and "Nats-Request-Info" in h:
        infos = []
        for v in h["Nats-Request-Info"]:
            info = json.loads(v)
            if "rtt" in info:
                info["rtt"] = type(info["rtt"]).__name__
            infos.append(info)
        h["Nats-Request-Info"] = infos
    return h


async def try_request(nc, subject, payload=b"", timeout=DEADLINE, **kw):
    """A request's answer, or the error it raised, as JSON."""
    quiet = logging.getLogger("nats.client")
    quiet.disabled = True  # the client logs a timeout with a traceback
    try:
        m = await nc.request(subject, payload, timeout=timeout, **kw)
        return ["reply", text(m.data), hdrs(m.headers)]
    except StatusError as e:
        return [type(e).__name__, e.status, e.description, e.subject]
    except TimeoutError as e:
        return [type(e).__name__, str(e)]
    finally:
        quiet.disabled = False


@scenario
async def accounts(args):
    """Two accounts using the same subjects, a service and a stream from A to B."""
    out = {}
    alice = await as_user(args, "alice", "pa")
    amy = await as_user(args, "amy", "pa")
    bob = await as_user(args, "bob", "pb")
    anon = await connect(args)  # no credentials: the no_auth_user bob, account B
    everyone = (alice, amy, bob, anon)

    # Isolation: the same subjects in A and B, wildcard subscribers in both.
    subs = {"alice_all": await alice.subscribe(">"), "amy_iso": await amy.subscribe("iso.*"),
            "bob_all": await bob.subscribe(">"), "anon_iso": await anon.subscribe("iso.*"),
            "bob_star": await bob.subscribe("*.*")}
    await flush_all(*everyone)
    for nc, subject, data in ((alice, "iso.1", b"from-alice"), (bob, "iso.1", b"from-bob"),
                              (anon, "iso.2", b"from-anon"), (amy, "iso.2", b"from-amy"),
                              (amy, "iso.x.y", b"deep-amy"), (anon, "iso.x.y", b"deep-anon")):
        await nc.publish(subject, data)
        await nc.flush(timeout=DEADLINE)  # one order for all, whichever connection sent it
    await alice.publish("iso.end", b"end")
    await bob.publish("iso.end", b"end")
    await flush_all(alice, bob)
    out["isolation"] = {k: await until_end(s) for k, s in subs.items()}
    await flush_all(*everyone)
    out["pending_after_end"] = [s.pending[0] for s in subs.values()]
    for s in subs.values():
        await s.unsubscribe()
    # A subscriber in A is no responder for a request in B (not exported).
    await alice.subscribe("private.svc")
    await alice.flush(timeout=DEADLINE)
    out["private_from_b"] = await try_request(bob, "private.svc", b"x")

    # A service exported by A, imported by B under other names ("to").
    seen = []
    svc = await alice.subscribe("svc.>")
    await alice.flush(timeout=DEADLINE)

    async def serve():
        async for m in svc:
            seen.append([m.subject, text(m.data), reply_kind(m.reply), request_info(m.headers)])
            await alice.publish(m.reply, b"re:" + m.data, headers={"From": m.subject})
    task = asyncio.create_task(serve())
    requests = [
        ("b_echo", bob, "echo", {}),
        ("b_echo_headers", bob, "echo", {"headers": {"Ask": ["1", "2"]}}),
        ("anon_echo", anon, "echo", {}),
        ("b_calc", bob, "calc.add", {}),
        ("a_local", alice, "svc.echo", {}),
        ("b_exporter_name", bob, "svc.echo", {}),  # only "echo" is imported
        ("b_calc_too_deep", bob, "calc.add.x", {}),
        ("b_idle", bob, "idle.q", {}),  # imported, nobody subscribed in A
        ("b_not_imported", bob, "idle.other", {}),
    ]
    replies = {}
    for label, nc, subject, kw in requests:
        replies[label] = await try_request(nc, subject, b"q-" + label.encode(), **kw)
    out["requests"] = replies
    out["responder_saw"] = seen
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)

    # A stream exported by A, imported by B with the prefix "a".
    feed = {"b_prefixed": await bob.subscribe("a.feed.>"), "b_plain": await bob.subscribe("feed.>"),
            "b_all": await bob.subscribe(">"), "anon_prefixed": await anon.subscribe("a.>"),
            "a_feed": await amy.subscribe("feed.>")}
    await flush_all(*everyone)
    await alice.publish("feed.x", b"f1")
    await alice.publish("feed.y.z", b"f2", headers={"H": "v"})
    await alice.publish("nofeed", b"not exported")
    await alice.publish("feed.r", b"f3", reply="feed.reply")
    await alice.flush(timeout=DEADLINE)
    await bob.publish("feed.local", b"b-local")  # B's own feed.local, not A's
    await bob.flush(timeout=DEADLINE)
    await alice.publish("feed.end", b"end")
    await alice.flush(timeout=DEADLINE)
    await bob.publish("a.feed.end", b"end")  # ends the subscribers of B's own a.feed.>
    await bob.publish("feed.end", b"end")
    await flush_all(alice, bob)
    got = {}
    for k, s in feed.items():
        msgs = []
        ends = 2 if k in ("b_all", "b_prefixed", "anon_prefixed") else 1
        while ends:
            m = await s.next(DEADLINE)
            if m.data == b"end":
                ends -= 1
                msgs.append(["end", m.subject])
                continue
            msgs.append([m.subject, text(m.data), m.reply, hdrs(m.headers)])
        got[k] = msgs
    out["stream_import"] = got
    for nc in everyone:
        await nc.close()
    # A wrong password is refused, not taken for the no_auth_user.
    try:
        c = await as_user(args, "bob", "wrong")
        await c.close()
        out["wrong_password"] = None
    except ConnectionError as e:
        out["wrong_password"] = [type(e).__name__, str(e)]
    return out


@scenario
async def account_permissions(args):
    """worker (account A): publish allow work.>, svc.> deny work.secret;
    subscribe allow work.>, svc.>, _INBOX.> deny work.hidden, svc.admin;
    allow_responses. mute: publish and subscribe mute.> only."""
    out = {}
    alice = await as_user(args, "alice", "pa")
    worker = await as_user(args, "worker", "pw")
    errors = []
    worker.add_error_callback(lambda e: errors.append(no_inbox(e)))
    log = logging.getLogger("nats.client")
    log.disabled = True  # the client logs every -ERR

    async def step(label, coro):
        """Run one client call, then a round trip: the -ERRs it caused."""
        mark = len(errors)
        try:
            await coro
            result = "ok"
        except Exception as e:  # noqa: BLE001 - whatever the client raises is compared
            result = [type(e).__name__, no_inbox(str(e))]
        await worker.flush(timeout=DEADLINE)
        out.setdefault("steps", {})[label] = [result, errors[mark:], worker.status.value]

    subs = {}

    async def sub(label, subject, **kw):
        subs[label] = await worker.subscribe(subject, **kw)

    await step("sub_denied", sub("denied", "work.hidden"))
    await step("sub_not_allowed", sub("not_allowed", "other.x"))
    await step("sub_queue_denied", sub("queue_denied", "svc.admin", queue="q"))
    await step("sub_wildcard", sub("wildcard", "work.>"))
    await step("sub_allowed", sub("allowed", "work.ok"))
    await step("pub_denied", worker.publish("work.secret", b"s"))
    await step("pub_not_allowed", worker.publish("other.x", b"o"))
    await step("pub_allowed", worker.publish("work.ok", b"mine"))
    await step("pub_any_reply", worker.publish("work.ok", b"r", reply="anywhere"))
    # What alice publishes: the denied subscription got nothing, the
    # wildcard one nothing on the denied subject (nats-server filters it).
    for subject in ("work.hidden", "other.x", "svc.admin", "work.ok", "work.end"):
        await alice.publish(subject, b"from-alice")
    await alice.flush(timeout=DEADLINE)
    await worker.flush(timeout=DEADLINE)
    got = {}
    for label in ("wildcard", "allowed"):
        msgs = []
        while True:
            m = await subs[label].next(DEADLINE)
            msgs.append([m.subject, text(m.data)])
            if m.subject == "work.end" or (label == "allowed" and m.data == b"from-alice"):
                break
        got[label] = msgs
    await worker.flush(timeout=DEADLINE)
    got["pending"] = {k: s.pending[0] for k, s in sorted(subs.items())}
    out["delivered"] = got

    # allow_responses: worker answers alice's requests on her inbox, which
    # its publish permissions do not name; one answer per request.
    svc = await worker.subscribe("svc.echo")
    await worker.flush(timeout=DEADLINE)
    mark = len(errors)

    async def serve():
        async for m in svc:
            await worker.publish(m.reply, b"re:" + m.data)
            await worker.publish(m.reply, b"again:" + m.data)  # over the one allowed
            await worker.flush(timeout=DEADLINE)
    task = asyncio.create_task(serve())
    out["responses"] = [await try_request(alice, "svc.echo", b"%d" % i) for i in range(2)]
    await worker.flush(timeout=DEADLINE)
    out["response_errors"] = errors[mark:]
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    # worker's own requests: allowed, no responders, not allowed to publish.
    mark = len(errors)
    out["worker_requests"] = {
        "no_responders": await try_request(worker, "svc.nobody"),
        "not_allowed": await try_request(worker, "other.svc", timeout=1.0),
    }
    await worker.flush(timeout=DEADLINE)
    out["worker_request_errors"] = errors[mark:]
    out["worker_last_error"] = no_inbox(worker.last_error)
    out["worker_status"] = worker.status.value
    # Still usable after all that.
    await worker.publish("work.ok", b"still here")
    await worker.flush(timeout=DEADLINE)
    out["after"] = text((await subs["allowed"].next(DEADLINE)).data)

    # mute may not subscribe to the client's request inbox: the request is
    # refused on the subscription and never answered.
    mute = await as_user(args, "mute", "pm")
    mute_errors = []
    mute.add_error_callback(lambda e: mute_errors.append(no_inbox(e)))
    out["mute_request"] = await try_request(mute, "mute.svc", timeout=1.0)
    await mute.flush(timeout=DEADLINE)
    out["mute_errors"] = mute_errors
    out["mute_status"] = mute.status.value
    log.disabled = False
    for nc in (alice, worker, mute):
        await nc.close()
    return out


def account_view(ai):
    """nats-jetstream's AccountInfo. Not api.level: natsbroker announces
    nats-server 2.12's JetStream API level on purpose (natsbroker/jetstream/versions.py)."""
    lim = ai.limits
    return {"memory": ai.memory, "storage": ai.storage, "streams": ai.streams,
            "consumers": ai.consumers, "api": [ai.api.total, ai.api.errors],
            "domain": ai.domain, "tiers": ai.tiers,
            "reserved": [ai.reserved_memory, ai.reserved_storage],
            "limits": [lim.max_memory, lim.max_storage, lim.max_streams, lim.max_consumers,
                       lim.max_ack_pending, lim.memory_max_stream_bytes,
                       lim.storage_max_stream_bytes, lim.max_bytes_required]}


async def js_try(coro, view=lambda r: "ok"):
    try:
        return view(await coro)
    except JetStreamError as e:
        return js_error(e)


@scenario
async def accounts_js(args):
    """JetStream in A (max_streams 1, max_consumers 1, max_mem 4K, max_file
    8K) and B (max_streams 2, max_mem 1K, max_file 2K); C has none."""
    out = {}
    alice = await as_user(args, "alice", "pa")
    bob = await as_user(args, "bob", "pb")
    carl = await as_user(args, "carl", "pc")
    ja = nats.jetstream.new(alice, strict=args.strict)
    jb = nats.jetstream.new(bob, strict=args.strict)
    jc = nats.jetstream.new(carl, strict=args.strict)
    out["info_before"] = {"A": account_view(await ja.account_info()),
                          "B": account_view(await jb.account_info())}
    created = lambda s: [s.name, s.info.config.subjects, s.info.config.storage]  # noqa: E731
    # The same stream name and subjects in both accounts: two streams.
    out["create"] = {
        "A": await js_try(ja.create_stream(name="ORDERS", subjects=["orders.>"], storage="memory"),
                          created),
        "B": await js_try(jb.create_stream(name="ORDERS", subjects=["orders.>"], storage="memory"),
                          created),
    }
    ack = lambda a: [a.stream, a.sequence, a.duplicate]  # noqa: E731
    out["publish"] = {
        "A": [ack(await ja.publish("orders.new", b"a%d" % i, timeout=DEADLINE)) for i in range(2)],
        "B": [ack(await jb.publish("orders.new", b"b0", timeout=DEADLINE))],
    }
    state = lambda i: [i.state.messages, i.state.bytes, i.state.first_sequence,  # noqa: E731
                       i.state.last_sequence]
    out["state"] = {"A": state(await ja.get_stream_info("ORDERS")),
                    "B": state(await jb.get_stream_info("ORDERS"))}
    out["get"] = {"A": stored(await ja.get_message("ORDERS", 2)),
                  "B": await js_try(jb.get_message("ORDERS", 2), stored)}
    out["names"] = {"A": [n async for n in ja.stream_names()],
                    "B": [n async for n in jb.stream_names()]}
    # A's limits.
    out["A_limits"] = {
        "second_stream": await js_try(ja.create_stream(name="SECOND", subjects=["second"],
                                                       storage="memory")),
        "first_consumer": await js_try(ja.create_consumer("ORDERS", "c1", durable_name="c1"),
                                       lambda c: c.name),
        "second_consumer": await js_try(ja.create_consumer("ORDERS", "c2", durable_name="c2")),
        "stream_over_mem": await js_try(ja.update_stream(name="ORDERS", subjects=["orders.>"],
                                                         storage="memory", max_bytes=5000)),
    }
    fill = []
    for i in range(6):
        fill.append(await js_try(ja.publish("orders.big", b"x" * 1000, timeout=DEADLINE), ack))
    out["A_fill"] = fill
    # B's limits.
    out["B_limits"] = {
        "mem_over_account": await js_try(jb.create_stream(name="BIG", subjects=["big"],
                                                          storage="memory", max_bytes=5000)),
        "file_over_account": await js_try(jb.create_stream(name="F", subjects=["f"],
                                                           storage="file", max_bytes=4000)),
        "file_within": await js_try(jb.create_stream(name="F", subjects=["f"], storage="file",
                                                     max_bytes=1000), created),
        "third_stream": await js_try(jb.create_stream(name="THIRD", subjects=["third"],
                                                      storage="file", max_bytes=100)),
        "same_subjects_as_a": "n/a",
    }
    del out["B_limits"]["same_subjects_as_a"]
    # C: no JetStream for the account.
    out["C"] = {"info": await js_try(jc.account_info()),
                "create": await js_try(jc.create_stream(name="ORDERS", subjects=["orders.>"]))}
    out["info_after"] = {"A": account_view(await ja.account_info()),
                         "B": account_view(await jb.account_info())}
    out["delete"] = {"A": await ja.delete_stream("ORDERS"), "B": await jb.delete_stream("F")}
    out["names_after"] = {"A": [n async for n in ja.stream_names()],
                          "B": [n async for n in jb.stream_names()]}
    for nc in (alice, bob, carl):
        await nc.close()
    return out


@scenario
async def jwt_auth(args):
    """Operator mode, MEMORY resolver (test_nats_core_accounts.py): account A
    allows 2 connections, B 64-byte payloads. NATSBROKER_JWT_CASES is JSON:
    ``creds`` (a .creds file of A), ``jwt``/``seed`` (another user of A),
    ``b_creds`` (a user of B), ``perm`` ([jwt, seed] of A, publish ok.> but
    not ok.no, subscribe ok.> and _INBOX.>), ``other_seed`` (a stranger's
    seed) and ``bad`` (label: .creds file that must be refused)."""
    import base64
    import os
    from pathlib import Path

    import nkeys

    cases = json.loads(os.environ["NATSBROKER_JWT_CASES"])
    out = {}
    log = logging.getLogger("nats.client")
    a1 = await connect(args, jwt=Path(cases["creds"]))
    a2 = await connect(args, jwt=(cases["jwt"], cases["seed"]))
    b = await connect(args, jwt=Path(cases["b_creds"]))
    si = a1.server_info
    # (nats-core keeps the INFO that follows CONNECT: it has no nonce.)
    out["info"] = [si.auth_required, si.nonce, si.max_payload, b.server_info.max_payload]
    # A's two users share a subject space, B's user has its own.
    subs = {"a1": await a1.subscribe("greet.>"), "b": await b.subscribe(">")}
    await flush_all(a1, b)
    for nc, data in ((a2, b"from-a2"), (b, b"from-b"), (a1, b"from-a1")):
        await nc.publish("greet.x", data)
        await nc.flush(timeout=DEADLINE)
    await a2.publish("greet.end", b"end")
    await b.publish("greet.end", b"end")
    await flush_all(a2, b)
    out["isolation"] = {k: await until_end(s) for k, s in subs.items()}
    out["request_in_a"] = await try_request(a2, "nobody.here")
    # A third connection to A: over the account's limit.
    try:
        c = await connect(args, jwt=tuple(cases["perm"]))
        await c.close()
        out["third_in_a"] = None
    except ConnectionError as e:
        out["third_in_a"] = [type(e).__name__, str(e)]
    await a2.close()
    # The user JWT's permissions.
    perm = await connect(args, jwt=tuple(cases["perm"]))
    errors = []
    perm.add_error_callback(lambda e: errors.append(no_inbox(e)))
    log.disabled = True
    ok = await perm.subscribe("ok.>")
    await perm.subscribe("not.ok")
    await perm.publish("ok.no", b"denied")
    await perm.publish("ok.yes", b"allowed")
    await perm.publish("elsewhere", b"denied")
    await perm.flush(timeout=DEADLINE)
    out["perm"] = {"errors": list(errors), "got": [text((await ok.next(DEADLINE)).data)],
                   "status": perm.status.value}
    await ok.unsubscribe()
    out["perm"]["request"] = await try_request(perm, "ok.none")
    out["perm"]["request_not_allowed"] = await try_request(perm, "elsewhere", timeout=1.0)
    await perm.flush(timeout=DEADLINE)
    out["perm"]["errors_after"] = errors[3:]
    log.disabled = False
    await perm.close()
    # B: 64-byte payloads. The client keeps the max_payload of the first INFO.
    b_errors = []
    b.add_error_callback(b_errors.append)
    log.disabled = True
    await b.publish("big", b"x" * 65)  # its write task sends it; no flush (see below)
    # The server answers -ERR and hangs up; the client's read task ends then
    # (the client has no closed callback without reconnects). A PING of a
    # flush could meet the closed socket first: "Connection lost" or not.
    await asyncio.wait([b._read_task], timeout=DEADLINE)
    log.disabled = False
    out["b_after_big"] = [b_errors, b.status.value]
    await b.close()
    await a1.close()
    # Refused logins.
    kp = nkeys.from_seed(bytearray(cases["other_seed"].encode()))
    token = cases["jwt"]
    refused = {label: Path(path) for label, path in cases["bad"].items()}
    refused["wrong_nonce_signature"] = (  # the nonce signed by a stranger's key
        lambda: token.encode(),
        lambda nonce: base64.urlsafe_b64encode(kp.sign(nonce.encode())).rstrip(b"="))
    refused["seed_is_not_the_jwt_s"] = (token, cases["other_seed"])
    out["refused"] = {}
    for label, jwt in refused.items():
        try:
            c = await connect(args, jwt=jwt)
            await c.close()
            out["refused"][label] = None
        except ConnectionError as e:
            out["refused"][label] = [type(e).__name__, str(e)]
    # None of those took A's connection slots: two still fit.
    held = [await connect(args, jwt=(cases["jwt"], cases["seed"])) for _ in range(2)]
    out["after_refusals"] = [nc.status.value for nc in held]
    for nc in held:
        await nc.close()
    return out


@scenario
async def js_cluster(args):
    """An R3 stream through a three-node cluster: the
    create answered by the stream's first leader, acks after replication, a
    pull consumer, the cluster block of the stream info (names only: which
    server leads differs run to run)."""
    nc = await connect(args)
    js = nats.jetstream.new(nc, strict=args.strict)
    out = {}
    deadline = time.monotonic() + 4 * DEADLINE
    while True:  # until the meta group has a leader
        try:
            stream = await js.create_stream(name="R3", subjects=["r3.>"], num_replicas=3)
            break
        except (TimeoutError, asyncio.TimeoutError, StatusError, NoRespondersError) as e:
            last = e
        except JetStreamError as e:
            # 503: no meta leader yet; 10005: a peer not heard from yet (its
            # statsz), which placement needs.
            if e.code != 503 and getattr(e, "error_code", None) != 10005:
                raise
            last = e
        except Exception as e:  # (strict mode: a field the client does not know)
            out["create"] = {"error": type(e).__name__, "text": re.sub(r"\[.*\]", "[...]", str(e))}
            await nc.close()
            return out
        if time.monotonic() > deadline:
            raise last
        await asyncio.sleep(0.5)
    out["created"] = [stream.info.config.name, stream.info.config.num_replicas]
    acks = []
    for i in range(5):
        a = await js.publish("r3.%d" % i, b"m%d" % i, timeout=DEADLINE)
        acks.append([a.stream, a.sequence, a.duplicate])
    out["acks"] = acks
    try:
        info = await js.get_stream_info("R3")
        cl = info.cluster
        out["info"] = {"messages": info.state.messages, "cluster": cl.name,
                       "leader_known": bool(cl.leader), "raft_group": cl.raft_group[:5],
                       "replicas": len(cl.replicas or ()),
                       "members": sorted([r.name for r in cl.replicas or ()] + [cl.leader]),
                       "current": sorted(r.current for r in cl.replicas or ())}
    except Exception as e:  # (strict mode: a field the client does not know)
        out["info"] = {"error": type(e).__name__, "text": re.sub(r"\[.*\]", "[...]", str(e))}
    consumer = await stream.create_consumer(name="C", durable_name="C", ack_policy="explicit")
    batch = await consumer.fetch(max_messages=5, max_wait=DEADLINE)
    got = []
    async for m in batch:
        got.append([m.subject, text(m.data), m.metadata.sequence.stream])
        await m.double_ack(timeout=DEADLINE)
    out["fetched"] = got
    ci = await js.get_consumer_info("R3", "C")
    out["ack_floor"] = ci.ack_floor.get("stream_seq")
    out["delete"] = await js.delete_stream("R3")
    await nc.close()
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("scenario", choices=sorted(SCENARIOS))
    p.add_argument("url")
    p.add_argument("--user")
    p.add_argument("--password")
    p.add_argument("--strict", action="store_true",
                   help="nats.jetstream strict mode: unknown fields in API replies are errors")
    args = p.parse_args()
    result = asyncio.run(asyncio.wait_for(SCENARIOS[args.scenario](args), 4 * DEADLINE))
    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
