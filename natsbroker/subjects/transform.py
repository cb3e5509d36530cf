"""Subject transforms, as nats-server does them (server/subject_transform.go).

Sans-IO.  One compiled transform maps a literal subject that matches its source
pattern to a destination subject.  nats-server uses them for account
``mappings``, a stream's ``subject_transform``, ``republish``, the
``subject_transforms`` of stream sources and for import ``to`` subjects.

    tr = SubjectTransform.compile("a.*.*", "b.{{wildcard(2)}}.{{wildcard(1)}}")
    tr.match(b"a.x.y")   # -> b"b.y.x"
    tr.match(b"c.x.y")   # -> None

Validation follows ``NewSubjectTransformWithStrict`` (``compile``, with
``strict=True`` for the reversible import transforms) and ``ValidateMapping``
(``validate_mapping``; ``compile_mapping`` does both, as account mappings do).
A rejected transform raises :class:`TransformError` whose message is the text
nats-server reports, e.g. ``invalid mapping destination: wildcard index out of
range in {{wildcard(2)}}: [2]``.

Behaviour kept from nats-server on purpose, odd as some of it is:

* function names only have their word initials case-insensitive
  (``{{Wildcard(1)}}``, ``{{splitFromLeft(1,2)}}``; ``{{WILDCARD(1)}}`` is an
  unknown function), whitespace is allowed around the name and after commas;
* ``$0``, ``{{wildcard(0)}}`` or a negative index refer to the first *source
  token* (Go reads a missing map entry as 0);
* ``{{partition(n, i, j)}}`` hashes the selected tokens concatenated with no
  separator; ``{{partition(n)}}`` hashes the whole subject; a literal source
  ignores the indexes given to partition and hashes the whole subject;
* ``partition``/``random`` with ``n == 0`` give ``0``;
* a source of ``>`` (or empty) with a destination of ``>`` is the identity,
  even on subjects that are not valid literal subjects.
"""

import random as _random
import re

__all__ = [
    "TransformError",
    "SubjectTransform",
    "new_transform",
    "validate_mapping",
    "fnv1a32",
    "transform_untokenize",
]

# nats-server's error texts (server/errors.go).
ERR_BAD_SUBJECT = "invalid subject"
ERR_INVALID_MAPPING_DESTINATION = "invalid mapping destination"
ERR_INVALID_MAPPING_DESTINATION_SUBJECT = ERR_INVALID_MAPPING_DESTINATION + ": invalid transform"
ERR_NOT_USING_ALL_WILDCARDS = ERR_INVALID_MAPPING_DESTINATION + ": not using all of the token wildcard(s)"
ERR_UNKNOWN_FUNCTION = ERR_INVALID_MAPPING_DESTINATION + ": unknown function"
ERR_INDEX_OUT_OF_RANGE = ERR_INVALID_MAPPING_DESTINATION + ": wildcard index out of range"
ERR_NOT_ENOUGH_ARGS = ERR_INVALID_MAPPING_DESTINATION + ": not enough arguments passed to the function"
ERR_INVALID_ARG = ERR_INVALID_MAPPING_DESTINATION + ": function argument is invalid or in the wrong format"
ERR_TOO_MANY_ARGS = ERR_INVALID_MAPPING_DESTINATION + ": too many arguments passed to the function"
ERR_NOT_SUPPORTED_FOR_IMPORT = (ERR_INVALID_MAPPING_DESTINATION + ": the only mapping function allowed "
                                "for import transforms is {{Wildcard()}}")


class TransformError(ValueError):
    """A subject transform nats-server would refuse.

    ``str(err)`` is nats-server's message; ``reason`` is the error without the
    ``" in <token>"`` suffix and ``token`` the offending token (or ``""``).
    """

    def __init__(self, reason, token=""):
        self.reason = reason
        self.token = token
        # mappingDestinationErr.Error(): "<err> in <token>", or just <err>.
        ValueError.__init__(self, "%s in %s" % (reason, token) if token else reason)


# Transform kinds (the order of nats-server's enum).
NO_TRANSFORM = 0
BAD_TRANSFORM = 1
PARTITION = 2
WILDCARD = 3
SPLIT_FROM_LEFT = 4
SPLIT_FROM_RIGHT = 5
SLICE_FROM_LEFT = 6
SLICE_FROM_RIGHT = 7
SPLIT = 8
LEFT = 9
RIGHT = 10
RANDOM = 11

# Go's RE2 \s is [\t\n\f\r ]; Python's is wider, so spell it out.
_S = r"[\t\n\f\r ]"


def _fn_re(name):
    return re.compile(r"{{%s*%s%s*\((.*)\)%s*}}" % (_S, name, _S, _S))


_COMMA_RE = re.compile(r",%s*" % _S)
_PARTITION_RE = _fn_re("[pP]artition")
_WILDCARD_RE = _fn_re("[wW]ildcard")
_SPLIT_FROM_LEFT_RE = _fn_re("[sS]plit[fF]rom[lL]eft")
_SPLIT_FROM_RIGHT_RE = _fn_re("[sS]plit[fF]rom[rR]ight")
_SLICE_FROM_LEFT_RE = _fn_re("[sS]lice[fF]rom[lL]eft")
_SLICE_FROM_RIGHT_RE = _fn_re("[sS]lice[fF]rom[rR]ight")
_SPLIT_RE = _fn_re("[sS]plit")
_LEFT_RE = _fn_re("[lL]eft")
_RIGHT_RE = _fn_re("[rR]ight")
_RANDOM_RE = _fn_re("[rR]andom")

_ALL_FUNCTION_RES = (_PARTITION_RE, _WILDCARD_RE, _SPLIT_FROM_LEFT_RE, _SPLIT_FROM_RIGHT_RE,
                     _SLICE_FROM_LEFT_RE, _SLICE_FROM_RIGHT_RE, _SPLIT_RE, _LEFT_RE, _RIGHT_RE,
                     _RANDOM_RE)

# Index-and-int functions, in the order indexPlaceHolders tries them.
_INDEX_INT_FUNCTIONS = (
    (_SPLIT_FROM_LEFT_RE, SPLIT_FROM_LEFT),
    (_SPLIT_FROM_RIGHT_RE, SPLIT_FROM_RIGHT),
    (_SLICE_FROM_LEFT_RE, SLICE_FROM_LEFT),
    (_SLICE_FROM_RIGHT_RE, SLICE_FROM_RIGHT),
    (_RIGHT_RE, RIGHT),
    (_LEFT_RE, LEFT),
)

_INT_RE = re.compile(r"[+-]?[0-9]+\Z")
_MAX_INT32 = 2 ** 31 - 1
_MIN_INT32 = -2 ** 31
_MAX_INT64 = 2 ** 63 - 1
_MIN_INT64 = -2 ** 63


def _atoi(s, lo=_MIN_INT64, hi=_MAX_INT64):
    """Go's strconv.Atoi (or ParseInt(s, 10, 32) with the int32 bounds); None on error."""
    if not _INT_RE.match(s):
        return None
    n = int(s)
    if n < lo or n > hi:
        return None
    return n


def _int32(n):
    """Go's int32(n) conversion (wraps)."""
    return ((n + 2 ** 31) & 0xFFFFFFFF) - 2 ** 31


def _function_args(regex, token):
    """getMappingFunctionArgs: the comma-split arguments, or None if no match."""
    m = regex.search(token)
    if m is None:
        return None
    return _COMMA_RE.split(m.group(1))


def transform_untokenize(subject):
    """transformUntokenize: ``$n`` and ``{{wildcard(n)}}`` tokens become ``*``."""
    out = []
    for t in subject.split("."):
        args = _function_args(_WILDCARD_RE, t)
        if (len(t) > 1 and t[0] == "$" and "1" <= t[1] <= "9") or (
                args is not None and len(args) == 1 and args[0] != ""):
            out.append("*")
        else:
            out.append(t)
    return ".".join(out)


def _index_int_args(token, args, kind):
    """transformIndexIntArgsHelper."""
    if len(args) < 2:
        raise TransformError(ERR_NOT_ENOUGH_ARGS, token)
    if len(args) > 2:
        raise TransformError(ERR_TOO_MANY_ARGS, token)
    i = _atoi(args[0].strip(" "))
    if i is None:
        raise TransformError(ERR_INVALID_ARG, token)
    n = _atoi(args[1].strip(" "), _MIN_INT32, _MAX_INT32)
    if n is None:
        raise TransformError(ERR_INVALID_ARG, token)
    return kind, [i], n, ""


def _index_placeholders(token):
    """indexPlaceHolders: (kind, wildcard indexes, int arg, string arg) for one dest token."""
    length = len(token)
    if length > 1:
        # Old $1, $2... form; other things use tokens starting with $, so a
        # non-number is just a literal.
        if token[0] == "$":
            tp = _atoi(token[1:])
            if tp is None:
                return NO_TRANSFORM, [-1], -1, ""
            return WILDCARD, [tp], -1, ""

        if length > 4 and token.startswith("{{") and token.endswith("}}"):
            args = _function_args(_WILDCARD_RE, token)
            if args is not None:
                if len(args) == 1 and args[0] == "":
                    raise TransformError(ERR_NOT_ENOUGH_ARGS, token)
                if len(args) == 1:
                    i = _atoi(args[0].strip(" "))
                    if i is None:
                        raise TransformError(ERR_INVALID_ARG, token)
                    return WILDCARD, [i], -1, ""
                raise TransformError(ERR_TOO_MANY_ARGS, token)

            args = _function_args(_PARTITION_RE, token)
            if args is not None:
                n = _atoi(args[0].strip(" "))
                if n is None or n > _MAX_INT32:
                    raise TransformError(ERR_INVALID_ARG, token)
                indexes = []
                for a in args[1:]:
                    i = _atoi(a.strip(" "))
                    if i is None:
                        raise TransformError(ERR_INVALID_ARG, token)
                    indexes.append(i)
                return PARTITION, indexes, _int32(n), ""

            for regex, kind in _INDEX_INT_FUNCTIONS:
                args = _function_args(regex, token)
                if args is not None:
                    return _index_int_args(token, args, kind)

            args = _function_args(_SPLIT_RE, token)
            if args is not None:
                if len(args) < 2:
                    raise TransformError(ERR_NOT_ENOUGH_ARGS, token)
                if len(args) > 2:
                    raise TransformError(ERR_TOO_MANY_ARGS, token)
                i = _atoi(args[0].strip(" "))
                if i is None:
                    raise TransformError(ERR_INVALID_ARG, token)
                if " " in args[1] or "." in args[1]:
                    raise TransformError(ERR_INVALID_ARG, token)
                return SPLIT, [i], -1, args[1]

            args = _function_args(_RANDOM_RE, token)
            if args is not None:
                if len(args) != 1:
                    raise TransformError(ERR_NOT_ENOUGH_ARGS, token)
                n = _atoi(args[0].strip(" "))
                if n is None or n > _MAX_INT32:
                    raise TransformError(ERR_INVALID_ARG, token)
                return RANDOM, [], _int32(n), ""

            raise TransformError(ERR_UNKNOWN_FUNCTION, token)
    return NO_TRANSFORM, [-1], -1, ""


def _subject_info(subject):
    """subjectInfo: (valid, tokens, number of '*', ends in '>')."""
    if not subject:
        return False, None, 0, False
    npwcs = 0
    sfwc = False
    tokens = subject.split(".")
    for t in tokens:
        if not t or sfwc:
            return False, None, 0, False
        if t == ">":
            sfwc = True
        elif t == "*":
            npwcs += 1
    return True, tokens, npwcs, sfwc


def validate_mapping(src, dest):
    """nats-server's ValidateMapping (account mappings, stream subject_transform).

    Stricter than :func:`new_transform` on the destination's shape: no
    whitespace in plain tokens, ``{{...}}`` tokens must name a known function.
    Raises :class:`TransformError`; returns None when the mapping is accepted.
    """
    src, dest = _text(src), _text(dest)
    if dest == "":
        return None
    sfwc = False
    for t in dest.split("."):
        length = len(t)
        if length == 0 or sfwc:
            raise TransformError(ERR_INVALID_MAPPING_DESTINATION_SUBJECT, t)
        if length > 4 and t.startswith("{{") and t.endswith("}}"):
            if not any(r.search(t) for r in _ALL_FUNCTION_RES):
                raise TransformError(ERR_UNKNOWN_FUNCTION, t)
            continue
        if t == ">":
            sfwc = True
        elif any(c in t for c in "\t\n\f\r "):
            raise TransformError(ERR_INVALID_MAPPING_DESTINATION_SUBJECT)
    new_transform(src, dest)
    return None


def fnv1a32(data):
    """32-bit FNV-1a, as Go's hash/fnv New32a."""
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def _text(s):
    if isinstance(s, (bytes, bytearray)):
        return bytes(s).decode("utf-8", "surrogateescape")
    return s


def _enc(s):
    return s.encode("utf-8", "surrogateescape")


def _go_split_empty(b):
    """strings.Split(s, ""): one piece per UTF-8 sequence (invalid bytes alone)."""
    return [c.encode("utf-8", "surrogateescape") for c in b.decode("utf-8", "surrogateescape")]


# --- runtime operations on one destination token ---------------------------
# Each takes (tokens, subject) and returns the bytes to write for that token.

def _op_partition(indexes, n):
    buckets = n & 0xFFFFFFFF  # uint32(int(int32))
    if buckets == 0:
        return lambda toks, subject: b"0"
    if indexes:
        if len(indexes) == 1:
            i = indexes[0]
            return lambda toks, subject: b"%d" % (fnv1a32(toks[i]) % buckets)
        return lambda toks, subject: b"%d" % (fnv1a32(b"".join([toks[i] for i in indexes])) % buckets)
    return lambda toks, subject: b"%d" % (fnv1a32(subject) % buckets)


def _op_random(n):
    if n == 0:
        return lambda toks, subject: b"0"
    # int(rand.Int31()) % ceiling: non-negative, below |ceiling|.
    m = abs(n)
    return lambda toks, subject: b"%d" % _random.randrange(m)


def _op_split_from_left(i, pos):
    def op(toks, subject):
        t = toks[i]
        if 0 < pos < len(t):
            return t[:pos] + b"." + t[pos:]
        return t
    return op


def _op_split_from_right(i, pos):
    def op(toks, subject):
        t = toks[i]
        n = len(t)
        if 0 < pos < n:
            return t[:n - pos] + b"." + t[n - pos:]
        return t
    return op


def _op_slice_from_left(i, size):
    def op(toks, subject):
        t = toks[i]
        n = len(t)
        if 0 < size < n:
            return b".".join([t[j:j + size] for j in range(0, n, size)])
        return t
    return op


def _op_slice_from_right(i, size):
    def op(toks, subject):
        t = toks[i]
        n = len(t)
        if 0 < size < n:
            r = n % size
            parts = [t[:r]] if r else []
            parts.extend(t[j:j + size] for j in range(r, n, size))
            return b".".join(parts)
        return t
    return op


def _op_split(i, delim):
    def op(toks, subject):
        t = toks[i]
        splits = t.split(delim) if delim else _go_split_empty(t)
        out = []
        last = len(splits) - 1
        for j, s in enumerate(splits):
            if s:
                out.append(s)
            if j < last and splits[j + 1] and not (j == 0 and not s):
                out.append(b".")
        return b"".join(out)
    return op


def _op_left(i, size):
    def op(toks, subject):
        t = toks[i]
        if 0 < size < len(t):
            return t[:size]
        return t
    return op


def _op_right(i, size):
    def op(toks, subject):
        t = toks[i]
        n = len(t)
        if 0 < size < n:
            return t[n - size:]
        return t
    return op


class SubjectTransform:
    """A compiled subject transform; build one with :meth:`compile`."""

    __slots__ = ("src", "dest", "strict", "_stoks", "_dtoks", "_kinds", "_identity", "_nstoks",
                 "_fwc", "_src_lits", "_plan", "_simple", "_const", "_has_indexes")

    def __init__(self):
        raise TypeError("use SubjectTransform.compile(src, dest)")

    # --- construction -----------------------------------------------------

    @classmethod
    def compile(cls, src, dest, strict=False):
        """NewSubjectTransformWithStrict(src, dest, strict).

        ``src``/``dest`` are str (or UTF-8 bytes).  An empty ``src`` means
        ``>``.  Returns None for an empty ``dest`` (nats-server: no
        transform).  ``strict`` is for import transforms that must be
        reversible: only ``$n``/``{{wildcard(n)}}`` and every ``*`` used.
        Raises :class:`TransformError`.
        """
        src, dest = _text(src), _text(dest)
        if dest == "":
            return None
        if src == "":
            src = ">"

        sv, stokens, npwcs, has_fwc = _subject_info(src)
        dv, dtokens, dnpwcs, d_has_fwc = _subject_info(dest)
        if not sv or not dv or dnpwcs > 0 or has_fwc != d_has_fwc:
            raise TransformError(ERR_BAD_SUBJECT)

        # kinds[i] is (kind, source token indexes, int arg, string arg).
        kinds = []
        if npwcs > 0 or has_fwc:
            # Wildcard number (1-based) -> source token position.
            sti = {}
            for i, t in enumerate(stokens):
                if t == "*":
                    sti[len(sti) + 1] = i
            nphs = 0
            for token in dtokens:
                kind, windexes, intarg, strarg = _index_placeholders(token)
                if strict and kind not in (NO_TRANSFORM, WILDCARD):
                    raise TransformError(ERR_NOT_SUPPORTED_FOR_IMPORT, token)
                if kind == NO_TRANSFORM:
                    kinds.append((NO_TRANSFORM, [-1], -1, ""))
                elif kind == RANDOM:
                    kinds.append((RANDOM, [], intarg, ""))
                else:
                    nphs += len(windexes)
                    stis = []
                    for w in windexes:
                        if w > npwcs:
                            raise TransformError(ERR_INDEX_OUT_OF_RANGE, "%s: [%d]" % (token, w))
                        stis.append(sti.get(w, 0))
                    kinds.append((kind, stis, intarg, strarg))
            if strict and nphs < npwcs:
                raise TransformError(ERR_NOT_USING_ALL_WILDCARDS, dest)
        else:
            for token in dtokens:
                kind, _, intarg, _ = _index_placeholders(token)
                if kind == NO_TRANSFORM:
                    kinds.append((NO_TRANSFORM, [-1], -1, ""))
                elif kind in (RANDOM, PARTITION):
                    kinds.append((kind, [], intarg, ""))
                else:
                    raise TransformError(ERR_INDEX_OUT_OF_RANGE, token)

        self = object.__new__(cls)
        self.src = src
        self.dest = dest
        self.strict = strict
        self._stoks = stokens
        self._dtoks = dtokens
        self._kinds = kinds
        self._has_indexes = bool(kinds)
        self._identity = src == ">" and dest == ">"
        self._nstoks = len(stokens)
        self._fwc = has_fwc
        self._src_lits = [(i, _enc(t)) for i, t in enumerate(stokens) if t not in ("*", ">")]
        self._build_plan()
        return self

    @classmethod
    def compile_mapping(cls, src, dest):
        """What an account mapping (or stream subject_transform) accepts:
        :func:`validate_mapping` then :meth:`compile`."""
        validate_mapping(src, dest)
        return cls.compile(src, dest)

    def _build_plan(self):
        plan = []
        for tok, (kind, idx, n, s) in zip(self._dtoks, self._kinds):
            if kind == NO_TRANSFORM:
                if tok == ">":
                    break  # the source's trailing tokens are appended
                plan.append(_enc(tok))
            elif kind == WILDCARD:
                plan.append(idx[0])
            elif kind == PARTITION:
                plan.append(_op_partition(idx, n))
            elif kind == RANDOM:
                plan.append(_op_random(n))
            elif kind == SPLIT_FROM_LEFT:
                plan.append(_op_split_from_left(idx[0], n))
            elif kind == SPLIT_FROM_RIGHT:
                plan.append(_op_split_from_right(idx[0], n))
            elif kind == SLICE_FROM_LEFT:
                plan.append(_op_slice_from_left(idx[0], n))
            elif kind == SLICE_FROM_RIGHT:
                plan.append(_op_slice_from_right(idx[0], n))
            elif kind == SPLIT:
                plan.append(_op_split(idx[0], _enc(s)))
            elif kind == LEFT:
                plan.append(_op_left(idx[0], n))
            elif kind == RIGHT:
                plan.append(_op_right(idx[0], n))
            else:  # pragma: no cover
                raise AssertionError(kind)
        self._plan = plan
        self._simple = all(p.__class__ in (bytes, int) for p in plan)
        self._const = (b".".join(plan)
                       if not self._fwc and all(p.__class__ is bytes for p in plan) else None)

    # --- use ----------------------------------------------------------------

    def match(self, subject):
        """The transformed subject if ``subject`` (bytes, literal) matches the
        source, else None (also None for a subject that is not a valid
        literal subject)."""
        if self._identity:
            return subject
        toks = subject.split(b".")
        n = len(toks)
        if self._fwc:
            if n < self._nstoks:
                return None
        elif n != self._nstoks:
            return None
        for i, lit in self._src_lits:
            if toks[i] != lit:
                return None
        if b"" in toks or b"*" in toks or b">" in toks:
            return None
        return self._apply(toks, subject)

    def transform(self, subject):
        """TransformSubject: apply without checking that ``subject`` matches."""
        return self._apply(subject.split(b"."), subject)

    def transform_tokens(self, tokens):
        """TransformTokenizedSubject on already split tokens."""
        return self._apply(tokens, b".".join(tokens))

    def _apply(self, toks, subject):
        if self._const is not None:
            return self._const
        if self._simple:
            out = [p if p.__class__ is bytes else toks[p] for p in self._plan]
        else:
            out = []
            for p in self._plan:
                c = p.__class__
                if c is bytes:
                    out.append(p)
                elif c is int:
                    out.append(toks[p])
                else:
                    out.append(p(toks, subject))
        if self._fwc:
            out.extend(toks[self._nstoks - 1:])
        return b".".join(out)

    @property
    def uses_random(self):
        """True if a destination token is ``{{random(n)}}``: the result then
        differs from one message to the next, so it cannot be cached."""
        return any(kind == RANDOM for kind, _, _, _ in self._kinds)

    def reverse(self):
        """The reverse transform (nats-server's reverse(), used for imports):
        a strict transform from the destination back to the source, or None
        when it cannot be built."""
        if not self._has_indexes:  # pragma: no cover - never for a non-empty dest
            return _strict_or_none(self.dest, self.src)
        phs = []
        nda = []
        for token in self.dest.split("."):
            args = _function_args(_WILDCARD_RE, token)
            if ((len(token) > 1 and token[0] == "$" and "1" <= token[1] <= "9")
                    or (args is not None and len(args) == 1 and args[0] != "")):
                phs.append(token)
                nda.append("*")
            else:
                nda.append(token)
        nsrc = ".".join(nda)
        out = []
        for token in self._stoks:
            if token == "*":
                if not phs:
                    return None
                out.append(phs.pop(0))
            else:
                out.append(token)
        return _strict_or_none(nsrc, ".".join(out))

    def __repr__(self):
        return "SubjectTransform(%r, %r%s)" % (self.src, self.dest, ", strict=True" if self.strict else "")


def _strict_or_none(src, dest):
    try:
        return SubjectTransform.compile(src, dest, strict=True)
    except TransformError:
        return None


def new_transform(src, dest, strict=False):
    """Alias of :meth:`SubjectTransform.compile` (NewSubjectTransform[Strict])."""
    return SubjectTransform.compile(src, dest, strict)
