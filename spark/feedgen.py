"""Synthetic change-feed files, in the format of natsbroker/changefeed/plugin.py.

For tests and the benchmark: records are built like the plugin builds them
(every key present, unused ones null; ``id`` = ``stream@created:op:seq``,
``:ts`` appended for purges and stream events) and files are completed like
the plugin completes them (``feed-<n>.tmp``, fsync, rename to
``feed-<n>.jsonl``).
"""

import base64
import json
import os

from natsbroker.changefeed.writer import keep_mtime_order

KEYS = ("id", "feed", "stream", "stream_created", "seq", "op", "reason", "ts", "subject",
        "headers", "data", "purge", "config", "kv", "obj")


def record(stream, created, op, seq, ts, **fields):
    rid = "%s@%d:%s:%d" % (stream, created, op, seq)
    if op not in ("put", "delete"):
        rid += ":%d" % ts
    rec = dict.fromkeys(KEYS)
    rec.update(id=rid, feed=1, stream=stream, stream_created=created, seq=seq, op=op, ts=ts)
    rec.update(fields)
    return rec


def put(stream, created, seq, subject, data, ts, headers=None, **extra):
    return record(stream, created, "put", seq, ts, subject=subject, headers=headers,
                  data=base64.b64encode(data).decode(), **extra)


def delete(stream, created, seq, subject, ts, reason="api", headers=None):
    return record(stream, created, "delete", seq, ts, reason=reason, subject=subject,
                  headers=headers)


def purge(stream, created, last_seq, ts, filter=None, upto_seq=None, keep=None, reason="api"):
    return record(stream, created, "purge", last_seq, ts, reason=reason,
                  purge={"filter": filter, "upto_seq": upto_seq, "keep": keep})


def stream_event(stream, created, op, last_seq, ts, config=None):
    cfg = json.dumps(config, separators=(",", ":")) if config is not None else None
    return record(stream, created, op, last_seq, ts, config=cfg)


def kv_put(bucket, created, seq, key, value, ts, operation="PUT"):
    headers = None if operation == "PUT" else {"KV-Operation": [operation]}
    return put("KV_" + bucket, created, seq, "$KV.%s.%s" % (bucket, key), value, ts,
               headers=headers,
               kv={"bucket": bucket, "key": key, "operation": operation, "revision": seq})


def obj_meta(bucket, created, seq, name, nuid, size, ts, deleted=False, digest=None):
    meta = {"name": name, "bucket": bucket, "nuid": nuid, "size": size, "chunks": 1,
            "digest": digest, "deleted": deleted or None}
    subject = "$O.%s.M.%s" % (bucket, base64.urlsafe_b64encode(name.encode()).decode())
    return put("OBJ_" + bucket, created, seq, subject, json.dumps(meta).encode(), ts,
               obj={"bucket": bucket, "object": name, "event": "delete" if deleted else "put",
                    "nuid": nuid, "size": size, "digest": digest})


def obj_chunk(bucket, created, seq, nuid, data, ts):
    return put("OBJ_" + bucket, created, seq, "$O.%s.C.%s" % (bucket, nuid), data, ts,
               obj={"bucket": bucket, "object": None, "event": "chunk", "nuid": nuid,
                    "size": len(data), "digest": None})


def dumps(rec):
    return json.dumps(rec, separators=(",", ":"))


class FeedWriter:
    """Writes numbered feed files into ``directory`` the way the broker does."""

    def __init__(self, directory, start=1):
        self.dir = directory
        self.no = start - 1
        os.makedirs(directory, exist_ok=True)

    def path(self, no, ext="jsonl"):
        return os.path.join(self.dir, "feed-%020d.%s" % (no, ext))

    def write(self, lines, sync=True):
        """Complete one file holding ``lines`` (dicts, or raw strings written
        as they are); returns its path."""
        self.no += 1
        tmp = self.path(self.no, "tmp")
        with open(tmp, "w") as f:
            for line in lines:
                f.write((line if isinstance(line, str) else dumps(line)) + "\n")
            f.flush()
            # As the broker's writer does (files written in one loop would
            # tie in Spark's millisecond order).
            keep_mtime_order(self.path(self.no - 1), f.fileno())
            if sync:
                os.fsync(f.fileno())
        final = self.path(self.no)
        os.rename(tmp, final)
        return final
