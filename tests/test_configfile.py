"""Mapping nats-server config files onto ServerConfig (natsbroker.config.load)."""

import textwrap

import pytest

from natsbroker.config.load import ConfigError, apply_overrides, load_config
from natsbroker.config.model import Authorization, Permission, Permissions, ResponsePermission, ServerConfig, User


@pytest.fixture
def load(tmp_path):
    """load(text) -> (config, warnings) for a config file holding ``text``."""

    def load(text, name="server.conf", config=None):
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        return load_config(path, config)

    return load


def test_server_options(load, tmp_path):
    config, warnings = load(
        """
        listen: 127.0.0.1:4333
        server_name: alpha
        client_advertise: "nats.example.com:4333"
        http: "127.0.0.2:8333"
        max_connections: 100
        max_control_line: 2KB
        max_payload: "2MB"
        max_pending: 128MB
        max_subscriptions: 1000
        ping_interval: "30s"
        ping_max: 5
        write_deadline: "1m30s"
        debug: true
        trace: true
        logtime: false
        log_file: /tmp/nats.log
        pid_file: /tmp/nats.pid
        ports_file_dir: /tmp
        plugins: ["mypkg.plugins:Audit"]
        """
    )
    assert warnings == []
    assert (config.host, config.port) == ("127.0.0.1", 4333)
    assert config.server_name == "alpha"
    assert config.client_advertise == "nats.example.com:4333"
    assert (config.http_host, config.http_port) == ("127.0.0.2", 8333)
    assert config.max_connections == 100
    assert config.max_control_line == 2048
    assert config.max_payload == 2 * 1024 * 1024
    assert config.max_pending == 128 * 1024 * 1024
    assert config.max_subscriptions == 1000
    assert config.ping_interval == 30.0
    assert config.ping_max == 5
    assert config.write_deadline == 90.0
    assert (config.debug, config.trace, config.logtime) == (True, True, False)
    assert config.log_file == "/tmp/nats.log"
    assert config.pid_file == "/tmp/nats.pid"
    assert config.ports_file_dir == "/tmp"
    assert config.plugins == ["mypkg.plugins:Audit"]
    assert config.config_file == str(tmp_path / "server.conf")


def test_aliases(load):
    config, warnings = load(
        """
        net: 10.0.0.1
        port: 4333
        server_name: beta
        monitor_port: 8333
        http_host: 127.0.0.1
        max_conn: 7
        max_subs: 9
        logfile: a.log
        pidfile: a.pid
        PORT: 4334
        """
    )
    assert warnings == []
    assert (config.host, config.port, config.server_name) == ("10.0.0.1", 4334, "beta")
    assert (config.http_host, config.http_port) == ("127.0.0.1", 8333)
    assert (config.max_connections, config.max_subscriptions) == (7, 9)
    assert (config.log_file, config.pid_file) == ("a.log", "a.pid")


@pytest.mark.parametrize(
    "text, host, port",
    [
        ("listen: ':4333'", "0.0.0.0", 4333),  # no host: the default stays
        ("listen: 4333", "0.0.0.0", 4333),
        ("listen: '[::1]:4333'", "::1", 4333),
        ("port: -1", "0.0.0.0", -1),  # random port, as nats-server
        ("port: 0", "0.0.0.0", 4222),  # nats-server's "unset"
    ],
)
def test_listen_forms(load, text, host, port):
    config, _ = load(text)
    assert (config.host, config.port) == (host, port)


def test_durations_as_seconds(load, tmp_path):
    config, warnings = load("ping_interval: 2m\nwrite_deadline: 2.5\nauthorization { token: t, timeout: 0.5 }")
    assert (config.ping_interval, config.write_deadline) == (2000000.0, 2.5)  # as nats-server...
    assert config.authorization.timeout == 0.5
    f = tmp_path / "server.conf"
    assert warnings == [  # ...which also warns
        f'{f}:1: ping_interval should be converted to a duration such as "2m" (2000000 is taken as seconds)',
        f'{f}:2: write_deadline should be converted to a duration such as "2m" (2.5 is taken as seconds)',
    ]


def test_authorization_single_user(load):
    config, _ = load(
        """
        authorization {
          user: admin
          password: "$2a$11$abcdefghijklmnopqrstuv"
          timeout: "3s"
          permissions { publish: "admin.>", subscribe: ["_INBOX.>", "admin.>"] }
        }
        """
    )
    assert config.authorization == Authorization(
        user="admin",
        password="$2a$11$abcdefghijklmnopqrstuv",
        timeout=3.0,
        permissions=Permissions(
            publish=Permission(allow=["admin.>"]), subscribe=Permission(allow=["_INBOX.>", "admin.>"])
        ),
    )
    assert config.authorization.enabled


def test_authorization_token(load):
    config, _ = load("authorization { token: s3cr3t }")
    assert config.authorization.token == "s3cr3t"


def test_users_and_permissions(load):
    config, warnings = load(
        """
        authorization {
          default_permissions { publish: "public.>", subscribe: "public.>" }
          users: [
            {user: alice, password: a, permissions: {
                publish: {allow: ["orders.>"], deny: "orders.secret"}
                subscribe: {deny: ["audit.>"]}
                allow_responses: true
            }}
            {username: bob, pass: b}
            {user: carol, password: c, permissions: {pub: "x", sub: ["y", "z"]}}
          ]
        }
        no_auth_user: bob
        """
    )
    assert warnings == []
    alice, bob, carol = config.authorization.users
    assert alice == User(
        user="alice",
        password="a",
        permissions=Permissions(
            publish=Permission(allow=["orders.>"], deny=["orders.secret"]),
            subscribe=Permission(allow=[], deny=["audit.>"]),
            allow_responses=True,
        ),
    )
    # Users without their own permissions get the block's defaults.
    assert bob == User(
        user="bob",
        password="b",
        permissions=Permissions(publish=Permission(allow=["public.>"]), subscribe=Permission(allow=["public.>"])),
    )
    assert carol.permissions == Permissions(publish=Permission(allow=["x"]), subscribe=Permission(allow=["y", "z"]))
    assert config.no_auth_user == "bob"


def test_allow_responses_limits(load):
    config, warnings = load("authorization { users: [{user: a, permissions: {allow_responses: {max: 3}}}] }")
    perms = config.authorization.users[0].permissions
    assert perms.allow_responses is True and not warnings
    assert perms.response == ResponsePermission(max_msgs=3, expires=120.0)


@pytest.mark.parametrize(
    "text, enabled",
    [
        ("jetstream: true", True),
        ("jetstream: false", False),
        ("jetstream: enabled", True),
        ("jetstream: disabled", False),
        ("jetstream {}", True),
        ("jetstream { enabled: false, store_dir: /x }", False),
    ],
)
def test_jetstream_switch(load, text, enabled):
    config, _ = load(text)
    assert config.jetstream.enabled is enabled


def test_jetstream_block(load):
    config, warnings = load(
        """
        jetstream {
          store_dir: /var/lib/nats
          max_mem: 1GB
          max_file_store: "10G"
          domain: hub
          sync_interval: "2m"
        }
        """
    )
    js = config.jetstream
    assert warnings == []
    assert (js.enabled, js.store_dir, js.domain) == (True, "/var/lib/nats", "hub")
    assert (js.max_memory_store, js.max_file_store) == (1024**3, 10 * 1000**3)
    assert (js.sync_interval, js.sync_always) == (120.0, False)
    config, _ = load("jetstream { max_memory_store: 1024, sync: always }")
    assert config.jetstream.max_memory_store == 1024
    assert (config.jetstream.sync_interval, config.jetstream.sync_always) == (0.0, True)


def test_cluster(load):
    config, _ = load(
        """
        cluster {
          name: east
          listen: "0.0.0.0:6222"
          routes: ["nats://a:6222", "nats://b:6222"]
        }
        """
    )
    c = config.cluster
    assert (c.name, c.host, c.port, c.routes) == ("east", "0.0.0.0", 6222, ["nats://a:6222", "nats://b:6222"])
    config, _ = load("cluster { host: 10.0.0.1, port: 7222, routes: 'nats://a:1, nats://b:2' }")
    assert (config.cluster.host, config.cluster.port) == ("10.0.0.1", 7222)
    assert config.cluster.routes == ["nats://a:1", "nats://b:2"]


def test_unknown_fields_refused_with_position(load, tmp_path):
    # As nats-server: every unknown key is reported (file:line:col), and a
    # key it knows that natsbroker does not implement is refused by name.
    with pytest.raises(ConfigError) as e:
        load(
            """\
            port: 4333
            max_traced_msg_len: 100
            jetstream {
              max_buffered_msgs: 5
              bogus: 1
            }
            """
        )
    f = tmp_path / "server.conf"
    assert str(e.value).splitlines() == [
        f'{f}:2:1: field "max_traced_msg_len" is known to nats-server but not supported by natsbroker',
        f'{f}:4:3: field "max_buffered_msgs" is known to nats-server but not supported by natsbroker',
        f'{f}:5:3: unknown field "bogus"',
    ]


def test_user_allowed_connection_types_known(load):
    config, warnings = load(
        """\
        authorization {
          users: [
            {user: a, password: b, allowed_connection_types: ["standard"]}
          ]
        }
        """
    )
    assert warnings == []
    # (upper cased as nats-server does)
    assert config.authorization.users[0].allowed_connection_types == ["STANDARD"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("port: abc", 'server.conf:2:1: invalid value for "port": expected an integer, got string \'abc\''),
        ("port: 70000", "server.conf:2:1: invalid value for \"port\": port 70000 is out of range"),
        ("debug: 1", 'invalid value for "debug": expected true or false'),
        ("max_payload: lots", 'invalid value for "max_payload": expected a size'),
        ("max_payload: 0", 'invalid value for "max_payload": expected a size > 0'),
        ("ping_interval: soon", 'invalid value for "ping_interval": expected a duration'),
        ("listen: 'localhost'", 'invalid value for "listen": expected "host:port" or a port'),
        ("server_name: 'a b'", "server name cannot contain spaces"),
        ("jetstream: maybe", 'invalid value for "jetstream"'),
        ("jetstream { max_file: big }", 'server.conf:2:13: invalid value for "max_file"'),
        ("authorization { users: {user: a} }", 'invalid value for "users": expected an array'),
        ("authorization { users: [{password: a}] }", "user entry #1 requires a user"),
        ("authorization { users: [{user: a}, {user: a}] }", "duplicate user 'a'"),
        ("authorization { permissions { publish: 'a..b' } }", "'a..b' is not a valid subject"),
        ("authorization { permissions { publish: [1] } }", "expected a string or an array of strings"),
        ("plugins: [nocolon]", 'expected "module:object"'),
        ("tls { cert_file: x }", "server.conf:2:0: missing 'key_file' in TLS configuration"),
        ("tls { cert_file: x, key_file: y, bogus: 1 }", 'error parsing tls config, unknown field "bogus"'),
        ("tls { cert_file: x, key_file: y, cipher_suites: [FOO] }", "unrecognized cipher FOO"),
        ("tls { cert_file: x, key_file: y, min_version: '1.1' }",
         "error parsing tls config: unsupported TLS version: TLS 1.1"),
        ("tls { cert_file: x, key_file: y, handshake_first: xyz }",
         'field "handshake_first"\'s value "xyz" is invalid'),
        ("tls { cert_file: x, key_file: y, pinned_certs: [abc] }",
         "'pinned_certs' key abc does not look like hex-encoded sha256"),
        ("tls { cert_file: /nonexistent.pem, key_file: y }",
         "server.conf:2:0: error parsing X509 certificate/key pair: open /nonexistent.pem: "
         "no such file or directory"),
        ("operator: /nonexistent/op.jwt",
         "server.conf:2:1: error parsing operator JWT: open /nonexistent/op.jwt: no such file or directory"),
        ("port: 4222\nport {", "Parse error on line 3: 'unterminated map: missing '}'' ("),  # a syntax error
    ],
)
def test_bad_values(load, text, message):
    with pytest.raises(ConfigError) as e:
        load("\n" + text)
    assert message in str(e.value)


def test_bad_value_names_the_file(load, tmp_path):
    with pytest.raises(ConfigError, match=rf"^{tmp_path / 'server.conf'}:1:1: "):
        load("port: abc")


@pytest.mark.parametrize(
    "text, message",
    [
        ("authorization { user: a, token: t }", "cannot have a user/password and a token"),
        ("authorization { token: t, users: [{user: a}] }", "a users array"),
        ("no_auth_user: x", "users are not defined"),
        ("no_auth_user: x\nauthorization { users: [{user: a}] }", "'x' is not a user"),
    ],
)
def test_inconsistent_auth(load, text, message):
    with pytest.raises(ConfigError, match=message):
        load(text)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="^open .*nope.conf: no such file or directory$"):
        load_config(tmp_path / "nope.conf")


def test_included_file_positions(load, tmp_path):
    # Errors name the file the key is written in.
    (tmp_path / "auth.conf").write_text("authorization {\n  token: abc\n  nkey: X\n}\n")
    with pytest.raises(ConfigError, match=r'auth.conf:3:3: unknown field "nkey"$'):
        load("port: 4333\ninclude ./auth.conf\n")


def test_onto_given_config_without_changing_it(load):
    base = ServerConfig(port=5000, debug=True)
    base.jetstream.store_dir = "/data"
    config, _ = load("port: 6000\njetstream { max_mem: 1KB }", config=base)
    assert (config.port, config.debug) == (6000, True)
    js = config.jetstream
    assert (js.enabled, js.store_dir, js.max_memory_store) == (True, "/data", 1024)
    assert (base.port, base.jetstream.enabled) == (5000, False)


def test_apply_overrides_sets_only_named_fields():
    base = ServerConfig()
    config = apply_overrides(base, {"port": 1, "jetstream": {"store_dir": "/s"}})
    assert (config.port, config.jetstream.store_dir, config.jetstream.enabled) == (1, "/s", False)
    assert base.port == 4222
