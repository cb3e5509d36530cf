"""The operator-mode parts of a configuration, checked as nats-server checks
them when it loads one (validateTrustedOperators, no_auth_user, the system
account, the default resolver). The URL resolver's own start check fetches
over HTTP and is operator mode's (``natsbroker.auth.jwt.operator``), run by
the commands that start a server.
"""


from natsbroker import COMPAT_VERSION
from natsbroker.auth.jwt import claims as C
from natsbroker.auth.jwt.trust import ACCOUNT_VALIDATION, trusted_keys, verify_account
from natsbroker.config.model import ResolverConfig
from natsbroker.gocompat.quote import go_quote


class OperatorError(Exception):
    """A configuration nats-server refuses to start with (its words)."""


def _version(text):
    parts = text.split(".") if text else []
    if not text:
        return 0, 0, 0
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ValueError("invalid version string format %s" % text)
    return tuple(int(p) for p in parts)


def check_operator_config(config):
    """nats-server's validateTrustedOperators and the operator-mode parts of
    its start (no_auth_user, the system account, the default resolver).
    Sets ``config.system_account`` from the operator JWT when the config
    names none. Raises :class:`OperatorError`."""
    if not config.operators:
        if config.trusted_keys and config.no_auth_user:
            raise OperatorError("no_auth_user not compatible with Trusted Operator")
        return
    operators = [C.decode_operator(j) for j in config.operators]
    if len(operators) == 1:
        if config.resolver is None and config.resolver_url is None:
            config.resolver_url = (operators[0].account_server_url or "") + "/accounts"
        if not config.system_account:
            config.system_account = operators[0].system_account
    if config.resolver is None and config.resolver_url is None:
        raise OperatorError("operators require an account resolver to be configured")
    if config.accounts:
        raise OperatorError("operators do not allow Accounts to be configured directly")
    auth = config.authorization
    if auth.users or auth.nkeys:
        raise OperatorError("operators do not allow users to be configured directly")
    if config.trusted_keys:
        raise OperatorError("conflicting options for 'TrustedKeys' and 'TrustedOperators'")
    if config.system_account:
        non_empty = [op.system_account for op in operators if op.system_account]
        if non_empty and config.system_account not in non_empty:
            raise OperatorError("system_account in config and operator JWT must be identical")
    elif config.resolver is not None and config.resolver.type in ("FULL", "CACHE"):
        raise OperatorError("using nats based account resolver - the system account needs to be "
                            "specified in configuration or the operator jwt")
    server = _version(COMPAT_VERSION.split("-")[0])
    for op in operators:
        try:
            want = _version(op.assert_server_version)
        except ValueError as e:
            raise OperatorError("operator %s expects version %s got error instead: %s"
                                % (op.subject, op.assert_server_version, e)) from None
        for i, what in enumerate(("major", "minor", "update")):
            if want[i] > server[i]:
                raise OperatorError("operator %s expected %s version %d > server %s version %d"
                                    % (op.subject, what, want[i], what, server[i]))
            if server[i] > want[i]:
                break
    for key in trusted_keys(config, operators):
        if not C.is_public_key(key, "O"):
            raise OperatorError("trusted Keys %s are required to be a valid public operator nkey"
                                % go_quote(key))
    for key in config.resolver_pinned_accounts:
        if not C.is_public_key(key, "A"):
            raise OperatorError("pinned account key %s is not a valid public account nkey" % go_quote(key))
    if config.no_auth_user:
        raise OperatorError("no_auth_user not compatible with Trusted Operator")
    if config.resolver is None:
        # The operator's account server: a URL resolver (checked at start).
        url = config.resolver_url or ""
        config.resolver = ResolverConfig("URL", url=url if url.endswith("/") else url + "/")
    sys_key = config.system_account
    if sys_key and config.resolver.type == "MEMORY":
        # The system account is looked up when the server starts.
        if not C.is_public_key(sys_key, "A"):
            raise OperatorError("error resolving system account: will only fetch valid account keys")
        token = config.resolver_preload.get(sys_key)
        if token is None:
            raise OperatorError("error resolving system account: account missing")
        if verify_account(token, sys_key, set(trusted_keys(config, operators))) is None:
            raise OperatorError("error resolving system account: " + ACCOUNT_VALIDATION)

