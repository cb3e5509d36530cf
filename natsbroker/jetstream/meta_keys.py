"""Keys of the meta records JetStream keeps in a stream's store: the stream's
config and creation time, and each consumer's records."""

META_CONFIG = b"config"
META_CREATED = b"created"


def consumer_key(name, part):
    """Store meta key of a consumer's record (config, state, created)."""
    return b"c.%s.%s" % (name.encode() if isinstance(name, str) else name, part)


def pinned_meta(key):
    """Meta records the file store also keeps outside LevelDB (they define the
    stream and its consumers; written by API calls only): not consumer state."""
    return key in (META_CONFIG, META_CREATED) or (
        key.startswith(b"c.") and (key.endswith(b".config") or key.endswith(b".created")))
