"""The values of a configuration file's keys: the errors a bad one raises, the
checks that turn a raw value into a field's value, and nats-server's texts
(its ``file:line:col``, Go's types and values) that its errors are written in.
"""

import datetime
import decimal

import cattrs

from natsbroker.config import syntax as conf
from natsbroker.config.model import DEFAULT_PORT
from natsbroker.gocompat.durations import duration_seconds
from natsbroker.gocompat.times import go_time_string
from natsbroker.subjects.sublist import is_valid_subject


class ConfigError(ValueError):
    """A configuration the server cannot run with; the message says where."""


class BadValue(Exception):
    """Raised by value checks; the caller says where (file position or flag)."""


# cattrs turns the checked, normalised dicts into the nested attrs classes.
converter = cattrs.Converter()


def show_value(v):
    kind = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array"}
    return f"{kind.get(type(v), 'map' if isinstance(v, dict) else type(v).__name__)} {v!r}"


def check_string(v):
    if not isinstance(v, str):
        raise BadValue(f"expected a string, got {show_value(v)}")
    return v


def check_boolean(v):
    if not isinstance(v, bool):
        raise BadValue(f"expected true or false, got {show_value(v)}")
    return v


def check_integer(v):
    if isinstance(v, bool) or not isinstance(v, int):
        raise BadValue(f"expected an integer, got {show_value(v)}")
    return v


def check_count(v):
    if check_integer(v) < 0:
        raise BadValue(f"expected a number >= 0, got {v}")
    return v


def check_port(v):
    """A TCP port; -1 asks for a random one, as in nats-server."""
    if not -1 <= check_integer(v) <= 65535:
        raise BadValue(f"port {v} is out of range (-1..65535)")
    return v


def check_client_port(v):
    # nats-server treats a client port of 0 as "not set" and uses 4222.
    return check_port(v) or DEFAULT_PORT


def check_size(v):
    try:
        return conf.parse_size(v)
    except ValueError:
        raise BadValue(f'expected a size such as 1048576 or "1MB", got {show_value(v)}') from None


def check_positive_size(v):
    size = check_size(v)
    if size <= 0:
        raise BadValue(f"expected a size > 0, got {v!r}")
    return size


def check_duration(v):
    try:
        seconds = duration_seconds(v)
    except ValueError:
        raise BadValue(f'expected a duration such as "2m" or seconds, got {show_value(v)}') from None
    if seconds < 0:
        raise BadValue(f"expected a duration >= 0, got {v!r}")
    return seconds


def check_strings(v):
    """A string or an array of strings, as nats-server allows for lists."""
    if isinstance(v, str):
        return [v]
    if isinstance(v, list) and all(isinstance(s, str) for s in v):
        return list(v)
    raise BadValue(f"expected a string or an array of strings, got {show_value(v)}")


def check_subjects(v):
    subjects = check_strings(v)
    for s in subjects:
        if not is_valid_subject(s.encode()):
            raise BadValue(f"{s!r} is not a valid subject")
    return subjects


def host_port(v):
    """``4222``, ``":4222"``, ``"host:4222"`` or ``"[::1]:4222"`` to (host, port).

    host is "" when not given (the configured host then stays)."""
    if isinstance(v, int) and not isinstance(v, bool):
        return "", check_port(v)
    host, sep, number = check_string(v).rpartition(":")
    if not sep or not number.lstrip("-").isdigit():
        raise BadValue(f'expected "host:port" or a port, got {v!r}')
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]  # IPv6 literal
    return host, check_port(int(number))


def routes(v):
    """Route URLs: an array, or one string that may hold several, comma-separated."""
    if isinstance(v, str):
        v = v.split(",")
    return [r.strip() for r in check_strings(v) if r.strip()]


def go_position(pos, quoted=False):
    """nats-server's ``file:line:col`` of a key (or of the end of a map in an
    array): its lexer counts columns from 0 on the first line and from 1 after,
    and places a quoted key inside the quotes."""
    file, line, col = pos
    return f"{file}:{line}:{col - (line == 1) + quoted}"


def go_type(v):
    """The Go type nats-server's config parser gives a value (for its panics'
    "interface conversion" texts)."""
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int64"
    if isinstance(v, float):
        return "float64"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "[]interface {}"
    if isinstance(v, dict):
        return "map[string]interface {}"
    return "time.Time"


def go_value(v):
    """Go's ``%v`` of a config value."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            return "NaN" if v != v else ("+Inf" if v > 0 else "-Inf")
        d = decimal.Decimal(repr(v))
        return format(d.normalize(), "f") if -4 <= d.adjusted() < 21 else repr(v)
    if isinstance(v, list):
        return "[" + " ".join(go_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "map[" + " ".join(f"{k}:{go_value(v[k])}" for k in sorted(v)) + "]"
    if isinstance(v, datetime.datetime):
        return go_time_string(v)
    return str(v)


def go_string(v, at):
    if not isinstance(v, str):
        raise ConfigError(f"{at}: interface conversion: interface {{}} is {go_type(v)}, not string")
    return v


def key_position(m, key, fallback):
    """Where nats-server puts an error about ``key`` of the map ``m``."""
    positions = getattr(m, "positions", {})
    if key in positions:
        return go_position(positions[key], key in getattr(m, "quoted", ()))
    return fallback


def go_panic(at, v, want):
    # A Go type assertion in nats-server's parser that fails: the panic it
    # turns into an error. (It points at the value; we know the key's place.)
    return ConfigError(f"{at}: interface conversion: interface {{}} is {go_type(v)}, not {want}")


def go_where(at):
    # nats-server's position of a key (see go_position).
    return go_position((at.file, at.line, at.col))
