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
IDS = {"user": USER_IDS, "thread": THREAD_IDS, "comment": COMMENT_IDS}
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
}

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
    for path, kind in FIELDS[table].items():
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
        path = r.choice(list(FIELDS[table]))
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

    def condition(self, table: str, depth: int = 0) -> str:
        r = self.r
        roll = r.random()
        if depth < 2 and roll < 0.12:
            op = r.choice([" AND ", " OR "])
            return f"({self.condition(table, depth + 1)}{op}{self.condition(table, depth + 1)})"
        if depth < 2 and roll < 0.17:
            neg = r.choice(["!", "NOT "])
            return f"{neg}({self.condition(table, depth + 1)})"
        if depth < 2 and roll < 0.25:
            return f"{self.condition(table, depth + 1)} AND {self.condition(table, depth + 1)}"
        if roll < 0.3:
            ids = [literal(rid) for rid in r.sample(IDS[table], 3)]
            return r.choice([f"id = {ids[0]}", f"id != {ids[0]}", f"id IN [{', '.join(ids)}]",
                             f"id > {ids[1]}", f"id <= {ids[2]}"])
        path, kind = r.choice(list(FIELDS[table].items()))
        if kind == "objarr" and r.random() < 0.6:
            path, kind = "items.x", "numarr"
        if kind.startswith("link:") and r.random() < 0.45:
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
        star = r.random() < 0.5
        items: list[str] = ["*"] if star else ["id"]
        plain: list[str] = []  # projected field paths (ORDER BY must use these in 3.x)
        if not star:
            plain = r.sample(fields, r.randint(0, 3))
            items += plain
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
        text = f"SELECT {', '.join(items)} FROM {table}"
        conds: list[str] = []
        if correlated:
            conds.append(correlated)
        if r.random() < (0.75 if depth == 0 else 0.4):
            conds.append(self.condition(table))
        if conds:
            text += " WHERE " + " AND ".join(conds)
        if single:
            return text + " LIMIT 1"
        keys = (fields + ["id"]) if star else (plain + ["id"])
        if r.random() < 0.6:
            chosen = r.sample(keys, r.randint(1, min(3, len(keys))))
            text += " ORDER BY " + ", ".join(
                k + r.choice(["", " ASC", " DESC", " DESC"]) for k in chosen)
        if r.random() < 0.45:
            text += f" LIMIT {r.randint(1, 6)}"
            if r.random() < 0.3:
                text += f" START {r.randint(0, 3)}"
        elif r.random() < 0.05:
            text += f" START {r.randint(1, 3)}"
        return text + fetch

    def subqueries(self, table: str, depth: int) -> list[str]:
        r = self.r
        out: list[str] = []
        if table == "thread" and r.random() < 0.35:
            out.append(f"({self.select('comment', depth + 1, 'thread = $parent.id')}) AS comments")
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


def make_view(r: random.Random) -> View:
    """One random view over a random table."""
    builder = QueryBuilder(r, {})
    table = r.choice(["user", "thread", "thread", "comment"])
    return View(builder.select(table), builder.params)


# ---------------------------------------------------------------------------------- writes

def make_writes(r: random.Random, rows: dict[str, list[dict[str, Any]]], n: int) -> list[Event]:
    """A random CREATE/UPDATE/DELETE sequence consistent with the current contents."""
    state = {t: {row["id"].id: row for row in rs} for t, rs in rows.items()}
    events: list[Event] = []
    for _ in range(n):
        table = r.choice(["user", "thread", "thread", "comment", "comment"])
        rid = r.choice(IDS[table])
        current = state[table].get(rid.id)
        if current is None:
            row = make_row(r, table, rid)
            events.append((table, "CREATE", rid, row))
            state[table][rid.id] = row
        elif r.random() < 0.25:
            events.append((table, "DELETE", rid, None))
            del state[table][rid.id]
        else:
            row = mutate_row(r, table, current) if r.random() < 0.7 else make_row(r, table, rid)
            events.append((table, "UPDATE", rid, row))
            state[table][rid.id] = row
    return events


def make_family_case(seed: int, views: int = 6, writes: int = 30) -> Case:
    """Many views of ONE shape with different parameter values (the engine shares circuits
    between them and dispatches changes by parameter value: that path must be exact too)."""
    r = random.Random(seed)
    rows = make_rows(r)
    builder = QueryBuilder(r, {}, param_rate=1.0)
    while True:
        builder.params.clear()
        builder.param_kinds.clear()
        surql = builder.select(r.choice(["user", "thread", "thread", "comment"]))
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
