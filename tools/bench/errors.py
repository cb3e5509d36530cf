"""The one error a benchmark run fails with."""


class BenchError(Exception):
    """A benchmark run failed (timeout, protocol error, lost messages...)."""
