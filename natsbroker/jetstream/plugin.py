"""The JetStream plugin: streams on a message store, the $JS.API, durable acks.

This module is the server-wide plugin (:class:`JetStream`); one account's
JetStream, with the publish path and group commit, is natsbroker/jetstream/
account.py (:class:`JetStreamAccount`), and /jsz, /varz's field and /healthz's
part are natsbroker/jetstream/jsz.py.

It is an ordinary broker plugin: it subscribes to ``$JS.API.>`` and to every
stream's subjects through ``IBroker.subscribe`` and answers with
``IBroker.publish``; nothing in the core knows about JetStream.

Accounts: :class:`JetStream` (the plugin) runs one :class:`JetStreamAccount`
per account with JetStream -- the global account when no accounts are
configured, else every configured account with a ``jetstream`` setting, never
the system account (nats-server's ``enableJetStreamAccounts``). Each is given
its :class:`~natsbroker.accounts.account.Account` as its broker, so its streams,
consumers, API subscriptions and advisories live in that account's subject
space, with its own stores and the account's limits (natsbroker/jetstream/
limits.py). The global account's store is ``<store_dir>/jetstream`` as it
always was; another account's is ``<store_dir>/jetstream/accounts/<name>``
(:func:`account_dir`: the name made filesystem-safe). An account without
JetStream gets nats-server's answers on ``$JS.API.>``: 503/10039 "JetStream
not enabled for account".

Accounts made at run time (operator mode: account JWTs) get, lose or change
JetStream through :class:`~natsbroker.interfaces.IAccountJetStream`
(``enable_account``/``update_account``/``disable_account``), as nats-server's
``configJetStream`` when an account is registered or its JWT changes. A
disabled account's streams stop with their stores left on disk; enabled
again, they come back. At start, the accounts found under
``jetstream/accounts/`` are looked up (``IBroker.lookup_account``: from the
resolver in operator mode) so that their streams run before any of their
clients connects, as nats-server's ``configAllJetStreamAccounts`` does.

Durability: every write of a reactor turn is staged in the store; one
``commit`` (a synced LevelDB write batch per stream) runs at the end of the
turn, and only then are the acks of that turn sent (group commit). Each
account commits its own stores: the sync is per stream anyway, so one commit
across accounts would save no fsync.

Change feeds (``IStreamEvents``) see the global account's streams under their
names and another account's as ``<account>/<stream>`` (a stream name never
holds ``/``).
"""

import os

from twisted.logger import Logger
from zope.interface import implementer

from natsbroker.gocompat import gojson
from natsbroker.interfaces import (
    IAccountJetStream,
    IBrokerPlugin,
    IHealthReport,
    ILameDuckObserver,
    IRaftGroups,
    IRouteObserver,
    IShutdownObserver,
    IStreamEvents,
    IVarzSection,
)
from natsbroker.jetstream import api, errors as E, limits as L
from natsbroker.jetstream.account import API_PREFIX, GLOBAL_ACCOUNT, JetStreamAccount, account_dir, dir_account_name
from natsbroker.jetstream.jsz import JetStreamMonitoring

log = Logger()


@implementer(IBrokerPlugin, IStreamEvents, IAccountJetStream, IShutdownObserver,
             ILameDuckObserver, IVarzSection, IHealthReport, IRouteObserver, IRaftGroups)
class JetStream(JetStreamMonitoring):
    """The JetStream plugin: a :class:`JetStreamAccount` per account with
    JetStream, nats-server's answer in the others, and what is server-wide
    (INFO ``jetstream``, /jsz, /varz, /healthz, the server's storage limits,
    change-feed observers).

    With JetStream in the global account only (no accounts configured) the
    plugin also answers for it as the single-account plugin did
    (``streams``, ``file_store``, ``sourcing``...: that account's)."""

    name = "jetstream"
    varz_field = "jetstream"

    def __init__(self, config):
        self.config = config
        self.js = config.jetstream
        self.broker = None
        self.accounts = {}  # account name -> JetStreamAccount
        self._observers = []  # IStreamEvents observers
        self._batch_observers = []  # ... called once per commit with its events
        self._unavailable = {}  # account name -> (account, [Subscription]) answering 10039
        self._told = {}  # account name -> (account, limits; None or False: disabled) before start
        # In a cluster: the meta group and who answers what (cluster/controller.py).
        self.cluster = None
        self._started = False
        self._stopped = False  # (once: in lame duck mode, or at shutdown)
        self.store_dir = None
        self.root = None

    # -- the global account's engine, for single-account callers -------------

    @property
    def global_engine(self):
        return self.accounts.get(GLOBAL_ACCOUNT)

    streams = property(lambda self: self.global_engine.streams)
    file_store = property(lambda self: self.global_engine.file_store)
    memory_store = property(lambda self: self.global_engine.memory_store)
    offline = property(lambda self: self.global_engine.offline)
    sourcing = property(lambda self: self.global_engine.sourcing)
    batches = property(lambda self: self.global_engine.batches)
    fastbatches = property(lambda self: self.global_engine.fastbatches)

    def commit(self):
        for engine in self.accounts.values():
            engine.commit()

    # -- lifecycle -------------------------------------------------------------

    def start(self, broker):
        import tempfile

        from natsbroker.fatal import StartupError, path_error
        self.broker = broker
        system = getattr(broker, "system_account", None)
        scfg = getattr(system, "account_config", None)
        if scfg is not None and scfg.jetstream is not None:
            raise StartupError("Not allowed to enable JetStream on the system account")
        root = self.root = broker.store_path("jetstream")
        self.store_dir = os.path.dirname(root)
        # nats-server's checks, and its words for a store it cannot use
        # (naming the directory as it was given).
        given = os.path.normpath(os.path.join(self.js.store_dir, "jetstream")) if self.js.store_dir else root
        try:
            os.stat(given)
        except FileNotFoundError:
            try:
                # 0700 as nats-server's (natsbroker.private): message data.
                from natsbroker.private import make_dirs
                make_dirs(given)
            except OSError as e:
                raise StartupError("Can't start JetStream: could not create storage directory - "
                                   + path_error("mkdir", e.filename, e)) from None
        except OSError:
            raise StartupError("Can't start JetStream: storage directory is not a directory") from None
        else:
            if not os.path.isdir(root):
                raise StartupError("Can't start JetStream: storage directory is not a directory")
            try:
                fd, probe = tempfile.mkstemp(prefix="_test_", dir=root)
                os.close(fd)
                os.unlink(probe)
            except OSError:
                raise StartupError("Can't start JetStream: storage directory is not writable") from None
        if broker.config.cluster.port:
            # Made before the accounts' stores open (a replicated stream found
            # there waits for its group: JetStreamAccount._awaits_group),
            # started once they have.
            from natsbroker.jetstream.cluster.controller import ClusterController
            self.cluster = ClusterController(self)
        granted = []  # limits of the accounts enabled so far
        for account, limits in self._enabled_accounts(broker):
            name = getattr(account, "name", GLOBAL_ACCOUNT)
            err = self._insufficient(limits, granted)
            if err is not None:
                raise StartupError("Can't start JetStream: Error enabling jetstream on configured "
                                   "accounts: %s (%d)" % (err.description, err.err_code))
            granted.append(limits)
            # The global account's engine talks to the broker itself: it acts
            # in $G with no Account.__getattr__ hop for reactor, begin/end...
            view = broker if account is getattr(broker, "global_account", None) else account
            engine = JetStreamAccount(self, view, limits, account_dir(root, name))
            self.accounts[name] = engine
            engine.start()
        for account in list(getattr(broker, "accounts", {}).values()):
            if account.name not in self.accounts and account.name not in self._told:
                self._set_unavailable(account)
        broker.add_info_field("jetstream", True)
        broker.add_monitor_endpoint("jsz", self.jsz)
        self._started = True
        # Accounts operator mode told us of before we started, then the ones
        # with a store here that nobody has used yet.
        told, self._told = self._told, {}
        for account, limits in told.values():
            if limits is None or limits is False:
                self.disable_account(account, answer=limits is None)
            else:
                self.enable_account(account, limits)
        self._restore_stored_accounts()
        if self.cluster is not None:
            self.cluster.start(broker, root)
        log.info("Starting JetStream: {n} stream(s) in {dir}",
                 n=sum(e.stream_count() for e in self.accounts.values()), dir=root)

    def _restore_stored_accounts(self):
        """nats-server's configAllJetStreamAccounts: every account with a
        store directory is looked up (the resolver's JWT, in operator mode),
        which enables its JetStream if its limits say so."""
        lookup = getattr(self.broker, "lookup_account", None)
        accounts_dir = os.path.join(self.root, "accounts")
        if lookup is None or not os.path.isdir(accounts_dir):
            return
        known = getattr(self.broker, "accounts", {})
        for entry in sorted(os.listdir(accounts_dir)):
            name = dir_account_name(entry)
            if name is None or name in self.accounts or name in known:
                continue
            try:
                lookup(name)
            except Exception:
                # One account that cannot be loaded never stops the others.
                log.failure("JetStream: account {a} could not be looked up", a=name)

    def server_shutting_down(self):
        """Waiting pull requests hear 409 "Server Shutdown" (see Consumer.signal_shutdown)."""
        for engine in self.accounts.values():
            for stream in engine.streams.values():
                for consumer in stream.consumers.values():
                    consumer.signal_shutdown()

    def lame_duck_entered(self):
        """As nats-server: JetStream shuts down on entering lame duck mode,
        its stores closed while the clients are told to leave."""
        self.stop()

    def stop(self):
        if self._stopped:
            return  # in lame duck mode already
        self._stopped = True
        log.info("Initiating JetStream Shutdown...")  # nats-server's words
        try:
            self._stop()
        except Exception:
            log.failure("plugin {name} failed to stop", name=self.name)
        log.info("JetStream Shutdown")

    def raft_groups(self):
        """IRaftGroups: the cluster's meta and stream groups on this server."""
        return self.cluster.raft_groups() if self.cluster is not None else []

    def route_registered(self, info):
        """IRouteObserver: the cluster layer watches who joins."""
        if self.cluster is not None:
            self.cluster.route_registered(info)

    def _stop(self):
        self._started = False
        if self.cluster is not None:
            self.cluster.stop()
        for engine in self.accounts.values():
            engine.stop()
        for account, subs in self._unavailable.values():
            for sub in subs:
                account.unsubscribe(sub)
        self._unavailable = {}

    # -- IAccountJetStream: accounts at run time --------------------------------

    def enable_account(self, account, limits):
        """nats-server's ``EnableJetStream`` for an account (its limits by
        tier); one that has JetStream takes the new limits."""
        name = account.name
        if not self._started:
            self._told[name] = (account, limits)
            return
        if name in self.accounts:
            self.update_account(account, limits)
            return
        tiers = limits if isinstance(limits, dict) else {"": limits}
        if getattr(account, "is_system", False):
            log.error("Error configuring jetstream for account [{a}]: jetstream can not be "
                      "enabled on the system account", a=name)
            return
        err = self._insufficient(_tier_totals(tiers), [_tier_totals(e.tiers)
                                                        for e in self.accounts.values()])
        if err is not None:
            log.error("Error configuring jetstream for account [{a}]: {e}", a=name,
                      e=err.description)
            self._set_unavailable(account)
            return
        self._drop_unavailable(name)
        engine = JetStreamAccount(self, account, tiers, account_dir(self.root, name))
        self.accounts[name] = engine
        engine.start()
        log.debug("Enabled JetStream for account {a}: {n} stream(s)", a=name,
                  n=engine.stream_count())

    def update_account(self, account, limits):
        """nats-server's ``UpdateJetStreamLimits``: new limits, the streams
        kept (even over them: only what comes next is refused)."""
        name = account.name
        if not self._started:
            self._told[name] = (account, limits)
            return
        engine = self.accounts.get(name)
        if engine is None:
            self.enable_account(account, limits)
            return
        tiers = limits if isinstance(limits, dict) else {"": limits}
        # Only what the new limits add must fit next to the other accounts.
        others = [_tier_totals(e.tiers) for e in self.accounts.values() if e is not engine]
        err = self._insufficient(_tier_totals(tiers), others)
        if err is not None:
            log.error("Error configuring jetstream for account [{a}]: {e}", a=name,
                      e=err.description)
            return
        engine.set_limits(tiers)

    def disable_account(self, account, answer=True):
        """nats-server's ``DisableJetStream`` for an account, and (``answer``)
        its answer there from now on (503/10039). The stores stay on disk."""
        name = account.name
        if not self._started:
            self._told[name] = (account, None if answer else False)
            return
        engine = self.accounts.pop(name, None)
        if engine is not None:
            engine.stop()
            log.debug("Disabled JetStream for account {a}", a=name)
        if answer:
            self._set_unavailable(account)
        else:
            self._drop_unavailable(name)

    def _set_unavailable(self, account):
        """``account`` has no JetStream: its ``$JS.API`` requests get 10039,
        unless one of its imports serves ``$JS.API.INFO`` (nats-server's
        ``serviceImportShadowed``; checked anew each time, as its imports
        change with its JWT)."""
        self._drop_unavailable(account.name)
        if _imports_js_api(account) or (self.cluster is not None and self.cluster.disabled):
            return
        subs = [account.subscribe(p + b">", self._unavailable_cb(account))
                for p in self._api_prefixes()]
        self._unavailable[account.name] = (account, subs)

    def left_cluster(self):
        """The cluster's JetStream is nats-server's (cluster.controller.disable):
        their servers answer the accounts this one has no JetStream for."""
        for name in list(self._unavailable):
            self._drop_unavailable(name)

    def _drop_unavailable(self, name):
        held = self._unavailable.pop(name, None)
        if held is not None:
            account, subs = held
            for sub in subs:
                account.unsubscribe(sub)

    def _api_prefixes(self):
        if self.js.domain:
            return [API_PREFIX, b"$JS.%s.API." % self.js.domain.encode()]
        return [API_PREFIX]

    @staticmethod
    def _enabled_accounts(broker):
        """(account, limits) of the accounts with JetStream, as nats-server's
        ``enableJetStreamAccounts``: the global account when it and the system
        account are the only ones, else the accounts configured with it."""
        accounts = getattr(broker, "accounts", None)
        if accounts is None:
            return [(broker, L.UNLIMITED)]
        if getattr(broker.config, "operator_mode", False):
            # Never $G with trusted operators (nats-server's globalAccountOnly
            # is false): JWT accounts are enabled as they are loaded.
            return []
        gacc, system = broker.global_account, broker.system_account
        if all(a is gacc or a is system for a in accounts.values()):
            return [(gacc, L.UNLIMITED)]
        out = []
        for account in accounts.values():
            cfg = account.account_config
            if cfg is not None and cfg.jetstream is not None and not account.is_system:
                out.append((account, cfg.jetstream))
        return out

    def _insufficient(self, limits, granted):
        """nats-server's ``sufficientResources`` for one more account: its
        memory and file limits next to the streams' reservations and to the
        accounts enabled before it, against the server's maximums."""
        for storage, field, error in (("memory", "max_memory", E.memory_resources_exceeded),
                                      ("file", "max_file", E.storage_resources_exceeded)):
            server_max = self.max_bytes(storage)
            if server_max < 0:
                continue
            want = max(getattr(limits, field), 0)
            if self.reserved_bytes(storage) + want > server_max:
                return error()
            if sum(max(getattr(g, field), 0) for g in granted) + want > server_max:
                return error()
        return None

    def _unavailable_cb(self, account):
        def on_api(sub, subject, reply, hdr_len, raw):
            local = api.local_subject(subject, self.js.domain)
            answer = api.NO_RESPONDERS if local is None else api.not_enabled(
                local, raw[hdr_len:])
            if answer is None or not reply:
                return
            if answer is api.NO_RESPONDERS:
                source = self.broker.route_source
                if source is not None and getattr(source, "no_responders", False):
                    account.deliver(reply, reply, b"", None,
                                    b"NATS/1.0 503\r\nNats-Subject: %s\r\n\r\n" % (
                                        local or subject))
                return
            account.publish(reply, gojson.go_json_dumps(answer).encode())
        return on_api

    # -- the server's storage --------------------------------------------------

    def max_bytes(self, storage):
        """The server's maximum for ``storage`` (-1: none)."""
        return self.js.max_memory_store if storage == "memory" else self.js.max_file_store

    def reserved_bytes(self, storage):
        """``max_bytes`` reserved by every account's ``storage`` streams."""
        return sum(e.reservation(storage) for e in self.accounts.values())

    def used_bytes(self, storage):
        return sum(e.used_bytes(storage) for e in self.accounts.values())

    # -- IStreamEvents -----------------------------------------------------------

    def add_stream_observer(self, observer, batched=False):
        (self._batch_observers if batched else self._observers).append(observer)
        for engine in self.accounts.values():
            engine.observers_changed()

    def remove_stream_observer(self, observer):
        if observer in self._batch_observers:
            # Its last events first: the commit they wait for runs now.
            for engine in self.accounts.values():
                if engine._events:
                    engine.commit()
            self._batch_observers.remove(observer)
        if observer in self._observers:
            self._observers.remove(observer)
        for engine in self.accounts.values():
            engine.observers_changed()

    def _stream(self, qname):
        account, _, name = qname.rpartition("/")
        engine = self.accounts.get(account or GLOBAL_ACCOUNT)
        if engine is None or engine.prefix != (account + "/" if account else ""):
            return None
        return engine.streams.get(name)

    def stream_names(self):
        return sorted(e.prefix + n for e in self.accounts.values() for n in e.streams)

    def stream_created(self, name):
        s = self._stream(name)
        return s.created if s is not None else None

    def read_stream(self, name, seq):
        s = self._stream(name)
        return s.store.load_next(seq) if s is not None else None

    # -- IAccountJetStream: accounts at run time (continued) ---------------------

    def enabled_for(self, account):
        """Does the account called ``account`` have JetStream?"""
        return account in self.accounts


def _imports_js_api(account):
    """Does the account import ``$JS.API.INFO`` from another account (then
    that account answers; nats-server's ``serviceImportShadowed``)? Its
    config file imports, or the service imports wired at run time (an
    account JWT's)."""
    from natsbroker.subjects.sublist import subject_matches
    cfg = getattr(account, "account_config", None)
    for imp in getattr(cfg, "imports", None) or ():
        local = getattr(imp, "to", "") or getattr(imp, "subject", "")
        if type(imp).__name__ == "ServiceImport" and local and subject_matches(
                local.encode(), b"$JS.API.INFO"):
            return True
    wired = getattr(account, "imports", None)
    for sub in getattr(wired, "service_subs", None) or ():
        if subject_matches(sub.subject, b"$JS.API.INFO"):
            return True
    return False


def _tier_totals(tiers):
    """An account's memory and file limits over all its tiers, as
    nats-server's ``sufficientResources`` adds them up."""
    from natsbroker.config.model import AccountJetStream
    return AccountJetStream(max_memory=sum(max(t.max_memory, 0) for t in tiers.values()),
                            max_file=sum(max(t.max_file, 0) for t in tiers.values()))
