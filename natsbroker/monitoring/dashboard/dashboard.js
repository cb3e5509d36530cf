// The live view of /dashboard: polls ./varz and ./jsz, keeps the last WINDOW
// samples and redraws the uPlot charts. Everything it knows is exposed as
// window.natsDashboard (the samples, the counts, the last error), so tools and
// tests read the same numbers the charts draw.
(function () {
  "use strict";

  var params = new URLSearchParams(window.location.search);
  var INTERVAL = Math.min(Math.max(Number(params.get("interval")) || 1000, 200), 60000);
  var TIMEOUT = Math.max(INTERVAL, 5000);
  var WINDOW = 300;

  var SERIES = ["time", "msgs_in", "msgs_out", "bytes_in", "bytes_out",
                "connections", "subscriptions", "streams", "consumers"];
  var state = {
    interval: INTERVAL,
    data: {},
    samples: 0,
    errors: 0,
    lastError: null,
    jetstream: null,
    server: null,
    latest: {},
    charts: {},  // chart id -> its uPlot (plot.data is what is drawn)
  };
  SERIES.forEach(function (k) { state.data[k] = []; });
  window.natsDashboard = state;

  // Tick steps for byte rates: whole bytes (1, 2, 5 ... 500), then the same
  // steps of each binary unit, so every tick is a round number of B, KiB,
  // MiB ... (uPlot's own steps are decimal: 0.2 B, 1000 B, labelled
  // "0 B", "1000 B" or rounded into duplicates).
  var BYTE_STEPS = [];
  [1, 1024, Math.pow(1024, 2), Math.pow(1024, 3), Math.pow(1024, 4)].forEach(function (unit) {
    [1, 2, 5, 10, 20, 50, 100, 200, 500].forEach(function (n) { BYTE_STEPS.push(n * unit); });
  });

  var CHARTS = [
    {id: "chart-msgs", fmt: count, rate: true,
     series: [["msgs_in", "in", "#2b7bb9"], ["msgs_out", "out", "#34a574"]]},
    {id: "chart-bytes", fmt: byteRate, rate: true, incrs: BYTE_STEPS,
     series: [["bytes_in", "in", "#2b7bb9"], ["bytes_out", "out", "#34a574"]]},
    {id: "chart-connections", fmt: count, series: [["connections", "connections", "#375c93"]]},
    {id: "chart-subscriptions", fmt: count,
     series: [["subscriptions", "subscriptions", "#8a5cc2"]]},
    {id: "chart-jetstream", fmt: count,
     series: [["streams", "streams", "#d9822b"], ["consumers", "consumers", "#27aae1"]]},
  ];

  // Tick steps for counts of things (connections, streams...): no 0.5 of one.
  var WHOLE = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5,
               1e6, 2e6, 5e6, 1e7, 2e7, 5e7, 1e8, 2e8, 5e8, 1e9];

  var previous = null;  // the last /varz sample, for rates

  function count(v) {
    if (v === null || v === undefined) { return "–"; }
    return Number.isInteger(v) ? v.toLocaleString("en-US")
                               : v.toLocaleString("en-US", {maximumFractionDigits: 1});
  }

  // A byte count in binary units, with at most one decimal and none when it
  // is whole: "0.4 B", "512 B", "1.5 KiB", "2 KiB" (a rate's fractions of a
  // byte are shown, not rounded away).
  function bytes(v) {
    if (v === null || v === undefined) { return "–"; }
    var units = ["B", "KiB", "MiB", "GiB", "TiB"];
    var i = 0;
    while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return v.toLocaleString("en-US", {maximumFractionDigits: 1}) + " " + units[i];
  }

  function byteRate(v) {
    return v === null || v === undefined ? "–" : bytes(v) + "/s";
  }

  function text(id, value) {
    var el = document.getElementById(id);
    if (el) { el.textContent = value; }
  }

  function status(message, isError) {
    var el = document.getElementById("status");
    if (!el) { return; }
    el.textContent = message;
    el.classList.toggle("error", !!isError);
  }

  // nats-server writes "now" with nanoseconds; Date.parse wants at most ms.
  function seconds(now) {
    var ms = typeof now === "string" ? Date.parse(now.replace(/(\.\d{3})\d+/, "$1")) : NaN;
    return (isNaN(ms) ? Date.now() : ms) / 1000;
  }

  function makeCharts() {
    CHARTS.forEach(function (c) {
      var el = document.getElementById(c.id);
      var series = [{}].concat(c.series.map(function (s) {
        return {label: s[1], stroke: s[2], width: 2, spanGaps: false,
                value: function (u, v) { return c.fmt(v); }};
      }));
      c.plot = new uPlot({
        width: Math.max(el.clientWidth, 300),
        height: 200,
        series: series,
        scales: {y: {range: function (u, min, max) { return [0, Math.max(max || 0, 1) * 1.1]; }}},
        axes: [{}, {size: 84, incrs: c.incrs || (c.rate ? undefined : WHOLE),
                    values: function (u, ticks) { return ticks.map(c.fmt); }}],
      }, columns(c), el);
      state.charts[c.id] = c.plot;
    });
  }

  function columns(c) {
    return [state.data.time].concat(c.series.map(function (s) { return state.data[s[0]]; }));
  }

  function redraw() {
    CHARTS.forEach(function (c) { c.plot.setData(columns(c)); });
  }

  function resize() {
    CHARTS.forEach(function (c) {
      var el = document.getElementById(c.id);
      c.plot.setSize({width: Math.max(el.clientWidth, 300), height: 200});
    });
  }

  // Per-second rate of a counter between two samples of the same server; none
  // across a restart (the counters start again from zero).
  function rate(varz, name, dt) {
    if (!previous || dt <= 0 || previous.server_id !== varz.server_id) { return null; }
    var delta = varz[name] - previous[name];
    return delta < 0 ? null : delta / dt;
  }

  function record(varz, jsz) {
    var t = seconds(varz.now);
    var dt = previous ? t - seconds(previous.now) : 0;
    var jetstream = jsz ? !jsz.disabled : null;
    var sample = {
      time: t,
      msgs_in: rate(varz, "in_msgs", dt),
      msgs_out: rate(varz, "out_msgs", dt),
      bytes_in: rate(varz, "in_bytes", dt),
      bytes_out: rate(varz, "out_bytes", dt),
      connections: varz.connections,
      subscriptions: varz.subscriptions,
      streams: jetstream ? jsz.streams : null,
      consumers: jetstream ? jsz.consumers : null,
    };
    previous = varz;
    SERIES.forEach(function (k) {
      var column = state.data[k];
      column.push(sample[k] === undefined ? null : sample[k]);
      if (column.length > WINDOW) { column.shift(); }
    });
    state.samples++;
    state.latest = sample;
    state.jetstream = jetstream;
    state.server = {id: varz.server_id, name: varz.server_name, version: varz.version};

    text("v-msgs-in", count(sample.msgs_in));
    text("v-msgs-out", count(sample.msgs_out));
    text("v-bytes-in", bytes(sample.bytes_in));
    text("v-bytes-out", bytes(sample.bytes_out));
    text("v-connections", count(sample.connections));
    text("v-subscriptions", count(sample.subscriptions));
    text("v-streams", jetstream === false ? "off" : count(sample.streams));
    text("v-consumers", jetstream === false ? "off" : count(sample.consumers));
    text("js-note", jetstream === false ? "(JetStream is disabled)" : "");
    text("server", (varz.server_name || varz.server_id) + " · v" + varz.version);
    redraw();
  }

  function getJSON(path) {
    var abort = new AbortController();
    var timer = setTimeout(function () { abort.abort(); }, TIMEOUT);
    return fetch(path, {cache: "no-store", signal: abort.signal}).then(function (r) {
      if (!r.ok) { throw new Error(path + ": HTTP " + r.status); }
      return r.json();
    }).finally(function () { clearTimeout(timer); });
  }

  function failed(err) {
    state.errors++;
    state.lastError = String(err && err.message || err);
    status("error: " + state.lastError + " (retrying every " + INTERVAL / 1000 + " s)", true);
  }

  // One request at a time: the next poll is scheduled when this one is done,
  // so a slow server is never asked faster than it answers.
  function poll() {
    Promise.allSettled([getJSON("varz"), getJSON("jsz")]).then(function (results) {
      if (results[0].status !== "fulfilled") { throw results[0].reason; }
      record(results[0].value, results[1].status === "fulfilled" ? results[1].value : null);
      if (results[1].status !== "fulfilled") { throw results[1].reason; }
      status("live: updated " + new Date().toLocaleTimeString("en-GB") +
             ", every " + INTERVAL / 1000 + " s");
    }).catch(failed).finally(function () { setTimeout(poll, INTERVAL); });
  }

  function start() {
    if (typeof window.uPlot !== "function") {
      failed(new Error("the chart library did not load"));
      return;
    }
    makeCharts();
    window.addEventListener("resize", resize);
    poll();
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
