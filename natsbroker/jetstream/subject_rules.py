"""nats-server's subject and name rules on ``str``, as JetStream applies them:
``IsValidSubject``, literal subjects, overlapping subject lists, stream and
consumer names, and subject mapping (``ValidateMapping`` /
``NewSubjectTransform``) errors with nats-server's texts.
"""

import re

from natsbroker.subjects.sublist import subjects_collide

_SUBJ_SPACES = " \t\n\r\f"


def subject_is_valid(subject):
    """nats-server ``IsValidSubject``: no empty token, no white space, ``>`` last.

    ``*``/``>`` inside a longer token are ordinary characters."""
    if not subject:
        return False
    sfwc = False
    for t in subject.split("."):
        if not t or sfwc:
            return False
        if len(t) > 1:
            if any(c in t for c in _SUBJ_SPACES):
                return False
            continue
        if t == ">":
            sfwc = True
        elif t in _SUBJ_SPACES:
            return False
    return True


def subject_is_literal(subject):
    """No ``*`` or ``>`` token."""
    return all(t not in ("*", ">") for t in subject.split("."))


def subject_is_valid_literal(subject):
    return subject_is_valid(subject) and subject_is_literal(subject)


def subjects_overlap(subjects1, subjects2):
    """Any subject of one list collides with one of the other (the 10065 check)."""
    return any(subjects_collide(a, b) for a in subjects1 or () for b in subjects2 or ())


def is_valid_name(name):
    """Stream/consumer name rule: non-empty, none of `` \\t\\r\\n\\f.*>\\/``."""
    return bool(name) and not any(c in name for c in " \t\r\n\f.*>\\/")


# --- subject transforms (ValidateMapping / NewSubjectTransform) -------------

_MAPPING_FUNCS = ("wildcard", "partition", "splitfromleft", "splitfromright", "slicefromleft",
                  "slicefromright", "split", "left", "right", "random")
_MD = "invalid mapping destination"


class _MappingError(Exception):
    pass


def _placeholder(token):
    """(kind, wildcard indexes) of a destination token; raises _MappingError."""
    if len(token) > 1 and token[0] == "$":
        try:
            return "wildcard", [int(token[1:])]
        except ValueError:
            return "none", []
    if len(token) > 4 and token.startswith("{{") and token.endswith("}}"):
        m = re.fullmatch(r"\{\{\s*([A-Za-z]+)\s*\((.*)\)\s*\}\}", token)
        fn = m.group(1).lower() if m else ""
        if fn not in _MAPPING_FUNCS:
            raise _MappingError("%s: unknown function in %s" % (_MD, token))
        args = [a.strip() for a in m.group(2).split(",")]
        if fn == "wildcard":
            if len(args) != 1 or not args[0]:
                raise _MappingError("%s: %s in %s" % (
                    _MD, "not enough arguments passed to the function" if not args[0]
                    else "too many arguments passed to the function", token))
            try:
                return "wildcard", [int(args[0])]
            except ValueError:
                raise _MappingError("%s: function argument is invalid or in the wrong format in %s"
                                    % (_MD, token)) from None
        if fn in ("partition", "random"):
            return fn, []
        try:
            return fn, [int(args[0])]
        except (ValueError, IndexError):
            raise _MappingError("%s: function argument is invalid or in the wrong format in %s"
                                % (_MD, token)) from None
    return "none", []


def subject_transform_error(src, dest):
    """None if ``src`` -> ``dest`` is a valid transform, else nats-server's error text.

    An empty ``dest`` is no transform at all: accepted whatever ``src`` is."""
    if not dest:
        return None
    if not src:
        src = ">"
    stoks, dtoks = src.split("."), dest.split(".")
    if (not subject_is_valid(src) or not subject_is_valid(dest) or "*" in dtoks
            or ((">" in stoks) != (">" in dtoks))):
        return "invalid subject"
    npwcs = stoks.count("*")
    for token in dtoks:
        try:
            kind, idxs = _placeholder(token)
        except _MappingError as e:
            return str(e)
        if kind in ("none", "partition", "random"):
            continue
        if npwcs == 0 and ">" not in stoks:
            return "%s: wildcard index out of range in %s" % (_MD, token)
        for i in idxs:
            if i > npwcs:
                return "%s: wildcard index out of range in %s: [%d]" % (_MD, token, i)
    return None


def validate_mapping(src, dest):
    """nats-server ``ValidateMapping``: None or the error text."""
    if not dest:
        return None
    sfwc = False
    for t in dest.split("."):
        if not t or sfwc:
            return "%s: invalid transform" % _MD
        if "{{" in t and "}}" in t:
            try:
                kind, _ = _placeholder(t)
            except _MappingError as e:
                return str(e)
            if kind == "none":
                return "%s: unknown function in %s" % (_MD, t)
        if t == ">":
            sfwc = True
        elif any(c in t for c in _SUBJ_SPACES):
            return "%s: invalid transform" % _MD
    return subject_transform_error(src, dest)
