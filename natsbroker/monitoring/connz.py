"""/connz and /routez rows: one connection, open or closed, or one route, in
nats-server's field order, and the subscription details they list."""

from natsbroker.auth.users import NkeyName, raw_auth_user
from natsbroker.gocompat.times import rfc3339_seconds
from natsbroker.monitoring.process import go_duration, uptime_text

# nats-server's global account: connections in it show no "account" in /connz.
GLOBAL_ACCOUNT = "$G"


class ConnRow:
    """One connection of /connz: its JSON, and the raw values sorts compare."""

    __slots__ = ("info", "cid", "start", "last", "stop", "subs", "pending", "in_msgs",
                 "out_msgs", "in_bytes", "out_bytes", "reason", "rtt")

    def __init__(self, info, start, last, stop, rtt=0.0):
        self.info = info
        self.rtt = rtt
        self.cid = info["cid"]
        self.start, self.last, self.stop = start, last, stop
        self.subs = info["subscriptions"]
        self.pending = info["pending_bytes"]
        self.in_msgs, self.out_msgs = info["in_msgs"], info["out_msgs"]
        self.in_bytes, self.out_bytes = info["in_bytes"], info["out_bytes"]
        self.reason = info.get("reason", "")


# Sort keys; nats-server sorts these descending, except where noted below.
_DESCENDING = {
    "subs": lambda r: r.subs,
    "pending": lambda r: r.pending,
    "msgs_to": lambda r: r.out_msgs,
    "msgs_from": lambda r: r.in_msgs,
    "bytes_to": lambda r: r.out_bytes,
    "bytes_from": lambda r: r.in_bytes,
    "last": lambda r: r.last,
    "stop": lambda r: r.stop or 0,
    "rtt": lambda r: r.rtt,
}


def sort_rows(rows, sort, now):
    # Python's sort is stable: ties keep cid order (Go's sort.Sort does not
    # promise any order for ties).
    if sort in _DESCENDING:
        rows.sort(key=_DESCENDING[sort], reverse=True)
    elif sort == "idle":
        # Most idle first: idle is now - last activity, for closed ones too.
        rows.sort(key=lambda r: now - r.last, reverse=True)
    elif sort == "uptime":
        # Shortest uptime first (ascending, as nats-server's byUptime).
        rows.sort(key=lambda r: (r.stop or now) - r.start)
    elif sort == "reason":
        rows.sort(key=lambda r: r.reason)


def _conn_head(cid, ip, port, start, last):
    return {"cid": cid, "kind": "Client", "type": "nats", "ip": ip, "port": port,
            "start": rfc3339_seconds(start), "last_activity": rfc3339_seconds(last)}


def _conn_tail(info, end, start, last, counters, name, lang, version, rtt=0.0):
    # RTT comes from the server's PINGs; "0s" until the first PONG, as nats-server.
    info["rtt"] = go_duration(rtt)
    info["uptime"] = uptime_text(end - start)
    info["idle"] = uptime_text(end - last)
    info.update(counters)
    # Go's omitempty: absent, not empty.
    if name:
        info["name"] = name
    if lang:
        info["lang"] = lang
    if version:
        info["version"] = version


def open_row(c, now, auth, subs, detail):
    info = _conn_head(c.cid, c.host, c.port, c.start, c.last_activity)
    if getattr(c, "websocket", None) is not None:
        info["type"] = "websocket"
    _conn_tail(info, now, c.start, c.last_activity, {
        "pending_bytes": c.pending_bytes,
        "in_msgs": c.in_msgs, "out_msgs": c.out_msgs,
        "in_bytes": c.in_bytes, "out_bytes": c.out_bytes,
        "subscriptions": len(c.subs),
    }, c.opts.name, c.opts.lang, c.opts.version, c.rtt)
    tls_fields = getattr(c, "tls_fields", None)
    if tls_fields is not None:
        info.update(tls_fields(auth))
    acc = getattr(c, "account", None)
    acc = acc.name if acc is not None else GLOBAL_ACCOUNT
    user = c.user or raw_auth_user(c)
    if auth and user:
        info["authorized_user"] = user
    if auth and acc != GLOBAL_ACCOUNT:
        # "account" is shown only for accounts other than $G.
        info["account"] = acc
    if c.subs:
        if detail:
            info["subscriptions_list_detail"] = [sub_detail(s) for s in c.subs.values()]
        elif subs:
            info["subscriptions_list"] = [text_of(s.subject) for s in c.subs.values()]
    jwt = getattr(c.opts, "jwt", "")
    if auth and jwt:
        info["jwt"] = jwt
    if auth and isinstance(c.user, NkeyName):
        info["issuer_key"] = acc  # an nkey user's issuer: its account
    if auth:
        info["name_tag"] = acc
    return ConnRow(info, c.start, c.last_activity, None, c.rtt)


def closed_row(snap, now, auth, subs, detail):
    start = snap.get("start") or now
    last = snap.get("last_activity") or start
    stop = snap.get("stop") or now
    info = _conn_head(snap.get("cid", 0), snap.get("ip", ""), snap.get("port", 0), start, last)
    info["type"] = snap.get("type", "nats")
    info["stop"] = rfc3339_seconds(stop)
    if snap.get("reason"):
        info["reason"] = snap["reason"]
    # A closed connection's uptime and idle time stop with it.
    _conn_tail(info, stop, start, last, {
        "pending_bytes": snap.get("pending_bytes", 0),
        "in_msgs": snap.get("in_msgs", 0), "out_msgs": snap.get("out_msgs", 0),
        "in_bytes": snap.get("in_bytes", 0), "out_bytes": snap.get("out_bytes", 0),
        "subscriptions": snap.get("subscriptions", 0),
    }, snap.get("name"), snap.get("lang"), snap.get("version"), snap.get("rtt", 0.0))
    info.update(snap.get("tls") or {})
    acc = snap.get("account") or GLOBAL_ACCOUNT
    if auth and snap.get("user"):
        info["authorized_user"] = snap["user"]
    if auth and acc != GLOBAL_ACCOUNT:
        info["account"] = acc
    # A snapshot may carry full subscription details ("subs_detail": dicts in
    # the subscriptions_list_detail shape) or only the subjects ("subjects").
    details = snap.get("subs_detail") or []
    subjects = snap.get("subjects") or [d["subject"] for d in details]
    if detail:
        if details:
            info["subscriptions_list_detail"] = [dict(d) for d in details]
    elif subs and subjects:
        info["subscriptions_list"] = list(subjects)
    if auth and snap.get("nkey"):
        info["issuer_key"] = acc
    if auth and acc != GLOBAL_ACCOUNT:
        # (nats-server tags a closed connection only outside $G)
        info["name_tag"] = acc
    return ConnRow(info, start, last, stop, snap.get("rtt", 0.0))


def route_row(r, now, subs):
    """One /routez entry (nats-server's RouteInfo, omitempty fields left out)."""
    row = {
        "rid": r.cid, "remote_id": r.remote_id, "remote_name": r.remote_name,
        "did_solicit": r.did_solicit, "is_configured": r.did_solicit and not r.implicit,
        "ip": r.host, "port": r.port,
        "start": rfc3339_seconds(r.start), "last_activity": rfc3339_seconds(r.last_activity),
        "rtt": go_duration(r.rtt), "uptime": uptime_text(now - r.start), "idle": uptime_text(now - r.last_activity),
        "pending_size": 0,
        "in_msgs": r.in_msgs, "out_msgs": r.out_msgs, "in_bytes": r.in_bytes, "out_bytes": r.out_bytes,
        "subscriptions": r.num_subscriptions(),
    }
    if subs and r.remote_subs:
        row["subscriptions_list"] = [text_of(subject) for (_, subject, _) in r.remote_subs]
    row["compression"] = "off"
    return row


def owner_cid(sub):
    # Internal (plugin) subscriptions have no connection: cid 0.
    return getattr(sub.owner, "cid", 0)


def sub_detail(sub, account=None):
    d = {}
    if account is not None:
        # /subsz names the account (and its tag); /connz's per-client lists do not.
        d["account"] = account
        d["account_tag"] = account
    d["subject"] = text_of(sub.subject)
    if sub.queue:
        d["qgroup"] = text_of(sub.queue)
    d["sid"] = text_of(sub.sid)
    d["msgs"] = sub.delivered
    if sub.max_msgs:
        d["max"] = sub.max_msgs
    d["cid"] = owner_cid(sub)
    return d


def text_of(b):
    return b.decode("utf-8", "replace") if isinstance(b, bytes) else str(b)
