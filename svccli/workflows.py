"""`svc workflows apply`, `svc migrate`, and the workflow part of `svc schema apply`.

* `svc workflows apply [--project FILE] [--check]`: validate the `workflows:` and `schedules:`
  sections of the root project file (`project.workflows`; other keys are not looked at) and
  write them to `_00_workflow` / `_00_schedule` in one transaction: new and changed
  definitions (a change stamps `applied_at`: a schedule's new cron applies from then on),
  definitions no longer in the file removed. The runtime fields the scheduler keeps on a
  schedule (`paused`, `quarantined`, `last_run_*`, its cursor) are never touched. The workflow
  tables are installed first when the database has none. `--check` validates only.
  Refusals print one line per problem with its code (`bad_dag`, `no_target_table`,
  `invalid`) and exit 2.
* `svc migrate [--to N]`: apply the workflow table migrations
  (`scheduler.workflows.tables.MIGRATIONS`) up to the current version.
* `svc schema apply`: also installs the workflow tables when absent (it never migrates an
  older version: that is `svc migrate`'s, and it says so) and applies the definitions when
  the project file has either section.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from surrealdb import RecordID

from dbclient import Database, DbQueryError
from dbclient.errors import retryable
from project.workflows import (
    DefinitionError,
    DefinitionIssue,
    WorkflowsSection,
    definition_hash,
    load_section,
)
from scheduler.workflows.tables import CURRENT, migrate, schema_version

__all__ = ["ApplyResult", "apply_definitions", "ensure_tables", "read_section"]


def read_section(path: Path, *, required: bool) -> WorkflowsSection | None:
    """The validated sections of the project file at `path`; None when the file is absent
    (and not `required`) or has neither section. DefinitionError when refused."""
    if not path.is_file():
        if required:
            raise DefinitionError([DefinitionIssue("invalid", str(path),
                                                   "the project file does not exist")])
        return None
    try:
        doc: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise DefinitionError([DefinitionIssue("invalid", str(path),
                                               f"not readable as YAML: {e}")]) from None
    if not isinstance(doc, Mapping):
        doc = {} if doc is None else doc
    if not required and isinstance(doc, Mapping) and \
            doc.get("workflows") is None and doc.get("schedules") is None:
        return None
    return load_section(doc)


def print_refusal(prog: str, e: DefinitionError) -> None:
    for issue in e.issues:
        print(f"{prog}: {issue.code} at {issue.path}: {issue.message}", file=sys.stderr)


async def ensure_tables(db: Database) -> str:
    """Install the workflow tables when absent; a line saying what the version is."""
    version = await schema_version(db)
    if version is None:
        await migrate(db)
        return f"workflow tables: installed at version {CURRENT}"
    if version < CURRENT:
        return (f"workflow tables: version {version}, this release needs {CURRENT}: run "
                "`svc migrate` (rerun and retry answer 409 until then)")
    return f"workflow tables: version {version}"


@dataclass
class ApplyResult:
    workflows: dict[str, str] = field(default_factory=dict)
    schedules: dict[str, str] = field(default_factory=dict)

    def lines(self) -> list[str]:
        out = [f"workflow {n}: {s}" for n, s in self.workflows.items()]
        out += [f"schedule {n}: {s}" for n, s in self.schedules.items()]
        changed = sum(1 for s in [*self.workflows.values(), *self.schedules.values()]
                      if s != "unchanged")
        out.append(f"{changed} definition(s) created, changed or removed")
        return out


async def apply_definitions(db: Database, section: WorkflowsSection,
                            now: datetime | None = None) -> ApplyResult:
    """Write `section` to the definition tables (see the module docstring)."""
    now = now or datetime.now(UTC)
    have_w = {str(r["name"]): r.get("hash") for r in await db.query_one(
        "SELECT record::id(id) AS name, hash FROM _00_workflow", idempotent=True) or []}
    have_s = {str(r["name"]): r.get("hash") for r in await db.query_one(
        "SELECT record::id(id) AS name, hash FROM _00_schedule", idempotent=True) or []}
    out = ApplyResult()
    stmts: list[tuple[str, dict[str, Any] | None]] = []
    for name, wf in section.workflows.items():
        h = definition_hash(wf)
        if have_w.get(name) == h:
            out.workflows[name] = "unchanged"
            continue
        out.workflows[name] = "changed" if name in have_w else "created"
        stmts.append(("UPSERT $id CONTENT $c RETURN NONE", {
            "id": RecordID("_00_workflow", name),
            "c": {"name": name, "spec": wf.model_dump(mode="json"), "hash": h,
                  "applied_at": now, "steps": list(wf.steps)}}))
    for name in sorted(set(have_w) - set(section.workflows)):
        out.workflows[name] = "removed"
        stmts.append(("DELETE $id RETURN NONE", {"id": RecordID("_00_workflow", name)}))
    for name, s in section.schedules.items():
        h = definition_hash(s)
        if have_s.get(name) == h:
            out.schedules[name] = "unchanged"
            continue
        new = name not in have_s
        out.schedules[name] = "created" if new else "changed"
        fields = {"name": name, "spec": s.model_dump(mode="json"), "hash": h,
                  "applied_at": now, "enabled": s.enabled, "cron": s.cron,
                  "timezone": s.timezone, "target_table": s.table, "workflow": s.workflow,
                  "concurrency": s.concurrency, "catch_up": s.catch_up}
        if new:
            fields.update(paused=False, failures=0)
        stmts.append(("UPSERT $id MERGE $c RETURN NONE",
                      {"id": RecordID("_00_schedule", name), "c": fields}))
    for name in sorted(set(have_s) - set(section.schedules)):
        out.schedules[name] = "removed"
        stmts.append(("DELETE $id RETURN NONE", {"id": RecordID("_00_schedule", name)}))
    for attempt in range(8):
        if not stmts:
            break
        try:
            await db.transaction(stmts)
            break
        except DbQueryError as e:
            # the scheduler writes its runtime fields on the same rows: a conflict is retried
            if not retryable(e) or attempt == 7:
                raise
            await asyncio.sleep(0.02 * 2 ** attempt)
    return out
