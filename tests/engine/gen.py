"""Seeded random generators: schemaless rows, queries of the whole view language, write sequences.

Every generator takes a ``random.Random`` so a seed reproduces a case exactly. Pools are small on
purpose so equalities, ties, links and boundary moves actually happen.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from surrealdb import Duration, RecordID

from tests.engine.codec import Case, Event, View

USER_IDS = [RecordID("user", i) for i in range(1, 6)] + [
    RecordID("user", "alice"),
    RecordID("user", "a-b"),
]
# mixed id kinds: the table scan order (ties, LIMIT without ORDER BY) follows the id key order
THREAD_IDS = [RecordID("thread", i) for i in range(1, 9)] + [RecordID("thread", "x")]
COMMENT_IDS = [RecordID("comment", i) for i in range(1, 15)] + [RecordID("comment", "z9")]
# edges user -> thread (a relation table: `in` and `out` are set once, at RELATE)
LIKE_IDS = [RecordID("likes", i) for i in range(1, 9)] + [RecordID("likes", "q")]
IDS = {"user": USER_IDS, "thread": THREAD_IDS, "comment": COMMENT_IDS, "likes": LIKE_IDS}
# Links to records that never exist: a view must treat them like a missing row.
DANGLING = {"user": RecordID("user", 99), "thread": RecordID("thread", 99)}

STRINGS = ["alpha", "Alpha", "ALPHA", "beta", "b", "", "é", "e", "Zeta", "zeta", "10", "9",
           "a b", "Ω", "ß", "ab"]
NUMBERS: list[Any] = [-3, -1, 0, 1, 1.0, 2, 2.5, 3, 10, -0.5, 7, Decimal("2.5"), Decimal("1")]
DATES = [
    datetime(2023, 12, 31, 23, 59, 59, tzinfo=UTC),
    datetime(2024, 1, 1, tzinfo=UTC),
    datetime(2024, 1, 1, 0, 0, 0, 500000, tzinfo=UTC),
    datetime(2024, 6, 15, 12, 30, tzinfo=UTC),
]
TAGS = ["a", "b", "c", "A"]
DURATIONS = [Duration(1_000_000_000), Duration(90_000_000_000), Duration(3_600_000_000_000)]
UUIDS = [uuid.UUID(int=1), uuid.UUID(int=2 << 100)]
STATUSES = ["open", "closed", "Open"]

# kind of each queryable field path, per table
FIELDS: dict[str, dict[str, str]] = {
    "user": {"name": "str", "age": "num", "active": "bool", "tags": "arr",
             "profile.city": "str", "profile.score": "num", "created_at": "date"},
    "thread": {"title": "str", "author": "link:user", "score": "num", "created_at": "date",
               "tags": "arr", "meta.pri": "num", "meta.flag": "bool", "status": "str",
               "items": "objarr"},
    "comment": {"thread": "link:thread", "author": "link:user", "body": "str",
                "created_at": "date", "votes": "num"},
    "likes": {"in": "link:user", "out": "link:thread", "weight": "num"},
}
EDGE_ENDS = ("in", "out")

NONE = object()  # generator-local marker: leave the key out of the row


# ---------------------------------------------------------------------------------- values

def mixed(r: random.Random, depth: int = 0) -> Any:
    """Any value kind, weighted toward scalars."""
    roll = r.random()
    if roll < 0.32:
        return r.choice(NUMBERS)
    if roll < 0.50:
        return r.choice(STRINGS)
    if roll < 0.58:
        return r.choice([True, False])
    if roll < 0.66:
        return None
    if roll < 0.76:
        return NONE
    if roll < 0.81:
        return r.choice(DATES)
    if roll < 0.84:
        return r.choice(DURATIONS + UUIDS)
    if roll < 0.92 and depth == 0:
        return [v for v in (mixed(r, 1) for _ in range(r.randint(0, 3))) if v is not NONE]
    if roll < 0.96 and depth == 0:
        if r.random() < 0.3:
            # an object holding a record id under `id` is a member wherever it shows up
            return {"id": r.choice(USER_IDS), "x": r.choice(NUMBERS)}
        return {"x": r.choice(NUMBERS)}
    return r.choice(USER_IDS + [DANGLING["user"]])


def typed(r: random.Random, kind: str) -> Any:
    """A value of the field's usual kind, sometimes something else (schemaless)."""
    if r.random() < 0.12:
        return mixed(r)
    if kind == "str":
        return r.choice(STRINGS)
    if kind == "num":
        return r.choice(NUMBERS)
    if kind == "bool":
        return r.choice([True, False])
    if kind == "date":
        return r.choice(DATES)
    if kind == "arr":
        return r.sample(TAGS, r.randint(0, 3))
    if kind == "objarr":
        # an array of objects: `items.x` maps over the elements
        return [{"x": r.choice(NUMBERS[:6])} if r.random() < 0.85 else {}
                for _ in range(r.randint(0, 3))]
    if kind == "numarr":
        return r.choice([[], [0], [1], [0, 1], [1, 0], [2, -1]])
    if kind.startswith("link:"):
        table = kind.split(":", 1)[1]
        if r.random() < 0.1:
            return DANGLING[table]
        if r.random() < 0.04:
            return r.sample(IDS[table], 2)  # an array of links
        return r.choice(IDS[table])
    raise ValueError(kind)


def make_row(r: random.Random, table: str, rid: RecordID) -> dict[str, Any]:
    """A random schemaless row; nested paths become nested objects."""
    row: dict[str, Any] = {"id": rid}
    if table == "likes":  # an edge: its ends are records (some never exist)
        row["in"] = r.choice(USER_IDS + [DANGLING["user"]])
        row["out"] = r.choice(THREAD_IDS + [DANGLING["thread"]])
    for path, kind in FIELDS[table].items():
        if table == "likes" and path in EDGE_ENDS:
            continue
        if r.random() < 0.1:
            continue  # NONE: the field is absent
        value = typed(r, kind)
        if value is NONE:
            continue
        head, _, sub = path.partition(".")
        if sub:
            obj = row.setdefault(head, {})
            if isinstance(obj, dict):
                obj[sub] = value
        else:
            row[head] = value
    return row


def mutate_row(r: random.Random, table: str, row: dict[str, Any]) -> dict[str, Any]:
    """The row with one or two fields changed or removed (small moves cross view boundaries)."""
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in row.items()}
    for _ in range(r.randint(1, 2)):
        path = r.choice([p for p in FIELDS[table] if table != "likes" or p not in EDGE_ENDS])
        head, _, sub = path.partition(".")
        value = typed(r, FIELDS[table][path]) if r.random() < 0.85 else NONE
        if sub:
            obj = out.get(head)
            if not isinstance(obj, dict):
                obj = {}
                out[head] = obj
            if value is NONE:
                obj.pop(sub, None)
            else:
                obj[sub] = value
        elif value is NONE:
            out.pop(head, None)
        else:
            out[head] = value
    return out


def make_rows(r: random.Random) -> dict[str, list[dict[str, Any]]]:
    """Initial contents: a random subset of each table's id pool."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for table, ids in IDS.items():
        keep = [rid for rid in ids if r.random() < 0.6]
        rows[table] = [make_row(r, table, rid) for rid in keep]
    return rows


# ---------------------------------------------------------------------------------- queries

def literal(value: Any) -> str:
    """SurrealQL literal text for a generated value."""
    if value is None:
        return "NULL"
    if value is NONE:
        return "NONE"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Decimal):
        return f"{value}dec"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, datetime):
        return "d'" + value.isoformat().replace("+00:00", "Z") + "'"
    if isinstance(value, RecordID):
        ident = value.id
        if isinstance(ident, int) or (isinstance(ident, str) and ident.isidentifier()):
            return f"{value.table_name}:{ident}"
        return f"{value.table_name}:⟨{ident}⟩"
    if isinstance(value, Duration):
        return f"{value.elapsed // 1_000_000_000}s"
    if isinstance(value, uuid.UUID):
        return f"u'{value}'"
    if isinstance(value, list):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {literal(v)}" for k, v in value.items()) + "}"
    raise ValueError(value)


def _has_duration_or_uuid(value: Any) -> bool:
    if isinstance(value, (Duration, uuid.UUID)):
        return True
    if isinstance(value, list):
        return any(_has_duration_or_uuid(v) for v in value)
    if isinstance(value, dict):
        return any(_has_duration_or_uuid(v) for v in value.values())
    return False


@dataclass
class QueryBuilder:
    """Builds one random view; collects the parameters it binds."""

    r: random.Random
    params: dict[str, Any]
    param_rate: float = 0.2  # how often an operand is a bound parameter instead of a literal
    param_kinds: dict[str, str] = field(default_factory=dict)
    expressions: bool = True  # functions, arithmetic and indexing in WHERE and projections
    exprs: list[str] = field(default_factory=list)  # aliases of projection expressions
    no_links: bool = False  # conditions of a semi-join's inner query read their own row
    # every condition never raises, the top-level WHERE too: for a judge that compares with
    # SurrealDB's whole answer, which one raising row fails (the engine's runner replays those)
    safe_where: bool = False
    # graph traversals: only for a judge whose `likes` rows are SurrealDB graph edges (RELATE)
    graph: bool = True

    def value_for(self, kind: str) -> Any:
        v = typed(self.r, kind)
        while _has_duration_or_uuid(v):
            # duration and uuid literals are not in the view language (they stay in row data)
            v = typed(self.r, kind)
        return None if v is NONE else v

    def operand(self, kind: str) -> str:
        """A literal or a bound parameter."""
        value = self.value_for(kind)
        if self.r.random() < self.param_rate:
            name = f"p{len(self.params)}"
            self.params[name] = value
            self.param_kinds[name] = kind
            return f"${name}"
        return literal(value)

    def condition(self, table: str, depth: int = 0, safe: bool = False) -> str:
        """A WHERE condition; ``safe``: one that never raises (SurrealDB fails the whole query
        where a function gets the wrong type; only a top-level WHERE may raise, see
        runner.Replay)."""
        safe = safe or self.safe_where
        r = self.r
        roll = r.random()
        if depth < 2 and roll < 0.12:
            op = r.choice([" AND ", " OR "])
            return (f"({self.condition(table, depth + 1, safe)}{op}"
                    f"{self.condition(table, depth + 1, safe)})")
        if depth < 2 and roll < 0.17:
            neg = r.choice(["!", "NOT "])
            return f"{neg}({self.condition(table, depth + 1, safe)})"
        if depth < 2 and roll < 0.25:
            return (f"{self.condition(table, depth + 1, safe)} AND "
                    f"{self.condition(table, depth + 1, safe)}")
        if self.expressions and roll < 0.42:
            return self.expr_condition(table, safe)
        if self.expressions and not self.no_links and roll < 0.47:
            return self.semi_condition(table)
        if roll < 0.3:
            ids = [literal(rid) for rid in r.sample(IDS[table], 3)]
            return r.choice([f"id = {ids[0]}", f"id != {ids[0]}", f"id IN [{', '.join(ids)}]",
                             f"id > {ids[1]}", f"id <= {ids[2]}"])
        path, kind = r.choice(list(FIELDS[table].items()))
        if kind == "objarr" and r.random() < 0.6:
            path, kind = "items.x", "numarr"
        if kind.startswith("link:") and not self.no_links and r.random() < 0.45:
            target = kind.split(":", 1)[1]
            if target == "user" and r.random() < 0.4:
                self.params["auth"] = {"id": r.choice(USER_IDS)}
                return f"{path} = $auth.id"
            # a record-link path: a change to the linked row moves this row in or out
            sub, sub_kind = r.choice(list(FIELDS[target].items()))
            if sub_kind.startswith("link:"):
                sub2, sub2_kind = r.choice(
                    [(p, k) for p, k in FIELDS[sub_kind.split(":", 1)[1]].items()
                     if not k.startswith("link:")])
                return self.compare(f"{path}.{sub}.{sub2}", sub2_kind)
            return self.compare(f"{path}.{sub}", sub_kind)
        return self.compare(path, kind)

    def semi_condition(self, table: str) -> str:
        """``x IN (SELECT VALUE v FROM t WHERE ...)`` and its other spellings."""
        r = self.r
        forms = {
            "thread": [("author", "user", "id"), ("id", "comment", "thread"),
                       ("author", "comment", "author")],
            "comment": [("thread", "thread", "id"), ("author", "thread", "author"),
                        ("author", "user", "id")],
            "user": [("id", "thread", "author"), ("id", "comment", "author")],
        }[table]
        x, inner, value = r.choice(forms)
        sub = f"SELECT VALUE {value} FROM {inner}"
        if r.random() < 0.8:
            self.no_links = True
            try:
                sub += " WHERE " + self.condition(inner, depth=1, safe=True)
            finally:
                self.no_links = False
        op = r.choice(["IN", "INSIDE", "NOT IN", "NOTINSIDE", "CONTAINS", "CONTAINSNOT"])
        if op.startswith("CONTAINS"):
            return f"({sub}) {op} {x}"
        return f"{x} {op} ({sub})"

    def expr_condition(self, table: str, safe: bool) -> str:
        """A condition over functions, arithmetic and indexing of a field."""
        r = self.r
        if self.graph and table in GRAPH_WHERE and not self.no_links and r.random() < 0.25:
            return r.choice(GRAPH_WHERE[table])
        path, kind = r.choice([(p, k) for p, k in FIELDS[table].items()
                               if not k.startswith("link:") and k != "date"])
        if kind == "objarr":
            return r.choice([f"items[0].x = {self.operand('num')}", "items[$].x > 0",
                             "array::len(items) > 1" if not safe else "count(items) > 1"])
        guard = {"str": "type::is_string", "num": "type::is_number", "bool": "type::is_bool",
                 "arr": "type::is_array"}[kind]
        forms: list[str]
        if kind == "str":
            forms = [f"string::lowercase({path}) = {self.operand('str')}",
                     f"string::len({path}) > {r.randint(0, 3)}",
                     f"string::starts_with({path}, {literal(r.choice(['a', 'A', 'b', '']))})",
                     f"string::contains({path}, "
                     f"{literal(r.choice(STRINGS)) if safe else self.operand('str')})",
                     f"string::uppercase({path}) IN ['ALPHA', 'B', 'ZETA']"]
            safe_forms = [f"string::concat({path}, '!') = {literal(r.choice(STRINGS) + '!')}",
                          f"({path} ?? 'b') = 'b'", f"({path} ?: 'x') = 'x'"]
        elif kind == "num":
            forms = [f"{path} + 1 > {self.operand('num')}", f"{path} * 2 <= {r.randint(-2, 6)}",
                     f"math::abs({path}) >= {self.operand('num')}", f"-{path} < 0",
                     f"{path} % 2 = 1", f"math::floor({path}) = 2",
                     f"{path} - 1 IN [0, 1, 1.5]", f"math::round({path}) != 3"]
            safe_forms = [f"({path} ?? 0) > {self.operand('num')}",
                          f"{path} / 2 > 1", f"({path} ?: 7) = 7"]
        elif kind == "bool":
            forms = [f"{path} + 0 = 1"]
            safe_forms = [f"!{path} = true", f"({path} ?? false) = true"]
        else:
            forms = [f"array::len({path}) > {r.randint(0, 2)}",
                     f"array::first({path}) = {literal(r.choice(TAGS))}",
                     f"array::distinct({path}) CONTAINS {literal(r.choice(TAGS))}",
                     f"array::len(array::union({path}, ['a'])) = 2"]
            safe_forms = [f"{path}[0] = {literal(r.choice(TAGS))}",
                          f"{path}[$] = {literal(r.choice(TAGS))}", f"count({path}) > 1",
                          f"{path}[1] IS NONE"]
        if safe:
            if r.random() < 0.5 or kind == "bool":  # `+` raises on every bool: no guard helps
                return r.choice(safe_forms)
            return f"({guard}({path}) AND {r.choice(forms)})"
        return r.choice(forms + safe_forms)

    def projection_expr(self, table: str) -> str:
        """A projection item that is an expression (never raising: SurrealDB would fail the
        whole query; the engine's rule there, a NONE value, has a targeted test)."""
        r = self.r
        name = f"x{len(self.exprs)}"
        if self.graph and table in GRAPH and r.random() < 0.3:
            self.exprs.append(name)
            return f"{r.choice(GRAPH[table])} AS {name}"
        path, kind = r.choice([(p, k) for p, k in FIELDS[table].items()
                               if not k.startswith("link:") and "." not in p])
        self.exprs.append(name)
        if kind == "str":
            e = r.choice([f"type::is_string({path}) AND string::uppercase({path})",
                          f"string::concat({path}, '/')", f"{path} ?? 'none'",
                          f"type::is_string({path}) AND string::len({path}) > 2"])
        elif kind == "num":
            e = r.choice([f"type::is_number({path}) AND {path} * 2",
                          f"type::is_number({path}) AND math::abs({path})",
                          f"{path} > 2", f"{path} ?: 0"])
        elif kind in ("arr", "objarr"):
            e = r.choice([f"{path}[0]", f"count({path})",
                          f"type::is_array({path}) AND array::len({path})",
                          f"type::is_array({path}) AND array::reverse({path})"])
            if e == f"{path}[0]" and r.random() < 0.3:
                self.exprs.pop()
                return e  # unaliased: SurrealDB names it by the field
        elif kind == "date":
            e = f"type::is_datetime({path})"
        else:
            e = f"string::concat({path})"
        if r.random() < 0.15 and _single_call(e):
            self.exprs.pop()
            return e  # a call unaliased: named by its function
        return f"{e} AS {name}"

    def compare(self, path: str, kind: str) -> str:
        r = self.r
        roll = r.random()
        if roll < 0.45:
            op = r.choice(["=", "==", "!=", "<", "<=", ">", ">="])
            other = kind if r.random() < 0.85 else r.choice(["str", "num", "bool", "date"])
            return f"{path} {op} {self.operand(other)}"
        if roll < 0.55:
            return r.choice([f"{path} IS NONE", f"{path} = NONE", f"{path} != NONE",
                             f"{path} = NULL"])
        if roll < 0.75:
            op = r.choice(["IN", "INSIDE", "NOT IN"])
            items = [self.value_for(kind) for _ in range(r.randint(0, 3))]
            return f"{path} {op} {literal(items)}"
        if kind in ("arr", "numarr"):
            pool = TAGS if kind == "arr" else NUMBERS[:6]
            op = r.choice(["CONTAINS", "CONTAINSNOT", "CONTAINSANY", "CONTAINSALL"])
            if op in ("CONTAINS", "CONTAINSNOT"):
                return f"{path} {op} {literal(r.choice(pool))}"
            return f"{path} {op} {literal(r.sample(pool, r.randint(1, 3)))}"
        if kind == "str":
            op = r.choice(["CONTAINS", "CONTAINSNOT"])
            return f"{path} {op} {literal(r.choice(['a', 'A', 'e', 'ph', '']))}"
        op = r.choice(["=", "<", ">="])
        return f"{path} {op} {self.operand(kind)}"

    def select(self, table: str, depth: int = 0, correlated: str | None = None,
               single: bool = False) -> str:
        """A SELECT over ``table``; ``correlated`` is the subquery's $parent condition."""
        r = self.r
        fields = list(FIELDS[table])
        if self.expressions and not single and r.random() < (0.08 if depth == 0 else 0.04):
            return self.value_select(table, depth, correlated)
        star = r.random() < 0.5
        items: list[str] = ["*"] if star else ["id"]
        plain: list[str] = []  # projected field paths (ORDER BY must use these in 3.x)
        if not star:
            plain = r.sample(fields, r.randint(0, 3))
            items += plain
        if self.expressions and r.random() < 0.3:
            before = len(self.exprs)
            items.append(self.projection_expr(table))
            plain += self.exprs[before:]
        links = [p for p, k in FIELDS[table].items() if k.startswith("link:")]
        if depth == 0 or r.random() < 0.3:
            for link in links:
                if r.random() < 0.2:
                    target = FIELDS[table][link].split(":", 1)[1]
                    sub = r.choice([p for p, k in FIELDS[target].items() if "." not in p])
                    items.append(f"{link}.{sub} AS {link}_{sub}")
                elif r.random() < 0.07:
                    items.append(f"{link}.* AS {link}_row")
        if depth < 2 and not single:
            items += self.subqueries(table, depth)
        fetch = ""
        if links and r.random() < 0.15:
            link = r.choice(links)
            if not star and link not in plain:
                items.append(link)
                plain.append(link)
            fetch = f" FETCH {link}"
        omit = ""
        if self.expressions and r.random() < 0.08:
            # OMIT: fields (or a nested field) left out of every row
            pool = [p for p in fields if p not in plain] if not star else fields
            if pool:
                omit = " OMIT " + ", ".join(r.sample(pool, min(len(pool), r.randint(1, 2))))
        text = f"SELECT {', '.join(items)}{omit} FROM {table}"
        conds: list[str] = []
        if correlated:
            conds.append(correlated)
        if r.random() < (0.75 if depth == 0 else 0.4):
            conds.append(self.condition(table, safe=depth > 0))
        if conds:
            text += " WHERE " + " AND ".join(conds)
        if single:
            return text + " LIMIT 1"
        arrays = [p for p, k in FIELDS[table].items() if k in ("arr", "objarr")
                  and (star or p in plain)]
        split = self.expressions and arrays and r.random() < 0.1
        if split:
            text += " SPLIT " + r.choice(arrays)
        keys = (fields + ["id"]) if star else (plain + ["id"])
        if r.random() < 0.6:
            chosen = r.sample(keys, r.randint(1, min(3, len(keys))))
            text += " ORDER BY " + ", ".join(
                k + r.choice(["", " ASC", " DESC", " DESC"]) for k in chosen)
        if split:
            pass  # no window over split rows (refused: a window could hold part of a row)
        elif r.random() < 0.45:
            text += f" LIMIT {r.randint(1, 6)}"
            if r.random() < 0.3:
                text += f" START {r.randint(0, 3)}"
        elif r.random() < 0.05:
            text += f" START {r.randint(1, 3)}"
        return text + fetch

    def value_select(self, table: str, depth: int, correlated: str | None) -> str:
        """``SELECT VALUE e FROM table ...``: each row shows one value (its members: the row
        itself and the records inside the value)."""
        r = self.r
        path, kind = r.choice(list(FIELDS[table].items()))
        e = r.choice([path, "id", f"{path} ?? 'none'", "{ k: id, v: " + path + " }"])
        if kind.startswith("link:") and r.random() < 0.4:
            e = f"{path}.*"
        text = f"SELECT VALUE {e} FROM {table}"
        conds = [correlated] if correlated else []
        if r.random() < 0.6:
            conds.append(self.condition(table, safe=depth > 0))
        if conds:
            text += " WHERE " + " AND ".join(conds)
        if r.random() < 0.6:
            keys = r.sample(list(FIELDS[table]) + ["id"], r.randint(1, 2))
            text += " ORDER BY " + ", ".join(k + r.choice(["", " DESC"]) for k in keys)
        if r.random() < 0.4:
            text += f" LIMIT {r.randint(1, 4)}"
        return text

    def subqueries(self, table: str, depth: int) -> list[str]:
        r = self.r
        out: list[str] = []
        if table == "thread" and r.random() < 0.35:
            out.append(f"({self.select('comment', depth + 1, 'thread = $parent.id')}) AS comments")
        if self.expressions and table == "thread" and r.random() < 0.1:
            sub = self.value_select("comment", depth + 1, "thread = $parent.id")
            out.append(f"({sub}){'[0]' if r.random() < 0.3 else ''} AS vals")
        if self.expressions and table in ("thread", "user") and r.random() < 0.08:
            child, link = ("comment", "thread") if table == "thread" else ("thread", "author")
            sub = group_select(self, child, f"{link} = $parent.id")
            index = "[0]" if " GROUP ALL" in sub and r.random() < 0.6 else ""
            out.append(f"({sub}){index} AS stats")
        if table == "thread" and r.random() < 0.08:
            # correlated on a non-id field of the parent: the parent's own change moves it
            sub = self.select("comment", depth + 1, "author = $parent.author")
            out.append(f"({sub}) AS same_author")
        if table == "thread" and r.random() < 0.05:
            sub = self.select("thread", depth + 1, "score > $parent.score")
            out.append(f"({sub}) AS higher")
        if table in ("thread", "comment") and r.random() < 0.25:
            sub = self.select("user", depth + 1, "id = $parent.author", single=True)
            out.append(f"({sub})[0] AS author_row")
        if table == "comment" and r.random() < 0.2:
            sub = self.select("thread", depth + 1, "id = $parent.thread", single=True)
            out.append(f"({sub})[0] AS thread_row")
        if table == "user" and r.random() < 0.3:
            out.append(f"({self.select('thread', depth + 1, 'author = $parent.id')}) AS threads")
        return out


# graph traversals over `likes` (user -> thread), as projection items and conditions
GRAPH = {
    "user": ["->likes->thread", "count(->likes)", "->likes->thread.title", "->likes.weight",
             "->likes->thread.*", "->likes", "->likes->thread<-likes<-user",
             "array::len(->likes->?)"],
    "thread": ["<-likes<-user", "count(<-likes)", "<-likes<-user.name", "<-likes.*",
               "<-likes<-user->likes->thread"],
}
GRAPH_WHERE = {
    "user": ["->likes->thread CONTAINS thread:1", "count(->likes) > 1",
             "array::len(->likes) = 0", "->likes.weight CONTAINS 2"],
    "thread": ["count(<-likes) >= 1", "<-likes<-user CONTAINS user:1",
               "<-likes<-user.active CONTAINS true"],
}


def _single_call(e: str) -> bool:
    """``name(...)`` and nothing around it."""
    head, sep, _ = e.partition("(")
    if not sep or " " in head or not e.endswith(")"):
        return False
    depth = 0
    for i, c in enumerate(e):
        depth += c == "("
        depth -= c == ")"
        if depth == 0 and i < len(e) - 1 and c == ")":
            return False
    return True


# grouped views: keys and aggregate arguments per table
GROUP_KEYS = {"user": ["active", "profile.city", "tags", "age"],
              "thread": ["status", "author", "meta.flag", "tags", "score"],
              "comment": ["thread", "author", "votes"]}
AGG_ARGS = {"user": ["age", "profile.score", "name"], "thread": ["score", "meta.pri", "title"],
            "comment": ["votes", "body"]}


def group_select(b: QueryBuilder, table: str, correlated: str | None = None) -> str:
    """``SELECT keys, aggregates FROM table [WHERE] GROUP BY keys | GROUP ALL [ORDER BY]``;
    ``correlated``: the $parent condition of a subquery (whose conditions never raise)."""
    r = b.r
    keys: list[str] = []
    items: list[str] = []
    if r.random() < 0.75:
        for path in r.sample(GROUP_KEYS[table], r.randint(1, 2)):
            if r.random() < 0.2 and "." not in path:
                name = f"k{len(keys)}"
                items.append(r.choice([f"type::is_string({path}) AND string::len({path})",
                                       f"{path} ?? 'none'", f"type::is_number({path})"])
                             + f" AS {name}")
                keys.append(name)
            else:
                items.append(path)
                keys.append(path)
    outs: list[str] = []
    for n in range(r.randint(1, 3)):
        arg = r.choice(AGG_ARGS[table])
        fn = r.choice(["count()", f"count({arg})", f"math::sum({arg})", f"math::mean({arg})",
                       f"math::min({arg})", f"math::max({arg})", f"count({arg} > 2)"])
        if r.random() < 0.15:
            fn = r.choice([f"{fn} + 1", f"{fn} * 2", f"{fn} > 1"])
        if (r.random() < 0.1 and fn.endswith(")") and " " not in fn
                and not any("(" in it and " AS " not in it for it in items)):
            items.append(fn)  # unaliased: named by its function
        else:
            items.append(f"{fn} AS a{n}")
            outs.append(f"a{n}")
    text = f"SELECT {', '.join(items)} FROM {table}"
    conds = [correlated] if correlated else []
    if r.random() < 0.6:
        conds.append(b.condition(table, safe=correlated is not None))
    if conds:
        text += " WHERE " + " AND ".join(conds)
    text += " GROUP BY " + ", ".join(keys) if keys else " GROUP ALL"
    if keys + outs and r.random() < 0.4:
        chosen = r.sample(keys + outs, r.randint(1, min(2, len(keys + outs))))
        text += " ORDER BY " + ", ".join(k + r.choice(["", " DESC"]) for k in chosen)
    return text


def make_view(r: random.Random) -> View:
    """One random view over a random table."""
    builder = QueryBuilder(r, {})
    table = r.choice(["user", "thread", "thread", "comment"])
    if r.random() < 0.1:
        return View(group_select(builder, table), builder.params)
    return View(builder.select(table), builder.params)


# ---------------------------------------------------------------------------------- writes

def make_writes(r: random.Random, rows: dict[str, list[dict[str, Any]]], n: int) -> list[Event]:
    """A random CREATE/UPDATE/DELETE sequence consistent with the current contents."""
    state = {t: {row["id"].id: row for row in rs} for t, rs in rows.items()}
    for t in IDS:
        state.setdefault(t, {})  # a case may start without rows of a table (edges)
    events: list[Event] = []
    for _ in range(n):
        table = r.choice(["user", "thread", "thread", "comment", "comment", "likes"])
        rid = r.choice(IDS[table])
        current = state[table].get(rid.id)
        if current is None:
            row = make_row(r, table, rid)
            events.append((table, "CREATE", rid, row))
            state[table][rid.id] = row
        elif r.random() < 0.25:
            # SurrealDB deletes the edges of a deleted record in the same transaction; its
            # change feed carries their deletes too (here first, so that every state the
            # runner checks is one SurrealDB can be in)
            for eid, edge in list(state["likes"].items()):
                if rid in (edge["in"], edge["out"]) and table != "likes":
                    events.append(("likes", "DELETE", edge["id"], None))
                    del state["likes"][eid]
            events.append((table, "DELETE", rid, None))
            del state[table][rid.id]
        else:
            row = mutate_row(r, table, current) if r.random() < 0.7 else make_row(r, table, rid)
            if table == "likes":
                row.update({end: current[end] for end in EDGE_ENDS})  # an edge keeps its ends
            events.append((table, "UPDATE", rid, row))
            state[table][rid.id] = row
    return events


def write_row(r: random.Random, table: str, live: dict[Any, dict[str, Any]], i: Any,
              make: Any, p_delete: float) -> Event:
    """One random write to row ``i`` of a table without edges: a DELETE with ``p_delete``
    when the row exists, else an UPDATE (or a CREATE) of ``make(i)``; ``live`` (id -> row)
    follows it."""
    rid = RecordID(table, i)
    if p_delete and i in live and r.random() < p_delete:
        del live[i]
        return (table, "DELETE", rid, None)
    row = make(i)
    op = "UPDATE" if i in live else "CREATE"
    live[i] = row
    return (table, op, rid, row)


def make_family_case(seed: int, views: int = 6, writes: int = 30) -> Case:
    """Many views of ONE shape with different parameter values (the engine shares circuits
    between them and dispatches changes by parameter value: that path must be exact too)."""
    r = random.Random(seed)
    rows = make_rows(r)
    builder = QueryBuilder(r, {}, param_rate=1.0)
    while True:
        builder.params.clear()
        builder.param_kinds.clear()
        table = r.choice(["user", "thread", "thread", "comment"])
        if r.random() < 0.1:
            surql = group_select(builder, table)
        else:
            surql = builder.select(table)
        if builder.params:
            break
    family = []
    for _ in range(views):
        params = {name: builder.value_for(kind) for name, kind in builder.param_kinds.items()}
        if "auth" in builder.params:
            params["auth"] = {"id": r.choice(USER_IDS)}
        family.append(View(surql, params))
    return Case(rows=rows, views=family, writes=make_writes(r, rows, writes),
                note=f"family seed {seed}")


def make_case(seed: int, views: int = 5, writes: int = 25) -> Case:
    """The whole differential case for one seed."""
    r = random.Random(seed)
    rows = make_rows(r)
    return Case(rows=rows, views=[make_view(r) for _ in range(views)],
                writes=make_writes(r, rows, writes), note=f"seed {seed}")


def parametrised_case(surql: str, r: random.Random, note: str, views: int = 3,
                      writes: int = 40) -> Case:
    """`views` views of `surql` (random `$c`, `$a` and, when it names one, `$s`) over random
    rows, then `writes` random writes: the random-write differential case of a view shape."""
    rows = make_rows(r)
    made = []
    for _ in range(views):
        params: dict[str, Any] = {"c": r.choice([-100, *NUMBERS]), "a": r.choice(NUMBERS)}
        if "$s" in surql:
            params["s"] = r.sample(STATUSES, 2)
        made.append(View(surql, params))
    return Case(rows=rows, views=made, writes=make_writes(r, rows, writes), note=note,
                check_updated=True)


def linked_rows_and_writes(r: random.Random, thread: Any, comment: Any, comments: int,
                           writes: int = 40) -> tuple[dict[str, list[dict[str, Any]]],
                                                     list[Event]]:
    """Rows thread:0-5 and comment:0-(comments - 1) made by `thread(i)` / `comment(i)`, then
    `writes` random writes: creates of ids up to 7 / comments + 2, updates, deletes (15% of
    the writes to an existing row), so links may point at rows that come and go."""
    rows = {"thread": [thread(i) for i in range(6)],
            "comment": [comment(i) for i in range(comments)]}
    present = {("thread", i) for i in range(6)} | {("comment", i) for i in range(comments)}
    out: list[Event] = []
    for _ in range(writes):
        table = "thread" if r.random() < 0.5 else "comment"
        i = r.randint(0, 7 if table == "thread" else comments + 2)
        key = (table, i)
        if key in present and r.random() < 0.15:
            out.append((table, "DELETE", RecordID(table, i), None))
            present.discard(key)
            continue
        row = thread(i) if table == "thread" else comment(i)
        out.append((table, "UPDATE" if key in present else "CREATE", RecordID(table, i), row))
        present.add(key)
    return rows, out
