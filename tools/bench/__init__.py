"""Side-by-side benchmark: natsbroker vs the real nats-server.

Run from the repository root::

    python -m tools.bench                     # all scenarios, defaults
    python -m tools.bench --repeat 3          # median of 3 runs per server
    python -m tools.bench --scenarios pub,reqrep --msgs 100000 --json

One run starts both servers on free loopback ports (nats-server = the
"reference", natsbroker = the "candidate"), drives the same scenarios against
each with a raw-socket load generator (no NATS client library) and prints
msgs/s per server plus ``ratio = candidate / reference``: 1.0 means same
speed, 0.25 means natsbroker reaches a quarter of nats-server's rate.

See README.md in this directory for details.
"""
