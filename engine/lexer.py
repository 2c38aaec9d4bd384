"""The SurrealQL tokenizer and literal readers of `engine.parser`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from engine.errors import QueryRejected

# --------------------------------------------------------------------------------------------
# Tokenizer

_TOKEN_RE = re.compile(
    r"""
    (?P<ws>\s+|--[^\n]*|//[^\n]*|\#[^\n]*|/\*.*?\*/)
  | (?P<dt>d(?P<dq>['"])(?P<dtv>.*?)(?P=dq))
  | (?P<rs>r(?P<rq>['"])(?P<rsv>.*?)(?P=rq))
  | (?P<us>u(?P<uq>['"])(?P<usv>.*?)(?P=uq))
  | (?P<str>s?'(?:[^'\\]|\\.)*'|s?"(?:[^"\\]|\\.)*")
  | (?P<num>(?>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)(?:dec|f)?(?![A-Za-z_]))
  | (?P<dur>\d+(?:\.\d+)?[A-Za-z_µ][A-Za-z0-9_µ]*)
  | (?P<param>\$[A-Za-z_][A-Za-z0-9_]*)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*|`(?:[^`\\]|\\.)*`|⟨(?:[^⟩\\]|\\.)*⟩)
  | (?P<op>::|\|\||&&|==|!=|<=|>=|\?=|\*=|!~|\?~|\*~|\*\*|\?\?|\?:|->|<->|<-|\+=|-=|@@|[=<>!~+\-*/%(),.\[\]{}:;∋∌⊇⊃⊅∈∉⊆⊂⊄×÷])
    """,
    re.VERBOSE | re.DOTALL,
)


@dataclass
class Tok:
    """A token: kind in ident/num/str/dt/rs/us/param/op/eof, its value and position."""

    kind: str
    value: Any
    pos: int
    text: str
    quoted: bool = False
    glued: bool = False  # no whitespace before this token


def _unescape(body: str) -> str:
    out = []
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            n = body[i + 1]
            out.append({"n": "\n", "t": "\t", "r": "\r", "0": "\0"}.get(n, n))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def tokenize(text: str) -> list[Tok]:
    """Split ``text`` into tokens; raises QueryRejected on characters outside the grammar."""
    toks: list[Tok] = []
    pos = 0
    n = len(text)
    prev_ws = True
    while pos < n:
        m = _TOKEN_RE.match(text, pos)
        if m is None:
            # Let the parser report it in context (it names the clause it was reading).
            toks.append(Tok("op", text[pos], pos, text[pos], glued=not prev_ws))
            prev_ws = False
            pos += 1
            continue
        kind = m.lastgroup
        raw = m.group(0)
        if m.group("ws") is not None:
            prev_ws = True
            pos = m.end()
            continue
        if m.group("dt") is not None:
            toks.append(Tok("dt", m.group("dtv"), pos, raw))
        elif m.group("rs") is not None:
            toks.append(Tok("rs", m.group("rsv"), pos, raw))
        elif m.group("us") is not None:
            toks.append(Tok("us", m.group("usv"), pos, raw))
        elif m.group("str") is not None:
            body = raw[1:] if raw[0] == "s" else raw
            toks.append(Tok("str", _unescape(body[1:-1]), pos, raw))
        elif m.group("dur") is not None:
            toks.append(Tok("dur", raw, pos, raw))
        elif m.group("num") is not None:
            toks.append(Tok("num", raw, pos, raw))
        elif m.group("param") is not None:
            toks.append(Tok("param", raw[1:], pos, raw))
        elif m.group("ident") is not None:
            if raw[0] in "`⟨":
                toks.append(Tok("ident", _unescape(raw[1:-1]), pos, raw, quoted=True))
            else:
                toks.append(Tok("ident", raw, pos, raw))
        else:
            toks.append(Tok("op", raw, pos, raw))
        toks[-1].glued = not prev_ws
        prev_ws = False
        pos = m.end()
        del kind
    toks.append(Tok("eof", None, n, ""))
    return toks


# --------------------------------------------------------------------------------------------
# Literal helpers


def parse_datetime(text: str) -> datetime:
    """Parse a SurrealDB datetime literal body into a tz-aware datetime (UTC when unqualified)."""
    s = text.strip()
    if s.endswith(("Z", "z")):
        s = s[:-1] + "+00:00"
    # Python keeps microseconds: truncate extra fractional digits (SurrealDB keeps nanoseconds).
    m = re.match(r"^(.*?\.\d{6})\d+(.*)$", s)
    if m:
        s = m.group(1) + m.group(2)
    try:
        dt = datetime.fromisoformat(s)
    except ValueError as exc:
        raise QueryRejected(f"invalid datetime literal d'{text}'") from exc
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt


def _parse_number(raw: str, negative: bool) -> Any:
    sign = "-" if negative else ""
    if raw.endswith("dec"):
        try:
            return Decimal(sign + raw[:-3])
        except InvalidOperation as exc:
            raise QueryRejected(f"invalid decimal literal {raw}") from exc
    if raw.endswith("f"):
        return float(sign + raw[:-1])
    if "." in raw or "e" in raw or "E" in raw:
        return float(sign + raw)
    return int(sign + raw)
