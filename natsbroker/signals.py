"""Signals, as nats-server handles them, and ``--signal`` to send them.

A running server (``natsbroker.server.run``) traps what nats-server traps
(signal.go) and logs ``Trapped "<name>" signal`` for each:

* SIGINT: shut down, exit 0;
* SIGTERM: the same, unless in lame duck mode (which ends on its own);
* SIGUSR1: reopen the log file (log rotation);
* SIGUSR2: lame duck mode (:mod:`natsbroker.lameduck`);
* SIGHUP: reload the configuration (what :meth:`BrokerService.reload` can).

SIGQUIT is not trapped by nats-server: Go's runtime dumps every goroutine's
stack to stderr and exits 2. natsbroker dumps every thread's stack and exits 2.

``natsbroker --signal <command>[=<pid>]`` is nats-server's ProcessSignal:
the command names a signal, the pid is a number, a pid file, or a pid prefix
ending in ``*``; without one, the single running natsbroker is signalled.
"""

import faulthandler
import os
import re
import signal
import sys

from twisted.logger import Logger

from natsbroker.fatal import go_strerror
from natsbroker.gocompat.quote import go_quote

log = Logger()

PROCESS_NAME = "natsbroker"

# Go's names for the signals (os.Signal's String()), as the log says them.
GO_NAMES = {
    signal.SIGINT: "interrupt",
    signal.SIGTERM: "terminated",
    signal.SIGHUP: "hangup",
    signal.SIGUSR1: "user defined signal 1",
    signal.SIGUSR2: "user defined signal 2",
}

# nats-server's Command values and the signals they send.
COMMANDS = {
    "stop": signal.SIGKILL,
    "quit": signal.SIGINT,
    "reopen": signal.SIGUSR1,
    "reload": signal.SIGHUP,
    "ldm": signal.SIGUSR2,
    "term": signal.SIGTERM,
}


class SignalError(Exception):
    """--signal could not do what was asked; the text is nats-server's."""


# -- sending (natsbroker --signal) ----------------------------------------------------


def send_command(arg, kill=os.kill, find=None):
    """``--signal <arg>``: send it; print the error as nats-server does and
    return the exit code."""
    try:
        process_signal_arg(arg, kill, find)
    except SignalError as e:
        print(f"{PROCESS_NAME}: {e}", file=sys.stderr)
        return 1
    return 0


def process_signal_arg(arg, kill=os.kill, find=None):
    """nats-server's processSignal: ``command[=pid]``, the pid possibly a
    pid file's path (its contents are the pid, taken as they are)."""
    command, *rest = arg.split("=")
    pid = ""
    if len(rest) == 1:
        pid = _maybe_read_pid_file(rest[0])
    elif len(rest) > 1:
        raise SignalError("invalid signal parameters: [%s]" % " ".join(rest[1:]))
    process_signal(command, pid, kill, find)


def _maybe_read_pid_file(text):
    try:
        with open(text, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return text


def _atoi(text):
    # Go's strconv.Atoi: an optional sign and decimal digits, nothing else.
    if not re.fullmatch(r"[+-]?[0-9]+", text) or not -(2**63) <= int(text) < 2**63:
        return None
    return int(text)


def process_signal(command, pid_expr, kill=os.kill, find=None):
    """nats-server's ProcessSignal: send ``command``'s signal to ``pid_expr``
    (a pid, a pid prefix ending in ``*``, or empty: the one natsbroker running)."""
    pid_str = pid_expr[:-1] if pid_expr.endswith("*") else pid_expr
    is_glob = pid_expr.endswith("*")
    pids = [0]
    if pid_str:
        pids[0] = _atoi(pid_str)
        if pids[0] is None:
            raise SignalError("invalid pid: %s" % pid_str)
    if not pid_str or is_glob:
        pids = (find or natsbroker_pids)()
    if len(pids) > 1 and not is_glob:
        raise SignalError("multiple %s processes running:%s"
                          % (PROCESS_NAME, "".join("\n%d" % p for p in pids)))
    if not pids:
        raise SignalError("no %s processes running" % PROCESS_NAME)
    if command not in COMMANDS:
        raise SignalError("unknown signal %s" % go_quote(command))
    signum = COMMANDS[command]
    errors = ""
    for pid in pids:
        # As nats-server: a pid written otherwise than it prints ("0123")
        # matches nothing, and a glob only the pids it prefixes.
        if str(pid) != pid_str and pid_str:
            if not is_glob or not str(pid).startswith(pid_str):
                continue
        try:
            kill(pid, signum)
        except OSError as e:
            errors += "\nsignal %s %d: %s" % (go_quote(command), pid, go_strerror(e))
    if errors:
        raise SignalError(errors)


def natsbroker_pids(proc="/proc"):
    """The pids of the running natsbroker processes but this one: those whose
    process name says natsbroker (the console script; nats-server asks
    ``pgrep nats-server``), and ``python -m natsbroker``."""
    try:
        entries = os.listdir(proc)
    except OSError:
        raise SignalError("unable to resolve pid, try providing one") from None
    me = os.getpid()
    pids = []
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(os.path.join(proc, entry, "comm"), "rb") as f:
                comm = f.read().decode("utf-8", "replace").strip()
            with open(os.path.join(proc, entry, "cmdline"), "rb") as f:
                argv = f.read().decode("utf-8", "replace").split("\0")
        except OSError:
            continue  # gone, or not ours to read
        if is_natsbroker(comm, argv):
            pids.append(int(entry))
    return sorted(pids)


def is_natsbroker(comm, argv):
    """Is a process with this name and command line a natsbroker server?"""
    if PROCESS_NAME in comm:
        return True
    # python [options] -m natsbroker ...
    for i, arg in enumerate(argv[1:], 1):
        if arg == "-m":
            return argv[i + 1:i + 2] == [PROCESS_NAME]
        if arg == "-m" + PROCESS_NAME:
            return True
        if not arg.startswith("-"):
            return False
    return False


# -- receiving (a running server) ------------------------------------------------------


def install(reactor, service):
    """Trap nats-server's signals for ``service`` (a BrokerService) run by
    ``reactor`` (stopped to shut down)."""

    def trapped(signum):
        log.info('Trapped "{name}" signal', name=GO_NAMES[signum])

    def on_signal(signum, frame):
        reactor.callFromThread(handle, signum)

    def handle(signum):
        trapped(signum)
        if signum == signal.SIGINT:
            _stop(reactor)
        elif signum == signal.SIGTERM:
            # A lame duck is shutting down gracefully already (nats-server 2.x).
            if service.lame_duck is None or not service.lame_duck.active:
                _stop(reactor)
        elif signum == signal.SIGUSR1:
            reopen_log_file(service.config)
        elif signum == signal.SIGUSR2:
            service.enter_lame_duck()
        elif signum == signal.SIGHUP:
            service.reload()

    for signum in GO_NAMES:
        signal.signal(signum, on_signal)
    signal.signal(signal.SIGQUIT, _quit)


def install_twistd(reactor, top):
    """Under twistd, which handles SIGINT, SIGTERM and (with --logfile) SIGUSR1
    itself: lame duck mode and reload for the natsbroker service in ``top``."""

    def on_signal(signum, frame):
        reactor.callFromThread(handle, signum)

    def handle(signum):
        log.info('Trapped "{name}" signal', name=GO_NAMES[signum])
        service = top.getServiceNamed("natsbroker")
        if signum == signal.SIGUSR2:
            service.enter_lame_duck()
        else:
            service.reload()

    signal.signal(signal.SIGUSR2, on_signal)
    signal.signal(signal.SIGHUP, on_signal)


def _stop(reactor):
    if reactor.running:
        reactor.stop()


def _quit(signum, frame):
    # Go's runtime on SIGQUIT: "SIGQUIT: quit", every goroutine's stack, exit 2.
    # Done here and now, not through the reactor, which may be what is stuck.
    try:
        sys.stderr.write("SIGQUIT: quit\n\n")
        sys.stderr.flush()
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    finally:
        os._exit(2)


def reopen_log_file(config):
    """SIGUSR1: nats-server's ReOpenLogFile (for rotating the log file)."""
    from natsbroker import logs

    if not config.log_file:
        log.info("File log re-open ignored, not a file logger")
        return
    if logs.reopen(config.log_file):
        log.info("File log re-opened")
