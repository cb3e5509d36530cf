"""Keys of the meta records a stream's store holds beside its messages: the
stream's config and creation time, and each consumer's config, state and
creation time (``c.<name>.<part>``).

One home for the layout: JetStream writes these records
(natsbroker.jetstream.plugin, snapshot) and ``natsbroker-admin verify`` and
``repair`` read them offline (natsbroker.store.fsck).
"""

META_CONFIG = b"config"
META_CREATED = b"created"
# The parts of a consumer's records.
CONSUMER_CONFIG = b"config"
CONSUMER_STATE = b"state"
CONSUMER_CREATED = b"created"
CONSUMER_PREFIX = b"c."


def consumer_key(name, part):
    """Store meta key of a consumer's record (config, state, created)."""
    return CONSUMER_PREFIX + b"%s.%s" % (name.encode() if isinstance(name, str) else name, part)


def pinned_meta(key):
    """Meta records the file store also keeps outside LevelDB (they define the
    stream and its consumers; written by API calls only): not consumer state."""
    return key in (META_CONFIG, META_CREATED) or (
        key.startswith(CONSUMER_PREFIX)
        and (key.endswith(b"." + CONSUMER_CONFIG) or key.endswith(b"." + CONSUMER_CREATED)))
