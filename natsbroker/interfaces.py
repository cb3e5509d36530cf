"""The plugin API: the contracts between the broker and its plugins.

Every feature above the wire protocol is a plugin, the built-in ones included
(core pub/sub, JetStream, KV, Object Store, change feeds), and built-in plugins
use nothing but what is declared here. A third-party plugin can therefore do
anything a built-in one does.

A plugin is an object providing :class:`IBrokerPlugin`. It is found either
through Twisted's plugin system in the ``plugins`` drop-in package (a module in
``plugins/`` that exposes plugin objects at module level, like
``twisted/plugins``), or named in the configuration as ``module:object``.

On top of :class:`IBrokerPlugin`, a plugin may provide:

* :class:`IClientOps` to handle protocol ops from clients (this is how PUB,
  HPUB, SUB and UNSUB reach the core pub/sub plugin);
* :class:`IClientObserver` to hear about clients connecting and leaving;
* :class:`IShutdownObserver` to speak to clients once more before shutdown;
* :class:`ILameDuckObserver` to act when lame duck mode closes the listeners;
* :class:`ISystemEvents` to speak for the server in the system account;
* :class:`IInternalSubscriptions` to keep its own subscriptions off the
  monitoring pages;
* :class:`IVarzSection` and :class:`IHealthCheck` for a field of /varz and a
  say in /healthz;
* :class:`IStreamEvents` and :class:`IAccountJetStream` when it stores streams
  or runs JetStream.

The core finds all of these with ``broker.providers(I...)``, never by a
plugin's name, and a plugin finds other plugins' offers the same way.

Plugins talk to the broker through :class:`IBroker`. Messages are routed by
subject; a plugin that wants messages subscribes exactly as a client would
(like nats-server's internal system clients), so nothing in the core knows
about ``$JS.`` or any other plugin's subjects.

What a plugin may import from natsbroker (tests/test_seam.py holds the built-in
plugins to it): this module; ``natsbroker.discovery`` (``PluginFactory``, to
register a plugin); ``natsbroker.config.model`` (what :attr:`IBroker.config`
and the account limits are made of); ``natsbroker.fatal`` (``StartupError``,
to refuse to start); ``natsbroker.protocol.parser`` (the ``OP_*`` codes of
:class:`IClientOps`) and ``natsbroker.protocol.wire`` (headers, the wire's
encodings); ``natsbroker.subjects.sublist`` (``Subscription``, ``Sublist`` and
the subject helpers) and ``natsbroker.subjects.transform``; ``natsbroker.store``
(the message stores and their records); ``natsbroker.gocompat`` (Go's
formats: JSON, durations, RFC 3339 times); ``natsbroker.cluster.raft``
(nats-server's Raft: the sans-IO node, its wire, its storage, and a transport
that runs a node over an :class:`IBroker` account) and
``natsbroker.cluster.s2`` (nats-server's compression); and the small utilities
``natsbroker.jsonbound`` (bounded JSON decoding), ``natsbroker.nuid``,
``natsbroker.private`` (owner-only files), ``natsbroker.logs`` and
``natsbroker.ratelog``, and ``natsbroker.COMPAT_VERSION``. These are
libraries: they hold no server state, so using them gives a plugin no private
access. The connections, accounts, auth, monitoring, server and broker modules
are the core's own: plugins reach what they offer through :class:`IClient`
and :class:`IBroker` only.

Types used throughout: subjects, reply subjects, sids and payloads are
``bytes``. A message with headers travels as ``(hdr_len, raw)``: ``raw`` is the
``NATS/1.0`` header block immediately followed by the payload, ``hdr_len`` the
length of the header block (0 when there are no headers).
"""

from zope.interface import Attribute, Interface


class IBrokerPlugin(Interface):
    """A unit of broker functionality, started and stopped with the server."""

    name = Attribute("Short unique name, e.g. ``'pubsub'`` or ``'jetstream'``.")

    def start(broker):
        """Start the plugin; ``broker`` provides :class:`IBroker`.

        May return a Deferred; the server accepts clients only after every
        plugin's start has finished.
        """

    def stop():
        """Stop the plugin (server shutdown). May return a Deferred."""


class IClientOps(Interface):
    """A plugin that handles protocol ops sent by clients."""

    def client_ops(client):
        """Return ``{op_code: handler}`` for one new connection.

        ``op_code`` is an ``OP_*`` constant of :mod:`natsbroker.protocol.parser`;
        ``handler(op)`` receives the parser's op tuple. Called once per
        connection, so handlers can be methods bound to per-connection state;
        the connection builds its dispatch table from these once.

        An op belongs to the first plugin (in start order) that returns a
        handler for it; a later plugin's handler for the same op is refused
        (logged), never silently swapped in: to look at ops another plugin
        handles (refuse some PUBs, count them), provide
        :class:`IClientOpFilter`.

        ``OP_PUBS`` is a run of consecutive PUBs with one subject and reply,
        ``(OP_PUBS, subject, reply, payloads)``: the parser produces it only
        when the plugin that handles ``OP_PUB`` handles ``OP_PUBS`` too.
        """


class IClientObserver(Interface):
    """A plugin that wants to know when clients come and go."""

    def client_connected(client):
        """``client`` (an :class:`IClient`) has sent a valid CONNECT."""

    def client_closed(client):
        """``client`` has disconnected; drop everything held for it."""


class IShutdownObserver(Interface):
    """A plugin with something to tell clients when the server shuts down."""

    def server_shutting_down():
        """The server is shutting down, its clients are still connected.

        Called once, before any client is closed and before :meth:`IBrokerPlugin.stop`;
        whatever the plugin delivers now still reaches the clients (nats-server's
        ``Shutdown`` likewise tells JetStream pull requests first).
        """


class ILameDuckObserver(Interface):
    """A plugin with something to do when the server enters lame duck mode."""

    def lame_duck_entered():
        """Lame duck mode has closed the client listeners; the clients are
        still connected and are about to be told to leave. May return a
        Deferred, which the server waits for before it tells them.

        nats-server shuts JetStream down at this point, so that its stores are
        closed while the clients drain; a plugin that stops here must make its
        later :meth:`IBrokerPlugin.stop` (at shutdown) do nothing more."""


class ISystemEvents(Interface):
    """A plugin that speaks for the server in the system account (nats-server's
    internal system client, events.go): the core tells it what the server does.
    The core asks the first provider; without one, no events are sent."""

    def server_info():
        """The ``server`` block of a system-account message (nats-server's
        ``ServerInfo``), taking the next of its one sequence of numbers."""

    def lame_duck_event():
        """The server enters lame duck mode: ``$SYS.SERVER.<id>.LAMEDUCK``."""

    def shutdown_event():
        """The server shuts down: ``$SYS.SERVER.<id>.SHUTDOWN``, and then no more
        events (not even for the clients the shutdown closes)."""

    def system_exports(name):
        """The service exports the system account offers, as /accountz shows
        them for account ``name`` (``[]`` unless it is the system account)."""

    def system_imports(name):
        """The service imports every account gets from the system account
        (nats-server's ``registerSystemImports``), as /accountz shows them."""


class IInternalSubscriptions(Interface):
    """A plugin whose own subscriptions the monitoring pages do not show
    (nats-server's system client subscriptions are not in /subsz, /accountz
    or /varz's subscription counts)."""

    internal_subscriptions = Attribute(
        "``{account name: [Subscription]}`` of the plugin's own subscriptions.")


class IVarzSection(Interface):
    """A plugin that fills a field of /varz (and of the system account's VARZ)."""

    varz_field = Attribute(
        "The /varz field it fills, e.g. ``'jetstream'``. A field nats-server "
        "has keeps nats-server's place; any other comes after them.")

    def varz():
        """The field's value, a JSON-ready dict in nats-server's field order."""


class IRaftGroups(Interface):
    """A plugin that runs Raft groups (``natsbroker.cluster.raft``) lists
    them for ``/raftz``, as nats-server lists its registered Raft nodes."""

    def raft_groups():
        """``(account, group, status)`` for each group running here:
        ``account`` the name of the account its traffic is in, ``status``
        ``natsbroker.cluster.raft.raftz.group_status(node, ...)``."""


class IHealthReport(Interface):
    """A plugin that answers /healthz's own checks in nats-server's shape
    (JetStream's: ``js-enabled-only``, ``account``, ``stream``...), in
    /healthz and the system account's HEALTHZ. A plugin that only needs to
    say "unhealthy" provides :class:`IHealthCheck` instead."""

    def healthz(opts):
        """This plugin's health: ``{"status": "ok"}``, or a status other than
        ``"ok"`` with ``status_code`` (an HTTP code) and ``error``, or
        ``errors`` (a list of ``{"type": ..., "error": ...}``) when
        ``opts["details"]``. ``opts`` holds /healthz's query options
        (``js-enabled-only``, ``js-server-only``, ``details``, ``account``,
        ``stream``, ``consumer``...). The first provider not ``"ok"`` decides
        /healthz; when all are ok, the first one's answer is it."""


class BadRequest(Exception):
    """A bad monitoring option (:attr:`IBroker.monitor`): nats-server's error
    text, a 400 over HTTP and a 500 error in a system request's answer."""


class IMessageSink(Interface):
    """Whatever a subscription delivers to: a client or an internal subscriber.

    A sink that stands for another server sets ``remote = True``: a message
    delivered to one subject and shown under another (:meth:`IBroker.deliver`)
    then reaches it addressed to the deliver subject, the shown subject after
    an ``@`` at the end of the reply, as nats-server routes it."""

    def deliver(sub, subject, reply, hdr_len, raw):
        """Deliver one message matched by ``sub`` (a Subscription)."""


class IClient(IMessageSink):
    """A client connection as plugins see it."""

    cid = Attribute("Server-assigned client id (int), as in INFO's client_id.")
    opts = Attribute("The CONNECT options (a ConnectOptions).")
    subs = Attribute("``{sid: Subscription}`` of this client's subscriptions.")
    user = Attribute("The authenticated user name, or ``None``.")
    permissions = Attribute("The user's ResolvedPermissions, or ``None``.")
    verbose = Attribute("True when the client asked for ``+OK`` acknowledgements.")
    host = Attribute("Peer address.")
    port = Attribute("Peer port.")
    account = Attribute("The client's account, an :class:`IBroker` acting in it.")
    in_msgs = Attribute("Messages the client has published (nats-server's ``in_msgs``).")
    in_bytes = Attribute("Payload bytes the client has published (``in_bytes``).")
    out_msgs = Attribute("Messages delivered to the client (``out_msgs``).")
    out_bytes = Attribute("Payload bytes delivered to the client (``out_bytes``).")
    pedantic = Attribute("CONNECT's ``pedantic``: check subjects strictly.")
    headers = Attribute("CONNECT's ``headers``: the client takes HMSG.")
    closed = Attribute("True once the connection is closed (or closing).")
    max_subs = Attribute("How many subscriptions the client may hold (0: no limit).")
    start = Attribute("When the connection was accepted (``time.time()`` seconds).")
    rtt = Attribute("The last measured round trip to the client, in seconds.")
    auth_user_name = Attribute(
        "nats-server's getRawAuthUser: the nkey or user name the client sent in "
        "CONNECT, a JWT user's public key, ``[REDACTED]`` for a token, else ``\"\"`` "
        "(what /connz's ``authorized_user`` and ``$SYS`` client events show).")

    def remove_sub(sub):
        """Remove one of the client's subscriptions (UNSUB, or its max reached),
        from its account's Sublist and from :attr:`subs`."""

    def reply_violation(reply):
        """Refuse a publish whose reply subject is reserved, in nats-server's
        words (``-ERR`` to the client, an ERR line in the log, rate-limited)."""

    def check_deliveries():
        """From now on, check what this client's wildcard subscriptions
        receive against its subscribe deny list (call it when a deny entry
        overlaps one of them; other clients pay nothing for the check)."""

    def may_publish(subject):
        """Could this client publish to ``subject`` (bytes) itself? Its
        permissions' allow and deny lists decide (a reply grant of
        allow_responses is not used up, and does not count). A plugin
        acting for the client (a server-side API) asks this before every
        request it makes and every subject it publishes to for the client."""

    def may_subscribe(subject, queue=None):
        """Could this client subscribe to ``subject`` (in ``queue``) itself?"""

    def send(data):
        """Queue raw protocol bytes for this client (flushed once per turn)."""

    def send_ok():
        """Send ``+OK`` if the client is verbose."""

    def send_err(message, close=False):
        """Send ``-ERR 'message'``; with ``close`` the connection is closed."""

    def close(reason):
        """Close the connection (``reason`` appears in /connz as nats-server's reasons do)."""

    def permission_violation(subject, sid=None, queue=None):
        """Refuse a publish to ``subject`` (``sid`` None) or a subscription
        (with its ``sid`` and ``queue``): nats-server's -ERR to the client and
        its ERR line in the server log, rate-limited."""

    def log_prefix():
        """nats-server's prefix for log lines about this client
        (``host:port - cid:N`` and, once authenticated, its identity)."""


class IBroker(Interface):
    """What the broker offers to plugins (the broker, or one account of it)."""

    reactor = Attribute("The Twisted reactor (or a Clock in tests): use it for timers.")
    config = Attribute("The ServerConfig.")
    server_id = Attribute("This server's id (as in INFO).")
    server_name = Attribute("This server's name.")
    sublist = Attribute(
        "The Sublist: ``insert(sub)``, ``remove(sub)``, ``match(subject)``, "
        "``has_interest(subject)``, and ``watch(subject, callback)``/``unwatch(handle)`` "
        "to hear when a literal subject gains a subscriber.")
    stats = Attribute("Counters: in_msgs, in_bytes, out_msgs, out_bytes, slow_consumers.")
    route_source = Attribute(
        "The IClient whose message is being delivered right now, or ``None`` for an "
        "internal publish: valid inside a subscription callback (e.g. to audit who "
        "made an API request).")
    name = Attribute("The account's name (``'$G'`` for the broker itself).")
    is_system = Attribute("True for the system account.")
    account_config = Attribute(
        "The account's ``natsbroker.config.model.AccountConfig``, or ``None`` "
        "(``$G``, an implicit system account).")
    imports = Attribute(
        "The account's exports and imports wiring, or ``None`` when it has none: "
        "``sub_removed(sub)`` must hear of every subscription removed by hand.")
    accounts = Attribute("``{name: account}`` of every account (each an IBroker).")
    global_account = Attribute("The global account ``$G``.")
    system_account = Attribute("The system account, or ``None``.")
    host = Attribute("The host the client listener is bound to.")
    port = Attribute("The client port (the actual one once listening).")
    num_clients = Attribute("How many clients are connected (to this account, for an account).")
    start_time = Attribute("When the server started (``time.time()`` seconds).")
    monitor_endpoints = Attribute(
        "``{path: handler}`` of the monitoring endpoints plugins added "
        "(:meth:`add_monitor_endpoint`), to ask another plugin's endpoint.")
    monitor = Attribute(
        "The monitoring documents the HTTP endpoints serve (``varz()``, "
        "``connz(...)``, ``subsz(...)``, ``healthz(opts)``, ``accountz(...)``, "
        "``accstatz(...)``, ...; ``BadRequest`` for a bad option) and the process "
        "facts they hold (``memory()``, ``cores()``, ``subjects_collide``): what "
        "the system account's ``$SYS.REQ.SERVER`` requests answer with. Go's "
        "JSON and times are natsbroker.gocompat's.")

    def route_run(source, subject, payloads):
        """Route a run of PUBs with one subject and no reply (``payloads`` a
        list of bytes) as :meth:`route` would one by one; returns the number
        of deliveries. The core pub/sub plugin's path for ``OP_PUBS``."""

    def info_fields(client=None, connect_info=False):
        """The INFO fields a client gets, in nats-server's order (with those of
        :meth:`add_info_field`); ``client`` and ``connect_info`` select what
        that client's INFO says (its id, its address, ``connect_info``)."""

    def providers(iface):
        """The started plugins that provide ``iface``, in start order: how a
        plugin (and the core) finds what other plugins offer without naming them."""

    def route(source, subject, reply, hdr_len, raw):
        """Deliver a message to every interested subscription.

        The subject goes through the configured subject mappings first (as
        in nats-server, internal publishes too); the reply subject does not.
        ``source`` is the publishing IClient (or ``None`` for an internal
        publish); it decides echo and no-responders behaviour. Returns the
        number of subscriptions the message was delivered to.
        """

    def publish(subject, payload, reply=None, headers=None):
        """Publish a message from inside the server.

        ``headers`` is ``None``, a ready ``NATS/1.0`` block (bytes), or a
        mapping / list of ``(name, value)`` pairs.

        Such a message is not a request (see :meth:`serving_request`): use
        it for responses, events and deliveries; use :meth:`request` to ask
        another server-side service for something.
        """

    def request(subject, payload, reply=None, headers=None):
        """Send a request to a server-side service (another plugin's API, such
        as ``$JS.API``) as this server, answered on ``reply`` (an inbox the
        plugin subscribed to). Like :meth:`publish`, but the services it
        reaches see :meth:`serving_request` true.

        A plugin acting for a client must first check that the client could
        have made the request itself (:meth:`IClient.may_publish`): the
        service trusts the server."""

    def serving_request():
        """Is the message being delivered right now a request a service may
        act on? True for a message a client (or a route) published and for
        :meth:`request`; false for :meth:`publish` and :meth:`deliver`.

        A service answers only requests: a response, an advisory or a
        consumer's delivery that lands on its subject (a client chose it as a
        reply or deliver subject) is ignored, as nats-server's APIs ignore a
        message without a client's identity. Without this check a client
        could make the server publish to ``$JS.API.STREAM.DELETE.X`` for it."""

    def deliver(dest, subject, payload, reply=None, headers=None):
        """Publish to the subscribers of ``dest`` with ``subject`` on the MSG line
        (how JetStream hands a stored message to a consumer's deliver subject or
        pull request inbox). ``headers`` is ``None`` or a ready ``NATS/1.0``
        block. Returns the number of subscriptions reached."""

    def begin():
        """Start a batch: output to clients waits for the matching :meth:`end`.

        Outside a client's read (a timer, a commit), wrap a burst of publishes
        in begin/end so they are written at once instead of on a later turn.
        """

    def end():
        """End a batch started with :meth:`begin`; the outermost end flushes."""

    def subscribe(subject, callback, queue=None, hidden=False):
        """Subscribe internally; returns the Subscription.

        ``callback(sub, subject, reply, hdr_len, raw)`` is called for every
        matching message, within the reactor thread.

        With ``hidden`` the subscription is the plugin's own business, as
        nats-server's internal clients' are: /subsz, the subscription counts
        of /varz, /accountz and /accstatz leave it out.
        """

    def unsubscribe(sub):
        """Remove a subscription made with :meth:`subscribe`."""

    def add_info_field(key, value):
        """Add ``key: value`` to the INFO sent to every new client."""

    def forward_jetstream():
        """Send the accounts' ``$JS.API`` requests to the cluster's other
        JetStream servers through the system account, as a clustered server
        without JetStream does (a JetStream plugin that cannot serve them
        here). Returns the names of the accounts that got the import."""

    def store_path(name):
        """The absolute directory ``<store_dir>/<name>`` in which a plugin
        keeps its files (``name``: one path component, by convention the
        plugin's name, as ``jetstream`` and ``changefeed`` use theirs).
        ``store_dir`` is the server's (``store_dir`` in the config file,
        ``-sd``), ``./data`` when not given. Not created: make it (0700, with
        ``os.makedirs``) when there is something to keep."""

    def add_monitor_endpoint(path, handler):
        """Serve ``handler(request) -> dict`` (or a Deferred firing with one)
        as JSON at ``/path`` on the monitoring port.

        ``request`` is Twisted's ``IRequest``; ``request.query`` is its query
        string decoded as nats-server decodes its endpoints' (Go's
        ``URL.Query()``): ``{name: [value, ...]}``, str, blank values kept.
        Raising ``ValueError`` answers 400 with its text. Raises
        ``ValueError`` if the path is taken (a built-in endpoint such as
        ``healthz``, or another plugin's): provide :class:`IHealthCheck` to
        take part in ``/healthz``."""

    def clients():
        """The connected clients, an iterable of IClient."""

    def plugin(name):
        """The started plugin called ``name``, or ``None``."""

    def account(name):
        """The account called ``name``, or ``None``: an IBroker whose
        ``route``/``publish``/``deliver``/``subscribe``/``unsubscribe``/
        ``sublist`` act inside that account (subjects never cross accounts
        except through exports and imports). The broker itself acts in the
        global account ``$G``; ``broker.accounts`` maps every name to its
        account and ``broker.system_account`` is the system account."""

    def lookup_account(name):
        """The account called ``name`` as :meth:`account` finds it, or, in
        operator mode, made from its JWT if the account resolver has one
        (nats-server's ``lookupAccount``); ``None`` otherwise. How a plugin
        brings back what it stored for an account no client has used yet
        (JetStream restores the accounts it finds on disk at its start)."""


class IStreamEvents(Interface):
    """Offered by a plugin that stores streams (JetStream): a way to watch
    every mutation of them and to read them back, for plugins such as the
    change feed. Reach it with ``broker.providers(IStreamEvents)``."""

    def add_stream_observer(observer, batched=False):
        """Call ``observer(event)`` with a ``natsbroker.store.base.StreamEvent``
        for every stream mutation, in the reactor thread, as it is staged (the
        group commit that makes it durable follows in the same turn).

        With ``batched``, call ``observer(events)`` instead, once per group
        commit, after it: ``events`` is the list of the mutations it made
        durable, in order (the observer may keep the list). One call per
        commit instead of one per message: what an observer that only hands
        the events on (to a file, a process, a queue) should use."""

    def remove_stream_observer(observer):
        """Stop calling ``observer`` (batched or not)."""

    def stream_names():
        """Names of the streams, sorted."""

    def stream_created(name):
        """The creation time (ns) of stream ``name``, or ``None`` if there is none."""

    def read_stream(name, seq):
        """The first stored message (a ``StoredMsg``) of stream ``name`` with a
        sequence of at least ``seq``, or ``None``."""


class IAccountJetStream(Interface):
    """Offered by a plugin that runs JetStream (natsbroker/jetstream): JetStream
    turned on, changed and off for one account while the server runs, as
    nats-server's ``configJetStream`` does when an account JWT is loaded,
    updated or deleted. Operator mode (natsbroker/auth/jwt/operator.py) calls
    it; reach it with ``broker.providers(IAccountJetStream)``.

    ``account`` is an account as :meth:`IBroker.account` returns it.
    ``limits`` maps a tier to a ``natsbroker.config.model.AccountJetStream``: the
    tier ``""`` holds the limits of every stream; ``"R1"``, ``"R3"``... those
    of the streams with that many replicas (an account JWT's
    ``tiered_limits``). May be called before the plugin has started: it then
    applies them when it starts."""

    def enable_account(account, limits):
        """Give ``account`` JetStream with ``limits``, its streams restored
        from the store it had (an account that has it already takes the new
        limits, as :meth:`update_account`)."""

    def update_account(account, limits):
        """New limits for an account with JetStream: what it stores stays,
        what the new limits refuse is refused from now on."""

    def disable_account(account, answer=True):
        """No JetStream for ``account`` (any more): its streams and consumers
        stop, their stores stay on disk for a later :meth:`enable_account`.
        With ``answer`` its ``$JS.API`` requests get 503/10039 "JetStream not
        enabled for account" (unless it imports ``$JS.API`` from another
        account); without, nothing answers them (a deleted account JWT:
        nats-server takes all the account's service imports away)."""

    def enabled_for(name):
        """Does the account called ``name`` have JetStream?"""


class IBrokerPluginFactory(Interface):
    """What the ``plugins`` drop-in package exposes: makes a plugin per server.

    Discovery finds factories, not plugins, so that every server in a process
    (tests run many) gets its own plugin instance.
    """

    name = Attribute("The plugin's name.")
    order = Attribute("Start order (lower first); the core pub/sub plugin is 0.")
    config_block = Attribute(
        "Optional: the name of the top-level config file block the plugin owns, e.g. "
        "``'myplugin'`` for ``myplugin { ... }``. Its value, as plain dicts, lists, "
        "strings, numbers and bools, is ``config.plugin_config['myplugin']`` (absent when "
        "the file has no such block). Without a plugin claiming it, such a block is "
        "refused as nats-server refuses an unknown field. Also read from a plugin "
        "object or class named in the config's ``plugins``. A name the server "
        "itself uses is not the plugin's.")

    def make_plugin(config):
        """Return an :class:`IBrokerPlugin` for ``config``, or ``None`` if disabled."""


class IClientOpFilter(Interface):
    """A plugin that sees client ops before the plugin handling them does
    (:class:`IClientOps`; PUB, HPUB, SUB and UNSUB go to the core pub/sub
    plugin), and may refuse or change them: a publish filter, an audit, a
    message counter.

    Filters chain: every filtering plugin's filter for an op runs, in start
    order, then the op's handler. A server without filters dispatches ops
    straight to their handlers (the filters cost nothing until one exists)."""

    def client_op_filters(client):
        """Return ``{op_code: op_filter}`` for one new connection (an
        :class:`IClient`), like :meth:`IClientOps.client_ops`.

        ``op_filter(op)`` returns the op to pass on (``op`` itself or a tuple
        of the same shape) or ``None`` when it consumed it: then nothing else
        sees it, and the filter has answered the client itself if it had to
        (e.g. :meth:`IClient.permission_violation` for nats-server's
        ``-ERR 'Permissions Violation for Publish to "x"'``).

        The parser makes runs (``OP_PUBS``, see :class:`IClientOps`) only
        while every plugin that filters ``OP_PUB`` filters ``OP_PUBS`` too,
        so an ``OP_PUB`` filter alone sees every PUB one by one.
        """


class IHealthCheck(Interface):
    """A plugin that takes part in ``/healthz`` (and the ``healthz`` of
    ``/metrics``): the server is healthy only while every such plugin is."""

    def health_check():
        """``None`` (or ``""``) when healthy, otherwise a short text saying
        what is wrong. Called in the reactor thread for every plain
        ``/healthz`` request (not those limited to JetStream with
        ``js-enabled-only``, ``js-server-only``, ``js-meta-only`` or an
        ``account``), so it must be quick. A failure answers 503
        ``{"status": "unavailable", "error": "<name>: <text>"}``, with
        ``details=true`` one ``{"type": "PLUGIN", "error": ...}`` per failed
        plugin; a check that raises counts as failed."""


class IAccountObserver(Interface):
    """A plugin that follows the accounts: one that serves a subject in
    every account subscribes in each as it appears.

    ``account`` is an account as :meth:`IBroker.account` returns it. Called
    in the reactor thread, only once the plugin has started."""

    def account_added(account):
        """``account`` exists: called for every account there is right after
        the plugin's :meth:`IBrokerPlugin.start` has finished (``$G``, the
        system account, those of the config file, and any made before then),
        then for every account made while the server runs (operator mode:
        an account JWT loaded when a user of it logs in or a lookup needs
        it)."""

    def account_updated(account):
        """``account``'s JWT was replaced (operator mode): its limits,
        imports, exports or mappings may have changed."""

    def account_removed(account):
        """``account``'s JWT was deleted from the resolver (operator mode):
        its clients are gone and no one logs in to it any more, as in
        nats-server. The account object stays; a later JWT for it comes
        back through :meth:`account_updated` or :meth:`account_added`."""


class IRouteObserver(Interface):
    """A plugin that follows the cluster's routes (nats-server's own
    JetStream learns its peers' names and runtimes from them).

    Called in the reactor thread."""

    def route_registered(info):
        """A route to another server is up; ``info`` is the INFO that server
        sent on it (a dict in nats-server's field names: ``server_id``,
        ``server_name``, ``version``, ``go``, ``jetstream``, ...)."""
