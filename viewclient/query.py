"""The view's query turned into a read of its members, so the client asks SurrealDB for the
rows it already knows are in the view, and SurrealDB itself applies projections, links and
ORDER BY.

The service's edges say which records are in the view; reading them back by running the
whole query again would defeat the service. Instead the query's top-level `FROM <target>`
becomes `FROM $__members` and its top-level `START`/`LIMIT` are dropped (the members already
are the window: a `START 5` over them would cut five members away). The projection with its
subqueries and `$parent` links, WHERE and FETCH are kept in that inner read; its ORDER BY is
applied by an outer `SELECT * FROM (<inner>) ORDER BY ...` over the projected rows.

Why the outer ORDER BY: SurrealDB 3.0.x (the Node build, which the `http` transport runs on)
ignores ORDER BY in `SELECT ... FROM $array WHERE ...` and refuses `SELECT ... FROM $array`
without WHERE ("Specify a database to use"); it orders a subquery's rows correctly, and so
does 3.2 (the embedded build), so the one form is exact on both. A SELECT VALUE's rows are
no objects to order by a field: its member records are ordered in a subquery and the VALUE is
read from them, `SELECT VALUE ... FROM (SELECT * FROM (<members>) ORDER BY ...)`, which both
builds keep in order (the VALUE read of `$__members` itself was out of order on 3.0.x, and on
3.2 too for an ORDER BY on a field the VALUE is not).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

from surrealdb import RecordID

MEMBERS_PARAM = "__members"

_WORD = re.compile(r"[A-Za-z_]+")
_CLAUSES = {"WHERE", "SPLIT", "GROUP", "ORDER", "LIMIT", "START", "FETCH", "TIMEOUT",
            "PARALLEL", "EXPLAIN", "WITH", "TEMPFILES", "VERSION"}


class UnsupportedQuery(ValueError):
    """The query is not a single SELECT the client can turn into a members read."""


def _scan(text: str) -> Iterator[tuple[int, str, int]]:
    """(index, character, bracket depth) of every character outside strings, `⟨...⟩` and
    comments."""
    depth = 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "'\"`":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        if c == "⟨":
            j = text.find("⟩", i + 1)
            i = n if j < 0 else j + 1
            continue
        if text.startswith("--", i) or c == "#":
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        yield i, c, depth
        i += 1


def _top_level_words(text: str) -> list[tuple[int, int, str]]:
    """(start, end, upper-cased word) of every word outside brackets, strings and comments."""
    out: list[tuple[int, int, str]] = []
    word_end = 0
    for i, c, depth in _scan(text):
        if i < word_end:
            continue
        if depth == 0 and (c.isalpha() or c == "_") and (i == 0 or not (
                text[i - 1].isalnum() or text[i - 1] in "_:$.")):
            m = _WORD.match(text, i)
            assert m is not None
            out.append((i, m.end(), m.group(0).upper()))
            word_end = m.end()
    return out


def _split_top(text: str) -> list[str]:
    """`text` cut at its top-level commas (outside brackets, strings and comments)."""
    parts: list[str] = []
    cut = 0
    for i, c, depth in _scan(text):
        if c == "," and depth == 0:
            parts.append(text[cut:i].strip())
            cut = i + 1
    parts.append(text[cut:].strip())
    return [p for p in parts if p]


def _aliases(projection: str) -> dict[str, str]:
    """`expr AS name` items of the projection: an ORDER BY may name the expression, while
    the outer read sees only the name."""
    out: dict[str, str] = {}
    for item in _split_top(projection):
        as_words = [w for w in _top_level_words(item) if w[2] == "AS"]
        if as_words:
            expr, name = item[:as_words[-1][0]].strip(), item[as_words[-1][1]:].strip()
            out[" ".join(expr.split())] = name
    return out


def _outer_order(order: str, projection: str) -> str:
    """The ORDER BY for the outer read: terms naming an aliased expression name its alias."""
    aliases = _aliases(projection)
    terms: list[str] = []
    for term in _split_top(re.sub(r"^BY\s+", "", order, flags=re.I)):
        norm = " ".join(term.split())
        for expr, name in aliases.items():
            if norm == expr or norm.startswith(expr + " "):
                norm = name + norm[len(expr):]
                break
        terms.append(norm)
    return "ORDER BY " + ", ".join(terms)


def members_query(surql: str) -> str:
    """The view's query reading `$__members` instead of its table, without START/LIMIT, its
    ORDER BY applied over the projected rows (module docstring: exact on 3.0 and 3.2)."""
    text = surql.strip().rstrip(";").strip()
    words = _top_level_words(text)
    if not words or words[0][2] != "SELECT":
        raise UnsupportedQuery("a view is one SELECT statement")
    froms = [w for w in words if w[2] == "FROM"]
    if not froms:
        raise UnsupportedQuery("the query has no FROM")
    f_start, f_end, _ = froms[0]
    projection = text[words[0][1]:f_start].strip()
    proj_words = _top_level_words(projection)
    is_value = bool(proj_words) and proj_words[0][2] == "VALUE"
    after = [w for w in words if w[0] > f_end and w[2] in _CLAUSES]
    target_end = after[0][0] if after else len(text)
    rest = text[target_end:]
    # Each clause runs to the next top-level clause; START/LIMIT go, ORDER BY moves out.
    rest_words = [w for w in _top_level_words(rest) if w[2] in _CLAUSES]
    with_: list[str] = []
    where: str | None = None
    order: str | None = None
    tail: list[str] = []
    for k, (s, e, word) in enumerate(rest_words):
        end = rest_words[k + 1][0] if k + 1 < len(rest_words) else len(rest)
        if word in ("START", "LIMIT"):
            continue
        if word == "WITH":
            with_.append(rest[s:end].strip())
        elif word == "WHERE":
            where = rest[e:end].strip()
        elif word == "ORDER":
            order = rest[e:end].strip()
        else:
            tail.append(rest[s:end].strip())
    # `id != NONE`: a member deleted since its edge was read is skipped by 3.2 but read as a
    # row of NONE by 3.0 (with a VALUE or subquery projection); a WHERE also keeps 3.0 from
    # refusing an array source.
    cond = "WHERE id != NONE" + (f" AND ({where})" if where else "")
    if is_value and order:
        # A VALUE's rows are no objects to order by a field: the member records are ordered
        # first (by the record fields the ORDER BY names) and the VALUE read from them in order.
        members = " ".join([f"SELECT * FROM ${MEMBERS_PARAM}", *with_, cond])
        return " ".join([f"SELECT {projection} FROM (SELECT * FROM ({members}) ORDER {order})",
                         *tail])
    inner = " ".join([f"SELECT {projection} FROM ${MEMBERS_PARAM}", *with_, cond, *tail])
    outer = f"SELECT * FROM ({inner})"
    return outer + (" " + _outer_order(order, projection) if order else "")


# -- optimistic creates: the view's WHERE, where the client can evaluate it ---------------

_CMP = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(==|=|!=|>=|<=|>|<)\s*(.+?)\s*$", re.S)
_NUMBER = re.compile(r"^-?\d+(\.\d+)?$")
_PARAM = re.compile(r"^\$([A-Za-z_][A-Za-z0-9_]*)(\.id)?$")
_UNKNOWN = object()
_RECORD = object()  # tags a record id's parts in a comparable tuple


def where_text(surql: str) -> str | None:
    """The query's top-level WHERE expression, None without one."""
    text = surql.strip().rstrip(";").strip()
    words = _top_level_words(text)
    where = [w for w in words if w[2] == "WHERE"]
    if not where:
        return None
    start = where[0][1]
    after = [w for w in words if w[0] > start and w[2] in _CLAUSES]
    return text[start:after[0][0] if after else len(text)].strip()


def _literal(text: str, params: dict[str, Any], auth: Any) -> Any:
    if _NUMBER.match(text):
        return float(text)
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"" and "\\" not in text:
        return text[1:-1]
    upper = text.upper()
    if upper in ("TRUE", "FALSE"):
        return upper == "TRUE"
    if upper in ("NONE", "NULL"):
        return None
    m = _PARAM.match(text)
    if m and m.group(1) == "auth" and m.group(2):
        return auth
    if m and not m.group(2) and m.group(1) in params:
        return params[m.group(1)]
    return _UNKNOWN


def _comparable(v: Any) -> Any:
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        return v
    if isinstance(v, RecordID):
        # By parts, never by text: SurrealDB prints `user:5abc` where the SDK's text would
        # escape the key, and a string that reads like a record id is not one (SurrealDB:
        # 'user:a' = user:a is false).
        return (_RECORD, v.table_name, type(v.id).__name__, v.id)
    return _UNKNOWN


def where_filter(surql: str) -> Callable[[dict[str, Any], dict[str, Any], Any], bool | None]:
    """A test of a new record against the view's WHERE: True or False when the WHERE is a
    conjunction (`AND`/`&&`) of `field <op> value` comparisons (op `=`, `!=`, `<`, `<=`, `>`,
    `>=`; value a number, a quoted string, true/false/NONE, a `$param` of the view or
    `$auth.id`, the signed-in record id the test is given), else None (the client cannot
    tell; the database's answer decides). Anything richer (OR, functions, paths, subqueries) would need SurrealDB's own evaluator."""
    where = where_text(surql)
    if where is None:
        return lambda _row, _params, _auth: True
    parts: list[str] = []
    cut = 0
    for s, e, word in _top_level_words(where):
        if word == "AND":
            parts.append(where[cut:s])
            cut = e
    parts.append(where[cut:])
    terms: list[tuple[str, str, str]] = []
    for part in (p for chunk in parts for p in chunk.split("&&")):
        m = _CMP.match(part)
        if m is None or any(w[2] in ("OR", "AND", "NOT", "IN", "CONTAINS", "IS")
                            for w in _top_level_words(m.group(3))):
            return lambda _row, _params, _auth: None
        terms.append((m.group(1), m.group(2), m.group(3)))

    def test(row: dict[str, Any], params: dict[str, Any], auth: Any) -> bool | None:
        for name, op, raw in terms:
            want = _literal(raw, params, auth)
            if want is _UNKNOWN:
                return None
            got, want = _comparable(row.get(name)), _comparable(want)
            if got is _UNKNOWN or want is _UNKNOWN:
                return None
            if op in ("=", "=="):
                ok = got == want
            elif op == "!=":
                ok = got != want
            elif type(got) is not type(want) or got is None or isinstance(got, (bool, tuple)):
                return None  # an order across types is SurrealDB's to decide
            else:
                ok = {"<": got < want, "<=": got <= want, ">": got > want,
                      ">=": got >= want}[op]
            if not ok:
                return False
        return True

    return test


# -- optimistic rows: the view's ORDER BY and window, where the client can apply them -----

_FIELD = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)(?:\s+(ASC|DESC|ASCENDING|DESCENDING))?\s*$",
                    re.I)


class Window:
    """The view's top-level ORDER BY (plain fields, ASC/DESC) and START/LIMIT, to place an
    optimistic row among the server's rows (which are the window, in order) the way SurrealDB
    would, or to say it cannot tell (then the database's answer decides)."""

    def __init__(self, surql: str) -> None:
        text = surql.strip().rstrip(";").strip()
        words = _top_level_words(text)
        self.order: list[tuple[str, bool]] | None = []  # (field, descending); None: not plain
        self.limit_text: str | None = None
        self.start_text: str | None = None
        clauses = [w for w in words if w[2] in _CLAUSES]
        for k, (_s, e, word) in enumerate(clauses):
            end = clauses[k + 1][0] if k + 1 < len(clauses) else len(text)
            body = text[e:end].strip()
            if word == "ORDER":
                self.order = _order_terms(body)
            elif word == "LIMIT":
                self.limit_text = re.sub(r"^BY\s+", "", body, flags=re.I)
            elif word == "START":
                self.start_text = re.sub(r"^AT\s+", "", body, flags=re.I)

    def limit(self, params: dict[str, Any]) -> int | None:
        """The LIMIT when there is one the client can read, else None."""
        n = _count(self.limit_text, params)
        return n if isinstance(n, int) else None

    def place(self, rows: list[Any], row: dict[str, Any], params: dict[str, Any]) -> int | None:
        """Where `row` goes among the window's `rows`: an index, -1 when it falls after a full
        window, None when the client cannot tell (order across types, a missing field, a tie,
        an ORDER BY that is not plain fields, a START or LIMIT it cannot read, a row ahead of
        a window that does not start at the first row)."""
        if self.order is None:
            return None
        if not self.order:
            # no ORDER BY: SurrealDB reads the table in id order; where a new id lands among
            # the others is the database's to say
            return None if self.limit_text or self.start_text else len(rows)
        limit = _count(self.limit_text, params)
        start = _count(self.start_text, params) if self.start_text else 0
        if limit is _UNKNOWN or start is _UNKNOWN:
            return None
        idx = len(rows)
        for i, other in enumerate(rows):
            before = _sorts_before(row, other, self.order)
            if before is None:
                return None
            if before:
                idx = i
                break
        if idx == 0 and start:
            return None  # ahead of the window's first row: in it or before it, by rows not here
        if limit is not None and idx >= limit:
            return -1
        return idx


def _order_terms(body: str) -> list[tuple[str, bool]] | None:
    body = re.sub(r"^BY\s+", "", body, flags=re.I)
    terms: list[tuple[str, bool]] = []
    for part in body.split(","):
        m = _FIELD.match(part)
        if m is None:
            return None  # COLLATE, NUMERIC, rand(), paths: SurrealDB's own rules
        terms.append((m.group(1), (m.group(2) or "").upper().startswith("DESC")))
    return terms


def _count(text: str | None, params: dict[str, Any]) -> Any:
    if text is None:
        return None
    if re.fullmatch(r"\d+", text):
        return int(text)
    m = _PARAM.match(text)
    if m and not m.group(2) and isinstance(params.get(m.group(1)), int) \
            and not isinstance(params.get(m.group(1)), bool):
        return params[m.group(1)]
    return _UNKNOWN


def _order_value(v: Any) -> tuple[int, Any] | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        return (0, float(v))
    if isinstance(v, str):
        return (1, v)
    return None


def _sorts_before(row: dict[str, Any], other: dict[str, Any],
                  order: list[tuple[str, bool]]) -> bool | None:
    """True when `row` comes strictly before `other`, False when after, None when the client
    cannot tell (a tie on every term is ordered by SurrealDB's own rules)."""
    for name, desc in order:
        a, b = _order_value(row.get(name)), _order_value(other.get(name))
        if a is None or b is None or a[0] != b[0]:
            return None  # a missing field (NONE) or two types: SurrealDB's order decides
        if a[1] != b[1]:
            return (a[1] > b[1]) if desc else (a[1] < b[1])
    return None
