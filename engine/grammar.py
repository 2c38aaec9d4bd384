"""The recursive-descent grammar of `engine.parser`: statements, clauses, projections and
expressions of the supported SELECT subset into the AST of `engine.syntax`."""

from __future__ import annotations

import re

from surrealdb import RecordID

from engine.errors import QueryRejected
from engine.functions import check_call
from engine.lexer import (
    Tok,
    _parse_number,
    parse_datetime,
    tokenize,
)
from engine.syntax import (
    _ARITH_NAMES,
    _KEYWORD_OPS,
    _SYMBOL_OPS,
    _UNSUPPORTED_CLAUSES,
    _UNSUPPORTED_KEYWORD_OPS,
    _UNSUPPORTED_SYMBOL_OPS,
    ADDITIVE_OPS,
    EQUALITY_OPS,
    MAX_DEPTH,
    MULTIPLICATIVE_OPS,
    NULLISH_OPS,
    Expr,
    Item,
    Path,
    Query,
)
from engine.values import NONE

# Binding levels of the binary operators below AND, loosest first (_Parser.binary).
_NULLISH, _EQUALITY, _RELATION, _ADDITIVE, _MULTIPLICATIVE, _POWER = range(1, 7)

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
            if word in ("WHERE", "SPLIT", "GROUP", "ORDER", "LIMIT", "START", "FETCH", "OMIT"):
                raise QueryRejected(f"clause {word} is out of order or repeated")
        raise QueryRejected(f"unexpected {self._desc()} at position {t.pos}")

    def select(self) -> Query:
        """One SELECT statement, clause by clause in SurrealDB's order."""
        if not self.is_kw("SELECT"):
            if self.tok.kind == "ident" and not self.tok.quoted:
                raise QueryRejected(
                    f"only SELECT statements are supported, not {self.tok.value.upper()}"
                )
            raise QueryRejected("only SELECT statements are supported")
        self.advance()
        value, items = self.select_items()
        omit = self.path_clause("OMIT") if self.is_kw("OMIT") else []
        self.expect_kw("FROM")
        if self.is_kw("ONLY"):
            raise QueryRejected("FROM ONLY is not supported")
        table = self.table_name()
        if self.is_op(","):
            raise QueryRejected("selecting FROM several tables is not supported")
        if self.is_kw("WITH"):
            raise QueryRejected("WITH is not supported")
        where = None
        if self.is_kw("WHERE"):
            self.advance()
            where = self.expr()
        split = self.path_clause("SPLIT", "ON") if self.is_kw("SPLIT") else []
        group = self.group_clause() if self.is_kw("GROUP") else None
        order: list[tuple[Path, bool]] = []
        if self.is_kw("ORDER"):
            self.advance()
            if self.is_kw("BY"):
                self.advance()
            order = self.order_list()
        limit, start = self.limit_start()
        fetch = self.path_clause("FETCH") if self.is_kw("FETCH") else []
        return Query(tuple(items), table, where, tuple(order), limit, start, tuple(fetch),
                     value, tuple(omit), None if group is None else tuple(group), tuple(split))

    def select_items(self) -> tuple[bool, list[Item]]:
        """`VALUE <one item>` (True) or the projection list (False)."""
        if not self.is_kw("VALUE"):
            return False, self.projection()
        self.advance()
        items = [self.proj_item(named=False)]
        if items[0].kind == "all":
            raise QueryRejected("SELECT VALUE * is not valid: VALUE takes one expression")
        if self.is_op(","):
            raise QueryRejected("SELECT VALUE takes one expression, not a list")
        return True, items

    def path_clause(self, clause: str, optional: str | None = None) -> list[Path]:
        """`<clause> [<optional word>] path, path, ...` (OMIT, SPLIT [ON], FETCH)."""
        self.advance()
        if optional is not None and self.is_kw(optional):
            self.advance()
        out = [self.plain_path(clause)]
        while self.is_op(","):
            self.advance()
            out.append(self.plain_path(clause))
        return out

    def group_clause(self) -> list[Path]:
        """`GROUP ALL` (no path) or `GROUP [BY] path, ...`."""
        self.advance()
        if self.is_kw("ALL"):
            self.advance()
            return []
        if self.is_kw("BY"):
            self.advance()
        out = [self.plain_path("GROUP BY")]
        while self.is_op(","):
            self.advance()
            out.append(self.plain_path("GROUP BY"))
        return out

    def limit_start(self) -> tuple[Expr | None, Expr | None]:
        """`LIMIT [BY] n` and `START [AT] n`, each at most once, in either order (as
        SurrealDB accepts them)."""
        limit: Expr | None = None
        start: Expr | None = None
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
        return limit, start

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
        if (self.is_op("(") and self.tok.glued) or self.is_op("::"):
            raise QueryRejected(f"{clause} supports only field paths: name the expression in the "
                                f"projection (`expr AS name`) and use that name in {clause}")
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

    def proj_item(self, named: bool = True) -> Item:
        """One projection item; ``named``: its output needs a name (not under VALUE)."""
        if self.is_op("*"):
            self.advance()
            if self.is_kw("AS"):
                raise QueryRejected("* AS alias is not supported")
            return Item("all")
        if self.is_op("(") and self.is_kw("SELECT", tok=self.peek()):
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
            return Item("sub", (), self.alias(), sub, index)
        linkall = self._linkall_path()
        if linkall is not None:
            out: Path = linkall
            if self.is_kw("AS"):
                self.advance()
                out = self.alias()
            return Item("linkall", linkall, out)
        e = self.expr()
        alias: Path | None = None
        if self.is_kw("AS"):
            self.advance()
            alias = self.alias()
        if e[0] == "field":
            return Item("field", e[1], alias if alias is not None else e[1])
        if alias is None:
            return Item("expr", (), _default_name(e) if named else ("",), expr=e, implicit=True)
        return Item("expr", (), alias, expr=e)

    def _linkall_path(self) -> Path | None:
        """``a.b.*`` ahead (a projection of every field of the linked record): its path,
        consumed; None (nothing consumed) otherwise."""
        j = self.i
        toks = self.toks
        if toks[j].kind != "ident" or self.is_op("(", "::", tok=toks[j + 1]):
            return None
        parts = [toks[j].value]
        j += 1
        while toks[j].kind == "op" and toks[j].value == ".":
            nxt = toks[j + 1]
            if nxt.kind == "op" and nxt.value == "*":
                self.i = j + 2
                return tuple(parts)
            if nxt.kind != "ident":
                return None
            parts.append(nxt.value)
            j += 2
        return None

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
    # Binding, loosest first (as SurrealDB 3.x parses): OR, AND, `??` `?:`, equality
    # (`= != IS`), relations (`< > CONTAINS IN`...), `+ -`, `* / %`, `**` (left to right),
    # unary `- ! NOT`, then postfix `.field` and `[index]`.
    def expr(self) -> Expr:
        terms = [self.and_expr()]
        while self.is_kw("OR") or self.is_op("||"):
            self.advance()
            terms.append(self.and_expr())
        return _balanced("or", terms)

    def and_expr(self) -> Expr:
        terms = [self.binary()]
        while self.is_kw("AND") or self.is_op("&&"):
            self.advance()
            terms.append(self.binary())
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
                raise QueryRejected(_operator_refusal(t.value))
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

    def binary(self, level: int = _NULLISH) -> Expr:
        """The operators binding at ``level`` or tighter, each level left to right: one
        function for the levels below AND (precedence climbing), so a parenthesised
        expression costs 5 Python frames (expr, and_expr, binary, unary, primary) rather than
        one per level, and MAX_DEPTH parentheses stay far inside the recursion limit."""
        left = self.unary()
        while True:
            save = self.i
            found = self._binary_op()
            if found is None:
                return left
            op_level, kind, op = found
            if op_level < level:
                self.i = save  # an operator of a looser level: the caller's
                return left
            left = (kind, op, left, self.binary(op_level + 1))

    def _binary_op(self) -> tuple[int, str, str] | None:
        """The binary operator at the cursor, consumed: (its level, node kind, operator)."""
        t = self.tok
        if t.kind == "op":
            if t.value == "**":
                self.advance()
                return _POWER, "arith", "**"
            if t.value in MULTIPLICATIVE_OPS:
                self.advance()
                return _MULTIPLICATIVE, "arith", _ARITH_NAMES.get(t.value, t.value)
            if t.value in ADDITIVE_OPS:
                self.advance()
                return _ADDITIVE, "arith", t.value
        op = self._cmp_op()
        if op is not None:
            # equality over relations: `a = b < c` is `a = (b < c)`, as in SurrealDB
            return (_EQUALITY if op in EQUALITY_OPS else _RELATION), "cmp", op
        t = self.tok
        if t.kind == "op" and t.value in NULLISH_OPS:
            self.advance()
            return _NULLISH, "nullish", t.value
        return None

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
                return self.postfix(("lit", _parse_number(nt.value, True)))
            self.advance()
            self.enter()
            inner = self.unary()
            self.leave()
            return ("neg", inner)
        if self.is_op("+"):
            raise QueryRejected("unary + is not supported (write the value itself)")
        return self.postfix(self.primary())

    def postfix(self, e: Expr) -> Expr:
        """``e[index]`` and ``e.field`` after a value (a field path reads through links)."""
        while True:
            if self.is_op("[") and self.tok.glued:
                self.advance()
                e = ("index", e, self.index_expr())
                self.expect_op("]")
            elif self.is_op(".") and e[0] != "field":
                self.advance()
                if self.is_op("*"):
                    self.advance()  # every field of the linked records (as `link.*`)
                    e = ("deref", e)
                    continue
                path = self._dotted()
                e = ("get", e, path) if e[0] != "get" else ("get", e[1], e[2] + path)
            else:
                return e

    def _dotted(self) -> Path:
        parts: list[str] = []
        while True:
            n = self.tok
            if n.kind == "op" and n.value == "*":
                raise QueryRejected("path.* is only supported as a projection item (`link.*`)")
            if n.kind != "ident":
                raise QueryRejected(f"expected a field name after '.', found {self._desc()}")
            self.advance()
            if self.is_op("("):
                raise QueryRejected(_method_refusal(n.value))
            parts.append(n.value)
            if not self.is_op(".") or self.peek().kind != "ident":
                return tuple(parts)
            self.advance()

    def index_expr(self) -> Expr:
        t = self.tok
        if t.kind == "op" and t.value == "$":
            self.advance()
            return ("last",)
        if t.kind == "num" and re.fullmatch(r"\d+", t.value):
            self.advance()
            return ("lit", int(t.value))
        if t.kind == "str":
            self.advance()
            return ("lit", t.value)
        if t.kind == "param":
            return self.param()
        if t.kind == "op" and t.value in ("*", "?", "WHERE"):
            raise QueryRejected("filters and `[*]` inside [] are not supported; index with a "
                                "number (`tags[0]`) or `[$]` for the last element")
        if self.is_kw("WHERE"):
            raise QueryRejected("filters inside [] (`[WHERE ...]`) are not supported")
        if self.is_op("-"):
            raise QueryRejected("negative indexes are not supported (SurrealDB answers NONE "
                                "for them); use `[$]` for the last element")
        raise QueryRejected(f"an index must be a non-negative integer, a string, `$` or a "
                            f"parameter, found {self._desc()}")

    def primary(self) -> Expr:
        t = self.tok
        if t.kind in ("dur", "num", "str", "dt", "rs", "us"):
            return self.literal()
        if t.kind == "param":
            return self.param()
        if self.is_op("("):
            return self.parenthesised()
        if self.is_op("["):
            return self.array_literal()
        if self.is_op("{"):
            return self.object_literal()
        if self.is_op("->", "<-", "<->"):
            return self.graph()
        if t.kind == "ident":
            return self.ident_expr()
        if t.kind == "eof":
            raise QueryRejected("unexpected end of query in expression")
        raise QueryRejected(f"unexpected {self._desc()} at position {t.pos}")

    def literal(self) -> Expr:
        """A number, string, datetime, record id or uuid literal (durations are refused)."""
        t = self.tok
        if t.kind == "dur":
            raise QueryRejected(f"duration literal {t.text} is not supported")
        self.advance()
        if t.kind == "num":
            if self.tok.kind == "ident" and self.tok.glued:
                raise QueryRejected(f"duration or unit literal {t.text}{self.tok.text} is not supported")
            return ("lit", _parse_number(t.value, False))
        if t.kind == "str":
            return ("lit", t.value)
        if t.kind == "dt":
            return ("lit", parse_datetime(t.value))
        if t.kind == "rs":
            return ("lit", _record_from_text(t.value))
        import uuid

        try:
            return ("lit", uuid.UUID(t.value))
        except ValueError as exc:
            raise QueryRejected(f"invalid uuid literal u'{t.value}'") from exc

    def parenthesised(self) -> Expr:
        """`( expr )`, or `( SELECT ... )`: a subquery as a value (`x IN (SELECT VALUE ...)`:
        engine.semijoin)."""
        if self.is_kw("SELECT", tok=self.peek()):
            self.advance()
            self.enter()
            sub = self.select()
            self.leave()
            if not self.is_op(")"):
                self._reject_trailing()
            self.advance()
            return ("subquery", sub)
        self.advance()
        self.enter()
        e = self.expr()
        self.leave()
        self.expect_op(")")
        return e

    def array_literal(self) -> Expr:
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

    def object_literal(self) -> Expr:
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
        if self.is_op("::") or (self.is_op("(") and not t.quoted):
            return self.call(t)
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
        while self.is_op(".") and self.peek().kind == "ident":
            self.advance()
            n = self.advance()
            if self.is_op("("):
                raise QueryRejected(_method_refusal(n.value))
            parts.append(n.value)
        if self.is_op(".") and self.is_op("*", tok=self.peek()):
            raise QueryRejected("path.* is only supported as a projection item (`link.*`)")
        if self.is_op("->", "<-", "<->"):
            raise QueryRejected("graph traversal from a field is not supported: traverse from "
                                "the row (`->edge->table`), or select the linked rows with a "
                                "subquery")
        return ("field", tuple(parts))

    def graph(self) -> Expr:
        """``->edge->table...`` / ``<-edge<-table...`` from the current row: hops of
        (direction, edge table, target table; None when the path ends at the edges, "?" for
        any table)."""
        hops: list[tuple[str, str, str | None]] = []
        while self.is_op("->", "<-", "<->"):
            arrow = self.advance().value
            if arrow == "<->":
                raise QueryRejected("graph traversal both ways (<->) is not supported: write the "
                                    "two directions as two items")
            edge = self._graph_table(arrow, "edge")
            target: str | None = None
            if self.is_op(arrow):
                self.advance()
                target = self._graph_table(arrow, "target")
            elif self.is_op("->", "<-", "<->"):
                raise QueryRejected("a graph hop keeps one direction (`->edge->table` or "
                                    "`<-edge<-table`)")
            hops.append((arrow, edge, target))
            if target is None and self.is_op("->", "<-", "<->"):
                raise QueryRejected("a graph path continues from a table, not from an edge")
        return ("graph", tuple(hops))

    def _graph_table(self, arrow: str, what: str) -> str:
        t = self.tok
        if t.kind == "op" and t.value == "?":
            if what == "edge":
                raise QueryRejected("traversing any edge table (`->?`) is not supported: name "
                                    "the edge table")
            self.advance()
            return "?"
        if t.kind == "op" and t.value == "(":
            raise QueryRejected("filters in a graph path (`->(edge WHERE ...)`) are not "
                                "supported; filter the result with a subquery or WHERE")
        if t.kind != "ident":
            raise QueryRejected(f"expected a table name after {arrow}, found {self._desc()}")
        self.advance()
        if self.is_op(":") and self.tok.glued:
            raise QueryRejected("graph paths through a record id are not supported")
        return str(t.value)

    def call(self, first: Tok) -> Expr:
        """``name(args)`` / ``name::name(args)`` after its first name token."""
        parts = [first.value]
        while self.is_op("::"):
            self.advance()
            if self.tok.kind != "ident":
                raise QueryRejected(f"expected a function name after ::, found {self._desc()}")
            parts.append(self.advance().value)
        name = "::".join(parts)
        if not self.is_op("("):
            raise QueryRejected(f"{name} is not supported (constants and functions are called "
                                "with parentheses)")
        self.advance()
        self.enter()
        args: list[Expr] = []
        while not self.is_op(")"):
            args.append(self.expr())
            if self.is_op(","):
                self.advance()
            elif not self.is_op(")"):
                raise QueryRejected(f"expected ',' or ')' in the arguments of {name}(), found "
                                    f"{self._desc()}")
        self.advance()
        self.leave()
        check_call(name, len(args))
        return ("call", name, tuple(args))


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
        if self.is_op("("):
            raise QueryRejected(f"calling ${t.value} is not supported")
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


def _default_name(e: Expr) -> Path:
    """The output name SurrealDB gives an unaliased projection expression: a function call
    is named by the function (`string::len`), an indexed field by its path (`tags[0]` is
    `tags`). Other expressions are named by SurrealDB's own text of them: refused, with AS
    as the way out."""
    if e[0] == "call":
        return (e[1],)
    if e[0] == "index":
        base = e[1]
        while base[0] == "index":
            base = base[1]
        if base[0] == "field":
            return tuple(base[1])
    raise QueryRejected("name this projection expression with AS (`... AS total`): "
                        "SurrealDB names it by its own text of the expression")


def _method_refusal(name: str) -> str:
    return (f"method calls (`value.{name}()`) are not supported; call the function instead "
            f"(for example `string::{name}(value)` or `array::{name}(value)`)")


def _operator_refusal(op: str) -> str:
    if op in ("?=", "*="):
        return (f"operator {op} is not supported; write `array CONTAINS value` (any element "
                "equal) or `array CONTAINSALL [...]`")
    if op in ("->", "<-", "<->"):
        return "graph traversal is not supported"
    return f"operator {op} is not supported"


def _too_deep(pos: int | None = None) -> str:
    near = "" if pos is None else f" near position {pos}"
    return (f"the query nests deeper than the limit of {MAX_DEPTH} levels{near} (MAX_DEPTH: "
            "parentheses, brackets, NOT, comparisons and subqueries each add a level)")


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
