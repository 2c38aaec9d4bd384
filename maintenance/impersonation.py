"""Impersonation (spec, SSP endpoints `POST /impersonate/*`, Authentication 2): what the SSP
and the scheduler share, so both answer the same.

- `parse_flag`: the one reading of `SVC_IMPERSONATION` (`on`/`off`, default off).
- `Impersonation`: enabled only when the flag is on *and* the shared secret is non-empty;
  otherwise both routes answer 404. Bearer checks are the listeners' (`ipc.bearer`, constant
  time).
- `mint`: `{session, target, admin, access?, ns?, db?, ttl_secs, session_remaining_secs}` ->
  `{token, exp}`: an HS256 JWT for the record access method `_00_impersonate` whose `ID` is the
  target user and whose `imp` claim names the `_00_impersonation` row. Stateless: the access
  method's AUTHENTICATE block (written by `svc schema apply`) refuses the token once that row is
  revoked, expired or names another target. Expiry: now + min(ttl_secs, 1 h,
  session_remaining_secs).
- `UserSearch` / `shape_users`: `{table, fields?, search?, limit?}` -> rows of `table` whose id
  or one of `fields` contains `search` (case-insensitive), ordered by id, each with `is_admin`.
  A row carries only `id`, the named `fields` and `is_admin`. The search runs as root, so
  `fields` are limited to the names a people picker shows (`USER_FIELDS`): naming `pass` would
  return password hashes, and even searching it without returning it (a substring match per
  request) would read a hash out a character at a time. Service tables (`_00_*`) are refused.

The signing key is derived from the shared secret (`signing_key`), never the secret itself:
the database stores the key in its access definition, and a reader of that definition must not
learn the bearer secret every listener accepts.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jwt

__all__ = [
    "ACCESS",
    "MAX_LIMIT",
    "MAX_TOKEN_SECS",
    "SESSION_TABLE",
    "USER_FIELDS",
    "FlagError",
    "Impersonation",
    "Invalid",
    "Minted",
    "UserSearch",
    "parse_flag",
    "shape_users",
    "signing_key",
]

ACCESS = "_00_impersonate"
SESSION_TABLE = "_00_impersonation"
MAX_TOKEN_SECS = 3600
MAX_LIMIT = 100
DEFAULT_LIMIT = 20
_ON = frozenset({"on", "true", "1", "yes"})
_OFF = frozenset({"off", "false", "0", "no", ""})
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_MAX_ID = 512
_KEY_LABEL = b"surreal-views impersonation HS256 v1"
#: the fields `/impersonate/users` may search and return: what identifies a person on screen
USER_FIELDS = frozenset({"name", "username", "email", "display_name", "displayName", "login",
                         "handle", "first_name", "last_name", "firstName", "lastName", "nickname"})


class FlagError(ValueError):
    """`SVC_IMPERSONATION` is neither on nor off."""


class Invalid(ValueError):
    """A request body the spec answers with 400 `invalid`; the message names the field."""


def parse_flag(raw: str | None) -> bool:
    """`SVC_IMPERSONATION`: `on` (also true/1/yes) enables, `off`/unset/empty (also
    false/0/no) disables, anything else raises FlagError. Case and spaces are ignored."""
    text = (raw or "").strip().lower()
    if text in _ON:
        return True
    if text in _OFF:
        return False
    raise FlagError(f"SVC_IMPERSONATION must be on or off, got {raw!r}")


def signing_key(secret: str) -> str:
    """The HS256 key of `_00_impersonate`: HMAC-SHA256 of a fixed label under the shared
    secret, as hex (the same in every component and in `svc schema apply`)."""
    return hmac.new(secret.encode("utf-8"), _KEY_LABEL, hashlib.sha256).hexdigest()


def is_identifier(name: Any) -> bool:
    """A plain SurrealQL identifier (`[A-Za-z_][A-Za-z0-9_]*`)."""
    return isinstance(name, str) and bool(_IDENT.match(name))


def _record_text(body: Mapping[str, Any], name: str, table: str | None = None) -> str:
    """A record id text `<table>:<key>`; the key's ⟨⟩ or backticks are dropped when the key
    inside is plain, so `user:⟨alice⟩` and `user:alice` compare equal."""
    value = body.get(name)
    if not isinstance(value, str) or not value.strip():
        raise Invalid(f"{name}: is required (a record id <table>:<key>)")
    value = value.strip()
    tb, sep, key = value.partition(":")
    if not sep or not is_identifier(tb) or not key or len(value) > _MAX_ID:
        raise Invalid(f"{name}: must be a record id <table>:<key>, got {value[:80]!r}")
    if table is not None and tb != table:
        raise Invalid(f"{name}: must be a {table} record, got {value[:80]!r}")
    if len(key) > 2 and ((key[0], key[-1]) in (("⟨", "⟩"), ("`", "`"))) and is_identifier(
            key[1:-1]):
        key = key[1:-1]
    return f"{tb}:{key}"


def _seconds(body: Mapping[str, Any], name: str, default: float | None = None) -> float:
    value = body.get(name, default)
    if value is None:
        raise Invalid(f"{name}: is required (a number of seconds)")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise Invalid(f"{name}: must be a number of seconds")
    return float(value)


def _optional_name(body: Mapping[str, Any], name: str, default: str) -> str:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, str) or not value.strip() or len(value) > 256:
        raise Invalid(f"{name}: must be a non-empty string")
    return value


@dataclass(frozen=True)
class Minted:
    """A minted token and its expiry (epoch seconds)."""

    token: str
    exp: int

    def body(self) -> dict[str, Any]:
        """The 200 reply body `{token, exp}`."""
        return {"token": self.token, "exp": self.exp}


@dataclass(frozen=True)
class UserSearch:
    """A validated `/impersonate/users` body and the query that answers it."""

    table: str
    fields: tuple[str, ...]
    search: str
    limit: int

    @classmethod
    def from_body(cls, body: Any) -> UserSearch:
        """Validate `{table, fields?, search?, limit?}`; Invalid names the bad field.

        `limit` defaults to 20 and is capped at 100 (spec, Limits); below 1 is invalid."""
        if not isinstance(body, dict):
            raise Invalid("the body must be a JSON object {table, fields, search, limit}")
        table = body.get("table")
        if not is_identifier(table):
            raise Invalid(f"table: must be a plain identifier, got {str(table)[:80]!r}")
        if str(table).startswith("_00_"):
            raise Invalid("table: the service's own tables hold no users")
        fields = body.get("fields") or []
        if not isinstance(fields, list) or not all(is_identifier(f) for f in fields):
            raise Invalid("fields: must be an array of plain identifiers")
        refused = [f for f in fields if f not in USER_FIELDS and f != "id"]
        if refused:
            raise Invalid(f"fields: {', '.join(refused[:5])} may not be searched; allowed: "
                          f"{', '.join(sorted(USER_FIELDS))}")
        if len(fields) > 32:
            raise Invalid("fields: at most 32 fields")
        search = body.get("search") or ""
        if not isinstance(search, str) or len(search) > 256:
            raise Invalid("search: must be a string of at most 256 characters")
        limit = body.get("limit", DEFAULT_LIMIT)
        if limit is None:
            limit = DEFAULT_LIMIT
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise Invalid("limit: must be a positive integer")
        return cls(str(table), tuple(dict.fromkeys(fields)), search, min(limit, MAX_LIMIT))

    def query(self) -> tuple[str, dict[str, Any]]:
        """Two statements: the operator roster (empty when `_00_admin` does not exist) and
        the matching rows ordered by id. Identifiers are checked plain, so formatting them
        into the text is safe; the search text is a parameter."""
        # Only the id, the searched fields and `is_admin` leave the database: a user row
        # often holds a password hash or tokens, which a people picker has no use for.
        columns = ", ".join(["id", *[f for f in self.fields if f not in ("id", "is_admin")],
                             "is_admin"])
        tests = ["string::contains(string::lowercase(<string> id), $s)"]
        tests += [f"string::contains(string::lowercase(<string> ({f} ?? '')), $s)"
                  for f in self.fields]
        text = (
            "LET $r = IF (INFO FOR DB).tables._00_admin != NONE "
            "{ (SELECT VALUE IF record != NONE { <string> record } ELSE { ident } "
            "FROM _00_admin) } ELSE { [] }; RETURN $r; "
            f"SELECT {columns} FROM {self.table} WHERE {' OR '.join(tests)} ORDER BY id LIMIT $n;")
        return text, {"s": self.search.lower(), "n": self.limit}


def shape_users(rows: list[dict[str, Any]], roster: Any, fields: tuple[str, ...]
                ) -> list[dict[str, Any]]:
    """Rows (already in their JSON form) with `is_admin`: true when the row's own `is_admin`
    field is true, or its id is a record on the `_00_admin` roster (an entry's bound record,
    or an entry that is a record id: `svc admin add`), exactly, as the admin sign-in matches:
    a look-alike name is not an admin."""
    if isinstance(roster, str):
        roster = [roster]
    entries = {str(e) for e in roster or []}
    return [{**row, "is_admin": row.get("is_admin") is True or (
        isinstance(row.get("id"), str) and row["id"] in entries)} for row in rows]


class Impersonation:
    """The routes' shared behaviour for one component (its secret, flag and database)."""

    def __init__(self, enabled: bool, secret: str | None, ns: str, db: str) -> None:
        self.enabled = bool(enabled and secret)
        self._key = signing_key(secret) if secret else ""
        self.ns = ns
        self.db = db

    def mint(self, body: Any, now: float | None = None) -> Minted:
        """Sign a token for `body` (see the module docstring); Invalid for a bad body."""
        if not self.enabled:
            raise RuntimeError("impersonation is disabled")  # callers answer 404 first
        if not isinstance(body, dict):
            raise Invalid("the body must be a JSON object {session, target, admin, ...}")
        session = _record_text(body, "session", SESSION_TABLE)
        target = _record_text(body, "target")
        admin = _record_text(body, "admin")
        if target == admin:
            raise Invalid("target: must differ from admin (nobody impersonates themselves)")
        ttl = _seconds(body, "ttl_secs", float(MAX_TOKEN_SECS))
        remaining = _seconds(body, "session_remaining_secs")
        if remaining < 1:
            raise Invalid("session_remaining_secs: the impersonation session has expired")
        if ttl < 1:
            raise Invalid("ttl_secs: must be at least 1 second")
        access = body.get("access")
        if access is not None and not is_identifier(access):
            raise Invalid("access: must be a plain identifier (an access method name)")
        ns = _optional_name(body, "ns", self.ns)
        db = _optional_name(body, "db", self.db)
        issued = int(now if now is not None else time.time())
        # Whole seconds, rounded down, so the token never outlives the session.
        exp = issued + int(min(ttl, float(MAX_TOKEN_SECS), remaining))
        claims: dict[str, Any] = {
            "iat": issued, "nbf": issued, "exp": exp, "jti": uuid.uuid4().hex,
            "NS": ns, "DB": db, "AC": ACCESS, "ID": target,
            "imp": session, "imp_admin": admin,
        }
        if access is not None:
            claims["imp_access"] = access  # the access method the target signs in with
        token = jwt.encode(claims, self._key, algorithm="HS256")
        return Minted(token, exp)
