"""JetStream in a cluster: who answers which API request, and what the
meta group's assignments make this server do.

As in nats-server, nothing is forwarded: every JetStream server hears every
API request of an account (each subscribes ``$JS.API.>`` there, so routes
carry a client's request to all of them) and the one whose role it is
answers; the others stay silent:

* the meta leader answers what creates, changes, removes or lists an
  account's streams (``STREAM.CREATE``/``UPDATE``/``DELETE``/``NAMES``/
  ``LIST``): it validates the request, places the stream
  (:mod:`.placement`) and proposes an assignment to the meta group
  (:mod:`.metagroup`), answering itself only what fails before that;
* once an assignment commits, the server it places the stream on runs the
  original request through the single-server API (natsbroker.jetstream.api),
  which creates (updates, deletes) the stream there and answers the
  client's reply subject, as nats-server's new stream leader answers
  ``sa.reply``;
* that server answers everything about the stream's data and its
  consumers (``STREAM.INFO``, ``MSG.GET``, ``PURGE``, ``CONSUMER.*``), and
  publishes to the stream's subjects reach it by ordinary interest.

Streams have one replica for now, like nats-server's R1 streams (no Raft
group of their own), and their consumers live with them; the meta leader
refuses more replicas.
"""

import json
import random
import shutil

from twisted.logger import Logger

from natsbroker import jsonbound, nuid as nuids
from natsbroker.cluster.raft.node import (
    MembershipChanging,
    NotLeader,
    PeerNotFound,
    RemoveLastNode,
)
from natsbroker.cluster.raft.raftz import group_status
from natsbroker.cluster.raft.wire import peer_id
from natsbroker.gocompat import gojson, times
from natsbroker.jetstream import (
    api,
    api_models as AM,
    errors as E,
    marshal,
    stream_config as SC,
    subject_rules as SR,
)
from natsbroker.jetstream.cluster.entries import (
    ClientInfo,
    EntryOp,
    RaftGroup,
    StreamAssignment,
    config_text,
    encode_meta_entry,
)
from natsbroker.jetstream.cluster.metagroup import GROUP, MetaGroup, route_members
from natsbroker.jetstream.cluster.peers import PeerTable
from natsbroker.jetstream.cluster.placement import (
    PlacementError,
    create_group_for_stream,
    select_peer_group,
)
from natsbroker.jetstream.cluster.streamgroup import StreamGroup

log = Logger("natsbroker.jetstream.cluster")

# API kinds the meta leader answers (it proposes, or lists from its state).
META_KINDS = frozenset((
    "stream_create_response", "stream_update_response", "stream_delete_response",
    "stream_names_response", "stream_list_response", "account_info_response",
    "stream_restore_response", "stream_remove_peer_response",
))
# A replicated stream's leader proposes these (streamgroup.propose_request).
PROPOSED_KINDS = frozenset(("stream_purge_response", "stream_msg_delete_response"))
# Requests about a durable consumer of a replicated stream that every
# replica runs (the config is kept by each).
CONSUMER_KINDS = frozenset(("consumer_create_response", "consumer_delete_response",
                            "consumer_pause_response"))
# Cluster-only requests about a stream, handled here rather than by the API.
GROUP_KINDS = frozenset(("stream_leader_stepdown_response", "consumer_leader_stepdown_response"))
LIST_TIMEOUT = 4.0
# jetstream_api.go: with no meta leader for this long, the servers answer a
# request only the meta leader could with "temporarily unavailable".
LEADERLESS_GRACE = 10.0
UNRESPONSIVE = 3.0


def _group_name(prefix, replicas, storage):
    # groupNameForStream / groupNameForConsumer
    return "%s-R%d%s-%s" % (prefix, replicas, "M" if storage == "memory" else "F",
                            peer_id(nuids.nuid()))


def _storage(cfg):
    storage = getattr(cfg.storage, "value", cfg.storage)
    return "memory" if str(storage).lower() in ("memory", "1") else "file"


class ClusterController:
    def __init__(self, plugin):
        self.plugin = plugin
        self.broker = None
        self.meta = None
        self.peers = None
        self._subs = []
        self.rng = random.SystemRandom()
        self.leaderless_since = None
        self.groups = {}  # raft group name -> StreamGroup of a replicated stream here
        self.disabled = None  # why this server left the JetStream cluster, if it did
        self._early_routes = []
        self._server_removes = {}  # peer -> reply, answered when its removal commits

    # -- life -----------------------------------------------------------------

    def start(self, broker, store_dir):
        self.broker = broker
        self.store_dir = store_dir
        cfg = broker.config
        self.id = peer_id(broker.server_name)
        self.peers = PeerTable(server_id=broker.server_id, domain=cfg.jetstream.domain or "")
        system = broker.system_account
        self._subs.append(system.subscribe(b"$SYS.SERVER.*.STATSZ", self._on_statsz, hidden=True))
        self._subs.append(system.subscribe(b"$JS.API.META.LEADER.STEPDOWN", self._on_meta_stepdown,
                                           hidden=True))
        self._subs.append(system.subscribe(b"$JS.API.SERVER.REMOVE", self._on_server_remove,
                                           hidden=True))
        self.meta = MetaGroup(broker, store_dir, known_peers=self.peers.active_peers(),
                              routes=route_members(cfg.cluster), on_change=self._on_change,
                              on_leader=self._on_leader, log=self._log,
                              on_peer_removed=self._on_peer_removed)
        self.leaderless_since = broker.reactor.seconds()
        self.meta.start()
        early, self._early_routes = self._early_routes, []
        for info in early:
            self.route_registered(info)

    def stop(self):
        if self.disabled:
            self.meta = None  # stopped already
        for sub in self._subs:
            self.broker.system_account.unsubscribe(sub)
        self._subs.clear()
        for group in list(self.groups.values()):
            self._stop_group(group)
        if self.meta is not None:
            self.meta.stop()

    def route_registered(self, info):
        """A route is up. A nats-server server with JetStream on the other
        end (its INFO says ``jetstream`` and names a Go runtime) means a
        mixed JetStream cluster, which natsbroker cannot be a member of yet:
        this server leaves the meta group rather than vote in it or lead it
        with a different reading of the assignments."""
        if self.broker is None:
            self._early_routes.append(info)  # heard before start(): judged then
            return
        # addRoute: the first connection to a remote names it at once (its
        # statsz, which placement needs, follows).
        self.peers.update_from_route_info(info, local_cluster=self.broker.config.cluster.name or "",
                                          local_version=self.broker.info_fields().get("version", ""))
        runtime = str(info.get("go") or "")
        if self.disabled or not info.get("jetstream") or not runtime.startswith("go"):
            return
        self.disable("server '%s' (nats-server %s) runs JetStream in cluster '%s': natsbroker "
                     "cannot be a member of a JetStream cluster with nats-server servers yet. "
                     "JetStream clustering is off on this server: it takes no part in the meta "
                     "group and leaves the account's API requests to the nats-server servers. "
                     "Remove it from their meta group with $JS.API.SERVER.REMOVE, or run "
                     "natsbroker here without JetStream." % (
                         info.get("server_name") or info.get("server_id"), info.get("version"),
                         self.broker.config.cluster.name))

    def disable(self, reason):
        self.disabled = reason
        log.error("JetStream cluster: {reason}", reason=reason)
        for group in list(self.groups.values()):
            self._stop_group(group)
        if self.meta is not None:
            self.meta.stop()
        self.leaderless_since = None
        self.plugin.left_cluster()
        self.broker.forward_jetstream()

    def raft_groups(self):
        """IRaftGroups (through the plugin): the meta group under the system
        account, and every stream group running here under its stream's
        account, as nats-server lists them; all of their traffic is in the
        system account."""
        if self.disabled or self.meta is None or self.meta.node is None:
            return []
        now = self.broker.reactor.seconds()
        system = self.broker.system_account.name
        nodes = [(system, GROUP, self.meta.node)] + [
            (g.jsa.account_name, g.name, g.node) for g in self.groups.values()
            if g.node is not None]
        return [(account, name, group_status(node, now, name_of=self._name,
                                             traffic_account=system))
                for account, name, node in nodes]

    def _log(self, level, text):
        if level == "debug":
            return
        emit = {"warning": log.warn, "error": log.error}.get(level, log.info)
        emit("JetStream cluster: {text}", text=text)

    def _on_statsz(self, sub, subject, reply, hdr_len, raw):
        try:
            self.peers.update_from_statsz(bytes(raw[hdr_len:]), now=self.broker.reactor.seconds())
        except ValueError:
            pass

    def _on_leader(self, change):
        if change.is_leader:
            log.info("JetStream cluster new metadata leader")
            # monitorCluster: every server is asked for a statsz broadcast
            # now ($SYS.REQ.SERVER.PING, no reply), so that the new leader
            # can place streams at once rather than after the peers' next
            # heartbeats (the first ones may have gone out before the routes).
            # Sent as a request, so that this server's own responder answers
            # it too, as nats-server's internal subscription does.
            self.broker.system_account.request("$SYS.REQ.SERVER.PING", b"")
            self.broker.reactor.callLater(0, self._remap_removed)
        if change.leader:
            self.leaderless_since = None
        elif self.leaderless_since is None:
            self.leaderless_since = self.broker.reactor.seconds()

    def _leaderless(self):
        """No meta leader for LEADERLESS_GRACE (isLeaderless). Read from the
        group as it is now: a follower that stood as a candidate and then
        heard from a leader again is told of no change, and must not go on
        answering "temporarily unavailable" beside that leader."""
        now = self.broker.reactor.seconds()
        if self.meta.node.leader:
            self.leaderless_since = None
            return False
        if self.leaderless_since is None:
            self.leaderless_since = now
        return now - self.leaderless_since >= LEADERLESS_GRACE

    @property
    def is_meta_leader(self):
        node = self.meta.node
        return node.is_leader and node.leader_ready

    def _on_meta_stepdown(self, sub, subject, reply, hdr_len, raw):
        """``$JS.API.META.LEADER.STEPDOWN`` (system account only): the meta
        leader hands over, to the placement's ``preferred`` server if named
        and healthy."""
        if not self.is_meta_leader or not self.broker.serving_request():
            return
        kind = "meta_leader_stepdown_response"
        system = self.broker.system_account
        preferred = ""
        try:
            body = bytes(raw[hdr_len:])
            req = jsonbound.loads(body) if body.strip() else {}
            name = ((req or {}).get("placement") or {}).get("preferred") or ""
        except (ValueError, AttributeError):
            _respond(system, reply, kind, error=E.bad_request())
            return
        if name:
            preferred = next((p for p in self.meta.node.peers if self._name(p) == name), "")
            if not preferred:
                _respond(system, reply, kind, error=E.cluster_no_peers(
                    err='preferred server "%s" not known' % name))
                return

        def healthy(peer):
            info = self.peers.get(peer)
            return info is None or not info.offline
        self.meta.transport.call(self.meta.node.step_down, preferred=preferred, healthy=healthy)
        _respond(system, reply, kind, success=True)

    def meta_cluster(self):
        """/jsz's ``meta_cluster``: the meta group as this server sees it."""
        node = self.meta.node
        now = self.broker.reactor.seconds()
        leader = node.leader
        out = {"name": self.broker.config.cluster.name,
               "leader": self._name(leader) if leader else "", "peer": leader}
        replicas = []
        for peer in sorted(node.peers):
            if peer == node.id:
                continue
            p = node.peers[peer]
            r = {"name": self._name(peer),
                 "current": bool(node.is_leader and p.li >= node.commit) or peer == leader,
                 "active": int((now - p.ts) * 1e9) if p.ts is not None else 0, "peer": peer}
            info = self.peers.get(peer)
            if info is not None and info.offline:
                r["offline"] = True
            replicas.append(r)
        if replicas:
            out["replicas"] = replicas
        out.update({"cluster_size": node.cluster_size, "quorum_needed": node.quorum,
                    "pending": max(node.pindex - node.commit, 0)})
        return out

    def _unresponsive(self):
        """Members the meta leader has not heard from for three heartbeats:
        gone, whatever their last statsz said (a killed server sends no
        shutdown event), so nothing is placed on them."""
        now = self.broker.reactor.seconds()
        node = self.meta.node
        return [peer for peer, p in node.peers.items()
                if peer != node.id and (p.ts is None or now - p.ts > UNRESPONSIVE)]

    @property
    def _unique_tag(self):
        """``jetstream { unique_tag }``: replicas on servers whose tag with
        that prefix differs (jetstream_cluster.go selectPeerGroup)."""
        return self.broker.config.jetstream.unique_tag or None

    def _name(self, peer):
        if peer == self.id:
            return self.broker.server_name
        info = self.peers.get(peer)
        return info.name if info is not None and info.name else peer

    # -- who answers ------------------------------------------------------------

    def accept(self, jsa, subject, reply, body, hdr):
        """Should ``jsa`` (this server's engine for the request's account)
        answer this API request itself? The meta leader's requests are
        handled here, and False returned."""
        route = api.route_of(subject)
        if route is None:
            return False
        _handler, kind, args = route
        if self.disabled:
            # Out of the cluster: only what still runs here is answered here.
            return bool(args) and kind not in META_KINDS and args[0] in jsa.streams \
                and (kind.startswith("stream_") or kind.startswith("consumer_"))
        if kind in META_KINDS:
            if self.is_meta_leader:
                try:
                    self._meta_request(jsa, kind, args, subject, reply, body, hdr)
                except E.ApiError as e:
                    jsa.api_errors += 1
                    jsa.respond(reply, dict({"type": api.TYPE % kind, "error": e.to_json()},
                                            **api.ERROR_EXTRAS.get(kind, {})))
            elif self._leaderless():
                jsa.respond(reply, {"type": api.TYPE % kind, "error": E.cluster_not_avail().to_json()})
            return False
        if args and (kind.startswith("stream_") or kind.startswith("consumer_")):
            name = args[0]
            stream = jsa.streams.get(name)
            if stream is not None:
                group = stream.group
                if group is None and stream.config.num_replicas > 1:
                    return False  # its group is not back yet: a follower until then
                if group is None:
                    if kind == "stream_leader_stepdown_response":
                        # One replica: nothing to hand over (nats-server: success).
                        _respond(jsa.broker, reply, kind, success=True)
                        return False
                    return kind not in GROUP_KINDS
                if not group.is_leader:
                    return False  # the stream's leader answers
                return self._leader_request(jsa, group, kind, subject, reply, body)
            # Nobody runs it: the meta leader says so.
            return self.is_meta_leader and self.meta.state.stream(jsa.account_name, name) is None
        # The account's own requests (INFO): the meta leader.
        return self.is_meta_leader

    def cluster_block(self, stream):
        """The ``cluster`` of a stream's info in a cluster (nats-server's
        clusterInfo): its group as its leader sees it, or for a stream of
        one replica the cluster's name and this server."""
        if stream.group is not None:
            return stream.group.cluster_info()
        return {"name": self.broker.config.cluster.name, "leader": self.broker.server_name}

    def consumer_cluster_block(self, stream, consumer):
        """The ``cluster`` of a consumer's info: a durable consumer of a
        replicated stream is replicated by the stream's group (natsbroker has
        no Raft group per consumer), so that group's block; any other runs
        on this server alone ({name, leader}, as nats-server's R1 consumers)."""
        if stream.group is not None and consumer.config.durable_name:
            return stream.group.cluster_info()
        return {"name": self.broker.config.cluster.name, "leader": self.broker.server_name}

    def hosts(self, jsa, stream):
        return stream in jsa.streams

    def _leader_request(self, jsa, group, kind, subject, reply, body):
        """A replicated stream's leader: True to answer as a single server
        does; what changes the stream is proposed instead."""
        if kind in PROPOSED_KINDS:
            return not group.propose_request(kind, subject, reply, bytes(body))
        if kind in CONSUMER_KINDS and _durable(jsa, group.stream, kind, subject, body):
            # What every replica keeps: run by each, answered by the leader.
            group.propose_api(subject, reply, body)
            return False
        if kind == "consumer_leader_stepdown_response":
            # A consumer is led by its stream's leader here.
            self._stream_stepdown(jsa, group, reply, bytes(body), kind)
            return False
        if kind == "stream_leader_stepdown_response":
            self._stream_stepdown(jsa, group, reply, bytes(body))
            return False
        return kind not in GROUP_KINDS

    def _stream_stepdown(self, jsa, group, reply, body, kind="stream_leader_stepdown_response"):
        preferred = ""
        try:
            req = jsonbound.loads(body) if body.strip() else {}
            name = ((req or {}).get("placement") or {}).get("preferred") or ""
        except (ValueError, AttributeError):
            _respond(jsa.broker, reply, kind, error=E.bad_request())
            return
        if name:
            preferred = next((p for p in group.node.peers if self._name(p) == name), "")
            if not preferred:
                _respond(jsa.broker, reply, kind, error=E.cluster_no_peers(
                    err='preferred server "%s" not known' % name))
                return
        if len(group.node.peers) < 2:
            _respond(jsa.broker, reply, kind, error=E.cluster_no_peers(
                err="no replicas to step down to"))
            return
        group.step_down(preferred)
        _respond(jsa.broker, reply, kind, success=True)

    # -- the meta leader ----------------------------------------------------------

    def _meta_request(self, jsa, kind, args, subject, reply, body, hdr):
        acc = jsa.account_name
        state = self.meta.state
        reply_text = reply.decode() if reply else ""
        if kind == "stream_names_response":
            return self._stream_names(jsa, reply, body)
        if kind == "stream_list_response":
            return self._stream_list(jsa, reply, body)
        if kind == "account_info_response":
            return self._account_info(jsa, reply)
        if kind == "stream_restore_response":
            # A restore would make a stream on this server alone, outside the
            # meta group's assignments.
            raise E.stream_restore(err="not supported in a natsbroker cluster yet")
        name = args[0]
        if kind == "stream_remove_peer_response":
            return self._remove_peer(jsa, name, reply, body)
        if kind == "stream_create_response":
            cfg = SC.parse_stream_config(body, name)
            cfg = SC.fill_defaults(cfg, account_limits=jsa.limits,
                                   max_duplicate_window=jsa.js.limits.duplicate_window)
            SC.check_create(cfg, clustered=True)
            config_json = config_text(cfg)
            old = state.stream(acc, name)
            if old is not None:
                if json.loads(old.config_json) != json.loads(config_json):
                    raise E.stream_name_exist()
                # The same config again: its host answers with the stream's info.
                self._propose(EntryOp.UPDATE_STREAM, StreamAssignment(
                    client=self._client(jsa), created=old.created, config_json=old.config_json,
                    group=old.group, sync=old.sync, subject=subject.decode(), reply=reply_text))
                return
            self._check_overlap(acc, cfg)
            cluster, peers = create_group_for_stream(
                self.peers, self.broker.config.cluster.name, cfg,
                meta_peers=sorted(self.meta.node.peers), rng=self.rng, ignore=self._unresponsive(),
                unique_tag=self._unique_tag,
                assignments=[sa.group.peers for sa in state.streams.values() if sa.group])
            store = _storage(cfg)
            group = RaftGroup(name=_group_name("S", len(peers), store), peers=list(peers),
                              store=store, cluster=cluster, preferred=peers[0])
            self._propose(EntryOp.ASSIGN_STREAM, StreamAssignment(
                client=self._client(jsa), created=times.rfc3339(times.now_ns()),
                config_json=config_json, group=group,
                sync="$JSC.SYNC." + peer_id(nuids.nuid()), subject=subject.decode(), reply=reply_text))
        elif kind == "stream_update_response":
            old = state.stream(acc, name)
            if old is None:
                raise E.stream_not_found()
            cfg = SC.parse_stream_config(body, name, update=True, account_limits=jsa.limits)
            cfg = SC.check_update(old.stream_config(), SC.fill_defaults(
                cfg, max_duplicate_window=jsa.js.limits.duplicate_window), clustered=True)
            self._check_overlap(acc, cfg, skip=name)
            group = old.group
            if group is not None and cfg.num_replicas != len(group.peers):
                group = self._rescaled(old, cfg)
            self._propose(EntryOp.UPDATE_STREAM, StreamAssignment(
                client=self._client(jsa), created=old.created, config_json=config_text(cfg),
                group=group, sync=old.sync, subject=subject.decode(), reply=reply_text))
        elif kind == "stream_delete_response":
            if not gojson.is_empty_request(bytes(body)):
                raise E.not_empty_request()
            old = state.stream(acc, name)
            if old is None:
                raise E.stream_not_found()
            self._propose(EntryOp.REMOVE_STREAM, StreamAssignment(
                client=old.client, created=old.created, config_json=old.config_json,
                group=old.group, sync=old.sync, subject=subject.decode(), reply=reply_text))

    def _remove_peer(self, jsa, name, reply, body):
        """``$JS.API.STREAM.PEER.REMOVE.<stream>`` (jsStreamRemovePeerRequest):
        the peer (a server name or peer id) leaves the stream's group and
        another server takes its place (remapStreamAssignment); with none to
        take it a replicated stream shrinks by one and the answer is 10075.
        The members change their group's membership as the new assignment
        says (StreamGroup.update_peers), the new one is caught up, and the
        one removed drops its replica."""
        kind = "stream_remove_peer_response"
        if gojson.is_empty_request(bytes(body)):
            raise E.bad_request()
        peer = marshal.decode_request(bytes(body), AM.StreamRemovePeerRequest).peer
        if not peer:
            raise E.bad_request()
        sa = self.meta.state.stream(jsa.account_name, name)
        if sa is None:
            raise E.stream_not_found()
        peers = list(sa.group.peers) if sa.group else []
        node = peer_id(peer) if peer_id(peer) in peers else peer
        if node not in peers:
            raise E.cluster_peer_not_member()
        if not self._remap(jsa.account_name, sa, node):
            raise E.peer_remap()
        _respond(jsa.broker, reply, kind, success=True)

    def _remap(self, account, sa, *nodes):
        """removePeerFromStream: propose ``sa`` with ``nodes`` replaced by
        servers placement picks (remapStreamAssignment); with none, a
        replicated stream goes on without them. True if they were replaced
        (an R1 stream with no replacement is left as it is)."""
        peers = list(sa.group.peers)
        retain = [p for p in peers if p not in nodes]
        try:
            new_peers = select_peer_group(
                self.peers, sa.group.cluster or self.broker.config.cluster.name,
                json.loads(sa.config_json), existing=retain, replicas=len(peers),
                ignore=list(nodes) + self._unresponsive(), meta_peers=sorted(self.meta.node.peers),
                rng=self.rng, unique_tag=self._unique_tag,
                assignments=[a.group.peers for a in self.meta.state.streams.values() if a.group])
            replaced = True
        except PlacementError:
            replaced = False
            if len(peers) == 1:
                return False  # (an R1 stream is not bricked)
            new_peers = retain
        group = RaftGroup(name=sa.group.name, peers=list(new_peers), store=sa.group.store,
                          cluster=sa.group.cluster, preferred="")
        self._propose(EntryOp.ASSIGN_STREAM, StreamAssignment(
            client=sa.client, created=sa.created, config_json=sa.config_json, group=group,
            sync=sa.sync, subject="", reply=""))
        if not replaced:
            self._log("warning", "could not replace peer for stream '%s > %s'"
                      % (account, sa.name))
        return replaced

    # -- $JS.API.SERVER.REMOVE ------------------------------------------------------

    def _on_server_remove(self, sub, subject, reply, hdr_len, raw):
        """``$JS.API.SERVER.REMOVE`` (system account only,
        jsLeaderServerRemoveRequest): the meta leader proposes the server's
        removal from the meta group and answers once that is committed;
        every stream on it is then moved (:meth:`_on_peer_removed`)."""
        if not self.is_meta_leader or not self.broker.serving_request():
            return
        kind = "meta_server_remove_response"
        system = self.broker.system_account
        body = bytes(raw[hdr_len:])
        try:
            if gojson.is_empty_request(body):
                raise E.bad_request()
            req = marshal.decode_request(body, AM.MetaServerRemoveRequest)
            if self._server_removes:
                raise E.cluster_server_member_change_inflight()
            node = self.meta.node
            if req.peer_id:
                found = req.peer_id if req.peer_id in node.peers else ""
            else:
                found = next((p for p in node.peers if self._name(p) == req.peer), "")
            if not found:
                raise E.cluster_server_not_member()
            try:
                self.meta.transport.call(node.propose_remove_peer, found)
            except MembershipChanging:
                raise E.cluster_server_member_change_inflight() from None
            except (PeerNotFound, RemoveLastNode, NotLeader) as e:
                raise E.raft_general(err=type(e).__name__) from None
        except E.ApiError as e:
            _respond(system, reply, kind, error=e)
            return
        self._server_removes[found] = reply

    def _removed_here(self):
        """DisableJetStream: JetStream stops on this server (its streams
        closed, their files kept); its clients' requests and publishes
        reach the cluster's other servers by the accounts' interest."""
        if self.disabled:
            return
        for group in list(self.groups.values()):
            self._stop_group(group)
        if self.meta is not None:
            self.meta.stop()
        self.disabled = "removed from the JetStream cluster ($JS.API.SERVER.REMOVE)"
        self.leaderless_since = None
        self.plugin.stop()

    def _on_peer_removed(self, peer):
        """processRemovePeer: a member left the meta group. This server, if
        it was the one, leaves JetStream clustering (nats-server disables
        JetStream); the meta leader moves each stream off it and answers the
        request that asked for it."""
        if peer == self.id:
            log.error("JetStream being DISABLED, our server was removed from the cluster")
            advisory = {"type": "io.nats.jetstream.advisory.v1.server_removed",
                        "id": nuids.nuid(), "timestamp": times.rfc3339(times.now_ns()),
                        "server": self.broker.server_name, "server_id": self.broker.server_id,
                        "cluster": self.broker.config.cluster.name}
            if self.broker.config.jetstream.domain:
                advisory["domain"] = self.broker.config.jetstream.domain
            self.broker.system_account.publish("$JS.EVENT.ADVISORY.SERVER.REMOVED",
                                               gojson.go_json_dumps(advisory).encode())
            # (after the meta leader's part below, when it removed itself)
            self.broker.reactor.callLater(0, self._removed_here)
        # (the server that proposed it answers: a leader that removed itself
        # has handed over by the time this is applied)
        reply = self._server_removes.pop(peer, None)
        if self.is_meta_leader:
            for (account, _name), sa in list(self.meta.state.streams.items()):
                if sa.group is not None and peer in sa.group.peers:
                    try:
                        self._remap(account, sa, peer)
                    except NotLeader:
                        break
        if reply:
            _respond(self.broker.system_account, reply, "meta_server_remove_response",
                     success=True)

    def _remap_removed(self):
        """A new meta leader moves the streams still placed on servers that
        left the meta group lately (a leader that removed itself handed over
        before it could move them; its successor applied the removal as a
        follower)."""
        if self.disabled or not self.is_meta_leader:
            return
        node = self.meta.node
        gone = {p for p in node.removed if p not in node.peers}
        if not gone:
            return
        for (account, _name), sa in list(self.meta.state.streams.items()):
            stale = [p for p in (sa.group.peers if sa.group else ()) if p in gone]
            if stale:
                try:
                    self._remap(account, sa, *stale)
                except NotLeader:
                    return

    def _rescaled(self, old, cfg):
        """The group of a stream whose ``num_replicas`` changes: its peers
        kept first (its leader first of all when this server knows it), new
        ones placed beside them, or the first ones kept when it shrinks; the
        group's name stays (nats-server's processClusterUpdateStream)."""
        peers = list(old.group.peers)
        local = self.groups.get(old.group.name)
        if local is not None and local.leader in peers:
            peers.remove(local.leader)
            peers.insert(0, local.leader)
        chosen = select_peer_group(  # (a PlacementError is the API's 10005)
            self.peers, old.group.cluster or self.broker.config.cluster.name, cfg,
            existing=peers, replicas=cfg.num_replicas, meta_peers=sorted(self.meta.node.peers),
            ignore=self._unresponsive(), rng=self.rng, unique_tag=self._unique_tag,
            assignments=[sa.group.peers for sa in self.meta.state.streams.values() if sa.group])
        return RaftGroup(name=old.group.name, peers=list(chosen), store=old.group.store,
                         cluster=old.group.cluster, preferred=chosen[0])

    def _propose(self, op, sa):
        self.meta.propose(encode_meta_entry(op, sa))

    def _client(self, jsa):
        return ClientInfo(acc=jsa.account_name, server=self.broker.server_name,
                          cluster=self.broker.config.cluster.name)

    def _check_overlap(self, acc, cfg, skip=None):
        for sa in self.meta.state.account_streams(acc):
            if sa.name != skip and SR.subjects_overlap(cfg.subjects, sa.config.get("subjects") or []):
                raise E.stream_subject_overlap()

    def _stream_names(self, jsa, reply, body):
        try:
            want = (jsonbound.loads(body) or {}).get("subject") if body.strip() else None
        except (ValueError, AttributeError):
            want = None
        names = [sa.name for sa in self.meta.state.account_streams(jsa.account_name)
                 if not want or SR.subjects_overlap(sa.config.get("subjects") or [], [want])]
        jsa.respond(reply, {"type": api.TYPE % "stream_names_response", "total": len(names),
                            "offset": 0, "limit": 1024, "streams": names or None})

    def _stream_list(self, jsa, reply, body):
        """Asks each stream's host for its info (``STREAM.INFO``) and answers
        with what came back within the time allowed; the rest are
        ``missing``, as nats-server's clustered list reports them."""
        names = [sa.name for sa in self.meta.state.account_streams(jsa.account_name)]

        def answer(got):
            out = {"type": api.TYPE % "stream_list_response", "total": len(names), "offset": 0,
                   "limit": 256, "streams": [got[n] for n in names if n in got]}
            missing = [n for n in names if n not in got]
            if missing:
                out["missing"] = missing
            jsa.respond(reply, out)
        self._gather_infos(jsa, names, answer)

    def _account_info(self, jsa, reply):
        """``$JS.API.INFO`` for the whole cluster: the account's streams as
        the meta group knows them, their usage and consumers as their hosts
        report them (STREAM.INFO), its limits and API counts as here."""
        names = [sa.name for sa in self.meta.state.account_streams(jsa.account_name)]

        def answer(got):
            out = api.account_info(jsa, [], b"")
            mem = sto = consumers = 0
            for info in got.values():
                state = info.get("state") or {}
                consumers += state.get("consumer_count", 0)
                if (info.get("config") or {}).get("storage") == "memory":
                    mem += state.get("bytes", 0)
                else:
                    sto += state.get("bytes", 0)
            out.update({"memory": mem, "storage": sto, "streams": len(names), "consumers": consumers})
            jsa.respond(reply, dict({"type": api.TYPE % "account_info_response"}, **out))
        self._gather_infos(jsa, names, answer)

    def _gather_infos(self, jsa, names, answer):
        """``answer({name: info})`` with the STREAM.INFO of each of ``names``
        that its host gave within LIST_TIMEOUT."""
        account = jsa.broker
        inbox = b"_INBOX." + nuids.nuid().encode()
        got = {}
        done = []

        def finish():
            if done:
                return
            done.append(True)
            account.unsubscribe(sub)
            if timer.active():
                timer.cancel()
            answer(got)

        def on_info(s, subject, _reply, hdr_len, raw):
            try:
                info = jsonbound.loads(bytes(raw[hdr_len:]))
            except ValueError:
                return
            name = (info.get("config") or {}).get("name")
            if name in names and "error" not in info:
                info.pop("type", None)
                got[name] = info
            if len(got) == len(names):
                finish()

        sub = account.subscribe(inbox + b".*", on_info, hidden=True)
        timer = self.broker.reactor.callLater(LIST_TIMEOUT, finish)
        if not names:
            finish()
            return
        for i, name in enumerate(names):
            account.request(b"$JS.API.STREAM.INFO." + name.encode(), b"", reply=inbox + b".%d" % i)

    # -- what commits ---------------------------------------------------------------

    def _on_change(self, change):
        jsa = self.plugin.accounts.get(change.account)
        if jsa is None:
            return
        sa = change.assignment
        if not sa.group:
            return
        name = change.stream
        stream = jsa.streams.get(name)
        if self.id not in sa.group.peers:
            if change.kind == "stream_updated" and stream is not None:
                self._leave(jsa, stream)  # scaled down without this server
            return
        replicated = len(sa.group.peers) > 1
        if stream is not None and stream.group is not None and replicated \
                and sorted(stream.group.raft.peers) != sorted(sa.group.peers):
            # The meta leader moved the stream (a peer removed and replaced,
            # or a group grown or shrunk): this member's group takes the
            # new membership, its leader through the group's own log.
            stream.group.update_peers(sa.group)
            if not sa.subject:
                return  # (a peer removal: nothing else changed)
        body = b""
        # A replayed entry (a restart) has no one waiting for its answer.
        reply = sa.reply.encode() if sa.reply and not self.meta.replaying else None
        group = stream.group if stream is not None else None
        update = b"$JS.API.STREAM.UPDATE." + name.encode()
        if change.kind == "stream_added" or (change.kind == "stream_updated" and stream is None):
            subject = b"$JS.API.STREAM.CREATE." + name.encode()
            body = sa.config_json.encode()
            if replicated:
                # Made on every replica; its first leader answers. A replica
                # added to a running stream waits, an observer, for its data.
                api.handle(jsa, subject, None, body)
                self._start_group(jsa, name, sa, reply, scale_up=change.kind == "stream_updated")
                return
        elif change.kind == "stream_updated":
            if sa.subject.startswith("$JS.API.STREAM.CREATE."):
                # The same create again: answered with the stream's info.
                subject = b"$JS.API.STREAM.INFO." + name.encode()
            else:
                subject, body = update, sa.config_json.encode()
            if group is None and replicated and len(sa.group.peers) > 1:
                # Scaled up from one replica, this one: it answers, then leads
                # the new group and hands its peers a snapshot to catch up to.
                api.handle(jsa, update, reply, sa.config_json.encode())
                self._start_group(jsa, name, sa, None, lead_with_snapshot=True)
                return
            if group is not None and not replicated:
                # Scaled down to this replica alone: an R1 stream again.
                self._stop_group(group, remove=True)
                stream.group = None
                api.handle(jsa, update, reply, sa.config_json.encode())
                jsa.capture(stream)
                jsa.resume_consumers(stream)
                jsa.sourcing.resume(stream)
                return
            if group is not None and not self._answers(group, sa):
                reply = None
        elif change.kind == "stream_removed":
            if stream is None:
                return
            subject = b"$JS.API.STREAM.DELETE." + name.encode()
            if group is not None:
                if not self._answers(group, sa):
                    reply = None
                self._stop_group(group, remove=True)
                stream.group = None
        else:
            return
        api.handle(jsa, subject, reply, body)

    def _leave(self, jsa, stream):
        """This server's replica is no longer one of the stream's: its group
        and its copy go (the stream lives on its other replicas)."""
        if stream.group is not None:
            self._stop_group(stream.group, remove=True)
            stream.group = None
        log.info("JetStream cluster: stream '{a} > {s}' no longer has a replica here",
                 a=jsa.account_name, s=stream.name)
        jsa.delete_stream(stream)
        jsa.schedule_commit()

    def _answers(self, group, sa):
        """Does this replica answer a request about its stream? Its leader
        does, or the first member when the group has none."""
        if group.leader:
            return group.is_leader
        return sa.group.peers and sa.group.peers[0] == self.id

    def _start_group(self, jsa, name, sa, reply, scale_up=False, lead_with_snapshot=False):
        stream = jsa.streams.get(name)
        if stream is None or stream.group is not None:
            return
        group = StreamGroup(self, jsa, stream, sa.group, self.store_dir,
                            pending_reply=reply.decode("latin-1") if reply else None, sync=sa.sync,
                            scale_up=scale_up, lead_with_snapshot=lead_with_snapshot)
        stream.group = group
        jsa.sourcing.stop_remote(name)  # (its leader copies from now on)
        self.groups[group.name] = group
        # A follower until elected: no publishes taken, no consumers run.
        jsa.capture(stream)
        jsa.park_consumers(stream)
        try:
            group.start()
        except Exception as e:
            # This replica stays out of service (a follower that never
            # follows) rather than take the meta group down with it.
            log.failure("JetStream cluster: stream '{a} > {s}' ({g}) cannot start its replica",
                        a=jsa.account_name, s=name, g=group.name)
            jsa.stream_offline(name, "replica cannot start: %s" % e)

    def _stop_group(self, group, remove=False):
        self.groups.pop(group.name, None)
        group.stop(snapshot=not remove)
        if remove:
            shutil.rmtree(group.path, ignore_errors=True)


def _durable(jsa, stream, kind, subject, body):
    """Is this consumer request about a durable consumer (one each replica
    keeps)? Ephemeral consumers live with the leader alone."""
    parts = subject.split(b".")
    if kind != "consumer_create_response":
        c = stream.consumers.get(parts[5].decode()) if len(parts) > 5 else None
        return c is not None and bool(c.config.durable_name)
    if parts[2:4] == [b"CONSUMER", b"DURABLE"]:
        return True
    try:
        cfg = (jsonbound.loads(bytes(body)) or {}).get("config") or {}
        return bool(cfg.get("durable_name"))
    except (ValueError, AttributeError):
        return False


def _respond(account, reply, kind, error=None, **fields):
    if not reply:
        return
    out = {"type": api.TYPE % kind}
    if error is not None:
        out["error"] = error.to_json()
    out.update(fields)
    account.publish(reply, gojson.go_json_dumps(out).encode())
