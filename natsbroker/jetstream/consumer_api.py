"""The ``$JS.API.CONSUMER.*`` request handlers (same conventions as
:mod:`natsbroker.jetstream.api`: ``(js, args, body)`` in, response dict out or
ApiError raised; ``_after_commit`` delays the reply until the commit)."""

import attrs

from natsbroker import jsonbound
from natsbroker.gocompat import gojson, times as gotime
from natsbroker.jetstream import (
    api_models as AM,
    apilevel,
    consumer_config as CC,
    consumer_models as CM,
    consumer_requests as CR,
    errors as E,
    limits as L,
)
from natsbroker.jetstream.sourcing import stream_identity


def _stream(js, name):
    s = js.streams.get(name)
    if s is None:
        raise E.stream_not_found()
    return s


def _consumer(stream, name):
    c = stream.consumers.get(name)
    if c is None:
        raise E.consumer_not_found()
    return c


def _empty(body):
    """INFO and DELETE take no request: nats-server refuses a body before it
    looks the stream up."""
    if not gojson.is_empty_request(body):
        raise E.not_empty_request()


def info_object(js, stream, c):
    i = c.info()
    dc, ds, ldt = i["delivered"]
    ac, as_, lat = i["ack_floor"]
    return CM.make_consumer_info(
        stream.name, c.name, c.config, c.created, ts=c.now(),
        delivered=CM.SequenceInfo(consumer_seq=dc, stream_seq=ds, last_active=ldt or None),
        ack_floor=CM.SequenceInfo(consumer_seq=ac, stream_seq=as_, last_active=lat or None),
        num_ack_pending=i["num_ack_pending"], num_redelivered=i["num_redelivered"],
        num_waiting=i["num_waiting"], num_pending=i["num_pending"],
        push_bound=i["push_bound"], pinned=i["pinned"],
        # (its place in the answer; the block itself is the cluster layer's)
        cluster=CM.ClusterInfo(leader="-") if js.server.cluster is not None else None)


def _with_cluster(js, stream, c, out):
    """In a cluster a consumer's info has its cluster block, as nats-server's."""
    if "cluster" in out and js.server.cluster is not None:
        out["cluster"] = js.server.cluster.consumer_cluster_block(stream, c)
    return out


def info_response(js, stream, c):
    """A consumer's info as the API answers it (CONSUMER.INFO, CREATE, ...), without its type."""
    out = _with_cluster(js, stream, c, CM.consumer_info_json(info_object(js, stream, c)))
    out.pop("type", None)
    return out


def consumer_create(js, args, body, legacy=False):
    key = ["CONSUMER", "DURABLE", "CREATE"] if legacy else ["CONSUMER", "CREATE"]
    subject = "$JS.API." + ".".join(key + list(args))
    stream = js.streams.get(args[0]) if args else None
    consumers = {n: c.config for n, c in stream.consumers.items()} if stream else {}
    dsubj = _deliver_subject(body)
    lim = js.limits
    # The account's consumer limit (per stream), else nats-server 2.15's
    # default for a stream without its own.
    max_consumers = lim.max_consumers if lim.max_consumers > 0 else (
        L.DEFAULT_MAX_CONSUMERS if stream is not None and stream.config.max_consumers <= 0 else 0)
    cfg = CC.process_consumer_create(
        subject, body, stream.config if stream else None, consumers,
        clustered=js.server.cluster is not None, max_consumers=max_consumers,
        account_max_ack_pending=max(lim.max_ack_pending, 0),
        server_max_ack_pending=js.js.limits.max_ack_pending,
        server_max_request_batch=js.js.limits.max_request_batch,
        deliver_subject_has_interest=bool(dsubj) and js.broker.sublist.has_interest(dsubj))
    if cfg is None:
        return None
    if cfg.direct and cfg.sourcing and cfg.name and not cfg.durable_name:
        # A mirror/source asks with a stable name: the consumer gets a random
        # suffix, so that a new request never meets the last one's consumer
        # (jsConsumerCreateRequest). (nats-server standalone turns one of an
        # interest-retention stream into a durable instead: not done here.)
        cfg = attrs.evolve(cfg, name="%s-%s" % (cfg.name, CC.new_consumer_name(stream.consumers)))
    name = cfg.durable_name or cfg.name
    existing = stream.consumers.get(name) if name else None
    if existing is not None:
        if CM.consumer_config_json(existing.config) != CM.consumer_config_json(cfg):
            existing.update_config(cfg)
            js.save_consumer_config(existing)
        out = info_response(js, stream, existing)
        out["_after_commit"] = True
        return out
    if not name:
        # nats-server names an ephemeral but stores its config without the name.
        name = CC.new_consumer_name(stream.consumers)
    c = js.add_consumer(stream, name, cfg)
    js.advise("$JS.EVENT.ADVISORY.CONSUMER.CREATED.%s.%s" % (stream.name, name),
              {"type": "io.nats.jetstream.advisory.v1.consumer_action",
               "stream": stream.name, "consumer": name, "action": "create"})
    paused, _ = CM.pause_state(cfg.pause_until, c.now())
    if paused:
        js.advise("$JS.EVENT.ADVISORY.CONSUMER.PAUSE.%s.%s" % (stream.name, name),
                  {"type": "io.nats.jetstream.advisory.v1.consumer_pause", "stream": stream.name,
                   "consumer": name, "paused": True,
                   "pause_until": gotime.rfc3339(CM.parse_time_ns(cfg.pause_until))})
    out = info_response(js, stream, c)
    out["_after_commit"] = True
    if cfg.direct or cfg.sourcing:
        # nats-server 2.15 names the stream instance to a mirror or source,
        # which stamps it on its copies' Nats-Stream-Source.
        out["_headers"] = b"NATS/1.0\r\nNats-Stream-Identity: %s\r\n\r\n" % (
            stream_identity(stream).encode())
    return out


def _deliver_subject(body):
    """The request's deliver subject (for the interest check), if readable."""
    try:
        v = jsonbound.loads(body)
        return (v.get("config") or {}).get("deliver_subject", "").encode()
    except (ValueError, AttributeError, TypeError):
        return b""


def consumer_durable_create(js, args, body):
    return consumer_create(js, args, body, legacy=True)


def consumer_info(js, args, body):
    _empty(body)
    stream = _stream(js, args[0])
    return info_response(js, stream, _consumer(stream, args[1]))


def consumer_delete(js, args, body):
    _empty(body)
    stream = _stream(js, args[0])
    c = _consumer(stream, args[1])
    js.delete_consumer(stream, c)
    return {"success": True, "_after_commit": True}


def consumer_names(js, args, body):
    req = CR.parse_consumers_request(body) if gojson.is_json_object_or_array(body) else CM.ConsumersRequest()
    stream = _stream(js, args[0])
    names = sorted(stream.consumers)
    offset = max(req.offset or 0, 0)
    page = names[offset:offset + AM.JS_API_NAMES_LIMIT]
    return {"total": len(names), "offset": offset, "limit": AM.JS_API_NAMES_LIMIT,
            "consumers": page}


def consumer_list(js, args, body):
    req = CR.parse_consumers_request(body) if gojson.is_json_object_or_array(body) else CM.ConsumersRequest()
    stream = _stream(js, args[0])
    names = sorted(stream.consumers)
    offset = max(req.offset or 0, 0)
    page = names[offset:offset + AM.JS_API_LIST_LIMIT]
    infos = []
    for n in page:
        c = stream.consumers[n]
        infos.append(_with_cluster(js, stream, c, CM.consumer_info_json(
            info_object(js, stream, c), dynamic=False)))
    return {"total": len(names), "offset": offset, "limit": AM.JS_API_LIST_LIMIT,
            "consumers": infos}


def consumer_pause(js, args, body):
    req = CR.parse_pause_request(body) if gojson.is_json_object_or_array(body) else CM.ConsumerPauseRequest()
    stream = _stream(js, args[0])
    c = _consumer(stream, args[1])
    cfg = CM.clone_config(c.config)
    cfg.pause_until = req.pause_until
    CC.set_static_metadata(cfg)  # pausing raises the required API level
    c.update_config(cfg)
    js.save_consumer_config(c)
    resp = CM.pause_response(cfg.pause_until, c.now())
    out = CM.consumer_response_json(resp)
    out.pop("type", None)
    paused = out.get("paused", False)
    event = {"type": "io.nats.jetstream.advisory.v1.consumer_pause", "stream": stream.name,
             "consumer": c.name, "paused": paused,
             "pause_until": out.get("pause_until", gotime.ZERO_TIME)}
    js.advise("$JS.EVENT.ADVISORY.CONSUMER.PAUSE.%s.%s" % (stream.name, c.name), event)
    out["_after_commit"] = True
    return out


def consumer_unpin(js, args, body):
    """``$JS.API.CONSUMER.UNPIN.<stream>.<consumer>`` ``{"group": ...}``: the
    body is checked before the stream and consumer are looked up."""
    group = CR.parse_unpin_request(body)
    stream = _stream(js, args[0])
    c = _consumer(stream, args[1])
    if group not in (c.config.priority_groups or ()):
        raise E.consumer_invalid_priority_group()
    c.unpin(group)
    return {}


def consumer_reset(js, c, reply, body, hdr=b""):
    """``$JS.API.CONSUMER.RESET.<stream>.<consumer>`` (answered by the
    consumer's own subscription): ``{"seq": N}`` or no body for the ack floor.
    The reply is the consumer info after the reset plus ``reset_seq``; an
    error reply carries ``reset_seq`` 0. It waits for the reset state's commit."""
    try:
        if hdr and apilevel.refused(hdr):
            raise E.required_api_level()
        seq = c.reset(CR.parse_reset_request(body))
    except E.ApiError as e:
        js.respond(reply, {"type": CM.TYPE_CONSUMER_RESET, "error": e.to_json(), "reset_seq": 0})
        return
    out = {"type": CM.TYPE_CONSUMER_RESET}
    out.update(info_response(js, c.stream, c))
    out["reset_seq"] = seq
    js.consumer_dirty(c, urgent=True)
    js.reply_after_commit(reply, gojson.go_json_dumps(out).encode())


def consumer_leader_stepdown(js, args, body):
    raise E.not_clustered()


ROUTES = {
    # $JS.API.CONSUMER.CREATE.<stream> and .<stream>.<consumer>[.<filter>]
    ("CONSUMER", "CREATE"): (consumer_create, "consumer_create_response", "1+"),
    ("CONSUMER", "DURABLE", "CREATE"): (consumer_durable_create, "consumer_create_response", 2),
    ("CONSUMER", "INFO"): (consumer_info, "consumer_info_response", 2),
    ("CONSUMER", "DELETE"): (consumer_delete, "consumer_delete_response", 2),
    ("CONSUMER", "NAMES"): (consumer_names, "consumer_names_response", 1),
    ("CONSUMER", "LIST"): (consumer_list, "consumer_list_response", 1),
    ("CONSUMER", "PAUSE"): (consumer_pause, "consumer_pause_response", 2),
    ("CONSUMER", "UNPIN"): (consumer_unpin, "consumer_unpin_response", 2),
    ("CONSUMER", "LEADER", "STEPDOWN"): (consumer_leader_stepdown,
                                         "consumer_leader_stepdown_response", 2),
}
