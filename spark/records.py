"""Change-feed lines -> typed records or quarantine rows, all inside the JVM.

A feed file arrives as one row (the text source in ``wholetext`` mode), so the
line number of every record is known exactly: ``posexplode`` of the file's
lines. No Python UDF is involved.

:func:`parse` is the fast path every line takes: ``from_json`` with the typed
record schema (a wrong type in an integer, object or headers field makes
Spark flag the line as corrupt) except for the top-level string fields, read
as VARIANT so that their JSON type is kept (Spark's JSON reader would
silently turn ``"id": 5`` into the string ``"5"``); plus the checks on
required fields, ``op``, ``feed`` and ``data``. :func:`diagnose` then runs on
the bad lines only: it re-parses them with every field as VARIANT and names
the first problem precisely ("field 'seq' must be an integer, got string").

A line is quarantined when it is not a JSON object (or has trailing
characters), when ``id``, ``stream``, ``op`` or ``seq`` is missing, null or
empty, when a known field has the wrong JSON type, when ``op`` is not one of
the six operations, when ``feed`` is not a supported format version (1), or
when ``data`` is not valid base64. Unknown extra fields are ignored. Blank
lines are skipped (they are not records). Leniency: string members *inside*
``kv``/``obj``/``purge`` and header values accept numbers (as Spark's reader
converts them to text).
"""

from pyspark.sql import functions as F, types as T

OPS = ("put", "delete", "purge", "stream_create", "stream_update", "stream_delete")
FEED_VERSIONS = (1,)

# name -> kind: "string", "long", "headers", or a list of (name, kind) for an object.
PURGE_FIELDS = [("filter", "string"), ("upto_seq", "long"), ("keep", "long")]
KV_FIELDS = [("bucket", "string"), ("key", "string"), ("operation", "string"),
             ("revision", "long")]
OBJ_FIELDS = [("bucket", "string"), ("object", "string"), ("event", "string"),
              ("nuid", "string"), ("size", "long"), ("digest", "string")]
FIELDS = [
    ("id", "string"), ("feed", "long"), ("stream", "string"), ("stream_created", "long"),
    ("seq", "long"), ("op", "string"), ("reason", "string"), ("ts", "long"),
    ("subject", "string"), ("headers", "headers"), ("data", "string"),
    ("purge", PURGE_FIELDS), ("config", "string"), ("kv", KV_FIELDS), ("obj", OBJ_FIELDS),
]
REQUIRED = ("id", "stream", "op", "seq")

_SPARK_TYPE = {"string": T.StringType(), "long": T.LongType()}
_SQL_TYPE = {"string": "string", "long": "bigint"}
_VARIANT_NAME = {"string": "STRING", "long": "BIGINT"}
_KIND_TEXT = {"string": "a string", "long": "an integer"}

HEADERS_TYPE = T.MapType(T.StringType(), T.ArrayType(T.StringType()))


def _struct(fields):
    return T.StructType([T.StructField(n, _SPARK_TYPE[k]) for n, k in fields])


# The typed record, as stored in the ``events`` table (plus file/line/time).
RECORD_SCHEMA = T.StructType([
    T.StructField("id", T.StringType()),
    T.StructField("feed", T.IntegerType()),
    T.StructField("stream", T.StringType()),
    T.StructField("stream_created", T.LongType()),
    T.StructField("seq", T.LongType()),
    T.StructField("op", T.StringType()),
    T.StructField("reason", T.StringType()),
    T.StructField("ts", T.LongType()),
    T.StructField("subject", T.StringType()),
    T.StructField("headers", HEADERS_TYPE),
    T.StructField("data", T.BinaryType()),
    T.StructField("purge", _struct(PURGE_FIELDS)),
    T.StructField("config", T.StringType()),
    T.StructField("kv", _struct(KV_FIELDS)),
    T.StructField("obj", _struct(OBJ_FIELDS)),
])

_PARSE_SCHEMA = T.StructType(
    [T.StructField(name, T.VariantType()) for name, _ in FIELDS]
    + [T.StructField("_corrupt", T.StringType())])

_JSON_OPTIONS = {
    "columnNameOfCorruptRecord": "_corrupt",
    "mode": "PERMISSIVE",
    # Strict JSON: no 'single quotes', no NaN.
    "allowSingleQuotes": "false",
    "allowNonNumericNumbers": "false",
}


def _sql_str(s):
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _type_text(t):
    """SQL: a human name for a schema_of_variant() result ``t``."""
    return ("CASE WHEN {t} = 'BIGINT' THEN 'integer' "
            "WHEN {t} RLIKE '^DECIMAL\\\\([0-9]+,0\\\\)$' THEN 'an out-of-range integer' "
            "WHEN {t} LIKE 'DECIMAL%' OR {t} IN ('DOUBLE', 'FLOAT') THEN 'number' "
            "WHEN {t} LIKE 'OBJECT%' THEN 'object' WHEN {t} LIKE 'ARRAY%' THEN 'array' "
            "ELSE lower({t}) END").format(t=t)


def _paths():
    """(column name, variant SQL, label, kind) of every checked value."""
    out = []
    for name, kind in FIELDS:
        out.append(("t_" + name, "j.%s" % name, name, kind if isinstance(kind, str) else "object"))
        if not isinstance(kind, str):
            for sub, sub_kind in kind:
                out.append(("t_%s_%s" % (name, sub),
                            "try_variant_get(j.%s, '$.%s', 'variant')" % (name, sub),
                            "%s.%s" % (name, sub), sub_kind))
    return out


def _checks():
    """Ordered (failure condition, message) SQL pairs over the ``t_*`` type
    columns (schema_of_variant of each value, computed once); the first
    failing one wins."""
    out = [
        ("j._corrupt IS NOT NULL",
         "CASE WHEN try_parse_json(raw) IS NULL THEN 'invalid JSON' "
         "ELSE 'not a JSON object' END"),
        # from_json ignores anything after the object; a JSON object ends with '}'.
        ("NOT endswith(rtrim(raw), '}')",
         "'invalid JSON: trailing characters after the object'"),
    ]
    for name in REQUIRED:
        out.append(("coalesce(t_%s, 'VOID') = 'VOID'" % name,
                    _sql_str("missing required field '%s'" % name)))
    for col, v, label, kind in _paths():
        if kind in ("string", "long"):
            cond = "t_x NOT IN (%s, 'VOID')" % _sql_str(_VARIANT_NAME[kind])
            text = "field '%s' must be %s, got " % (label, _KIND_TEXT[kind])
        elif kind == "headers":
            cond = ("t_x <> 'VOID' AND coalesce(exists(map_values(try_variant_get("
                    "%s, '$', 'map<string,array<string>>')), x -> x IS NULL), true)" % v)
            text = None
        else:
            cond = "t_x <> 'VOID' AND t_x NOT LIKE 'OBJECT%'"
            text = "field '%s' must be an object, got " % label
        if text is None:
            msg = ("concat('field ''headers'' must be an object of string arrays', CASE WHEN %s "
                   "LIKE 'OBJECT%%' THEN '' ELSE concat(', got ', %s) END)" % (col, _type_text(col)))
            msg = msg.replace("''headers''", "\\'headers\\'")
        else:
            msg = "concat(%s, %s)" % (_sql_str(text), _type_text(col))
        out.append((cond.replace("t_x", col), msg))
    for name in ("id", "stream", "op"):
        out.append(("v_%s = ''" % name, _sql_str("field '%s' is empty" % name)))
    out.append(("v_op NOT IN (%s)" % ", ".join(map(_sql_str, OPS)),
                "concat('unknown op \"', v_op, '\"')"))
    out.append(("try_variant_get(j.feed, '$', 'bigint') NOT IN (%s)"
                % ", ".join(str(v) for v in FEED_VERSIONS),
                "concat('unsupported feed format version ', "
                "cast(try_variant_get(j.feed, '$', 'bigint') AS string))"))
    out.append(("v_data IS NOT NULL AND b_data IS NULL",
                _sql_str("field 'data' is not valid base64")))
    return out


def split_lines(files_df, file_col, value_col="value"):
    """One row per file (``wholetext``) -> (file, line, raw, blank).

    ``line`` is 1-based; a trailing CR is dropped; blank lines are kept (with
    ``blank`` true) so that a file holding none still shows up in the batch's
    file list."""
    rows = files_df.select(file_col.alias("file"),
                           F.posexplode(F.split(F.col(value_col), "\n")).alias("pos", "raw"))
    return rows.select(
        "file",
        (F.col("pos") + 1).cast("long").alias("line"),
        # The regular expression only where there is a CR at all (same
        # result): run on every line, it decoded, scanned and re-encoded each
        # one, ~30% of the parse's task CPU (spark/README.md, section 5).
        F.when(F.col("raw").contains("\r"), F.regexp_replace(F.col("raw"), "\r$", ""))
        .otherwise(F.col("raw")).alias("raw"),
    ).withColumn("blank", F.trim(F.col("raw")) == "")


# The fast path: typed from_json (a wrong type in an integer, object or headers
# field makes Spark flag the line in _corrupt), VARIANT for the top-level
# string fields only (Spark would silently turn 5 into "5" for a string field).
STRING_FIELDS = ("id", "stream", "op", "reason", "subject", "data", "config")
_FAST_SCHEMA = T.StructType(
    [T.StructField(f.name, T.VariantType()) if f.name in STRING_FIELDS
     else (T.StructField(f.name, T.LongType()) if f.name == "feed" else f)
     for f in RECORD_SCHEMA.fields]
    + [T.StructField("_corrupt", T.StringType())])


def parse(lines_df):
    """(file, line, raw, blank) -> parsed rows, cheaply.

    Columns: every RECORD_SCHEMA field (null unless the line is a good
    record), ``file``, ``line``, ``blank``, ``bad`` (the line is to be
    quarantined) and ``raw`` (kept only for bad lines). Why a line is bad is
    worked out afterwards by :func:`diagnose`, on the bad lines only."""
    j = F.from_json(F.col("raw"), _FAST_SCHEMA, _JSON_OPTIONS)
    df = lines_df.select("file", "line", "raw", "blank", F.when(~F.col("blank"), j).alias("j"))
    df = df.select(
        "file", "line", "raw", "blank", "j",
        *[F.expr("try_variant_get(j.%s, '$', 'string')" % f).alias("v_" + f) for f in STRING_FIELDS],
        *[F.expr("schema_of_variant(j.%s) IN ('STRING', 'VOID')" % f).alias("s_" + f)
          for f in STRING_FIELDS])
    df = df.withColumn("b_data", F.expr("try_to_binary(v_data, 'base64')"))
    # endswith(raw, ...) first (same result): rtrim copies the line.
    ok = F.expr(
        "j._corrupt IS NULL AND (endswith(raw, '}') OR endswith(rtrim(raw), '}')) AND "
        + " AND ".join("coalesce(s_%s, true)" % f for f in STRING_FIELDS)
        + " AND v_id <> '' AND v_stream <> '' AND j.seq IS NOT NULL"
        + " AND v_op IN (%s)" % ", ".join(map(_sql_str, OPS))
        + " AND (j.feed IS NULL OR j.feed IN (%s))" % ", ".join(map(str, FEED_VERSIONS))
        + " AND (v_data IS NULL OR b_data IS NOT NULL)")
    df = df.withColumn("bad", ~F.col("blank") & ~F.coalesce(ok, F.lit(False)))
    good = ~F.col("bad") & ~F.col("blank")
    cols = []
    for f in RECORD_SCHEMA.fields:
        if f.name == "data":
            c = F.col("b_data")
        elif f.name in STRING_FIELDS:
            c = F.col("v_" + f.name)
        else:
            c = F.col("j." + f.name).cast(f.dataType)
        cols.append(F.when(good, c).alias(f.name))
    return df.select(*cols, "file", "line", "blank", "bad",
                     F.when(F.col("bad"), F.col("raw")).alias("raw"))


def diagnose(bad_df):
    """Rows with ``raw`` (lines :func:`parse` found bad) -> the same rows plus
    ``error``, the first problem found. Parses each line again into VARIANT
    fields, which keeps every value's JSON type, and checks every field."""
    j = F.from_json(F.col("raw"), _PARSE_SCHEMA, _JSON_OPTIONS)
    df = bad_df.withColumn("j", j)
    types = [F.expr("schema_of_variant(%s)" % v).alias(col) for col, v, _, _ in _paths()]
    df = df.select(
        "*", *types,
        F.expr("try_variant_get(j.id, '$', 'string')").alias("v_id"),
        F.expr("try_variant_get(j.stream, '$', 'string')").alias("v_stream"),
        F.expr("try_variant_get(j.op, '$', 'string')").alias("v_op"),
        F.expr("try_variant_get(j.data, '$', 'string')").alias("v_data"))
    df = df.withColumn("b_data", F.expr("try_to_binary(v_data, 'base64')"))
    err = F.coalesce(*[F.when(F.expr(cond), F.expr(msg)) for cond, msg in _checks()],
                     F.lit("record does not match the feed schema"))
    return df.select(*bad_df.columns, err.alias("error"))
