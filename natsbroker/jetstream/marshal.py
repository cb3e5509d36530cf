"""attrs models <-> nats-server's JSON: field declarations, ``to_json``, the
cattrs ``converter`` and request decoding.

A model field is declared with ``gofield``; its metadata drives both ways:
"go" is the Go type (a :mod:`~natsbroker.gocompat.gojson` descriptor, for
decoding and error messages); "omit" is ``omitempty``; "time" marks Unix-ns
ints marshalled as RFC 3339; "embed" flattens a nested object's fields into
the parent (Go embedding); "skip" is never marshalled.  ``to_json(obj)`` (also
the converter's unstructure hook) gives the dict nats-server would send;
``decode_request(raw, cls)`` decodes an API request with Go's error texts and
builds ``cls`` through the converter.  A model class may define
``__go_json__(self, *, version, api_level)`` to marshal itself.
"""

import attrs
import cattrs
import cattrs.gen

from natsbroker.gocompat.gojson import (
    GoJSONError,
    SliceType,
    StructType,
    decode_fields,
    go_json_dumps,
    unmarshal_fields,
)
from natsbroker.gocompat.times import parse_rfc3339, rfc3339
from natsbroker.jetstream import errors as E
from natsbroker.jetstream.errors import ApiError
from natsbroker.jetstream.versions import API_LEVEL, SERVER_VERSION


def gofield(go=None, default=None, omit=False, factory=None, **meta):
    """An ``attrs.field`` of a wire model; ``go``: its Go type, ``omit``: omitempty."""
    md = {"omit": omit}
    if go is not None:
        md["go"] = go
    md.update(meta)
    if factory is not None:
        return attrs.field(factory=factory, metadata=md)
    return attrs.field(default=default, metadata=md)


def is_empty(value, field):
    """Go's ``omitempty`` test (or the field's own ``omit_value``)."""
    if "omit_value" in field.metadata:
        return value == field.metadata["omit_value"]
    if value is None or value is False:
        return True
    if isinstance(value, (int, str, list, dict)) and not isinstance(value, bool):
        return not value
    return False


def to_json(obj, *, version=SERVER_VERSION, api_level=API_LEVEL):
    """A model instance (or list/dict of them) as the dict nats-server would send.

    Field order is the Go struct's, ``omitempty`` fields are dropped when
    empty, ``time`` fields are RFC 3339 strings, embedded objects flattened,
    map keys sorted (Go sorts them).  A model with ``__go_json__`` (the stream
    config: replies carry ``_nats.ver``/``_nats.level`` = ``version``/``api_level``)
    marshals itself.  Feed the result to ``go_json_dumps``.
    """
    cls = type(obj)
    if attrs.has(cls):
        own = getattr(cls, "__go_json__", None)
        if own is not None:
            return own(obj, version=version, api_level=api_level)
        out = {}
        for f in attrs.fields(cls):
            md = f.metadata
            if md.get("skip"):
                continue
            value = getattr(obj, f.name)
            if md.get("omit") and is_empty(value, f):
                continue
            if md.get("embed"):
                out.update(to_json(value, version=version, api_level=api_level))
                continue
            if md.get("time"):
                out[f.name] = rfc3339(value)
                continue
            out[f.name] = to_json(value, version=version, api_level=api_level)
        return out
    if isinstance(obj, ApiError):
        return obj.to_json()
    if isinstance(obj, (list, tuple)):
        return [to_json(v, version=version, api_level=api_level) for v in obj]
    if isinstance(obj, dict):
        return {k: to_json(obj[k], version=version, api_level=api_level) for k in sorted(obj)}
    return obj


def fields_json(obj):
    """``to_json`` of one attrs object's own fields (no ``__go_json__``)."""
    out = {}
    for f in attrs.fields(type(obj)):
        md = f.metadata
        if md.get("skip"):
            continue
        value = getattr(obj, f.name)
        if md.get("omit") and is_empty(value, f):
            continue
        out[f.name] = to_json(value)
    return out


def response_json(resp, *, version=SERVER_VERSION, api_level=API_LEVEL):
    """A response model as the bytes nats-server would send."""
    return go_json_dumps(to_json(resp, version=version, api_level=api_level)).encode("utf-8")


# ---------------------------------------------------------------------------
# The converter: every model unstructures through to_json; structure hooks
# are registered by the modules that define the models.
# ---------------------------------------------------------------------------

converter = cattrs.Converter()


def structure_time_ns(value):
    """A ``time`` field read back: Unix ns, RFC 3339 text or None (0)."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    return parse_rfc3339(value)


def unstructure_as_json(*classes):
    for cls in classes:
        converter.register_unstructure_hook(cls, to_json)


def lenient_hook(cls):
    """Structure hook for reply models: accepts our own JSON (times as
    strings, unknown keys ignored)."""
    base = cattrs.gen.make_dict_structure_fn(cls, converter)
    time_fields = [f.name for f in attrs.fields(cls) if f.metadata.get("time")]
    names = {f.name for f in attrs.fields(cls)}

    def hook(value, _):
        if isinstance(value, cls):
            return value
        value = {k: v for k, v in value.items() if k in names}
        for name in time_fields:
            if name in value:
                value[name] = structure_time_ns(value[name])
        return base(value, cls)
    return hook


def go_hook(cls):
    """Structure hook for config/request models: nested objects by their Go type."""
    fields = attrs.fields(cls)
    nested = {}
    for f in fields:
        go = f.metadata.get("go")
        if isinstance(go, StructType):
            nested[f.name] = go.cls
        elif isinstance(go, SliceType) and isinstance(go.elem, StructType):
            nested[f.name] = ("list", go.elem.cls)

    def hook(value, _):
        if isinstance(value, cls):
            return value
        kwargs = {}
        for f in fields:
            if f.name not in value:
                continue
            v = value[f.name]
            target = nested.get(f.name)
            if v is None and isinstance(f.default, attrs.Factory):
                continue                     # null into a non-pointer struct: keep the zero value
            if target is None or v is None:
                if f.metadata.get("time") and isinstance(v, str):
                    v = parse_rfc3339(v)
                kwargs[f.name] = v
            elif isinstance(target, tuple):
                kwargs[f.name] = [None if item is None else converter.structure(item, target[1])
                                  for item in v]
            else:
                kwargs[f.name] = converter.structure(v, target)
        return cls(**kwargs)
    return hook


def register_go(*classes):
    """Config and request models: decoded with ``go_hook``, marshalled with ``to_json``."""
    for cls in classes:
        converter.register_structure_hook(cls, go_hook(cls))
    unstructure_as_json(*classes)


def register_lenient(*classes):
    """Info models: read back with ``lenient_hook``, marshalled with ``to_json``."""
    for cls in classes:
        converter.register_structure_hook(cls, lenient_hook(cls))
    unstructure_as_json(*classes)


# ---------------------------------------------------------------------------
# Requests
# ---------------------------------------------------------------------------

def decode_request(raw, cls):
    """Decode an API request body into ``cls`` as nats-server's strict decoder does.

    Raises ``ApiError`` ``invalid_json(...)`` (400/10025) with Go's message.
    An empty (or all white space) body gives ``cls()`` with its zero values.
    """
    if raw is None:
        raw = b""
    if isinstance(raw, str):
        raw = raw.encode("utf-8")
    try:
        fields = decode_fields(bytes(raw), cls)
    except GoJSONError as e:
        raise E.invalid_json(str(e)) from None
    return converter.structure(fields, cls)


def unmarshal_request(raw, cls):
    """Decode ``raw`` into ``cls`` as Go's plain ``json.Unmarshal`` does (what
    nats-server uses for direct gets): unknown fields are ignored, the body must
    be exactly one JSON value, ``null`` leaves the zero values. Raises
    ``GoJSONError`` on anything else."""
    fields = unmarshal_fields(bytes(raw), cls)
    if fields is None:
        return cls()
    return converter.structure(fields, cls)
