"""JSON form of test cases (regression fixtures) that keeps SurrealDB's value types.

Plain JSON covers strings, bools, NULL (``null``), ints and floats (``1`` vs ``1.0`` stay
distinct). Other types are one-key objects: ``{"$rid": [table, id]}``, ``{"$dt": iso}``,
``{"$dec": text}``, ``{"$dur": nanoseconds}``, ``{"$uuid": text}``. NONE is an absent key.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from surrealdb import Duration, RecordID

Event = tuple[str, str, RecordID, dict[str, Any] | None]


@dataclass
class View:
    """One registered query."""

    surql: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class Case:
    """Initial rows, views and a write sequence; replayed against the engine and the judge."""

    rows: dict[str, list[dict[str, Any]]]
    views: list[View]
    writes: list[Event]
    note: str = ""
    check_updated: bool = False  # also hold delta.updated to the rule (runner.run_case)


def to_json(value: Any) -> Any:
    """Tagged JSON form of a SurrealDB value."""
    if isinstance(value, RecordID):
        return {"$rid": [value.table_name, to_json(value.id)]}
    if isinstance(value, datetime):
        return {"$dt": value.isoformat()}
    if isinstance(value, Decimal):
        return {"$dec": str(value)}
    if isinstance(value, Duration):
        return {"$dur": value.elapsed}
    if isinstance(value, uuid.UUID):
        return {"$uuid": str(value)}
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return value


def from_json(value: Any) -> Any:
    """Inverse of :func:`to_json`."""
    if isinstance(value, dict):
        if len(value) == 1:
            (key, inner), = value.items()
            if key == "$rid":
                return RecordID(inner[0], from_json(inner[1]))
            if key == "$dt":
                return datetime.fromisoformat(inner)
            if key == "$dec":
                return Decimal(inner)
            if key == "$dur":
                return Duration(inner)
            if key == "$uuid":
                return uuid.UUID(inner)
        return {k: from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_json(v) for v in value]
    return value


def case_to_json(case: Case) -> dict[str, Any]:
    """A JSON-ready dict for one case."""
    return {
        "note": case.note,
        "check_updated": case.check_updated,
        "rows": to_json(case.rows),
        "views": [{"surql": v.surql, "params": to_json(v.params)} for v in case.views],
        "writes": [[t, op, to_json(rid), to_json(rec)] for t, op, rid, rec in case.writes],
    }


def case_from_json(data: dict[str, Any]) -> Case:
    """Inverse of :func:`case_to_json`."""
    return Case(
        rows=from_json(data["rows"]),
        views=[View(v["surql"], from_json(v.get("params", {}))) for v in data["views"]],
        writes=[(t, op, from_json(rid), from_json(rec)) for t, op, rid, rec in data["writes"]],
        note=data.get("note", ""),
        check_updated=bool(data.get("check_updated", False)),
    )


def dump_case(case: Case) -> str:
    """JSON text of a case, one row / view / write per line (readable diffs)."""
    data = case_to_json(case)

    def one(value: Any) -> str:
        return json.dumps(value, ensure_ascii=False)

    def lines(items: list[Any], pad: str) -> str:
        return "[\n" + ",\n".join(pad + one(item) for item in items) + "\n" + pad[:-1] + "]"

    tables = ",\n".join(f"  {one(t)}: {lines(rows, '    ')}" for t, rows in data["rows"].items())
    return (f'{{\n "note": {one(data["note"])},\n'
            f' "check_updated": {one(data["check_updated"])},\n "rows": {{\n{tables}\n }},\n'
            f' "views": {lines(data["views"], "  ")},\n'
            f' "writes": {lines(data["writes"], "  ")}\n}}')


def load_case(path: Path) -> Case:
    """Read a fixture file."""
    return case_from_json(json.loads(path.read_text(encoding="utf-8")))
