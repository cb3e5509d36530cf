"""Parser for the nats-server configuration file format.

The syntax follows nats-server's ``conf/lex.go`` and ``conf/parse.go``::

    # comments start with '#' or '//'
    listen: 127.0.0.1:4222          # ':' , '=' or plain whitespace separate keys
    max_payload = 1MB               # integers take size suffixes (k, kb, ki, ...)
    authorization {                 # nested maps need no separator
      users = [ {user: alice, password: $PASS} ]   # $VAR: earlier key or env var
    }
    include ./accounts.conf         # relative to the including file

Values come back as plain Python objects: ``str``, ``int``, ``float``,
``bool``, ``datetime`` (UTC), ``list`` and :class:`ConfMap` (a ``dict`` that
also remembers where each key was written).  This module is stdlib-only (and
:mod:`natsbroker.fatal`, which is too) so it can be used before any reactor
exists.

A :class:`ConfError` also knows how nats-server words it (``Parse error on line
N: '...'``, with nats-server's line numbering), for the command line to print.
"""

from __future__ import annotations

import bisect
import datetime
import os
import re

from natsbroker.fatal import read_file_error
from natsbroker.gocompat.durations import duration_seconds

__all__ = ["ConfError", "ConfMap", "parse_string", "parse_file", "parse_size", "parse_duration"]

# (a configuration duration: a Go duration string or seconds; gocompat has the one parser)
parse_duration = duration_seconds


class ConfError(Exception):
    """A syntax or resolution error at a 1-based ``line``/``col`` of ``filename``.

    ``str()`` is ``file:line:col: message``; :meth:`nats_text` is the same
    error the way nats-server reports it, which tools match on."""

    def __init__(self, filename: str, line: int, col: int, message: str, *,
                 nats_line: int | None = None, nats_message: str | None = None):
        super().__init__(f"{filename}:{line}:{col}: {message}")
        self.filename = filename
        self.line = line
        self.col = col
        self.message = message
        # nats-server's lexer counts the line it has read up to: for a value
        # left open, the last line; for a stray newline, the line after it.
        self.nats_line = line if nats_line is None else nats_line
        self.nats_message = nats_message  # its words, where it has its own
        self.includes: list[str] = []  # include names, outermost first, leading here

    def nats_text(self) -> str:
        """``Parse error on line N: '<message>'`` (or nats-server's own words
        for a missing variable or include), after one ``error parsing include
        file 'X', `` per include on the way, and our ``(file:line:col)``."""
        text = self.nats_message or f"Parse error on line {self.nats_line}: '{self.message}'"
        for name in reversed(self.includes):
            text = f"error parsing include file '{name}', {text}"
        return f"{text} ({self.filename}:{self.line}:{self.col})"


class ConfMap(dict):
    """A ``dict`` whose ``positions`` maps each key to ``(filename, line, col)``
    of the place the key was (last) written, so option validation can point
    at the offending line."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.positions: dict[str, tuple[str, int, int]] = {}
        # Keys written in quotes (nats-server places those at their first
        # character inside the quotes), and where the closing '}' ends (its
        # place for a map inside an array): for reporting in its words.
        self.quoted: set[str] = set()
        self.end: tuple[str, int, int] | None = None
        # Keys referenced as $variables: nats-server does not call those
        # unknown fields (its token.IsUsedVariable).
        self.used: set[str] = set()


# Size suffixes exactly as parse.go: a bare letter is decimal, with a trailing
# "b", "i" or "ib" it is binary.  Matching is case-insensitive.
_SIZE_MULT = {"": 1}
for _exp, _letter in enumerate("kmgtpe", 1):
    _SIZE_MULT[_letter] = 1000**_exp
    for _tail in ("b", "i", "ib"):
        _SIZE_MULT[_letter + _tail] = 1024**_exp

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_BOOLS = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}

# lex.go lexes a suffix as one of kmgtpe followed by any run of b/i; an
# unknown combination such as "1kbb" is reported instead of silently dropped.
_INT_RE = re.compile(r"(-?[0-9]+)([kmgtpe][bi]*)?", re.IGNORECASE)
_FLOAT_RE = re.compile(r"-?[0-9]+\.[0-9]+")
_DATE_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")
_IP_RE = re.compile(r"[0-9]+\.[0-9]+\.[0-9.:\-]*")  # lex.go's lexIPAddr: "127.0.0.1:4222"
# Newer lex.go turns digits followed by a non-number character into a plain
# string ("5ADISY_pass", "3Gyz"), but not "1k5", "1.x" or "12-3".
_NUMERIC_STRING_RE = re.compile(r"[0-9]++(?:[^0-9.\-kmgtpe]|[kmgtpe][bi]*+[^0-9])", re.IGNORECASE)

_NL = "\r\n"
_BARE_END = frozenset(" \t\r\n,;]}")  # what ends an unquoted value (lex.go lexString)
# lex.go ends bare keys only at whitespace, ':' or '='; also stopping at
# brackets and ',;' lets "key{" work and puts errors on the right character.
_KEY_END = frozenset(" \t\r\n:={}[],;")
_BLOCK_END_RE = re.compile(r"\n\)(?=\r?\n|\Z)")  # ')' alone at the start of a line
_LOW_SURROGATE_RE = re.compile(r"\\u(d[c-f][0-9a-f]{2})", re.IGNORECASE)
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", '"': '"', "\\": "\\"}


def parse_string(text: str, filename: str = "<string>") -> ConfMap:
    """Parse configuration ``text``; ``filename`` is used in errors, positions
    and as the base directory for ``include``.  Raises :class:`ConfError`."""
    return _Parser(text, filename).parse_document()


def parse_file(path) -> ConfMap:
    """Read and parse the configuration file at ``path`` (UTF-8).

    Raises :class:`ConfError` for syntax errors (including in included files)
    and ``OSError`` if ``path`` itself cannot be read."""
    path = os.fspath(path)
    return _Parser(_read(path), path, includes=(os.path.realpath(path),)).parse_document()


def _read(path: str) -> str:
    # nats-server takes the bytes as they are; bytes that are not UTF-8 become
    # U+FFFD, which is also what it sends for them in JSON (INFO, /varz).
    with open(path, encoding="utf-8-sig", errors="replace", newline="") as f:
        return f.read()


def parse_size(value) -> int:
    """Convert a size (``1024``, ``"64KB"``, ``"1mb"``, ``"2G"``) to bytes using
    the same suffix rules as the config parser (``k`` = 1000, ``kb``/``ki``/
    ``kib`` = 1024, likewise m, g, t, p, e).  Raises ``ValueError`` on junk."""
    if isinstance(value, bool):
        raise ValueError(f"invalid size: {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        m = _INT_RE.fullmatch(value.strip())
        if m and (m[2] or "").lower() in _SIZE_MULT:
            return int(m[1]) * _SIZE_MULT[(m[2] or "").lower()]
    raise ValueError(f"invalid size: {value!r}")


class _Parser:
    """Recursive-descent parser over one text; ``self.i`` is the read offset."""

    def __init__(self, text: str, filename: str, includes: tuple = (), env_stack: tuple = ()):
        self.text = text
        self.n = len(text)
        self.filename = filename
        self.i = 0
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.scopes: list[ConfMap] = []  # maps being built, searched by $VAR
        self.includes = includes  # real paths being parsed, to stop include cycles
        self.env_stack = env_stack  # env vars being expanded, to stop $A -> $A loops

    # -- position helpers -------------------------------------------------

    def where(self, at: int) -> tuple[int, int]:
        line = bisect.bisect_right(self.line_starts, at)
        return line, at - self.line_starts[line - 1] + 1

    def error(self, message: str, at: int | None = None, *, eof: bool = False,
              nats_message: str | None = None) -> ConfError:
        """The error ``message`` at offset ``at`` (default: the read offset);
        ``eof`` for a value left open, which nats-server finds at the end."""
        at = self.i if at is None else at
        if eof:
            nats_line = self.where(self.n)[0]
        else:
            nats_line = self.where(at + 1 if self.text[at : at + 1] == "\n" else at)[0]
        return ConfError(self.filename, *self.where(at), message, nats_line=nats_line,
                         nats_message=nats_message)

    def peek(self) -> str:
        return self.text[self.i : self.i + 1]  # "" at end of input

    def skip_inline(self) -> None:
        while self.i < self.n and self.text[self.i] in " \t":
            self.i += 1

    def skip_comment(self) -> None:
        if self.text.startswith(("#", "//"), self.i):
            while self.i < self.n and self.text[self.i] not in _NL:
                self.i += 1

    def skip_blank(self) -> None:
        """Skip whitespace, newlines and comments."""
        while self.i < self.n:
            if self.text[self.i] in " \t\r\n":
                self.i += 1
            elif self.text.startswith(("#", "//"), self.i):
                self.skip_comment()
            else:
                break

    # -- structure --------------------------------------------------------

    def parse_document(self) -> ConfMap:
        try:
            return self._parse_document()
        except RecursionError:
            raise self.error("values are nested too deeply") from None

    def _parse_document(self) -> ConfMap:
        root = ConfMap()
        self.skip_blank()
        if self.peek() == "{":
            # nats-server accepts JSON-style files wrapped in one pair of braces.
            start = self.i
            self.i += 1
            self.parse_entries(root, "}", start)
            self.skip_blank()
            if self.i < self.n:
                raise self.error(f"unexpected {self.peek()!r} after the closing '}}'")
        else:
            self.parse_entries(root, "", None)
        return root

    def parse_entries(self, m: ConfMap, close: str, opened_at: int | None) -> None:
        """Parse ``key value`` entries into ``m`` up to ``close`` ('}' or EOF)."""
        self.scopes.append(m)
        while True:
            self.skip_blank()
            c = self.peek()
            if not c:
                if close:
                    raise self.error("unterminated map: missing '}'", opened_at, eof=True)
                break
            if close and c == close:
                self.i += 1
                m.end = (self.filename, *self.where(self.i))
                break
            self.parse_entry(m)
            # An entry ends at a newline, ',' or ';' (or the closing brace).
            self.skip_inline()
            self.skip_comment()
            c = self.peek()
            if c in (",", ";"):
                self.i += 1
            elif c and c not in _NL and c != close:
                raise self.error(f"expected a newline, ',' or ';' after the value, found {c!r}")
        self.scopes.pop()

    def parse_entry(self, m: ConfMap) -> None:
        key_at = self.i
        key, quoted = self.parse_key()
        if not quoted and key.lower() == "include" and self.peek() in (" ", "\t"):
            self.skip_inline()
            # "include = x" is an ordinary key (lex.go would include a file named "=").
            if self.peek() not in (":", "="):
                self.parse_include(m)
                return
        self.skip_inline()
        if self.peek() in (":", "="):
            self.i += 1
            self.skip_inline()
        value = self.parse_value(key)
        m[key] = value  # duplicate keys: the later one wins, as in nats-server
        m.positions[key] = (self.filename, *self.where(key_at))
        if quoted:
            m.quoted.add(key)
        else:
            m.quoted.discard(key)

    def parse_key(self) -> tuple[str, bool]:
        c, start = self.peek(), self.i
        if c in ('"', "'"):
            # Quoted keys are taken verbatim; lex.go does not process escapes in them.
            end = self.text.find(c, start + 1)
            if end < 0:
                raise self.error("unterminated quoted key", start, eof=True)
            self.i = end + 1
            return self.text[start + 1 : end], True
        while self.i < self.n and self.text[self.i] not in _KEY_END:
            self.i += 1
        if self.i == start:
            raise self.error(f"expected a key, found {c!r}")
        return self.text[start : self.i], False

    def parse_include(self, m: ConfMap) -> None:
        at, c = self.i, self.peek()
        if c in ('"', "'"):
            end = self.text.find(c, at + 1)
            if end < 0:
                raise self.error("unterminated include file name", at, eof=True)
            path, self.i = self.text[at + 1 : end], end + 1
        else:
            while self.i < self.n and self.text[self.i] not in " \t\r\n;}":
                self.i += 1
            path = self.text[at : self.i]
        if not path or path[0] in "[{(":
            raise self.error("expected a file name after 'include'", at)
        full = os.path.join(os.path.dirname(self.filename), path)
        real = os.path.realpath(full)
        if real in self.includes:
            raise self.error(f"include cycle: {path!r} is already being parsed", at)
        try:
            text = _read(full)
        except OSError as e:
            raise self.error(f"cannot read include file {path!r}: {e.strerror or e}", at,
                             nats_message=f"error parsing include file '{path}', "
                             + read_file_error(os.path.normpath(full), e)) from e
        # Included files are parsed on their own (they cannot see our
        # variables), then their keys are merged into the current map.
        try:
            sub = _Parser(text, full, self.includes + (real,), self.env_stack).parse_document()
        except ConfError as e:
            e.includes.insert(0, path)
            raise
        for key, value in sub.items():
            m[key] = value
            m.positions[key] = sub.positions[key]
            if key in sub.used:
                m.used.add(key)
            if key in sub.quoted:
                m.quoted.add(key)
            else:
                m.quoted.discard(key)

    # -- values -----------------------------------------------------------

    def parse_value(self, key: str | None):
        c, start = self.peek(), self.i
        if not c or c in "\r\n,;]}":
            raise self.error("missing value" + (f" for key {key!r}" if key is not None else ""))
        if c == "{":
            self.i += 1
            m = ConfMap()
            self.parse_entries(m, "}", start)
            return m
        if c == "[":
            return self.parse_array()
        if c == '"':
            return self.parse_dq_string()
        if c == "'":
            end = self.text.find("'", start + 1)  # single quotes are raw
            if end < 0:
                raise self.error("unterminated string", start, eof=True)
            self.i = end + 1
            return self.text[start + 1 : end]
        if c == "(":
            # A "( ... )" block is raw text ending at a ')' alone at the start of a line.
            end = _BLOCK_END_RE.search(self.text, start)
            if not end:
                raise self.error("unterminated block: missing ')' on a line of its own", start, eof=True)
            self.i = end.end()
            return self.text[start + 1 : end.start() + 1]
        return self.parse_bare()

    def parse_array(self) -> list:
        start = self.i
        self.i += 1
        items: list = []
        while True:
            self.skip_blank()
            c = self.peek()
            if not c:
                raise self.error("unterminated array: missing ']'", start, eof=True)
            if c == "]":
                self.i += 1
                return items
            if c == ",":
                raise self.error("unexpected ',' in array")
            items.append(self.parse_value(None))
            # Elements are separated by ',' or a newline (not ';', as in lex.go).
            self.skip_inline()
            self.skip_comment()
            c = self.peek()
            if c == ",":
                self.i += 1
            elif not c:
                raise self.error("unterminated array: missing ']'", start, eof=True)
            elif c not in "\r\n]":
                raise self.error(f"expected ',' or ']' after array element, found {c!r}")

    def parse_dq_string(self) -> str:
        start = self.i
        self.i += 1
        out = []
        while True:
            if self.i >= self.n:
                raise self.error("unterminated string", start, eof=True)
            c = self.text[self.i]
            if c == '"':
                self.i += 1
                return "".join(out)
            if c == "\\":
                out.append(self.parse_escape())
            else:
                out.append(c)
                self.i += 1

    def parse_escape(self) -> str:
        """Decode the escape sequence at ``self.i`` (which is a backslash)."""
        at = self.i
        c = self.text[at + 1 : at + 2]
        if c in _ESCAPES:
            self.i += 2
            return _ESCAPES[c]
        if c in ("x", "u"):
            # \xXX is lex.go's; \uXXXX is our JSON-compatible addition.
            width = 2 if c == "x" else 4
            digits = self.text[at + 2 : at + 2 + width]
            if len(digits) != width or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise self.error(f"invalid \\{c} escape: expected {width} hex digits", at)
            self.i = at + 2 + width
            code = int(digits, 16)
            if 0xD800 <= code < 0xDC00:  # a UTF-16 surrogate pair, as JSON writes it
                low = _LOW_SURROGATE_RE.match(self.text, self.i)
                if low:
                    self.i = low.end()
                    return chr(0x10000 + ((code - 0xD800) << 10) + (int(low[1], 16) - 0xDC00))
            if 0xD800 <= code < 0xE000:
                raise self.error("invalid \\u escape: unpaired surrogate", at)
            return chr(code)
        if not c:
            raise self.error("incomplete escape sequence", at, eof=True)
        raise self.error(f"invalid escape sequence '\\{c}' (allowed: \\t \\n \\r \\\" \\\\ \\xXX \\uXXXX)", at)

    def parse_bare(self):
        """An unquoted word: bool, variable, number, date, or plain string."""
        start = self.i
        out = []
        escaped = False
        while self.i < self.n and self.text[self.i] not in _BARE_END:
            if self.text[self.i] == "\\":  # lex.go honours escapes in bare words too
                out.append(self.parse_escape())
                escaped = True
            else:
                out.append(self.text[self.i])
                self.i += 1
        word = "".join(out)
        if escaped:
            return word
        if word.lower() in _BOOLS:
            return _BOOLS[word.lower()]
        if word.startswith("$"):
            return self.lookup_variable(word[1:], start)
        if word[0] in "0123456789-.":
            return self.parse_number(word, start)
        return word

    def parse_number(self, word: str, at: int):
        m = _INT_RE.fullmatch(word)
        if m:
            number, suffix = int(m[1]), (m[2] or "").lower()
            if suffix not in _SIZE_MULT:
                raise self.error(f"invalid size suffix in {word!r}", at)
            value = number * _SIZE_MULT[suffix]
            if not (_INT64_MIN <= number <= _INT64_MAX and _INT64_MIN <= value <= _INT64_MAX):
                raise self.error(f"integer {word!r} is out of the 64-bit range", at)
            return value
        if _FLOAT_RE.fullmatch(word):
            value = float(word)
            if value in (float("inf"), float("-inf")):
                raise self.error(f"float {word!r} is out of range", at)
            return value
        if _DATE_RE.fullmatch(word):
            try:
                dt = datetime.datetime.strptime(word, "%Y-%m-%dT%H:%M:%SZ")
            except ValueError:
                raise self.error(f"invalid datetime {word!r}", at) from None
            return dt.replace(tzinfo=datetime.timezone.utc)
        if _IP_RE.fullmatch(word) or _NUMERIC_STRING_RE.match(word):
            return word
        raise self.error(
            f"invalid value {word!r}: unquoted values starting with a digit, '-' or '.' "
            "must be numbers, ISO8601 Zulu dates or IP addresses (quote strings)",
            at,
        )

    def lookup_variable(self, name: str, at: int):
        """Resolve ``$name`` like parse.go: enclosing maps first, then the
        environment (whose value is parsed as a config value)."""
        if name.startswith("2a$"):
            return "$" + name  # an unquoted bcrypt hash, special-cased by parse.go
        if not name:
            raise self.error("missing variable name after '$'", at)
        for scope in reversed(self.scopes):
            if name in scope:
                scope.used.add(name)
                return scope[name]
        if name in os.environ:
            raw = os.environ[name]
            if not raw.strip():
                return ""
            if name in self.env_stack:
                raise self.error(f"environment variable {name!r} refers to itself", at)
            sub = _Parser(f"pk={raw}", f"<env ${name}>", self.includes, self.env_stack + (name,))
            try:
                return sub.parse_document()["pk"]
            except ConfError as e:
                raise self.error(f"cannot parse environment variable {name!r}: {e.message}", at,
                                 nats_message=self._no_variable(name, at)) from e
        raise self.error(f"unknown variable ${name}: not defined in an enclosing block or the environment", at,
                         nats_message=self._no_variable(name, at))

    def _no_variable(self, name: str, at: int) -> str:
        # parse.go: an environment value that does not parse is not found either.
        return f"variable reference for '{name}' on line {self.where(at)[0]} can not be found"
