"""The bodies of the consumer API requests other than create, parsed as nats-server does (2.15.1).

CONSUMER.MSG.NEXT (``nextReqFromMsg``) and the answers a pull request gets from
the consumer's config alone; CONSUMER.UNPIN and CONSUMER.RESET, which nats-server
decodes with ``json.Unmarshal``: no unknown-field errors, syntax messages
without offsets, the type-error path is the field's (``.batch``,
``JSApiConsumerUnpinRequest.group``, ``JSApiConsumerResetRequest.seq``); and
CONSUMER.PAUSE and NAMES/LIST, decoded strictly like a create request.
"""

import re

from natsbroker.gocompat import gojson
from natsbroker.gocompat.durations import format_duration as go_duration
from natsbroker.gocompat.gojson import GoJSONError
from natsbroker.jetstream import errors as E, marshal
from natsbroker.jetstream.consumer_config import go_atoi
from natsbroker.jetstream.consumer_models import (
    GROUP_NAME,
    ConsumerPauseRequest,
    ConsumerResetRequest,
    ConsumersRequest,
    ConsumerUnpinRequest,
    NextRequest,
    structure,
)


def parse_consumers_request(raw):
    """CONSUMER.NAMES/LIST body (empty allowed); strict decode, 10025."""
    return marshal.decode_request(raw, ConsumersRequest)


def parse_pause_request(raw):
    """CONSUMER.PAUSE body (empty allowed); strict decode, 10025."""
    return marshal.decode_request(raw, ConsumerPauseRequest)


# ---------------------------------------------------------------------------
# CONSUMER.MSG.NEXT
# ---------------------------------------------------------------------------

class NextRequestError(Exception):
    """A pull request nats-server answers with a status, e.g. 400
    ``Bad Request - heartbeat value too large``; ``header`` is the reply."""

    def __init__(self, status, description):
        super().__init__(description)
        self.status = status
        self.description = description

    @property
    def header(self):
        return ("NATS/1.0 %d %s\r\n\r\n" % (self.status, self.description)).encode("utf-8")

    def __eq__(self, other):
        return isinstance(other, NextRequestError) and (self.status, self.description) == (
            other.status, other.description)

    def __hash__(self):
        return hash((self.status, self.description))

    def __repr__(self):
        return "NextRequestError(%d, %r)" % (self.status, self.description)


# Go's unicode.IsSpace (bytes.TrimSpace).
_GO_SPACES = "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007" \
             "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"


def _unmarshal(data, cls):
    """``json.Unmarshal(data, &cls)``: the whole input is syntax-checked first.

    nats-server 2.15.1's json.Unmarshal gives the same texts as its decoder
    (``models``) but without " at offset N", "unexpected end of JSON input" at
    EOF and "invalid character 'x' after top-level value" for trailing data."""
    try:
        node = gojson.unmarshal_node(data)
    except GoJSONError as e:
        text = str(e)
        if text == "unexpected EOF":
            text = "unexpected end of JSON input"
        raise GoJSONError(re.sub(r" at offset \d+$", "", text)) from None
    if node.kind == "null":
        return {}                       # the zero request
    if node.kind != "object":
        raise GoJSONError("json: cannot unmarshal %s into Go value of type server.%s"
                          % (gojson.KIND_NAMES[node.kind], cls.__go_name__))
    return gojson.Decoder(data, cls, lenient=True).struct(node, cls, {}, [])


def _api_unmarshal(raw, cls):
    """An API body through ``json.Unmarshal`` (any error is 400/10025 "invalid JSON: ...")."""
    try:
        return structure(cls, _unmarshal(bytes(raw or b""), cls))
    except GoJSONError as e:
        raise E.invalid_json(str(e)) from None


def parse_unpin_request(raw):
    """The priority group a CONSUMER.UNPIN body names, checked as nats-server
    does before it looks the stream up: JSON (an empty body too: "unexpected
    end of JSON input"), then a group (10025 "consumer group not specified"),
    then its name (10162)."""
    group = _api_unmarshal(raw, ConsumerUnpinRequest).group
    if not group:
        raise E.invalid_json("consumer group not specified")
    if not GROUP_NAME.match(group):
        raise E.consumer_invalid_group_name()
    return group


def parse_reset_request(raw):
    """The sequence a CONSUMER.RESET body asks for (0: back to the ack floor).
    An empty body is the ack floor; anything else must be JSON (``null``
    included, white space not)."""
    if not raw:
        return 0
    return _api_unmarshal(raw, ConsumerResetRequest).seq


def _wrap64(v):
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >= (1 << 63) else v


def parse_next_request(raw):
    """A CONSUMER.MSG.NEXT payload as nats-server's ``nextReqFromMsg`` reads it.

    Trimmed of (Unicode) white space: empty -> batch 1; starting with ``{`` ->
    decoded like ``json.Unmarshal`` (unknown fields ignored, keys matched
    case-insensitively, the first type error wins: ``NextRequestError(400,
    "Bad Request - json: cannot unmarshal string into Go struct field .batch
    of type int")``, syntax errors without offsets); ``idle_heartbeat`` > 0
    with ``2 * idle_heartbeat > expires`` -> 400 "Bad Request - heartbeat value
    too large"; anything else: ``strconv.Atoi`` as the batch, or batch 1 when it
    is not an integer (``abc``, ``1.5``, ``[1]``...).  JSON ``batch`` is taken as
    given (0 when absent).
    """
    if raw is None:
        raw = b""
    if isinstance(raw, str):
        raw = raw.encode("utf-8")
    text = bytes(raw).decode("utf-8", "surrogateescape").strip(_GO_SPACES)
    req = text.encode("utf-8", "surrogateescape")
    if not req:
        return NextRequest(batch=1)
    if req[:1] == b"{":
        try:
            fields = _unmarshal(req, NextRequest)
        except GoJSONError as e:
            raise NextRequestError(400, "Bad Request - %s" % e) from None
        out = structure(NextRequest, fields)
        out.priority_group = True
        if out.idle_heartbeat > 0 and _wrap64(out.idle_heartbeat * 2) > out.expires:
            raise NextRequestError(400, "Bad Request - heartbeat value too large")
        return out
    value, err = go_atoi(text)
    return NextRequest(batch=value if err is None else 1)


def next_request_error(req, cfg):
    """What nats-server's ``processNextMsgRequest`` answers from the consumer's
    config alone (``None`` if the request may wait): 409 "Consumer is push
    based", 409 "Exceeded MaxRequestBatch of N", 409 "Exceeded MaxRequestExpires
    of 1s", 409 "Exceeded MaxRequestMaxBytes of N", and for JSON requests the
    priority checks (400 "Bad Request - Not a Overflow Priority consumer", "...
    Not a Pinned Client Priority consumer", "... Priority must be between 0 and
    9", "... Priority Group missing", "... Invalid Priority Group")."""
    if cfg.deliver_subject:
        return NextRequestError(409, "Consumer is push based")
    if cfg.max_batch > 0 and req.batch > cfg.max_batch:
        return NextRequestError(409, "Exceeded MaxRequestBatch of %d" % cfg.max_batch)
    if req.expires != 0 and cfg.max_expires > 0 and req.expires > cfg.max_expires:
        return NextRequestError(409, "Exceeded MaxRequestExpires of %s" % go_duration(cfg.max_expires))
    if req.max_bytes > 0 and cfg.max_bytes > 0 and req.max_bytes > cfg.max_bytes:
        return NextRequestError(409, "Exceeded MaxRequestMaxBytes of %d" % cfg.max_bytes)
    if req.priority_group:
        if (req.min_pending or req.min_ack_pending) and cfg.priority_policy != "overflow":
            return NextRequestError(400, "Bad Request - Not a Overflow Priority consumer")
        if req.id and cfg.priority_policy != "pinned_client":
            return NextRequestError(400, "Bad Request - Not a Pinned Client Priority consumer")
        if not 0 <= req.priority <= 9:
            return NextRequestError(400, "Bad Request - Priority must be between 0 and 9")
        if cfg.priority_policy != "none":
            if not req.group:
                return NextRequestError(400, "Bad Request - Priority Group missing")
            if req.group not in (cfg.priority_groups or ()):
                return NextRequestError(400, "Bad Request - Invalid Priority Group")
    return None


__all__ = [name for name in dir() if not name.startswith("_") and name not in (
    "re", "E", "gojson", "marshal")]
