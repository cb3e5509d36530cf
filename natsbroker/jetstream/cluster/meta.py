"""The JetStream meta group's state: which streams and consumers exist, in
which account, and which servers' Raft groups run them.

nats-server's meta group (``_meta_``) replicates assignments, not data: an
entry adds, updates or removes a stream or consumer assignment
(:mod:`.entries`), and a snapshot is the whole set. :class:`MetaState` is
what applying them builds, as jetstream_cluster.go's ``applyMetaEntries``
and ``applyMetaSnapshot`` build ``js.cluster.streams``; it is pure (entries
in, changes out), so the group's Raft node (natsbroker.cluster.raft) and the
servers that act on the changes stay apart from it.

Changes come out as :class:`Change` records, in order, for the layer that
starts and stops this server's stream and consumer groups.
"""

import attrs

from natsbroker.jetstream.cluster.entries import (
    EntryOp,
    decode_meta_entry,
    decode_meta_snapshot,
    encode_meta_snapshot,
)


@attrs.frozen
class Change:
    """``kind`` is one of ``stream_added``, ``stream_updated``,
    ``stream_removed``, ``consumer_added``, ``consumer_removed``;
    ``assignment`` the StreamAssignment or ConsumerAssignment concerned."""

    kind: str
    account: str
    stream: str
    consumer: str = ""
    assignment: object = None


class MetaState:
    def __init__(self):
        # (account, stream) -> StreamAssignment; its consumers as
        # consumers[(account, stream)] = {name: ConsumerAssignment}
        self.streams = {}
        self.consumers = {}

    # -- queries ----------------------------------------------------------

    def stream(self, account, name):
        return self.streams.get((account, name))

    def consumer(self, account, stream, name):
        return self.consumers.get((account, stream), {}).get(name)

    def account_streams(self, account):
        return sorted((sa for (acc, _), sa in self.streams.items() if acc == account),
                      key=lambda sa: sa.name)

    def stream_consumers(self, account, stream):
        got = self.consumers.get((account, stream), {})
        return [got[n] for n in sorted(got)]

    def groups_of(self, peer):
        """The stream and consumer assignments whose group lists ``peer``."""
        out = [sa for sa in self.streams.values() if sa.group and peer in sa.group.peers]
        for cas in self.consumers.values():
            out += [ca for ca in cas.values() if ca.group and peer in ca.group.peers]
        return out

    # -- applying ---------------------------------------------------------

    def apply_entry(self, data):
        """Apply one Normal entry's data; the changes it made."""
        op, rec = decode_meta_entry(data)
        acc = rec.client.account if rec.client is not None else ""
        if op == EntryOp.ASSIGN_STREAM or op == EntryOp.UPDATE_STREAM:
            return self._put_stream(acc, rec, updated=op == EntryOp.UPDATE_STREAM)
        if op == EntryOp.REMOVE_STREAM:
            return self._remove_stream(acc, rec.name, rec)
        if op in (EntryOp.ASSIGN_CONSUMER, EntryOp.ASSIGN_COMPRESSED_CONSUMER):
            return self._put_consumer(acc, rec)
        if op == EntryOp.REMOVE_CONSUMER:
            return self._remove_consumer(acc, rec.stream, rec.name, rec)
        return []

    def apply_snapshot(self, data):
        """Replace the state with a snapshot's; the changes that makes."""
        fresh = MetaState()
        for sa in decode_meta_snapshot(data):
            acc = sa.client.account if sa.client is not None else ""
            consumers = sa.consumers or []
            sa.consumers = None
            fresh.streams[(acc, sa.name)] = sa
            fresh.consumers[(acc, sa.name)] = {ca.name: ca for ca in consumers if ca is not None}
        changes = []
        for key, sa in list(self.streams.items()):
            new = fresh.streams.get(key)
            if new is None or _recreated(sa, new):
                changes += self._remove_stream(*key)
        for key, sa in fresh.streams.items():
            old = self.streams.get(key)
            if old is None:
                changes += self._put_stream(key[0], sa, updated=False)
            elif old.config_json != sa.config_json or old.group != sa.group:
                changes += self._put_stream(key[0], sa, updated=True)
            have = self.consumers.get(key, {})
            want = fresh.consumers.get(key, {})
            for name in sorted(set(have) - set(want)):
                changes += self._remove_consumer(key[0], key[1], name)
            for name in sorted(want):
                if have.get(name) is None or have[name].config_json != want[name].config_json \
                        or have[name].group != want[name].group:
                    changes += self._put_consumer(key[0], want[name])
        return changes

    def snapshot(self):
        """The state as the meta group's snapshot data."""
        out = []
        for key in sorted(self.streams):
            sa = attrs.evolve(self.streams[key], consumers=self.stream_consumers(*key))
            out.append(sa)
        return encode_meta_snapshot(out)

    # -- the changes --------------------------------------------------------

    def _put_stream(self, acc, sa, updated):
        key = (acc, sa.name)
        existed = key in self.streams
        self.streams[key] = sa
        self.consumers.setdefault(key, {})
        return [Change("stream_updated" if existed or updated else "stream_added", acc, sa.name,
                       assignment=sa)]

    def _remove_stream(self, acc, name, rec=None):
        """(``rec``: the removal's own record, whose request and reply the
        change carries.)"""
        key = (acc, name)
        sa = self.streams.pop(key, None)
        if sa is None:
            return []
        changes = [Change("consumer_removed", acc, name, cname, ca)
                   for cname, ca in sorted(self.consumers.pop(key, {}).items())]
        return changes + [Change("stream_removed", acc, name, assignment=rec or sa)]

    def _put_consumer(self, acc, ca):
        key = (acc, ca.stream)
        if key not in self.streams:
            return []  # nats-server drops a consumer of a stream it does not know
        self.consumers.setdefault(key, {})[ca.name] = ca
        return [Change("consumer_added", acc, ca.stream, ca.name, ca)]

    def _remove_consumer(self, acc, stream, name, rec=None):
        ca = self.consumers.get((acc, stream), {}).pop(name, None)
        if ca is None:
            return []
        return [Change("consumer_removed", acc, stream, name, rec or ca)]


def _recreated(old, new):
    # applyMetaSnapshot: a stream counts as deleted and created again when both
    # its creation time and its group changed.
    return old.created != new.created and (old.group.name if old.group else "") != (
        new.group.name if new.group else "")
