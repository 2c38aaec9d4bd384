"""SurrealQL text: record ids (``<string> id``) and value literals, printing and parsing.

Part of :mod:`engine.values` (import from there; the facts are in its docstring).
"""

from __future__ import annotations

import math
import re
import uuid
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from surrealdb import Duration, RecordID

from engine.value_types import NONE, ValueSyntaxError, make_record_id

# --------------------------------------------------------------------------------------------
# SurrealQL text: record ids and value literals
# --------------------------------------------------------------------------------------------

_PLAIN_IDENT = re.compile(r"[A-Za-z0-9_]+\Z")
_DIGITS_UNDERSCORE = re.compile(r"[0-9_]+\Z")
# Words 3.2.4 escapes even though they are made of plain characters, because its parser would
# read them as numbers.
_NUMBERLIKE_WORDS = frozenset({"NaN", "Infinity"})


_CTRL_ESCAPES = {"\r": "\\r", "\0": "\\0", "\b": "\\u{8}", "\f": "\\f", "\t": "\\t", "\n": "\\n"}
_NEEDS_ESCAPE = re.compile("[\\\\\r\0\b\f\t\n]")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_RID_INT = re.compile(r"[+-]?[0-9]+(?![A-Za-z0-9_])")  # an int key of a record id


def _escape_body(s: str, quote: str) -> str:
    # 3.2.4 escapes backslash, the quote character and six control characters; every other
    # character (other controls, unicode) is printed as is.
    if _NEEDS_ESCAPE.search(s):
        s = s.replace("\\", "\\\\")
        for raw, esc in _CTRL_ESCAPES.items():
            s = s.replace(raw, esc)
    return s.replace(quote, "\\" + quote)


def _escape_part(s: str) -> str:
    if not s or not _PLAIN_IDENT.match(s) or _DIGITS_UNDERSCORE.match(s) or s in _NUMBERLIKE_WORDS:
        return "`" + _escape_body(s, "`") + "`"
    return s


def _escape_table(s: str) -> str:
    if not s or not _PLAIN_IDENT.match(s):
        return "`" + _escape_body(s, "`") + "`"
    return s


def _escape_key(s: str) -> str:
    # Object keys print bare when they are identifiers (not starting with a digit), else in
    # double quotes.
    if _IDENT.match(s):
        return s
    return '"' + _escape_body(s, '"') + '"'


def _quote_str(s: str) -> str:
    if "'" in s:
        return '"' + _escape_body(s, '"') + '"'
    return "'" + _escape_body(s, "'") + "'"


def _plain_decimal_text(d: Decimal) -> str:
    # Positional notation, no exponent, no trailing fractional zeros (Rust's Display).
    text = format(d, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def _shortest_digits(f: float) -> Decimal:
    """The shortest decimal that reads back as ``f``, as Rust prints it. Python's repr and
    Rust agree except when the float lies exactly halfway between two shortest candidates
    (2**49 + 0.25: 562949953421312.2 and .3 both read back): repr takes the even last digit,
    Rust the one farther from zero (SurrealDB prints 562949953421312.3f)."""
    d = Decimal(repr(f))
    exact = Decimal(f)
    gap = exact - d
    if not gap:
        return d
    step = Decimal(1).scaleb(int(d.as_tuple().exponent))
    if abs(gap) * 2 != step or abs(exact) < abs(d):
        return d
    other = d + step if gap > 0 else d - step
    return other if float(other) == f else d


def _format_float(f: float) -> str:
    if math.isnan(f):
        return "NaN"
    if f == math.inf:
        return "Infinity"
    if f == -math.inf:
        return "-Infinity"
    # The shortest round-tripping digits, written out without an exponent.
    text = _plain_decimal_text(_shortest_digits(f))
    if text == "0" and math.copysign(1.0, f) < 0:
        text = "-0"
    return text + "f"


def _format_decimal(d: Decimal) -> str:
    if not d.is_finite():
        return {"NaN": "NaN", "Infinity": "Infinity", "-Infinity": "-Infinity"}.get(str(d), str(d))
    text = _plain_decimal_text(d)
    if text == "-0":
        text = "0"
    return text + "dec"


def _format_duration(ns: int) -> str:
    if ns == 0:
        return "0ns"
    units = (
        ("y", 365 * 86400 * 10**9),
        ("w", 7 * 86400 * 10**9),
        ("d", 86400 * 10**9),
        ("h", 3600 * 10**9),
        ("m", 60 * 10**9),
        ("s", 10**9),
        ("ms", 10**6),
        ("µs", 10**3),
        ("ns", 1),
    )
    out = []
    for name, size in units:
        q, ns = divmod(ns, size)
        if q:
            out.append(f"{q}{name}")
    return "".join(out)


def _format_datetime(d: datetime) -> str:
    if d.tzinfo is None:
        d = d.replace(tzinfo=UTC)
    d = d.astimezone(UTC)
    base = f"{d.year:04d}-{d.month:02d}-{d.day:02d}T{d.hour:02d}:{d.minute:02d}:{d.second:02d}"
    if d.microsecond:
        # chrono prints 3, 6 or 9 fractional digits, whichever is the shortest exact one.
        us = d.microsecond
        base += f".{us // 1000:03d}" if us % 1000 == 0 else f".{us:06d}"
    return base + "Z"


def format_value(v: Any) -> str:
    """Format a value as SurrealQL text, the way SurrealDB prints it inside ``<string>`` casts."""
    t = type(v)
    if v is NONE:
        return "NONE"
    if v is None:
        return "NULL"
    if t is bool:
        return "true" if v else "false"
    if t is int:
        return str(v)
    if t is float:
        return _format_float(v)
    if t is Decimal:
        return _format_decimal(v)
    if t is str:
        return _quote_str(v)
    if t is Duration:
        return _format_duration(v.elapsed)
    if isinstance(v, datetime):
        return "d'" + _format_datetime(v) + "'"
    if t is uuid.UUID:
        return f"u'{v}'"
    if t is list or t is tuple:
        return "[" + ", ".join(format_value(x) for x in v) + "]"
    if t is dict:
        if not v:
            return "{  }"
        return "{ " + ", ".join(f"{_escape_key(k)}: {format_value(v[k])}" for k in sorted(v)) + " }"
    if t is bytes:
        return 'b"' + v.hex().upper() + '"'
    if t is RecordID:
        return record_id_text(v)
    return str(v)


def record_id_text(rid: RecordID) -> str:
    """Canonical ``<string> id`` text of a record id, exactly as SurrealDB 3.2.4 prints it.

    ``user:1``, ``user:abc``, ``user:`a-b` ``, ``user:`123` `` (a string of digits),
    ``user:u'0190...'``, ``user:[1, 'a']``, ``user:{ a: 1 }``.
    """
    table = _escape_table(rid.table_name)
    k: Any = rid.id
    t = type(k)
    if t is str:
        return f"{table}:{_escape_part(k)}"
    if t is int:
        return f"{table}:{k}"
    return f"{table}:{format_value(k)}"


_UNESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "f": "\f", "b": "\b"}


class _Parser:
    """A small recursive-descent parser for SurrealQL value literals (record ids and values)."""

    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0

    def error(self, what: str) -> ValueSyntaxError:
        return ValueSyntaxError(f"{what} at offset {self.i} in {self.s!r}")

    def ws(self) -> None:
        s = self.s
        while self.i < len(s) and s[self.i].isspace():
            self.i += 1

    def peek(self) -> str:
        return self.s[self.i] if self.i < len(self.s) else ""

    def expect(self, ch: str) -> None:
        self.ws()
        if not self.s.startswith(ch, self.i):
            raise self.error(f"expected {ch!r}")
        self.i += len(ch)

    def escaped(self, close: str) -> str:
        # After an opening ` or ⟨: read until the matching close, honouring backslash escapes.
        out = []
        s = self.s
        while True:
            if self.i >= len(s):
                raise self.error("unterminated escaped identifier")
            c = s[self.i]
            if c == "\\" and self.i + 1 < len(s):
                e = s[self.i + 1]
                if e == "u" and s.startswith("{", self.i + 2):
                    end = s.find("}", self.i + 3)
                    if end < 0:
                        raise self.error("unterminated \\u{...} escape")
                    out.append(chr(int(s[self.i + 3 : end], 16)))
                    self.i = end + 1
                    continue
                out.append(_UNESCAPES.get(e, e))
                self.i += 2
                continue
            if c == close:
                self.i += 1
                return "".join(out)
            out.append(c)
            self.i += 1

    def ident(self) -> str:
        s = self.s
        c = self.peek()
        if c == "`":
            self.i += 1
            return self.escaped("`")
        if c == "⟨":
            self.i += 1
            return self.escaped("⟩")
        start = self.i
        while self.i < len(s) and (s[self.i].isalnum() or s[self.i] == "_") and s[self.i].isascii():
            self.i += 1
        if start == self.i:
            raise self.error("expected an identifier")
        return s[start : self.i]

    def string(self) -> str:
        q = self.s[self.i]
        self.i += 1
        out = []
        s = self.s
        while True:
            if self.i >= len(s):
                raise self.error("unterminated string")
            c = s[self.i]
            if c == "\\" and self.i + 1 < len(s):
                e = s[self.i + 1]
                if e == "u" and s.startswith("{", self.i + 2):
                    close = s.find("}", self.i + 3)
                    if close < 0:
                        raise self.error("unterminated \\u{...} escape")
                    out.append(chr(int(s[self.i + 3 : close], 16)))
                    self.i = close + 1
                    continue
                out.append(_UNESCAPES.get(e, e))
                self.i += 2
                continue
            if c == q:
                self.i += 1
                return "".join(out)
            out.append(c)
            self.i += 1

    def rid_key(self) -> Any:
        self.ws()
        c = self.peek()
        if c == "[":
            return self.array()
        if c == "{":
            return self.object()
        if c in "`⟨":
            return self.ident()
        if c == "u" and self.s[self.i + 1 : self.i + 2] in ("'", '"'):
            self.i += 1
            return uuid.UUID(self.string())
        m = _RID_INT.match(self.s, self.i)
        if m:
            self.i = m.end()
            return int(m.group(0))
        return self.ident()

    def record(self) -> RecordID:
        self.ws()
        table = self.ident()
        self.expect(":")
        return make_record_id(table, self.rid_key())

    def array(self) -> list[Any]:
        self.expect("[")
        out: list[Any] = []
        self.ws()
        if self.peek() == "]":
            self.i += 1
            return out
        while True:
            out.append(self.value())
            self.ws()
            if self.peek() == ",":
                self.i += 1
                self.ws()
                if self.peek() == "]":
                    self.i += 1
                    return out
                continue
            self.expect("]")
            return out

    def object(self) -> dict[str, Any]:
        self.expect("{")
        out: dict[str, Any] = {}
        self.ws()
        if self.peek() == "}":
            self.i += 1
            return out
        while True:
            self.ws()
            c = self.peek()
            key = self.string() if c in "'\"" else self.ident()
            self.expect(":")
            out[key] = self.value()
            self.ws()
            if self.peek() == ",":
                self.i += 1
                self.ws()
                if self.peek() == "}":
                    self.i += 1
                    return out
                continue
            self.expect("}")
            return out

    _NUM = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)(dec|f)?(?![A-Za-z0-9_])")
    _DUR = re.compile(r"(?:[0-9]+(?:ns|us|µs|ms|s|m|h|d|w|y))+(?![A-Za-z0-9_])")

    def value(self) -> Any:
        self.ws()
        c = self.peek()
        s = self.s
        if c == "[":
            return self.array()
        if c == "{":
            return self.object()
        if c in "'\"":
            return self.string()
        if c in "sdurb" and s[self.i + 1 : self.i + 2] in ("'", '"'):
            self.i += 1
            body = self.string()
            if c == "s":
                return body
            if c == "b":
                return bytes.fromhex(body)
            if c == "d":
                return _parse_datetime(body)
            if c == "u":
                return uuid.UUID(body)
            return _Parser(body).record_whole()
        m = self._DUR.match(s, self.i)
        if m:
            self.i = m.end()
            return Duration.parse(m.group(0).replace("µs", "us"))
        m = self._NUM.match(s, self.i)
        if m:
            self.i = m.end()
            text = m.group(0)
            suffix = m.group(1)
            if suffix == "dec":
                return Decimal(text[:-3])
            if suffix == "f":
                return float(text[:-1])
            if "." in text or "e" in text or "E" in text:
                return float(text)
            return int(text)
        for word, val in (
            ("NONE", NONE),
            ("NULL", None),
            ("true", True),
            ("false", False),
            ("NaN", math.nan),
            ("-Infinity", -math.inf),
            ("Infinity", math.inf),
        ):
            if s.startswith(word, self.i) and not (
                s[self.i + len(word) : self.i + len(word) + 1].isalnum()
            ):
                lookahead = s[self.i + len(word) : self.i + len(word) + 1]
                if lookahead != ":":
                    self.i += len(word)
                    return val
        # A record id (table:key).
        return self.record()

    def record_whole(self) -> RecordID:
        r = self.record()
        self.ws()
        if self.i != len(self.s):
            raise self.error("unexpected trailing text")
        return r

    def value_whole(self) -> Any:
        v = self.value()
        self.ws()
        if self.i != len(self.s):
            raise self.error("unexpected trailing text")
        return v


def _parse_datetime(text: str) -> datetime:
    t = text.strip()
    if t.endswith(("Z", "z")):
        t = t[:-1] + "+00:00"
    # Python keeps microseconds only; SurrealDB's extra nanosecond digits are truncated, as the
    # SDK does when it decodes a datetime.
    m = re.match(r"^(.*T\d\d:\d\d:\d\d)\.(\d+)(.*)$", t)
    if m:
        t = f"{m.group(1)}.{m.group(2)[:6].ljust(6, '0')}{m.group(3)}"
    try:
        d = datetime.fromisoformat(t)
    except ValueError as e:
        raise ValueSyntaxError(f"invalid datetime {text!r}: {e}") from None
    if d.tzinfo is None:
        d = d.replace(tzinfo=UTC)
    return d.astimezone(UTC)


def parse_record_id(text: object) -> RecordID:
    """Parse record-id text (``user:1``, ``user:`a-b` ``, ``user:⟨a-b⟩``, ``user:[1,'a']``...).

    The inverse of :func:`record_id_text`. Raises :class:`ValueSyntaxError` on malformed text.
    """
    if type(text) is not str:
        raise ValueSyntaxError(f"record id text must be a string, got {type(text).__name__}")
    rid = _PARSED.get(text)
    if rid is not None:
        return rid
    try:
        rid = _Parser(text).record_whole()
    except (IndexError, ValueError, InvalidOperation) as e:
        if isinstance(e, ValueSyntaxError):
            raise
        raise ValueSyntaxError(f"invalid record id {text!r}: {e}") from None
    if type(rid.id) in _SHARED_KEYS:
        # The SSP parses each view member it publishes, the same members for many views and
        # flushes: ids with an immutable key are parsed once and shared (nobody mutates a
        # RecordID; array and object keys, which could be, are parsed every time).
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[text] = rid
    return rid


_PARSED: dict[str, RecordID] = {}
_PARSED_MAX = 100_000  # about 20 MB at most
_SHARED_KEYS = (int, str)


def parse_value(text: str) -> Any:
    """Parse a SurrealQL value literal (numbers, strings, NONE/NULL, arrays, objects, ids...)."""
    try:
        return _Parser(text).value_whole()
    except (IndexError, ValueError, InvalidOperation) as e:
        if isinstance(e, ValueSyntaxError):
            raise
        raise ValueSyntaxError(f"invalid value {text!r}: {e}") from None
