"""The example plugin: everything a third-party plugin is likely to need,
each through the public API.

* ``example.info`` answers in every account (IAccountObserver: it subscribes
  in each account as it appears, hidden from /subsz as the server's own
  subscriptions are);
* every message clients publish is counted per account (IClientOpFilter on
  PUB and HPUB, which passes them on to the core pub/sub plugin);
* publishes to the subjects of ``example { deny_publish: [...] }`` are
  refused as a permission violation (the same filter);
* ``/examplez`` on the monitoring port shows the counts (``?account=A`` for
  one account: ``request.query``);
* the counts are kept across restarts in the plugin's store directory
  (``broker.store_path``), saved every ``save_interval`` seconds and at stop;
* ``/healthz`` fails while the counts cannot be saved (IHealthCheck).
"""

import json
import os

from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from zope.interface import implementer

from natsbroker.discovery import PluginFactory
from natsbroker.interfaces import IAccountObserver, IBrokerPlugin, IClientOpFilter, IHealthCheck
from natsbroker.protocol.parser import OP_HPUB, OP_PUB
from natsbroker_example.subjects import matches

log = Logger()

NAME = "example"
SERVICE_SUBJECT = "example.info"


@implementer(IBrokerPlugin, IAccountObserver, IClientOpFilter, IHealthCheck)
class ExamplePlugin:
    name = NAME

    def __init__(self, config):
        block = config.plugin_config.get(NAME, {})  # example { ... } in the config file
        self.deny = [s.encode() for s in block.get("deny_publish", [])]
        self.save_interval = float(block.get("save_interval", 5))
        self.counts = {}  # account name -> messages its clients published
        self.refused = 0
        self.starts = 0
        self.save_error = None
        self.broker = None
        self._saver = None
        self._subs = []

    # -- IBrokerPlugin ---------------------------------------------------------

    def start(self, broker):
        self.broker = broker
        self.dir = broker.store_path(NAME)
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        self.state_file = os.path.join(self.dir, "state.json")
        self._load()
        self.starts += 1
        self.save()
        broker.add_monitor_endpoint("examplez", self.examplez)
        self._saver = LoopingCall(self.save)
        self._saver.clock = broker.reactor
        self._saver.start(self.save_interval, now=False)

    def stop(self):
        if self._saver is not None and self._saver.running:
            self._saver.stop()
        for account, sub in self._subs:
            account.unsubscribe(sub)
        self._subs = []
        self.save()

    # -- IAccountObserver: the service, in every account -----------------------

    def account_added(self, account):
        def answer(sub, subject, reply, hdr_len, raw):
            if reply and account.serving_request():
                account.publish(reply, json.dumps(self.info(account.name)).encode())
        self._subs.append((account, account.subscribe(SERVICE_SUBJECT, answer, hidden=True)))

    def account_updated(self, account):
        pass

    def account_removed(self, account):
        pass

    def info(self, account_name):
        return {"account": account_name, "messages": self.counts.get(account_name, 0),
                "total": sum(self.counts.values()), "refused": self.refused,
                "starts": self.starts}

    # -- IClientOpFilter: count, and refuse the denied subjects ----------------

    def client_op_filters(self, client):
        counts = self.counts
        deny = self.deny

        def on_publish(op):
            subject = op[1]
            for pattern in deny:
                if matches(pattern, subject):
                    self.refused += 1
                    client.permission_violation(subject)  # nats-server's -ERR
                    return None  # consumed: pub/sub never sees it
            name = client.account.name
            counts[name] = counts.get(name, 0) + 1
            return op  # on to the core pub/sub plugin

        # (no OP_PUBS filter: the server then hands every PUB over one by one)
        return {OP_PUB: on_publish, OP_HPUB: on_publish}

    # -- monitoring ------------------------------------------------------------

    def examplez(self, request):
        accounts = request.query.get("account")
        if accounts:
            return {"accounts": {a: self.info(a) for a in accounts}}
        return {"accounts": {a: self.info(a) for a in sorted(self.counts)},
                "state_file": self.state_file}

    def health_check(self):
        if self.save_error is not None:
            return "cannot save state: %s" % self.save_error
        return None

    # -- state kept across restarts --------------------------------------------

    def _load(self):
        try:
            with open(self.state_file) as f:
                state = json.load(f)
        except FileNotFoundError:
            return
        self.counts = dict(state.get("counts", {}))
        self.refused = int(state.get("refused", 0))
        self.starts = int(state.get("starts", 0))

    def save(self):
        tmp = self.state_file + ".tmp"
        try:
            with open(tmp, "w") as f:
                json.dump({"counts": self.counts, "refused": self.refused,
                           "starts": self.starts}, f)
            os.replace(tmp, self.state_file)  # whole or not at all
        except OSError as e:
            if self.save_error is None:
                log.error("example plugin: cannot save {path}: {e}", path=self.state_file, e=e)
            self.save_error = "%s: %s" % (e.strerror or e, self.state_file)
            return
        self.save_error = None


# What the drop-in module exposes: a factory, so that every server in a
# process gets its own plugin; it owns the config file's example { } block.
factory = PluginFactory(NAME, ExamplePlugin, order=100, config_block=NAME)
