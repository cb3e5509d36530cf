"""Large messages: delivery time by size, and other clients' PING latency meanwhile.

    python -m tools.bench.largemsg [--sizes 1,4,16,32,60] [--repeat 3]

Both servers run with ``max_payload: 64MB`` on loopback. For each size a
publisher sends one message of that size to a subscriber (both raw sockets);
the time is from the first byte sent to the last byte of the MSG frame
received. Meanwhile a third client sends a PING as soon as it has its PONG
and records each round trip: a server that holds its reactor (or its
goroutines) while it handles the big message shows it there. Reported per
size: median delivery seconds on each server, the ratio natsbroker /
nats-server (lower is better here), and the PING round trip p50/p99/max.
"""

import argparse
import multiprocessing
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from tools.bench.servers import Server, default_candidate_cmd, find_nats_server

MB = 1024 * 1024


def _conn(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = b""
    while b"\r\n" not in buf:
        buf += s.recv(65536)
    s.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\nPING\r\n')
    buf = b""
    while b"PONG\r\n" not in buf:
        buf += s.recv(65536)
    return s


def _pinger(port, stop, out):
    # A process of its own: a thread would share the GIL with the reader
    # and the publisher and measure them, not the server.
    rtts = []
    s = _conn(port)
    try:
        while not stop.is_set():
            t = time.perf_counter()
            s.sendall(b"PING\r\n")
            got = b""
            while not got.endswith(b"PONG\r\n"):
                chunk = s.recv(4096)
                if not chunk:
                    return
                got += chunk
            rtts.append(time.perf_counter() - t)
            time.sleep(0.001)
    finally:
        s.close()
        out.put(rtts)


def deliver_once(port, size):
    """Seconds from the publish's first byte to the delivery's last byte."""
    sub = _conn(port)
    sub.sendall(b"SUB big 1\r\nPING\r\n")
    got = b""
    while b"PONG\r\n" not in got:
        got += sub.recv(65536)
    pub = _conn(port)
    frame = b"PUB big %d\r\n" % size + b"x" * size + b"\r\n"
    want = len(b"MSG big 1 %d\r\n" % size) + size + 2
    done = threading.Event()
    took = []

    def read():
        n = 0
        view = bytearray(1 << 20)
        while n < want:
            r = sub.recv_into(view)
            if not r:
                break
            n += r
        took.append(time.perf_counter())
        done.set()

    t = threading.Thread(target=read)
    t.start()
    start = time.perf_counter()
    pub.sendall(frame)
    done.wait(300)
    t.join(5)
    pub.close()
    sub.close()
    if not took:
        raise RuntimeError("the message of %d bytes never arrived" % size)
    return took[0] - start


def measure(server, sizes, repeat):
    out = {}
    for size in sizes:
        stop = multiprocessing.Event()
        results = multiprocessing.Queue()
        pinger = multiprocessing.Process(target=_pinger, args=(server.client_port(), stop, results))
        pinger.start()
        time.sleep(0.2)  # let the pinger connect before the message goes
        times = [deliver_once(server.client_port(), size) for _ in range(repeat)]
        stop.set()
        rtts = sorted(results.get(timeout=30))
        pinger.join(10)
        out[size] = (statistics.median(times), rtts)
    return out


def _pct(values, q):
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(q * len(values)))]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1,4,16,32,60", help="MiB, comma-separated")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    sizes = [int(float(x) * MB) for x in args.sizes.split(",")]
    conf = Path(tempfile.mkdtemp(prefix="bench-large-")) / "large.conf"
    conf.write_text("max_payload: 64MB\nmax_pending: 256MB\n")

    def files(role, d):
        return ["-c", str(conf)], {}

    results = {}
    for role, name, cmd in (("reference", "nats-server", [find_nats_server()]),
                            ("candidate", "natsbroker", default_candidate_cmd())):
        server = Server(role, name, cmd)
        server.start(server_args=files)
        try:
            results[name] = measure(server, sizes, args.repeat)
        finally:
            server.close()
    print("%-6s %12s %12s %6s   %s" % ("MiB", "nats-server s", "natsbroker s", "ratio",
                                        "PING rtt ms p50/p99/max: nats-server | natsbroker"))
    for size in sizes:
        ref, rtt_ref = results["nats-server"][size]
        cand, rtt_cand = results["natsbroker"][size]
        print("%-6g %12.3f %12.3f %6.2f   %s | %s" % (
            size / MB, ref, cand, cand / ref,
            "/".join("%.2f" % (1000 * _pct(rtt_ref, q)) for q in (0.5, 0.99, 1.0)),
            "/".join("%.2f" % (1000 * _pct(rtt_cand, q)) for q in (0.5, 0.99, 1.0))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
