"""The schema part of a dump: read from ``INFO FOR DB`` / ``INFO FOR TABLE``, replayed on restore.

The engine prints every definition as a ``DEFINE`` statement; a restore replays those texts
with ``OVERWRITE`` added (``DEFINE FIELD OVERWRITE in ON follows ...``: a relation table
defines its ``in``/``out`` itself, and a second ``DEFINE`` of the same name would fail).

Order of a restore (the wipe first removes every table, function, param and analyzer):

1. analyzers, params, functions, and the other database-level kinds the engine lists
   (sequences, configs, apis, buckets, models, modules);
2. every table that is not a computed view, with its fields and indexes;
3. the rows (``backup.importer``, under ``OPTION IMPORT``: events do not fire, ``VALUE`` and
   ``ASSERT`` clauses are not re-evaluated, so rows come back exactly as they were);
4. the events;
5. the computed views (``DEFINE TABLE ... AS SELECT``): defined last, the engine fills them
   from the imported rows; their rows are not in the dump.

Params that hold a credential (:data:`CREDENTIAL_PARAMS`: the ingest credential the http
transport's events send) are never written into a dump (:func:`without_credentials`): a dump
sits in object storage, read by whoever reads backups. A restore keeps the database's own
(the wipe leaves them), so the events keep working; ``svc schema apply`` rewrites them.

Access methods and database users: ``INFO`` prints their keys and password hashes as
``[REDACTED]``, so a dump cannot carry them. A restore keeps the ones the database has; an
access method the dump names and the database lacks is defined with its key clauses left
out (the engine generates a new key: tokens signed before do not verify), and a user the
database lacks cannot be made again. Both are reported as warnings of the restore.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from dbclient.sql import is_identifier

__all__ = [
    "CREDENTIAL_PARAMS",
    "DB_KINDS_REPLAYED",
    "SchemaPlan",
    "escape_ident",
    "is_view",
    "overwrite",
    "table_kind",
    "without_credentials",
]

#: database params holding a credential (written by `svc schema apply`; `_00_ingest_secret` is
#: the name older releases kept the shared secret itself under)
CREDENTIAL_PARAMS = frozenset({"_00_ingest_token", "_00_ingest_secret"})

#: database-level kinds replayed from the dump (accesses and users are not: see above)
DB_KINDS_REPLAYED = ("analyzers", "params", "functions", "sequences", "configs", "apis",
                     "buckets", "models", "modules")
#: kinds removed by the wipe before the dump's are defined (their REMOVE syntax is fixed)
_REMOVED_KINDS = {"analyzers": "ANALYZER {}", "params": "PARAM ${}", "functions": "FUNCTION fn::{}"}
_DEFINE_RE = re.compile(r"^\s*DEFINE\s+([A-Z]+)\s+(?!OVERWRITE\b|IF\s+NOT\s+EXISTS\b)",
                        re.IGNORECASE)
_REDACTED_KEY = re.compile(r"\s+WITH\s+(?:JWT\s+ALGORITHM\s+\w+\s+KEY|ISSUER\s+KEY)\s+"
                           r"'\[REDACTED\]'", re.IGNORECASE)
_REDACTED_BARE = re.compile(r"\s+(?:ALGORITHM\s+\w+\s+)?KEY\s+'\[REDACTED\]'", re.IGNORECASE)


def without_credentials(info: Mapping[str, Any]) -> dict[str, Any]:
    """``INFO FOR DB`` minus the params of :data:`CREDENTIAL_PARAMS` (what a dump keeps)."""
    out = dict(info)
    params = out.get("params")
    if isinstance(params, Mapping):
        out["params"] = {k: v for k, v in params.items() if str(k) not in CREDENTIAL_PARAMS}
    return out


def escape_ident(name: str) -> str:
    """A table name as SurrealQL text: plain when it is an identifier, else backticked."""
    if is_identifier(name):
        return name
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


def overwrite(statement: str) -> str:
    """``DEFINE <KIND> x`` -> ``DEFINE <KIND> OVERWRITE x`` (unchanged when it says already)."""
    return _DEFINE_RE.sub(lambda m: m.group(0).rstrip() + " OVERWRITE ", statement, count=1)


def is_view(definition: str) -> bool:
    """A computed table (``DEFINE TABLE ... AS SELECT``): its rows come from other tables."""
    return " AS SELECT " in f" {definition.upper()} "


def table_kind(definition: str) -> str:
    """``relation``, ``normal`` or ``any`` (``TYPE ANY`` tables may hold edges and records)."""
    m = re.search(r"\bTYPE\s+(RELATION|NORMAL|ANY)\b", definition, re.IGNORECASE)
    return m.group(1).lower() if m else "any"


def _texts(section: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in (section or {}).items()} if isinstance(section, Mapping) \
        else {}


class SchemaPlan:
    """The statements of a restore, from the dump's schema record and the database's current
    ``INFO FOR DB`` (see the module docstring)."""

    def __init__(self, dump_db: Mapping[str, Any], dump_tables: Mapping[str, Any],
                 current_db: Mapping[str, Any]) -> None:
        self.dump_db = dump_db
        self.dump_tables = dump_tables
        self.current = current_db
        self.warnings: list[str] = []

    # ------------------------------------------------------------------ wipe
    def wipe(self) -> list[str]:
        """Remove every table (the service's own ``_00_*`` and edge tables included), function,
        param and analyzer the database has now."""
        tables = _texts(self.current.get("tables"))
        # Views first: the engine refuses to remove a table a view is defined on.
        order = sorted(tables, key=lambda t: (not is_view(tables[t]), t))
        out = [f"REMOVE TABLE IF EXISTS {escape_ident(t)}" for t in order]
        for kind, form in _REMOVED_KINDS.items():
            for name in sorted(_texts(self.current.get(kind))):
                if kind == "params" and name in CREDENTIAL_PARAMS:
                    continue  # the database's own credential stays (never in a dump)
                if all(is_identifier(part) for part in name.split("::")):
                    out.append("REMOVE " + form.format(name).replace(" ", " IF EXISTS ", 1))
        return out

    # ------------------------------------------------------------------ define
    def database_level(self) -> list[str]:
        out = []
        for kind in DB_KINDS_REPLAYED:
            out += [overwrite(t) for name, t in sorted(_texts(self.dump_db.get(kind)).items())
                    if not (kind == "params" and name in CREDENTIAL_PARAMS)]
        have = _texts(self.current.get("accesses"))
        for name, text in sorted(_texts(self.dump_db.get("accesses")).items()):
            if name in have:
                continue
            out.append(overwrite(_REDACTED_BARE.sub("", _REDACTED_KEY.sub("", text))))
            self.warnings.append(f"access method {name} was defined again with a new key: "
                                 "tokens it signed before the restore do not verify")
        users = _texts(self.current.get("users"))
        for name in sorted(_texts(self.dump_db.get("users"))):
            if name not in users:
                self.warnings.append(f"database user {name} is not restored (its password "
                                     "hash cannot be read from the database)")
        return out

    def tables(self) -> dict[str, str]:
        return _texts(self.dump_db.get("tables"))

    def data_tables(self) -> list[str]:
        """Tables whose rows are in the dump (every table but the computed views)."""
        return sorted(t for t, d in self.tables().items() if not is_view(d))

    def table_defs(self) -> list[str]:
        """Tables (not views) with their fields and indexes."""
        out = []
        for name in self.data_tables():
            out.append(overwrite(self.tables()[name]))
            info = self.dump_tables.get(name) or {}
            out += [overwrite(t) for _, t in sorted(_texts(info.get("fields")).items())]
            out += [overwrite(t) for _, t in sorted(_texts(info.get("indexes")).items())]
        return out

    def after_rows(self) -> list[str]:
        """Events of every table, then the computed views (filled from the imported rows)."""
        out = []
        for name in self.data_tables():
            info = self.dump_tables.get(name) or {}
            out += [overwrite(t) for _, t in sorted(_texts(info.get("events")).items())]
        for name, text in sorted(self.tables().items()):
            if not is_view(text):
                continue
            out.append(overwrite(text))
            info = self.dump_tables.get(name) or {}
            for section in ("fields", "indexes", "events"):
                out += [overwrite(t) for _, t in sorted(_texts(info.get(section)).items())]
        return out
