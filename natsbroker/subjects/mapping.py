"""Subject mappings: the subject a published message is delivered under.

nats-server's account ``mappings`` (server/accounts.go: ``AddWeightedMappings``
and ``selectMappedSubject``), sans-IO.  A mapping has a source subject
(wildcards allowed) and weighted destinations, each a subject transform
(:mod:`natsbroker.subjects.transform`).  A published subject that matches a source is
delivered under the destination picked for it, once: the result is not mapped
again.

    mappings = SubjectMappings([SubjectMapping("a.*", [MapDest("b.$1")])])
    mappings.map(b"a.x")   # -> b"b.x"
    mappings.map(b"c")     # -> b"c" (not mapped)

Kept from nats-server:

* a literal source is looked up before the wildcard ones, which are tried in
  order;
* weights are percentages; what they leave over keeps its subject, unless the
  source is itself one of the destinations (then the rest is dropped);
* destinations scoped to a cluster replace the others on a server of that
  cluster (a server without a cluster name uses the others);
* a result that is not a valid subject (``{{split}}`` can make empty tokens,
  a destination can be empty) reaches no subscriber: :meth:`SubjectMappings.map`
  gives a :class:`Drop`, whose ``subject`` a no-responders status names.
"""

import random

from natsbroker.gocompat.quote import go_quote
from natsbroker.subjects.sublist import CACHE_MAX, is_valid_subject, subject_matches
from natsbroker.subjects.transform import SubjectTransform

__all__ = ["Drop", "MappingError", "SubjectMappings", "compile_mapping"]


class MappingError(ValueError):
    """A mapping nats-server's ``AddWeightedMappings`` refuses; ``str()`` is its text.
    (A bad destination raises :class:`natsbroker.subjects.transform.TransformError`.)"""


class Drop:
    """A message mapped to a subject no one can receive (``subject``, bytes)."""

    __slots__ = ("subject",)

    def __init__(self, subject):
        self.subject = subject

    def pick(self, subject):
        return self

    def __repr__(self):
        return "Drop(%r)" % (self.subject,)


def _result(dest):
    """The delivery subject, or a Drop when ``dest`` has an empty token
    (nats-server's Sublist matches nothing for those)."""
    if dest and b".." not in dest and dest[:1] != b"." and dest[-1:] != b".":
        return dest
    return Drop(dest)


_NOWHERE = Drop(b"")  # the weights left nothing over: nats-server's "" subject


def _tokenized(source):
    """transformTokenize: the identity destination of ``source`` (``*`` -> ``$n``)."""
    out, n = [], 0
    for t in source.split("."):
        if t == "*":
            n += 1
            out.append("$%d" % n)
        else:
            out.append(t)
    return ".".join(out)


class _Dest:
    __slots__ = ("transform", "subject", "weight")

    def __init__(self, transform, subject, weight):
        self.transform = transform  # None for an empty destination
        self.subject = subject
        self.weight = weight  # cumulative, once the list is complete


class _Mapping:
    """One source's destinations (nats-server's ``mapping``)."""

    __slots__ = ("source", "pattern", "wildcard", "dests", "cluster_dests")

    def dests_for(self, cluster):
        if self.cluster_dests and cluster:
            return self.cluster_dests.get(cluster, self.dests)
        return self.dests


def compile_mapping(source, destinations):
    """``AddWeightedMappings(source, destinations...)``: check and compile one
    mapping (``destinations`` are :class:`~natsbroker.config.model.MapDest`).

    Raises :class:`MappingError`, or :class:`~natsbroker.subjects.transform.TransformError`
    for a destination nats-server would refuse, with nats-server's text."""
    if not is_valid_subject(source.encode()):
        raise MappingError("invalid subject")
    seen = set()
    totals = {}
    plain, scoped = [], {}
    for d in destinations:
        if d.subject in seen:
            raise MappingError("duplicate entry for %s" % go_quote(d.subject))
        seen.add(d.subject)
        if d.weight > 100:
            raise MappingError("individual weights need to be <= 100")
        totals[d.cluster] = totals.get(d.cluster, 0) + d.weight
        if totals[d.cluster] > 100:
            raise MappingError("total weight needs to be <= 100")
        tr = SubjectTransform.compile_mapping(source, d.subject)
        dest = _Dest(tr, d.subject, d.weight)
        (scoped.setdefault(d.cluster, []) if d.cluster else plain).append(dest)
    m = _Mapping()
    m.source = source
    m.pattern = source.encode()
    m.wildcard = any(t in ("*", ">") for t in source.split("."))
    have_source = source in seen
    m.dests = _complete(source, m.wildcard, plain, have_source)
    m.cluster_dests = {c: _complete(source, m.wildcard, ds, have_source) for c, ds in scoped.items()}
    return m


def _complete(source, wildcard, dests, have_source):
    """processDestinations: add what the weights leave over as the identity
    (unless the source is listed: then it is lost), order by weight and make
    the weights cumulative."""
    total = sum(d.weight for d in dests)
    if total != 100 and not have_source:
        subject = _tokenized(source) if wildcard else source
        dests.append(_Dest(SubjectTransform.compile(source, subject), subject,
                           100 - total if dests else 100))
    dests.sort(key=lambda d: d.weight)
    running = 0
    for d in dests:
        d.weight += running
        running = d.weight
    return dests


def _apply(dest, subject):
    tr = dest.transform
    return _result(tr.transform(subject)) if tr is not None else _NOWHERE


class _Weighted:
    """Several destinations: one drawn per message, by weight."""

    __slots__ = ("choices",)

    def __init__(self, choices):
        self.choices = choices  # ((cumulative weight, bytes or Drop), ...)

    def pick(self, subject, _random=random.random):
        w = int(_random() * 100)
        for weight, result in self.choices:
            if w < weight:
                return result
        return _NOWHERE


class _Random:
    """A destination with ``{{random(n)}}``: transformed per message."""

    __slots__ = ("dests",)

    def __init__(self, dests):
        self.dests = dests

    def pick(self, subject, _random=random.random):
        dests = self.dests
        if len(dests) == 1 and dests[0].weight == 100:
            return _apply(dests[0], subject)
        w = int(_random() * 100)
        for d in dests:
            if w < d.weight:
                return _apply(d, subject)
        return _NOWHERE


class SubjectMappings:
    """The mappings of an account, with a per-subject cache.

    ``cache`` maps a published subject to the subject it is delivered under
    (itself when not mapped), or to an object whose ``pick(subject)`` decides
    per message (weighted or random destinations), giving bytes or a
    :class:`Drop`.  :meth:`resolve` fills it; the broker reads it directly.
    """

    def __init__(self, mappings, cluster="", cache_max=CACHE_MAX):
        by_source = {}
        for entry in mappings:
            # As nats-server: a source mapped again replaces the earlier entry.
            by_source[entry.source] = compile_mapping(entry.source, entry.destinations)
        self._mappings = list(by_source.values())
        self._literal = {m.pattern: m for m in self._mappings if not m.wildcard}
        self._wildcard = [m for m in self._mappings if m.wildcard]
        self.cluster = cluster
        self.cache = {}
        self._cache_max = cache_max

    def __len__(self):
        return len(self._mappings)

    def _find(self, subject):
        m = self._literal.get(subject)
        if m is None:
            for w in self._wildcard:
                if subject_matches(w.pattern, subject):
                    return w
        return m

    def resolve(self, subject):
        """The cache entry for ``subject``, computed and stored."""
        m = self._find(subject)
        if m is None:
            entry = subject
        else:
            dests = m.dests_for(self.cluster)
            if any(d.transform is not None and d.transform.uses_random for d in dests):
                entry = _Random(dests)
            elif len(dests) == 1 and dests[0].weight == 100:
                entry = _apply(dests[0], subject)
            else:
                entry = _Weighted(tuple((d.weight, _apply(d, subject)) for d in dests))
        cache = self.cache
        if len(cache) >= self._cache_max:
            cache.clear()
        cache[subject] = entry
        return entry

    def map(self, subject):
        """The subject a message published to ``subject`` is delivered under
        (``subject`` itself when no mapping applies), or a :class:`Drop`."""
        entry = self.cache.get(subject)
        if entry is None:
            entry = self.resolve(subject)
        if entry.__class__ is bytes:
            return entry
        return entry.pick(subject)

    def ext_map(self):
        """The mappings as nats-server's /accountz shows them (``ExtMap``):
        source -> [{subject, weight (cumulative), cluster}]."""
        out = {}
        for m in self._mappings:
            dests = [{"subject": d.subject, "weight": d.weight} for d in m.dests]
            for cluster, ds in m.cluster_dests.items():
                dests.extend({"subject": d.subject, "weight": d.weight, "cluster": cluster} for d in ds)
            out[m.source] = dests
        return out
