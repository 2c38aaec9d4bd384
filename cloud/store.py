"""The control plane's database port: its tables (``SCHEMA``) and a thin layer over
:class:`dbclient.Database` that turns the engine's refusals into the errors callers act on.

Every write that answers success is one transaction committed before the answer, so a crash
of the service after an acknowledgement loses nothing (the database keeps what it committed;
the embedded host's ``surrealkv`` storage survives ``kill -9``). Checks that must hold under
concurrency (a slug taken, a limit reached) run inside that transaction: a unique index
(:class:`Duplicate`) or a ``THROW 'cloud:<status>:<message>'`` statement
(:func:`guard`), so two racing requests cannot both pass.

References between rows are plain string ids (``ten_...``, ``prj_...``); only a row's own
``id`` is a record id, turned back into its string by :func:`row_id`.
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from surrealdb import RecordID

from cloud.errors import BadRequest, CloudError, Conflict, Forbidden, NotFound, TooMany, Unavailable
from dbclient import Database, DbError, DbQueryError
from dbclient.errors import UNREACHABLE, UNREACHABLE_CODE, unreachable_message

log = logging.getLogger("cloud.store")

__all__ = ["SCHEMA", "Duplicate", "Store", "guard", "limit_guard", "new_id", "now", "rid", "row_id"]

TABLES = ("user", "tenant", "member", "token", "signin_failure", "project", "tenant_key",
          "value", "value_version", "domain", "repo_link", "repo_commit", "usage_event",
          "usage_rollup", "audit_event", "deployment", "instance", "log_line",
          "scheduled_backup")

SCHEMA: tuple[str, ...] = (
    *(f"DEFINE TABLE IF NOT EXISTS {t} SCHEMALESS" for t in TABLES),
    "DEFINE INDEX IF NOT EXISTS user_email ON user FIELDS email UNIQUE",
    "DEFINE INDEX IF NOT EXISTS tenant_slug ON tenant FIELDS slug UNIQUE",
    "DEFINE INDEX IF NOT EXISTS member_user ON member FIELDS user",
    "DEFINE INDEX IF NOT EXISTS member_tenant ON member FIELDS tenant",
    "DEFINE INDEX IF NOT EXISTS token_user ON token FIELDS user",
    "DEFINE INDEX IF NOT EXISTS signin_failure_addr ON signin_failure FIELDS addr",
    "DEFINE INDEX IF NOT EXISTS project_slug ON project FIELDS slug UNIQUE",
    "DEFINE INDEX IF NOT EXISTS project_tenant ON project FIELDS tenant",
    "DEFINE INDEX IF NOT EXISTS value_scope ON value FIELDS project, kind, environment",
    "DEFINE INDEX IF NOT EXISTS value_version_value ON value_version FIELDS value",
    "DEFINE INDEX IF NOT EXISTS domain_hostname ON domain FIELDS hostname UNIQUE",
    "DEFINE INDEX IF NOT EXISTS domain_project ON domain FIELDS project",
    "DEFINE INDEX IF NOT EXISTS repo_link_project ON repo_link FIELDS project",
    "DEFINE INDEX IF NOT EXISTS scheduled_backup_project ON scheduled_backup FIELDS project",
    "DEFINE INDEX IF NOT EXISTS repo_commit_link ON repo_commit FIELDS link",
    "DEFINE INDEX IF NOT EXISTS usage_event_tenant ON usage_event FIELDS tenant, hour",
    "DEFINE INDEX IF NOT EXISTS usage_rollup_tenant ON usage_rollup FIELDS tenant, hour",
    "DEFINE INDEX IF NOT EXISTS audit_event_tenant ON audit_event FIELDS tenant",
    "DEFINE INDEX IF NOT EXISTS deployment_version ON deployment FIELDS project, version UNIQUE",
    "DEFINE INDEX IF NOT EXISTS deployment_status ON deployment FIELDS status",
    "DEFINE INDEX IF NOT EXISTS deployment_slug ON deployment FIELDS project_slug",
    "DEFINE INDEX IF NOT EXISTS instance_deployment ON instance FIELDS deployment",
    "DEFINE INDEX IF NOT EXISTS instance_status ON instance FIELDS status",
    "DEFINE INDEX IF NOT EXISTS log_line_deployment ON log_line FIELDS deployment, seq",
    "DEFINE INDEX IF NOT EXISTS log_line_instance ON log_line FIELDS instance, seq",
)

_ALPHABET = "abcdefghijkmnpqrstuvwxyz23456789"  # no 0/o, 1/l: ids read aloud or typed
_THROWN = re.compile(r"An error occurred: cloud:(\d{3}):(.*)$", re.S)
_DUPLICATE = re.compile(r"index `(\w+)` already contains")


def new_id(prefix: str, n: int = 14) -> str:
    """``<prefix>_`` + ``n`` random characters (about 5 bits each)."""
    return prefix + "_" + "".join(secrets.choice(_ALPHABET) for _ in range(n))


def now() -> datetime:
    return datetime.now(UTC)


def rid(table: str, key: str) -> RecordID:
    return RecordID(table, key)


def row_id(row: Mapping[str, Any]) -> str:
    """A row's own key as a string (``project:prj_x`` -> ``prj_x``)."""
    v = row["id"]
    return str(v.id) if isinstance(v, RecordID) else str(v)


def guard(condition: str, status: int, message: str) -> str:
    """A statement that aborts its transaction with ``status``/``message`` when ``condition``
    (SurrealQL) holds; :class:`Store` raises the matching error. ``message`` must not contain
    a quote or a value a caller sent as a secret."""
    safe = message.replace("\\", "/").replace("'", "’")
    return f"IF {condition} {{ THROW 'cloud:{status}:{safe}' }}"


def limit_guard(count: str, name: str, default: int, tenant: str,
                vars: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """A guard refusing a write once ``count`` (SurrealQL, may use ``$t`` for the tenant)
    exceeds the tenant's limit ``name`` (its own setting, else ``default``). Placed after the
    write in the same transaction, it sees the write."""
    cond = f"{count} > (type::record('tenant', $t).limits.{name} ?? $max)"
    return (guard(cond, 409, f"limit reached: {name} (limits_get shows the tenant's limits)"),
            {"t": tenant, "max": default, **(vars or {})})


class Duplicate(Conflict):
    """A unique index refused a write; ``index`` names it."""

    def __init__(self, index: str) -> None:
        super().__init__(f"duplicate value for {index}", code="exists")
        self.index = index


_STATUS: dict[int, type[CloudError]] = {400: BadRequest, 403: Forbidden, 404: NotFound,
                                         409: Conflict, 429: TooMany}


def _translate(e: DbError) -> CloudError:
    if isinstance(e, UNREACHABLE):
        return Unavailable(unreachable_message("the platform database")
                           + " (nothing was changed by a request that got this answer unless "
                           "it says otherwise)", code=UNREACHABLE_CODE)
    if isinstance(e, DbQueryError):
        thrown = _THROWN.search(e.engine_message)
        if thrown:
            status = int(thrown.group(1))
            msg = thrown.group(2).strip()
            code = "limit_reached" if msg.startswith("limit") else None
            return _STATUS.get(status, Conflict)(msg, code=code)
        dup = _DUPLICATE.search(e.engine_message)
        if dup:
            return Duplicate(dup.group(1))
    log.error("database refused a control-plane request: %s", e)
    return Unavailable("the platform database refused the request (logged)",
                       code="database_error")


class Store:
    """The database calls of the control plane, errors translated (see module doc)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def apply_schema(self) -> None:
        await self.run(";\n".join(SCHEMA))

    async def run(self, sql: str, vars: Mapping[str, Any] | None = None, *,
                  read: bool = False) -> list[Any]:
        try:
            return await self.db.query(sql, vars, idempotent=read)
        except DbError as e:
            raise _translate(e) from e

    async def one(self, sql: str, vars: Mapping[str, Any] | None = None, *,
                  read: bool = False) -> Any:
        out = await self.run(sql, vars, read=read)
        return out[-1] if out else None

    async def tx(self, statements: Sequence[tuple[str, Mapping[str, Any] | None]]
                 ) -> list[Any]:
        try:
            return await self.db.transaction(statements)
        except DbError as e:
            raise _translate(e) from e

    async def get(self, table: str, key: str) -> dict[str, Any] | None:
        row = await self.one("SELECT * FROM ONLY $id", {"id": rid(table, key)}, read=True)
        return row if isinstance(row, dict) else None
