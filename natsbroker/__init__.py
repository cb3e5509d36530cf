"""natsbroker: a NATS-compatible message broker on Twisted."""

# Before any other natsbroker module is imported: it decides whether the
# compiled hot modules or their sources are loaded (NATSBROKER_PURE=1, stale builds).
from natsbroker import _build

_build.install()

__version__ = "0.1.0"

# The nats-server version announced in INFO and /varz: clients gate features on
# it, so it names the nats-server release whose behaviour we follow.
# 2.12.5 is the first release at JetStream API level 3 (snapshot
# window_size), the highest level whose features are all here: level 4
# (2.14) also needs the mirror/source ``consumer`` option (reliable
# WorkQueue/Interest sourcing), which is not (plugins/jetstream/FEATURES.md).
COMPAT_VERSION = "2.12.5"

# The JetStream API level of COMPAT_VERSION (2.12.5 -> 3), sent in INFO as
# ``api_lvl`` (nats-server sends it with or without JetStream).
JS_API_LEVEL = 3
