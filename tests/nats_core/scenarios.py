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

import nats.client
import nats.jetstream
from nats.client import ClientStatus
from nats.client.errors import NoRespondersError, StatusError
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
