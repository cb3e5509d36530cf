"""The SparkSession the ingest (and its tests and benchmark) run in."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
LOG4J_QUIET = os.path.join(HERE, "log4j2.properties")
LOG4J_VERBOSE = os.path.join(HERE, "log4j2-verbose.properties")

# C2 (HotSpot's optimizing JIT) at ten times its default thresholds: in a fresh
# ingest JVM the C2 threads used more CPU than the tasks, compiling the warm-up
# of Spark's whole stack (Janino, Jackson, Parquet, class loading), most of
# which runs only a few thousand times; the parse and write loops still get
# C2. On the 1M-record backfill (local[2], 26 Nov 2026, alternated runs): JVM
# CPU 140.0 / 146.1 s against 160.5 / 172.5 s with the defaults, C2 38-39 s
# against 58-65 s, task CPU not higher; C2 27-39 s in all ten runs with it,
# 43-65 s in all four without (spark/README.md, section 5).
# (C1 only, -XX:TieredStopAtLevel=1, made the parse itself 2.6x slower.)
JIT_OPTIONS = ("-XX:Tier4InvocationThreshold=50000 -XX:Tier4MinInvocationThreshold=6000 "
               "-XX:Tier4CompileThreshold=150000 -XX:Tier4BackEdgeThreshold=400000")

# Settings the ingest relies on; a --conf may not override these.
FIXED_CONF = {
    # Every timestamp the ingest derives is UTC.
    "spark.sql.session.timeZone": "UTC",
}


def default_conf(master, verbose=False):
    cores = os.cpu_count() or 2
    if master.startswith("local[") and master[6:-1].isdigit():
        cores = int(master[6:-1])
    return {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # Small micro-batches on few cores: many shuffle partitions only cost.
        "spark.sql.shuffle.partitions": str(max(2, 2 * cores)),
        "spark.driver.memory": "2g",
        "spark.driver.extraJavaOptions": "-Dlog4j2.configurationFile=file:%s %s"
        % (LOG4J_VERBOSE if verbose else LOG4J_QUIET, JIT_OPTIONS),
        "spark.sql.streaming.stopTimeout": "30s",
        # Partitioned writes without sorting the rows first.
        "spark.sql.maxConcurrentOutputFileWriters": "64",
        # The Python workers' daemon loads pyspark from the installed package
        # (compiled once), not from pyspark.zip (compiled at every start):
        # ~1.5 s off each session's first Python job (spark/daemon.py).
        "spark.python.daemon.module": "natsbroker.spark.daemon",
    }


def build_session(master="local[*]", app="natsbroker-ingest", conf=None, verbose=False):
    """A SparkSession for the ingest; ``conf`` (a dict) overrides the defaults.

    ``spark.driver.extraJavaOptions`` from ``conf`` is appended to ours (which
    select the quiet log4j configuration and set the JIT thresholds) rather
    than replacing it; a JVM option given twice takes the later value."""
    from pyspark.sql import SparkSession

    settings = default_conf(master, verbose)
    for key, value in (conf or {}).items():
        if key == "spark.driver.extraJavaOptions":
            settings[key] = settings[key] + " " + value
        else:
            settings[key] = value
    settings.update(FIXED_CONF)
    # The batch's per-record work runs in Python workers (spark/stage.py): they
    # must be this interpreter, the one natsbroker and pyarrow are installed
    # in, not whatever "python3" comes first on the PATH (PySpark's default).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    for key, value in FIXED_CONF.items():
        spark.conf.set(key, value)
    return spark
