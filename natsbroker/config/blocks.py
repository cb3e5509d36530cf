"""The loader's machinery: a block's table from key (and nats-server's aliases)
to a handler, and the walk that checks a parsed map against it, collecting
warnings and the keys nats-server refuses.
"""

import attrs

from natsbroker.config.values import BadValue, ConfigError, check_duration, go_position, host_port, show_value


@attrs.frozen
class Where:
    file: str
    line: int
    col: int

    def __str__(self):
        return f"{self.file}:{self.line}:{self.col}"


class Loader:
    """Walks the parsed file, collecting warnings and refused keys as it goes."""

    def __init__(self):
        self.warnings = []
        # Keys refused as nats-server refuses them: it reports every one
        # (and carries on reading), so they are raised together at the end.
        self.errors = []

    def block(self, m, table, where, unknown=None):
        """Check the map ``m`` against ``table``; return its overrides.

        An unknown key is nats-server's ``unknown field "key"`` (collected),
        or with ``unknown`` (a message with ``{key}``) that error, raised at
        once, as nats-server's blocks with their own words do; a key of
        ``table``'s unsupported ones is refused as not supported."""
        if not isinstance(m, dict):
            raise BadValue(f"expected a map, got {show_value(m)}")
        out = {}
        positions = getattr(m, "positions", {})
        for key, value in m.items():
            at = Where(*positions[key]) if key in positions else where
            handler = table.get(key.lower())  # nats-server matches keys case-insensitively
            if handler is None or handler is NOT_SUPPORTED:
                self._refuse(m, key, at, handler, unknown)
                continue
            try:
                handler(self, value, at, out)
            except BadValue as e:
                raise ConfigError(f'{at}: invalid value for "{key}": {e}') from None
        return out

    def _refuse(self, m, key, at, handler, unknown):
        go_at = go_position((at.file, at.line, at.col), key in getattr(m, "quoted", ()))
        if handler is NOT_SUPPORTED:
            error = f'{go_at}: field "{key}" is known to nats-server but not supported by natsbroker'
            if unknown is not None:  # (a block nats-server stops reading at its first bad key)
                raise ConfigError(error)
            self.errors.append(error)
        elif unknown is not None:
            raise ConfigError(f"{go_at}: " + unknown.format(key=key))
        elif key not in getattr(m, "used", ()):  # (a variable used elsewhere is no field)
            self.errors.append(f'{go_at}: unknown field "{key}"')


def NOT_SUPPORTED(ld, v, at, out):
    """The handler of keys nats-server knows that natsbroker does not
    implement (the loader refuses them before calling it)."""
    raise AssertionError("not called")


def key_table(spec, unsupported=""):
    """Expand ``{"alias1 alias2": handler}`` to one entry per alias, and
    mark the keys in ``unsupported`` (nats-server knows them, natsbroker
    does not implement them) as refused."""
    table = {alias: NOT_SUPPORTED for alias in unsupported.split()}
    table.update({alias: handler for aliases, handler in spec.items() for alias in aliases.split()})
    return table


def set_field(field, check):
    def handle(ld, v, at, out):
        out[field] = check(v)

    return handle


def set_block(field, parse):
    """Like set_field, for values that are blocks themselves (parse gets the loader)."""

    def handle(ld, v, at, out):
        out[field] = parse(ld, v, at)

    return handle


def set_interval(field):
    def handle(ld, v, at, out):
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            # As nats-server warns: unquoted "2m" is the size 2000000, not 2 minutes.
            ld.warnings.append(f'{at.file}:{at.line}: {field} should be converted to a duration such as "2m"'
                               f" ({v} is taken as seconds)")
        out[field] = check_duration(v)

    return handle


def set_listen(host_field, port_field, port_check):
    def handle(ld, v, at, out):
        host, number = host_port(v)
        if host:
            out[host_field] = host
        out[port_field] = port_check(number)

    return handle
