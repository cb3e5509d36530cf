"""``twistd natsbroker``: the server as a Twisted application plugin.

The options are nats-server's long flags, Twisted-style (``--port 4222``,
``--jetstream``), applied by :mod:`natsbroker.cli` so they mean exactly what
they mean on the ``natsbroker`` command line.  twistd's own ``--pidfile`` and
``--logfile`` (and ``--syslog``) take the place of ``--pid`` and ``--log``:
twistd writes the log, in its format, but not Twisted's start/stop chatter,
and ``--debug``/``--trace`` choose the levels as -D/-V do.
"""

import atexit
import os
import sys

from twisted.application import service
from twisted.logger import Logger
from twisted.python import usage

from natsbroker import cli, logs
from natsbroker.config import load as configfile
from natsbroker.config.load import ConfigError

_log = Logger()

# (option = cli flag name, short option, help)
_PARAMETERS = [
    ("config", "c", "Configuration file (nats-server format); options override it."),
    ("addr", "a", "Bind to host address (default: 0.0.0.0)."),
    ("port", "p", "Use port for clients (default: 4222; -1: random)."),
    ("name", "n", "Server name (default: auto)."),
    ("http_port", "m", "Use port for http monitoring (-1: random)."),
    ("https_port", None, "Use port for https monitoring (-1: random); needs TLS."),
    ("client_advertise", None, "Client URL to advertise to other servers."),
    ("ports_file_dir", None, "Creates a ports file in the specified directory."),
    ("store_dir", None, "JetStream storage directory."),
    ("user", None, "User required for connections."),
    ("pass", None, "Password required for connections."),
    ("auth", None, "Authorization token required for connections."),
    ("no_auth_user", None, "User for connections that send no credentials."),
    ("tlscert", None, "Server certificate file (turns TLS on)."),
    ("tlskey", None, "Private key for the server certificate."),
    ("tlscacert", None, "Client certificate CA for verification."),
    ("cluster", None, "Cluster URL for solicited routes."),
    ("cluster_name", None, "Cluster name."),
    ("routes", None, "Routes to solicit and connect (comma-separated URLs)."),
]
_FLAGS = [
    ("jetstream", None, "Enable JetStream."),
    ("debug", "D", "Enable debugging output."),
    ("trace", "V", "Trace the raw protocol."),
    ("tls", None, "Enable TLS, do not verify clients."),
    ("tlsverify", None, "Enable TLS, verify client certificates."),
]


class Options(usage.Options):
    synopsis = "[options]"
    optParameters = [[name, short, None, doc] for name, short, doc in _PARAMETERS]
    optFlags = [[name, short, doc] for name, short, doc in _FLAGS]

    def __init__(self):
        super().__init__()
        self["listen"] = []
        self.config = None
        self.warnings = []

    def opt_listen(self, endpoint):
        self["listen"].append(endpoint)

    # twistd prints the docstring as the help, newlines and indentation included.
    opt_listen.__doc__ = (
        "Also accept clients on this Twisted endpoint, e.g. tcp:4223:interface=127.0.0.1 "
        "(may repeat; with --port 0, only on these)."
    )

    def postOptions(self):
        # late: twistd imports this module to list plugins
        from natsbroker.auth.jwt.operator import check_resolver_start
        from natsbroker.config.operator import OperatorError

        # Option values go through the command line's flag table, so that
        # e.g. --port here and -p there are checked and mapped by the same code.
        cl = cli.CommandLine()
        try:
            for name, _, _ in _PARAMETERS:
                if self[name] is not None:
                    cli.apply_flag(cl, name, self[name])
            for name, _, _ in _FLAGS:
                if self[name]:
                    cli.apply_flag(cl, name, True)
            if self["listen"]:
                cl.set("listen", value=list(self["listen"]))
                if self["port"] == "0":
                    # nats-server reads port 0 as 4222, but with --listen it is
                    # how to ask server.make_service for only these endpoints.
                    cl.set("port", value=0)
            self.config, self.warnings = cli.build_config(cl)
            configfile.validate_start(self.config)
            check_resolver_start(self.config)
        except (cli.CommandLineError, ConfigError, OperatorError) as e:
            raise usage.UsageError(str(e)) from None


def makeService(options):
    from twisted.internet import reactor

    from natsbroker.server import make_service  # late: twistd imports this module to list plugins
    from natsbroker.signals import install_twistd

    for warning in options.warnings:
        _log.warn("{warning}", warning=warning)
    top = make_service(options.config)
    if isinstance(top, service.MultiService):
        # twistd's log, which it opens after this, without Twisted's own
        # chatter and with nats-server's -D/-V levels.
        logs.TwistdLogFilter(options.config).setServiceParent(top)
    # twistd traps SIGINT/SIGTERM (and SIGUSR1 for its --logfile) itself.
    reactor.callWhenRunning(install_twistd, reactor, top)
    from natsbroker.gctune import tune
    reactor.callWhenRunning(tune)
    if isinstance(top, service.MultiService):
        atexit.register(_exit_status, top.getServiceNamed("natsbroker"))
    return top


def _exit_status(broker_service):
    """A server that could not start exits with status 1 under twistd too
    (twistd itself ends with 0 whatever stopped its reactor): the last thing
    the process does, after twistd has removed its pid file."""
    code = getattr(broker_service, "exit_code", 0)
    if code:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
