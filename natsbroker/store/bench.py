"""Micro-benchmark of the message stores: ``python -m natsbroker.store.bench``.

Appends small messages in batches with one commit per batch (the JetStream
publish path: one group commit per reactor turn), then reads them back, walks
them with a literal filter, removes the older half from the head (acks /
limits) and purges. Prints operations per second.
"""

import argparse
import shutil
import tempfile
import time

from twisted.internet.task import Clock

from natsbroker.store.leveldb import LevelDBStore
from natsbroker.store.memory import MemoryStore


def bench(label, store, n, batch, size):
    st = store.create_stream("BENCH")
    subj = b"orders.new"
    data = b"x" * size
    ts = time.time_ns()
    t0 = time.perf_counter()
    for _ in range(n // batch):
        for _ in range(batch):
            st.append(subj, b"", data, ts)
        store.commit()
    t_append = time.perf_counter() - t0
    t0 = time.perf_counter()
    for s in range(1, n + 1):
        st.load(s)
    t_load = time.perf_counter() - t0
    t0 = time.perf_counter()
    m = st.load_next(0, subj)
    while m is not None:
        m = st.load_next(m.seq + 1, subj)
    t_next = time.perf_counter() - t0
    t0 = time.perf_counter()
    for s in range(1, n // 2 + 1):
        st.remove(s)
        if s % batch == 0:
            store.commit()
    store.commit()
    t_remove = time.perf_counter() - t0
    t0 = time.perf_counter()
    st.purge()
    store.commit()
    t_purge = time.perf_counter() - t0
    print("%-34s append+commit %9.0f/s  load %9.0f/s  load_next %9.0f/s  remove %9.0f/s  purge %6.1f ms"
          % (label, n / t_append, n / t_load, n / t_next, n / 2 / t_remove, t_purge * 1000))
    store.close()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=200_000, help="messages")
    p.add_argument("--size", type=int, default=128, help="payload bytes")
    p.add_argument("--batch", type=int, action="append", help="messages per commit (repeatable)")
    p.add_argument("--dir", default=None, help="where LevelDB stores go (default: a temp dir)")
    a = p.parse_args(argv)
    for batch in a.batch or [1000, 100, 10, 1]:
        n = a.n if batch >= 100 else min(a.n, batch * 20_000)
        bench("memory batch=%d" % batch, MemoryStore(reactor=Clock()), n, batch, a.size)
        for sync in (True, False):
            d = tempfile.mkdtemp(prefix="nb-store-bench-", dir=a.dir)
            try:
                bench("leveldb sync=%s batch=%d" % (sync, batch),
                      LevelDBStore(d, sync=sync, reactor=Clock()), n, batch, a.size)
            finally:
                shutil.rmtree(d, True)


if __name__ == "__main__":
    main()
