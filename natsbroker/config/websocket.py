"""The ``websocket { }`` block and nats-server's checks of it."""

from natsbroker.config.authorization import identities
from natsbroker.config.blocks import key_table, set_block, set_field, set_listen
from natsbroker.config.tls import tls_block
from natsbroker.config.values import ConfigError, check_boolean, check_duration, check_port, check_string, check_strings
from natsbroker.gocompat.urls import host_and_port, parse_origin


def parse_websocket(ld, v, at, out):
    ws = ld.block(v, _WEBSOCKET, at)
    ws.update(ws.pop("authorization", {}))
    out["websocket"] = ws


_WS_AUTHORIZATION = key_table(
    {
        "user username": set_field("username", check_string),
        "password pass": set_field("password", check_string),
        "token": set_field("token", check_string),
        "timeout": set_field("auth_timeout", check_duration),
    }
)


_WEBSOCKET = key_table(
    {
        "host net": set_field("host", check_string),
        "port": set_field("port", check_port),
        "listen": set_listen("host", "port", check_port),
        "advertise": set_field("advertise", check_string),
        "no_tls": set_field("no_tls", check_boolean),
        "tls": set_block("tls", tls_block),
        "compression compress": set_field("compression", check_boolean),
        "same_origin": set_field("same_origin", check_boolean),
        "allowed_origins allowed_origin allow_origins allow_origin origins origin": set_field(
            "allowed_origins", check_strings),
        "handshake_timeout": set_field("handshake_timeout", check_duration),
        "authorization authentication": set_block(
            "authorization", lambda ld, v, at: ld.block(v, _WS_AUTHORIZATION, at)),
        "no_auth_user": set_field("no_auth_user", check_string),
        "jwt_cookie": set_field("jwt_cookie", check_string),
    },
    unsupported="user_cookie pass_cookie token_cookie headers ping_interval",
)


def validate_websocket(config):
    """nats-server's checks of the websocket block, in its order and words."""
    ws = config.websocket
    if not ws.enabled:
        return
    if ws.tls is None and not ws.no_tls:
        raise ConfigError("websocket requires TLS configuration")
    for origin in ws.allowed_origins:
        try:
            scheme, host = parse_origin(origin)
        except ValueError as e:
            raise ConfigError(f"unable to parse allowed origin: {e}") from None
        if scheme not in ("http", "https"):
            raise ConfigError(f'unable to parse allowed origin "{origin}": allowed origins must be '
                              "absolute URLs with http or https scheme")
        if not host:
            raise ConfigError(f'unable to parse allowed origin "{origin}": host is required')
        try:
            host_and_port(scheme == "https", host)
        except ValueError as e:
            raise ConfigError(f"unable to parse allowed origin: {e}") from None
    users = config.authorization.users + config.authorization.nkeys
    for acc in config.accounts:
        users = users + acc.users + acc.nkeys
    if ws.no_auth_user:
        if not users:
            raise ConfigError(f'no_auth_user: "{ws.no_auth_user}" present, but users/nkeys are not defined')
        if ws.no_auth_user not in identities(config):
            raise ConfigError(f'no_auth_user: "{ws.no_auth_user}" not present as user or nkey in '
                              "authorization block or account configuration")
    if users and ws.username:
        raise ConfigError("websocket authentication username not compatible with presence of users/nkeys")
    if users and ws.token:
        raise ConfigError("websocket authentication token not compatible with presence of users/nkeys")
    if ws.jwt_cookie and not config.operator_mode:
        # (nats-server: a cookie JWT needs trusted operators.)
        raise ConfigError("trusted operators or trusted keys configuration is required for "
                          f'JWT authentication via cookie "{ws.jwt_cookie}"')
