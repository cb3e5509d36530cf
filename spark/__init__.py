"""PySpark ingest of natsbroker's change feed into Parquet tables (see README.md).

Installed as ``natsbroker.spark``; the command is ``natsbroker-ingest``.
"""

# In a source tree the repository root is on sys.path (editable installs, tests),
# which makes this directory importable as a bare `spark` as well: every module
# would then exist twice, under two names.
if __name__ != "natsbroker.spark":
    raise ImportError("import natsbroker.spark, not %s" % __name__)
