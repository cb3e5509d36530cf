"""nats-jetstream's ordered consumer across a server restart, for
tests/test_js_ordered_restart.py (run by Python >= 3.13, like scenarios.py)::

    python ordered_restart.py URL

Makes a file stream ``ORS`` with three messages, reads them through
``stream.ordered_consumer(...).messages()`` and prints ``{"event": "first",
...}``; then waits for a line on stdin (the test has restarted the server on
the same port and store directory meanwhile), publishes three more and reads
them from the same iterator, printing ``{"event": "after", ...}`` (or
``"timeout"`` with what came). Messages are ``[subject, data, stream seq,
consumer seq]``; the consumer sequence tells whether the client had to make
a new server-side consumer. Every wait has a deadline.
"""

import asyncio
import json
import sys

import nats.client
import nats.jetstream

DEADLINE = 20.0


def say(**event):
    print(json.dumps(event), flush=True)


def view(m):
    return [m.subject, m.data.decode(), m.metadata.sequence.stream, m.metadata.sequence.consumer]


async def publish(js, subject, data):
    """Publishes once the client is back (the first attempts may still meet
    the old connection's end)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE
    while True:
        try:
            return await js.publish(subject, data, timeout=2)
        except Exception:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.1)


async def main(url):
    loop = asyncio.get_running_loop()
    nc = await nats.client.connect(url, timeout=DEADLINE, reconnect_max_attempts=0,
                                   reconnect_time_wait=0.1, reconnect_time_wait_max=0.5)
    js = nats.jetstream.new(nc)
    stream = await js.create_stream(name="ORS", subjects=["ors.>"], storage="file")
    for i in range(3):
        await js.publish("ors.a", b"m%d" % i, timeout=DEADLINE)
    oc = await stream.ordered_consumer(name_prefix="rd")
    messages = (await oc.messages(max_wait=5)).__aiter__()
    got = [view(await asyncio.wait_for(messages.__anext__(), DEADLINE)) for _ in range(3)]
    say(event="first", got=got, consumer=oc.name)
    await loop.run_in_executor(None, sys.stdin.readline)  # the server was restarted
    for i in range(3, 6):
        await publish(js, "ors.a", b"m%d" % i)
    got = []
    try:
        for _ in range(3):
            got.append(view(await asyncio.wait_for(messages.__anext__(), DEADLINE)))
    except asyncio.TimeoutError:
        say(event="timeout", got=got)
        return
    say(event="after", got=got, consumer=oc.name)
    await messages.stop()
    await oc.close()
    await nc.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
