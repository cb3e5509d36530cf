"""``mappings { }``, of the global account or of an account: nats-server's
parseAccountMappings/parseAccountMapDest, with its texts and its positions,
so an error reads as its does.
"""

import re

from natsbroker.config.model import MapDest, SubjectMapping
from natsbroker.config.values import ConfigError, go_position, go_string, go_type, go_value
from natsbroker.gocompat.quote import go_quote
from natsbroker.subjects.mapping import MappingError, compile_mapping
from natsbroker.subjects.sublist import is_valid_subject
from natsbroker.subjects.transform import TransformError


def _map_weight(v, at):
    if isinstance(v, str):
        text = v[:-1] if v.endswith("%") else v
        # Go's strconv.Atoi: an optional sign and decimal digits, in int64.
        n = int(text) if re.fullmatch(r"[+-]?[0-9]+", text) else None
        if n is None or not -(2**63) <= n < 2**63:
            raise ConfigError(f"{at}: Invalid weight {go_quote(text)} for mapping destination")
    elif isinstance(v, int) and not isinstance(v, bool):
        n = v
    else:
        raise ConfigError(f"{at}: Unknown entry type for weight of {go_value(v)}\n")
    if n > 100 or n < 0:
        raise ConfigError(f"{at}: Invalid weight {n} for mapping destination")
    return n


def _map_dest(v, at):
    """One ``{destination, weight, cluster}``; ``at`` is where nats-server
    places the entry (the key of a lone entry, the end of one in an array)."""
    if not isinstance(v, dict):
        raise ConfigError(f"{at}: Expected an entry for the mapping destination")
    positions = getattr(v, "positions", {})
    quoted = getattr(v, "quoted", ())
    subject, weight, cluster = "", None, ""
    for key, value in v.items():
        key_at = go_position(positions[key], key in quoted) if key in positions else at
        name = key.lower()
        if name in ("dest", "destination"):
            subject = go_string(value, at)
        elif name == "weight":
            weight = _map_weight(value, key_at)
        elif name == "cluster":
            cluster = go_string(value, at)
        else:
            raise ConfigError(f"{key_at}: Unknown field {go_quote(key)} for mapping destination")
    if weight is None:
        raise ConfigError(f"{at}: Missing weight for mapping destination {go_quote(subject)}")
    return MapDest(subject, weight, cluster)


def parse_mappings(ld, v, at, out):
    """``mappings { source: destination(s) }``: checked and compiled as
    nats-server adds them, so a bad one stops the server as it stops nats-server."""
    block_at = go_position((at.file, at.line, at.col))
    if not isinstance(v, dict):
        raise ConfigError(f"{block_at}: interface conversion: interface {{}} is {go_type(v)}, "
                          "not map[string]interface {}")
    positions = getattr(v, "positions", {})
    quoted = getattr(v, "quoted", ())
    entries = []
    for source, value in v.items():
        if not is_valid_subject(source.encode()):
            raise ConfigError(f"{block_at}: Subject {go_quote(source)} is not a valid subject")
        key_at = go_position(positions[source], source in quoted) if source in positions else block_at
        if isinstance(value, str):
            dests = [MapDest(value)]
            what = f"{go_quote(source)} to {go_quote(value)}"
        else:
            if isinstance(value, list):
                # An array element is placed at its own end (a map's '}').
                dests = [_map_dest(item, go_position(item.end) if getattr(item, "end", None) else key_at)
                         for item in value]
            else:
                dests = [_map_dest(value, key_at)]
            what = go_quote(source)
        try:
            compile_mapping(source, dests)
        except (MappingError, TransformError) as e:
            raise ConfigError(f"{key_at}: Error adding mapping for {what} : {e}") from None
        entries.append(SubjectMapping(source, dests))
    out["mappings"] = entries
