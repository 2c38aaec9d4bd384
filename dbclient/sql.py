"""Pure helpers for building SurrealQL safely: identifiers, parameter renaming, batches.

Values and record ids always travel as bound parameters. The few places where the engine
only takes literals (`SHOW CHANGES ... SINCE <int> LIMIT <int>`, `INFO FOR TABLE <name>`,
`DEFINE ... ON <name>`) go through `require_identifier` / `require_int` first, so nothing a
caller passes can change the statement's meaning.
"""

from __future__ import annotations

import datetime
import decimal
import re
import uuid
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import xxhash
from surrealdb import RecordID

_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_PARAM_CHARS = re.compile(r"[A-Za-z0-9_]")


def is_identifier(name: object) -> bool:
    """True when `name` is a plain SurrealQL identifier (letters, digits, `_`, not first digit)."""
    return isinstance(name, str) and _IDENT_RE.match(name) is not None


def require_identifier(name: object, what: str = "table") -> str:
    """Return `name` if it is a plain identifier, else raise ValueError naming `what`."""
    if not is_identifier(name):
        raise ValueError(f"{what} name {name!r} is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*)")
    assert isinstance(name, str)
    return name


def require_int(value: object, what: str, minimum: int = 0) -> int:
    """Return `value` if it is an int (not bool) >= minimum, else raise ValueError."""
    if isinstance(value, bool) or not isinstance(value, int):
        # ValueError, not TypeError: callers handle every bad literal with one except clause.
        raise ValueError(f"{what} must be an integer, got {type(value).__name__}")  # noqa: TRY004
    if value < minimum:
        raise ValueError(f"{what} must be >= {minimum}, got {value}")
    return value


def rename_params(sql: str, names: Sequence[str], prefix: str) -> str:
    """Rewrite each `$name` (for `name` in `names`) in `sql` to `$<prefix><name>`.

    Occurrences inside quoted strings, backtick/angle-quoted identifiers and comments are left
    alone, and only whole parameter names are renamed (`$id` does not touch `$idx`), so engine
    parameters the caller did not bind (`$auth`, `$before`, `$this`...) keep their meaning.
    """
    wanted = set(names)
    for n in wanted:
        require_identifier(n, "parameter")
    out: list[str] = []
    i, n_chars = 0, len(sql)
    while i < n_chars:
        c = sql[i]
        if c in ("'", '"', "`"):
            j = _skip_quoted(sql, i, c)
            out.append(sql[i:j])
            i = j
        elif c == "⟨":
            j = sql.find("⟩", i + 1)
            j = n_chars if j < 0 else j + 1
            out.append(sql[i:j])
            i = j
        elif c == "-" and sql.startswith("--", i) or c == "#" or (c == "/" and sql.startswith("//", i)):
            j = sql.find("\n", i)
            j = n_chars if j < 0 else j
            out.append(sql[i:j])
            i = j
        elif c == "/" and sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            j = n_chars if j < 0 else j + 2
            out.append(sql[i:j])
            i = j
        elif c == "$":
            j = i + 1
            while j < n_chars and _PARAM_CHARS.match(sql[j]):
                j += 1
            name = sql[i + 1:j]
            out.append(f"${prefix}{name}" if name in wanted else sql[i:j])
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


@lru_cache(maxsize=1024)
def _renamed(body: str, names: tuple[str, ...]) -> str:
    """`rename_params` with a marker prefix (NUL, never in SQL text), cached: callers send the
    same statement shapes over and over, and the scan costs ~50 us per statement."""
    return rename_params(body, names, "\x00")


def _skip_quoted(sql: str, start: int, quote: str) -> int:
    """Index just past the string/identifier quoted by `quote` that starts at `start`."""
    i = start + 1
    while i < len(sql):
        if sql[i] == "\\":
            i += 2
            continue
        if sql[i] == quote:
            return i + 1
        i += 1
    return len(sql)


def build_transaction(
    statements: Sequence[tuple[str, Mapping[str, Any] | None]],
) -> tuple[str, dict[str, Any]]:
    """Join statements into one `BEGIN; ...; COMMIT;` text with collision-free parameters.

    Statement i's parameter `$name` becomes `$p<i>_name`, so two statements may both bind
    `$id` to different values. Each entry must be exactly one statement (results are mapped
    back by position). Returns (sql, vars).
    """
    if not statements:
        raise ValueError("a transaction needs at least one statement")
    parts = ["BEGIN TRANSACTION;"]
    merged: dict[str, Any] = {}
    for i, (sql, vars_) in enumerate(statements):
        body = sql.strip().rstrip(";").strip()
        if not body:
            raise ValueError(f"statement {i} is empty")
        vars_ = dict(vars_ or {})
        prefix = f"p{i}_"
        parts.append(_renamed(body, tuple(vars_)).replace("$\x00", "$" + prefix) + ";")
        for name, value in vars_.items():
            merged[prefix + name] = value
    parts.append("COMMIT TRANSACTION;")
    return "\n".join(parts), merged


def show_changes_sql(table: str | None, since: int, limit: int) -> str:
    """`SHOW CHANGES FOR TABLE <table> SINCE <since> LIMIT <limit>` from validated parts
    (`FOR DATABASE` when `table` is None).

    The engine does not accept bound parameters here (and `SINCE d'...'` is broken in this
    build), so the table must be a plain identifier and the numbers real ints before they are
    formatted into the text.
    """
    if table is not None:
        require_identifier(table)
    require_int(since, "since")
    require_int(limit, "limit", minimum=1)
    target = "DATABASE" if table is None else f"TABLE {table}"
    return f"SHOW CHANGES FOR {target} SINCE {since} LIMIT {limit}"


def schema_fingerprint(table_definition: str, table_info: Mapping[str, Any]) -> str:
    """A stable fingerprint of a table's schema (its DEFINE TABLE text plus INFO FOR TABLE).

    Keys are sorted so the same schema always hashes the same; any change to a field, event,
    index or permission moves it. The `lives` section (LIVE queries currently open on the
    table) is not schema and is left out. Hex xxh3_64.
    """
    h = xxhash.xxh3_64()
    h.update(table_definition.encode())
    for section in sorted(table_info):
        if section == "lives":
            continue
        value = table_info[section]
        h.update(b"\x00" + section.encode())
        if isinstance(value, Mapping):
            for key in sorted(value):
                h.update(b"\x01" + str(key).encode() + b"\x02" + str(value[key]).encode())
        else:
            h.update(b"\x03" + str(value).encode())
    return h.hexdigest()


class SqlNull:
    """SurrealDB's NULL as a parameter value. The SDK sends a Python ``None`` as NONE (an
    absent field); rows read back hold ``None`` for NULL, so a writer that must keep NULL
    (the backup importer) sends this marker instead (``dbclient.cbor`` encodes it as CBOR
    null)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "SQL_NULL"


SQL_NULL = SqlNull()

_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
_SCALARS = (SqlNull, type(None), bool, int, float, str, bytes, bytearray, datetime.datetime,
            datetime.date, uuid.UUID, decimal.Decimal)


def check_params(vars_: Mapping[str, Any]) -> None:
    """Refuse parameter values the engine cannot decode, before they are sent.

    Names must be plain identifiers; values may be scalars, lists/tuples, str-keyed dicts and
    the SDK's own types (RecordID, Duration, Table...). Sets, ints outside 64 bits and other
    Python objects raise ValueError naming the parameter (never its value, which may be
    private); sending them would make the server fail the frame instead of answering.
    """
    for name, value in vars_.items():
        require_identifier(name, "parameter")
        if not _plainly_valid(value):
            _check_value(value, f"${name}")


def _plainly_valid(v: Any) -> bool:
    """True when ``v`` is made of exact builtin types `_check_value` accepts (False: let it
    decide, and name the offending path). A flush sends thousands of edge rows: the walk with
    a path string per element was a tenth of the SSP hub's time."""
    t = type(v)
    if t is str or t is bool or t is float or v is None:
        return True
    if t is int:
        return bool(_I64_MIN <= v <= _I64_MAX)
    if t is list or t is tuple:
        return all(map(_plainly_valid, v))
    if t is dict:
        return all(type(k) is str for k in v) and all(map(_plainly_valid, v.values()))
    return t is RecordID


def _check_value(value: Any, path: str) -> None:
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        if not _I64_MIN <= value <= _I64_MAX:
            raise ValueError(f"parameter {path} is an integer outside the 64-bit range")
        return
    if isinstance(value, _SCALARS):
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_value(item, f"{path}[{i}]")
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(  # noqa: TRY004 (one exception type for all bad params)
                    f"parameter {path} has a non-string key of type {type(key).__name__}")
            _check_value(item, f"{path}.{key}")
        return
    if type(value).__module__.startswith("surrealdb"):
        return
    raise ValueError(f"parameter {path} has unsupported type {type(value).__name__}")
