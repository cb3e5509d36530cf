"""The garbage collector's settings for a broker process.

CPython's defaults (a young collection every 700 net allocations, a full one
after ten of the middle generation, when the old generation has grown by a
quarter) suit short programs. A broker allocates a few objects a message
and keeps some (a memory stream's messages, the recent-message cache), so
at 50k messages a second it ran ~80 young collections a second, and every
full collection walked every live object, the ~63k of start-up (Twisted,
the plugins, the modules) and every stored message included. On
js-window-memory over 100k messages plus warm-up: 577/53/4 collections
(young/middle/full) taking 0.6-0.7 s for a plain server, 950/87/7 taking
1.1-1.3 s with the change feed on (its events live until the group commit);
tuned, 30-odd young collections after start-up and 0.25-0.35 s either way
(tools/bench/PERF.md).

So, once the server has started: a collection, then ``gc.freeze()`` (what
start-up made lives as long as the process and is no longer walked), and
thresholds of (10000, 20, 100). The entry points of a broker process
(``natsbroker``, ``twistd natsbroker``, and so natsbroker.embed's processes)
tune; a program that builds the service itself
(``natsbroker.server.make_service``) keeps its own settings.

``NATSBROKER_GC=default`` leaves CPython's settings alone;
``NATSBROKER_GC=young,middle,old`` sets other thresholds (with the freeze):
for benchmarks that compare the two.
"""

import gc
import os

from twisted.logger import Logger

log = Logger()

THRESHOLDS = (10_000, 20, 100)


def thresholds(spec):
    """The thresholds for a ``NATSBROKER_GC`` value, None for ``default``;
    ValueError for anything else that is not three non-negative integers."""
    if spec is None or spec == "":
        return THRESHOLDS
    if spec.strip().lower() == "default":
        return None
    parts = tuple(int(x) for x in spec.split(","))
    if len(parts) != 3 or min(parts) < 0:
        raise ValueError(spec)
    return parts


def tune(environ=os.environ):
    """Freeze what start-up made and raise the thresholds (see the module's
    docstring). Call once the server has started."""
    spec = environ.get("NATSBROKER_GC")
    try:
        chosen = thresholds(spec)
    except ValueError:
        log.warn("NATSBROKER_GC={spec!r} is not 'default' or three integers"
                 " 'young,middle,old'; using {default}", spec=spec,
                 default=",".join(map(str, THRESHOLDS)))
        chosen = THRESHOLDS
    if chosen is None:
        return
    gc.collect()
    gc.freeze()
    gc.set_threshold(*chosen)
