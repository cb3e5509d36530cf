"""The server's configuration model.

Field names are nats-server's option names (the keys of its config file and of
/varz), so a nats-server config file maps onto this model key for key. Times are
seconds (floats); sizes are bytes.
"""

import attrs

DEFAULT_PORT = 4222
DEFAULT_HTTP_PORT = 8222
RANDOM_PORT = -1


@attrs.define
class Permission:
    """Allow/deny subject lists for publish or subscribe (empty allow = all).

    A subscribe entry may name a queue group after the subject,
    ``"orders.> workers"``: it applies to queue subscriptions of that group
    (the group may have wildcards), as in nats-server."""

    allow: list = attrs.field(factory=list)
    deny: list = attrs.field(factory=list)


@attrs.define
class ResponsePermission:
    """allow_responses limits, as nats-server's ResponsePermission: each
    request received allows ``max_msgs`` replies to its reply subject
    within ``expires`` seconds (a negative value: no limit)."""

    max_msgs: int = 1
    expires: float = 120.0


@attrs.define
class Permissions:
    publish: Permission | None = None
    subscribe: Permission | None = None
    # Like nats-server's allow_responses: lets a user reply to requests it received.
    allow_responses: bool = False
    # Its {max, expires} limits; None: nats-server's defaults (1 reply, 2 minutes).
    response: ResponsePermission | None = None


# nats-server's connection types (jwt.ConnectionType*): what a user's
# ``allowed_connection_types`` may name.
CONNECTION_TYPES = ("STANDARD", "WEBSOCKET", "LEAFNODE", "LEAFNODE_WS", "MQTT", "MQTT_WS",
                    "IN_PROCESS")


@attrs.define
class User:
    user: str
    password: str | None = None
    permissions: Permissions | None = None
    # Upper case, from CONNECTION_TYPES; empty: any kind of connection.
    allowed_connection_types: list = attrs.field(factory=list)


@attrs.define
class NkeyUser:
    """A user known by its public nkey (``U...``), who signs the INFO nonce."""

    nkey: str
    permissions: Permissions | None = None
    allowed_connection_types: list = attrs.field(factory=list)


@attrs.define
class AuthCallout:
    """``authorization { auth_callout { } }``: CONNECTs decided by an external
    auth service (nats-server's AuthCallout). ``issuer`` is the account
    public key (``A...``) that signs the service's answers; ``auth_users``
    log in as usual (the service itself among them); requests go to
    ``$SYS.REQ.USER.AUTH`` in ``account``, encrypted to ``xkey`` (``X...``)
    if set. ``allowed_accounts`` is checked at start-up, as nats-server does."""

    issuer: str
    auth_users: list = attrs.field(factory=list)
    account: str = "$G"
    xkey: str = ""
    allowed_accounts: list = attrs.field(factory=list)


@attrs.define
class Authorization:
    user: str | None = None
    password: str | None = None
    token: str | None = None
    users: list = attrs.field(factory=list)  # list[User]
    nkeys: list = attrs.field(factory=list)  # list[NkeyUser], from the same users array
    timeout: float | None = None  # seconds; None: nats-server's default
    permissions: Permissions | None = None  # default for the single user/token
    auth_callout: AuthCallout | None = None

    @property
    def enabled(self):
        return bool(self.user or self.token or self.users or self.nkeys)


@attrs.define
class JetStreamLimits:
    """nats-server's ``jetstream { limits { } }`` (JSLimitOpts): server-wide caps
    on every account's streams, consumers and batches; 0 means no cap."""

    max_ack_pending: int = 0  # consumers' max_ack_pending (and its default)
    max_ha_assets: int = 0  # replicated streams/consumers (clustered JetStream only)
    max_request_batch: int = 0  # pull consumers' max_batch (and its default)
    duplicate_window: int = 0  # nanoseconds: streams' duplicate_window (and its default)
    batch_max_inflight_per_stream: int = 0  # open batches per stream
    batch_max_inflight_total: int = 0  # open batches on the server
    batch_max_msgs: int = 0  # messages in one batch
    batch_timeout: float = 0.0  # seconds without a message before a batch is abandoned


@attrs.define
class JetStreamConfig:
    enabled: bool = False
    store_dir: str = ""
    max_memory_store: int = -1
    max_file_store: int = -1
    domain: str = ""
    # Placement keeps a stream's replicas on servers whose tag with this
    # prefix differs (``az:``); lower-cased as nats-server does.
    unique_tag: str = ""
    # Seconds between lazy syncs; 0 (the default) means sync before every ack.
    sync_interval: float = 0.0
    sync_always: bool = True
    limits: JetStreamLimits = attrs.field(factory=JetStreamLimits)


@attrs.define
class ChangeFeedConfig:
    """The change-feed plugin: every stream mutation as JSON Lines files."""

    enabled: bool = False
    dir: str = ""  # empty: <store_dir>/changefeed
    streams: list = attrs.field(factory=list)  # stream names (wildcard *); empty: all
    max_file_size: int = 16 * 1024 * 1024  # roll a file at this size...
    max_file_age: float = 5.0  # ...or this many seconds after its first record
    retention: float = 0.0  # seconds completed files are kept; 0: forever


@attrs.define
class TLSConfig:
    """A ``tls { }`` block (client port, websocket, monitoring): nats-server's keys."""

    cert_file: str = ""
    key_file: str = ""
    ca_file: str = ""
    verify: bool = False
    verify_and_map: bool = False
    verify_cert_and_check_known_urls: bool = False
    insecure: bool = False
    timeout: float = 2.0  # seconds for the handshake (nats-server's TLS_TIMEOUT)
    handshake_first: bool = False
    # With handshake_first: how long to wait for a ClientHello before falling
    # back to the INFO-first flow (0: never fall back).
    handshake_first_fallback: float = 0.0
    pinned_certs: list = attrs.field(factory=list)  # SHA-256 hex of the peer's SubjectPublicKeyInfo
    min_version: str = ""  # "1.2" or "1.3"
    cipher_suites: list = attrs.field(factory=list)  # Go names, e.g. TLS_AES_128_GCM_SHA256
    curve_preferences: list = attrs.field(factory=list)

    @property
    def enabled(self):
        return bool(self.cert_file)

    @property
    def verify_clients(self):
        return self.verify or self.verify_and_map or self.verify_cert_and_check_known_urls


@attrs.define
class MapDest:
    """One destination of a subject mapping (nats-server's ``MapDest``):
    ``weight`` percent of the messages go to ``subject``; with ``cluster``,
    only on a server of that cluster."""

    subject: str
    weight: int = 100
    cluster: str = ""


@attrs.define
class SubjectMapping:
    """An entry of the ``mappings { }`` block: messages published to
    ``source`` are delivered under one of ``destinations`` (what weights
    leave over keeps its subject, as in nats-server)."""

    source: str
    destinations: list = attrs.field(factory=list)  # list[MapDest]


@attrs.define
class AccountJetStream:
    """An account's ``jetstream`` setting: enabled, with nats-server's account
    limits (-1: unlimited; ``max_memory``/``max_file`` in bytes, 0 allows
    nothing of that storage type; ``max_consumers`` is per stream). Enforced
    by natsbroker/jetstream/limits.py. ``cluster_traffic`` (``system``/``owner``)
    is parsed as nats-server parses it; it only matters in a cluster."""

    max_memory: int = -1
    max_file: int = -1
    max_streams: int = -1
    max_consumers: int = -1
    max_ack_pending: int = -1
    memory_max_stream_bytes: int = -1
    store_max_stream_bytes: int = -1
    max_bytes_required: bool = False
    cluster_traffic: str = ""


@attrs.define
class StreamExport:
    """``exports [ {stream: subject, accounts: [...]} ]``: messages published
    in the account under ``subject`` may be imported by others (all of them
    when ``accounts`` is empty)."""

    subject: str
    accounts: list = attrs.field(factory=list)
    # account_token_position: the token (1-based, a "*" in ``subject``) that
    # must be the importing account's name (0: not used).
    account_token_position: int = 0


@attrs.define
class ServiceExport:
    """``exports [ {service: subject, response_type, accounts} ]``: requests to
    ``subject`` may come from importing accounts; replies go back to them
    (``response_type``: ``Singleton``, ``Stream`` or ``Chunked``)."""

    subject: str
    accounts: list = attrs.field(factory=list)
    response_type: str = "Singleton"
    # Seconds a response mapping lives without traffic (nats-server's
    # DEFAULT_SERVICE_EXPORT_RESPONSE_THRESHOLD: 2 minutes).
    response_threshold: float = 120.0
    allow_trace: bool = False
    account_token_position: int = 0


@attrs.define
class StreamImport:
    """``imports [ {stream: {account, subject}, prefix | to} ]``."""

    account: str
    subject: str
    prefix: str = ""
    to: str = ""


@attrs.define
class ServiceImport:
    """``imports [ {service: {account, subject}, to, share} ]``: a request
    published here to ``to`` (default: ``subject``) goes to ``account``."""

    account: str
    subject: str
    to: str = ""
    share: bool = False


@attrs.define
class AccountConfig:
    """One entry of the ``accounts { }`` block."""

    name: str
    users: list = attrs.field(factory=list)  # list[User]
    nkeys: list = attrs.field(factory=list)  # list[NkeyUser]
    exports: list = attrs.field(factory=list)  # StreamExport | ServiceExport
    imports: list = attrs.field(factory=list)  # StreamImport | ServiceImport
    jetstream: AccountJetStream | None = None  # None: JetStream not enabled here
    mappings: list = attrs.field(factory=list)  # list[SubjectMapping]
    default_permissions: Permissions | None = None
    nkey: str = ""  # the account's own public key (A...), if given
    # Where the users array is in the config file, for the errors about them.
    users_at: object = attrs.field(default=None, eq=False, repr=False)


@attrs.define
class ClusterConfig:
    name: str = ""
    host: str = ""
    port: int = 0
    routes: list = attrs.field(factory=list)
    # Clients are not told the other servers' URLs (connect_urls).
    no_advertise: bool = False
    # Dials of a server learned from gossip (nats-server's default: 0, one try).
    connect_retries: int = 0
    # "host[:port]" other servers are told to dial (INFO host/port/ip).
    advertise: str = ""
    # authorization { user, password, timeout }: what a route's CONNECT must carry.
    username: str = ""
    password: str = ""
    auth_timeout: float = 0.0  # seconds; 0: nats-server's default (2 s, or TLS timeout + 1)
    # tls { }: TLS first on the cluster port and on dialed routes; the peer's
    # certificate is always required and verified (nats-server forces it for routes).
    tls: TLSConfig | None = None
    # Route keepalive: 0 takes the server's ping_interval / ping_max.
    ping_interval: float = 0.0
    ping_max: int = 0
    # Accepted as nats-server takes them; natsbroker has neither a route pool
    # nor compression and says so in its route INFO (no route_pool_size,
    # "compression":"off"), so nats-server peers use one plain connection.
    pool_size: int = 0
    compression: str = ""  # a mode as written ("" none given); checked at start
    # permissions { import, export }: which subjects' interest is asked of the
    # peers (import, a publish permission) and which is accepted from them,
    # and so which messages are sent to them (export, a subscribe permission).
    permissions: Permissions | None = None



@attrs.define
class WebSocketConfig:
    """The ``websocket { }`` block: a client listener speaking NATS over WebSocket.

    nats-server's keys; ``username``/``password``/``token``/``auth_timeout``
    come from the block's own ``authorization { }`` and override the server's
    auth for WebSocket clients, as in nats-server."""

    host: str = "0.0.0.0"  # nats-server's default, whatever the client host is
    port: int = 0  # 0: no WebSocket listener; -1: a random port
    advertise: str = ""
    no_tls: bool = False
    tls: TLSConfig | None = None
    compression: bool = False
    same_origin: bool = False
    allowed_origins: list = attrs.field(factory=list)
    handshake_timeout: float = 0.0  # seconds; 0: none, as nats-server
    no_auth_user: str = ""
    username: str = ""
    password: str = ""
    token: str = ""
    auth_timeout: float = 0.0  # seconds; 0: the server's
    jwt_cookie: str = ""  # accepted and stored; JWT auth is not implemented

    @property
    def enabled(self):
        return self.port != 0

    @property
    def auth_override(self):
        """As nats-server: any of these makes WebSocket auth its own."""
        return bool(self.username or self.token or self.no_auth_user)

@attrs.define
class ResolverConfig:
    """Where account JWTs come from in operator mode (nats-server's
    ``resolver``): ``MEMORY`` (the JWTs of ``resolver_preload``),
    ``FULL``, a directory holding every account JWT, kept up to date by
    ``$SYS.REQ.CLAIMS.UPDATE`` requests, ``CACHE``, a directory holding
    some, or ``URL``, an HTTP server's."""

    type: str = "MEMORY"  # MEMORY | FULL | CACHE | URL
    dir: str = ""
    allow_delete: bool = False
    interval: float = 60.0  # seconds between store checks ($SYS.REQ.CLAIMS.PACK)
    limit: int = 0  # most JWTs the directory holds (0: no limit; CACHE: 1000)
    timeout: float = 1.9  # seconds a lookup may take (nats-server's default)
    ttl: float = 0.0  # CACHE: seconds a JWT is kept (0: for ever)
    url: str = ""  # URL: the account JWTs are GET <url><public key>
    # URL: the JWTs fetched when the server starts (the system account's).
    fetched: dict = attrs.field(factory=dict)


@attrs.define
class ServerConfig:
    # Network
    host: str = "0.0.0.0"
    port: int = DEFAULT_PORT
    listen: list = attrs.field(factory=list)  # extra Twisted endpoint strings
    server_name: str = ""
    client_advertise: str = ""
    # Monitoring (0 = off)
    http_host: str = ""  # empty: the client host, as nats-server does
    http_port: int = 0
    https_port: int = 0  # monitoring over TLS, with the client port's certificate
    # TLS on the client port (None: plaintext only)
    tls: TLSConfig | None = None
    allow_non_tls: bool = False
    # Limits
    max_connections: int = 65536
    max_control_line: int = 4096
    max_payload: int = 1048576
    max_pending: int = 67108864
    max_subscriptions: int = 0
    # nats-server's disable_sublist_cache / no_sublist_cache: match results
    # are not cached (for subject spaces where nothing repeats).
    no_sublist_cache: bool = False
    ping_interval: float = 120.0
    ping_max: int = 2
    write_deadline: float = 10.0
    # Auth
    authorization: Authorization = attrs.field(factory=Authorization)
    no_auth_user: str = ""
    # Accounts other than $G, in file order, and which one is the system
    # account (empty: nats-server's implicit $SYS).
    accounts: list = attrs.field(factory=list)  # list[AccountConfig]
    system_account: str = ""
    # server_tags: this server's tags (trimmed, lower-cased, each once), in
    # /varz and statsz; JetStream placement matches them.
    server_tags: tuple = ()
    # JWT operator mode: the trusted operators' JWTs (text), or trusted
    # operator keys; the account resolver and the JWTs it starts with.
    operators: list = attrs.field(factory=list)  # list[str]
    trusted_keys: list = attrs.field(factory=list)  # list[str]
    resolver: ResolverConfig | None = None
    resolver_preload: dict = attrs.field(factory=dict)  # account public key -> JWT
    resolver_pinned_accounts: list = attrs.field(factory=list)
    # nats-server's default resolver for an operator without one: a URL
    # (the operator's account_server_url + "/accounts"), which natsbroker
    # does not fetch from.
    resolver_url: str | None = None
    # Logging
    debug: bool = False
    trace: bool = False
    logtime: bool = True
    logtime_utc: bool = False
    log_file: str = ""
    log_size_limit: int = 0  # bytes; the log file is rotated past it (0: never)
    log_max_num: int = 0  # rotated files kept, the live one included (0: all)
    syslog: bool = False
    remote_syslog: str = ""  # udp://host:514, tcp://host:port or unix:///path
    log_json: bool = False  # natsbroker's own: one JSON object a line
    pid_file: str = ""
    ports_file_dir: str = ""
    # Lame duck mode (SIGUSR2), seconds: clients are closed over
    # lame_duck_duration, the first after lame_duck_grace_period.
    lame_duck_duration: float = 120.0
    lame_duck_grace_period: float = 10.0
    # Subsystems
    jetstream: JetStreamConfig = attrs.field(factory=JetStreamConfig)
    changefeed: ChangeFeedConfig = attrs.field(factory=ChangeFeedConfig)
    cluster: ClusterConfig = attrs.field(factory=ClusterConfig)
    websocket: WebSocketConfig = attrs.field(factory=WebSocketConfig)
    # The global account's subject mappings, in file order.
    mappings: list = attrs.field(factory=list)  # list[SubjectMapping]
    # Extra broker plugins named as "module:object".
    plugins: list = attrs.field(factory=list)
    # The config file's blocks that plugins claim (their factory's
    # config_block): {block name: its value as plain dicts and lists}.
    plugin_config: dict = attrs.field(factory=dict)
    # Config file this came from, for /varz and reloads.
    config_file: str = ""
    # The tls block came from --tls* flags (a reload keeps it, as nats-server).
    tls_from_flags: bool = False

    @property
    def auth_timeout(self):
        """Seconds a client has to send CONNECT when auth is on (nats-server: 2s)."""
        t = self.authorization.timeout
        if t is not None:
            return t
        # nats-server's getDefaultAuthTimeout: with TLS, the TLS timeout + 1 s.
        return self.tls.timeout + 1.0 if self.tls is not None else 2.0

    @property
    def operator_mode(self):
        """JWT operator mode: trusted operators or trusted keys configured
        (every client then logs in with a user JWT)."""
        return bool(self.operators or self.trusted_keys)
