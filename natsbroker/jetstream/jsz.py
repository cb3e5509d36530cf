"""JetStream's monitoring: /jsz, its /varz field and its part of /healthz.

:class:`JetStreamMonitoring` is the part of the JetStream plugin
(natsbroker/jetstream/plugin.py) that writes nats-server's monitoring
documents from the plugin's accounts; the plugin serves them through
``IBroker.add_monitor_endpoint`` (/jsz), :class:`~natsbroker.interfaces.IVarzSection`
and :class:`~natsbroker.interfaces.IHealthReport`.
"""


from natsbroker.gocompat import times as gotime
from natsbroker.gocompat.query import go_bool, go_int, query_values
from natsbroker.jetstream import errors as E, limits as L, marshal, stream_models as SM, versions
from natsbroker.jetstream.stream import now_ns
from natsbroker.jetstream.stream_state import stream_state

_U64 = 1 << 64


class JetStreamMonitoring:
    """/jsz, /varz's ``jetstream`` and /healthz for the plugin (mixed into it)."""

    def _stats(self):
        """nats-server's ``JetStreamStats`` of the server."""
        mem = sto = 0
        for e in self.accounts.values():
            m, f = e.usage()
            mem += m
            sto += f
        return {"memory": mem, "storage": sto,
                "reserved_memory": self.reserved_bytes("memory"),
                "reserved_storage": self.reserved_bytes("file"),
                "accounts": len(self.accounts), "ha_assets": 0,
                "api": {"level": versions.API_LEVEL,
                        "total": sum(e.api_total for e in self.accounts.values()),
                        "errors": sum(e.api_errors for e in self.accounts.values())}}

    def _config_json(self):
        return {"max_memory": self.js.max_memory_store, "max_storage": self.js.max_file_store,
                "store_dir": self.root, "sync_interval": int(self.js.sync_interval * 1e9),
                "strict": True}

    def jsz(self, request):
        """/jsz with nats-server's options: ``accounts``, ``acc``, ``streams``,
        ``consumers``, ``config``, ``offset``, ``limit`` (decoded in its order)."""
        q = query_values(request.uri)
        accounts = go_bool(q, "accounts")
        streams = go_bool(q, "streams")
        consumers = go_bool(q, "consumers")
        config = go_bool(q, "config")
        offset = go_int(q, "offset")
        limit = go_int(q, "limit") or 1024
        go_bool(q, "leader-only")
        go_bool(q, "raft")
        go_bool(q, "stream-leader-only")
        acc = q.get("acc", "")
        if consumers:
            streams = True
        if streams and not acc:
            accounts = True
        engines = list(self.accounts.values())
        out = self._stats()
        out.update({"server_id": self.broker.server_id, "now": gotime.rfc3339(now_ns()),
                    "config": self._config_json(),
                    "limits": {"default_max_consumers": L.DEFAULT_MAX_CONSUMERS}})
        cluster = getattr(self, "cluster", None)
        if cluster is not None:
            out["meta_cluster"] = cluster.meta_cluster()
        out["streams"] = sum(e.stream_count() for e in engines)
        out["consumers"] = sum(e.consumer_count() for e in engines)
        out["messages"] = sum(s.store.state().msgs for e in engines for s in e.streams.values())
        out["bytes"] = sum(s.store.stored_bytes for e in engines for s in e.streams.values())
        if acc:
            picked = [self.accounts[acc]] if acc in self.accounts else []
        elif accounts:
            picked = sorted(engines, key=lambda e: e.account_name)[max(offset, 0):]
            picked = picked[:limit] if limit > 0 else picked
        else:
            picked = []
        if picked:
            out["account_details"] = [self._account_detail(e, streams, consumers, config)
                                      for e in picked]
        out["total"] = len(engines)
        offline = {e.prefix + n: why for e in engines for n, why in e.offline.items()}
        if offline:
            # Not a nats-server field: streams whose store is damaged.
            out["offline_streams"] = dict(sorted(offline.items()))
        return out

    def _account_detail(self, e, streams, consumers, config):
        mem, sto = e.usage()
        # (a tiered account reserves nothing account-wide, as nats-server shows it)
        lim = e.limits if "" in e.tiers else L.NO_TIER
        # (an account JWT's name, as nats-server shows it; its key is the id)
        name = getattr(e.broker, "name_tag", None) or e.account_name
        detail = {"name": name, "id": e.account_name, "memory": mem, "storage": sto,
                  "reserved_memory": lim.max_memory % _U64,
                  "reserved_storage": lim.max_file % _U64,
                  "accounts": 0, "ha_assets": 0,
                  "api": {"level": 0, "total": e.api_total, "errors": e.api_errors}}
        if streams and e.streams:
            detail["stream_detail"] = [self._stream_detail(e, s, consumers, config)
                                       for _, s in sorted(e.streams.items())]
        return detail

    def _stream_detail(self, e, stream, consumers, config):
        from natsbroker.jetstream import consumer_api
        d = {"name": stream.name, "created": gotime.rfc3339(stream.created),
             "cluster": {"leader": self.broker.server_name}}
        if config:
            d["config"] = SM.stream_config_json(stream.config, dynamic=False)
        d["state"] = marshal.to_json(stream_state(stream))
        mirror, sources = e.sourcing.info(stream)
        if mirror is not None:
            d["mirror"] = marshal.to_json(mirror) if not isinstance(mirror, dict) else mirror
        if sources:
            d["sources"] = [marshal.to_json(x) if not isinstance(x, dict) else x for x in sources]
        if consumers and stream.consumers:
            out = []
            for _, c in sorted(stream.consumers.items()):
                info = consumer_api.info_response(e, stream, c)
                if config:
                    meta = (info.get("config") or {}).get("metadata")
                    if meta:
                        for k in (versions.META_SERVER_VERSION, versions.META_SERVER_LEVEL):
                            meta.pop(k, None)
                else:
                    info.pop("config", None)
                out.append(info)
            d["consumer_detail"] = out
        return d

    def varz(self):
        return {"config": self._config_json(), "stats": self._stats(),
                "limits": {"default_max_consumers": L.DEFAULT_MAX_CONSUMERS}}

    def healthz(self, opts):
        """/healthz's JetStream part, as nats-server's single-server check:
        every account's streams must have been recovered; a named account,
        stream or consumer must exist (404 otherwise)."""
        get = opts.get if hasattr(opts, "get") else (lambda k, d=None: d)
        if get("js-server-only") or get("js-enabled-only"):
            return {"status": "ok"}
        details = bool(get("details"))
        account, stream, consumer = get("account") or "", get("stream") or "", get("consumer") or ""
        errors = []
        found_acc = found_stream = found_consumer = False
        for e in self.accounts.values():
            if not (e.streams or e.offline):
                continue  # nats-server: no account directory yet
            if account:
                if e.account_name != account:
                    continue
                found_acc = True
            for name in sorted(set(e.streams) | set(e.offline)):
                if stream:
                    if name != stream:
                        continue
                    found_stream = True
                if name in e.offline and name not in e.streams:
                    why = "JetStream stream '%s > %s' is offline: %s" % (
                        e.account_name, name, e.offline[name])
                    if not details:
                        return {"status": "unavailable", "status_code": 503, "error": why}
                    errors.append({"type": "STREAM", "account": e.account_name, "stream": name,
                                   "error": why})
                    continue
                if found_stream:
                    if consumer and consumer in e.streams[name].consumers:
                        found_consumer = True
                    break
            if found_acc:
                break

        def not_found(kind, text):
            if not details:
                return {"status": "unavailable", "status_code": 404, "error": text}
            err = {"type": kind, "account": account}
            if kind != "ACCOUNT":
                err["stream"] = stream
            if kind == "CONSUMER":
                err["consumer"] = consumer
            err["error"] = text
            return {"status": "error", "status_code": 404, "errors": [err]}

        if account and not found_acc:
            return not_found("ACCOUNT", "JetStream account %s not found" % E.go_quote(account))
        if stream and not found_stream:
            return not_found("STREAM", "JetStream stream %s not found on account %s"
                             % (E.go_quote(stream), E.go_quote(account)))
        if consumer and not found_consumer:
            return not_found("CONSUMER", "JetStream consumer %s not found for stream %s on "
                             "account %s" % (E.go_quote(consumer), E.go_quote(stream),
                                             E.go_quote(account)))
        if errors:
            return {"status": "error", "status_code": 503, "errors": errors}
        return {"status": "ok"}
