"""PySpark ingest of natsbroker's change feed into Parquet tables (see README.md)."""
