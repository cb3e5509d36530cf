"""Security events in the server log, as nats-server writes them.

Failed logins (naming the user, never the secret), permission violations,
plaintext passwords in the config and slow consumers are logged with the
client's address and cid in front; lines an outsider can cause at will are
rate-limited.
"""

import re
import time

from twisted.internet import task
from twisted.logger import globalLogPublisher

from natsbroker.ratelog import RateLimitedLog
from tests.support.raw import Wire
from tests.support.servers import ServerProcess

CONF = """
authorization { users = [
  {user: a, password: b, permissions: {publish: "ok.>", subscribe: "ok.>"}}
  {user: hashed, password: "$2a$11$W2zko751KUvVy59mUTWmpOdWjpEm5qhcCZRd05GjI/sSOT.xtiHyG"}
] }
"""

ATTEMPTS = [
    b'CONNECT {"user":"a","pass":"wrong"}\r\nPING\r\n',
    b'CONNECT {"user":"nobody","pass":"x"}\r\nPING\r\n',
    b"CONNECT {}\r\nPING\r\n",
    b'CONNECT {"auth_token":"guess"}\r\nPING\r\n',
    b"PING\r\n",  # no CONNECT at all
    b'CONNECT {"user":"a","pass":"b","verbose":false}\r\nPUB no.x 1\r\na\r\nSUB no.y 7\r\n'
    b"SUB no.z q1 8\r\nSUB ok.fine 9\r\nPING\r\n",
]

_LINE = re.compile(r"^\[\d+\] \S+ \S+ \[(\w+)\] (.*)$")
_PEER = re.compile(r"127\.0\.0\.1:\d+ - cid:\d+")


def security_lines(log):
    out = []
    for line in log.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        level, text = m.groups()
        if any(k in text for k in ("authentication error", "Violation", "Plaintext passwords")):
            out.append((level, _PEER.sub("PEER", text)))
    return out


def _converse(port, data):
    s = Wire(port)
    try:
        s.send(data)
        # Until the PONG, an -ERR that ends what came, or the close.
        return s.read_until(lambda got: b"PONG\r\n" in got or got.endswith(b"'\r\n"))
    finally:
        s.close()


def test_security_lines_match_nats_server(tmp_path):
    conf = tmp_path / "sec.conf"
    conf.write_text(CONF)
    lines = {}
    for kind in ("nats-server", "natsbroker"):
        with ServerProcess(kind, ["-c", str(conf)]) as s:
            for data in ATTEMPTS:
                _converse(s.port, data)
            want = len(ATTEMPTS) - 1 + 3  # five failed logins, three violations
            end = time.monotonic() + 10
            while len(security_lines(s.log())) < want + 1 and time.monotonic() < end:
                time.sleep(0.05)
            lines[kind] = security_lines(s.log())
    assert lines["natsbroker"] == lines["nats-server"]
    assert ("ERR", 'PEER - authentication error - User "a"') in lines["natsbroker"]
    assert ("ERR", 'PEER - authentication error - Token "[REDACTED]"') in lines["natsbroker"]
    assert ("WRN", "Plaintext passwords detected, use nkeys or bcrypt") in lines["natsbroker"]
    assert not any("wrong" in text or "guess" in text for _, text in lines["natsbroker"])


def test_bcrypt_passwords_raise_no_warning(tmp_path):
    conf = tmp_path / "hashed.conf"
    conf.write_text('authorization { user: a, password: "$2a$11$W2zko751KUvVy59mUTWmpOdWjpEm5qhcC'
                    'ZRd05GjI/sSOT.xtiHyG" }\n')
    with ServerProcess("natsbroker", ["-c", str(conf)]) as s:
        pass
    assert "Plaintext passwords" not in s.log()


def test_failed_logins_are_rate_limited():
    """A burst of bad logins writes at most ``burst`` lines per second, then
    one line with the count of those left out; the next window logs again."""
    clock = task.Clock()
    events = []
    globalLogPublisher.addObserver(events.append)
    try:
        rl = RateLimitedLog(clock, burst=5, period=1.0)
        written = [rl.error("authentication", "{p} - authentication error", p=i) for i in range(12)]
        assert written == [True] * 5 + [False] * 7
        clock.advance(1.0)
        assert rl.error("authentication", "{p} - authentication error", p=99)
        rl.error("permissions", "{p} - Publish Violation", p=0)
    finally:
        globalLogPublisher.removeObserver(events.append)
    texts = [e["log_format"].format(**e) for e in events
             if e.get("log_namespace") == "natsbroker.ratelog"]
    assert texts == ["%d - authentication error" % i for i in range(5)] + [
        "7 more authentication lines suppressed in 1.0s",
        "99 - authentication error",
        "0 - Publish Violation",
    ]


def test_flood_of_bad_logins_keeps_the_log_small(tmp_path):
    n = 300
    conf = tmp_path / "sec.conf"
    conf.write_text(CONF)
    with ServerProcess("natsbroker", ["-c", str(conf)]) as s:
        t0 = time.monotonic()
        for _ in range(n):
            _converse(s.port, b'CONNECT {"user":"a","pass":"wrong"}\r\nPING\r\n')
        elapsed = time.monotonic() - t0
        # Still answering, and no more than 20 such lines per second were written.
        assert _converse(s.port, b'CONNECT {"user":"a","pass":"b","verbose":false}\r\nPING\r\n') \
            .endswith(b"PONG\r\n")
        end = time.monotonic() + 10
        while "suppressed" not in s.log() and time.monotonic() < end and elapsed < n / 20:
            time.sleep(0.05)
        log = s.log()
    written = log.count("authentication error")
    assert written <= 20 * (int(elapsed) + 2)
    if elapsed < n / 20 - 2:
        assert written < n and "more authentication lines suppressed" in log
