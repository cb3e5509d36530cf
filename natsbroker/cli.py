"""The ``natsbroker`` command: nats-server's command line.

Flags are parsed the way Go's ``flag`` package (and so nats-server) does:
``-p 4222``, ``-p=4222``, ``--port 4222``; boolean flags take no separate
argument (``-js``, ``-T=false``); ``-DV`` is a flag of its own, not ``-D -V``;
parsing stops at ``--`` or the first non-flag argument.  Flags override the
values of the ``-c`` config file, as in nats-server.

Each flag becomes an override in the shape :mod:`natsbroker.config.load` uses,
so flags, the config file and the twistd plugin (:mod:`natsbroker.tap`) share
one mapping onto :class:`ServerConfig`.
"""

import sys
import urllib.parse

import attrs

from natsbroker import __version__ as VERSION
from natsbroker.config import load as configfile
from natsbroker.config.model import ServerConfig, TLSConfig
from natsbroker.connection.tls import CIPHERS_TLS12, CIPHERS_TLS13, CURVES, TLSConfigError, server_context
from natsbroker.discovery import config_blocks

CIPHERS = [n for n in CIPHERS_TLS12 if "RC4" not in n and "3DES" not in n] + list(CIPHERS_TLS13)
from natsbroker.config.load import BadValue, ConfigError

__all__ = ["CommandLine", "CommandLineError", "USAGE", "VERSION", "apply_flag", "build_config", "main",
           "parse_args", "parse_command_line"]

# nats-server's help text, cut down to the options we implement.
USAGE = """
Usage: natsbroker [options]

Server Options:
    -a, --addr, --net <host>         Bind to host address (default: 0.0.0.0)
    -p, --port <port>                Use port for clients (default: 4222)
    -n, --name
        --server_name <server_name>  Server name (default: auto)
    -P, --pid <file>                 File to store PID
    -m, --http_port <port>           Use port for http monitoring
    -ms,--https_port <port>          Use port for https monitoring
    -c, --config <file>              Configuration file
    -t                               Test configuration and exit
    -sl,--signal <signal>[=<pid>]    Send signal to natsbroker process (ldm, stop, quit, term, reopen, reload)
                                     <pid> can be either a PID (e.g. 1) or the path to a PID file (e.g. /var/run/natsbroker.pid)
        --client_advertise <string>  Client URL to advertise to other servers
        --ports_file_dir <dir>       Creates a ports file in the specified directory (<executable_name>_<pid>.ports).

Logging Options:
    -l, --log <file>                 File to redirect log output
    -T, --logtime                    Timestamp log entries (default: true)
        --logtime_utc                Timestamps in UTC instead of local timezone (default: false)
    -s, --syslog                     Log to syslog
    -r, --remote_syslog <addr>       Syslog server addr (udp://localhost:514)
    -D, --debug                      Enable debugging output
    -V, --trace                      Trace the raw protocol
    -VV                              Verbose trace (same as -V)
    -DV                              Debug and trace
    -DVV                             Debug and verbose trace (same as -DV)
        --log_size_limit <limit>     Logfile size limit (default: auto)
        --log_json                   One JSON object per log line (natsbroker's own)

JetStream Options:
    -js, --jetstream                 Enable JetStream functionality
    -sd, --store_dir <dir>           Set the storage directory

Authorization Options:
        --user <user>                User required for connections
        --pass <password>            Password required for connections
        --auth <token>               Authorization token required for connections
        --no_auth_user <user>        User for connections that send no credentials

TLS Options:
        --tls                        Enable TLS, do not verify clients (default: false)
        --tlscert <file>             Server certificate file
        --tlskey <file>              Private key for server certificate
        --tlsverify                  Enable TLS, verify client certificates
        --tlscacert <file>           Client certificate CA for verification

Cluster Options:
        --routes <rurl-1, rurl-2>    Routes to solicit and connect
        --cluster <cluster-url>      Cluster URL for solicited routes
        --cluster_name <string>      Cluster Name, if not set one will be dynamically generated
        --no_advertise <bool>        Do not advertise known cluster information to clients
        --cluster_advertise <string> Cluster URL to advertise to other servers
        --connect_retries <number>   For implicit routes, number of connect retries
        --cluster_listen <url>       Cluster url from which members can solicit routes

Common Options:
    -h, --help                       Show this message
    -v, --version                    Show version
        --help_tls                   TLS help
"""

TLS_USAGE = """
TLS configuration is specified in the tls section of a configuration file:

e.g.

    tls {
        cert_file:      "./certs/server-cert.pem"
        key_file:       "./certs/server-key.pem"
        ca_file:        "./certs/ca.pem"
        verify:         true
        verify_and_map: true

        cipher_suites: [
            "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"
        ]
        curve_preferences: [
            "CurveP256",
            "CurveP384",
            "CurveP521"
        ]
    }

Available cipher suites include:
%s
Available curve preferences include:
%s
""" % ("".join("    %s\n" % n for n in CIPHERS), "".join("    %s\n" % n for n in CURVES))


class CommandLineError(Exception):
    """A bad command line; ``show_usage`` as Go's flag package does for syntax errors."""

    def __init__(self, message, show_usage=False):
        super().__init__(message)
        self.show_usage = show_usage


@attrs.define
class CommandLine:
    """What the command line asked for, before the config file is read."""

    overrides: dict = attrs.field(factory=dict)  # field dicts, as configfile makes
    config_file: str = ""
    check_config: bool = False
    show_help: bool = False
    show_version: bool = False
    show_help_tls: bool = False
    signal: str = ""  # --signal <command>[=<pid>]: send it, do not run a server
    tls_flags: dict = attrs.field(factory=dict)
    warnings: list = attrs.field(factory=list)

    def set(self, *path, value):
        d = self.overrides
        for name in path[:-1]:
            d = d.setdefault(name, {})
        d[path[-1]] = value


# -- what each flag does -----------------------------------------------------------


def _field(*path, check=None):
    def action(cl, value):
        cl.set(*path, value=check(value) if check else value)

    return action


def _when_true(**fields):
    # -DV and friends are their own flags in nats-server; "=false" does nothing.
    def action(cl, value):
        if value:
            for name, v in fields.items():
                cl.set(name, value=v)

    return action


def _attr(name):
    def action(cl, value):
        setattr(cl, name, value)

    return action


def _cluster_url(cl, value):
    # nats://host:port, as nats-server's --cluster; a bare host:port also works.
    url = urllib.parse.urlsplit(value if "://" in value else "nats://" + value)
    try:
        number = url.port
    except ValueError:
        # nats-server takes -1 (a random port), which urlsplit refuses.
        tail = url.netloc.rpartition(":")[2]
        number = -1 if tail == "-1" else None
    if not url.hostname or number is None:
        raise BadValue(f"expected a URL such as nats://0.0.0.0:6222, got {value!r}")
    cl.set("cluster", "host", value=url.hostname)
    cl.set("cluster", "port", value=configfile.check_port(number))


def _tls_flag(name):
    def action(cl, value):
        cl.tls_flags[name] = value

    return action


@attrs.frozen
class _Flag:
    names: tuple  # spellings without dashes
    kind: type  # bool, int or str: how the value is read
    action: object = None  # action(CommandLine, value); None: accepted and ignored
    refuse: str = ""  # why natsbroker refuses this nats-server flag


_FLAGS = [
    # Server
    _Flag(("a", "addr", "net"), str, _field("host")),
    _Flag(("p", "port"), int, _field("port", check=configfile.check_client_port)),
    _Flag(("n", "name", "server_name"), str, _field("server_name")),
    _Flag(("P", "pid"), str, _field("pid_file")),
    _Flag(("m", "http_port"), int, _field("http_port", check=configfile.check_port)),
    _Flag(("c", "config"), str, _attr("config_file")),
    _Flag(("t",), bool, _attr("check_config")),
    _Flag(("sl", "signal"), str, _attr("signal")),
    _Flag(("client_advertise",), str, _field("client_advertise")),
    _Flag(("ports_file_dir",), str, _field("ports_file_dir")),
    # Logging
    _Flag(("l", "log"), str, _field("log_file")),
    _Flag(("T", "logtime"), bool, _field("logtime")),
    _Flag(("logtime_utc",), bool, _field("logtime_utc")),
    _Flag(("s", "syslog"), bool, _field("syslog")),
    _Flag(("r", "remote_syslog"), str, _field("remote_syslog")),
    _Flag(("log_size_limit",), int, _field("log_size_limit")),
    _Flag(("log_json",), bool, _field("log_json")),  # natsbroker's own
    _Flag(("D", "debug"), bool, _field("debug")),
    _Flag(("V", "trace"), bool, _field("trace")),
    _Flag(("VV",), bool, _when_true(trace=True)),  # we have no "verbose" trace
    _Flag(("DV", "DVV"), bool, _when_true(debug=True, trace=True)),
    # JetStream; like nats-server, -sd alone does not turn JetStream on.
    _Flag(("js", "jetstream"), bool, _field("jetstream", "enabled")),
    _Flag(("sd", "store_dir"), str, _field("jetstream", "store_dir")),
    # Authorization
    _Flag(("user",), str, _field("authorization", "user")),
    _Flag(("pass",), str, _field("authorization", "password")),
    _Flag(("auth",), str, _field("authorization", "token")),
    _Flag(("no_auth_user",), str, _field("no_auth_user")),
    # TLS: any of these replaces the config file's tls block (nats-server's overrideTLS)
    _Flag(("tls",), bool, _tls_flag("enabled")),
    _Flag(("tlsverify",), bool, _tls_flag("verify")),
    _Flag(("tlscert",), str, _tls_flag("cert_file")),
    _Flag(("tlskey",), str, _tls_flag("key_file")),
    _Flag(("tlscacert",), str, _tls_flag("ca_file")),
    _Flag(("help_tls",), bool, _attr("show_help_tls")),
    _Flag(("ms", "https_port"), int, _field("https_port", check=configfile.check_port)),
    # Cluster
    _Flag(("routes",), str, _field("cluster", "routes", check=configfile.routes)),
    _Flag(("cluster", "cluster_listen"), str, _cluster_url),
    _Flag(("cluster_name",), str, _field("cluster", "name")),
    _Flag(("cluster_advertise",), str, _field("cluster", "advertise")),
    _Flag(("no_advertise",), bool, _field("cluster", "no_advertise")),
    _Flag(("connect_retries",), int, _field("cluster", "connect_retries")),
    # Common
    _Flag(("h", "help"), bool, _attr("show_help")),
    _Flag(("v", "version"), bool, _attr("show_version")),
    # nats-server flags we lack.  Those that secure or expose something are
    # refused, since running without them is not what was asked for ...
    _Flag(("profile",), int, refuse="natsbroker has no Go profiler"),
    # ... and those whose absence changes nothing that matters are ignored.
    _Flag(("max_traced_msg_len",), int),
]
_BY_NAME = {name: flag for flag in _FLAGS for name in flag.names}

# strconv.ParseBool's spellings.
_BOOLS = {s: True for s in ("1", "t", "T", "true", "TRUE", "True")}
_BOOLS.update({s: False for s in ("0", "f", "F", "false", "FALSE", "False")})


def _go_int(text):
    """strconv.ParseInt(text, 0, 64): 0x, 0o, 0b prefixes and _ separators."""
    try:
        return int(text, 0)
    except ValueError:
        return int(text, 10)  # "08": Go would read octal and fail; decimal is kinder


def apply_flag(cl, name, value):
    """Apply flag ``name`` (no dashes) with ``value``: True for a bare boolean
    flag, else the text after ``=`` or the next argument."""
    flag = _BY_NAME.get(name)
    if flag is None:
        raise CommandLineError(f"flag provided but not defined: -{name}", show_usage=True)
    if flag.kind is bool and value is not True:
        if value not in _BOOLS:
            raise CommandLineError(f'invalid boolean value "{value}" for -{name}: parse error', show_usage=True)
        value = _BOOLS[value]
    elif flag.kind is int:
        try:
            value = _go_int(value)
        except ValueError:
            raise CommandLineError(f'invalid value "{value}" for flag -{name}: parse error', show_usage=True) from None
    if flag.refuse:
        raise CommandLineError(f"natsbroker: -{name} is not supported: {flag.refuse}")
    if flag.action is None:
        cl.warnings.append(f"-{name} is not supported by natsbroker and is ignored")
        return
    try:
        flag.action(cl, value)
    except BadValue as e:
        raise CommandLineError(f'invalid value "{value}" for flag -{name}: {e}', show_usage=True) from None


def parse_command_line(argv):
    """Parse ``argv`` (without the program name) into a :class:`CommandLine`."""
    cl = CommandLine()
    args = list(argv)
    while args:
        arg = args[0]
        if len(arg) < 2 or arg[0] != "-":
            break  # Go stops at the first non-flag argument ("-" is one)
        args.pop(0)
        if arg == "--":
            break
        name = arg[2:] if arg[1] == "-" else arg[1:]
        if not name or name[0] in "-=":
            raise CommandLineError(f"bad flag syntax: {arg}", show_usage=True)
        name, has_value, value = name.partition("=")
        flag = _BY_NAME.get(name)
        if not has_value:
            if flag is not None and flag.kind is not bool:
                if not args:
                    raise CommandLineError(f"flag needs an argument: -{name}", show_usage=True)
                value = args.pop(0)
            else:
                value = True
        apply_flag(cl, name, value)
    if args:
        # nats-server takes "version" and "help" as commands, and nothing else.
        command = args[0].lower()
        if command in ("version", "help"):
            setattr(cl, "show_" + command, True)
        else:
            raise CommandLineError(f'natsbroker: unrecognized command: "{args[0]}"')
    return cl


def build_config(cl):
    """The ServerConfig for a parsed command line: the config file (if any)
    with the flags on top.  Returns ``(config, warnings)``."""
    config, warnings = ServerConfig(), []
    if cl.config_file:
        config, warnings = configfile.load_config(cl.config_file, plugin_blocks=config_blocks)
    config = configfile.apply_overrides(config, cl.overrides)
    if cl.tls_flags:
        config.tls = _tls_from_flags(cl.tls_flags)
        config.tls_from_flags = True
    configfile.validate(config)
    return config, warnings + cl.warnings


def _tls_from_flags(flags):
    """nats-server's overrideTLS: the flags make a tls block of their own."""
    if not flags.get("cert_file"):
        raise ConfigError("TLS Server certificate must be present and valid")
    if not flags.get("key_file"):
        raise ConfigError("TLS Server private key must be present and valid")
    tls = TLSConfig(cert_file=flags["cert_file"], key_file=flags["key_file"],
                    ca_file=flags.get("ca_file", ""), verify=bool(flags.get("verify")))
    try:
        server_context(tls)
    except TLSConfigError as e:
        raise ConfigError(str(e)) from None
    return tls


def parse_args(argv):
    """``(ServerConfig, warnings)`` for a natsbroker/nats-server command line.

    Raises :class:`CommandLineError` or :class:`ConfigError`.  -h, -v and -t
    are actions for :func:`main` and do not change the result."""
    return build_config(parse_command_line(argv))


def main(argv=None):
    """The natsbroker command; returns the process exit code."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        cl = parse_command_line(argv)
        if cl.show_version:
            print(f"natsbroker: v{VERSION}")
            return 0
        if cl.show_help:
            print(USAGE)
            return 0
        if cl.show_help_tls:
            print(TLS_USAGE)
            return 0
        if cl.signal:
            # As nats-server: before the config file is read, and instead of a server.
            from natsbroker.signals import send_command
            return send_command(cl.signal)
        if cl.check_config and not cl.config_file:
            print("natsbroker: must specify [-c, --config] option to check configuration file syntax",
                  file=sys.stderr)
            return 1
        config, warnings = build_config(cl)
    except CommandLineError as e:
        print(e, file=sys.stderr)
        if e.show_usage:
            print(USAGE, file=sys.stderr)
        return 2
    except ConfigError as e:
        print(f"natsbroker: {e}", file=sys.stderr)
        return 1
    for warning in warnings:
        print(f"natsbroker: warning: {warning}", file=sys.stderr)
    if cl.check_config:
        print(f"natsbroker: configuration file {cl.config_file} is valid", file=sys.stderr)
        return 0
    # late, as the server below: operator mode pulls in the JWT runtime
    from natsbroker.auth.jwt.operator import check_resolver_start
    from natsbroker.config.operator import OperatorError

    try:
        # checked at start, not by -t (as nats-server)
        configfile.validate_start(config)
        check_resolver_start(config)
    except (ConfigError, OperatorError) as e:
        print(f"natsbroker: {e}", file=sys.stderr)
        return 1
    from natsbroker.server import run  # late: the server pulls in the reactor

    return run(config)
