"""Subjects: validation rules and the Sublist that routes a subject to its subscriptions.

Subjects are ``bytes`` throughout the core: the parser hands out bytes and the
wire wants bytes, so decoding on the PUB path would be waste.

The Sublist is a token trie like nats-server's (server/sublist.go): each level
maps literal tokens to nodes and has at most one ``*`` and one ``>`` child.
``match`` results are cached per literal subject; a change drops only the cached
subjects the changed subscription could match, so a busy PUB path keeps its
cache while inboxes come and go elsewhere.
"""

PWC = b"*"
FWC = b">"
_SPACES = (b" ", b"\t", b"\n", b"\r", b"\f")

CACHE_MAX = 1024


def is_valid_subject(subject):
    """True if ``subject`` may be subscribed to (wildcards allowed).

    As nats-server: no empty tokens, no white space, ``>`` only as the last
    token. A ``*`` or ``>`` inside a longer token is an ordinary character.
    """
    if not subject:
        return False
    seen_fwc = False
    for t in subject.split(b"."):
        if not t or seen_fwc:
            return False
        if len(t) > 1:
            if any(c in t for c in _SPACES):
                return False
        elif t == FWC:
            seen_fwc = True
        elif t in _SPACES:
            return False
    return True


def is_valid_literal_subject(subject):
    """True if ``subject`` may be published to: valid and without wildcards."""
    if not is_valid_subject(subject):
        return False
    for t in subject.split(b"."):
        if t == PWC or t == FWC:
            return False
    return True


def is_literal(subject):
    """True if no token of ``subject`` is a wildcard."""
    for t in subject.split(b"."):
        if t == PWC or t == FWC:
            return False
    return True


def subject_matches(pattern, subject):
    """True if the literal ``subject`` is matched by ``pattern``."""
    pt = pattern.split(b".")
    st = subject.split(b".")
    for i, p in enumerate(pt):
        if p == FWC:
            return len(st) > i
        if i >= len(st):
            return False
        if p != PWC and p != st[i]:
            return False
    return len(pt) == len(st)


def subset_of(subject, pattern):
    """True if every subject ``subject`` matches is also matched by ``pattern``."""
    st = subject.split(b".")
    pt = pattern.split(b".")
    for i, p in enumerate(pt):
        if p == FWC:
            return len(st) > i
        if i >= len(st):
            return False
        s = st[i]
        if s == FWC:
            return False
        if p == PWC:
            continue
        if s == PWC or s != p:
            return False
    return len(pt) == len(st)


# -- nats-server's subject relations on str, first-character quirks kept (its
# JetStream, export and import checks use these, so ours give its answers).


def _is_subset_match_tokens(tokens, test):
    # nats-server isSubsetMatchTokenized (first-character wildcard quirks kept).
    ttoks = test.split(".")
    for i, t2 in enumerate(ttoks):
        if i >= len(tokens):
            return False
        if not t2:
            return False
        if t2 == ">":
            return True
        t1 = tokens[i]
        if not t1 or t1 == ">":
            return False
        if t1 == "*":
            if not t2 == "*":
                return False
            continue
        if t2[0] != "*" and t1 != t2:
            return False
    return len(tokens) == len(ttoks)


def subject_is_subset_match(subject, test):
    """True if every subject ``subject`` matches is matched by ``test``."""
    return _is_subset_match_tokens(subject.split("."), test)


def subjects_collide(subj1, subj2):
    """nats-server ``SubjectsCollide``: could some subject match both?"""
    if subj1 == subj2:
        return True
    t1, t2 = subj1.split("."), subj2.split(".")
    pwc1, fwc1 = "*" in t1, ">" in t1
    pwc2, fwc2 = "*" in t2, ">" in t2
    l1, l2 = not (pwc1 or fwc1), not (pwc2 or fwc2)
    if l1 and l2:
        return False
    if l1 and not l2:
        return _is_subset_match_tokens(t1, subj2)
    if l2 and not l1:
        return _is_subset_match_tokens(t2, subj1)
    if not fwc1 and not fwc2 and len(t1) != len(t2):
        return False
    if len(t1) != len(t2):
        if (len(t1) < len(t2) and not fwc1) or (len(t2) < len(t1) and not fwc2):
            return False
    for a, b in zip(t1, t2):
        if not a or not b:
            return False
        if a[0] in "*>" or b[0] in "*>":
            continue
        if a != b:
            return False
    return True


class Subscription:
    """One interest in a subject, owned by a client or an internal subscriber.

    ``owner`` is whatever delivers the message: a client connection or an
    internal subscriber; the Sublist never looks inside it.
    """

    __slots__ = ("subject", "queue", "sid", "owner", "max_msgs", "delivered",
                 "closed", "__weakref__")

    def __init__(self, subject, sid, owner, queue=None):
        self.subject = subject
        self.queue = queue
        self.sid = sid
        self.owner = owner
        self.max_msgs = 0
        self.delivered = 0
        self.closed = False

    def __repr__(self):
        return "<Subscription %r sid=%r queue=%r>" % (
            self.subject, self.sid, self.queue)


class _Node:
    __slots__ = ("psubs", "qsubs", "next")

    def __init__(self):
        self.psubs = []
        self.qsubs = {}
        self.next = None


class _Level:
    __slots__ = ("nodes", "pwc", "fwc")

    def __init__(self):
        self.nodes = {}
        self.pwc = None
        self.fwc = None

    def empty(self):
        return not self.nodes and self.pwc is None and self.fwc is None


EMPTY_RESULT = ((), ())


class Sublist:
    """Token trie of subscriptions with a match cache.

    ``match(subject)`` returns ``(psubs, qgroups)``: a tuple of plain
    subscriptions and a tuple of queue groups, each group a tuple of the
    subscriptions in that queue (merged across subjects by queue name).
    """

    def __init__(self, cache_max=CACHE_MAX):
        self._root = _Level()
        # subject -> match result; cleared in place, never replaced, so a
        # reference to it stays valid.
        self.cache = self._cache = {}
        self._cache_max = cache_max
        self.count = 0
        self.inserts = 0
        self.removes = 0
        self.misses = 0
        self.max_fanout = 0
        self._fanout_total = 0
        self._fanout_samples = 0
        self._watches = {}  # literal subject -> [(subject, callback)]
        # Called as on_change(sub, +1/-1) after each insert/remove (the
        # cluster keeps its peers' view of our interest with it), or None.
        self.on_change = None

    def insert(self, sub):
        level = self._root
        node = None
        for t in sub.subject.split(b"."):
            if t == PWC:
                node = level.pwc = level.pwc or _Node()
            elif t == FWC:
                node = level.fwc = level.fwc or _Node()
            else:
                node = level.nodes.get(t)
                if node is None:
                    node = level.nodes[t] = _Node()
            if node.next is None:
                node.next = _Level()
            level = node.next
        if sub.queue is None:
            node.psubs.append(sub)
        else:
            node.qsubs.setdefault(sub.queue, []).append(sub)
        self.count += 1
        self.inserts += 1
        self._invalidate(sub.subject)
        if self._watches:
            self._notify(sub.subject)
        if self.on_change is not None:
            self.on_change(sub, 1)

    def watch(self, subject, callback, removed=None):
        """Call ``callback(subject)`` whenever a subscription that matches the
        literal ``subject`` is inserted (a push consumer waiting for its
        deliver subject to gain interest), and ``removed(subject)`` when one is
        removed. Returns a handle for :meth:`unwatch`."""
        handle = (subject, callback, removed)
        self._watches.setdefault(subject, []).append(handle)
        return handle

    def unwatch(self, handle):
        lst = self._watches.get(handle[0])
        if lst and handle in lst:
            lst.remove(handle)
            if not lst:
                del self._watches[handle[0]]

    def _notify(self, pattern, removed=False):
        if pattern in self._watches:
            hits = [pattern]
        else:
            hits = [s for s in self._watches if subject_matches(pattern, s)]
        for s in hits:
            for _, added_cb, removed_cb in list(self._watches.get(s, ())):
                cb = removed_cb if removed else added_cb
                if cb is not None:
                    cb(s)

    def remove(self, sub):
        """Remove ``sub``; returns False if it was not there."""
        path = []
        level = self._root
        for t in sub.subject.split(b"."):
            if t == PWC:
                node = level.pwc
            elif t == FWC:
                node = level.fwc
            else:
                node = level.nodes.get(t)
            if node is None:
                return False
            path.append((level, t, node))
            level = node.next
        node = path[-1][2]
        try:
            if sub.queue is None:
                node.psubs.remove(sub)
            else:
                group = node.qsubs[sub.queue]
                group.remove(sub)
                if not group:
                    del node.qsubs[sub.queue]
        except (ValueError, KeyError):
            return False
        self.count -= 1
        self.removes += 1
        # Prune empty branches so churn of unique inboxes does not leak nodes.
        for level, t, node in reversed(path):
            if node.psubs or node.qsubs or (node.next and not node.next.empty()):
                break
            if t == PWC:
                level.pwc = None
            elif t == FWC:
                level.fwc = None
            else:
                del level.nodes[t]
        self._invalidate(sub.subject)
        if self._watches:
            self._notify(sub.subject, removed=True)
        if self.on_change is not None:
            self.on_change(sub, -1)
        return True

    def _invalidate(self, subject):
        cache = self._cache
        if not cache:
            return
        if is_literal(subject):
            cache.pop(subject, None)
        else:
            for s in [s for s in cache if subject_matches(subject, s)]:
                del cache[s]

    def match(self, subject):
        """Subscriptions interested in the literal ``subject`` (cached)."""
        r = self._cache.get(subject)
        if r is not None:
            return r
        self.misses += 1
        psubs = []
        qsubs = {}
        toks = subject.split(b".")
        # A subject with an empty token (a..b, a., .a) reaches no one, as in
        # nats-server's sublist (the result is cached like any other).
        if b"" not in toks:
            _match_level(self._root, toks, 0, len(toks), psubs, qsubs)
        if not psubs and not qsubs:
            r = EMPTY_RESULT
        else:
            r = (tuple(psubs), tuple([tuple(g) for g in qsubs.values()]) if qsubs else ())
            fanout = len(psubs) + len(qsubs)
            if fanout > self.max_fanout:
                self.max_fanout = fanout
            self._fanout_total += fanout
            self._fanout_samples += 1
        if not self._cache_max or subject[:8] == b"$JS.ACK.":
            # A JetStream ack subject names one delivery (its sequences are in
            # it): it never comes again, and caching it would only push out
            # subjects that do (one per ack, the cache cleared every 1024).
            # A cache_max of 0: no cache at all (no_sublist_cache).
            # Why here and not in JetStream: the decision is made on a cache
            # miss of every publish, before anyone knows which subscriptions
            # match; a per-subscription "do not cache" flag would cost a look
            # at every match result. The one JetStream name in subjects/ is
            # an explicit allowance in tests/test_layout.py.
            return r
        cache = self._cache
        if len(cache) >= self._cache_max:
            cache.clear()
        cache[subject] = r
        return r

    def has_interest(self, subject):
        r = self.match(subject)
        return bool(r[0] or r[1])

    @property
    def cache_size(self):
        return len(self._cache)

    @property
    def avg_fanout(self):
        if not self._fanout_samples:
            return 0.0
        return self._fanout_total / self._fanout_samples

    def all_subscriptions(self):
        """Every subscription, in no particular order (for monitoring)."""
        out = []
        stack = [self._root]
        while stack:
            level = stack.pop()
            nodes = list(level.nodes.values())
            if level.pwc:
                nodes.append(level.pwc)
            if level.fwc:
                nodes.append(level.fwc)
            for node in nodes:
                out.extend(node.psubs)
                for g in node.qsubs.values():
                    out.extend(g)
                if node.next is not None:
                    stack.append(node.next)
        return out


def _add_node(node, psubs, qsubs):
    if node.psubs:
        psubs.extend(node.psubs)
    if node.qsubs:
        for q, subs in node.qsubs.items():
            g = qsubs.get(q)
            if g is None:
                qsubs[q] = list(subs)
            else:
                g.extend(subs)


def _match_level(level, toks, i, n, psubs, qsubs):
    while level is not None:
        if level.fwc is not None:
            _add_node(level.fwc, psubs, qsubs)
        pwc = level.pwc
        node = level.nodes.get(toks[i])
        if i == n - 1:
            if pwc is not None:
                _add_node(pwc, psubs, qsubs)
            if node is not None:
                _add_node(node, psubs, qsubs)
            return
        if pwc is not None and pwc.next is not None:
            _match_level(pwc.next, toks, i + 1, n, psubs, qsubs)
        if node is None:
            return
        level = node.next
        i += 1
