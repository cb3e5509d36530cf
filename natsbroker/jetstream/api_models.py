"""JetStream API messages of the stream side, as nats-server 2.15.1 sends and
reads them: the ``$JS.API.STREAM.*`` and ``$JS.API.INFO`` requests and
responses (``type`` names, paging limits) and the publish ack.

Response field order is nats-server's struct embedding order; a request's
``__go_name__`` is the Go struct named in its decode errors
(``marshal.decode_request``).  The consumer side is
:mod:`natsbroker.jetstream.consumer_models`'.
"""

from typing import Optional

import attrs

from natsbroker.gocompat.gojson import BOOL, INT, INT64, STRING, STRINGS, TIME, UINT64, go_json_dumps
from natsbroker.jetstream import marshal
from natsbroker.jetstream.marshal import gofield as _f  # short: every field below is one
from natsbroker.jetstream.stream_models import ApiErrorBody, StreamInfo
from natsbroker.jetstream.versions import API_LEVEL

JS_API_NAMES_LIMIT = 1024                        # STREAM.NAMES page size
JS_API_LIST_LIMIT = 256                          # STREAM.LIST page size
JS_MAX_SUBJECTS_DETAILS = 100_000                # STREAM.INFO subjects_filter page size

_API = "io.nats.jetstream.api.v1."
TYPE_ACCOUNT_INFO = _API + "account_info_response"
TYPE_STREAM_CREATE = _API + "stream_create_response"
TYPE_STREAM_UPDATE = _API + "stream_update_response"
TYPE_STREAM_INFO = _API + "stream_info_response"
TYPE_STREAM_DELETE = _API + "stream_delete_response"
TYPE_STREAM_PURGE = _API + "stream_purge_response"
TYPE_STREAM_NAMES = _API + "stream_names_response"
TYPE_STREAM_LIST = _API + "stream_list_response"
TYPE_STREAM_MSG_GET = _API + "stream_msg_get_response"
TYPE_STREAM_MSG_DELETE = _API + "stream_msg_delete_response"
TYPE_STREAM_SNAPSHOT = _API + "stream_snapshot_response"
TYPE_STREAM_RESTORE = _API + "stream_restore_response"
TYPE_STREAM_LEADER_STEPDOWN = _API + "stream_leader_stepdown_response"
TYPE_STREAM_REMOVE_PEER = _API + "stream_remove_peer_response"
TYPE_CONSUMER_CREATE = _API + "consumer_create_response"
TYPE_CONSUMER_INFO = _API + "consumer_info_response"
TYPE_CONSUMER_DELETE = _API + "consumer_delete_response"
TYPE_CONSUMER_NAMES = _API + "consumer_names_response"
TYPE_CONSUMER_LIST = _API + "consumer_list_response"
TYPE_CONSUMER_LEADER_STEPDOWN = _API + "consumer_leader_stepdown_response"
TYPE_CONSUMER_PAUSE = _API + "consumer_pause_response"


@attrs.define
class PubAck:
    """A publish acknowledgement.  nats-server writes the duplicate case by hand
    as ``{"stream":"S","seq":2,"duplicate": true}`` -- note the space -- and an
    error as ``{"error":{...},"stream":"S","seq":0}``: see ``pub_ack_json``."""
    stream: str = _f(STRING, "")
    domain: str = _f(STRING, "", omit=True)  # before seq, as nats-server's PubAck
    seq: int = _f(UINT64, 0)
    duplicate: bool = _f(BOOL, False, omit=True)
    val: str = _f(STRING, "", omit=True)
    batch: str = _f(STRING, "", omit=True)
    count: int = _f(INT, 0, omit=True)


@attrs.define
class AccountLimits:
    max_memory: int = _f(INT64, -1)
    max_storage: int = _f(INT64, -1)
    max_streams: int = _f(INT, -1)
    max_consumers: int = _f(INT, -1)
    max_ack_pending: int = _f(INT, -1)
    memory_max_stream_bytes: int = _f(INT64, -1)
    storage_max_stream_bytes: int = _f(INT64, -1)
    max_bytes_required: bool = _f(BOOL, False)


@attrs.define
class ApiStats:
    level: int = _f(INT, API_LEVEL)
    total: int = _f(UINT64, 0)
    errors: int = _f(UINT64, 0)


@attrs.define
class AccountInfo:
    """``$JS.API.INFO`` reply (``account_info_response``)."""
    type: str = _f(STRING, TYPE_ACCOUNT_INFO)
    error: Optional[ApiErrorBody] = _f(None, None, omit=True)
    memory: int = _f(UINT64, 0)
    storage: int = _f(UINT64, 0)
    reserved_memory: int = _f(UINT64, 0)
    reserved_storage: int = _f(UINT64, 0)
    streams: int = _f(INT, 0)
    consumers: int = _f(INT, 0)
    limits: AccountLimits = _f(None, factory=AccountLimits)
    domain: str = _f(STRING, "", omit=True)
    api: ApiStats = _f(None, factory=ApiStats)
    tiers: Optional[dict] = _f(None, None, omit=True)


# --- responses.  Field order = nats-server's struct embedding order. ---------

@attrs.define
class StreamCreateResponse:
    type: str = _f(STRING, TYPE_STREAM_CREATE)
    error: Optional[ApiErrorBody] = _f(None, None, omit=True)
    info: Optional[StreamInfo] = _f(None, None, omit=True, embed=True)
    did_create: bool = _f(BOOL, False, omit=True)


@attrs.define
class StreamUpdateResponse:
    type: str = _f(STRING, TYPE_STREAM_UPDATE)
    error: Optional[ApiErrorBody] = _f(None, None, omit=True)
    info: Optional[StreamInfo] = _f(None, None, omit=True, embed=True)


@attrs.define
class StreamInfoResponse:
    """STREAM.INFO: paging fields come right after the error, even on errors:
    ``{"type":...,"error":{...},"total":0,"offset":0,"limit":0}``."""
    type: str = _f(STRING, TYPE_STREAM_INFO)
    error: Optional[ApiErrorBody] = _f(None, None, omit=True)
    total: int = _f(INT, 0)
    offset: int = _f(INT, 0)
    limit: int = _f(INT, 0)
    info: Optional[StreamInfo] = _f(None, None, omit=True, embed=True)


@attrs.define
class StreamDeleteResponse:
    type: str = _f(STRING, TYPE_STREAM_DELETE)
    error: Optional[ApiErrorBody] = _f(None, None, omit=True)
    success: bool = _f(BOOL, False, omit=True)


@attrs.define
class StreamPurgeResponse:
    type: str = _f(STRING, TYPE_STREAM_PURGE)
    error: Optional[ApiErrorBody] = _f(None, None, omit=True)
    success: bool = _f(BOOL, False, omit=True)
    purged: int = _f(UINT64, 0)


@attrs.define
class StreamNamesResponse:
    """``streams`` is ``null`` (not ``[]``) when the page is empty."""
    type: str = _f(STRING, TYPE_STREAM_NAMES)
    error: Optional[ApiErrorBody] = _f(None, None, omit=True)
    total: int = _f(INT, 0)
    offset: int = _f(INT, 0)
    limit: int = _f(INT, 0)
    streams: Optional[list] = _f(None, None)


@attrs.define
class StreamListResponse:
    """``streams`` is always a list (``[]`` when empty)."""
    type: str = _f(STRING, TYPE_STREAM_LIST)
    error: Optional[ApiErrorBody] = _f(None, None, omit=True)
    total: int = _f(INT, 0)
    offset: int = _f(INT, 0)
    limit: int = _f(INT, 0)
    streams: list = _f(None, factory=list)
    missing: Optional[list] = _f(None, None, omit=True)


@attrs.define
class StoredMsg:
    """``message`` of STREAM.MSG.GET: ``data`` and ``hdrs`` base64, ``time`` ns."""
    subject: str = _f(STRING, "")
    seq: int = _f(UINT64, 0)
    hdrs: Optional[str] = _f(None, None, omit=True)
    data: Optional[str] = _f(None, None, omit=True)
    time: int = _f(TIME, 0, time=True)


@attrs.define
class StreamMsgGetResponse:
    type: str = _f(STRING, TYPE_STREAM_MSG_GET)
    error: Optional[ApiErrorBody] = _f(None, None, omit=True)
    message: Optional[StoredMsg] = _f(None, None, omit=True)


@attrs.define
class StreamMsgDeleteResponse:
    type: str = _f(STRING, TYPE_STREAM_MSG_DELETE)
    error: Optional[ApiErrorBody] = _f(None, None, omit=True)
    success: bool = _f(BOOL, False, omit=True)


@attrs.define
class SuccessResponse:
    """Replies that are just ``type``/``error``/``success`` (leader stepdown,
    peer remove...): pass the ``type``."""
    type: str = _f(STRING, "")
    error: Optional[ApiErrorBody] = _f(None, None, omit=True)
    success: bool = _f(BOOL, False, omit=True)


# --- requests (for decode_request; Go names appear in type errors) ----------

@attrs.define
class StreamInfoRequest:
    __go_name__ = "JSApiStreamInfoRequest"
    offset: int = _f(INT, 0)
    deleted_details: bool = _f(BOOL, False)
    subjects_filter: str = _f(STRING, "")


@attrs.define
class StreamPurgeRequest:
    __go_name__ = "JSApiStreamPurgeRequest"
    filter: str = _f(STRING, "")
    seq: int = _f(UINT64, 0)
    keep: int = _f(UINT64, 0)


@attrs.define
class MsgGetRequest:
    __go_name__ = "JSApiMsgGetRequest"
    seq: int = _f(UINT64, 0)
    last_by_subj: str = _f(STRING, "")
    next_by_subj: str = _f(STRING, "")
    batch: int = _f(INT, 0)
    max_bytes: int = _f(INT, 0)
    start_time: Optional[str] = _f(TIME, None)
    multi_last: Optional[list] = _f(STRINGS, None)
    up_to_seq: int = _f(UINT64, 0)
    up_to_time: Optional[str] = _f(TIME, None)
    no_hdr: bool = _f(BOOL, False)


@attrs.define
class MsgDeleteRequest:
    __go_name__ = "JSApiMsgDeleteRequest"
    seq: int = _f(UINT64, 0)
    no_erase: bool = _f(BOOL, False)


@attrs.define
class StreamNamesRequest:
    __go_name__ = "JSApiStreamNamesRequest"
    offset: int = _f(INT, 0)
    subject: str = _f(STRING, "")


@attrs.define
class StreamListRequest:
    __go_name__ = "JSApiStreamListRequest"
    offset: int = _f(INT, 0)
    subject: str = _f(STRING, "")


@attrs.define
class StreamRemovePeerRequest:
    __go_name__ = "JSApiStreamRemovePeerRequest"
    peer: str = _f(STRING, "")


@attrs.define
class MetaServerRemoveRequest:
    __go_name__ = "JSApiMetaServerRemoveRequest"
    peer: str = _f(STRING, "")  # the server's name
    peer_id: str = _f(STRING, "")  # or its peer id, which wins


marshal.register_lenient(PubAck, AccountLimits, ApiStats, AccountInfo, StoredMsg)
marshal.register_go(StreamInfoRequest, StreamPurgeRequest, MsgGetRequest, MsgDeleteRequest,
                    StreamNamesRequest, StreamListRequest, StreamRemovePeerRequest,
                    MetaServerRemoveRequest)
marshal.unstructure_as_json(StreamCreateResponse, StreamUpdateResponse, StreamInfoResponse,
                            StreamDeleteResponse, StreamPurgeResponse, StreamNamesResponse,
                            StreamListResponse, StreamMsgGetResponse, StreamMsgDeleteResponse,
                            SuccessResponse)


def pub_ack_json(stream, seq, duplicate=False, error=None, domain="", val="", batch="", count=0):
    """A publish ack exactly as nats-server writes it (bytes).

    ``{"stream":"S","seq":1}``; duplicate: ``{"stream":"S","seq":2,"duplicate": true}``
    (nats-server's hand-written form, with the space); error:
    ``{"error":{...},"stream":"S","seq":0}``.
    """
    if error is not None:
        body = {"error": error.to_json(), "stream": stream, "seq": seq}
        if domain:
            body["domain"] = domain
        return go_json_dumps(body).encode("utf-8")
    text = go_json_dumps(marshal.to_json(PubAck(stream=stream, seq=seq, domain=domain, val=val,
                                                batch=batch, count=count)))
    if duplicate:
        text = text[:-1] + ',"duplicate": true}'
    return text.encode("utf-8")
