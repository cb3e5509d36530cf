"""A stream's consumers indexed by filter, and its log of the turn's new messages.

A stored message must wake (kick) every consumer that takes it and count in
every such consumer's ``num_pending``. Doing both per message per consumer
made publishing O(consumers): 1000 consumers on a stream cut the acked publish
rate twentyfold. Here:

* waking: consumers are grouped by filter (one group for the unfiltered, one
  per distinct filter subject, found through a Sublist). A group keeps its
  *idle* members: those not already kicked for the coming commit. A message
  touches only idle consumers of the groups that match it -- after the first
  message of a turn, usually none;
* counting: the turn's messages go into a log (sequence, subject). A consumer
  brings its pending count up to date from the log when it is read
  (``Consumer.npc`` settles first), counting the log in bulk: a bisect for the
  unfiltered, one check per distinct subject for the filtered. After the
  commit the plugin calls :meth:`ConsumerIndex.trim`, which settles every
  consumer and empties the log -- not after every commit, but once the log
  holds max(LOG_MIN, 2 x consumers) messages, so that a stream with many
  consumers does not settle them all every turn. A consumer that settles
  often (one delivering while messages arrive) counts only what was logged
  since it last did, message by message when that is fewer than the log's
  distinct subjects.

A consumer counts a logged message when its ``seq`` is at or past the cursor
(``sseq``) and its filter takes the subject, as it did when told per message;
so it settles before anything moves its cursor or changes its filters.
"""

from bisect import bisect_left

from natsbroker.subjects.sublist import Sublist, Subscription

FWC = b">"
LOG_MIN = 1024  # messages logged before a trim settles every consumer


def _regular(filt):
    """Whether the Sublist matches ``filt`` as ``subject_matches`` does
    (no empty token, ``>`` only last); others are checked one by one."""
    toks = filt.split(b".")
    return b"" not in toks and FWC not in toks[:-1]


class _Group:
    """Consumers with one filter (``None``: unfiltered)."""

    __slots__ = ("filt", "members", "idle", "sub")

    def __init__(self, filt):
        self.filt = filt
        self.members = {}  # consumer -> None (a set in registration order)
        self.idle = {}  # members not kicked yet (dict: removal while others stay)
        self.sub = None  # its Subscription in the index's Sublist


class ConsumerIndex:
    def __init__(self):
        self._order = {}  # consumer -> (registration number, its groups)
        self._n = 0
        self._all = _Group(None)
        self._groups = {}  # filter -> _Group
        self._sublist = Sublist()
        self._odd = {}  # filters the Sublist cannot take -> _Group
        # The log: stored seqs in order (increasing) and, per subject, their
        # positions. Positions are absolute (``end`` only grows), so a
        # consumer's mark stays valid across trims.
        self.end = 0
        self._base = 0
        self._seqs = []
        self._subjects = []  # subject of each logged message, as _seqs
        self._by_subject = {}
        self._listed = False  # the plugin will trim after its commit
        self._js = None

    # -- registration ------------------------------------------------------

    def add(self, c):
        """A started consumer: wakes and counts from now on."""
        if c in self._order:
            return
        self._n += 1
        self._order[c] = (self._n, self._join(c))
        self._js = c.js

    def remove(self, c):
        entry = self._order.pop(c, None)
        if entry is not None:
            self._leave(c, entry[1])

    def refilter(self, c):
        """``c``'s filters changed (it settled with the old ones first)."""
        entry = self._order.get(c)
        if entry is not None:
            self._leave(c, entry[1])
            self._order[c] = (entry[0], self._join(c))

    def _join(self, c):
        if not c.filters:
            groups = (self._all,)
        else:
            groups = []
            for f in dict.fromkeys(c.filters):
                odd = not _regular(f)
                table = self._odd if odd else self._groups
                g = table.get(f)
                if g is None:
                    g = table[f] = _Group(f)
                    if not odd:
                        g.sub = Subscription(f, None, g)
                        self._sublist.insert(g.sub)
                groups.append(g)
            groups = tuple(groups)
        for g in groups:
            g.members[c] = None
            if not c._kicked:
                g.idle[c] = None
        return groups

    def _leave(self, c, groups):
        for g in groups:
            g.members.pop(c, None)
            g.idle.pop(c, None)
            if not g.members and g.filt is not None:
                if g.sub is not None:
                    self._sublist.remove(g.sub)
                    del self._groups[g.filt]
                else:
                    del self._odd[g.filt]

    def busy(self, c):
        """``c`` was kicked: messages until it runs need not wake it."""
        entry = self._order.get(c)
        if entry is not None:
            for g in entry[1]:
                g.idle.pop(c, None)

    def idle(self, c):
        """``c`` runs (its kick is used up): the next message takes wakes it."""
        entry = self._order.get(c)
        if entry is not None:
            for g in entry[1]:
                g.idle[c] = None

    # -- questions -------------------------------------------------------------

    def has_interest(self, subject):
        """Whether any consumer's filter takes ``subject``."""
        if self._all.members:
            return True
        for g in self._matching(subject):
            for c in g.members:
                if c.wants(subject):
                    return True
        return False

    def _matching(self, subject):
        """Groups whose filter may take ``subject`` (callers check ``wants``)."""
        groups = [sub.owner for sub in self._sublist.match(subject)[0]]
        if self._odd:
            groups.extend(self._odd.values())
        if b".." in subject or subject[:1] == b"." or subject[-1:] == b".":
            # The Sublist matches no subject with an empty token; a filter may.
            groups = list(self._groups.values()) + list(self._odd.values())
        return groups

    # -- new messages -------------------------------------------------------------

    def stored(self, seq, subject):
        """The stream stored ``seq``: log it, and kick the idle consumers it
        concerns, in registration order (as when every consumer was told)."""
        if not self._order:
            return
        if self._seqs and seq <= self._seqs[-1]:
            # Sequences went back (a failed write given up): count what is
            # logged before logging from there.
            self.trim(force=True)
        pos = self.end
        self._seqs.append(seq)
        self._subjects.append(subject)
        at = self._by_subject.get(subject)
        if at is None:
            self._by_subject[subject] = [pos]
        else:
            at.append(pos)
        self.end = pos + 1
        if not self._listed:
            self._listed = True
            self._js.consumer_index_logged(self)
        hits = [c for c in self._all.idle if seq >= c.sseq]
        if self._groups or self._odd:
            for g in self._matching(subject):
                for c in g.idle:
                    if seq >= c.sseq and c.wants(subject):
                        hits.append(c)
        if not hits:
            return
        if len(hits) > 1:
            order = self._order
            hits = sorted(set(hits), key=lambda c: order[c][0])
        for c in hits:
            c.kick()

    def count(self, mark, sseq, wants):
        """How many messages logged from position ``mark`` on have a sequence
        at or past ``sseq`` and a subject ``wants`` takes (None: any)."""
        end = self.end
        base = self._base
        lo = mark if mark > base else base
        if lo >= end:
            return 0
        i = bisect_left(self._seqs, sseq, lo - base) + base
        if i >= end:
            return 0
        if wants is None:
            return end - i
        n = 0
        if end - i <= len(self._by_subject):
            # Fewer new messages than subjects: look at each one.
            for subject in self._subjects[i - base:]:
                if wants(subject):
                    n += 1
            return n
        for subject, at in self._by_subject.items():
            if at[-1] >= i and wants(subject):
                n += len(at) - bisect_left(at, i)
        return n

    def trim(self, force=False):
        """After a commit: once the log is long (or ``force``), every consumer
        settles and the log empties."""
        self._listed = False
        if self.end == self._base:
            return
        if not force and self.end - self._base < max(LOG_MIN, 2 * len(self._order)):
            return
        for c in self._order:
            c.settle()
        self.forget()

    def forget(self):
        """Drop the log (every consumer's count was just computed afresh)."""
        self._base = self.end
        self._seqs = []
        self._subjects = []
        self._by_subject = {}
