// The page side of tests/test_browser.py: the official NATS JavaScript client
// (nats-core's wsconnect, the kv module) against a server's WebSocket port.
//
// The page is opened as /?ws=ws://127.0.0.1:PORT&bucket=B&key=K. It runs the
// scenario once and reports through window.__results (or window.__error); the
// connection stays open in window.__nc so the test can call the page's
// responder ("page.svc") from Python afterwards.
import { headers, NoRespondersError, wsconnect } from "@nats-io/nats-core";
import { Kvm } from "@nats-io/kv";

const TIMEOUT = 10000;

async function scenario(params) {
  const out = {};
  const nc = await wsconnect({ servers: params.ws, timeout: TIMEOUT, reconnect: false });
  window.__nc = nc;
  out.connected = true;

  // Subscribe, then publish to ourselves: plain and with headers.
  const sub = nc.subscribe("browser.>", { max: 2 });
  const h = headers();
  h.set("X-From", "page");
  nc.publish("browser.a", "one");
  nc.publish("browser.b", "two", { headers: h });
  out.messages = [];
  for await (const m of sub) {
    out.messages.push({
      subject: m.subject,
      data: m.string(),
      header: m.headers ? m.headers.get("X-From") : null,
    });
  }

  // A responder in the page, and requests to it and to Python's (TCP) responder.
  nc.subscribe("page.svc", {
    callback: (err, m) => {
      if (!err) m.respond("page:" + m.string());
    },
  });
  await nc.flush();
  out.pageReply = (await nc.request("page.svc", "ping", { timeout: TIMEOUT })).string();
  out.pyReply = (await nc.request("py.echo", "hi", { timeout: TIMEOUT })).string();

  // Nobody listens here: the server answers with a 503 no-responders status.
  try {
    await nc.request("nobody.home", "?", { timeout: TIMEOUT });
    out.noResponders = "answered";
  } catch (err) {
    const cause = err && err.cause;
    out.noResponders = cause instanceof NoRespondersError ? "NoRespondersError:" + cause.subject
      : String(err);
  }

  // A message for Python's subscription on the TCP port.
  nc.publish("browser.out", "to python");
  await nc.flush();

  // The KV key the test put with nats-py.
  const kv = await new Kvm(nc).open(params.bucket);
  const e = await kv.get(params.key);
  out.kv = e && {
    bucket: e.bucket,
    key: e.key,
    value: e.string(),
    revision: e.revision,
    operation: e.operation,
  };
  const missing = await kv.get("no-such-key");
  out.kvMissing = missing === null ? null : { operation: missing.operation };
  return out;
}

const q = new URLSearchParams(location.search);
scenario({ ws: q.get("ws"), bucket: q.get("bucket"), key: q.get("key") }).then(
  (r) => { window.__results = r; },
  (err) => { window.__error = String(err && err.stack || err); },
);
