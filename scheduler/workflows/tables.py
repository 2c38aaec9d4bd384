"""The workflow and schedule tables, their schema versions, and the migrations between them.

Tables (all `SCHEMALESS ... PERMISSIONS NONE`: no record-auth token reads or writes them; only
root connections, i.e. the scheduler and the CLI, do):

| table | one row per | written by |
|---|---|---|
| `_00_workflow` | workflow definition (id = name): `spec`, `hash`, `applied_at` | `svc workflows apply` |
| `_00_schedule` | schedule definition (id = name): `spec`, `hash`, `applied_at`, `enabled`, `target_table`, `workflow`; and the runtime fields `paused`, `trigger_requested_at`, `last_run_status`, `last_run_at`, `last_error`, `last_due_at`, `quarantined`, `failures` | CLI (definition), scheduler (runtime) |
| `_00_workflow_run` | run of a workflow | scheduler |
| `_00_step_run` | step of a run (id `<run key>_<step>`) | scheduler |
| `_00_schedule_run` | fire of a schedule (id `<name>_<due ms>`, `<name>_m<ms>` for a manual one, `<name>_missed_<ms>` for fires not started) | scheduler |
| `_00_run_rollup` | success / failure / skipped tally per schedule and UTC day, id `<bucket>:<day>` (`(ad-hoc)` for runs no schedule owns) | scheduler |
| `_00_workflow_schema` | the row `version`: the schema version applied | CLI |

Versions (`MIGRATIONS`, applied in order by `svc migrate`, each in one transaction with its
version bump):

1. the first layout: the tables, `retry_count` an `int` defaulting to 0.
2. `retry_count` becomes `option<int>` (NONE until a run is retried; stored zeros become NONE),
   `last_retry_at` an `option<datetime>`, indexes on the columns the admin API filters on.

The scheduler reads the version row: rerun and retry answer 409 `migration_required` below
`CURRENT` (every other part works on version 1).
"""

from __future__ import annotations

from typing import Any

from dbclient import Database, DbError

__all__ = ["CURRENT", "MIGRATIONS", "TABLES", "VERSION_ROW", "migrate", "schema_version"]

TABLES = ("_00_workflow", "_00_schedule", "_00_workflow_run", "_00_step_run",
          "_00_schedule_run", "_00_run_rollup", "_00_workflow_schema")
VERSION_ROW = "_00_workflow_schema:version"

_V1 = [f"DEFINE TABLE OVERWRITE {t} SCHEMALESS PERMISSIONS NONE" for t in TABLES] + [
    "DEFINE FIELD OVERWRITE retry_count ON _00_workflow_run TYPE int DEFAULT 0",
]
_V2 = [
    "DEFINE FIELD OVERWRITE retry_count ON _00_workflow_run TYPE option<int>",
    "UPDATE _00_workflow_run SET retry_count = NONE WHERE retry_count = 0",
    "DEFINE FIELD OVERWRITE last_retry_at ON _00_workflow_run TYPE option<datetime>",
    "DEFINE INDEX OVERWRITE _00_workflow_run_status ON _00_workflow_run FIELDS status",
    "DEFINE INDEX OVERWRITE _00_workflow_run_created ON _00_workflow_run FIELDS created_at",
    "DEFINE INDEX OVERWRITE _00_step_run_run ON _00_step_run FIELDS run",
    "DEFINE INDEX OVERWRITE _00_schedule_run_schedule ON _00_schedule_run FIELDS schedule",
    "DEFINE INDEX OVERWRITE _00_schedule_run_status ON _00_schedule_run FIELDS status",
]
MIGRATIONS: tuple[tuple[int, list[str]], ...] = ((1, _V1), (2, _V2))
CURRENT = MIGRATIONS[-1][0]


async def schema_version(db: Database) -> int | None:
    """The applied version; None when the tables were never installed."""
    try:
        row = await db.query_one(f"SELECT VALUE version FROM ONLY {VERSION_ROW}",
                                 idempotent=True)
    except DbError as e:
        if "does not exist" in str(e):
            return None
        raise
    return row if isinstance(row, int) and not isinstance(row, bool) else None


async def migrate(db: Database, to: int | None = None) -> tuple[int | None, int]:
    """Apply every migration above the applied version up to `to` (default: `CURRENT`);
    (version before, version after). ValueError for an unknown target version."""
    target = CURRENT if to is None else to
    if target not in {v for v, _ in MIGRATIONS}:
        raise ValueError(f"no schema version {target} (known: 1 to {CURRENT})")
    before = await schema_version(db)
    have = before or 0
    for version, statements in MIGRATIONS:
        if have < version <= target:
            stmts: list[tuple[str, dict[str, Any] | None]] = [(s, None) for s in statements]
            stmts.append((f"UPSERT {VERSION_ROW} SET version = $v, applied_at = time::now()",
                          {"v": version}))
            await db.transaction(stmts)
            have = version
    return before, max(have, before or 0)
