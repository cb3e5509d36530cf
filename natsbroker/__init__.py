"""natsbroker: a NATS-compatible message broker on Twisted."""

# Before any other natsbroker module is imported: it decides whether the
# compiled hot modules or their sources are loaded (NATSBROKER_PURE=1, stale builds).
from natsbroker import _build

_build.install()

__version__ = "0.1.0"

# The nats-server version announced in INFO and /varz: clients gate features on
# it, so it names the nats-server release whose behaviour we follow.
COMPAT_VERSION = "2.12.0"

# The JetStream API level of COMPAT_VERSION (2.12.0 -> 2), sent in INFO as
# ``api_lvl`` (nats-server sends it with or without JetStream).
JS_API_LEVEL = 2
