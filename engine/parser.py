"""Tokenizer and recursive-descent parser for the supported SurrealQL SELECT subset.

The parser produces a small AST made of tuples (cheap to hash, so a normalised AST doubles as
the shape key of a query).  Anything outside the subset raises :class:`QueryRejected` with a
message naming the clause, function or operator, so no clause is ever dropped silently.

Expression nodes:

- ``("lit", value)``               literal (SurrealDB-typed Python value; NONE sentinel for NONE)
- ``("param", name, path)``        ``$name.path`` (not ``$parent``)
- ``("parent", path)``             ``$parent.path`` (correlation with the outer row)
- ``("field", path)``              field path on the current row (may traverse record links)
- ``("array", items)``             array literal whose items are expressions
- ``("and", a, b)``, ``("or", a, b)``, ``("not", a)``
- ``("cmp", op, a, b)``            op in :data:`COMPARISON_OPS`
- ``("slot", i)``                  only after normalisation (see :mod:`engine.shape`)

A chain of ``n`` terms joined by the same AND (or OR) is built as a balanced binary tree
(height ``ceil(log2 n)``), not a left-leaning one (height ``n - 1``): both evaluate the terms
left to right with the same short-circuit, and every later stage (normalisation, compilation,
dependency walks) recurses over the tree, so a wide query stays shallow.

Limits (documented in ``engine/README.md``): a query longer than :data:`MAX_QUERY_CHARS`, or
nested deeper than :data:`MAX_DEPTH`, is refused with :class:`QueryRejected` naming the limit.
Everything the parser accepts is therefore shallow enough for the recursive stages after it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from surrealdb import RecordID

from engine.errors import QueryRejected
from engine.values import NONE

Expr = tuple[Any, ...]
Path = tuple[str, ...]

#: Longest query text accepted, in characters.
MAX_QUERY_CHARS = 100_000
#: Deepest nesting accepted: both the brackets open at once (parentheses, ``[]``, ``{}``,
#: ``NOT``/``!``, projection subqueries) and the height of each expression tree (one level per
#: comparison, NOT, array, object and AND/OR node; see the module docstring for chains).
MAX_DEPTH = 64

#: Canonical comparison operator names used in the AST.
COMPARISON_OPS = frozenset(
    {
        "=", "!=", "<", "<=", ">", ">=",
        "contains", "containsnot", "containsany", "containsall",
        "inside", "notinside",
    }
)

_KEYWORD_OPS = {
    "CONTAINS": "contains",
    "CONTAINSNOT": "containsnot",
    "CONTAINSANY": "containsany",
    "CONTAINSALL": "containsall",
    "INSIDE": "inside",
    "IN": "inside",
    "NOTINSIDE": "notinside",
    "IS": "=",
}
_UNSUPPORTED_KEYWORD_OPS = {
    "CONTAINSNONE", "NONEINSIDE", "ALLINSIDE", "ANYINSIDE", "OUTSIDE", "INTERSECTS", "MATCHES",
}
_SYMBOL_OPS = {"=": "=", "==": "=", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_UNSUPPORTED_SYMBOL_OPS = {
    "?=", "*=", "!~", "?~", "*~", "~", "+", "-", "*", "/", "**", "??", "?:", "@@", "∋", "∌", "⊇",
    "⊃", "⊅", "∈", "∉", "⊆", "⊂", "⊄", "×", "÷", "+=", "-=", "->", "<-", "<->", "%",
}

# Clauses SurrealDB's SELECT accepts that this engine does not; each is refused by name.
_UNSUPPORTED_CLAUSES = {
    "GROUP": "GROUP BY",
    "SPLIT": "SPLIT",
    "WITH": "WITH",
    "TIMEOUT": "TIMEOUT",
    "PARALLEL": "PARALLEL",
    "EXPLAIN": "EXPLAIN",
    "TEMPFILES": "TEMPFILES",
    "VERSION": "VERSION",
    "OMIT": "OMIT",
}


@dataclass(frozen=True)
class Item:
    """One projection item.

    kind: ``all`` (``*``), ``field`` (a path, output at ``out``), ``linkall`` (``path.*``),
    ``sub`` (a subquery, optionally indexed with ``[n]``).
    """

    kind: str
    path: Path = ()
    out: Path = ()
    sub: Query | None = None
    index: int | None = None


@dataclass(frozen=True)
class Query:
    """A parsed SELECT statement of the supported subset."""

    items: tuple[Item, ...]
    table: str
    where: Expr | None = None
    order: tuple[tuple[Path, bool], ...] = ()  # (path, descending)
    limit: Expr | None = None
    start: Expr | None = None
    fetch: tuple[Path, ...] = field(default_factory=tuple)


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


# --------------------------------------------------------------------------------------------
# Parser


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = tokenize(text)
        self.i = 0
        self.depth = 0  # brackets, NOTs and subqueries open at this point of the parse

    def enter(self) -> None:
        """Open one nesting level (refused past MAX_DEPTH, before the recursion goes deeper)."""
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise QueryRejected(_too_deep(self.tok.pos))

    def leave(self) -> None:
        self.depth -= 1

    # -- token helpers ---------------------------------------------------------------------
    @property
    def tok(self) -> Tok:
        return self.toks[self.i]

    def peek(self, k: int = 1) -> Tok:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def advance(self) -> Tok:
        t = self.toks[self.i]
        if self.i < len(self.toks) - 1:
            self.i += 1
        return t

    def is_kw(self, *words: str, tok: Tok | None = None) -> bool:
        t = tok or self.tok
        return t.kind == "ident" and not t.quoted and t.value.upper() in words

    def is_op(self, *ops: str, tok: Tok | None = None) -> bool:
        t = tok or self.tok
        return t.kind == "op" and t.value in ops

    def expect_kw(self, word: str) -> None:
        if not self.is_kw(word):
            raise QueryRejected(f"expected {word} at position {self.tok.pos}, found {self._desc()}")
        self.advance()

    def expect_op(self, op: str) -> None:
        if not self.is_op(op):
            raise QueryRejected(f"expected '{op}' at position {self.tok.pos}, found {self._desc()}")
        self.advance()

    def _desc(self, t: Tok | None = None) -> str:
        t = t or self.tok
        return "end of query" if t.kind == "eof" else repr(t.text)

    # -- statements ------------------------------------------------------------------------
    def statement(self) -> Query:
        q = self.select()
        while self.is_op(";"):
            self.advance()
            if self.tok.kind != "eof":
                raise QueryRejected("multiple statements are not supported (one SELECT per view)")
        if self.tok.kind != "eof":
            self._reject_trailing()
        return q

    def _reject_trailing(self) -> None:
        t = self.tok
        if t.kind == "ident" and not t.quoted:
            word = t.value.upper()
            if word in _UNSUPPORTED_CLAUSES:
                raise QueryRejected(f"{_UNSUPPORTED_CLAUSES[word]} is not supported")
            if word in ("WHERE", "ORDER", "LIMIT", "START", "FETCH"):
                raise QueryRejected(f"clause {word} is out of order or repeated")
        raise QueryRejected(f"unexpected {self._desc()} at position {t.pos}")

    def select(self) -> Query:
        if not self.is_kw("SELECT"):
            if self.tok.kind == "ident" and not self.tok.quoted:
                raise QueryRejected(
                    f"only SELECT statements are supported, not {self.tok.value.upper()}"
                )
            raise QueryRejected("only SELECT statements are supported")
        self.advance()
        if self.is_kw("VALUE"):
            raise QueryRejected("SELECT VALUE is not supported")
        items = self.projection()
        if self.is_kw("OMIT"):
            raise QueryRejected("OMIT is not supported")
        self.expect_kw("FROM")
        if self.is_kw("ONLY"):
            raise QueryRejected("FROM ONLY is not supported")
        table = self.table_name()
        if self.is_op(","):
            raise QueryRejected("selecting FROM several tables is not supported")
        where = None
        order: list[tuple[Path, bool]] = []
        limit = start = None
        fetch: list[Path] = []
        if self.is_kw("WITH"):
            raise QueryRejected("WITH is not supported")
        if self.is_kw("WHERE"):
            self.advance()
            where = self.expr()
        if self.is_kw("SPLIT"):
            raise QueryRejected("SPLIT is not supported")
        if self.is_kw("GROUP"):
            raise QueryRejected("GROUP BY is not supported")
        if self.is_kw("ORDER"):
            self.advance()
            if self.is_kw("BY"):
                self.advance()
            order = self.order_list()
        # SurrealDB accepts LIMIT and START in either order.
        for _ in range(2):
            if self.is_kw("LIMIT") and limit is None:
                self.advance()
                if self.is_kw("BY"):
                    self.advance()
                limit = self.count_expr("LIMIT")
            elif self.is_kw("START") and start is None:
                self.advance()
                if self.is_kw("AT"):
                    self.advance()
                start = self.count_expr("START")
        if self.is_kw("FETCH"):
            self.advance()
            fetch.append(self.plain_path("FETCH"))
            while self.is_op(","):
                self.advance()
                fetch.append(self.plain_path("FETCH"))
        return Query(tuple(items), table, where, tuple(order), limit, start, tuple(fetch))

    def table_name(self) -> str:
        t = self.tok
        if t.kind == "op" and t.value == "(":
            raise QueryRejected("selecting FROM a subquery is not supported")
        if t.kind == "param":
            raise QueryRejected("selecting FROM a parameter is not supported")
        if t.kind != "ident":
            raise QueryRejected(f"expected a table name after FROM, found {self._desc()}")
        self.advance()
        if self.is_op(":") and self.tok.glued:
            raise QueryRejected("selecting FROM a record id is not supported")
        if self.is_op("->", "<-", "<->"):
            raise QueryRejected("graph traversal is not supported")
        return str(t.value)

    def count_expr(self, clause: str) -> Expr:
        t = self.tok
        if t.kind == "num" and re.fullmatch(r"\d+", t.value):
            self.advance()
            return ("lit", int(t.value))
        if t.kind == "param":
            return self.param()
        raise QueryRejected(f"{clause} must be a non-negative integer or a parameter")

    def order_list(self) -> list[tuple[Path, bool]]:
        out = []
        while True:
            if self.is_kw("RAND"):
                raise QueryRejected("ORDER BY RAND() is not supported")
            path = self.plain_path("ORDER BY")
            if self.is_kw("COLLATE", "NUMERIC"):
                raise QueryRejected(f"ORDER BY ... {self.tok.value.upper()} is not supported")
            desc = False
            if self.is_kw("ASC"):
                self.advance()
            elif self.is_kw("DESC"):
                self.advance()
                desc = True
            out.append((path, desc))
            if not self.is_op(","):
                return out
            self.advance()

    def plain_path(self, clause: str) -> Path:
        t = self.tok
        if t.kind != "ident":
            raise QueryRejected(f"{clause} expects a field path, found {self._desc()}")
        self.advance()
        parts = [t.value]
        while self.is_op("."):
            self.advance()
            t = self.tok
            if t.kind != "ident":
                raise QueryRejected(f"{clause} expects a field path, found {self._desc()}")
            self.advance()
            parts.append(t.value)
        if self.is_op("(") and self.tok.glued:
            raise QueryRejected(f"function {'::'.join(parts)}() is not supported in {clause}")
        if self.is_op("[", "->", "<-", "<->", ":"):
            raise QueryRejected(f"{clause} supports only plain field paths")
        return tuple(parts)

    # -- projection --------------------------------------------------------------------------
    def projection(self) -> list[Item]:
        items = [self.proj_item()]
        while self.is_op(","):
            self.advance()
            items.append(self.proj_item())
        return items

    def proj_item(self) -> Item:
        if self.is_op("*"):
            self.advance()
            if self.is_kw("AS"):
                raise QueryRejected("* AS alias is not supported")
            return Item("all")
        if self.is_op("("):
            if self.is_kw("SELECT", tok=self.peek()):
                self.advance()
                self.enter()
                sub = self.select()
                self.leave()
                if not self.is_op(")"):
                    self._reject_trailing()
                self.advance()
                index = None
                if self.is_op("["):
                    self.advance()
                    t = self.tok
                    if t.kind != "num" or not re.fullmatch(r"\d+", t.value):
                        raise QueryRejected("a subquery index must be a literal integer like [0]")
                    self.advance()
                    index = int(t.value)
                    self.expect_op("]")
                if not self.is_kw("AS"):
                    raise QueryRejected("a subquery in the projection needs AS alias")
                self.advance()
                alias = self.alias()
                return Item("sub", (), alias, sub, index)
            raise QueryRejected("only subqueries may be parenthesised in the projection")
        t = self.tok
        if self.is_op("->", "<-", "<->"):
            raise QueryRejected("graph traversal is not supported")
        if t.kind == "param":
            raise QueryRejected("parameters in the projection are not supported")
        if t.kind != "ident":
            raise QueryRejected(f"unsupported projection item {self._desc()}")
        if self.is_op("::", tok=self.peek()):
            self.advance()
            self._reject_function(t)
        if self.is_op("(", tok=self.peek()):
            raise QueryRejected(f"function {t.value}() is not supported")
        if self.is_op("->", "<-", "<->", tok=self.peek()):
            raise QueryRejected("graph traversal is not supported")
        parts = [t.value]
        self.advance()
        linkall = False
        while self.is_op("."):
            self.advance()
            if self.is_op("*"):
                self.advance()
                linkall = True
                break
            n = self.tok
            if n.kind != "ident":
                raise QueryRejected(f"unsupported projection path near {self._desc()}")
            self.advance()
            parts.append(n.value)
        if self.is_op("::") or (self.is_op(":") and self.tok.glued):
            raise QueryRejected(f"function or record id in projection near {t.text} is not supported")
        if self.is_op("("):
            raise QueryRejected(f"function {'.'.join(parts)}() is not supported")
        if self.is_op("["):
            raise QueryRejected("index or filter expressions in the projection are not supported")
        if self.is_op("->", "<-", "<->"):
            raise QueryRejected("graph traversal is not supported")
        if self.tok.kind == "op" and self.tok.value in _UNSUPPORTED_SYMBOL_OPS | set(_SYMBOL_OPS):
            raise QueryRejected(f"operator {self.tok.value} in the projection is not supported")
        out: Path = tuple(parts)
        if self.is_kw("AS"):
            self.advance()
            out = self.alias()
        if linkall:
            return Item("linkall", tuple(parts), out)
        return Item("field", tuple(parts), out)

    def alias(self) -> Path:
        t = self.tok
        if t.kind != "ident":
            raise QueryRejected(f"expected an alias after AS, found {self._desc()}")
        self.advance()
        parts = [t.value]
        while self.is_op("."):
            self.advance()
            n = self.tok
            if n.kind != "ident":
                raise QueryRejected("invalid alias path")
            self.advance()
            parts.append(n.value)
        return tuple(parts)

    # -- expressions ----------------------------------------------------------------------
    def expr(self) -> Expr:
        terms = [self.and_expr()]
        while self.is_kw("OR") or self.is_op("||"):
            self.advance()
            terms.append(self.and_expr())
        return _balanced("or", terms)

    def and_expr(self) -> Expr:
        terms = [self.cmp_expr()]
        while self.is_kw("AND") or self.is_op("&&"):
            self.advance()
            terms.append(self.cmp_expr())
        return _balanced("and", terms)

    def _cmp_op(self) -> str | None:
        t = self.tok
        if t.kind == "op":
            if t.value in _SYMBOL_OPS:
                # `!` followed by `=` without space tokenises as `!=` already.
                self.advance()
                return _SYMBOL_OPS[t.value]
            if t.value == "|" or t.value == "&":
                return None
            if t.value in _UNSUPPORTED_SYMBOL_OPS:
                raise QueryRejected(f"operator {t.value} is not supported")
            return None
        if t.kind == "ident" and not t.quoted:
            w = t.value.upper()
            if w == "NOT":
                if self.is_kw("IN", "INSIDE", tok=self.peek()):
                    self.advance()
                    self.advance()
                    return "notinside"
                return None
            if w == "IS":
                self.advance()
                if self.is_kw("NOT"):
                    self.advance()
                    return "!="
                return "="
            if w in _KEYWORD_OPS:
                self.advance()
                return _KEYWORD_OPS[w]
            if w in _UNSUPPORTED_KEYWORD_OPS:
                raise QueryRejected(f"operator {w} is not supported")
        return None

    def cmp_expr(self) -> Expr:
        left = self.unary()
        while True:
            op = self._cmp_op()
            if op is None:
                return left
            right = self.unary()
            left = ("cmp", op, left, right)

    def unary(self) -> Expr:
        if self.is_op("!") or self.is_kw("NOT"):
            self.advance()
            self.enter()
            inner = self.unary()
            self.leave()
            return ("not", inner)
        if self.is_op("-"):
            nt = self.peek()
            if nt.kind == "num" and nt.glued:
                self.advance()
                self.advance()
                return ("lit", _parse_number(nt.value, True))
            raise QueryRejected("arithmetic (unary -) is not supported")
        if self.is_op("+"):
            raise QueryRejected("operator + is not supported")
        return self.primary()

    def primary(self) -> Expr:
        t = self.tok
        if t.kind == "dur":
            raise QueryRejected(f"duration literal {t.text} is not supported")
        if t.kind == "num":
            self.advance()
            if self.tok.kind == "ident" and self.tok.glued:
                raise QueryRejected(f"duration or unit literal {t.text}{self.tok.text} is not supported")
            return ("lit", _parse_number(t.value, False))
        if t.kind == "str":
            self.advance()
            return ("lit", t.value)
        if t.kind == "dt":
            self.advance()
            return ("lit", parse_datetime(t.value))
        if t.kind == "rs":
            self.advance()
            return ("lit", _record_from_text(t.value))
        if t.kind == "us":
            self.advance()
            import uuid

            try:
                return ("lit", uuid.UUID(t.value))
            except ValueError as exc:
                raise QueryRejected(f"invalid uuid literal u'{t.value}'") from exc
        if t.kind == "param":
            return self.param()
        if self.is_op("("):
            if self.is_kw("SELECT", tok=self.peek()):
                raise QueryRejected("subqueries in WHERE are not supported")
            self.advance()
            self.enter()
            e = self.expr()
            self.leave()
            self.expect_op(")")
            return e
        if self.is_op("["):
            self.advance()
            self.enter()
            items: list[Expr] = []
            while not self.is_op("]"):
                items.append(self.expr())
                if self.is_op(","):
                    self.advance()
                elif not self.is_op("]"):
                    raise QueryRejected(f"expected ',' or ']' in array, found {self._desc()}")
            self.advance()
            self.leave()
            return ("array", tuple(items))
        if self.is_op("{"):
            self.advance()
            self.enter()
            keys: list[str] = []
            vals: list[Expr] = []
            while not self.is_op("}"):
                k = self.tok
                if k.kind not in ("ident", "str"):
                    raise QueryRejected(f"expected an object key, found {self._desc()}")
                self.advance()
                self.expect_op(":")
                keys.append(k.value)
                vals.append(self.expr())
                if self.is_op(","):
                    self.advance()
                elif not self.is_op("}"):
                    raise QueryRejected(f"expected ',' or '}}' in object, found {self._desc()}")
            self.advance()
            self.leave()
            return ("object", tuple(keys), tuple(vals))
        if self.is_op("->", "<-", "<->"):
            raise QueryRejected("graph traversal is not supported")
        if t.kind == "ident":
            return self.ident_expr()
        if t.kind == "eof":
            raise QueryRejected("unexpected end of query in expression")
        raise QueryRejected(f"unexpected {self._desc()} at position {t.pos}")

    def ident_expr(self) -> Expr:
        t = self.advance()
        if not t.quoted:
            w = t.value.upper()
            if w in ("TRUE", "FALSE"):
                return ("lit", w == "TRUE")
            if w == "NONE":
                return ("lit", NONE)
            if w == "NULL":
                return ("lit", None)
        # Function call: name(...) or name::name(...)
        if self.is_op("::"):
            self._reject_function(t)
        if self.is_op("(") and not t.quoted:
            raise QueryRejected(f"function {t.value}() is not supported")
        # Record id literal: table:id (no whitespace around ':').
        if self.is_op(":") and self.tok.glued and self.peek().glued:
            self.advance()
            idt = self.advance()
            if idt.kind == "num" and re.fullmatch(r"\d+", idt.value):
                return ("lit", RecordID(t.value, int(idt.value)))
            if idt.kind == "ident":
                return ("lit", RecordID(t.value, idt.value))
            if idt.kind == "op" and idt.value == "-" and self.tok.kind == "num":
                n = self.advance()
                return ("lit", RecordID(t.value, -int(n.value)))
            raise QueryRejected(f"unsupported record id literal near {t.text}:{idt.text}")
        parts = [t.value]
        while self.is_op("."):
            self.advance()
            n = self.tok
            if n.kind == "op" and n.value == "*":
                raise QueryRejected("path.* is not supported in WHERE")
            if n.kind != "ident":
                raise QueryRejected(f"expected a field name after '.', found {self._desc()}")
            self.advance()
            parts.append(n.value)
        if self.is_op("("):
            raise QueryRejected(f"function or method {'.'.join(parts)}() is not supported")
        if self.is_op("["):
            raise QueryRejected("index or filter expressions on fields are not supported")
        if self.is_op("->", "<-", "<->"):
            raise QueryRejected("graph traversal is not supported")
        return ("field", tuple(parts))

    def _reject_function(self, first: Tok) -> None:
        """Called on the `::` after ``first``: name the whole function and refuse it."""
        parts = [first.value]
        while self.is_op("::"):
            self.advance()
            if self.tok.kind != "ident":
                break
            parts.append(self.advance().value)
        raise QueryRejected(f"function {'::'.join(parts)}() is not supported")

    def param(self) -> Expr:
        t = self.advance()
        parts: list[str] = []
        while self.is_op("."):
            self.advance()
            n = self.tok
            if n.kind != "ident":
                raise QueryRejected(f"expected a field name after ${t.value}., found {self._desc()}")
            self.advance()
            parts.append(n.value)
        if self.is_op("[") or self.is_op("("):
            raise QueryRejected(f"indexing or calling ${t.value} is not supported")
        name = t.value
        if name == "parent":
            return ("parent", tuple(parts))
        if name in ("this", "value", "before", "after", "event", "input"):
            raise QueryRejected(f"${name} is not supported")
        return ("param", name, tuple(parts))


def _balanced(kind: str, terms: list[Expr]) -> Expr:
    """``terms`` joined by ``kind`` (and/or) as a balanced tree, left to right."""
    while len(terms) > 1:
        # Pair neighbours level by level: order is kept and the height is ceil(log2 n).
        paired = [(kind, terms[i], terms[i + 1]) for i in range(0, len(terms) - 1, 2)]
        if len(terms) % 2:
            paired.append(terms[-1])
        terms = paired
    return terms[0]


def _too_deep(pos: int | None = None) -> str:
    near = "" if pos is None else f" near position {pos}"
    return (f"the query nests deeper than the limit of {MAX_DEPTH} levels{near} (MAX_DEPTH: "
            "parentheses, brackets, NOT, comparisons and subqueries each add a level)")


_COMPOSITE = frozenset({"and", "or", "not", "cmp", "array", "object"})


def _height(e: Expr) -> int:
    """Height of an expression tree (leaves 0), computed without recursion."""
    best = 0
    stack: list[tuple[Expr, int]] = [(e, 0)]
    while stack:
        node, above = stack.pop()
        if node[0] not in _COMPOSITE:
            continue
        level = above + 1
        best = max(best, level)
        k = node[0]
        if k == "cmp":
            children: Any = (node[2], node[3])
        elif k == "array":
            children = node[1]
        elif k == "object":
            children = node[2]
        else:
            children = node[1:]
        stack.extend((c, level) for c in children)
    return best


def _check_heights(q: Query) -> None:
    """Every expression tree of ``q`` and of its subqueries is at most MAX_DEPTH high."""
    queries = [q]
    while queries:
        cur = queries.pop()
        for e in (cur.where, cur.limit, cur.start):
            if e is not None and _height(e) > MAX_DEPTH:
                raise QueryRejected(_too_deep())
        queries.extend(it.sub for it in cur.items if it.sub is not None)


def _record_from_text(text: str) -> RecordID:
    table, sep, ident = text.partition(":")
    if not sep or not table:
        raise QueryRejected(f"invalid record id literal r'{text}'")
    if ident.startswith("⟨") and ident.endswith("⟩"):
        return RecordID(table, ident[1:-1])
    if ident.startswith("`") and ident.endswith("`"):
        return RecordID(table, ident[1:-1])
    if re.fullmatch(r"-?\d+", ident):
        return RecordID(table, int(ident))
    return RecordID(table, ident)


def parse(text: str) -> Query:
    """Parse one SELECT statement of the supported subset or raise :class:`QueryRejected`."""
    if not isinstance(text, str):
        raise QueryRejected(f"the query must be a string, got {type(text).__name__}")
    if len(text) > MAX_QUERY_CHARS:
        raise QueryRejected(f"the query is {len(text):,} characters long; the limit is "
                            f"{MAX_QUERY_CHARS:,} (MAX_QUERY_CHARS)")
    if not text.strip():
        raise QueryRejected("the query is empty")
    q = _Parser(text).statement()
    _check_heights(q)
    return q
