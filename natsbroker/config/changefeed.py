"""natsbroker's own ``changefeed`` key: a switch or a block."""

from natsbroker.config.blocks import key_table, set_field
from natsbroker.config.values import (
    BadValue,
    check_boolean,
    check_duration,
    check_size,
    check_string,
    check_strings,
    show_value,
)


def parse_changefeed(ld, v, at, out):
    if isinstance(v, bool):
        out["changefeed"] = {"enabled": v}
    elif isinstance(v, dict):
        out["changefeed"] = {"enabled": True, **ld.block(v, _CHANGEFEED, at)}
    else:
        raise BadValue(f"expected true/false or a block, got {show_value(v)}")


_CHANGEFEED = key_table(
    {
        "enabled enable": set_field("enabled", check_boolean),
        "dir directory": set_field("dir", check_string),
        "streams": set_field("streams", check_strings),
        "max_file_size max_file_bytes": set_field("max_file_size", check_size),
        "max_file_age": set_field("max_file_age", check_duration),
        "retention retain": set_field("retention", check_duration),
    }
)
