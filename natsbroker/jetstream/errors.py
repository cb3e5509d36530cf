"""JetStream API errors, as nats-server 2.15.1 reports them.

Every error a ``$JS.API`` reply (or a publish ack) can carry is an ``ApiError``
with nats-server's three fields::

    {"code": 404, "err_code": 10059, "description": "stream not found"}

``code`` is the HTTP-like status, ``err_code`` the stable JetStream error code
clients switch on (nats.go's ``ErrStreamNotFound`` is ``err_code == 10059``),
``description`` the human text.  ``ERRORS`` below is nats-server's
``server/errors.json`` (the source of ``jetstream_errors_generated.go``); every
description was checked against the strings in the nats-server 2.15.1 binary.
Where the reference document 004 disagrees (it lists 10039 as "stream does not
exist", 10059 as a subject clash, 10071 as a consumer clash), this table wins.

Each row also names a constructor: ``stream_not_found()``,
``stream_wrong_last_sequence(7)``, ``invalid_json("unexpected EOF")``...
Templates take their ``{placeholders}`` positionally in order of appearance,
or by name: ``stream_external_api_overlap(prefix="x", subject="$JS.API")``.
Arguments are rendered the way the generated Go code renders them (strings
as is, errors by their text, ``true``/``false``, numbers in decimal).  As with
nats-server's ``Unless(err)`` option, passing ``unless=<ApiError>`` returns that
error unchanged instead of a new one::

    raise stream_create(err, unless=err)   # keeps err's own code if it has one

Texts that nats-server puts into the ``{err}`` templates for the stream API have
named shortcuts at the end (``stream_purge_not_permitted()``,
``rollup_not_permitted()``, ``store_max_msgs_exceeded()``, ...).
"""

import re

from natsbroker.gocompat.quote import go_quote  # noqa: F401  (re-exported: E.go_quote)

__all__ = ["ApiError", "ErrorSpec", "ERRORS", "BY_ERR_CODE", "BY_HELPER", "new_error", "go_quote"]


class ApiError(Exception):
    """A JetStream API error: ``code``, ``err_code`` and ``description``.

    ``constant`` names the nats-server constant it came from (``None`` for
    hand-built errors).  Errors compare equal when the three wire fields do.
    """

    def __init__(self, code, err_code, description, constant=None):
        super().__init__(description)
        self.code = code
        self.err_code = err_code
        self.description = description
        self.constant = constant

    def to_json(self):
        """The ``error`` object of a reply, in nats-server's key order.

        ``err_code`` is ``omitempty`` in nats-server: a zero code is left out.
        """
        out = {"code": self.code}
        if self.err_code:
            out["err_code"] = self.err_code
        out["description"] = self.description
        return out

    def __eq__(self, other):
        if not isinstance(other, ApiError):
            return NotImplemented
        return (self.code, self.err_code, self.description) == (
            other.code, other.err_code, other.description)

    def __hash__(self):
        return hash((self.code, self.err_code, self.description))

    def __str__(self):
        return self.description

    def __repr__(self):
        return "ApiError(%d, %d, %r)" % (self.code, self.err_code, self.description)


class ErrorSpec:
    """One row of nats-server's error table."""

    __slots__ = ("constant", "code", "err_code", "template", "helper", "params")

    def __init__(self, constant, code, err_code, template, helper):
        self.constant = constant
        self.code = code
        self.err_code = err_code
        self.template = template
        self.helper = helper
        # Placeholders in order of first appearance, e.g. ("prefix", "subject").
        seen = []
        for p in re.findall(r"{(\w+)}", template):
            if p not in seen:
                seen.append(p)
        self.params = tuple(seen)

    def __repr__(self):
        return "ErrorSpec(%s, %d, %d, %r)" % (self.constant, self.code, self.err_code, self.template)




def _go_sprint(value):
    """An argument as the generated Go code renders it (``%+v`` / ``Error()``)."""
    if isinstance(value, ApiError):
        return value.description
    if isinstance(value, BaseException):
        return str(value)
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "<nil>"
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


# (constant, code, err_code, description template, constructor name)
_TABLE = (
    ('JSAccountResourcesExceededErr', 400, 10002, 'resource limits exceeded for account', 'account_resources_exceeded'),
    ('JSBadRequestErr', 400, 10003, 'bad request', 'bad_request'),
    ('JSClusterIncompleteErr', 503, 10004, 'incomplete results', 'cluster_incomplete'),
    ('JSClusterNoPeersErrF', 400, 10005, '{err}', 'cluster_no_peers'),
    ('JSClusterNotActiveErr', 500, 10006, 'JetStream not in clustered mode', 'cluster_not_active'),
    ('JSClusterNotAssignedErr', 500, 10007, 'JetStream cluster not assigned to this server', 'cluster_not_assigned'),
    ('JSClusterNotAvailErr', 503, 10008, 'JetStream system temporarily unavailable', 'cluster_not_avail'),
    ('JSClusterNotLeaderErr', 500, 10009, 'JetStream cluster can not handle request', 'cluster_not_leader'),
    ('JSClusterRequiredErr', 503, 10010, 'JetStream clustering support required', 'cluster_required'),
    ('JSClusterTagsErr', 400, 10011, 'tags placement not supported for operation', 'cluster_tags'),
    ('JSConsumerCreateErrF', 500, 10012, '{err}', 'consumer_create'),
    ('JSConsumerNameExistErr', 400, 10013, 'consumer name already in use', 'consumer_name_exist'),
    ('JSConsumerNotFoundErr', 404, 10014, 'consumer not found', 'consumer_not_found'),
    ('JSSnapshotDeliverSubjectInvalidErr', 400, 10015, 'deliver subject not valid', 'snapshot_deliver_subject_invalid'),
    ('JSConsumerDurableNameNotInSubjectErr', 400, 10016, 'consumer expected to be durable but no durable name set in subject', 'consumer_durable_name_not_in_subject'),
    ('JSConsumerDurableNameNotMatchSubjectErr', 400, 10017, 'consumer name in subject does not match durable name in request', 'consumer_durable_name_not_match_subject'),
    ('JSConsumerDurableNameNotSetErr', 400, 10018, 'consumer expected to be durable but a durable name was not set', 'consumer_durable_name_not_set'),
    ('JSConsumerEphemeralWithDurableInSubjectErr', 400, 10019, 'consumer expected to be ephemeral but detected a durable name set in subject', 'consumer_ephemeral_with_durable_in_subject'),
    ('JSConsumerEphemeralWithDurableNameErr', 400, 10020, 'consumer expected to be ephemeral but a durable name was set in request', 'consumer_ephemeral_with_durable_name'),
    ('JSStreamExternalApiOverlapErrF', 400, 10021, 'stream external api prefix {prefix} must not overlap with {subject}', 'stream_external_api_overlap'),
    ('JSStreamExternalDelPrefixOverlapsErrF', 400, 10022, 'stream external delivery prefix {prefix} overlaps with stream subject {subject}', 'stream_external_del_prefix_overlaps'),
    ('JSInsufficientResourcesErr', 503, 10023, 'insufficient resources', 'insufficient_resources'),
    ('JSStreamInvalidExternalDeliverySubjErrF', 400, 10024, 'stream external delivery prefix {prefix} must not contain wildcards', 'stream_invalid_external_delivery_subj'),
    ('JSInvalidJSONErr', 400, 10025, 'invalid JSON: {err}', 'invalid_json'),
    ('JSMaximumConsumersLimitErr', 400, 10026, 'maximum consumers limit reached', 'maximum_consumers_limit'),
    ('JSMaximumStreamsLimitErr', 400, 10027, 'maximum number of streams reached', 'maximum_streams_limit'),
    ('JSMemoryResourcesExceededErr', 500, 10028, 'insufficient memory resources available', 'memory_resources_exceeded'),
    ('JSMirrorConsumerSetupFailedErrF', 500, 10029, '{err}', 'mirror_consumer_setup_failed'),
    ('JSMirrorMaxMessageSizeTooBigErr', 400, 10030, 'stream mirror must have max message size >= source', 'mirror_max_message_size_too_big'),
    ('JSMirrorWithSourcesErr', 400, 10031, 'stream mirrors can not also contain other sources', 'mirror_with_sources'),
    ('JSMirrorWithStartSeqAndTimeErr', 400, 10032, 'stream mirrors can not have both start seq and start time configured', 'mirror_with_start_seq_and_time'),
    ('JSMirrorWithSubjectFiltersErr', 400, 10033, 'stream mirrors can not contain filtered subjects', 'mirror_with_subject_filters'),
    ('JSMirrorWithSubjectsErr', 400, 10034, 'stream mirrors can not contain subjects', 'mirror_with_subjects'),
    ('JSNoAccountErr', 503, 10035, 'account not found', 'no_account'),
    ('JSClusterUnSupportFeatureErr', 503, 10036, 'not currently supported in clustered mode', 'cluster_un_support_feature'),
    ('JSNoMessageFoundErr', 404, 10037, 'no message found', 'no_message_found'),
    ('JSNotEmptyRequestErr', 400, 10038, 'expected an empty request payload', 'not_empty_request'),
    ('JSNotEnabledForAccountErr', 503, 10039, 'JetStream not enabled for account', 'not_enabled_for_account'),
    ('JSClusterPeerNotMemberErr', 400, 10040, 'peer not a member', 'cluster_peer_not_member'),
    ('JSRaftGeneralErrF', 500, 10041, '{err}', 'raft_general'),
    ('JSRestoreSubscribeFailedErrF', 500, 10042, 'JetStream unable to subscribe to restore snapshot {subject}: {err}', 'restore_subscribe_failed'),
    ('JSSequenceNotFoundErrF', 400, 10043, 'sequence {seq} not found', 'sequence_not_found'),
    ('JSClusterServerNotMemberErr', 400, 10044, 'server is not a member of the cluster', 'cluster_server_not_member'),
    ('JSSourceConsumerSetupFailedErrF', 500, 10045, '{err}', 'source_consumer_setup_failed'),
    ('JSSourceMaxMessageSizeTooBigErr', 400, 10046, 'stream source must have max message size >= target', 'source_max_message_size_too_big'),
    ('JSStorageResourcesExceededErr', 500, 10047, 'insufficient storage resources available', 'storage_resources_exceeded'),
    ('JSStreamAssignmentErrF', 500, 10048, '{err}', 'stream_assignment'),
    ('JSStreamCreateErrF', 500, 10049, '{err}', 'stream_create'),
    ('JSStreamDeleteErrF', 500, 10050, '{err}', 'stream_delete'),
    ('JSStreamGeneralErrorF', 500, 10051, '{err}', 'stream_general'),
    ('JSStreamInvalidConfigF', 500, 10052, '{err}', 'stream_invalid_config'),
    ('JSStreamLimitsErrF', 500, 10053, '{err}', 'stream_limits'),
    ('JSStreamMessageExceedsMaximumErr', 400, 10054, 'message size exceeds maximum allowed', 'stream_message_exceeds_maximum'),
    ('JSStreamMirrorNotUpdatableErr', 400, 10055, 'stream mirror configuration can not be updated', 'stream_mirror_not_updatable'),
    ('JSStreamMismatchErr', 400, 10056, 'stream name in subject does not match request', 'stream_mismatch'),
    ('JSStreamMsgDeleteFailedF', 500, 10057, '{err}', 'stream_msg_delete_failed'),
    ('JSStreamNameExistErr', 400, 10058, 'stream name already in use with a different configuration', 'stream_name_exist'),
    ('JSStreamNotFoundErr', 404, 10059, 'stream not found', 'stream_not_found'),
    ('JSStreamNotMatchErr', 400, 10060, 'expected stream does not match', 'stream_not_match'),
    ('JSStreamReplicasNotUpdatableErr', 400, 10061, 'Replicas configuration can not be updated', 'stream_replicas_not_updatable'),
    ('JSStreamRestoreErrF', 500, 10062, 'restore failed: {err}', 'stream_restore'),
    ('JSStreamSequenceNotMatchErr', 503, 10063, 'expected stream sequence does not match', 'stream_sequence_not_match'),
    ('JSStreamSnapshotErrF', 500, 10064, 'snapshot failed: {err}', 'stream_snapshot'),
    ('JSStreamSubjectOverlapErr', 400, 10065, 'subjects overlap with an existing stream', 'stream_subject_overlap'),
    ('JSStreamTemplateCreateErrF', 500, 10066, '{err}', 'stream_template_create'),
    ('JSStreamTemplateDeleteErrF', 500, 10067, '{err}', 'stream_template_delete'),
    ('JSStreamTemplateNotFoundErr', 404, 10068, 'template not found', 'stream_template_not_found'),
    ('JSStreamUpdateErrF', 500, 10069, '{err}', 'stream_update'),
    ('JSStreamWrongLastMsgIDErrF', 400, 10070, 'wrong last msg ID: {id}', 'stream_wrong_last_msg_id'),
    ('JSStreamWrongLastSequenceErrF', 400, 10071, 'wrong last sequence: {seq}', 'stream_wrong_last_sequence'),
    ('JSTempStorageFailedErr', 500, 10072, 'JetStream unable to open temp storage for restore', 'temp_storage_failed'),
    ('JSTemplateNameNotMatchSubjectErr', 400, 10073, 'template name in subject does not match request', 'template_name_not_match_subject'),
    ('JSStreamReplicasNotSupportedErr', 500, 10074, 'replicas > 1 not supported in non-clustered mode', 'stream_replicas_not_supported'),
    ('JSPeerRemapErr', 503, 10075, 'peer remap failed', 'peer_remap'),
    ('JSNotEnabledErr', 503, 10076, 'JetStream not enabled', 'not_enabled'),
    ('JSStreamStoreFailedF', 503, 10077, '{err}', 'stream_store_failed'),
    ('JSConsumerConfigRequiredErr', 400, 10078, 'consumer config required', 'consumer_config_required'),
    ('JSConsumerDeliverToWildcardsErr', 400, 10079, 'consumer deliver subject has wildcards', 'consumer_deliver_to_wildcards'),
    ('JSConsumerPushMaxWaitingErr', 400, 10080, 'consumer in push mode can not set max waiting', 'consumer_push_max_waiting'),
    ('JSConsumerDeliverCycleErr', 400, 10081, 'consumer deliver subject forms a cycle', 'consumer_deliver_cycle'),
    ('JSConsumerMaxPendingAckPolicyRequiredErr', 400, 10082, 'consumer requires ack policy for max ack pending', 'consumer_max_pending_ack_policy_required'),
    ('JSConsumerSmallHeartbeatErr', 400, 10083, 'consumer idle heartbeat needs to be >= 100ms', 'consumer_small_heartbeat'),
    ('JSConsumerPullRequiresAckErr', 400, 10084, 'consumer in pull mode requires explicit ack policy on workqueue stream', 'consumer_pull_requires_ack'),
    ('JSConsumerPullNotDurableErr', 400, 10085, 'consumer in pull mode requires a durable name', 'consumer_pull_not_durable'),
    ('JSConsumerPullWithRateLimitErr', 400, 10086, 'consumer in pull mode can not have rate limit set', 'consumer_pull_with_rate_limit'),
    ('JSConsumerMaxWaitingNegativeErr', 400, 10087, 'consumer max waiting needs to be positive', 'consumer_max_waiting_negative'),
    ('JSConsumerHBRequiresPushErr', 400, 10088, 'consumer idle heartbeat requires a push based consumer', 'consumer_hb_requires_push'),
    ('JSConsumerFCRequiresPushErr', 400, 10089, 'consumer flow control requires a push based consumer', 'consumer_fc_requires_push'),
    ('JSConsumerDirectRequiresPushErr', 400, 10090, 'consumer direct requires a push based consumer', 'consumer_direct_requires_push'),
    ('JSConsumerDirectRequiresEphemeralErr', 400, 10091, 'consumer direct requires an ephemeral consumer', 'consumer_direct_requires_ephemeral'),
    ('JSConsumerOnMappedErr', 400, 10092, 'consumer direct on a mapped consumer', 'consumer_on_mapped'),
    ('JSConsumerFilterNotSubsetErr', 400, 10093, 'consumer filter subject is not a valid subset of the interest subjects', 'consumer_filter_not_subset'),
    ('JSConsumerInvalidPolicyErrF', 400, 10094, '{err}', 'consumer_invalid_policy'),
    ('JSConsumerInvalidSamplingErrF', 400, 10095, 'failed to parse consumer sampling configuration: {err}', 'consumer_invalid_sampling'),
    ('JSStreamInvalidErr', 500, 10096, 'stream not valid', 'stream_invalid'),
    ('JSStreamHeaderExceedsMaximumErr', 400, 10097, 'header size exceeds maximum allowed of 64k', 'stream_header_exceeds_maximum'),
    ('JSConsumerWQRequiresExplicitAckErr', 400, 10098, 'workqueue stream requires explicit ack', 'consumer_wq_requires_explicit_ack'),
    ('JSConsumerWQMultipleUnfilteredErr', 400, 10099, 'multiple non-filtered consumers not allowed on workqueue stream', 'consumer_wq_multiple_unfiltered'),
    ('JSConsumerWQConsumerNotUniqueErr', 400, 10100, 'filtered consumer not unique on workqueue stream', 'consumer_wq_consumer_not_unique'),
    ('JSConsumerWQConsumerNotDeliverAllErr', 400, 10101, 'consumer must be deliver all on workqueue stream', 'consumer_wq_consumer_not_deliver_all'),
    ('JSConsumerNameTooLongErrF', 400, 10102, 'consumer name is too long, maximum allowed is {max}', 'consumer_name_too_long'),
    ('JSConsumerBadDurableNameErr', 400, 10103, "durable name can not contain '.', '*', '>'", 'consumer_bad_durable_name'),
    ('JSConsumerStoreFailedErrF', 500, 10104, 'error creating store for consumer: {err}', 'consumer_store_failed'),
    ('JSConsumerExistingActiveErr', 400, 10105, 'consumer already exists and is still active', 'consumer_existing_active'),
    ('JSConsumerReplacementWithDifferentNameErr', 400, 10106, 'consumer replacement durable config not the same', 'consumer_replacement_with_different_name'),
    ('JSConsumerDescriptionTooLongErrF', 400, 10107, 'consumer description is too long, maximum allowed is {max}', 'consumer_description_too_long'),
    ('JSConsumerWithFlowControlNeedsHeartbeats', 400, 10108, 'consumer with flow control also needs heartbeats', 'consumer_with_flow_control_needs_heartbeats'),
    ('JSStreamSealedErr', 400, 10109, 'invalid operation on sealed stream', 'stream_sealed'),
    ('JSStreamPurgeFailedF', 500, 10110, '{err}', 'stream_purge_failed'),
    ('JSStreamRollupFailedF', 500, 10111, '{err}', 'stream_rollup_failed'),
    ('JSConsumerInvalidDeliverSubject', 400, 10112, 'invalid push consumer deliver subject', 'consumer_invalid_deliver_subject'),
    ('JSStreamMaxBytesRequired', 400, 10113, 'account requires a stream config to have max bytes set', 'stream_max_bytes_required'),
    ('JSConsumerMaxRequestBatchNegativeErr', 400, 10114, 'consumer max request batch needs to be > 0', 'consumer_max_request_batch_negative'),
    ('JSConsumerMaxRequestExpiresTooSmall', 400, 10115, 'consumer max request expires needs to be >= 1ms', 'consumer_max_request_expires_too_small'),
    ('JSConsumerMaxDeliverBackoffErr', 400, 10116, 'max deliver is required to be > length of backoff values', 'consumer_max_deliver_backoff'),
    ('JSStreamInfoMaxSubjectsErr', 500, 10117, 'subject details would exceed maximum allowed', 'stream_info_max_subjects'),
    ('JSStreamOfflineErr', 500, 10118, 'stream is offline', 'stream_offline'),
    ('JSConsumerOfflineErr', 500, 10119, 'consumer is offline', 'consumer_offline'),
    ('JSNoLimitsErr', 400, 10120, 'no JetStream default or applicable tiered limit present', 'no_limits'),
    ('JSConsumerMaxPendingAckExcessErrF', 400, 10121, 'consumer max ack pending exceeds system limit of {limit}', 'consumer_max_pending_ack_excess'),
    ('JSStreamMaxStreamBytesExceeded', 400, 10122, 'stream max bytes exceeds account limit max stream bytes', 'stream_max_stream_bytes_exceeded'),
    ('JSStreamMoveAndScaleErr', 400, 10123, 'can not move and scale a stream in a single update', 'stream_move_and_scale'),
    ('JSStreamMoveInProgressErr', 400, 10124, 'stream move already in progress', 'stream_move_in_progress'),
    ('JSConsumerMaxRequestBatchExceededF', 400, 10125, 'consumer max request batch exceeds server limit of {limit}', 'consumer_max_request_batch_exceeded'),
    ('JSConsumerReplicasExceedsStream', 400, 10126, 'consumer config replica count exceeds parent stream', 'consumer_replicas_exceeds_stream'),
    ('JSConsumerNameContainsPathSeparatorsErr', 400, 10127, 'Consumer name can not contain path separators', 'consumer_name_contains_path_separators'),
    ('JSStreamNameContainsPathSeparatorsErr', 400, 10128, 'Stream name can not contain path separators', 'stream_name_contains_path_separators'),
    ('JSStreamReconfigureNotInProgressErr', 400, 10129, 'stream reconfiguration not in progress', 'stream_reconfigure_not_in_progress'),
    ('JSStreamNameExistRestoreFailedErr', 400, 10130, 'stream name already in use, cannot restore', 'stream_name_exist_restore_failed'),
    ('JSConsumerCreateFilterSubjectMismatchErr', 400, 10131, 'Consumer create request did not match filtered subject from create subject', 'consumer_create_filter_subject_mismatch'),
    ('JSConsumerCreateDurableAndNameMismatch', 400, 10132, 'Consumer Durable and Name have to be equal if both are provided', 'consumer_create_durable_and_name_mismatch'),
    ('JSReplicasCountCannotBeNegative', 400, 10133, 'replicas count cannot be negative', 'replicas_count_cannot_be_negative'),
    ('JSConsumerReplicasShouldMatchStream', 400, 10134, "consumer config replicas must match interest retention stream's replicas", 'consumer_replicas_should_match_stream'),
    ('JSConsumerMetadataLengthErrF', 400, 10135, 'consumer metadata exceeds maximum size of {limit}', 'consumer_metadata_length'),
    ('JSConsumerDuplicateFilterSubjects', 400, 10136, 'consumer cannot have both FilterSubject and FilterSubjects specified', 'consumer_duplicate_filter_subjects'),
    ('JSConsumerMultipleFiltersNotAllowed', 400, 10137, 'consumer with multiple subject filters cannot use subject based API', 'consumer_multiple_filters_not_allowed'),
    ('JSConsumerOverlappingSubjectFilters', 400, 10138, 'consumer subject filters cannot overlap', 'consumer_overlapping_subject_filters'),
    ('JSConsumerEmptyFilter', 400, 10139, 'consumer filter in FilterSubjects cannot be empty', 'consumer_empty_filter'),
    ('JSSourceDuplicateDetected', 400, 10140, 'duplicate source configuration detected', 'source_duplicate_detected'),
    ('JSSourceInvalidStreamName', 400, 10141, 'sourced stream name is invalid', 'source_invalid_stream_name'),
    ('JSMirrorInvalidStreamName', 400, 10142, 'mirrored stream name is invalid', 'mirror_invalid_stream_name'),
    ('JSMirrorWithFirstSeqErr', 400, 10143, 'stream mirrors can not have first sequence configured', 'mirror_with_first_seq'),
    ('JSSourceMultipleFiltersNotAllowed', 400, 10144, 'source with multiple subject transforms cannot also have a single subject filter', 'source_multiple_filters_not_allowed'),
    ('JSSourceInvalidSubjectFilter', 400, 10145, 'source transform source: {err}', 'source_invalid_subject_filter'),
    ('JSSourceInvalidTransformDestination', 400, 10146, 'source transform: {err}', 'source_invalid_transform_destination'),
    ('JSSourceOverlappingSubjectFilters', 400, 10147, 'source filters can not overlap', 'source_overlapping_subject_filters'),
    ('JSConsumerAlreadyExists', 400, 10148, 'consumer already exists', 'consumer_already_exists'),
    ('JSConsumerDoesNotExist', 400, 10149, 'consumer does not exist', 'consumer_does_not_exist'),
    ('JSMirrorMultipleFiltersNotAllowed', 400, 10150, 'mirror with multiple subject transforms cannot also have a single subject filter', 'mirror_multiple_filters_not_allowed'),
    ('JSMirrorInvalidSubjectFilter', 400, 10151, 'mirror transform source: {err}', 'mirror_invalid_subject_filter'),
    ('JSMirrorOverlappingSubjectFilters', 400, 10152, 'mirror subject filters can not overlap', 'mirror_overlapping_subject_filters'),
    ('JSConsumerInactiveThresholdExcess', 400, 10153, 'consumer inactive threshold exceeds system limit of {limit}', 'consumer_inactive_threshold_excess'),
    ('JSMirrorInvalidTransformDestination', 400, 10154, 'mirror transform: {err}', 'mirror_invalid_transform_destination'),
    ('JSStreamTransformInvalidSource', 400, 10155, 'stream transform source: {err}', 'stream_transform_invalid_source'),
    ('JSStreamTransformInvalidDestination', 400, 10156, 'stream transform: {err}', 'stream_transform_invalid_destination'),
    ('JSPedanticErrF', 400, 10157, 'pedantic mode: {err}', 'pedantic'),
    ('JSStreamDuplicateMessageConflict', 409, 10158, 'duplicate message id is in process', 'stream_duplicate_message_conflict'),
    ('JSConsumerPriorityPolicyWithoutGroup', 400, 10159, 'Setting PriorityPolicy requires at least one PriorityGroup to be set', 'consumer_priority_policy_without_group'),
    ('JSConsumerInvalidPriorityGroupErr', 400, 10160, 'Provided priority group does not exist for this consumer', 'consumer_invalid_priority_group'),
    ('JSConsumerEmptyGroupName', 400, 10161, 'Group name cannot be an empty string', 'consumer_empty_group_name'),
    ('JSConsumerInvalidGroupNameErr', 400, 10162, 'Valid priority group name must match A-Z, a-z, 0-9, -_/=)+ and may not exceed 16 characters', 'consumer_invalid_group_name'),
    ('JSStreamExpectedLastSeqPerSubjectNotReady', 503, 10163, 'expected last sequence per subject temporarily unavailable', 'stream_expected_last_seq_per_subject_not_ready'),
    ('JSStreamWrongLastSequenceConstantErr', 400, 10164, 'wrong last sequence', 'stream_wrong_last_sequence_constant'),
    ('JSMessageTTLInvalidErr', 400, 10165, 'invalid per-message TTL', 'message_ttl_invalid'),
    ('JSMessageTTLDisabledErr', 400, 10166, 'per-message TTL is disabled', 'message_ttl_disabled'),
    ('JSStreamTooManyRequests', 429, 10167, 'too many requests', 'stream_too_many_requests'),
    ('JSMessageIncrDisabledErr', 400, 10168, 'message counters is disabled', 'message_incr_disabled'),
    ('JSMessageIncrMissingErr', 400, 10169, 'message counter increment is missing', 'message_incr_missing'),
    ('JSMessageIncrPayloadErr', 400, 10170, 'message counter has payload', 'message_incr_payload'),
    ('JSMessageIncrInvalidErr', 400, 10171, 'message counter increment is invalid', 'message_incr_invalid'),
    ('JSMessageCounterBrokenErr', 400, 10172, 'message counter is broken', 'message_counter_broken'),
    ('JSMirrorWithCountersErr', 400, 10173, 'stream mirrors can not also calculate counters', 'mirror_with_counters'),
    ('JSAtomicPublishDisabledErr', 400, 10174, 'atomic publish is disabled', 'atomic_publish_disabled'),
    ('JSAtomicPublishMissingSeqErr', 400, 10175, 'atomic publish sequence is missing', 'atomic_publish_missing_seq'),
    ('JSAtomicPublishIncompleteBatchErr', 400, 10176, 'atomic publish batch is incomplete', 'atomic_publish_incomplete_batch'),
    ('JSAtomicPublishUnsupportedHeaderBatchErr', 400, 10177, 'atomic publish unsupported header used: {header}', 'atomic_publish_unsupported_header_batch'),
    ('JSConsumerPushWithPriorityGroupErr', 400, 10178, 'priority groups can not be used with push consumers', 'consumer_push_with_priority_group'),
    ('JSAtomicPublishInvalidBatchIDErr', 400, 10179, 'atomic publish batch ID is invalid', 'atomic_publish_invalid_batch_id'),
    ('JSStreamMinLastSeqErr', 412, 10180, 'min last sequence', 'stream_min_last_seq'),
    ('JSConsumerAckPolicyInvalidErr', 400, 10181, 'consumer ack policy invalid', 'consumer_ack_policy_invalid'),
    ('JSConsumerReplayPolicyInvalidErr', 400, 10182, 'consumer replay policy invalid', 'consumer_replay_policy_invalid'),
    ('JSConsumerAckWaitNegativeErr', 400, 10183, 'consumer ack wait needs to be positive', 'consumer_ack_wait_negative'),
    ('JSConsumerBackOffNegativeErr', 400, 10184, 'consumer backoff needs to be positive', 'consumer_back_off_negative'),
    ('JSRequiredApiLevelErr', 412, 10185, 'JetStream minimum api level required', 'required_api_level'),
    ('JSMirrorWithMsgSchedulesErr', 400, 10186, 'stream mirrors can not also schedule messages', 'mirror_with_msg_schedules'),
    ('JSSourceWithMsgSchedulesErr', 400, 10187, 'stream source can not also schedule messages', 'source_with_msg_schedules'),
    ('JSMessageSchedulesDisabledErr', 400, 10188, 'message schedules is disabled', 'message_schedules_disabled'),
    ('JSMessageSchedulesPatternInvalidErr', 400, 10189, 'message schedules pattern is invalid', 'message_schedules_pattern_invalid'),
    ('JSMessageSchedulesTargetInvalidErr', 400, 10190, 'message schedules target is invalid', 'message_schedules_target_invalid'),
    ('JSMessageSchedulesTTLInvalidErr', 400, 10191, 'message schedules invalid per-message TTL', 'message_schedules_ttl_invalid'),
    ('JSMessageSchedulesRollupInvalidErr', 400, 10192, 'message schedules invalid rollup', 'message_schedules_rollup_invalid'),
    ('JSStreamExpectedLastSeqPerSubjectInvalid', 400, 10193, 'missing sequence for expected last sequence per subject', 'stream_expected_last_seq_per_subject_invalid'),
    ('JSStreamOfflineReasonErrF', 500, 10194, 'stream is offline: {err}', 'stream_offline_reason'),
    ('JSConsumerOfflineReasonErrF', 500, 10195, 'consumer is offline: {err}', 'consumer_offline_reason'),
    ('JSConsumerPriorityGroupWithPolicyNone', 400, 10196, 'consumer can not have priority groups when policy is none', 'consumer_priority_group_with_policy_none'),
    ('JSConsumerPinnedTTLWithoutPriorityPolicyNone', 400, 10197, 'PinnedTTL cannot be set when PriorityPolicy is none', 'consumer_pinned_ttl_without_priority_policy_none'),
    ('JSMirrorWithAtomicPublishErr', 400, 10198, 'stream mirrors can not also use atomic publishing', 'mirror_with_atomic_publish'),
    ('JSAtomicPublishTooLargeBatchErrF', 400, 10199, 'atomic publish batch is too large: {size}', 'atomic_publish_too_large_batch'),
    ('JSAtomicPublishInvalidBatchCommitErr', 400, 10200, 'atomic publish batch commit is invalid', 'atomic_publish_invalid_batch_commit'),
    ('JSAtomicPublishContainsDuplicateMessageErr', 400, 10201, 'atomic publish batch contains duplicate message id', 'atomic_publish_contains_duplicate_message'),
    ('JSClusterServerMemberChangeInflightErr', 400, 10202, 'cluster member change is in progress', 'cluster_server_member_change_inflight'),
    ('JSMessageSchedulesSourceInvalidErr', 400, 10203, 'message schedules source is invalid', 'message_schedules_source_invalid'),
    ('JSConsumerInvalidResetErr', 400, 10204, 'invalid reset: {err}', 'consumer_invalid_reset'),
    ('JSBatchPublishDisabledErr', 400, 10205, 'batch publish is disabled', 'batch_publish_disabled'),
    ('JSBatchPublishInvalidPatternErr', 400, 10206, 'batch publish pattern is invalid', 'batch_publish_invalid_pattern'),
    ('JSBatchPublishInvalidBatchIDErr', 400, 10207, 'batch publish ID is invalid', 'batch_publish_invalid_batch_id'),
    ('JSBatchPublishUnknownBatchIDErr', 400, 10208, 'batch publish ID unknown', 'batch_publish_unknown_batch_id'),
    ('JSMirrorWithBatchPublishErr', 400, 10209, 'stream mirrors can not also use batch publishing', 'mirror_with_batch_publish'),
    ('JSAtomicPublishTooManyInflight', 429, 10210, 'atomic publish too many inflight', 'atomic_publish_too_many_inflight'),
    ('JSBatchPublishTooManyInflight', 429, 10211, 'batch publish too many inflight', 'batch_publish_too_many_inflight'),
    ('JSMessageSchedulesSchedulerInvalidErr', 400, 10212, 'message schedules invalid scheduler', 'message_schedules_scheduler_invalid'),
    ('JSMirrorDurableConsumerCfgInvalid', 400, 10213, 'stream mirror consumer config is invalid', 'mirror_durable_consumer_cfg_invalid'),
    ('JSMirrorConsumerRequiresAckFCErr', 400, 10214, 'stream mirror consumer requires flow control ack policy', 'mirror_consumer_requires_ack_fc'),
    ('JSSourceDurableConsumerCfgInvalid', 400, 10215, 'stream source consumer config is invalid', 'source_durable_consumer_cfg_invalid'),
    ('JSSourceDurableConsumerDuplicateDetected', 400, 10216, 'duplicate stream source consumer detected', 'source_durable_consumer_duplicate_detected'),
    ('JSSourceConsumerRequiresAckFCErr', 400, 10217, 'stream source consumer requires flow control ack policy', 'source_consumer_requires_ack_fc'),
    ('JSConsumerAckFCRequiresPushErr', 400, 10218, 'flow control ack policy requires a push based consumer', 'consumer_ack_fc_requires_push'),
    ('JSConsumerAckFCRequiresFCErr', 400, 10219, 'flow control ack policy requires flow control', 'consumer_ack_fc_requires_fc'),
    ('JSConsumerAckFCRequiresMaxAckPendingErr', 400, 10220, 'flow control ack policy requires max ack pending', 'consumer_ack_fc_requires_max_ack_pending'),
    ('JSConsumerAckFCRequiresNoAckWaitErr', 400, 10221, 'flow control ack policy requires unset ack wait', 'consumer_ack_fc_requires_no_ack_wait'),
    ('JSConsumerAckFCRequiresNoMaxDeliverErr', 400, 10222, 'flow control ack policy requires unset max deliver', 'consumer_ack_fc_requires_no_max_deliver'),
    ('JSMessageSchedulesTimeZoneInvalidErr', 400, 10223, 'message schedules time zone is invalid', 'message_schedules_time_zone_invalid'),
    ('JSClusterRescueErr', 400, 10224, 'JetStream system rescue not applied: {err}', 'cluster_rescue'),
    ('JSConsumerStreamIdentityMismatchF', 400, 10225, "consumer's stream identity does not match: {msg}", 'consumer_stream_identity_mismatch'),
    ('JSStreamReconfigureInProgressErr', 400, 10226, 'stream reconfiguration already in progress', 'stream_reconfigure_in_progress'),
)

ERRORS = {}
BY_ERR_CODE = {}
BY_HELPER = {}
for _row in _TABLE:
    _spec = ErrorSpec(*_row)
    ERRORS[_spec.constant] = _spec
    BY_ERR_CODE[_spec.err_code] = _spec
    BY_HELPER[_spec.helper] = _spec


def new_error(constant, *args, unless=None, **kwargs):
    """Build the error named by nats-server's ``constant`` (or its helper name).

    Positional ``args`` fill the template's placeholders in order; keyword
    arguments fill them by name.  ``unless``: an ``ApiError`` to return as is.
    """
    if isinstance(unless, ApiError):
        return unless
    spec = ERRORS.get(constant) or BY_HELPER.get(constant)
    if spec is None:
        raise KeyError("unknown JetStream error %r" % (constant,))
    if len(args) > len(spec.params):
        raise TypeError("%s takes %d argument(s) (%s), %d given" % (
            spec.helper, len(spec.params), ", ".join(spec.params), len(args)))
    values = dict(zip(spec.params, args))
    for key, value in kwargs.items():
        if key not in spec.params:
            raise TypeError("%s has no placeholder {%s}" % (spec.helper, key))
        if key in values:
            raise TypeError("%s got {%s} twice" % (spec.helper, key))
        values[key] = value
    missing = [p for p in spec.params if p not in values]
    if missing:
        raise TypeError("%s needs %s" % (spec.helper, ", ".join(missing)))
    text = spec.template
    if values:
        # One pass, like Go's strings.NewReplacer: substituted text is not rescanned.
        text = re.sub(r"{(\w+)}", lambda m: _go_sprint(values[m.group(1)])
                      if m.group(1) in values else m.group(0), text)
    return ApiError(spec.code, spec.err_code, text, spec.constant)


def _make_helper(spec):
    def helper(*args, unless=None, **kwargs):
        return new_error(spec.constant, *args, unless=unless, **kwargs)
    helper.__name__ = helper.__qualname__ = spec.helper
    params = ", ".join(spec.params)
    helper.__doc__ = "%s (%d/%d): %r%s" % (
        spec.constant, spec.code, spec.err_code, spec.template,
        "; arguments: " + params if params else "")
    return helper


for _spec in ERRORS.values():
    globals()[_spec.helper] = _make_helper(_spec)
    __all__.append(_spec.helper)
del _row, _spec

# Constants by nats-server's name, for ``errors.JSStreamNotFoundErr`` style use:
# each is the ErrorSpec (call ``new_error(JSStreamNotFoundErr)`` to build one).
for _name, _spec in ERRORS.items():
    globals()[_name] = _spec
del _name, _spec


# ---------------------------------------------------------------------------
# The texts nats-server puts into the generic templates on the stream paths.
# ---------------------------------------------------------------------------

# Store errors (server/store.go) as they appear in {err}.
ERR_STORE_EOF = "stream store EOF"
ERR_STORE_MSG_NOT_FOUND = "no message found"
ERR_MAX_MSGS = "maximum messages exceeded"
ERR_MAX_BYTES = "maximum bytes exceeded"
ERR_MAX_MSGS_PER_SUBJECT = "maximum messages per subject exceeded"
ERR_STORE_CLOSED = "store is closed"


def stream_purge_not_permitted():
    """PURGE on a ``deny_purge`` stream: 500/10110 "stream purge not permitted"."""
    return stream_purge_failed("stream purge not permitted")


def stream_msg_delete_not_permitted():
    """MSG.DELETE on a ``deny_delete`` stream: 500/10057 "message delete not permitted"."""
    return stream_msg_delete_failed("message delete not permitted")


def rollup_not_permitted():
    """``Nats-Rollup`` on a stream without ``allow_rollup_hdrs`` (or with
    ``deny_purge``): 500/10111 "rollup not permitted"."""
    return stream_rollup_failed("rollup not permitted")


def rollup_value_invalid(value):
    """``Nats-Rollup`` other than ``sub``/``all``: 500/10111 'rollup value invalid: "x"'."""
    return stream_rollup_failed("rollup value invalid: %s" % go_quote(value))


def store_max_msgs_exceeded():
    """Publish refused by ``discard: new`` at ``max_msgs``: 503/10077."""
    return stream_store_failed(ERR_MAX_MSGS)


def store_max_bytes_exceeded():
    """Publish refused by ``discard: new`` at ``max_bytes``: 503/10077."""
    return stream_store_failed(ERR_MAX_BYTES)


def store_max_msgs_per_subject_exceeded():
    """Publish refused by ``discard_new_per_subject``: 503/10077."""
    return stream_store_failed(ERR_MAX_MSGS_PER_SUBJECT)


def msg_delete_store_eof():
    """MSG.DELETE of a sequence past the end of the stream: 500/10057 "stream store EOF"."""
    return stream_msg_delete_failed(ERR_STORE_EOF)


def msg_delete_not_found():
    """MSG.DELETE of sequence 0: 500/10057 "no message found".  (A sequence inside
    the stream that is already gone is ``sequence_not_found(seq)``, 400/10043.)"""
    return stream_msg_delete_failed(ERR_STORE_MSG_NOT_FOUND)


# Friendlier names for the same errors.
stream_purge_not_allowed = stream_purge_not_permitted
stream_msg_delete_not_allowed = stream_msg_delete_not_permitted
stream_name_in_use = stream_name_exist                      # 10058
stream_subjects_overlap = stream_subject_overlap            # 10065
stream_name_mismatch = stream_mismatch                      # 10056
expected_stream_mismatch = stream_not_match                 # 10060
not_clustered = cluster_required                            # 10010, e.g. STREAM.LEADER.STEPDOWN standalone
replicas_not_supported = stream_replicas_not_supported      # 10074
message_too_big = stream_message_exceeds_maximum            # 10054

__all__ += [
    "ERR_STORE_EOF", "ERR_STORE_MSG_NOT_FOUND", "ERR_MAX_MSGS", "ERR_MAX_BYTES",
    "ERR_MAX_MSGS_PER_SUBJECT", "ERR_STORE_CLOSED",
    "stream_purge_not_permitted", "stream_msg_delete_not_permitted", "rollup_not_permitted",
    "rollup_value_invalid", "store_max_msgs_exceeded", "store_max_bytes_exceeded",
    "store_max_msgs_per_subject_exceeded", "msg_delete_store_eof", "msg_delete_not_found",
    "stream_purge_not_allowed", "stream_msg_delete_not_allowed", "stream_name_in_use",
    "stream_subjects_overlap", "stream_name_mismatch", "expected_stream_mismatch",
    "not_clustered", "replicas_not_supported", "message_too_big",
]
