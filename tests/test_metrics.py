"""``/metrics``: prometheus-nats-exporter's series, served by the broker itself.

A real natsbroker (``-m -1 -js``) gets a stream, a durable pull consumer and
some traffic from nats-py; the scrape is parsed with prometheus-client's own
parser and its names, types, labels and values are checked against the JSON
endpoints the exporter would have read them from (/varz, /jsz, /connz ...).
"""

import asyncio
import gzip
import time

import nats
import pytest
from prometheus_client import exposition
from prometheus_client.parser import text_string_to_metric_families

from natsbroker.monitoring import prometheus as metrics
from tests.support.clients import flushed
from tests.support.http import get_json, http
from tests.support.servers import ServerProcess
from tests.support.wait import eventually

STREAM, SUBJECT, DURABLE = "ORDERS", "orders.new", "shipping"
STORED, FETCHED, ACKED = 7, 4, 3
CORE_PUBS = 5

SERVER_LABELS = {"server_id", "server_name", "cluster", "domain", "meta_leader",
                 "is_meta_leader"}
ACCOUNT_LABELS = SERVER_LABELS | {"account", "account_name", "account_id"}
STREAM_LABELS = ACCOUNT_LABELS | {"stream_name", "stream_leader", "is_stream_leader",
                                  "stream_raft_group"}
CONSUMER_LABELS = STREAM_LABELS | {"consumer_name", "consumer_leader", "is_consumer_leader",
                                   "consumer_desc"}

# Series the exporter (all collectors, -jsz=all) publishes, that must be here,
# with the labels it gives them.
EXPECTED = {
    "gnatsd_varz_in_msgs": {"server_id"},
    "gnatsd_varz_out_msgs": {"server_id"},
    "gnatsd_varz_in_bytes": {"server_id"},
    "gnatsd_varz_connections": {"server_id"},
    "gnatsd_varz_subscriptions": {"server_id"},
    "gnatsd_varz_mem": {"server_id"},
    "gnatsd_varz_cpu": {"server_id"},
    "gnatsd_varz_slow_consumers": {"server_id"},
    "gnatsd_varz_start": {"server_id"},
    "gnatsd_varz_config_load_time": {"server_id"},
    "gnatsd_varz_version": {"server_id", "value"},
    "gnatsd_varz_server_name": {"server_id", "value"},
    "gnatsd_varz_jetstream_stats_storage": {"server_id"},
    "gnatsd_varz_jetstream_stats_api_total": {"server_id"},
    "gnatsd_varz_slow_consumer_stats_clients": {"server_id"},
    "gnatsd_varz_http_req_stats_metrics": {"server_id"},
    "gnatsd_subsz_num_subscriptions": {"server_id"},
    "gnatsd_connz_num_connections": {"server_id"},
    "gnatsd_connz_total": {"server_id"},
    "gnatsd_connz_offset": {"server_id"},
    "gnatsd_connz_limit": {"server_id"},
    "gnatsd_connz_pending_bytes": {"server_id"},
    "gnatsd_connz_subscriptions": {"server_id"},
    "gnatsd_connz_in_msgs": {"server_id"},
    "gnatsd_connz_out_msgs": {"server_id"},
    "gnatsd_connz_in_bytes": {"server_id"},
    "gnatsd_connz_out_bytes": {"server_id"},
    "gnatsd_routez_num_routes": {"server_id"},
    "gnatsd_routez_server_id": {"server_id", "value"},
    "gnatsd_routez_server_name": {"server_id", "value"},
    "gnatsd_leafz_conn_nodes_total": {"server_id"},
    "gnatsd_healthz_status": {"server_id"},
    "gnatsd_healthz_status_value": {"server_id", "value"},
    "gnatsd_healthz_js_enabled_only_status": {"server_id"},
    "gnatsd_healthz_js_server_only_status_value": {"server_id", "value"},
    "gnatsd_accstatz_current_connections": {"server_id", "account", "account_id",
                                            "account_name"},
    "gnatsd_accstatz_received_messages": {"server_id", "account", "account_id",
                                          "account_name"},
    "gnatsd_accstatz_sent_bytes": {"server_id", "account", "account_id", "account_name"},
    "gnatsd_accountz_jetstream_enabled": {"server_id", "account_id", "account_name"},
    "gnatsd_accountz_limit_conn": {"server_id", "account_id", "account_name"},
    "jetstream_server_jetstream_disabled": SERVER_LABELS,
    "jetstream_server_total_streams": SERVER_LABELS,
    "jetstream_server_total_consumers": SERVER_LABELS,
    "jetstream_server_total_messages": SERVER_LABELS,
    "jetstream_server_total_message_bytes": SERVER_LABELS,
    "jetstream_server_max_memory": SERVER_LABELS,
    "jetstream_server_max_storage": SERVER_LABELS,
    "jetstream_account_max_memory": ACCOUNT_LABELS,
    "jetstream_account_max_storage": ACCOUNT_LABELS,
    "jetstream_account_storage_used": ACCOUNT_LABELS,
    "jetstream_account_memory_used": ACCOUNT_LABELS,
    "jetstream_stream_total_messages": STREAM_LABELS,
    "jetstream_stream_total_bytes": STREAM_LABELS,
    "jetstream_stream_first_seq": STREAM_LABELS,
    "jetstream_stream_last_seq": STREAM_LABELS,
    "jetstream_stream_consumer_count": STREAM_LABELS,
    "jetstream_stream_subject_count": STREAM_LABELS,
    "jetstream_stream_limit_bytes": STREAM_LABELS,
    "jetstream_stream_limit_messages": STREAM_LABELS,
    "jetstream_consumer_delivered_consumer_seq": CONSUMER_LABELS,
    "jetstream_consumer_delivered_stream_seq": CONSUMER_LABELS,
    "jetstream_consumer_num_ack_pending": CONSUMER_LABELS,
    "jetstream_consumer_num_redelivered": CONSUMER_LABELS,
    "jetstream_consumer_num_waiting": CONSUMER_LABELS,
    "jetstream_consumer_num_pending": CONSUMER_LABELS,
    "jetstream_consumer_ack_floor_stream_seq": CONSUMER_LABELS,
    "jetstream_consumer_ack_floor_consumer_seq": CONSUMER_LABELS,
    "jetstream_consumer_last_delivery_seconds": CONSUMER_LABELS,
    "jetstream_consumer_last_ack_seconds": CONSUMER_LABELS,
}


# -- helpers ----------------------------------------------------------------------

def scrape(server, path="/metrics", headers=None):
    """``({name: family}, headers)`` of a scrape, parsed by prometheus-client."""
    status, hdrs, body = http(server, path, headers)
    assert status == 200, (status, body)
    families = {f.name: f for f in text_string_to_metric_families(body.decode("utf-8"))}
    return families, hdrs


def value(families, name, **labels):
    """The one sample of ``name`` whose labels include ``labels``."""
    found = [s for s in families[name].samples
             if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (name, labels, families[name].samples)
    return found[0].value


# -- one broker with JetStream, a stream, a consumer and traffic --------------------

@pytest.fixture(scope="module")
def loaded():
    with ServerProcess("natsbroker", ["-m", "-1", "-js"]) as server:
        asyncio.run(_load(server))
        yield server


async def _load(server):
    nc = await nats.connect(server.url)
    try:
        js = nc.jetstream()
        await js.add_stream(name=STREAM, subjects=["orders.>"])
        for i in range(STORED):
            await js.publish(SUBJECT, b"order %d" % i)
        sub = await js.pull_subscribe("orders.>", durable=DURABLE)
        msgs = await sub.fetch(FETCHED, timeout=10)
        assert len(msgs) == FETCHED
        for m in msgs[:ACKED]:
            await m.ack_sync(timeout=10)
        await nc.subscribe("core.>")
        await flushed(nc)
    finally:
        await nc.close()


async def _publish_core(server, n):
    nc = await nats.connect(server.url)
    try:
        for i in range(n):
            await nc.publish("core.x", b"hello")
        await flushed(nc)
    finally:
        await nc.close()


def test_content_type_and_types(loaded):
    families, headers = scrape(loaded)
    # prometheus-client's text format, chosen as its own handlers choose it.
    assert headers["content-type"] == exposition.CONTENT_TYPE_PLAIN_0_0_4
    for name, labels in EXPECTED.items():
        assert name in families, name
        fam = families[name]
        assert fam.type == "gauge", (name, fam.type)
        assert fam.samples, name
        for s in fam.samples:
            assert set(s.labels) == labels, (name, s.labels)
    # The exporter's help texts.
    assert families["jetstream_stream_total_messages"].documentation == \
        "Total number of messages from a stream"
    assert families["gnatsd_varz_in_msgs"].documentation == "in_msgs"
    # The process's own series, from prometheus-client's process collector.
    assert families["process_cpu_seconds"].type == "counter"
    assert "process_resident_memory_bytes" in families
    # Nothing that is not the exporter's (or the process collector's) namespace.
    assert all(n.startswith(("gnatsd_", "jetstream_", "process_")) for n in families), \
        sorted(n for n in families if not n.startswith(("gnatsd_", "jetstream_", "process_")))


def test_varz_values(loaded):
    before = get_json(loaded, "/varz")
    asyncio.run(_publish_core(loaded, CORE_PUBS))
    families, _ = scrape(loaded)
    varz = get_json(loaded, "/varz")
    sid = varz["server_id"]
    assert value(families, "gnatsd_varz_in_msgs", server_id=sid) == \
        before["in_msgs"] + CORE_PUBS == varz["in_msgs"]
    assert value(families, "gnatsd_varz_in_bytes", server_id=sid) == \
        before["in_bytes"] + CORE_PUBS * len(b"hello") == varz["in_bytes"]
    assert value(families, "gnatsd_varz_out_msgs", server_id=sid) == varz["out_msgs"]
    assert value(families, "gnatsd_varz_total_connections", server_id=sid) == \
        varz["total_connections"]
    assert value(families, "gnatsd_varz_max_payload", server_id=sid) == varz["max_payload"]
    assert value(families, "gnatsd_varz_jetstream_stats_api_total", server_id=sid) == \
        varz["jetstream"]["stats"]["api"]["total"]
    # Strings the exporter keeps: a gauge of 1 with the text as "value".
    assert value(families, "gnatsd_varz_version", value=varz["version"]) == 1
    assert value(families, "gnatsd_varz_server_id", value=sid) == 1
    # Times: epoch milliseconds.
    start = metrics._epoch(varz["start"])
    assert value(families, "gnatsd_varz_start", server_id=sid) == int(start * 1000)
    assert abs(start - time.time()) < 3600
    # /metrics counts itself in http_req_stats, as every endpoint does.
    assert value(families, "gnatsd_varz_http_req_stats_metrics") >= 1
    # Booleans and arrays are not exported, "leaf" is skipped, "now" is no label key.
    assert "gnatsd_varz_now" not in families
    assert not any(n.startswith("gnatsd_varz_leaf_") for n in families)


def test_connz_accstatz_healthz_routez(loaded):
    eventually(lambda: get_json(loaded, "/connz")["num_connections"] == 0, timeout=30)

    async def scrape_while_connected():
        nc = await nats.connect(loaded.url, name="watcher")
        try:
            await nc.publish("core.y", b"abc")
            await flushed(nc)
            return (await asyncio.to_thread(scrape, loaded),
                    await asyncio.to_thread(get_json, loaded, "/connz"),
                    await asyncio.to_thread(get_json, loaded, "/accstatz?unused=1"))
        finally:
            await nc.close()
    (families, _), connz, accstatz = asyncio.run(scrape_while_connected())
    sid = connz["server_id"]
    assert value(families, "gnatsd_connz_num_connections", server_id=sid) == \
        connz["num_connections"] == 1
    assert value(families, "gnatsd_connz_total") == connz["total"]
    assert value(families, "gnatsd_connz_limit") == 1024
    assert value(families, "gnatsd_connz_in_msgs") == 1
    assert value(families, "gnatsd_connz_in_bytes") == 3
    assert value(families, "gnatsd_connz_subscriptions") == \
        sum(c["subscriptions"] for c in connz["connections"])
    g = [a for a in accstatz["account_statz"] if a["acc"] == "$G"][0]
    assert value(families, "gnatsd_accstatz_current_connections", account="$G") == 1
    assert value(families, "gnatsd_accstatz_received_messages", account="$G",
                 account_id="$G", account_name="$G") == g["received"]["msgs"]
    assert value(families, "gnatsd_accountz_is_system", account_id="$SYS") == 1
    assert value(families, "gnatsd_accountz_jetstream_enabled", account_id="$G") == 1
    # healthz: 0 when ok (the exporter's convention), and the status as a label.
    for endpoint in ("healthz", "healthz_js_enabled_only", "healthz_js_server_only"):
        assert value(families, "gnatsd_%s_status" % endpoint, server_id=sid) == 0
        assert value(families, "gnatsd_%s_status_value" % endpoint, value="ok") == 1
    routez = get_json(loaded, "/routez")
    assert value(families, "gnatsd_routez_num_routes") == routez["num_routes"]
    assert value(families, "gnatsd_routez_server_name", value=routez["server_name"]) == 1


def test_jetstream_values(loaded):
    families, _ = scrape(loaded)
    jsz = get_json(loaded, "/jsz?consumers=true&config=true")
    varz = get_json(loaded, "/varz")
    sid, name = varz["server_id"], varz["server_name"]
    srv = dict(server_id=sid, server_name=name, cluster="", domain="", meta_leader="",
               is_meta_leader="true")
    assert value(families, "jetstream_server_jetstream_disabled", **srv) == 0
    assert value(families, "jetstream_server_total_streams", **srv) == 1
    assert value(families, "jetstream_server_total_consumers", **srv) == 1
    assert value(families, "jetstream_server_total_messages", **srv) == STORED == jsz["messages"]
    assert value(families, "jetstream_server_total_message_bytes", **srv) == jsz["bytes"]
    assert value(families, "jetstream_server_max_storage", **srv) == jsz["config"]["max_storage"]

    acc = jsz["account_details"][0]
    assert value(families, "jetstream_account_storage_used", account="$G",
                 account_name="$G", account_id=acc["id"]) == acc["storage"]
    assert value(families, "jetstream_account_max_storage", account="$G") == \
        float(acc["reserved_storage"])

    st = acc["stream_detail"][0]
    labels = dict(srv, account="$G", stream_name=STREAM, stream_leader=name,
                  is_stream_leader="true", stream_raft_group="")
    assert value(families, "jetstream_stream_total_messages", **labels) == STORED
    assert value(families, "jetstream_stream_total_bytes", **labels) == st["state"]["bytes"]
    assert value(families, "jetstream_stream_first_seq", **labels) == 1
    assert value(families, "jetstream_stream_last_seq", **labels) == STORED
    assert value(families, "jetstream_stream_consumer_count", **labels) == 1
    assert value(families, "jetstream_stream_subject_count", **labels) == 1
    assert value(families, "jetstream_stream_limit_messages", **labels) == -1
    assert value(families, "jetstream_stream_limit_bytes", **labels) == -1

    c = st["consumer_detail"][0]
    cl = dict(stream_name=STREAM, consumer_name=DURABLE, consumer_desc="")
    assert value(families, "jetstream_consumer_delivered_consumer_seq", **cl) == FETCHED
    assert value(families, "jetstream_consumer_delivered_stream_seq", **cl) == FETCHED
    assert value(families, "jetstream_consumer_ack_floor_stream_seq", **cl) == ACKED
    assert value(families, "jetstream_consumer_ack_floor_consumer_seq", **cl) == ACKED
    assert value(families, "jetstream_consumer_num_ack_pending", **cl) == FETCHED - ACKED
    assert value(families, "jetstream_consumer_num_pending", **cl) == STORED - FETCHED
    assert value(families, "jetstream_consumer_num_redelivered", **cl) == c["num_redelivered"]
    assert value(families, "jetstream_consumer_num_waiting", **cl) == c["num_waiting"]
    assert 0 <= value(families, "jetstream_consumer_last_delivery_seconds", **cl) < 600
    assert 0 <= value(families, "jetstream_consumer_last_ack_seconds", **cl) < 600


def test_negotiation_and_gzip(loaded):
    # OpenMetrics when asked for, as prometheus-client's handlers answer.
    status, headers, body = http(loaded, "/metrics",
                                 {"Accept": "application/openmetrics-text; version=1.0.0"})
    assert status == 200
    assert headers["content-type"].startswith("application/openmetrics-text")
    assert body.endswith(b"# EOF\n")
    # gzip when accepted.
    status, headers, body = http(loaded, "/metrics", {"Accept-Encoding": "gzip"})
    assert headers.get("content-encoding") == "gzip"
    families = {f.name for f in text_string_to_metric_families(gzip.decompress(body).decode())}
    assert "gnatsd_varz_in_msgs" in families


def test_without_jetstream():
    with ServerProcess("natsbroker", ["-m", "-1"]) as server:
        families, _ = scrape(server)
        jsz = get_json(server, "/jsz")
        assert jsz["disabled"] is True
        assert value(families, "jetstream_server_jetstream_disabled") == 1
        assert value(families, "jetstream_server_total_streams") == 0
        assert not any(n.startswith(("jetstream_stream_", "jetstream_consumer_",
                                     "jetstream_account_")) for n in families)
        assert value(families, "gnatsd_healthz_status") == 0
        assert value(families, "gnatsd_connz_num_connections") == 0


# -- the conversions the exporter makes (pure functions) ---------------------------

def test_flatten_like_the_generic_collector():
    doc = {"server_id": "S", "in_msgs": 3, "auth_required": True, "host": "0.0.0.0",
           "http_req_stats": {"/varz": 2, "/": 1}, "leaf": {"port": 7422},
           "cluster": {"name": "east", "cluster_port": 6222, "urls": ["a"]},
           "jetstream": {"meta": {"leader": "n1"}}, "start": "2026-09-03T04:40:02.188Z",
           "now": "2026-09-03T04:40:02.188Z"}
    got = {name: (labels, samples) for name, _, labels, samples in
           metrics._flatten(doc, "gnatsd_varz", "ID")}
    assert got == {
        "gnatsd_varz_server_id": (["server_id", "value"], [(["ID", "S"], 1)]),
        "gnatsd_varz_in_msgs": (["server_id"], [(["ID"], 3)]),
        "gnatsd_varz_http_req_stats_varz": (["server_id"], [(["ID"], 2)]),
        "gnatsd_varz_http_req_stats": (["server_id"], [(["ID"], 1)]),
        "gnatsd_varz_cluster_name": (["server_id", "value"], [(["ID", "east"], 1)]),
        "gnatsd_varz_jetstream_meta_leader": (["server_id", "value"], [(["ID", "n1"], 1)]),
        "gnatsd_varz_start": (["server_id"], [(["ID"], 1788410402188)]),
    }


def test_durations():
    assert metrics._go_duration("1.5ms") == pytest.approx(0.0015)
    assert metrics._go_duration("2h3m4s") == 7384
    assert metrics._go_duration("120\u00b5s") == pytest.approx(0.00012)
    assert metrics._go_duration("0") == 0
    assert metrics._go_duration("1d") is None
    assert metrics._uptime("1y2d3h4m5s") == ((367 * 24 + 3) * 60 + 4) * 60 + 5
    assert metrics._uptime("7d13h49m13s") == ((7 * 24 + 13) * 60 + 49) * 60 + 13
    assert metrics._epoch_ms("2026-09-03T06:40:02.1889+02:00") == 1788410402188


def test_route_series():
    """routez.go's per-route series, from a /routez document with one route
    (nats-server's RouteInfo shape)."""
    route = {"rid": 7, "remote_id": "NREMOTE", "remote_name": "n2", "ip": "127.0.0.1",
             "rtt": "1.5ms", "uptime": "1h2m3s", "in_msgs": 4, "out_msgs": 5, "in_bytes": 40,
             "out_bytes": 50, "subscriptions": 3, "compression": "off"}
    scrape = metrics.Scrape(
        server_id="ID", varz={}, subsz={}, connz={}, leafz={}, healthz={}, accstatz={},
        accounts=[], jsz={"disabled": True},
        routez={"server_id": "ID", "server_name": "n1", "num_routes": 1, "routes": [route]})
    fams = {f.name: f for f in metrics.NatsCollector(scrape).collect()}
    assert fams["gnatsd_routez_num_routes"].samples[0].value == 1
    info = fams["gnatsd_routez_route_info"].samples[0]
    assert info.labels == {"server_id": "ID", "rid": "7", "remote_id": "NREMOTE",
                           "remote_name": "n2", "account": "", "ip": "127.0.0.1",
                           "compression": "off"}
    assert fams["gnatsd_routez_route_rtt_seconds"].samples[0].value == pytest.approx(0.0015)
    assert fams["gnatsd_routez_route_uptime_seconds"].samples[0].value == 3723
    for k, v in (("in_msgs", 4), ("out_msgs", 5), ("in_bytes", 40), ("out_bytes", 50),
                 ("subscriptions", 3)):
        s = fams["gnatsd_routez_route_" + k].samples[0]
        assert (s.labels, s.value) == ({"server_id": "ID", "rid": "7"}, v)
