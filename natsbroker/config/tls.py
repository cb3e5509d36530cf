"""``tls { }`` blocks (client port, cluster, websocket), whose certificate
files and values are checked while the file is read, as nats-server checks them.
"""

from natsbroker.config.blocks import key_table, set_field
from natsbroker.config.model import TLSConfig
from natsbroker.config.values import (
    BadValue,
    ConfigError,
    check_boolean,
    check_duration,
    check_string,
    check_strings,
    converter,
    show_value,
)
from natsbroker.connection import tls as tls_module
from natsbroker.gocompat.durations import duration_seconds


def _tls_timeout(v):
    # nats-server reads a plain number as seconds (a float is allowed).
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if v < 0:
            raise BadValue(f"expected a duration >= 0, got {show_value(v)}")
        return float(v)
    return check_duration(v)


def tls_block(ld, v, at):
    """A ``tls { }`` block (client port, websocket): nats-server refuses
    unknown keys here, and checks the certificate files while reading."""
    out = ld.block(v, _TLS, at, unknown='error parsing tls config, unknown field "{key}"')
    cfg = converter.structure(out, TLSConfig)
    try:
        # As nats-server: the files are loaded now, so -t and start-up fail
        # early; the error points at the block's line, column 0.
        tls_module.server_context(cfg)
    except tls_module.TLSConfigError as e:
        raise ConfigError(f"{at.file}:{at.line}:0: {e}") from None
    return cfg


def _tls_checked(field, check):
    """A tls key whose values nats-server checks while reading the block."""
    def handle(ld, v, at, out):
        value = check(v)
        try:
            tls_module.check_block_values(TLSConfig(**{field: value}))
        except tls_module.TLSConfigError as e:
            raise ConfigError(f"{at}: {e}") from None
        out[field] = value

    return handle


def _handshake_first(ld, v, at, out):
    # true/false, or a duration (or "auto") that also allows falling back
    # to the INFO-first flow after that long without a ClientHello.
    if isinstance(v, bool):
        out["handshake_first"] = v
        return
    if isinstance(v, str):
        if v.lower() in ("auto", "auto_fallback"):
            out.update(handshake_first=True, handshake_first_fallback=tls_module.DEFAULT_TLS_FIRST_FALLBACK)
            return
        try:
            out.update(handshake_first=True, handshake_first_fallback=duration_seconds(v))
            return
        except ValueError:
            pass
    shown = '"%s"' % v if isinstance(v, str) else show_value(v)
    raise ConfigError(f'{at}: field "handshake_first"\'s value {shown} is invalid')


def parse_tls(ld, v, at, out):
    out["tls"] = tls_block(ld, v, at)


# The keys of a tls { } block (client port and websocket listener).
_TLS = key_table(
    {
        "cert_file": set_field("cert_file", check_string),
        "key_file": set_field("key_file", check_string),
        "ca_file": set_field("ca_file", check_string),
        "verify": set_field("verify", check_boolean),
        "verify_and_map": set_field("verify_and_map", check_boolean),
        "verify_cert_and_check_known_urls": set_field("verify_cert_and_check_known_urls", check_boolean),
        "insecure": set_field("insecure", check_boolean),
        "timeout": set_field("timeout", _tls_timeout),
        "handshake_first first immediate": _handshake_first,
        "pinned_certs": _tls_checked("pinned_certs", check_strings),
        "min_version": _tls_checked("min_version", check_string),
        "cipher_suites": _tls_checked("cipher_suites", check_strings),
        "curve_preferences": _tls_checked("curve_preferences", check_strings),
    },
    unsupported="allow_insecure_cipher_suites connection_rate_limit cert_store cert_match_by cert_match "
                "ca_certs_match cert_match_skip_invalid ocsp_peer certs certificates",
)
