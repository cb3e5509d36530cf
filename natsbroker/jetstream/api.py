"""The ``$JS.API`` request handlers for streams.

Each handler takes the plugin, the request's subject tokens after the API
prefix, and the JSON body; it returns the response dict (or raises ApiError,
which becomes the response's ``error``). Response shapes and ``type`` names are
nats-server's.
"""

import base64

from twisted.logger import Logger

from natsbroker import jsonbound
from natsbroker.gocompat import gojson, times as gotime
from natsbroker.jetstream import (
    api_models as AM,
    apilevel,
    consumer_api,
    consumer_config as CC,
    consumer_requests as CR,
    direct,
    errors as E,
    limits as L,
    marshal,
    snapshot,
    stream_config as SC,
    stream_models as SM,
    subject_rules as SR,
    versions,
)
from natsbroker.jetstream.stream_state import stream_state

log = Logger()

TYPE = "io.nats.jetstream.api.v1.%s"
API_PREFIX = b"$JS.API."


_ACK_HEADS = {}


def pub_ack(stream, seq, duplicate, domain="", val=None, batch="", count=0):
    """The PubAck bytes exactly as nats-server writes them (``val``: a
    counter's total; ``batch``/``count``: a committed atomic batch).

    The common case is built from a cached head: this runs once per stored
    message, and the generic model encoder costs more than the store write.
    """
    if duplicate or domain or val is not None or batch:
        return AM.pub_ack_json(stream, seq, duplicate=duplicate, domain=domain,
                               val="" if val is None else str(val), batch=batch, count=count)
    head = _ACK_HEADS.get(stream)
    if head is None:
        full = AM.pub_ack_json(stream, 1)
        head = _ACK_HEADS[stream] = full[:full.rindex(b"1}")]
    return head + b"%d}" % seq


def pub_ack_error(stream, err):
    return AM.pub_ack_json(stream, 0, error=err)


def _req(raw, cls):
    """Decode a request body with nats-server's rules (and its error texts)."""
    if gojson.is_empty_request(raw):
        return cls()
    return marshal.decode_request(raw, cls)


def _options(raw, cls):
    """Optional options: decoded only when the body is an object or array
    (nats-server's isJSONObjectOrArray), else none."""
    if not gojson.is_json_object_or_array(raw):
        return cls()
    return marshal.decode_request(raw, cls)


_ACTIONS = {"stream_create_response": "create", "stream_update_response": "modify",
            "stream_delete_response": "delete"}
# Consumer mutations are audited too (their action advisories come from the handlers).
_AUDITED = {"consumer_create_response", "consumer_delete_response", "consumer_pause_response",
            "consumer_unpin_response"}


def handle(js, subject, reply, body, hdr=b""):
    """Dispatch one API request and publish the response to ``reply``
    (``hdr``: the request's header block, for ``Nats-Required-Api-Level``)."""
    source = js.broker.route_source
    route = route_of(subject)
    if route is None:
        return  # nats-server does not answer unknown API subjects
    handler, kind, args = route
    js.api_total += 1
    try:
        if hdr and handler not in _CLUSTER_ONLY and apilevel.refused(hdr):
            raise E.required_api_level()
        result = handler(js, args, body)
    except E.ApiError as e:
        if not (kind == "stream_msg_delete_response" and e.err_code in _STORE_DELETE_ERRORS):
            js.api_errors += 1
        resp = {"type": TYPE % kind, "error": e.to_json()}
        resp.update(ERROR_EXTRAS.get(kind, {}))
        js.respond(reply, resp)
        return
    except Exception as e:
        # A fault (a store read that failed, a bug) answers this request with
        # an error and is logged; it never reaches the requester's connection.
        log.failure("JetStream API {subject}: request failed", subject=subject.decode(
            errors="replace"))
        js.api_errors += 1
        resp = {"type": TYPE % kind, "error": E.stream_general("%s: %s" % (
            type(e).__name__, e)).to_json()}
        resp.update(ERROR_EXTRAS.get(kind, {}))
        js.respond(reply, resp)
        return
    if result is None:
        return
    if kind == "stream_msg_get_response":
        js.api_total -= 1  # nats-server counts only failed message gets
    deferred_reply = result.pop("_after_commit", False)
    headers = result.pop("_headers", None)
    resp = {"type": TYPE % kind}
    resp.update(result)
    payload = gojson.go_json_dumps(resp).encode()
    if headers is not None and reply:
        if deferred_reply:
            js.note_stored(lambda: js.broker.publish(reply, payload, headers=headers))
        else:
            js.broker.publish(reply, payload, headers=headers)
    elif deferred_reply:
        js.reply_after_commit(reply, payload)
    elif reply:
        js.broker.publish(reply, payload)
    if kind in _AUDITED:
        js.audit(source, subject, body, payload)
    action = _ACTIONS.get(kind)
    if action is not None:
        # Mutations are announced (stream action) and audited, as nats-server does.
        js.stream_action(args[0], action)
        js.audit(source, subject, body, payload)


# The API subject spaces nats-server maps from ``$JS.<domain>.API.<...>`` to
# ``$JS.API.<...>`` (its generateJSMappingTable): INFO itself and everything
# under these tokens. Anything else under the domain prefix has no subscriber.
_DOMAIN_MAPPED = frozenset((b"STREAM", b"CONSUMER", b"DIRECT", b"META", b"SERVER", b"ACCOUNT"))

# nats-server's prefixes of requests that its ``$JS.API.>`` import does not
# carry (processServiceImport's checkJS): only a stream's direct-get or a
# consumer's pull subscription serves them, else the requester gets "no
# responders". Note the first has no trailing dot.
DIRECT_GET_PREFIX = b"$JS.API.DIRECT.GET"
MSG_NEXT_PREFIX = b"$JS.API.CONSUMER.MSG.NEXT."


def local_subject(subject, domain=""):
    """The ``$JS.API.<...>`` subject a request published on ``subject``
    reaches, as nats-server's subject mappings make it: ``subject`` itself,
    or ``$JS.<domain>.API.<...>`` mapped for this server's domain; None when
    nothing serves ``subject`` (an unmapped domain subject)."""
    if subject.startswith(API_PREFIX):
        return subject
    if domain:
        prefix = b"$JS.%s.API." % domain.encode()
        if subject.startswith(prefix):
            rest = subject[len(prefix):]
            first, dot, _ = rest.partition(b".")
            if rest == b"INFO" or (dot and first in _DOMAIN_MAPPED):
                return API_PREFIX + rest
    return None


def pull_target(subject):
    """``(stream, consumer)`` of a pull request's local subject, exactly
    ``$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>``; None otherwise."""
    if not subject.startswith(MSG_NEXT_PREFIX):
        return None
    tokens = subject[len(MSG_NEXT_PREFIX):].split(b".")
    if len(tokens) != 2 or not all(tokens):
        return None
    return tuple(t.decode(errors="replace") for t in tokens)


def direct_get_target(subject):
    """The stream named by a direct get's local subject, exactly
    ``$JS.API.DIRECT.GET.<stream>[.<subject>]``; None otherwise."""
    if not subject.startswith(DIRECT_GET_PREFIX + b"."):
        return None
    name = subject[len(DIRECT_GET_PREFIX) + 1:].split(b".", 1)[0]
    return name.decode(errors="replace") if name else None


def route_of(subject):
    """``(handler, kind, args)`` of a local API subject (see local_subject),
    or None. A route matches only its exact token count, as nats-server's
    API subscriptions (``$JS.API.STREAM.INFO.*`` and so on) do: a request
    with tokens spliced in or cut off is no request at all."""
    if not subject.startswith(API_PREFIX):
        return None
    tokens = [t.decode(errors="replace") for t in subject[len(API_PREFIX):].split(b".")]
    for n in (3, 2, 1):
        route = _ROUTES.get(tuple(tokens[:n]))
        if route is not None:
            handler, kind, nargs = route
            args = tokens[n:]
            if not _arity(nargs, len(args)):
                return None
            return handler, kind, args
    return None


# A route's argument count: exact, or at least ``AT_LEAST_ONE``'s 1 (the
# ``*`` and ``*.>`` forms of CONSUMER.CREATE).
AT_LEAST_ONE = "1+"


def _arity(nargs, n):
    if nargs == AT_LEAST_ONE:
        return n >= 1
    return n == (nargs or 0)


# -- an account without JetStream ---------------------------------------------------

NO_RESPONDERS = object()


def not_enabled(subject, body):
    """nats-server's answer to an API request in an account without JetStream:
    the response with 503/10039 "JetStream not enabled for account" (after the
    checks some handlers make of the request first: clustering required,
    a consumer request's JSON...), ``NO_RESPONDERS`` for direct gets and pull
    requests (nothing serves them), ``None`` for no answer. ``subject`` is
    the local subject (see local_subject)."""
    if subject.startswith((DIRECT_GET_PREFIX, MSG_NEXT_PREFIX)):
        return NO_RESPONDERS
    route = route_of(subject)
    if route is None:
        return None
    handler, kind, args = route
    try:
        if handler in _CLUSTER_ONLY:
            handler(None, args, body)
        first = _NOT_ENABLED_FIRST.get(handler)
        if first is not None and first(args, body) is False:
            return None
        raise E.not_enabled_for_account()
    except E.ApiError as e:
        resp = {"type": TYPE % kind, "error": e.to_json()}
        resp.update(ERROR_EXTRAS.get(kind, {}))
        return resp


def _consumer_request_first(legacy):
    key = ["CONSUMER", "DURABLE", "CREATE"] if legacy else ["CONSUMER", "CREATE"]

    def check(args, body):
        where = CC.parse_create_subject("$JS.API." + ".".join(key + list(args)))
        if where is None:
            return False
        stream, cname, filt, legacy_durable = where
        CC.parse_consumer_request(body, stream, cname, filt, legacy_durable=legacy_durable)
    return check


def _empty_request_first(args, body):
    if not gojson.is_empty_request(body):
        raise E.not_empty_request()


def _pause_request_first(args, body):
    if gojson.is_json_object_or_array(body):
        CR.parse_pause_request(body)


def _unpin_request_first(args, body):
    CR.parse_unpin_request(body)


# nats-server answers an account without JetStream only after these checks
# of the request (observed on 2.15.1).
_NOT_ENABLED_FIRST = {
    consumer_api.consumer_create: _consumer_request_first(False),
    consumer_api.consumer_durable_create: _consumer_request_first(True),
    consumer_api.consumer_info: _empty_request_first,
    consumer_api.consumer_pause: _pause_request_first,
    consumer_api.consumer_unpin: _unpin_request_first,
}


# nats-server answers a failed delete of an existing stream's message as an
# ordinary response: not in api.errors.
_STORE_DELETE_ERRORS = {10057, 10043}

# Extra fields nats-server includes even in error responses.
ERROR_EXTRAS = {
    "stream_info_response": {"total": 0, "offset": 0, "limit": 0},
    "stream_names_response": {"total": 0, "offset": 0, "limit": 0, "streams": None},
    "stream_list_response": {"total": 0, "offset": 0, "limit": 0, "streams": []},
    "stream_purge_response": {"purged": 0},
    "consumer_names_response": {"total": 0, "offset": 0, "limit": 0, "consumers": []},
    "consumer_list_response": {"total": 0, "offset": 0, "limit": 0, "consumers": []},
    "consumer_pause_response": {"paused": False, "pause_until": gotime.ZERO_TIME},
    **snapshot.ERROR_EXTRAS,
}


# -- handlers ---------------------------------------------------------------------

def account_info(js, args, body):
    mem, sto = js.usage()
    rmem, rsto = js.reserved()
    tiered = "" not in js.tiers
    out = {
        "memory": mem, "storage": sto, "reserved_memory": rmem, "reserved_storage": rsto,
        "streams": len(js.streams),
        "consumers": sum(len(s.consumers) for s in js.streams.values()),
        # The account's limits as configured (-1: none; the server-wide ones
        # are in /jsz); all zeros when they are tiered (an account JWT's
        # tiered_limits), each tier's under "tiers".
        "limits": L.limits_json(L.NO_TIER if tiered else js.limits),
        **({"domain": js.js.domain} if js.js.domain else {}),
        # The total nats-server reports does not include this request yet.
        "api": {"level": versions.API_LEVEL, "total": js.api_total - 1, "errors": js.api_errors},
    }
    if tiered:
        out["tiers"] = _tiers(js, rmem, rsto)
    return out


def _tiers(js, rmem, rsto):
    """ACCOUNT.INFO's ``tiers`` as nats-server's JetStreamUsage builds them
    on a single server: the tiers with stored bytes, those the limits name
    (when they are not all there already), then every stream's tier with
    its stream and consumer counts. A tier's reservation is its streams'
    ``max_bytes``: all of them for "R1" (every stream here is R1)."""
    def tier(t, mem=0, sto=0, lim=None, reserved=True):
        r1 = reserved and t in ("", "R1")
        return {"memory": mem, "storage": sto, "reserved_memory": rmem if r1 else 0,
                "reserved_storage": rsto if r1 else 0, "streams": 0, "consumers": 0,
                "limits": L.limits_json(lim or L.NO_TIER)}

    # (nats-server keeps a tier's usage once something was stored in it)
    usage = {t: (0, 0) for t in js._used_tiers}
    for s in js.streams.values():
        b = s.store.stored_bytes
        if b or s.tier in js._used_tiers:
            js._used_tiers.add(s.tier)
            m, f = usage.get(s.tier, (0, 0))
            usage[s.tier] = (m + b, f) if s.config.storage == "memory" else (m, f + b)
    tiers = {}
    skipped = 0
    for t, (m, f) in usage.items():
        if t not in js.tiers and not (m or f):
            skipped += 1
        else:
            tiers[t] = tier(t, m, f, js.tiers.get(t))
    if len(js.tiers) != len(usage) - skipped:
        for t, lim in js.tiers.items():
            if t not in tiers:
                tiers[t] = tier(t, lim=lim)
    for s in js.streams.values():
        u = tiers.get(s.tier)
        if u is None:
            u = tiers[s.tier] = tier(s.tier, reserved=False)
        u["streams"] += 1
        u["consumers"] += len(s.consumers)
    return dict(sorted(tiers.items()))


def _stream(js, name):
    s = js.streams.get(name)
    if s is None:
        why = js.offline.get(name)
        if why is not None:
            raise E.stream_offline_reason(why)
        raise E.stream_not_found()
    return s


def _lookup(js):
    """Existing streams' configs, for the mirror/source checks of a new config."""
    def lookup(name):
        s = js.streams.get(name)
        return s.config if s is not None else None
    return lookup


def _names_storage(body):
    """Does the request body set ``storage`` (Go's case-insensitive key match)?
    nats-server's first limits check sees an unset storage type as neither."""
    try:
        doc = jsonbound.loads(body)
    except ValueError:
        return False
    return isinstance(doc, dict) and any(k.lower() == "storage" for k in doc)


def _check_overlap(js, cfg, skip=None):
    for other in js.streams.values():
        if other.name != skip and SR.subjects_overlap(cfg.subjects, other.config.subjects):
            raise E.stream_subject_overlap()


def stream_create(js, args, body):
    # nats-server's order: parse (name mismatch first), the account's stream
    # count and limits on the request as sent, validate and fill defaults
    # (the account's max bytes rules among them), clustering, name in use,
    # resources, subject overlap.
    name = args[0]
    raw = SC.parse_stream_config(body, name)
    L.precheck_create(js, raw, _names_storage(body))
    cfg = SC.fill_defaults(raw, lookup=_lookup(js), account_limits=js.limits,
                           max_duplicate_window=js.js.limits.duplicate_window)
    SC.check_create(cfg, clustered=js.server.cluster is not None)
    existing = js.streams.get(name)
    if existing is not None:
        if SM.stream_config_json(existing.config) == SM.stream_config_json(cfg):
            return _info(js, existing, did_create=True)
        raise E.stream_name_exist()
    if name in js.offline:
        raise E.stream_offline_reason(js.offline[name])
    L.check_create(js, cfg)
    _check_overlap(js, cfg)
    stream = js.create_stream(cfg)
    out = _info(js, stream, did_create=True)
    out["_after_commit"] = True
    return out


def stream_update(js, args, body):
    name = args[0]
    cfg = SC.parse_stream_config(body, name, update=True, account_limits=js.limits)
    stream = _stream(js, name)
    cfg = SC.check_update(stream.config, SC.fill_defaults(
        cfg, lookup=_lookup(js), max_duplicate_window=js.js.limits.duplicate_window),
        clustered=js.server.cluster is not None)
    L.check_update(js, stream.config, cfg)
    _check_overlap(js, cfg, skip=name)
    js.update_stream(stream, cfg)
    out = _info(js, stream)
    out["_after_commit"] = True
    return out


def _page_subjects(subjects, offset):
    """nats-server pages subject details through a sorted key list, at most
    JSMaxSubjectDetails a request."""
    limit = AM.JS_MAX_SUBJECTS_DETAILS
    if offset <= 0 and len(subjects) <= limit:
        return subjects
    keys = sorted(subjects)[offset:offset + limit]
    return {k: subjects[k] for k in keys}


def _info(js, stream, did_create=False, leader=False, subjects_filter=None,
          deleted_details=False):
    mirror, sources = js.sourcing.info(stream)
    # A create's reply has no domain in nats-server (every other info has).
    info = SM.stream_info_json(
        stream.config, stream.created, stream_state(stream, subjects_filter, deleted_details),
        cluster_leader=js.broker.server_name if leader else None,
        # In a cluster every answer about a stream has its cluster block
        # (create and update too); a single server's only STREAM.INFO.
        cluster=js.server.cluster.cluster_block(stream) if js.server.cluster is not None else None,
        domain="" if did_create else js.js.domain, mirror=mirror, sources=sources)
    out = dict(info)
    if did_create:
        out["did_create"] = True
    return out


def stream_created(js, stream):
    """The create answer of a stream made elsewhere than in this request
    (a replicated stream's, given by its first leader)."""
    out = {"type": TYPE % "stream_create_response"}
    out.update(_info(js, stream, did_create=True))
    return out


def stream_info(js, args, body):
    req = _options(body, AM.StreamInfoRequest)
    stream = _stream(js, args[0])
    filt = req.subjects_filter
    info = _info(js, stream, leader=True, subjects_filter=filt,
                 deleted_details=bool(req.deleted_details))
    subjects = info["state"].get("subjects") or {}
    offset = max(req.offset or 0, 0)
    if filt and subjects:
        info["state"]["subjects"] = _page_subjects(subjects, offset) or None
        if info["state"]["subjects"] is None:
            del info["state"]["subjects"]
    out = {"total": len(subjects) if filt else 0, "offset": offset if filt else 0,
           "limit": AM.JS_MAX_SUBJECTS_DETAILS if filt else 0}
    out.update(info)
    return out


def stream_delete(js, args, body):
    if not gojson.is_empty_request(body):
        # (nats-server refuses any body but {} before it looks the stream up)
        raise E.not_empty_request()
    if args[0] in js.offline and args[0] not in js.streams:
        js.file_store.delete_offline(args[0])  # an explicit request: its files go
        return {"success": True}
    stream = _stream(js, args[0])
    js.delete_stream(stream)
    return {"success": True, "_after_commit": True}


def stream_purge(js, args, body):
    req = _options(body, AM.StreamPurgeRequest)
    stream = _stream(js, args[0])
    if stream.config.sealed:
        raise E.stream_sealed()
    if stream.config.deny_purge:
        raise E.stream_purge_not_permitted()
    if req.seq and req.keep:
        raise E.bad_request()
    n = stream.purge("api", subject=req.filter.encode() if req.filter else None,
                     seq=req.seq or None, keep=req.keep or None)
    stream.forget_removed()
    for c in stream.consumers.values():
        c.purged()
    return {"success": True, "purged": n, "_after_commit": True}


def _names(js, subject, offline=True):
    names = set(js.streams)
    if offline and not subject:
        names.update(js.offline)  # their subjects are not known
    names = sorted(names)
    if subject:
        names = [n for n in names if SR.subjects_overlap(js.streams[n].config.subjects, [subject])]
    return names


def stream_names(js, args, body):
    req = _options(body, AM.StreamNamesRequest)
    names = _names(js, req.subject)
    offset = max(req.offset or 0, 0)
    page = names[offset:offset + AM.JS_API_NAMES_LIMIT]
    return {"total": len(names), "offset": offset, "limit": AM.JS_API_NAMES_LIMIT,
            "streams": page or None}


def stream_list(js, args, body):
    req = _options(body, AM.StreamListRequest)
    names = _names(js, req.subject, offline=False)
    offset = max(req.offset or 0, 0)
    page = names[offset:offset + AM.JS_API_LIST_LIMIT]
    out = {"total": len(names), "offset": offset, "limit": AM.JS_API_LIST_LIMIT,
           "streams": [_info(js, js.streams[n]) for n in page]}
    if js.offline and not offset:
        out["offline"] = dict(sorted(js.offline.items()))  # nats-server's field
    return out


def _msg_json(msg, no_hdr=False):
    out = {"subject": msg.subject.decode(errors="replace"), "seq": msg.seq}
    if msg.hdr and not no_hdr:
        out["hdrs"] = base64.b64encode(msg.hdr).decode()
    if msg.data:
        out["data"] = base64.b64encode(msg.data).decode()
    out["time"] = gotime.rfc3339(msg.ts)
    return out


def _find_msg(stream, req):
    store = stream.store
    if req.last_by_subj:
        return _last_msg(stream, req.last_by_subj.encode())
    elif req.next_by_subj:
        msg = store.load_next(req.seq or 0, req.next_by_subj.encode())
    elif req.seq:
        msg = store.load(req.seq)
        if msg is None:
            _check_damage(stream, req.seq)
    else:
        raise E.bad_request()
    if msg is None:
        raise E.no_message_found()
    return msg


def _last_msg(stream, subject):
    """The newest message on ``subject``; if a newer one was found damaged,
    an error: an older revision must not pass for the current one (KV)."""
    store = stream.store
    msg = store.load_last(subject)
    damaged = getattr(store, "damaged_since", None)
    if damaged is not None:
        hit = damaged(msg.seq if msg is not None else 0, subject)
        if hit is not None:
            raise _damage_error(stream, *hit)
    if msg is None:
        raise E.no_message_found()
    return msg


def _check_damage(stream, seq):
    damage_of = getattr(stream.store, "damage_of", None)
    why = damage_of(seq) if damage_of is not None else None
    if why is not None:
        raise _damage_error(stream, seq, why)


def _damage_error(stream, seq, why):
    # nats-server's store-failure error (503/10077), naming what was found.
    return E.stream_store_failed("message %d in stream %s is damaged in the store (%s)"
                                 % (seq, stream.name, why))


def stream_msg_get(js, args, body):
    req = _req(body, AM.MsgGetRequest)
    # nats-server's checks (jsMsgGetRequest), before it looks the stream up:
    # no batches here; seq, last_by_subj and start_time exclude each other,
    # next_by_subj filters seq or start_time.
    seq, last, nxt, start = req.seq, req.last_by_subj, req.next_by_subj, req.start_time
    if (req.batch > 0 or req.max_bytes > 0 or (seq and last)
            or not (seq or last or nxt or start is not None)
            or (start is not None and (seq or last)) or (last and nxt)):
        raise E.bad_request()
    stream = _stream(js, args[0])
    return {"message": _msg_json(_direct_msg(stream, req), no_hdr=req.no_hdr)}


def stream_msg_delete(js, args, body):
    if gojson.is_empty_request(body):
        raise E.bad_request()  # (jsMsgDeleteRequest: before the stream is looked up)
    req = _req(body, AM.MsgDeleteRequest)
    stream = _stream(js, args[0])
    if stream.config.sealed:
        raise E.stream_sealed()
    if stream.config.deny_delete:
        raise E.stream_msg_delete_not_permitted()
    seq = req.seq or 0
    st = stream.store.state()
    if seq <= 0 or seq < st.first_seq:
        raise E.msg_delete_not_found()
    if seq > st.last_seq:
        raise E.msg_delete_store_eof()
    if not stream.remove(seq, "api", erase=not req.no_erase):
        raise E.sequence_not_found(seq)
    return {"success": True, "_after_commit": True}


def stream_leader_stepdown(js, args, body):
    # A single server answers before looking the stream up, as nats-server does.
    raise E.not_clustered()


def stream_peer_remove(js, args, body):
    raise E.not_clustered()


# Answered "clustering required" (10010) before Nats-Required-Api-Level is read.
_CLUSTER_ONLY = {stream_leader_stepdown, stream_peer_remove,
                 consumer_api.consumer_leader_stepdown}

_ROUTES = {
    **consumer_api.ROUTES,
    **snapshot.ROUTES,
    ("INFO",): (account_info, "account_info_response", None),
    ("STREAM", "CREATE"): (stream_create, "stream_create_response", 1),
    ("STREAM", "UPDATE"): (stream_update, "stream_update_response", 1),
    ("STREAM", "INFO"): (stream_info, "stream_info_response", 1),
    ("STREAM", "DELETE"): (stream_delete, "stream_delete_response", 1),
    ("STREAM", "PURGE"): (stream_purge, "stream_purge_response", 1),
    ("STREAM", "NAMES"): (stream_names, "stream_names_response", None),
    ("STREAM", "LIST"): (stream_list, "stream_list_response", None),
    ("STREAM", "MSG", "GET"): (stream_msg_get, "stream_msg_get_response", 1),
    ("STREAM", "MSG", "DELETE"): (stream_msg_delete, "stream_msg_delete_response", 1),
    ("STREAM", "LEADER", "STEPDOWN"): (stream_leader_stepdown, "stream_leader_stepdown_response", 1),
    ("STREAM", "PEER", "REMOVE"): (stream_peer_remove, "stream_remove_peer_response", 1),
}


# -- direct get ---------------------------------------------------------------------

def direct_get(js, stream, subject, reply, body, hdr=b""):
    """``$JS.API.DIRECT.GET.<stream>[.<subject>]``: the message itself, with
    Nats-Stream/Subject/Sequence/Time-Stamp headers, or a batch of them closed
    by a ``204 EOB`` status (natsbroker/jetstream/direct.py); errors as status headers."""
    if not reply:
        return
    publish = js.broker.publish
    if hdr and apilevel.refused(hdr):
        publish(reply, b"", headers=apilevel.STATUS_412)
        return
    # ``subject`` is the local $JS.API.DIRECT.GET.<stream>[.<subject>]
    prefix_len = len(DIRECT_GET_PREFIX) + 1 + len(stream.name.encode())
    last_subject = subject[prefix_len + 1:] if len(subject) > prefix_len else b""
    try:
        req = direct.request(body, last_subject)
        if req.multi_last:
            replies = direct.multi_last(stream, req, js.broker.config.max_pending)
        elif req.batch:
            replies = direct.batch(stream, req, js.broker.config.max_pending)
        else:
            replies = (direct.single(stream, _direct_msg(stream, req), req.no_hdr),)
        # A batch is sent as it is read: an error part-way follows what went out.
        for hdr, data in replies:
            publish(reply, data, headers=hdr)
    except direct.Status as s:
        publish(reply, b"", headers=s.header)
    except direct.Damaged as d:
        publish(reply, b"", headers=_damage_status(_damage_error(stream, d.seq, d.why)))
    except E.ApiError as e:
        if e.err_code == E.no_message_found().err_code:
            publish(reply, b"", headers=direct.NOT_FOUND)
        elif e.err_code == E.stream_store_failed("").err_code:
            publish(reply, b"", headers=_damage_status(e))
        else:
            publish(reply, b"", headers=direct.MALFORMED_REQUEST)


def _direct_msg(stream, req):
    req = direct.resolve_start(stream, req)
    if not (req.seq or req.next_by_subj or req.last_by_subj):
        raise E.no_message_found()  # a start time on a stream never written to
    return _find_msg(stream, req)


def _damage_status(err):
    # Damage named in the status line (not 503: clients read that as "no responders").
    return b"NATS/1.0 500 %s\r\n\r\n" % err.description.encode()
