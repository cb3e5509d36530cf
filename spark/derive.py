"""The derived tables, recomputed from ``events``: KV state and the object catalog.

Both follow the same rule: a bucket is the *current incarnation* of its
stream (the largest ``stream_created`` seen; nothing if that incarnation was
deleted), and only messages that still exist count. A message (a ``put``
record) no longer exists when

* a ``delete`` record names it (same stream, incarnation and seq), or
* a ``purge`` record of the incarnation removed it: the message existed then
  (its seq <= the purge's seq, the stream's last sequence at the time), is
  below ``purge.upto_seq`` (if set), matches ``purge.filter`` (NATS subject
  wildcards; all when null) and is not among the newest ``purge.keep`` such
  messages. (Messages individually deleted are left out of that ranking;
  the interplay of several purges with ``keep`` is approximated by ranking
  over every message still not individually deleted.)

This is what a KV ``get``/object ``info`` sees: the newest message still
stored for the key. So per-key rollups, ``KV-Operation`` DEL/PURGE markers,
bucket TTL (``max_age``) and ``purge_deletes`` all come out right.

kv: one row per (bucket, key) whose newest surviving record (by revision,
then feed order) is a PUT. DEL and PURGE remove the key (no tombstone rows).

objects: one row per (bucket, object): the newest surviving meta record;
``deleted`` is true when that is a delete. ``chunks``/``chunk_bytes`` count
the surviving chunk records of the meta's ``nuid``.
"""

from pyspark.sql import Window, functions as F

# NATS subject filter -> anchored Java regex (``*`` one token, ``>`` the rest).
_FILTER_REGEX = (
    "concat('^\\\\Q', regexp_replace(regexp_replace(purge.filter, "
    "'(^|\\\\.)\\\\*(?=\\\\.|$)', '$1\\\\\\\\E[^.]+\\\\\\\\Q'), "
    "'(^|\\\\.)>$', '$1\\\\\\\\E.+\\\\\\\\Q'), '\\\\E$')")


def _current(events):
    """(stream, stream_created) of each stream's live incarnation."""
    latest = events.groupBy("stream").agg(F.max("stream_created").alias("stream_created"))
    dropped = events.where(F.col("op") == "stream_delete") \
        .select("stream", "stream_created").distinct()
    return latest.join(dropped, ["stream", "stream_created"], "left_anti")


def surviving_puts(events):
    """``put`` records of current incarnations whose message still exists."""
    current = _current(events)
    ev = events.join(current, ["stream", "stream_created"], "left_semi")
    puts = ev.where(F.col("op") == "put")
    deleted = ev.where(F.col("op") == "delete").select("stream", "stream_created", "seq")
    alive = puts.join(deleted, ["stream", "stream_created", "seq"], "left_anti")
    purges = ev.where(F.col("op") == "purge").select(
        "stream", "stream_created", F.col("id").alias("purge_id"),
        F.col("seq").alias("purge_seq"), "purge")
    m = alive.select("stream", "stream_created", "seq", "subject").alias("m")
    p = purges.alias("p")
    cand = m.join(
        p,
        (F.col("m.stream") == F.col("p.stream"))
        & (F.col("m.stream_created") == F.col("p.stream_created"))
        & (F.col("m.seq") <= F.col("p.purge_seq"))
        & (F.col("p.purge.upto_seq").isNull() | (F.col("m.seq") < F.col("p.purge.upto_seq")))
        & (F.col("p.purge.filter").isNull() | (F.col("p.purge.filter") == "")
           | F.expr("coalesce(m.subject RLIKE %s, false)" % _FILTER_REGEX.replace("purge.", "p.purge."))))
    rank = F.row_number().over(Window.partitionBy("p.purge_id").orderBy(F.col("m.seq").desc()))
    removed = cand.select("m.stream", "m.stream_created", "m.seq",
                          F.coalesce(F.col("p.purge.keep"), F.lit(0)).alias("keep"),
                          rank.alias("rank")) \
        .where(F.col("rank") > F.col("keep")) \
        .select("stream", "stream_created", "seq").distinct()
    return alive.join(removed, ["stream", "stream_created", "seq"], "left_anti")


def _newest(df, keys, order):
    w = Window.partitionBy(*keys).orderBy(*order)
    return df.withColumn("_rn", F.row_number().over(w)).where(F.col("_rn") == 1).drop("_rn")


def kv_state(events):
    """``events`` of KV_ streams -> the kv table."""
    alive = surviving_puts(events).where(F.col("kv").isNotNull() & F.col("kv.key").isNotNull())
    alive = alive.withColumn("bucket", F.coalesce(F.col("kv.bucket"), F.expr("substring(stream, 4)")))
    newest = _newest(alive, ["bucket", "kv.key"],
                     [F.col("kv.revision").desc_nulls_last(), F.col("file").desc(), F.col("line").desc()])
    return newest.where(F.upper(F.col("kv.operation")) == "PUT").select(
        "bucket", F.col("kv.key").alias("key"), F.col("data").alias("value"),
        F.coalesce(F.col("kv.revision"), F.col("seq")).alias("revision"),
        "ts", F.expr("timestamp_micros(ts div 1000)").alias("time"),
        "stream", "stream_created", "seq")


def object_catalog(events):
    """``events`` of OBJ_ streams -> the objects table."""
    alive = surviving_puts(events).where(F.col("obj").isNotNull())
    alive = alive.withColumn("bucket", F.coalesce(F.col("obj.bucket"), F.expr("substring(stream, 5)")))
    metas = alive.where(F.col("obj.event").isin("put", "delete") & F.col("obj.object").isNotNull())
    newest = _newest(metas, ["bucket", "obj.object"],
                     [F.col("seq").desc(), F.col("file").desc(), F.col("line").desc()])
    chunks = alive.where(F.col("obj.event") == "chunk").groupBy(
        "bucket", F.col("obj.nuid").alias("nuid")).agg(
        F.count(F.lit(1)).alias("chunks"), F.sum("obj.size").alias("chunk_bytes"))
    catalog = newest.select(
        "bucket", F.col("obj.object").alias("object"), F.col("obj.nuid").alias("nuid"),
        F.col("obj.size").alias("size"), F.col("obj.digest").alias("digest"),
        (F.col("obj.event") == "delete").alias("deleted"),
        F.col("seq").alias("revision"), "ts", F.expr("timestamp_micros(ts div 1000)").alias("time"),
        F.expr("cast(data AS string)").alias("meta"), "stream", "stream_created")
    return catalog.join(chunks, ["bucket", "nuid"], "left").select(
        "bucket", "object", "nuid", "size", "digest", "deleted",
        F.coalesce("chunks", F.lit(0)).cast("long").alias("chunks"),
        F.coalesce("chunk_bytes", F.lit(0)).cast("long").alias("chunk_bytes"),
        "revision", "ts", "time", "meta", "stream", "stream_created")
