"""natsbroker: a NATS-compatible message broker on Twisted."""

# Before any other natsbroker module is imported: it decides whether the
# compiled hot modules or their sources are loaded (NATSBROKER_PURE=1, stale builds).
from natsbroker import _build

_build.install()

__version__ = "0.1.0"

# The nats-server version announced in INFO and /varz: clients gate features on
# it, so it names the nats-server release whose behaviour we follow.
# 2.14.0 is the first release at JetStream API level 4 (fast batch publish,
# ack_policy flow_control, mirror/source ``consumer`` for reliable
# WorkQueue/Interest sourcing), the highest level whose features are all
# here: level 5 (2.15) also detects a recreated source stream, which we do
# not (natsbroker/jetstream/FEATURES.md, tests/test_js_214_level.py).
COMPAT_VERSION = "2.14.0"

# The JetStream API level of COMPAT_VERSION (2.14.0 -> 4), sent in INFO as
# ``api_lvl`` (nats-server sends it with or without JetStream).
JS_API_LEVEL = 4
