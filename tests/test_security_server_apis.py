"""Server-side APIs act for the client that asked, never as the server.

Attacks on the responders the server runs for clients (the JetStream API, the
system account's requests, the ``$OBJ`` object store API), each sent to
nats-server and natsbroker with the same configuration:

* a request whose *reply* subject is another API (``$JS.API.INFO`` answered
  onto ``$JS.API.STREAM.DELETE.SECRETS``): the server's answer is its own
  publish, and must never be taken as a request (nats-server's APIs ignore a
  message without a client's identity);
* the ``$OBJ`` API used by a client whose permissions forbid the JetStream
  requests behind it: nats-server has no such API (no responders); natsbroker
  refuses with 403, and nothing of the bucket is read, changed or delivered.
"""

import asyncio
import json
import os

import nats
import pytest
from nats.errors import NoRespondersError

from tests.support.clients import flushed
from tests.support.servers import ServerProcess, both_started

KINDS = ["nats-server", "natsbroker"]

USERS = """
authorization {
  users = [
    {user: admin, password: pw}
    # Everything but the JetStream API, the object store's stream and orders.
    {user: mallory, password: pw, permissions: {publish: {deny: ["$JS.API.>", "$O.>", "orders.>"]}}}
    # Only the $OBJ API and inboxes.
    {user: objonly, password: pw, permissions: {
        publish: {allow: ["$OBJ.>", "_INBOX.>"]}, subscribe: {allow: ["_INBOX.>"]}}}
    # Only the account info request.
    {user: infoonly, password: pw, permissions: {
        publish: {allow: ["$JS.API.INFO"]}, subscribe: {allow: ["_INBOX.>"]}}}
  ]
}
"""

SYSTEM = """
system_account: SYS
accounts {
  SYS: {users: [{user: sys, password: pw}]}
  APP: {users: [{user: app, password: pw}]}
}
"""


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    d = tmp_path_factory.mktemp("apis")
    conf = d / "users.conf"
    conf.write_text(USERS)
    with both_started(["-js", "-c", str(conf)]) as started:  # (each its own store)
        yield started


def url(server, user):
    return "nats://%s:pw@127.0.0.1:%d" % (user, server.port)


async def _setup(server):
    """As admin: a SECRETS stream with a message, a bucket B with an object."""
    nc = await nats.connect(url(server, "admin"))
    js = nc.jetstream()
    for name in ("SECRETS",):
        try:
            await js.delete_stream(name)
        except Exception:
            pass
    await js.add_stream(name="SECRETS", subjects=["secrets.>"])
    await js.publish("secrets.a", b"top secret")
    obs = await js.create_object_store("B")
    await obs.put("plans", b"the plans" * 100)
    return nc, js


async def _secrets_alive(js):
    try:
        return (await js.stream_info("SECRETS")).state.messages == 1
    except Exception:
        return False


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("reply", [
    "$JS.API.STREAM.DELETE.SECRETS",
    "$JS.API.STREAM.PURGE.SECRETS",
])
def test_an_answer_sent_to_an_api_subject_is_no_request(servers, kind, reply):
    server = servers[kind]

    async def main():
        admin, js = await _setup(server)
        nc = await nats.connect(url(server, "infoonly"))
        # infoonly may publish only $JS.API.INFO; the server answers onto the
        # reply subject it chose.
        await nc.publish("$JS.API.INFO", b"", reply=reply)
        await flushed(nc)
        # A stream request after it: answered in order, so the attack has run.
        await admin.request("$JS.API.STREAM.INFO.SECRETS", b"", timeout=5)
        alive = await _secrets_alive(js)
        await nc.close()
        await admin.close()
        return alive

    assert run(main())


@pytest.mark.parametrize("kind", KINDS)
def test_system_answer_onto_a_system_request_is_no_request(tmp_path, kind):
    """A system user's PING answered onto ``$SYS.REQ.SERVER.<id>.LDM`` must not
    put the server into lame duck mode."""
    conf = tmp_path / "sys.conf"
    conf.write_text(SYSTEM)
    with ServerProcess(kind, ["-c", str(conf)]) as server:
        async def main():
            nc = await nats.connect(url(server, "sys"))
            sid = nc._server_info["server_id"]
            await nc.publish("$SYS.REQ.SERVER.PING.VARZ", b"",
                             reply="$SYS.REQ.SERVER.%s.LDM" % sid)
            await flushed(nc)
            await nc.request("$SYS.REQ.SERVER.PING.VARZ", b"", timeout=5)
            await asyncio.sleep(0.5)
            # Still serving: a new connection gets in and is answered.
            other = await nats.connect(url(server, "app"), allow_reconnect=False)
            await other.flush(timeout=5)
            await other.close()
            await nc.close()
        run(main())


async def _obj(nc, subject, body, timeout=3):
    """A $OBJ request: the decoded answer, or "no responders"."""
    try:
        msg = await nc.request(subject, json.dumps(body).encode() if body is not None else b"",
                               timeout=timeout)
    except NoRespondersError:
        return "no responders"
    return json.loads(msg.data)


def _refused(kind, answer):
    if kind == "nats-server":
        return answer == "no responders"  # there is no such API to trick
    return isinstance(answer, dict) and answer.get("error", {}).get("code") == 403


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("user", ["mallory", "objonly"])
def test_object_store_api_bound_by_the_client_s_permissions(servers, kind, user):
    server = servers[kind]

    async def main():
        admin, js = await _setup(server)
        leaks = []

        async def leaked(m):
            leaks.append(m)
        watch = await admin.subscribe("orders.>", cb=leaked)
        nc = await nats.connect(url(server, user))
        got = []

        async def delivered(m):
            got.append(m)
        inbox = nc.new_inbox()
        await nc.subscribe(inbox, cb=delivered)
        answers = {
            "list": await _obj(nc, "$OBJ.B.list", None),
            "info": await _obj(nc, "$OBJ.B.info", {"name": "plans"}),
            "get": await _obj(nc, "$OBJ.B.get", {"name": "plans", "deliver_subject": inbox}),
            "get-orders": await _obj(nc, "$OBJ.B.get", {"name": "plans",
                                                       "deliver_subject": "orders.new"}),
            "get-api": await _obj(nc, "$OBJ.B.get", {
                "name": "plans", "deliver_subject": "$JS.API.STREAM.DELETE.SECRETS"}),
            "delete": await _obj(nc, "$OBJ.B.delete", {"name": "plans"}),
        }
        # An upload over the object: meta, then its one chunk.
        nonce = "N" + os.urandom(6).hex()
        meta = {"name": "plans", "nonce": nonce, "chunks": 1, "size": 5}
        answers["upload"] = await _obj(nc, "$OBJ.B.info.plans", meta)
        await nc.publish("$OBJ.B.chunks.%s" % nonce, b"owned")
        await flushed(nc)
        await admin.flush()
        await asyncio.sleep(0.3)
        obs = await js.object_store("B")
        plans = await obs.get("plans")
        alive = await _secrets_alive(js)
        await watch.unsubscribe()
        await nc.close()
        await admin.close()
        return answers, got, leaks, plans.data, alive

    answers, got, leaks, data, alive = run(main())
    refused = {op: _refused(kind, a) for op, a in answers.items()}
    assert all(refused.values()), answers
    assert not got and not leaks
    assert data == b"the plans" * 100
    assert alive


def test_object_store_api_serves_a_client_that_may(servers):
    """The positive control: admin (no permissions) is served; a deliver
    subject in the server's own namespace is refused even so."""
    server = servers["natsbroker"]

    async def main():
        admin, js = await _setup(server)
        info = await _obj(admin, "$OBJ.B.info", {"name": "plans"})
        listing = await _obj(admin, "$OBJ.B.list", None)
        bad = await _obj(admin, "$OBJ.B.get", {"name": "plans",
                                               "deliver_subject": "$JS.API.STREAM.DELETE.SECRETS"})
        alive = await _secrets_alive(js)
        await admin.close()
        return info, listing, bad, alive

    info, listing, bad, alive = run(main())
    assert info["name"] == "plans" and info["size"] == 900
    assert [o["name"] for o in listing["objects"]] == ["plans"]
    assert bad == {"error": {"code": 400, "description": "invalid deliver_subject"}}
    assert alive


def test_chunks_count_only_from_the_uploading_connection(servers):
    server = servers["natsbroker"]

    async def main():
        admin, js = await _setup(server)
        other = await nats.connect(url(server, "admin"))
        nonce = "N" + os.urandom(6).hex()
        meta = {"name": "fresh", "nonce": nonce, "chunks": 1, "size": 5}
        await admin.publish("$OBJ.B.info.fresh", json.dumps(meta).encode())
        await flushed(admin)
        # Another connection that saw the nonce tries to write the chunk.
        injected = await _obj(other, "$OBJ.B.chunks.%s" % nonce, None)
        done = await admin.request("$OBJ.B.chunks.%s" % nonce, b"mine!", timeout=5)
        await other.close()
        obs = await js.object_store("B")
        data = (await obs.get("fresh")).data
        await admin.close()
        return injected, json.loads(done.data), data

    injected, done, data = run(main())
    assert injected["error"]["code"] == 404
    assert done["name"] == "fresh" and done["size"] == 5
    assert data == b"mine!"
