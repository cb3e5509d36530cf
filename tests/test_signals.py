"""Unit tests: ``--signal`` (nats-server's ProcessSignal, with fake kill and
process table: never a real signal to a process found by name on this shared
machine), the lame duck close schedule driven by task.Clock, the config keys."""

import json
import os
import random
import signal
import types

import pytest
from twisted.internet import defer, task
from zope.interface import implementer

from natsbroker import lameduck, logs
from natsbroker.broker import Broker
from natsbroker.config import load as configfile
from natsbroker.config.model import ServerConfig
from natsbroker.gocompat.durations import NANOS
from natsbroker.interfaces import ILameDuckObserver
from natsbroker.signals import SignalError, is_natsbroker, natsbroker_pids, process_signal, process_signal_arg


class Kills:
    def __init__(self, fail=None):
        self.sent = []
        self.fail = fail or {}

    def __call__(self, pid, signum):
        if pid in self.fail:
            raise self.fail[pid]
        self.sent.append((pid, signum))


def _found(*pids):
    return lambda: list(pids)


@pytest.mark.parametrize("command,signum", [
    ("stop", signal.SIGKILL), ("quit", signal.SIGINT), ("reopen", signal.SIGUSR1),
    ("reload", signal.SIGHUP), ("ldm", signal.SIGUSR2), ("term", signal.SIGTERM)])
def test_commands_send_nats_servers_signals(command, signum):
    kill = Kills()
    process_signal(command, "123", kill, _found())
    assert kill.sent == [(123, signum)]


def test_without_a_pid_the_single_running_server():
    kill = Kills()
    process_signal("ldm", "", kill, _found(77))
    assert kill.sent == [(77, signal.SIGUSR2)]


def test_without_a_pid_none_or_several_is_an_error():
    with pytest.raises(SignalError, match="^no natsbroker processes running$"):
        process_signal("ldm", "", Kills(), _found())
    with pytest.raises(SignalError) as e:
        process_signal("ldm", "", Kills(), _found(12, 34))
    assert str(e.value) == "multiple natsbroker processes running:\n12\n34"


def test_glob_signals_the_pids_it_prefixes():
    kill = Kills()
    process_signal("reload", "12*", kill, _found(12, 123, 45, 1))
    assert kill.sent == [(12, signal.SIGHUP), (123, signal.SIGHUP)]
    kill = Kills()
    process_signal("reload", "9*", kill, _found(12))  # nothing matches: no error
    assert kill.sent == []


def test_pid_checks_in_nats_servers_order():
    with pytest.raises(SignalError, match="^invalid pid: abc$"):
        process_signal("bogus", "abc", Kills(), _found())
    with pytest.raises(SignalError, match='^unknown signal "bogus"$'):
        process_signal("bogus", "5", Kills(), _found())
    # Resolving comes before the command is looked at.
    with pytest.raises(SignalError, match="^no natsbroker processes running$"):
        process_signal("bogus", "", Kills(), _found())


def test_pid_written_otherwise_than_printed_matches_nothing():
    # nats-server compares the text: "0123" and "+5" are read but not sent to.
    kill = Kills()
    process_signal("ldm", "0123", kill, _found())
    process_signal("ldm", "+5", kill, _found())
    assert kill.sent == []


def test_kill_errors_are_collected():
    kill = Kills(fail={5: ProcessLookupError(3, "No such process")})
    with pytest.raises(SignalError) as e:
        process_signal("reload", "5", kill, _found())
    assert str(e.value) == '\nsignal "reload" 5: no such process'


def test_signal_argument_and_pid_file(tmp_path):
    kill = Kills()
    path = tmp_path / "server.pid"
    path.write_text("4242")
    process_signal_arg("ldm=%s" % path, kill, _found())
    assert kill.sent == [(4242, signal.SIGUSR2)]
    path.write_text("4242\n")  # read as it is, as nats-server does
    with pytest.raises(SignalError, match="^invalid pid: 4242\n$"):
        process_signal_arg("ldm=%s" % path, kill, _found())
    with pytest.raises(SignalError, match=r"^invalid signal parameters: \[2 3\]$"):
        process_signal_arg("ldm=1=2=3", kill, _found())


def test_which_processes_are_natsbroker(tmp_path):
    assert is_natsbroker("natsbroker", ["/venv/bin/python", "/venv/bin/natsbroker", "-p", "4222"])
    assert is_natsbroker("python3.11", ["python", "-m", "natsbroker", "-js"])
    assert is_natsbroker("python3.11", ["python", "-u", "-mnatsbroker"])
    assert not is_natsbroker("python3.11", ["python", "-m", "pytest", "natsbroker"])
    assert not is_natsbroker("nats-server", ["nats-server", "-js"])
    # A fake /proc: this process itself never counts.
    for pid, comm, argv in [(11, "natsbroker", ["natsbroker"]), (12, "bash", ["bash"]),
                            (os.getpid(), "natsbroker", ["natsbroker"]),
                            (13, "python3", ["python3", "-m", "natsbroker"])]:
        d = tmp_path / str(pid)
        d.mkdir()
        (d / "comm").write_text(comm + "\n")
        (d / "cmdline").write_bytes("\0".join(argv).encode() + b"\0")
    (tmp_path / "self").mkdir()
    assert natsbroker_pids(str(tmp_path)) == [11, 13]
    with pytest.raises(SignalError, match="^unable to resolve pid, try providing one$"):
        natsbroker_pids(str(tmp_path / "missing"))


# -- the close schedule ------------------------------------------------------------------


def test_close_schedule():
    # At most one client a second ...
    assert lameduck.close_schedule(3, 30 * NANOS, NANOS) == (NANOS, 1)
    # ... else spread over what the grace period leaves ...
    assert lameduck.close_schedule(290, 30 * NANOS, NANOS) == (100_000_000, 1)
    # ... at least 1 s of it ...
    assert lameduck.close_schedule(4, 10 * NANOS, 10 * NANOS) == (250_000_000, 1)
    # ... and in batches with more clients than nanoseconds.
    assert lameduck.close_schedule(10, NANOS + 3, NANOS) == (1, 3)


class FixedRandom(random.Random):
    def __init__(self, value):
        super().__init__()
        self.value = value

    def randrange(self, n):
        return min(self.value, n - 1)


class FakePort:
    stopped = False

    def stopListening(self):
        self.stopped = True
        return defer.succeed(None)


class FakeClient:
    _ids = iter(range(1, 1000))

    def __init__(self, clock, protocol=1, pong=True):
        self.clock = clock
        self.cid = next(self._ids)
        self.host = "127.0.0.1"
        self.opts = types.SimpleNamespace(protocol=protocol)
        self._first_pong_sent = pong
        self.closed = False
        self.closed_at = None
        self.sent = []

    def send(self, data):
        self.sent.append(data)

    def close(self, reason):
        assert reason == "Server Shutdown"
        if not self.closed:
            self.closed, self.closed_at = True, self.clock.seconds()


@implementer(ILameDuckObserver)
class FakePlugin:
    """A plugin with a lame duck hook (JetStream's is to shut down)."""

    name = "fake"

    def __init__(self):
        self.told = 0

    def stop(self):
        pass

    def lame_duck_entered(self):
        self.told += 1


def _lame_duck(clients=3, duration=30.0, grace=1.0, value=0, **kw):
    clock = task.Clock()
    config = ServerConfig(lame_duck_duration=duration, lame_duck_grace_period=grace)
    broker = Broker(config, clock)
    service = types.SimpleNamespace(broker=broker, ports=[FakePort()], ws_port=FakePort(), _started=[],
                                    cluster=None)
    made = [FakeClient(clock, **kw) for _ in range(clients)]
    for c in made:
        broker.register(c)
    stops = []
    ldm = lameduck.LameDuck(service, clock, stop=lambda: stops.append(clock.seconds()),
                            rng=FixedRandom(value))
    return clock, service, made, stops, ldm


def test_lame_duck_closes_clients_over_time():
    clock, service, clients, stops, ldm = _lame_duck()
    ldm.enter()
    assert service.ports[0].stopped and service.ws_port.stopped
    assert service.broker.lame_duck
    for c in clients:
        (info,) = c.sent
        fields = json.loads(info[5:])
        assert fields["ldm"] is True and fields["client_id"] == c.cid
        assert list(fields)[-3:] == ["ldm", "api_lvl", "xkey"]  # nats-server's order
    clock.advance(0.999)
    assert not any(c.closed for c in clients)
    # The grace period, then one by one, pausing at least half the interval.
    clock.pump([0.001] + [0.5] * 4)
    assert [c.closed_at for c in clients] == [1.0, 1.5, 2.0]
    assert stops == [2.0]


def test_lame_duck_pauses_are_random_up_to_the_interval():
    clock, service, clients, stops, ldm = _lame_duck(clients=2, value=900_000_000)
    ldm.enter()
    clock.pump([1.0, 0.9])
    assert [c.closed_at for c in clients] == [1.0, 1.9]
    assert stops == [1.9]


def test_lame_duck_info_only_to_clients_taking_async_info():
    clock, service, clients, stops, ldm = _lame_duck(clients=1, protocol=0)
    ldm.enter()
    assert clients[0].sent == []
    clock, service, clients, stops, ldm = _lame_duck(clients=1, pong=False)
    ldm.enter()
    assert clients[0].sent == []


def test_lame_duck_without_clients_stops_at_once():
    clock, service, clients, stops, ldm = _lame_duck(clients=0)
    ldm.enter()
    assert stops == [0.0]


def test_lame_duck_tells_the_started_plugins_first():
    # (nats-server shuts JetStream down here; a plugin not started yet is not told)
    clock, service, clients, stops, ldm = _lame_duck()
    started, idle = FakePlugin(), FakePlugin()
    idle.name = "idle"
    service.broker.add_plugin(started)
    service.broker.add_plugin(idle)
    service._started.append(started)
    ldm.enter()
    assert (started.told, idle.told) == (1, 0)


def test_lame_duck_once_and_not_while_stopping():
    clock, service, clients, stops, ldm = _lame_duck()
    ldm.enter()
    clients[0].sent = []
    ldm.enter()
    assert clients[0].sent == []
    # A shutdown (SIGINT) during the grace period ends the schedule.
    service.broker.shutting_down = True
    clock.advance(5)
    assert not any(c.closed for c in clients) and stops == []
    clock, service, clients, stops, ldm = _lame_duck()
    service.ports = []  # no client listener: nothing to do, as nats-server
    ldm.enter()
    assert not ldm.active


# -- config -------------------------------------------------------------------------------


def test_config_keys(tmp_path):
    path = tmp_path / "c.conf"
    path.write_text('lame_duck_duration: "45s"\nlame_duck_grace_period: "2.5s"\n')
    config, _ = configfile.load_config(str(path))
    assert (config.lame_duck_duration, config.lame_duck_grace_period) == (45.0, 2.5)
    path.write_text('lame_duck_grace_period: "0s"\n')  # 0: the default
    config, _ = configfile.load_config(str(path))
    assert (config.lame_duck_duration, config.lame_duck_grace_period) == (120.0, 10.0)
    configfile.validate_lame_duck(config)
    config.lame_duck_grace_period = 120.0
    with pytest.raises(configfile.ConfigError, match=r"^lame duck grace period \(2m0s\) should be "
                                                     r"strictly lower than lame duck duration \(2m0s\)$"):
        configfile.validate_lame_duck(config)


def test_log_file_reopen(tmp_path, monkeypatch):
    path = tmp_path / "x.log"
    observer = logs.NatsLineObserver(open(path, "a"), logtime=False)
    monkeypatch.setattr(logs, "_line_observer", observer)
    observer({"log_format": "one", "log_level": None})
    os.rename(path, str(path) + ".1")
    assert logs.reopen(str(path))
    observer({"log_format": "two", "log_level": None})
    observer.stream.close()
    assert (tmp_path / "x.log.1").read_text().endswith("one\n")
    assert path.read_text().endswith("two\n")
