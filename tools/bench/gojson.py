"""Decoding ``$JS.API`` request bodies: seconds per request.

Times ``marshal.decode_request`` (what the JetStream API runs on a request
body, in the reactor) on large bodies an attacker or a big client may send
(a STREAM.CREATE with 100k subjects, Go-escaped as nats.go writes them; a
1 MB metadata map; a 1 MB array; a 1 MB body with a type error at the end)
and per request on small typical ones (CONSUMER.CREATE, STREAM.INFO, a pull
request), best of ``--repeat``.  Run once per build to compare:

    PYTHONPATH=$PWD .venv/bin/python -m tools.bench.gojson [--repeat 5]
"""

import argparse
import json
import time

from natsbroker.jetstream import (
    api_models as AM,
    consumer_models as CM,
    consumer_requests as CR,
    marshal,
    stream_models as SM,
)
from natsbroker.jetstream.errors import ApiError


def _go(obj):
    # nats.go marshals with HTML escaping: "foo.>" goes out as "foo.\u003e".
    return json.dumps(obj, separators=(",", ":")).replace(">", "\\u003e").encode()


def large_bodies():
    subjects = ["orders.%d.>" % i for i in range(100_000)]
    create = {"name": "BIG", "subjects": subjects, "retention": "limits", "storage": "file",
              "discard": "old", "max_msgs": -1, "num_replicas": 1}
    meta = {"name": "META", "subjects": ["m.>"], "retention": "limits", "storage": "memory",
            "metadata": {"key-%06d" % i: "value-%d" % i for i in range(40_000)}}
    array = {"name": "ARR", "subjects": ["x%d" % i for i in range(200_000)]}
    bad = dict(create, max_msgs="oops")
    return [("STREAM.CREATE 100k subjects", _go(create), SM.StreamConfig),
            ("STREAM.CREATE 40k metadata", _go(meta), SM.StreamConfig),
            ("STREAM.CREATE 200k-array", _go(array), SM.StreamConfig),
            ("type error after 1 MB", _go(bad), SM.StreamConfig),
            ("1 MB top-level array", b"[" + b",".join(b"1" for _ in range(400_000)) + b"]",
             SM.StreamConfig)] + malformed_bodies(_go({"subjects": subjects}))


def malformed_bodies(body):
    """Bodies only the exact parser can judge (Go's error text and offset),
    each with the problem near the end where the whole value must be read."""
    small = b"[" + b",".join(b"[1]" for _ in range(250_000))
    return [(name, data, SM.StreamConfig) for name, data in [
        ("bad last byte", body[:-1] + b"x"),
        ("truncated", body[:-1]),
        ("bad escape at end", body[:-2] + b'\\q"]}'),
        ("NaN at end", body[:-1] + b',"max_age":NaN}'),
        ("bad number at end", body[:-1] + b',"max_age":1.}'),
        ("stray ] in the middle", body[:len(body) // 2] + b"]" + body[len(body) // 2:]),
        ("250k [1] then EOF", small),
        ("1 MB of spaces then x", b"[" + b" " * 1_000_000 + b"x"),
        ("1 MB digits then x", b"[" + b"1" * 1_000_000 + b"x"),
        ("valid, invalid UTF-8", body[:-2] + b'\xff"]}'),
        ("valid, lone surrogate", body[:-2] + b'\\ud800"]}'),
        ("escaped enum value", body[:-1] + b',"retention":"lim\\u0069ts"}'),
        ("enum as an object", body[:-1] + b',"retention":{"a":[1, 2]}}'),
        ("enum with invalid UTF-8", body[:-1] + b',"retention":"\xff"}'),
        ("valid, 900 levels deep", b'{"subjects":' + b"[" * 900 + body[12:-1] + b"]" * 900 + b"}"),
        ("valid, 3000 levels deep", b'{"subjects":' + b"[" * 3000 + body[12:-1] + b"]" * 3000 + b"}"),
    ]]


def small_bodies():
    consumer = {"stream_name": "ORDERS", "config": {
        "durable_name": "worker", "deliver_policy": "all", "ack_policy": "explicit",
        "ack_wait": 30_000_000_000, "max_deliver": -1, "filter_subject": "orders.>",
        "replay_policy": "instant", "max_ack_pending": 1000, "num_replicas": 0},
        "action": "create"}
    return [("CONSUMER.CREATE", _go(consumer), CM.CreateConsumerRequest),
            ("STREAM.INFO", _go({"subjects_filter": "orders.>", "offset": 0}),
             AM.StreamInfoRequest)]


def _decode(body, cls):
    try:
        marshal.decode_request(body, cls)
    except ApiError:
        pass


def best(fn, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--small", type=int, default=10_000, help="small requests per timing")
    args = ap.parse_args()
    for name, body, cls in large_bodies():
        t = best(lambda: _decode(body, cls), args.repeat)
        print("%-32s %8d bytes %9.4f s" % (name, len(body), t))
    for name, body, cls in small_bodies():
        t = best(lambda: [_decode(body, cls) for _ in range(args.small)], args.repeat)
        print("%-32s %8d bytes %9.2f us/request" % (name, len(body), t / args.small * 1e6))
    pull = b'{"batch":10,"expires":30000000000,"idle_heartbeat":5000000000}'
    t = best(lambda: [CR.parse_next_request(pull) for _ in range(args.small)], args.repeat)
    print("%-32s %8d bytes %9.2f us/request" % ("CONSUMER.MSG.NEXT", len(pull), t / args.small * 1e6))


if __name__ == "__main__":
    main()
