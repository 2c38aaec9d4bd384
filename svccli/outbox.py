"""The backends' outbox schemas (`method.schema` in an app's `project.yml`), applied by
`svc schema apply` when there is a project file.

Each backend with a `method` has its schema file applied in one transaction, after the
service's meta tables and before the sync hooks, so the outbox tables it defines are hooked
into the ingest transport in the same run (the SSP learns of new jobs through it).

Re-running changes nothing, because the file is applied at every `svc schema apply`:

- only `DEFINE` statements are accepted (a `CREATE` or `UPDATE` would run again each time);
  any other statement refuses the whole command before anything is written;
- `DEFINE TABLE` and `DEFINE INDEX` without `OVERWRITE` or `IF NOT EXISTS` get `IF NOT EXISTS`:
  redefining a table would reset the changefeed the sync step adds to it (and add an entry to
  that feed), redefining an index rebuilds it; a changed table or index definition therefore
  needs an explicit `OVERWRITE` (or a migration);
- every other definition (`FIELD`, `EVENT`, `PARAM`, `FUNCTION`, `ACCESS`, ...) without either
  clause gets `OVERWRITE`: identical text leaves the definition as it was, a change takes
  effect.

The report names, per app, the file, how many definitions it holds and whether each table it
defines or extends was created, updated or unchanged (by the table's schema fingerprint).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from dbclient.surqltext import skipped_span
from dbhost.liveql import split_statements
from svccli.settings import ConfigError

if TYPE_CHECKING:
    from project.rootconfig import Project

_DEFINE = re.compile(r"DEFINE\s+([A-Za-z]+)\b", re.IGNORECASE)
_CLAUSE = re.compile(r"\s+(OVERWRITE|IF\s+NOT\s+EXISTS)\b", re.IGNORECASE)
_NAME = r"`?([A-Za-z_][A-Za-z0-9_]*)`?"
_TABLE_OF = re.compile(r"\bON\s+(?:TABLE\s+)?" + _NAME, re.IGNORECASE)
_TABLE_NAME = re.compile(r"DEFINE\s+TABLE\s+(?:OVERWRITE\s+|IF\s+NOT\s+EXISTS\s+)?" + _NAME,
                         re.IGNORECASE)
#: kinds defined once and kept: redefining would reset a changefeed or rebuild an index
KEEP_KINDS = frozenset({"TABLE", "INDEX"})
#: kinds that belong to a table (`... ON [TABLE] name`)
ON_TABLE_KINDS = frozenset({"FIELD", "INDEX", "EVENT"})


@dataclass(frozen=True)
class OutboxSchema:
    """One backend's schema file, ready to apply."""

    app: str
    file: Path
    statements: tuple[str, ...]
    #: the tables the file defines or defines fields, indexes or events on, in order
    tables: tuple[str, ...]


@dataclass
class OutboxResult:
    """What applying one file did to each of its tables."""

    schema: OutboxSchema
    tables: dict[str, str] = field(default_factory=dict)  # name -> created/updated/unchanged

    def line(self, project_dir: Path) -> str:
        try:
            shown = self.schema.file.relative_to(project_dir)
        except ValueError:
            shown = self.schema.file
        n = len(self.schema.statements)
        tables = ", ".join(f"{t} {s}" for t, s in self.tables.items()) or "no tables"
        return f"outbox {self.schema.app}: {shown} ({n} definition{'s' * (n != 1)}): {tables}"


def strip_comments(text: str) -> str:
    """`text` without SurrealQL comments (`--`, `//`, `#` to the end of the line, `/* */`),
    strings and quoted names left as they are."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        skipped = skipped_span(text, i)
        if skipped is None:
            out.append(text[i])
            i += 1
            continue
        kind, end = skipped
        # a line comment keeps its line break, a block comment still separates tokens
        out.append(text[i:end] if kind == "quoted" else "\n" if kind == "line_comment" else " ")
        i = end
    return "".join(out)


def idempotent_statement(stmt: str) -> str:
    """A `DEFINE` statement with the clause that makes running it again change nothing (see
    the module docstring); ValueError for any other statement."""
    m = _DEFINE.match(stmt)
    if m is None:
        first = stmt.split(None, 1)[0].upper() if stmt.split() else ""
        raise ValueError(f"{first[:20]} is not a DEFINE statement")
    if _CLAUSE.match(stmt, m.end()):
        return stmt
    clause = "IF NOT EXISTS" if m.group(1).upper() in KEEP_KINDS else "OVERWRITE"
    return f"{stmt[:m.end()]} {clause}{stmt[m.end():]}"


def read_outbox(app: str, path: Path) -> OutboxSchema:
    """The statements of one schema file, made idempotent; ConfigError names the file and the
    statement that cannot be applied at every run."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"app {app}: method.schema {path}: cannot read: "
                          f"{e.strerror or e}") from None
    statements: list[str] = []
    tables: list[str] = []
    for i, stmt in enumerate(split_statements(strip_comments(text)), start=1):
        try:
            statements.append(idempotent_statement(stmt))
        except ValueError as e:
            raise ConfigError(f"app {app}: method.schema {path}: statement {i}: {e} (only "
                              "definitions are applied: the file runs at every svc schema "
                              "apply)") from None
        kind = stmt.split(None, 2)[1].upper()
        named = (_TABLE_NAME.match(stmt) if kind == "TABLE"
                 else _TABLE_OF.search(stmt) if kind in ON_TABLE_KINDS else None)
        if named is not None:
            tables.append(named.group(1))
    if not statements:
        raise ConfigError(f"app {app}: method.schema {path}: no statements")
    return OutboxSchema(app, path, tuple(statements), tuple(dict.fromkeys(tables)))


def outbox_schemas(project: Project) -> list[OutboxSchema]:
    """Every backend's outbox schema file, in the root file's order of apps."""
    out: list[OutboxSchema] = []
    for name, app in project.apps.items():
        method = app.config.method
        if app.config.type == "backend" and method is not None:
            out.append(read_outbox(name, app.dir / method.schema_))
    return out
