"""The nats-server version and JetStream API level we answer as, and the
stream/consumer metadata keys that carry them.

nats-server 2.11+ stores ``_nats.req.level`` (the API level the config's
features need) in ``metadata`` and adds ``_nats.ver`` (its version) and
``_nats.level`` (its API level) to every reply.  We announce ``COMPAT_VERSION``
(2.14.0: every feature of JetStream API level 4 is here; see FEATURES.md for
what level 5 still lacks) in INFO, so replies say ``_nats.ver: "2.14.0"`` and
``_nats.level: "4"`` (``API_LEVEL``, the level 2.14.0 reports in
``$JS.API.INFO`` and in
``api_lvl``), keeping the version story consistent for clients that gate on
either.  ``_nats.req.level`` is computed exactly as 2.15.1 does (TTLs 1;
counters, atomic publish, schedules, async persist 2; batch publish 4), so a
config using a post-2.11 feature honestly says it needs more than we claim.
"""

from natsbroker import COMPAT_VERSION

SERVER_VERSION = COMPAT_VERSION


def api_level_for(version):
    """The JetStream API level a nats-server release reports (jetstream_versioning.go's
    JSApiLevel: 2.11 -> 1, 2.12 -> 2, 2.12.5 -> 3, 2.14 -> 4, 2.15 -> 5)."""
    try:
        parts = [int(x) for x in version.split("-")[0].split(".")[:3]]
    except ValueError:
        return 0
    release = tuple(parts + [0] * (3 - len(parts)))
    level = 0
    for since, lvl in ((2, 11, 0), 1), ((2, 12, 0), 2), ((2, 12, 5), 3), ((2, 14, 0), 4), \
            ((2, 15, 0), 5):
        if release >= since:
            level = lvl
    return level


API_LEVEL = api_level_for(SERVER_VERSION)

META_REQUIRED_LEVEL = "_nats.req.level"
META_SERVER_VERSION = "_nats.ver"
META_SERVER_LEVEL = "_nats.level"
