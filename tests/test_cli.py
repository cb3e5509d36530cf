"""The natsbroker command line (natsbroker.cli) and the twistd plugin (natsbroker.tap)."""

import importlib
import re

import pytest
from twisted.python import usage

from natsbroker import cli, tap
from natsbroker.cli import CommandLineError, main, parse_args
from natsbroker.config.load import ConfigError


def config_of(*argv):
    config, warnings = parse_args(list(argv))
    return config


@pytest.mark.parametrize(
    "argv",
    [["-p", "4333"], ["-p=4333"], ["--p", "4333"], ["--port", "4333"], ["--port=4333"], ["-port", "4333"],
     ["-p", "0x10ed"]],
)
def test_value_flag_syntax(argv):
    assert config_of(*argv).port == 4333


def test_defaults():
    config, warnings = parse_args([])
    assert (config.host, config.port, config.http_port, config.jetstream.enabled) == ("0.0.0.0", 4222, 0, False)
    assert warnings == []


def test_random_ports():
    config = config_of("-p", "-1", "-m=-1")
    assert (config.port, config.http_port) == (-1, -1)


def test_last_flag_wins():
    assert config_of("-p", "1", "--port", "2").port == 2


@pytest.mark.parametrize(
    "argv, debug, trace",
    [([], False, False), (["-D"], True, False), (["-V"], False, True), (["--debug", "--trace"], True, True),
     (["-DV"], True, True), (["-VV"], False, True), (["-DVV"], True, True), (["--DV"], True, True),
     (["-DV=false"], False, False), (["-D=true"], True, False)],
)
def test_debug_trace(argv, debug, trace):
    config = config_of(*argv)
    assert (config.debug, config.trace) == (debug, trace)


@pytest.mark.parametrize("argv, logtime", [([], True), (["-T"], True), (["-T=false"], False),
                                           (["--logtime=0"], False), (["--logtime=F"], False)])
def test_logtime(argv, logtime):
    assert config_of(*argv).logtime is logtime


def test_string_flags():
    config = config_of("-a", "127.0.0.1", "-n", "alpha", "-P", "/tmp/n.pid", "-l", "/tmp/n.log",
                       "--client_advertise", "example.com:4222", "--ports_file_dir", "/tmp")
    assert (config.host, config.server_name, config.pid_file, config.log_file) == (
        "127.0.0.1", "alpha", "/tmp/n.pid", "/tmp/n.log")
    assert (config.client_advertise, config.ports_file_dir) == ("example.com:4222", "/tmp")
    assert config_of("--net", "::1", "--server_name", "b").host == "::1"
    assert config_of("--addr=10.0.0.1", "--name=c").server_name == "c"


def test_jetstream_flags():
    config = config_of("-js", "-sd", "/data")
    assert (config.jetstream.enabled, config.jetstream.store_dir) == (True, "/data")
    assert config_of("--jetstream", "--store_dir=/d").jetstream.enabled
    # As nats-server, a store directory alone does not turn JetStream on.
    config = config_of("-sd", "/data")
    assert (config.jetstream.enabled, config.jetstream.store_dir) == (False, "/data")


def test_auth_flags():
    auth = config_of("--user", "u", "--pass", "p").authorization
    assert (auth.user, auth.password, auth.enabled) == ("u", "p", True)
    assert config_of("--auth", "tok").authorization.token == "tok"


def test_cluster_flags():
    cluster = config_of("--cluster", "nats://127.0.0.1:6222", "--cluster_name", "east",
                        "--routes", "nats://a:6222, nats://b:6222").cluster
    assert (cluster.name, cluster.host, cluster.port) == ("east", "127.0.0.1", 6222)
    assert cluster.routes == ["nats://a:6222", "nats://b:6222"]
    assert config_of("--cluster_listen", "0.0.0.0:7222").cluster.port == 7222


def test_ignored_flags_warn():
    config, warnings = parse_args(["--max_traced_msg_len", "30", "--log_size_limit", "3", "-p", "5"])
    assert (config.port, config.log_size_limit) == (5, 3)  # parsing went on past them
    assert warnings == ["-max_traced_msg_len is not supported by natsbroker and is ignored"]


def test_cluster_flags_are_honoured():
    # (--connect_retries, --no_advertise and --cluster_advertise were once ignored.)
    config, warnings = parse_args(["--cluster", "nats://127.0.0.1:-1", "--connect_retries", "3",
                                   "--no_advertise", "--cluster_advertise", "10.0.0.1:7000"])
    assert warnings == []
    assert (config.cluster.connect_retries, config.cluster.no_advertise, config.cluster.advertise) == (
        3, True, "10.0.0.1:7000")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--bogus"], "flag provided but not defined: -bogus"),
        (["-DVD"], "flag provided but not defined: -DVD"),
        (["-p"], "flag needs an argument: -p"),
        (["-p", "abc"], 'invalid value "abc" for flag -p: parse error'),
        (["-p", "70000"], 'invalid value "70000" for flag -p: port 70000 is out of range'),
        (["-js=maybe"], 'invalid boolean value "maybe" for -js: parse error'),
        (["---p", "1"], "bad flag syntax: ---p"),
        (["-=1"], "bad flag syntax: -=1"),
        (["--cluster", "nohost"], 'invalid value "nohost" for flag -cluster'),
        (["extra"], 'unrecognized command: "extra"'),
        (["-js", "false"], 'unrecognized command: "false"'),  # booleans take no separate value
        (["--", "-p", "1"], 'unrecognized command: "-p"'),
    ],
)
def test_command_line_errors(argv, message):
    with pytest.raises(CommandLineError) as e:
        parse_args(argv)
    assert message in str(e.value)


def test_unknown_flag_exit_code(capsys):
    assert main(["--bogus"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines()[0] == "flag provided but not defined: -bogus"
    assert "Usage: natsbroker [options]" in err


def test_unsupported_flag_exit_code(capsys):
    assert main(["--profile", "6060"]) == 2
    err = capsys.readouterr().err
    assert err == "natsbroker: -profile is not supported: natsbroker has no Go profiler\n"


@pytest.mark.parametrize(
    "argv, message",
    [
        # nats-server's words for TLS flags without a usable certificate/key.
        (["--tls"], "natsbroker: TLS Server certificate must be present and valid\n"),
        (["--tlsverify"], "natsbroker: TLS Server certificate must be present and valid\n"),
        (["--tlscert", "c.pem"], "natsbroker: TLS Server private key must be present and valid\n"),
        (["--tlscert", "/nonexistent.pem", "--tlskey", "k.pem"],
         "natsbroker: error parsing X509 certificate/key pair: open /nonexistent.pem: "
         "no such file or directory\n"),
        (["-ms", "8443"], "natsbroker: Can't start monitoring: TLS cert and key required for HTTPS\n"),
    ],
)
def test_tls_flag_errors(capsys, argv, message):
    assert main(argv) == 1
    assert capsys.readouterr().err == message


@pytest.mark.parametrize("argv", [["-v"], ["--version"], ["version"], ["-h", "-v"]])
def test_version(capsys, argv):
    assert main(argv) == 0
    assert capsys.readouterr().out == f"natsbroker: v{cli.VERSION}\n"


@pytest.mark.parametrize("argv", [["-h"], ["--help"], ["help"]])
def test_help(capsys, argv):
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("\nUsage: natsbroker [options]\n")
    assert "-js, --jetstream" in out


def test_help_lists_only_accepted_flags():
    flags = set(re.findall(r"(?<![\w<])--?([A-Za-z][\w]*)", cli.USAGE))
    assert {"p", "port", "js", "sd", "DVV", "server_name", "no_auth_user"} <= flags
    for flag in flags:
        assert flag in cli._BY_NAME and not cli._BY_NAME[flag].refuse, flag


# -- the config file under the flags ------------------------------------------------


@pytest.fixture
def conf_file(tmp_path):
    path = tmp_path / "server.conf"
    path.write_text(
        "port: 4333\n"
        "http_port: 8333\n"
        "debug: false\n"
        "server_name: fromfile\n"
        "jetstream { store_dir: /file/store, max_mem: 1MB }\n"
        "authorization { users: [{user: a, password: b}, {user: guest}] }\n"
        "no_auth_user: guest\n"
        "ping_interval: 120\n"  # (a warning)
    )
    return path


def test_flags_override_config_file(conf_file):
    config, warnings = parse_args(["-c", str(conf_file), "-p", "5555", "-D", "-js=false", "-sd", "/flag/store"])
    assert (config.port, config.debug, config.server_name, config.http_port) == (5555, True, "fromfile", 8333)
    js = config.jetstream
    assert (js.enabled, js.store_dir, js.max_memory_store) == (False, "/flag/store", 1024 * 1024)
    assert [u.user for u in config.authorization.users] == ["a", "guest"]
    assert config.config_file == str(conf_file)
    assert warnings == [f'{conf_file}:8: ping_interval should be converted to a duration such as "2m" (120 is taken as seconds)']


def test_flags_before_config_flag_still_win(conf_file):
    assert config_of("-p", "5555", "--config", str(conf_file)).port == 5555


def test_check_config(capsys, conf_file):
    assert main(["-c", str(conf_file), "-t"]) == 0
    err = capsys.readouterr().err
    assert f'natsbroker: warning: {conf_file}:8: ping_interval should be converted' in err
    assert err.endswith(f"natsbroker: configuration file {conf_file} is valid\n")


def test_check_config_needs_a_file(capsys):
    assert main(["-t"]) == 1
    assert "must specify [-c, --config]" in capsys.readouterr().err


def test_config_syntax_error_exit(capsys, tmp_path):
    path = tmp_path / "bad.conf"
    path.write_text("port: 4222\nlisten: {\n")
    assert main(["-c", str(path)]) == 1
    # nats-server's shape and line (where it gave up: the end), then where the map opened
    assert capsys.readouterr().err == f"natsbroker: Parse error on line 3: 'unterminated map: missing '}}'' ({path}:2:9)\n"


def test_config_bad_value_exit(capsys, tmp_path):
    path = tmp_path / "bad.conf"
    path.write_text("\nport: abc\n")
    assert main(["-c", str(path), "-t"]) == 1
    assert capsys.readouterr().err.startswith(f'natsbroker: {path}:2:1: invalid value for "port"')


def test_missing_config_file(capsys, tmp_path):
    assert main(["-c", str(tmp_path / "none.conf")]) == 1
    assert capsys.readouterr().err == f"natsbroker: open {tmp_path / 'none.conf'}: no such file or directory\n"


def test_flags_checked_after_merge(conf_file):
    with pytest.raises(ConfigError, match="a users array"):
        parse_args(["-c", str(conf_file), "--auth", "tok"])


def test_main_runs_the_server(monkeypatch, capsys, conf_file):
    import sys
    import types

    seen = []
    fake = types.ModuleType("natsbroker.server")
    fake.run = lambda config: seen.append(config) or 7
    monkeypatch.setitem(sys.modules, "natsbroker.server", fake)
    assert main(["-c", str(conf_file), "-p", "1"]) == 7
    assert seen[0].port == 1
    assert "ping_interval should be converted" in capsys.readouterr().err


# -- twistd plugin -----------------------------------------------------------------


def tap_options(*argv):
    options = tap.Options()
    options.parseOptions(list(argv))
    return options


def test_tap_options():
    config = tap_options("--port", "5000", "-a", "127.0.0.1", "-m", "8000", "--name", "t",
                         "--jetstream", "--store_dir", "/data", "--user", "u", "--pass", "p",
                         "-D", "-V", "--cluster_name", "c", "--routes", "nats://a:1").config
    assert (config.port, config.host, config.http_port, config.server_name) == (5000, "127.0.0.1", 8000, "t")
    assert (config.jetstream.enabled, config.jetstream.store_dir) == (True, "/data")
    assert (config.authorization.user, config.authorization.password) == ("u", "p")
    assert (config.debug, config.trace) == (True, True)
    assert (config.cluster.name, config.cluster.routes) == ("c", ["nats://a:1"])


def test_tap_defaults_and_listen():
    options = tap_options("--listen", "tcp:4223:interface=127.0.0.1", "--listen=unix:/tmp/nats.sock")
    assert options.config.listen == ["tcp:4223:interface=127.0.0.1", "unix:/tmp/nats.sock"]
    assert (options.config.port, options.config.jetstream.enabled) == (4222, False)
    assert tap_options().config.listen == []
    # --port 0 leaves only the --listen endpoints (port 0 alone is 4222, as nats-server).
    assert tap_options("--port", "0", "--listen", "unix:/tmp/s").config.port == 0
    assert tap_options("--port", "0").config.port == 4222


def test_tap_config_file(conf_file):
    options = tap_options("--config", str(conf_file), "-p", "-1")
    assert (options.config.port, options.config.http_port) == (-1, 8333)
    assert options.warnings == [f'{conf_file}:8: ping_interval should be converted to a duration such as "2m" (120 is taken as seconds)']


@pytest.mark.parametrize("argv, message", [(["--port", "x"], "parse error"), (["--bogus"], "bogus"),
                                           (["--config", "/nonexistent.conf"],
                                            "open /nonexistent.conf: no such file or directory")])
def test_tap_errors(argv, message):
    with pytest.raises(usage.UsageError, match=message):
        tap_options(*argv)


def test_tap_make_service(monkeypatch):
    import sys
    import types

    fake = types.ModuleType("natsbroker.server")
    fake.make_service = lambda config: ("service", config.port)
    monkeypatch.setitem(sys.modules, "natsbroker.server", fake)
    assert tap.makeService(tap_options("-p", "1234")) == ("service", 1234)


def test_plugin_service_maker():
    plugin = importlib.import_module("twisted.plugins.natsbroker_plugin").natsbroker
    assert (plugin.tapname, plugin.module) == ("natsbroker", "natsbroker.tap")
    assert plugin.options is tap.Options
