"""JetStream consumer models (natsbroker/jetstream/consumer_models.py) against nats-server 2.15.1.

Unit tests pin what was observed on the real server (error codes and texts,
their order, defaults, field order); ``test_differential_*`` start nats-server
and compare its replies with what the module computes for the same requests.
"""

import asyncio
import json
import re
import tempfile

import nats
import pytest

from natsbroker.gocompat import gojson, times as gotime
from natsbroker.jetstream import (
    consumer_config as CF,
    consumer_models as C,
    consumer_requests as CR,
    errors as E,
    stream_config as SC,
    stream_models as SM,
)
from tests.support.servers import ServerProcess

V = dict(version="2.15.1", api_level=5)


def stream(body):
    body = json.dumps(body).encode() if isinstance(body, dict) else body
    name = json.loads(body)["name"]
    return SC.fill_defaults(SC.parse_stream_config(body, name))


S = stream({"name": "S", "subjects": ["s.>", "t.*"]})
WQ = stream({"name": "WQ", "subjects": ["wq.>"], "retention": "workqueue"})
LIM = stream({"name": "LIM", "subjects": ["lim.>"],
              "consumer_limits": {"inactive_threshold": 10_000_000_000, "max_ack_pending": 50}})


def create(subject, body, stream_cfg=S, consumers=None, **kw):
    if isinstance(body, dict):
        body = json.dumps(body)
    return CF.process_consumer_create(subject, body.encode() if isinstance(body, str) else body,
                                      stream_cfg, consumers, **kw)


def error_of(subject, body, stream_cfg=S, consumers=None, **kw):
    with pytest.raises(E.ApiError) as exc:
        create(subject, body, stream_cfg, consumers, **kw)
    return exc.value


def cfg_json(cfg, **kw):
    return gojson.go_json_dumps(C.consumer_config_json(cfg, **V, **kw))


# ---------------------------------------------------------------------------
# Subjects and request parsing
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("subject, expected", [
    ("$JS.API.CONSUMER.CREATE.S", ("S", None, None, False)),
    ("$JS.API.CONSUMER.CREATE.S.N", ("S", "N", None, False)),
    ("$JS.API.CONSUMER.CREATE.S.N.s.a.>", ("S", "N", "s.a.>", False)),
    ("$JS.API.CONSUMER.DURABLE.CREATE.S.D", ("S", "D", None, True)),
    ("$JS.API.CONSUMER.DURABLE.CREATE.S", None),
    ("$JS.API.CONSUMER.DURABLE.CREATE.S.D.x", None),
    ("$JS.API.CONSUMER.CREATE", None),
    ("$JS.API.CONSUMER.INFO.S.D", None),
])
def test_parse_create_subject(subject, expected):
    assert CF.parse_create_subject(subject) == expected


@pytest.mark.parametrize("body, description", [
    ("{bad", "invalid JSON: invalid character 'b' looking for beginning of object key string at offset 2"),
    ('{"stream_name":"X","config":{},"foo":1}', 'invalid JSON: json: unknown field "foo"'),
    ('{"stream_name":"S","config":{"bogus":1}}', 'invalid JSON: json: unknown field "bogus"'),
    ('{"stream_name":"S","config":{"deliver_policy":"bogus"}}', 'invalid JSON: can not unmarshal "\\"bogus\\""'),
    ('{"stream_name":"S","config":{"deliver_policy":"ALL"}}', 'invalid JSON: can not unmarshal "\\"ALL\\""'),
    ('{"stream_name":"S","config":{"deliver_policy":"\\u0061ll"}}',
     'invalid JSON: can not unmarshal "\\"\\\\u0061ll\\""'),
    ('{"stream_name":"S","config":{"deliver_policy":null}}', 'invalid JSON: can not unmarshal "null"'),
    ('{"stream_name":"S","config":{"ack_policy":"undefined"}}',
     'invalid JSON: can not unmarshal "\\"undefined\\""'),
    ('{"stream_name":"S","config":{"replay_policy":5}}', 'invalid JSON: can not unmarshal "5"'),
    ('{"stream_name":"S","config":{"priority_policy":"bogus"}}',
     'invalid JSON: unknown priority policy: "bogus"'),
    ('{"stream_name":"S","config":{"priority_policy":null}}', "invalid JSON: unknown priority policy: null"),
    ('{"stream_name":"S","action":"bogus","config":{}}', 'invalid JSON: unknown consumer action: "bogus"'),
    ('{"stream_name":"S","action":{"a":  1},"config":{}}', 'invalid JSON: unknown consumer action: {"a":  1}'),
    ('{"stream_name":"S","action":null}', "invalid JSON: unknown consumer action: null"),
    ('{"stream_name":"S","config":{"ack_wait":"1s"}}', "invalid JSON: json: cannot unmarshal string into Go "
     "struct field CreateConsumerRequest.config.ack_wait of type time.Duration"),
    ('{"stream_name":"S","config":{"backoff":[1,"x"]}}', "invalid JSON: json: cannot unmarshal string into "
     "CreateConsumerRequest.config.backoff.1 of type time.Duration"),
    ('{"stream_name":"S","config":{"opt_start_seq":-1}}', "invalid JSON: json: cannot unmarshal number -1 into "
     "Go struct field CreateConsumerRequest.config.opt_start_seq of type uint64"),
    ('{"stream_name":"S","config":{"opt_start_time":"bad"}}', 'invalid JSON: parsing time "bad" as '
     '"2006-01-02T15:04:05Z07:00": cannot parse "bad" as "2006"'),
    ('{"stream_name":"S","config":[]}', "invalid JSON: json: cannot unmarshal array into Go struct field "
     "CreateConsumerRequest.config of type server.ConsumerConfig"),
    ("[]", "invalid JSON: json: cannot unmarshal array into Go value of type server.CreateConsumerRequest"),
    ('{"stream_name":"S","config":{},"pedantic":"yes"}', "invalid JSON: json: cannot unmarshal string into Go "
     "struct field CreateConsumerRequest.pedantic of type bool"),
])
def test_request_json_errors(body, description):
    err = error_of("$JS.API.CONSUMER.CREATE.S", body)
    assert (err.code, err.err_code, err.description) == (400, 10025, description)


def test_request_decoding():
    req = CF.parse_consumer_request(
        b'{"stream_name":"S","action":"create","pedantic":true,"config":{"Durable_Name":"D",'
        b'"deliver_policy":"undefined","opt_start_time":"2024-01-02T03:04:05.100000000-07:30",'
        b'"backoff":[1,2],"metadata":{"a":"b"}}} {"config":{"description":"x"}}',
        "S", "D", legacy_durable=True)
    assert req.action == "create" and req.pedantic
    cfg = req.config
    assert (cfg.durable_name, cfg.name, cfg.description) == ("D", "D", "x")
    assert cfg.deliver_policy == "all"
    assert cfg.opt_start_time == "2024-01-02T03:04:05.1-07:30"
    assert cfg.backoff == [1, 2] and cfg.metadata == {"a": "b"}
    assert CF.parse_consumer_request(b'{"stream_name":"S","config":null}', "S").config == C.ConsumerConfig()
    assert CF.parse_consumer_request(b'{"stream_name":"S","action":""}', "S").action == ""


@pytest.mark.parametrize("subject, body, err", [
    # Order: JSON, stream name, path separators, durable rules, filter, replicas.
    ("$JS.API.CONSUMER.CREATE.S", "", E.stream_mismatch()),
    ("$JS.API.CONSUMER.CREATE.S.N/2", '{"stream_name":"X"}', E.stream_mismatch()),
    ("$JS.API.CONSUMER.DURABLE.CREATE.S.D/2", '{"stream_name":"S","config":{}}',
     E.consumer_name_contains_path_separators()),
    ("$JS.API.CONSUMER.DURABLE.CREATE.S.D", '{"stream_name":"S","config":{}}', E.consumer_durable_name_not_set()),
    ("$JS.API.CONSUMER.DURABLE.CREATE.S.D", '{"stream_name":"S","config":{"durable_name":"E"}}',
     E.consumer_durable_name_not_match_subject()),
    ("$JS.API.CONSUMER.CREATE.S.N.s.a", '{"stream_name":"S","config":{"filter_subjects":["s.b"],"durable_name":"Q"}}',
     E.consumer_durable_name_not_match_subject()),
    ("$JS.API.CONSUMER.CREATE.S", '{"stream_name":"S","config":{"durable_name":"x","num_replicas":3}}',
     E.consumer_ephemeral_with_durable_name()),
    ("$JS.API.CONSUMER.CREATE.S.N.s.a", '{"stream_name":"S","config":{"filter_subjects":["s.b"],"filter_subject":"s.a"}}',
     E.consumer_multiple_filters_not_allowed()),
    ("$JS.API.CONSUMER.CREATE.S.N.s.a", '{"stream_name":"S","config":{"filter_subject":"s.b","num_replicas":3}}',
     E.consumer_create_filter_subject_mismatch()),
    ("$JS.API.CONSUMER.CREATE.S.N.s.a", '{"stream_name":"S","config":{}}', E.consumer_create_filter_subject_mismatch()),
    ("$JS.API.CONSUMER.CREATE.S.N", '{"stream_name":"S","config":{"num_replicas":2,"deliver_subject":"a.*"}}',
     E.stream_replicas_not_supported()),
])
def test_request_check_order(subject, body, err):
    assert error_of(subject, body) == err


def test_stream_not_found_after_request_checks():
    assert error_of("$JS.API.CONSUMER.CREATE.NOPE", '{"stream_name":"NOPE","config":{"deliver_subject":"a.*"}}',
                    None) == E.stream_not_found()
    assert error_of("$JS.API.CONSUMER.CREATE.NOPE", '{"stream_name":"NOPE","config":{"num_replicas":3}}',
                    None) == E.stream_replicas_not_supported()
    assert create("$JS.API.CONSUMER.DURABLE.CREATE.S", "{}") is None


def test_names_and_pause_requests():
    assert CR.parse_consumers_request(b"").offset == 0
    assert CR.parse_consumers_request(b'{"offset":5}').offset == 5
    with pytest.raises(E.ApiError) as exc:
        CR.parse_consumers_request(b'{"subject":"x"}')
    assert exc.value.description == 'invalid JSON: json: unknown field "subject"'
    with pytest.raises(E.ApiError) as exc:
        CR.parse_consumers_request(b'{"offset":"x"}')
    assert exc.value.description == ("invalid JSON: json: cannot unmarshal string into Go struct field "
                                      "JSApiConsumersRequest.offset of type int")
    assert CR.parse_pause_request(b'{"pause_until":null}').pause_until is None
    assert CR.parse_pause_request(b'{"pause_until":"2030-01-01T00:00:00+02:00"}').pause_until == \
        "2030-01-01T00:00:00+02:00"
    with pytest.raises(E.ApiError) as exc:
        CR.parse_pause_request(b'{"bogus":1}')
    assert exc.value.err_code == 10025


# ---------------------------------------------------------------------------
# Defaults
# ---------------------------------------------------------------------------

def test_defaults_pull_ephemeral():
    cfg = create("$JS.API.CONSUMER.CREATE.S", {"stream_name": "S", "config": {}})
    assert cfg_json(cfg) == (
        '{"deliver_policy":"all","ack_policy":"none","max_deliver":-1,"replay_policy":"instant",'
        '"max_waiting":512,"inactive_threshold":5000000000,"num_replicas":0,'
        '"metadata":{"_nats.level":"5","_nats.req.level":"0","_nats.ver":"2.15.1"}}')


def test_defaults_durable_explicit_and_push():
    cfg = create("$JS.API.CONSUMER.DURABLE.CREATE.S.D", {"stream_name": "S", "config": {
        "durable_name": "D", "name": "X", "ack_policy": "explicit"}})
    assert cfg_json(cfg) == (
        '{"durable_name":"D","name":"D","deliver_policy":"all","ack_policy":"explicit",'
        '"ack_wait":30000000000,"max_deliver":-1,"replay_policy":"instant","max_waiting":512,'
        '"max_ack_pending":1000,"num_replicas":0,'
        '"metadata":{"_nats.level":"5","_nats.req.level":"0","_nats.ver":"2.15.1"}}')
    cfg = create("$JS.API.CONSUMER.CREATE.S.N1", {"stream_name": "S", "config": {
        "deliver_subject": "x.y", "idle_heartbeat": -5, "metadata": {"k": "v", "_nats.ver": "x"}}})
    assert cfg_json(cfg) == (
        '{"name":"N1","deliver_policy":"all","ack_policy":"none","max_deliver":-1,'
        '"replay_policy":"instant","deliver_subject":"x.y","inactive_threshold":5000000000,'
        '"num_replicas":0,"metadata":{"_nats.level":"5","_nats.req.level":"0","_nats.ver":"2.15.1","k":"v"}}')


def test_defaults_values():
    fill = CF.fill_consumer_defaults
    cfg = fill(C.ConsumerConfig(backoff=[1_000_000_000, 2]), S)
    assert cfg.ack_wait == 1_000_000_000                   # even with ack none
    cfg = fill(C.ConsumerConfig(max_waiting=-3, max_ack_pending=-5, max_batch=-1, max_expires=-1,
                                max_bytes=-1, inactive_threshold=-1, priority_timeout=-1,
                                max_deliver=-7), S)
    assert (cfg.max_waiting, cfg.max_ack_pending, cfg.max_batch, cfg.max_expires, cfg.max_bytes,
            cfg.inactive_threshold, cfg.priority_timeout, cfg.max_deliver) == (512, -1, 0, 0, 0, 0, 0, -1)
    assert cfg.metadata == {"_nats.req.level": "1"}       # computed before the defaults
    cfg = fill(C.ConsumerConfig(ack_policy="all"), LIM)
    assert (cfg.max_ack_pending, cfg.inactive_threshold, cfg.ack_wait) == (50, 10_000_000_000, 30_000_000_000)
    cfg = fill(C.ConsumerConfig(ack_policy="none"), LIM)
    assert cfg.max_ack_pending == 50
    cfg = fill(C.ConsumerConfig(ack_policy="explicit"), S, server_max_ack_pending=300,
               account_max_ack_pending=200, server_max_request_batch=7)
    assert (cfg.max_ack_pending, cfg.max_batch) == (200, 7)
    cfg = fill(C.ConsumerConfig(priority_policy="pinned_client", priority_groups=["g"]), S)
    assert cfg.priority_timeout == 120_000_000_000 and cfg.metadata["_nats.req.level"] == "1"
    cfg = fill(C.ConsumerConfig(ack_policy="flow_control", deliver_subject="fc"), S)
    assert (cfg.flow_control, cfg.idle_heartbeat, cfg.max_ack_pending, cfg.ack_wait) == (True, 10**9, 1000, 0)
    assert cfg.metadata["_nats.req.level"] == "4"
    cfg = fill(C.ConsumerConfig(ack_policy="flow_control", deliver_subject="fc"), S, pedantic=True)
    assert not cfg.flow_control
    for pause, level in (("2001-01-01T00:00:00Z", "1"), ("0001-01-01T00:00:00Z", "0"), (None, "0")):
        assert fill(C.ConsumerConfig(pause_until=pause), S).metadata["_nats.req.level"] == level
    existing = C.ConsumerConfig(durable_name="D", pause_until=None)
    assert fill(C.ConsumerConfig(durable_name="D", pause_until="2030-01-01T00:00:00Z"), S,
                existing=existing).pause_until is None


@pytest.mark.parametrize("config, stream_cfg, text", [
    ({"max_deliver": -7}, S, "max_deliver must be set to -1"),
    ({"max_waiting": -3}, S, "max_waiting must not be negative"),
    ({"max_ack_pending": -2}, S, "max_ack_pending must be set to -1"),
    ({"max_batch": -2}, S, "max_batch must not be negative"),
    ({"max_expires": -2}, S, "max_expires must not be negative"),
    ({"max_bytes": -1}, S, "max_bytes must not be negative"),
    ({"idle_heartbeat": -1}, S, "idle_heartbeat must not be negative"),
    ({"inactive_threshold": -1}, S, "inactive_threshold must not be negative"),
    ({"priority_timeout": -1}, S, "priority_timeout must not be negative"),
    ({"backoff": [10**9, 2 * 10**9], "ack_wait": 5}, S, "first backoff value has to equal batch AckWait"),
    ({"backoff": [10**9]}, S, "first backoff value has to equal batch AckWait"),
    ({"ack_policy": "explicit"}, LIM, "max_ack_pending must be set if it's configured in stream limits"),
    ({"ack_policy": "explicit", "max_ack_pending": 5}, LIM,
     "inactive_threshold must be set if it's configured in stream limits"),
])
def test_pedantic(config, stream_cfg, text):
    body = {"stream_name": stream_cfg.name, "config": config, "pedantic": True}
    assert error_of("$JS.API.CONSUMER.CREATE." + stream_cfg.name, body, stream_cfg) == E.pedantic(text)


# ---------------------------------------------------------------------------
# checkConsumerCfg and the rest of addConsumer
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("config, stream_cfg, err", [
    ({"name": "a.b"}, S, E.stream_invalid_config("consumer name can not contain '.', '*', '>', '\\', '/'")),
    ({"name": "a b", "num_replicas": -1}, S,
     E.stream_invalid_config("consumer name can not contain '.', '*', '>', '\\', '/'")),
    ({"num_replicas": -1}, S, E.replicas_count_cannot_be_negative()),
    ({"ack_policy": "flow_control"}, S, E.consumer_ack_fc_requires_push()),
    ({"ack_policy": "flow_control", "deliver_subject": "fc", "ack_wait": 5}, S, E.consumer_ack_fc_requires_no_ack_wait()),
    ({"ack_policy": "flow_control", "deliver_subject": "fc", "backoff": [5]}, S,
     E.consumer_ack_fc_requires_no_ack_wait()),
    ({"ack_policy": "flow_control", "deliver_subject": "fc", "max_deliver": 5}, S,
     E.consumer_ack_fc_requires_no_max_deliver()),
    ({"ack_wait": -1}, S, E.consumer_ack_wait_negative()),
    ({"backoff": [-1]}, S, E.consumer_back_off_negative()),
    ({"backoff": [10**9, 2 * 10**9], "max_deliver": 1}, S, E.consumer_max_deliver_backoff()),
    ({"description": "x" * 4097}, S, E.consumer_description_too_long(4096)),
    ({"description": "\u00e9" * 2049}, S, E.consumer_description_too_long(4096)),
    ({"deliver_subject": "a.*"}, S, E.consumer_deliver_to_wildcards()),
    ({"deliver_subject": "a..b"}, S, E.consumer_invalid_deliver_subject()),
    ({"deliver_subject": "s.q", "max_waiting": 3, "rate_limit_bps": 5}, S, E.consumer_deliver_cycle()),
    ({"deliver_subject": "dx", "max_waiting": 5}, S, E.consumer_push_max_waiting()),
    ({"deliver_subject": "dx", "max_ack_pending": 5}, S, E.consumer_max_pending_ack_policy_required()),
    ({"deliver_subject": "dx", "idle_heartbeat": 50_000_000}, S, E.consumer_small_heartbeat()),
    ({"deliver_subject": "dx", "flow_control": True}, S, E.consumer_with_flow_control_needs_heartbeats()),
    ({}, WQ, E.consumer_pull_requires_ack()),
    ({"rate_limit_bps": 5}, S, E.consumer_pull_with_rate_limit()),
    ({"idle_heartbeat": 10**9}, S, E.consumer_hb_requires_push()),
    ({"flow_control": True}, S, E.consumer_fc_requires_push()),
    ({"max_expires": 100}, S, E.consumer_max_request_expires_too_small()),
    ({"ack_policy": "explicit", "max_ack_pending": 51}, LIM, E.consumer_max_pending_ack_excess(50)),
    ({"ack_policy": "explicit", "inactive_threshold": 10_000_000_001}, LIM,
     E.consumer_inactive_threshold_excess("10s")),
    ({"direct": True}, S, E.consumer_direct_requires_push()),
    ({"filter_subject": "s.a", "filter_subjects": ["s.b"]}, S, E.consumer_duplicate_filter_subjects()),
    ({"filter_subject": "s..a"}, S, E.stream_invalid_config("invalid subject")),
    ({"filter_subjects": ["s.a", ""]}, S, E.consumer_empty_filter()),
    ({"filter_subjects": ["zzz", "s..x"]}, S, E.stream_invalid_config("invalid subject")),
    ({"filter_subjects": ["a.>", "a.b.>"]}, S, E.consumer_overlapping_subject_filters()),
    ({"opt_start_seq": 5}, S, E.consumer_invalid_policy(
        "consumer delivery policy is deliver all, but optional start sequence is also set")),
    ({"deliver_policy": "last_per_subject"}, S, E.consumer_invalid_policy(
        "consumer delivery policy is deliver last per subject, but optional filter subject is not set")),
    ({"deliver_policy": "new", "opt_start_time": "2024-01-01T00:00:00Z"}, S, E.consumer_invalid_policy(
        "consumer delivery policy is deliver new, but optional start time is also set")),
    ({"deliver_policy": "by_start_sequence"}, S, E.consumer_invalid_policy(
        "consumer delivery policy is deliver by start sequence, but optional start sequence is not set")),
    ({"deliver_policy": "by_start_time", "opt_start_seq": 3, "opt_start_time": "2024-01-01T00:00:00Z"}, S,
     E.consumer_invalid_policy(
         "consumer delivery policy is deliver by start time, but optional start start sequence is also set")),
    ({"sample_freq": "abc"}, S, E.consumer_invalid_sampling('strconv.Atoi: parsing "abc": invalid syntax')),
    ({"sample_freq": "-5%"}, S, E.consumer_invalid_sampling("<nil>")),
    ({"sample_freq": "5%%"}, S, E.consumer_invalid_sampling('strconv.Atoi: parsing "5%": invalid syntax')),
    ({"sample_freq": "99999999999999999999"}, S, E.consumer_invalid_sampling(
        'strconv.Atoi: parsing "99999999999999999999": value out of range')),
    ({"metadata": {"k": "x" * (128 * 1024)}}, S, E.consumer_metadata_length("128KB")),
    ({"priority_policy": "pinned_client"}, S, E.consumer_priority_policy_without_group()),
    ({"priority_policy": "overflow", "priority_groups": ["g"], "deliver_subject": "dx"}, S,
     E.consumer_push_with_priority_group()),
    ({"priority_policy": "overflow", "priority_groups": [""]}, S, E.consumer_empty_group_name()),
    ({"priority_policy": "overflow", "priority_groups": ["a)b"]}, S, E.consumer_invalid_group_name()),
    ({"priority_groups": ["a"]}, S, E.consumer_priority_group_with_policy_none()),
    ({"priority_timeout": 5}, S, E.consumer_pinned_ttl_without_priority_policy_none()),
    ({"ack_policy": "all"}, WQ, E.consumer_wq_requires_explicit_ack()),
    ({"ack_policy": "all", "deliver_subject": "dwq"}, WQ, E.consumer_wq_requires_explicit_ack()),
    ({"ack_policy": "explicit", "deliver_policy": "new"}, WQ, E.consumer_wq_consumer_not_deliver_all()),
    ({"name": "y" * 300}, S, E.consumer_create("error creating store for consumer")),
])
def test_config_errors(config, stream_cfg, err):
    body = {"stream_name": stream_cfg.name, "config": config}
    assert error_of("$JS.API.CONSUMER.CREATE." + stream_cfg.name, body, stream_cfg) == err


def test_config_errors_direct_calls():
    # Not reachable through the create API (the name is forced to the durable's).
    cfg = CF.fill_consumer_defaults(C.ConsumerConfig(durable_name="D", name="X"), S)
    with pytest.raises(E.ApiError) as exc:
        CF.check_consumer_config(cfg, S)
    assert exc.value == E.consumer_create_durable_and_name_mismatch()
    cfg = CF.fill_consumer_defaults(C.ConsumerConfig(durable_name="x" * 300), S)
    with pytest.raises(E.ApiError) as exc:
        CF.check_consumer_config(cfg, S)
    assert exc.value == E.consumer_name_too_long(255)
    cfg = CF.fill_consumer_defaults(C.ConsumerConfig(max_batch=9), S)
    with pytest.raises(E.ApiError) as exc:
        CF.check_consumer_config(cfg, S, server_max_request_batch=5)
    assert exc.value == E.consumer_max_request_batch_exceeded(5)
    # A memory-backed ephemeral can have a long name.
    cfg = CF.fill_consumer_defaults(C.ConsumerConfig(name="y" * 300, mem_storage=True), S)
    assert CF.check_consumer_config(cfg, S).name == "y" * 300


def test_accepted_configs():
    ok = [
        {"filter_subject": "zzz"},                 # not a subset of the stream's subjects: fine
        {"filter_subject": ">"},
        {"deliver_subject": "$JS.API.X"},
        {"max_ack_pending": 100, "ack_policy": "none"},                 # pull: allowed
        {"ack_policy": "flow_control", "deliver_subject": "fc"},
        {"priority_policy": "overflow", "priority_groups": ["a/b=c_d-e"], "priority_timeout": 5},
        {"deliver_policy": "by_start_time", "opt_start_time": "0001-01-01T00:00:00Z"},
        {"description": "\u00e9" * 2048},
        {"direct": True, "deliver_subject": "dx"},
    ]
    for config in ok:
        assert create("$JS.API.CONSUMER.CREATE.S", {"stream_name": "S", "config": config}) is not None


def test_ephemeral_threshold_and_names():
    legacy = create("$JS.API.CONSUMER.CREATE.S", {"stream_name": "S", "config": {}})
    assert legacy.name == "" and legacy.inactive_threshold == 5_000_000_000
    named = create("$JS.API.CONSUMER.CREATE.S", {"stream_name": "S", "config": {"name": "ab"}})
    assert named.name == "ab"
    new = create("$JS.API.CONSUMER.CREATE.S.N7", {"stream_name": "S", "config": {"name": "a.b"}})
    assert new.name == "N7"
    durable = create("$JS.API.CONSUMER.CREATE.S.N5", {"stream_name": "S", "config": {"durable_name": "N5"}})
    assert durable.name == "N5" and durable.inactive_threshold == 0
    assert re.fullmatch(r"[A-Za-z0-9]{8}", CF.new_consumer_name())


def test_existing_consumers():
    subj = "$JS.API.CONSUMER.CREATE.S.E1"
    e1 = create(subj, {"stream_name": "S", "config": {}})
    cons = {"E1": e1}
    # The stored 5s threshold differs from the request's 0: 10148, as nats-server.
    assert error_of(subj, {"stream_name": "S", "config": {}, "action": "create"}, S, cons) == \
        E.consumer_already_exists()
    same = {"stream_name": "S", "config": {"inactive_threshold": 5_000_000_000}, "action": "create"}
    assert create(subj, same, S, cons) == e1
    assert error_of("$JS.API.CONSUMER.CREATE.S.E2", {"stream_name": "S", "config": {}, "action": "update"},
                    S, cons) == E.consumer_does_not_exist()
    # An invalid config is reported before "does not exist".
    assert error_of("$JS.API.CONSUMER.CREATE.S.E2", {"stream_name": "S", "action": "update",
                    "config": {"deliver_subject": "a.*"}}, S, cons) == E.consumer_deliver_to_wildcards()
    upd = create(subj, {"stream_name": "S", "config": {"description": "x"}}, S, cons)
    assert upd.description == "x" and upd.inactive_threshold == 5_000_000_000
    # pause_until of a create-or-update is replaced by the stored one.
    d1 = create("$JS.API.CONSUMER.DURABLE.CREATE.S.D1", {"stream_name": "S", "config": {
        "durable_name": "D1", "metadata": {"a": "b"}}})
    cons["D1"] = d1
    again = create("$JS.API.CONSUMER.DURABLE.CREATE.S.D1", {"stream_name": "S", "action": "create", "config": {
        "durable_name": "D1", "metadata": {"a": "b"}, "pause_until": "2030-01-01T00:00:00Z"}}, S, cons)
    assert again.pause_until is None and again.metadata == {"a": "b", "_nats.req.level": "0"}
    assert error_of("$JS.API.CONSUMER.DURABLE.CREATE.S.D1", {"stream_name": "S", "action": "create", "config": {
        "durable_name": "D1"}}, S, cons) == E.consumer_already_exists()
    assert error_of("$JS.API.CONSUMER.CREATE.S", {"stream_name": "S", "config": {}}, S, cons,
                    max_consumers=2) == E.maximum_consumers_limit()


@pytest.mark.parametrize("old, new, text", [
    ({"deliver_policy": "new"}, {}, "deliver policy can not be updated"),
    ({}, {"mem_storage": True}, "storage type can not be updated"),
    ({}, {"direct": True}, "direct can not be updated"),
    ({}, {"sourcing": True}, "sourcing can not be updated"),
    ({"opt_start_seq": 1}, {}, "start sequence can not be updated"),
    ({"opt_start_time": "2024-01-01T00:00:00Z"}, {}, "start time can not be updated"),
    ({"ack_policy": "explicit"}, {}, "ack policy can not be updated"),
    ({"replay_policy": "original"}, {}, "replay policy can not be updated"),
    ({"idle_heartbeat": 1}, {}, "heart beats can not be updated"),
    ({"flow_control": True}, {}, "flow control can not be updated"),
    ({}, {"deliver_subject": "x"}, "can not update pull consumer to push based"),
    ({"deliver_subject": "x"}, {}, "can not update push consumer to pull based"),
    ({"max_waiting": 512}, {"max_waiting": 3}, "max waiting can not be updated"),
])
def test_update_rules(old, new, text):
    with pytest.raises(E.ApiError) as exc:
        CF.check_consumer_update(C.ConsumerConfig(durable_name="D", **old), C.ConsumerConfig(durable_name="D", **new))
    assert (exc.value.code, exc.value.err_code, exc.value.description) == (500, 10012, text)


def test_update_allowed():
    old = C.ConsumerConfig(durable_name="D", deliver_subject="p1", opt_start_time="2024-01-01T02:00:00+02:00")
    new = C.ConsumerConfig(durable_name="D", deliver_subject="p2", opt_start_time="2024-01-01T00:00:00Z",
                           description="d", max_ack_pending=5, pause_until="2030-01-01T01:00:00+01:00")
    out = CF.check_consumer_update(old, new)
    assert out.deliver_subject == "p2" and out.pause_until == "2030-01-01T00:00:00Z"
    with pytest.raises(E.ApiError) as exc:
        CF.check_consumer_update(old, new, deliver_subject_has_interest=True)
    assert exc.value == E.consumer_name_exist()
    with pytest.raises(E.ApiError) as exc:
        CF.check_consumer_update(old, attrs_evolve(new, backoff=[1, 2, 3], max_deliver=2))
    assert exc.value == E.consumer_max_deliver_backoff()


def attrs_evolve(obj, **kw):
    import attrs
    return attrs.evolve(obj, **kw)


def test_workqueue_partitions():
    cons = {}

    def add(name, config, err=None):
        body = {"stream_name": "WQ", "config": dict(ack_policy="explicit", **config)}
        subj = "$JS.API.CONSUMER.CREATE.WQ." + name
        if err is not None:
            assert error_of(subj, body, WQ, cons) == err
        else:
            cons[name] = create(subj, body, WQ, cons)

    add("W6", {"filter_subject": "zz", "direct": True, "deliver_subject": "dd"})
    add("W0", {})                                          # direct ones are not counted
    add("W1", {}, E.consumer_wq_multiple_unfiltered())
    add("W8", {"filter_subject": "zz"}, E.consumer_wq_consumer_not_unique())   # W0 is unfiltered
    del cons["W0"]
    add("W8", {"filter_subject": "zz"})                    # nor partitioned
    add("W9", {"filter_subject": "wq.f.*"})
    add("W10", {"filter_subject": "wq.*.g"}, E.consumer_wq_consumer_not_unique())
    add("W9", {"filter_subject": "wq.*.g"})                # itself excluded
    add("W11", {"filter_subject": "wq.h", "sourcing": True})
    add("W12", {"filter_subject": "wq.h"})                 # sourcing ones are not partitioned
    add("W13", {"filter_subjects": ["wq.x", "wq.*.g"]}, E.consumer_wq_consumer_not_unique())


# ---------------------------------------------------------------------------
# JSON output
# ---------------------------------------------------------------------------

def test_config_field_order():
    cfg = C.ConsumerConfig(
        durable_name="D", name="D", description="d", deliver_policy="by_start_sequence", opt_start_seq=3,
        ack_policy="explicit", ack_wait=1, max_deliver=4, backoff=[1, 2], filter_subjects=["a", "b"],
        replay_policy="original", rate_limit_bps=8, sample_freq="5%", max_ack_pending=5, flow_control=True,
        headers_only=True, deliver_subject="ds", deliver_group="q", idle_heartbeat=10**9,
        inactive_threshold=7, num_replicas=1, mem_storage=True, direct=True, sourcing=True,
        metadata={"z": "1", "_nats.req.level": "1"}, pause_until="2030-01-01T00:00:00Z",
        priority_groups=["g"], priority_policy="pinned_client", priority_timeout=9)
    assert cfg_json(cfg) == (
        '{"durable_name":"D","name":"D","description":"d","deliver_policy":"by_start_sequence",'
        '"opt_start_seq":3,"ack_policy":"explicit","ack_wait":1,"max_deliver":4,"backoff":[1,2],'
        '"filter_subjects":["a","b"],"replay_policy":"original","rate_limit_bps":8,"sample_freq":"5%",'
        '"max_ack_pending":5,"flow_control":true,"headers_only":true,"deliver_subject":"ds",'
        '"deliver_group":"q","idle_heartbeat":1000000000,"inactive_threshold":7,"num_replicas":1,'
        '"mem_storage":true,"direct":true,"sourcing":true,"metadata":{"_nats.level":"5",'
        '"_nats.req.level":"1","_nats.ver":"2.15.1","z":"1"},"pause_until":"2030-01-01T00:00:00Z",'
        '"priority_groups":["g"],"priority_policy":"pinned_client","priority_timeout":9}')
    pull = C.ConsumerConfig(max_waiting=1, max_batch=2, max_expires=3, max_bytes=4, filter_subject="f",
                            opt_start_time="2024-01-01T00:00:00+01:00", metadata={"_nats.req.level": "0"})
    assert gojson.go_json_dumps(C.consumer_config_json(pull, dynamic=False)) == (
        '{"deliver_policy":"all","opt_start_time":"2024-01-01T00:00:00+01:00","ack_policy":"none",'
        '"filter_subject":"f","replay_policy":"instant","max_waiting":1,"max_batch":2,"max_expires":3,'
        '"max_bytes":4,"num_replicas":0,"metadata":{"_nats.req.level":"0"}}')
    back = C.consumer_config_from_json(json.loads(cfg_json(cfg)))
    assert back == cfg


def test_info_json():
    cfg = create("$JS.API.CONSUMER.CREATE.S", {"stream_name": "S", "config": {
        "priority_policy": "pinned_client", "priority_groups": ["g1"], "pause_until": "2030-01-01T00:00:00Z"}})
    now = gotime.parse_rfc3339("2026-01-01T00:00:00Z")
    info = C.make_consumer_info("S", "QJTf2wo8", cfg, created=now - 5, ts=now,
                                delivered=C.SequenceInfo(1, 2, last_active=now))
    resp = C.ConsumerCreateResponse(info=info)
    assert gojson.go_json_dumps(C.consumer_response_json(resp, **V)) == (
        '{"type":"io.nats.jetstream.api.v1.consumer_create_response","stream_name":"S","name":"QJTf2wo8",'
        '"created":"2025-12-31T23:59:59.999999995Z","config":{"deliver_policy":"all","ack_policy":"none",'
        '"max_deliver":-1,"replay_policy":"instant","max_waiting":512,"inactive_threshold":5000000000,'
        '"num_replicas":0,"metadata":{"_nats.level":"5","_nats.req.level":"1","_nats.ver":"2.15.1"},'
        '"pause_until":"2030-01-01T00:00:00Z","priority_groups":["g1"],"priority_policy":"pinned_client",'
        '"priority_timeout":120000000000},"delivered":{"consumer_seq":1,"stream_seq":2,'
        '"last_active":"2026-01-01T00:00:00Z"},"ack_floor":{"consumer_seq":0,"stream_seq":0},'
        '"num_ack_pending":0,"num_redelivered":0,"num_waiting":0,"num_pending":0,"paused":true,'
        '"pause_remaining":126230400000000000,"ts":"2026-01-01T00:00:00Z",'
        '"priority_groups":[{"group":"g1","pinned_ts":"0001-01-01T00:00:00Z"}]}')
    err = C.ConsumerInfoResponse(error=SM.ApiErrorBody.of(E.consumer_not_found()))
    assert gojson.go_json_dumps(C.consumer_response_json(err)) == (
        '{"type":"io.nats.jetstream.api.v1.consumer_info_response",'
        '"error":{"code":404,"err_code":10014,"description":"consumer not found"}}')


def test_list_names_pause_json():
    assert gojson.go_json_dumps(C.consumer_response_json(C.ConsumerNamesResponse(limit=1024))) == \
        '{"type":"io.nats.jetstream.api.v1.consumer_names_response","total":0,"offset":0,"limit":1024,"consumers":[]}'
    err = C.ConsumerNamesResponse(error=SM.ApiErrorBody.of(E.stream_not_found()))
    assert gojson.go_json_dumps(C.consumer_response_json(err)) == (
        '{"type":"io.nats.jetstream.api.v1.consumer_names_response","error":{"code":404,"err_code":10059,'
        '"description":"stream not found"},"total":0,"offset":0,"limit":0,"consumers":[]}')
    cfg = C.ConsumerConfig(durable_name="D", name="D", metadata={"_nats.req.level": "0"})
    lst = C.ConsumerListResponse(total=1, limit=256, consumers=[C.make_consumer_info("S", "D", cfg, 0, ts=0)])
    out = C.consumer_response_json(lst)
    assert out["consumers"][0]["config"]["metadata"] == {"_nats.req.level": "0"}   # no dynamic keys
    now = gotime.parse_rfc3339("2026-01-01T00:00:00Z")
    pause = C.pause_response("2030-01-01T00:00:00+02:00", now)
    assert gojson.go_json_dumps(C.consumer_response_json(pause)) == (
        '{"type":"io.nats.jetstream.api.v1.consumer_pause_response","paused":true,'
        '"pause_until":"2029-12-31T22:00:00Z","pause_remaining":126223200000000000}')
    assert gojson.go_json_dumps(C.consumer_response_json(C.pause_response(None, now))) == (
        '{"type":"io.nats.jetstream.api.v1.consumer_pause_response","paused":false,'
        '"pause_until":"0001-01-01T00:00:00Z"}')


# ---------------------------------------------------------------------------
# CONSUMER.MSG.NEXT
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("raw, fields", [
    (b"", dict(batch=1)), (b"  ", dict(batch=1)), (None, dict(batch=1)),
    (b" 7 ", dict(batch=7)), (b"-3", dict(batch=-3)), (b"+5", dict(batch=5)),
    (b"abc", dict(batch=1)), (b"1.5", dict(batch=1)), (b"[1]", dict(batch=1)), (b"0x10", dict(batch=1)),
    (b"99999999999999999999", dict(batch=1)),
    (b"{}", dict(batch=0, priority_group=True)),
    (b'\x0b{"batch":9}\xc2\xa0', dict(batch=9, priority_group=True)),
    (b'{"Batch":7,"bogus":{"deep":[1,2]}}', dict(batch=7, priority_group=True)),
    (b'{"batch":7,"batch":1}', dict(batch=1, priority_group=True)),
    (b'{"batch":null,"expires":-5,"no_wait":true}', dict(expires=-5, no_wait=True, priority_group=True)),
    (b'{"expires":4000000000,"idle_heartbeat":2000000000,"max_bytes":3,"group":"g","min_pending":1,'
     b'"min_ack_pending":2,"id":"x","priority":3}',
     dict(expires=4 * 10**9, idle_heartbeat=2 * 10**9, max_bytes=3, group="g", min_pending=1,
          min_ack_pending=2, id="x", priority=3, priority_group=True)),
    (b'{"PriorityGroup":{"group":"x"}}', dict(priority_group=True)),
])
def test_next_request(raw, fields):
    assert CR.parse_next_request(raw) == C.NextRequest(**fields)


@pytest.mark.parametrize("raw, description", [
    (b"{bad", "invalid character 'b' looking for beginning of object key string"),
    (b'{"batch":"x"}', "json: cannot unmarshal string into Go struct field .batch of type int"),
    (b'{"batch":1.5}', "json: cannot unmarshal number 1.5 into Go struct field .batch of type int"),
    (b'{"group":5}', "json: cannot unmarshal number into Go struct field .group of type string"),
    (b'{"batch":"x","min_pending":"y"}', "json: cannot unmarshal string into Go struct field .batch of type int"),
    (b'{"expires":"1s"}', "json: cannot unmarshal string into Go struct field .expires of type time.Duration"),
    (b'{"batch":7} x', "invalid character 'x' after top-level value"),
    (b'{"batch":2}{"batch":7}', "invalid character '{' after top-level value"),
    (b'{"batch":7', "unexpected end of JSON input"),
    (b'{"batch":7,}', "invalid character '}' looking for beginning of object key string"),
    (b'{"group":"\\x"}', "invalid escape sequence `\\x` in string"),
    (b'{"group":"a\nb"}', "invalid character '\\n' in string"),
    (b'{\xff}', "invalid character '\\xff' looking for beginning of object key string"),
    (b'{"expires":1000,"idle_heartbeat":1000}', "heartbeat value too large"),
    (b'{"idle_heartbeat":1}', "heartbeat value too large"),
])
def test_next_request_errors(raw, description):
    with pytest.raises(CR.NextRequestError) as exc:
        CR.parse_next_request(raw)
    assert (exc.value.status, exc.value.description) == (400, "Bad Request - " + description)
    assert exc.value.header == ("NATS/1.0 400 Bad Request - %s\r\n\r\n" % description).encode()


def test_next_request_config_checks():
    cfg = C.ConsumerConfig(max_batch=5, max_bytes=100, max_expires=10**9)
    check = CR.next_request_error
    P = CR.parse_next_request
    assert check(P(b"5"), cfg) is None
    assert check(P(b"7"), cfg) == CR.NextRequestError(409, "Exceeded MaxRequestBatch of 5")
    assert check(P(b'{"expires":2000000000}'), cfg) == CR.NextRequestError(409, "Exceeded MaxRequestExpires of 1s")
    assert check(P(b'{"max_bytes":1000}'), cfg) == CR.NextRequestError(409, "Exceeded MaxRequestMaxBytes of 100")
    assert check(P(b'{"min_pending":3}'), cfg) == CR.NextRequestError(
        400, "Bad Request - Not a Overflow Priority consumer")
    assert check(P(b'{"id":"x"}'), cfg) == CR.NextRequestError(
        400, "Bad Request - Not a Pinned Client Priority consumer")
    assert check(P(b'{"priority":10}'), cfg) == CR.NextRequestError(
        400, "Bad Request - Priority must be between 0 and 9")
    pinned = C.ConsumerConfig(priority_policy="pinned_client", priority_groups=["g"])
    assert check(P(b"{}"), pinned) == CR.NextRequestError(400, "Bad Request - Priority Group missing")
    assert check(P(b'{"group":"h"}'), pinned) == CR.NextRequestError(400, "Bad Request - Invalid Priority Group")
    assert check(P(b'{"group":"g","id":"x"}'), pinned) is None
    assert check(P(b""), pinned) is None                    # not JSON: no priority checks
    assert check(P(b""), C.ConsumerConfig(deliver_subject="d")) == CR.NextRequestError(409, "Consumer is push based")


# ---------------------------------------------------------------------------
# Differential: the same requests against nats-server
# ---------------------------------------------------------------------------

DIFF_STREAMS = [
    {"name": "S", "subjects": ["s.>", "t.*"]},
    {"name": "WQ", "subjects": ["wq.>"], "retention": "workqueue"},
    {"name": "LIM", "subjects": ["lim.>"], "consumer_limits": {"inactive_threshold": 10_000_000_000,
                                                                "max_ack_pending": 50}},
    {"name": "MEM", "subjects": ["mem.>"], "storage": "memory"},
]

CC, CD = "$JS.API.CONSUMER.CREATE.", "$JS.API.CONSUMER.DURABLE.CREATE."


def _c(config, stream="S", **extra):
    return json.dumps(dict({"stream_name": stream, "config": config}, **extra))


DIFF_CASES = [
    # request level
    (CC + "S", ""),
    (CC + "S", "{bad"),
    (CC + "S", '{"stream_name":"S","config":{"bogus":1}}'),
    (CC + "S", '{"stream_name":"S","config":{"deliver_policy":"bogus"}}'),
    (CC + "S", '{"stream_name":"S","config":{"priority_policy":"x"}}'),
    (CC + "S", '{"stream_name":"S","action":5,"config":{}}'),
    (CC + "S", '{"stream_name":"S","config":{"backoff":[1,"x"]}}'),
    (CC + "NOPE", _c({}, "NOPE")),
    (CC + "NOPE", _c({"num_replicas": 3}, "NOPE")),
    (CC + "S", _c({"durable_name": "D1"})),
    (CD + "S.D2", _c({})),
    (CD + "S.D2", _c({"durable_name": "E"})),
    (CD + "S.D\\2", _c({"durable_name": "D\\2"})),
    (CC + "S.N", _c({"durable_name": "M"})),
    (CC + "S.N3.s.a", _c({"filter_subjects": ["s.a"]})),
    (CC + "S.N3.s.a", _c({"filter_subject": "s.b"})),
    (CD + "S", _c({})),                                   # no reply
    # successes: pull/push, ephemeral/durable, all APIs
    (CC + "S", _c({})),
    (CC + "S", _c({"name": "ab", "ack_policy": "explicit", "backoff": [10**9, 2 * 10**9], "max_deliver": 3})),
    (CD + "S.D2", _c({"durable_name": "D2", "name": "X", "ack_policy": "all"})),
    (CC + "S.N1", _c({"deliver_subject": "x.y", "idle_heartbeat": -5})),
    (CC + "S.N2.s.a", _c({"filter_subject": "s.a", "ack_policy": "explicit"})),
    (CC + "S.N4", _c({"durable_name": "N4", "deliver_subject": "dx", "flow_control": True,
                      "idle_heartbeat": 10**9, "rate_limit_bps": 100, "headers_only": True, "deliver_group": "q",
                      "ack_policy": "all", "sample_freq": "50%", "description": "hello", "metadata": {"k": "v"}})),
    (CC + "S", _c({"max_expires": 2_000_000, "max_batch": 10, "max_bytes": 1000, "max_waiting": 7,
                   "filter_subjects": ["s.a", "t.b"], "mem_storage": True, "num_replicas": 1})),
    (CC + "S", _c({"deliver_policy": "by_start_time", "opt_start_time": "2024-01-01T02:00:00.123+02:00",
                   "replay_policy": "original", "max_ack_pending": -5})),
    (CC + "S", _c({"ack_policy": "flow_control", "deliver_subject": "fc.x"})),
    (CC + "S", _c({"priority_policy": "pinned_client", "priority_groups": ["g1"]})),
    (CC + "S", _c({"pause_until": "2030-01-01T00:00:00+01:00", "name": "pz"})),
    (CC + "LIM", _c({}, "LIM")),
    (CC + "MEM", _c({"name": "m" * 300}, "MEM")),
    # config errors
    (CC + "S", _c({"name": "a.b"})),
    (CC + "S", _c({"deliver_subject": "s.x"})),
    (CC + "S", _c({"deliver_subject": "dx", "max_ack_pending": 5})),
    (CC + "S", _c({"idle_heartbeat": 10**9})),
    (CC + "S", _c({"filter_subjects": ["s.a", "s.*"]})),
    (CC + "S", _c({"deliver_policy": "last_per_subject"})),
    (CC + "S", _c({"sample_freq": "-5%"})),
    (CC + "S", _c({"priority_groups": ["a"]})),
    (CC + "S", _c({"max_waiting": -3}, pedantic=True)),
    (CC + "S", _c({"ack_policy": "flow_control", "deliver_subject": "fc", "idle_heartbeat": 2 * 10**9,
                   "flow_control": True}, pedantic=True)),
    (CC + "LIM", _c({"ack_policy": "explicit", "inactive_threshold": 10_000_000_001}, "LIM")),
    (CC + "S", _c({"name": "y" * 300})),
    # workqueue and existing consumers
    (CC + "WQ", _c({}, "WQ")),
    (CC + "WQ.W1", _c({"ack_policy": "explicit", "filter_subject": "wq.a"}, "WQ")),
    (CC + "WQ.W2", _c({"ack_policy": "all", "filter_subject": "wq.b"}, "WQ", action="update")),
    (CC + "WQ.W2", _c({"ack_policy": "all", "filter_subject": "wq.b"}, "WQ")),
    (CC + "WQ.W2", _c({"ack_policy": "explicit", "filter_subject": "wq.*"}, "WQ")),
    (CC + "WQ.W2", _c({"ack_policy": "explicit"}, "WQ")),
    (CC + "WQ.W2", _c({"ack_policy": "explicit", "filter_subject": "wq.b"}, "WQ")),
    (CC + "S.N1", _c({"deliver_subject": "x.y"}, action="create")),
    (CC + "S.N1", _c({"deliver_subject": "x.z", "description": "moved"})),
    (CD + "S.D2", _c({"durable_name": "D2", "ack_policy": "explicit"})),
    (CD + "S.D2", _c({"durable_name": "D2", "ack_policy": "all", "max_waiting": 3})),
    (CD + "S.D2", _c({"durable_name": "D2", "ack_policy": "all", "description": "d", "max_deliver": 4,
                      "pause_until": "2031-01-01T00:00:00Z"})),
    (CD + "S.D2", _c({"durable_name": "D2", "ack_policy": "all", "description": "d", "max_deliver": 4},
                     action="create")),
    (CD + "S.D2", _c({"durable_name": "D2", "ack_policy": "all"}, action="create")),
]

TS_RE = re.compile(r'"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z)"')


def _normalise(value):
    """Drop the version metadata (each server names its own) and timestamps."""
    text = TS_RE.sub(lambda m: '"TS0"' if m.group(1).startswith("0001-") else '"TS"', json.dumps(value))
    value = json.loads(text)

    def walk(v):
        if isinstance(v, dict):
            for k in list(v):
                if k == "metadata" and isinstance(v[k], dict):
                    v[k] = {mk: mv for mk, mv in v[k].items() if mk not in ("_nats.ver", "_nats.level")}
                else:
                    walk(v[k])
        elif isinstance(v, list):
            for x in v:
                walk(x)
    walk(value)
    return value


def _expected(subject, body, streams, consumers):
    where = CF.parse_create_subject(subject)
    if where is None:
        return None, None
    try:
        cfg = CF.process_consumer_create(subject, body.encode(), streams.get(where[0]),
                                        consumers.setdefault(where[0], {}))
    except E.ApiError as e:
        return ("error", e.to_json()), None
    return ("config", _normalise(C.consumer_config_json(cfg))), cfg


@pytest.fixture(scope="module")
def reference_replies():
    async def run(server):
        nc = await nats.connect(server.url)
        out = []
        try:
            for body in DIFF_STREAMS:
                await nc.request("$JS.API.STREAM.CREATE." + body["name"], json.dumps(body).encode(), timeout=10)
            for subject, body in DIFF_CASES:
                try:
                    timeout = 10 if CF.parse_create_subject(subject) else 0.25   # no reply expected
                    msg = await nc.request(subject, body.encode(), timeout=timeout)
                    out.append(json.loads(msg.data))
                except nats.errors.TimeoutError:
                    out.append(None)
            # One full reply, for the info part: a fresh durable.
            msg = await nc.request(CD + "S.FULL", _c({"durable_name": "FULL", "ack_policy": "explicit"}).encode(),
                                   timeout=10)
            full = msg.data
            info = (await nc.request("$JS.API.CONSUMER.INFO.S.FULL", b"", timeout=10)).data
            pause = (await nc.request("$JS.API.CONSUMER.PAUSE.S.FULL",
                                      b'{"pause_until":"2001-01-01T02:00:00+02:00"}', timeout=10)).data
        finally:
            await nc.close()
        return out, full, info, pause

    with tempfile.TemporaryDirectory() as tmp:
        with ServerProcess("nats-server", ["-js", "-sd", tmp]) as server:
            return asyncio.run(run(server))


def test_differential_create(reference_replies):
    replies = reference_replies[0]
    streams = {b["name"]: SC.fill_defaults(SC.parse_stream_config(json.dumps(b).encode(), b["name"]))
               for b in DIFF_STREAMS}
    consumers = {}
    mismatches = []
    for (subject, body), reply in zip(DIFF_CASES, replies):
        expected, cfg = _expected(subject, body, streams, consumers)
        if reply is None:
            got = None
        elif "error" in reply:
            got = ("error", reply["error"])
        else:
            got = ("config", _normalise(reply["config"]))
            consumers[CF.parse_create_subject(subject)[0]][reply["name"]] = cfg
        if got != expected:
            mismatches.append((subject, body, got, expected))
    assert not mismatches, "\n".join("%s %s\n  nats-server: %s\n  ours:        %s" % m for m in mismatches)
    assert len(DIFF_CASES) >= 40


def test_differential_info_and_pause(reference_replies):
    _, full, info, pause = reference_replies
    cfg = create(CD + "S.FULL", _c({"durable_name": "FULL", "ack_policy": "explicit"}))

    def ours(resp):
        return _normalise(json.loads(gojson.go_json_dumps(C.consumer_response_json(resp))))

    def theirs(raw):
        return _normalise(json.loads(raw))

    base = C.make_consumer_info("S", "FULL", cfg, created=1, ts=2)
    assert json.dumps(theirs(full)) == json.dumps(ours(C.ConsumerCreateResponse(info=base)))
    assert json.dumps(theirs(info)) == json.dumps(ours(C.ConsumerInfoResponse(info=base)))
    assert json.dumps(theirs(pause)) == json.dumps(ours(C.pause_response(
        CR.parse_pause_request(b'{"pause_until":"2001-01-01T02:00:00+02:00"}').pause_until)))
