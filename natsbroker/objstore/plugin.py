"""The server-side Object Store request API: ``$OBJ.<bucket>``.

Real clients (nats-py, nats.go, nats.js) keep an object store on the client
side over the JetStream stream ``OBJ_<bucket>``: chunks on
``$O.<bucket>.C.<nuid>``, the object's JSON meta on
``$O.<bucket>.M.<base64url(name)>`` (rolled up per object). This plugin
offers the same buckets to clients with no object-store library: it reads
and writes exactly that layout, so objects written here are read by nats-py
and the other way round.

Requests (JSON bodies; errors are ``{"error":{"code":...,"description":...}}``):

* ``$OBJ.<bucket>.info`` ``{"name"}`` -> the ObjectInfo;
* ``$OBJ.<bucket>.get`` ``{"name","deliver_subject"}`` -> the ObjectInfo, then
  every chunk as a message to ``deliver_subject``, then an empty end marker
  with the status ``204 EOF`` and ``Nats-Object-Digest``/``Nats-Object-Size``;
* ``$OBJ.<bucket>.delete`` ``{"name"}`` -> ``{"success":true}``;
* ``$OBJ.<bucket>.list`` -> ``{"bucket","objects":[...]}`` (live objects);
* ``$OBJ.<bucket>`` takes the same with an ``"op"`` field, or infers it: an
  empty body lists, a ``deliver_subject`` gets, a ``name`` alone is info.

Upload: publish the object's meta (``name``, ``nonce``, ``chunks``, ``size``,
optional ``description``/``headers``/``digest``) to
``$OBJ.<bucket>.info.<object>``, then the chunks in order to
``$OBJ.<bucket>.chunks.<nonce>``. After the last chunk the object is
committed (its meta written after every chunk is stored) and the reply
subject of the last chunk (or of the meta) gets the ObjectInfo; watchers of
``$OBJ.<bucket>.info.>`` get it too. A size or digest mismatch discards the
new chunks and leaves any existing object of that name untouched.

It is an ordinary plugin: it talks to JetStream only with messages (the
``$JS.API`` and stream subjects), through ``IBroker``.

It acts for the client that asked, never as the server: a request is served
only if the client could have made the JetStream requests and publishes
behind it itself (``IClient.may_publish`` on each), only for a client of the
account the plugin serves, and a ``get`` delivers only to a subject the
client may publish to, never to a ``$``-prefixed one (``$JS.API``, ``$SYS``,
``$O``...). A refused request gets ``403``. What the server publishes here
itself (a response or delivery whose subject a client chose) is ignored
(``IBroker.serving_request``), and an upload's chunks are taken only from the
connection that sent its meta.
"""

import base64
import hashlib
import itertools
import json
import os

from twisted.logger import Logger
from zope.interface import implementer

from natsbroker import jsonbound
from natsbroker.interfaces import IBrokerPlugin, IClient
from natsbroker.subjects.sublist import is_valid_literal_subject

log = Logger()

DIGEST_PREFIX = "SHA-256="
UPLOAD_TIMEOUT = 60.0  # seconds an unfinished upload is kept
GET_BATCH = 16  # chunks sent per reactor turn while streaming a get
# nats.go's ObjectInfo field order.
_INFO_FIELDS = ("name", "description", "headers", "metadata", "options", "bucket", "nuid",
                "size", "mtime", "chunks", "digest", "deleted")


class ObjError(Exception):
    def __init__(self, code, description):
        super().__init__(description)
        self.code = code
        self.description = description

    def to_json(self):
        return {"error": {"code": self.code, "description": self.description}}


# The ObjectInfo fields the responder reads, and what they must hold: a meta
# from a client (an upload's, or one stored on $O.<bucket>.M.<name> directly)
# may hold anything JSON can.
_META_TYPES = (("name", str, "a string"), ("nuid", str, "a string"),
               ("size", int, "an integer"), ("chunks", int, "an integer"),
               ("digest", str, "a string"), ("description", str, "a string"),
               ("headers", dict, "an object"), ("metadata", dict, "an object"),
               ("options", dict, "an object"), ("mtime", str, "a string"))


def check_meta(meta):
    """Raise ValueError unless ``meta`` is a JSON object whose known fields
    hold what the responder expects of them (null counts as absent)."""
    if not isinstance(meta, dict):
        raise ValueError("meta must be a JSON object")
    for field, kind, what in _META_TYPES:
        value = meta.get(field)
        if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
            raise ValueError("%s must be %s" % (field, what))


def meta_subject(bucket, name):
    return "$O.%s.M.%s" % (bucket, base64.urlsafe_b64encode(name.encode()).decode())


def chunk_subject(bucket, nuid):
    return "$O.%s.C.%s" % (bucket, nuid)


def info_json(meta, mtime=None):
    """An ObjectInfo as the clients write it, plus ``nonce`` (004's name for nuid)."""
    out = {}
    for k in _INFO_FIELDS:
        v = meta.get(k)
        if k == "mtime" and mtime:
            v = mtime
        if v not in (None, "", {}, False) or k in ("name", "bucket", "nuid"):
            out[k] = v
    out["nonce"] = out.get("nuid", "")
    return out


class Upload:
    def __init__(self, bucket, name, meta, reply, client):
        self.bucket = bucket
        self.client = client  # the connection that sent the meta: only its chunks count
        self.name = name
        self.meta = meta
        self.nuid = meta["nonce"]
        self.expected = meta.get("chunks")
        self.reply = reply
        self.sha = hashlib.sha256()
        self.size = 0
        self.received = 0
        self.acked = 0
        self.failed = None
        self.timer = None


@implementer(IBrokerPlugin)
class ObjectStoreAPI:
    name = "objstore"

    def __init__(self, config):
        self.config = config
        self.broker = None
        self._subs = []
        self._waiters = {}
        self._ids = itertools.count(1)
        self._uploads = {}  # (bucket, nonce) -> Upload

    # -- lifecycle -----------------------------------------------------------

    def start(self, broker):
        self.broker = broker
        self._inbox = b"_INBOX.%s." % os.urandom(8).hex().encode()
        sub = broker.subscribe
        self._subs = [
            sub(self._inbox + b"*", self._on_reply),
            sub(b"$OBJ.*", self._on_request),
            sub(b"$OBJ.*.*", self._on_request),
            sub(b"$OBJ.*.info.>", self._on_upload_meta),
            sub(b"$OBJ.*.chunks.*", self._on_chunk),
        ]

    def stop(self):
        for s in self._subs:
            self.broker.unsubscribe(s)
        for up in self._uploads.values():
            if up.timer is not None and up.timer.active():
                up.timer.cancel()

    # -- talking to JetStream with messages ---------------------------------

    def _on_reply(self, sub, subject, reply, hdr_len, raw):
        cb = self._waiters.pop(subject, None)
        if cb is not None:
            cb(raw[:hdr_len], raw[hdr_len:])

    def _send(self, subject, payload, callback, headers=None):
        inbox = self._inbox + b"%d" % next(self._ids)
        self._waiters[inbox] = callback
        self.broker.request(subject.encode() if isinstance(subject, str) else subject,
                            payload, inbox, headers=headers)
        return inbox

    def _call(self, subject, body):
        """A JetStream API request answered within the publish (reads are):
        the decoded JSON response, or None if nothing answered."""
        box = []
        inbox = self._send(subject, body, lambda h, d: box.append(d))
        if not box:
            self._waiters.pop(inbox, None)
            return None
        return jsonbound.loads(box[0])

    def _last_meta(self, bucket, name):
        """``(meta dict, time)`` of an object, or raise ObjError."""
        resp = self._call("$JS.API.STREAM.MSG.GET.OBJ_%s" % bucket,
                          json.dumps({"last_by_subj": meta_subject(bucket, name)}).encode())
        if resp is None:
            raise ObjError(503, "JetStream not available")
        err = resp.get("error")
        if err is not None:
            if err.get("err_code") == 10059:
                raise ObjError(404, "bucket not found")
            raise ObjError(404, "object not found")
        msg = resp["message"]
        try:
            meta = jsonbound.loads(base64.b64decode(msg.get("data", "")) or b"{}",
                                   max_depth=jsonbound.REENCODE_DEPTH)
            check_meta(meta)
        except ValueError as e:
            # Anyone allowed to publish on $O.<bucket>.M.> can store this.
            raise ObjError(500, "invalid object meta: %s" % e) from None
        return meta, msg["time"]

    def _check_bucket(self, bucket):
        resp = self._call("$JS.API.STREAM.INFO.OBJ_%s" % bucket, b"")
        if resp is None:
            raise ObjError(503, "JetStream not available")
        if "error" in resp:
            raise ObjError(404, "bucket not found")

    # -- acting for a client -----------------------------------------------------

    def _requester(self):
        """The client whose request is being delivered, or None when it is
        none of this account's clients: the server's own publish (a response
        or delivery whose subject a client chose), or a request imported from
        another account, which must not act here."""
        source = self.broker.route_source
        if source is None or not IClient.providedBy(source):
            return None
        return source if source.account is self.broker.global_account else None

    @staticmethod
    def _require(client, *subjects):
        """Refuse (403) unless ``client`` may publish to every subject: the
        requests and publishes it would make to do this itself."""
        for subject in subjects:
            if not client.may_publish(subject.encode()):
                raise ObjError(403, 'Permissions Violation for Publish to "%s"' % subject)

    # -- requests ---------------------------------------------------------------

    def _on_request(self, sub, subject, reply, hdr_len, raw):
        if not self.broker.serving_request():
            return  # the server's own publish, not a client's request
        client = self._requester()
        tokens = subject.decode(errors="replace").split(".")
        bucket = tokens[1]
        body = raw[hdr_len:]
        try:
            req = jsonbound.loads(body, max_depth=jsonbound.REENCODE_DEPTH) if body.strip() else {}
            if not isinstance(req, dict):
                raise ValueError("request must be a JSON object")
        except ValueError as e:
            self._respond(reply, ObjError(400, "invalid request: %s" % e).to_json())
            return
        op = tokens[2] if len(tokens) == 3 else req.get("op")
        if op is None:
            op = "list" if not req else "get" if req.get("deliver_subject") else "info"
        handler = {"info": self._info, "get": self._get, "delete": self._delete,
                   "list": self._list}.get(op)
        try:
            if client is None:
                raise ObjError(403, "requests are served only for the account's own clients")
            if handler is None:
                raise ObjError(400, "unknown operation %r" % op)
            self._require(client, *_NEEDS[op](bucket, req))
            out = handler(bucket, req, reply, client)
        except ObjError as e:
            out = e.to_json()
        if out is not None:
            self._respond(reply, out)

    def _respond(self, reply, value):
        if reply:
            self.broker.publish(reply, json.dumps(value).encode())

    def _name(self, req):
        name = req.get("name")
        if not isinstance(name, str) or not name:
            raise ObjError(400, "object name required")
        return name

    def _live(self, bucket, name):
        meta, mtime = self._last_meta(bucket, name)
        if meta.get("deleted"):
            raise ObjError(404, "object not found")
        return meta, mtime

    def _info(self, bucket, req, reply, client):
        meta, mtime = self._live(bucket, self._name(req))
        return info_json(meta, mtime)

    def _list(self, bucket, req, reply, client):
        resp = self._call("$JS.API.STREAM.INFO.OBJ_%s" % bucket,
                          json.dumps({"subjects_filter": "$O.%s.M.>" % bucket}).encode())
        if resp is None or "error" in resp:
            raise ObjError(404, "bucket not found")
        objects = []
        for subj in sorted((resp.get("state") or {}).get("subjects") or {}):
            b64 = subj.rsplit(".", 1)[1]
            try:
                name = base64.urlsafe_b64decode(b64).decode()
                meta, mtime = self._live(bucket, name)
            except (ObjError, ValueError):
                continue
            objects.append(info_json(meta, mtime))
        return {"bucket": bucket, "objects": objects}

    def _delete(self, bucket, req, reply, client):
        name = self._name(req)
        meta, _ = self._live(bucket, name)
        dead = dict(meta, deleted=True, size=0, chunks=0, digest="", mtime="")
        nuid = meta.get("nuid")

        def stored(hdr, data):
            if b'"error"' in data:
                self._respond(reply, ObjError(500, "delete failed").to_json())
                return
            if nuid:
                self._purge_chunks(bucket, nuid)
            self._respond(reply, {"success": True})
            self.broker.publish(("$OBJ.%s.info.%s" % (bucket, name)).encode(),
                                json.dumps(info_json(dead)).encode())
        self._send(meta_subject(bucket, name), json.dumps(dead).encode(), stored,
                   headers=b"NATS/1.0\r\nNats-Rollup: sub\r\n\r\n")
        return None

    def _get(self, bucket, req, reply, client):
        name = self._name(req)
        dest = req.get("deliver_subject")
        if not isinstance(dest, str) or not is_valid_literal_subject(dest.encode()):
            raise ObjError(400, "deliver_subject required")
        if dest.startswith("$"):
            # The server's own namespaces ($JS.API, $SYS, $O...): never a
            # place for an object's bytes, whoever asks.
            raise ObjError(400, "invalid deliver_subject")
        self._require(client, dest)
        meta, mtime = self._live(bucket, name)
        if meta.get("options", {}) and meta["options"].get("link"):
            raise ObjError(400, "object is a link")
        self._respond(reply, info_json(meta, mtime))
        state = {"seq": 0, "sha": hashlib.sha256(), "size": 0}
        self._stream_chunks(bucket, meta, dest.encode(), state)
        return None

    def _stream_chunks(self, bucket, meta, dest, state):
        """Send the next few chunks, then yield the reactor: a large object is
        never read whole into memory, nor sent in one turn."""
        subj = chunk_subject(bucket, meta.get("nuid", ""))
        self.broker.begin()
        try:
            for _ in range(GET_BATCH):
                resp = self._call("$JS.API.STREAM.MSG.GET.OBJ_%s" % bucket, json.dumps(
                    {"seq": state["seq"] + 1, "next_by_subj": subj}).encode())
                msg = (resp or {}).get("message")
                if msg is None:
                    digest = DIGEST_PREFIX + base64.urlsafe_b64encode(state["sha"].digest()).decode()
                    hdr = (b"NATS/1.0 204 EOF\r\nNats-Object-Digest: %s\r\nNats-Object-Size: %d\r\n\r\n"
                           % (digest.encode(), state["size"]))
                    self.broker.publish(dest, b"", headers=hdr)
                    return
                data = base64.b64decode(msg.get("data", ""))
                state["seq"] = msg["seq"]
                state["sha"].update(data)
                state["size"] += len(data)
                self.broker.publish(dest, data)
        finally:
            self.broker.end()
        self.broker.reactor.callLater(0, self._stream_chunks, bucket, meta, dest, state)

    # -- uploads -------------------------------------------------------------------

    def _on_upload_meta(self, sub, subject, reply, hdr_len, raw):
        if not self.broker.serving_request():
            return  # our own ObjectInfo announcements, or a response sent here
        client = self._requester()
        tokens = subject.decode(errors="replace").split(".", 3)
        bucket, obj = tokens[1], tokens[3]
        try:
            if client is None:
                raise ObjError(403, "requests are served only for the account's own clients")
            meta = jsonbound.loads(raw[hdr_len:], max_depth=jsonbound.REENCODE_DEPTH)
            check_meta(meta)
            name = meta.get("name") or obj
            nonce = meta.get("nonce") or meta.get("nuid")
            if not isinstance(nonce, str) or not is_valid_literal_subject(nonce.encode()) \
                    or "." in nonce:
                raise ValueError("nonce must be a subject token")
            chunks = meta.get("chunks")
            if not isinstance(chunks, int) or chunks < 0:
                raise ValueError("chunks must be a non-negative integer")
            if not isinstance(name, str) or not name:
                raise ValueError("name must be a non-empty string")
            self._require(client, *_upload_needs(bucket, name, nonce))
            self._check_bucket(bucket)
            # A nonce names the chunks' subject: one already holding chunks
            # belongs to another object, which must not be overwritten.
            resp = self._call("$JS.API.STREAM.INFO.OBJ_%s" % bucket, json.dumps(
                {"subjects_filter": chunk_subject(bucket, nonce)}).encode())
            if (resp or {}).get("state", {}).get("subjects"):
                raise ObjError(409, "nonce already in use")
        except ValueError as e:
            self._respond(reply, ObjError(400, "invalid object meta: %s" % e).to_json())
            return
        except ObjError as e:
            self._respond(reply, e.to_json())
            return
        meta = dict(meta, name=name, nonce=nonce)
        up = Upload(bucket, name, meta, reply, client)
        key = (bucket, nonce)
        old = self._uploads.pop(key, None)
        if old is not None and old.timer is not None and old.timer.active():
            old.timer.cancel()
        self._uploads[key] = up
        up.timer = self.broker.reactor.callLater(UPLOAD_TIMEOUT, self._abandon, key)
        if chunks == 0:
            self._finish(key, up)

    def _on_chunk(self, sub, subject, reply, hdr_len, raw):
        if not self.broker.serving_request():
            return  # the server's own publish (a response or delivery sent here)
        tokens = subject.decode(errors="replace").split(".")
        key = (tokens[1], tokens[3])
        up = self._uploads.get(key)
        if up is None or up.client is not self.broker.route_source:
            # Another connection's upload is as good as none: a nonce seen on
            # the wire must not let anyone else write into that object.
            self._respond(reply, ObjError(404, "no upload in progress for this nonce").to_json())
            return
        data = raw[hdr_len:]
        if up.expected is not None and up.received >= up.expected:
            self._fail(key, up, "more chunks than announced", reply)
            return
        up.received += 1
        up.size += len(data)
        up.sha.update(data)
        if reply:
            up.reply = reply

        def acked(hdr, body, up=up):
            if b'"error"' in body:
                up.failed = up.failed or jsonbound.loads(body)["error"].get("description", "store error")
            up.acked += 1
            if up.acked == up.expected and self._uploads.get(key) is up:
                self._finish(key, up)
        self._send(chunk_subject(up.bucket, up.nuid), data, acked)

    def _finish(self, key, up):
        meta = up.meta
        digest = DIGEST_PREFIX + base64.urlsafe_b64encode(up.sha.digest()).decode()
        if up.failed:
            return self._fail(key, up, up.failed, up.reply)
        if meta.get("size") is not None and meta["size"] != up.size:
            return self._fail(key, up, "size mismatch: announced %s, received %d"
                              % (meta["size"], up.size), up.reply)
        want = meta.get("digest")
        if want and want.replace("sha-256=", DIGEST_PREFIX) != digest:
            return self._fail(key, up, "digest mismatch", up.reply)
        try:
            old_meta, _ = self._last_meta(up.bucket, up.name)
        except ObjError:
            old_meta = None
        info = {"name": up.name, "bucket": up.bucket, "nuid": up.nuid, "size": up.size,
                "chunks": up.received, "digest": digest}
        for k in ("description", "headers", "metadata", "options"):
            if meta.get(k):
                info[k] = meta[k]
        info.setdefault("options", {"max_chunk_size": 128 * 1024})

        def stored(hdr, body):
            self._uploads.pop(key, None)
            if up.timer is not None and up.timer.active():
                up.timer.cancel()
            if b'"error"' in body:
                self._purge_chunks(up.bucket, up.nuid)
                self._respond(up.reply, ObjError(500, "storing the meta failed").to_json())
                return
            if old_meta and old_meta.get("nuid") and old_meta["nuid"] != up.nuid:
                self._purge_chunks(up.bucket, old_meta["nuid"])
            self._respond(up.reply, info_json(info))
            self.broker.publish(("$OBJ.%s.info.%s" % (up.bucket, up.name)).encode(),
                                json.dumps(info_json(info)).encode())
        self._send(meta_subject(up.bucket, up.name), json.dumps(
            {k: info[k] for k in _INFO_FIELDS if k in info}).encode(), stored,
            headers=b"NATS/1.0\r\nNats-Rollup: sub\r\n\r\n")

    def _purge_chunks(self, bucket, nuid):
        self._send("$JS.API.STREAM.PURGE.OBJ_%s" % bucket,
                   json.dumps({"filter": chunk_subject(bucket, nuid)}).encode(), lambda h, d: None)

    def _fail(self, key, up, why, reply):
        """Discard the new chunks; an existing object of that name is untouched."""
        self._uploads.pop(key, None)
        if up.timer is not None and up.timer.active():
            up.timer.cancel()
        self._purge_chunks(up.bucket, up.nuid)
        self._respond(reply, ObjError(400, why).to_json())

    def _abandon(self, key):
        up = self._uploads.get(key)
        if up is not None:
            up.timer = None
            log.warn("object upload {b}/{n} abandoned after {t}s", b=up.bucket, n=up.name,
                     t=UPLOAD_TIMEOUT)
            self._fail(key, up, "upload timed out", up.reply)


def _api(verb, bucket):
    return "$JS.API.STREAM.%s.OBJ_%s" % (verb, bucket)


def _upload_needs(bucket, name, nonce):
    """What a client library publishes to store an object: the stream's info,
    the chunks, the meta (a rollup), the old object's meta and chunks purged."""
    return (_api("INFO", bucket), chunk_subject(bucket, nonce), meta_subject(bucket, name),
            _api("MSG.GET", bucket), _api("PURGE", bucket))


# What each request needs the client to be allowed to publish (the JetStream
# requests a client library would make for it).
_NEEDS = {
    "info": lambda bucket, req: (_api("MSG.GET", bucket),),
    "get": lambda bucket, req: (_api("MSG.GET", bucket),),
    "list": lambda bucket, req: (_api("INFO", bucket), _api("MSG.GET", bucket)),
    "delete": lambda bucket, req: (
        _api("MSG.GET", bucket), _api("PURGE", bucket),
        meta_subject(bucket, req["name"]) if isinstance(req.get("name"), str)
        else _api("MSG.GET", bucket)),
}
