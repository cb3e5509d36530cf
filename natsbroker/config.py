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
    """Allow/deny subject lists for publish or subscribe (empty allow = all)."""

    allow: list = attrs.field(factory=list)
    deny: list = attrs.field(factory=list)


@attrs.define
class Permissions:
    publish: Permission | None = None
    subscribe: Permission | None = None
    # Like nats-server's allow_responses: lets a user reply to requests it received.
    allow_responses: bool = False


@attrs.define
class User:
    user: str
    password: str | None = None
    permissions: Permissions | None = None


@attrs.define
class Authorization:
    user: str | None = None
    password: str | None = None
    token: str | None = None
    users: list = attrs.field(factory=list)  # list[User]
    timeout: float | None = None  # seconds; None: nats-server's default
    permissions: Permissions | None = None  # default for the single user/token

    @property
    def enabled(self):
        return bool(self.user or self.token or self.users)


@attrs.define
class JetStreamConfig:
    enabled: bool = False
    store_dir: str = ""
    max_memory_store: int = -1
    max_file_store: int = -1
    domain: str = ""
    # Seconds between lazy syncs; 0 (the default) means sync before every ack.
    sync_interval: float = 0.0
    sync_always: bool = True


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
class ClusterConfig:
    name: str = ""
    host: str = ""
    port: int = 0
    routes: list = attrs.field(factory=list)


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
    # Limits
    max_connections: int = 65536
    max_control_line: int = 4096
    max_payload: int = 1048576
    max_pending: int = 67108864
    max_subscriptions: int = 0
    ping_interval: float = 120.0
    ping_max: int = 2
    write_deadline: float = 10.0
    # Auth
    authorization: Authorization = attrs.field(factory=Authorization)
    no_auth_user: str = ""
    # Logging
    debug: bool = False
    trace: bool = False
    logtime: bool = True
    log_file: str = ""
    pid_file: str = ""
    ports_file_dir: str = ""
    # Subsystems
    jetstream: JetStreamConfig = attrs.field(factory=JetStreamConfig)
    changefeed: ChangeFeedConfig = attrs.field(factory=ChangeFeedConfig)
    cluster: ClusterConfig = attrs.field(factory=ClusterConfig)
    # Extra broker plugins named as "module:object".
    plugins: list = attrs.field(factory=list)
    # Config file this came from, for /varz and reloads.
    config_file: str = ""

    @property
    def auth_timeout(self):
        """Seconds a client has to send CONNECT when auth is on (nats-server: 2s)."""
        t = self.authorization.timeout
        return 2.0 if t is None else t
