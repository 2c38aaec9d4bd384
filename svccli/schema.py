"""`svc schema apply`: write the service's meta schema and per-table sync hooks, idempotently.

What it writes
- Meta tables (all SCHEMALESS; record users are refused unless stated):
  `_00_query` (view rows; a record user may create, read, refresh `lastActiveAt` on, and
  delete only its own rows: `auth_id = $auth.id`, with `auth_id` set to `$auth.id` by the
  field's VALUE whatever the client sent. A row a client creates (`surql`, `params`,
  `clientId`, `ttl`, `lastActiveAt`: written once, never updated by a record user) asks the
  service to register the view (`dbclient.viewrows`); `state`, `rowCount`, `subscribers`
  and `error` (a refusal written back) are the service's alone), `_00_version`
  (per-record content versions, id `[table, record key]`), `_00_list_ref` (shared edge
  table for ref mode `single`, `TYPE RELATION`, readable where `auth_id = $auth.id`, never writable by record users),
  `_00_schema_state` (per synced table schema fingerprint, id = table name),
  `_00_query_allowlist`, `_00_admin` (operator roster), `_00_crdt` (Loro state of `@crdt`
  fields, `ssp.crdt`), `_00_impersonation` (impersonation
  sessions `{admin, target, created_at, expires_at, revoked_at}`: the admin record user reads
  and revokes its own; `revoked_at` once set is final).
- Impersonation: `fn::_00_impersonate::start($admin, $target, $ttl)` (system users),
  `::active($session, $target)` (system), `::remaining_secs($session)`, `::revoke($session)`;
  and, only with `SVC_IMPERSONATION=on` (which needs `SVC_AUTH_SECRET`), the record access
  `_00_impersonate`: HS256 JWTs signed with `maintenance.impersonation.signing_key` (derived
  from the secret), whose AUTHENTICATE block refuses a token whose `imp` session is revoked,
  expired or for another target; sessions last 10 seconds (a revoked or expired
  impersonation ends within them). With the flag off the access method
  is removed, so every impersonation token stops authenticating.
- With a project file: each backend's outbox schema (`method.schema`), after the meta tables
  and before the sync hooks, so its tables are synced in the same run (`svccli.outbox`).
- For every synced table (not `_00_*`, no `@nosync` in its comment, not a computed view):
  field `_00_rv` = the row's content version, `$before + 1` on every write (a record created
  again goes on from its `_00_version` row, so versions never go back), computed by
  the engine inside the writing transaction (a field VALUE, not an event writing the table back,
  so there is no recursion and no second write); and an event that mirrors it into
  `_00_version` (rv, deleted) in the same transaction. Events run without the writer's table
  permissions, so record users' writes bump `_00_version` although they cannot read it.
  - transport `changefeed`: `ALTER TABLE t CHANGEFEED <retention> INCLUDE ORIGINAL` (ALTER keeps
    the table's type, schema mode, permissions, comment, fields and events) plus events
    `_00_<t>_version` (CREATE, UPDATE) and `_00_<t>_version_gone` (DELETE); meta tables
    `_00_query`, `_00_version` and `_00_list_ref` carry the same
    changefeed (the scheduler reads `_00_query` deletes from it; the embedded host serves LIVE on
    `_00_version`/`_00_list_ref` by tailing changefeeds).
  - transport `http`: events `_00_<t>_mutation` and `_00_<t>_delete` that bump `_00_version` and
    `http::post` `{table, op, id, record, record_cbor}` (`record_cbor`: the row as the
    database's CBOR in base64, typed where JSON is not, `dbclient.eventrecord`) to the ingest
    URL with `Authorization: Bearer
    <ingest credential>`, and `_00_dbsp_cleanup` on `_00_query` posting `{id}` to
    `/view/unregister`. The credential is derived from `SVC_AUTH_SECRET`
    (`ipc.peerauth.ingest_credential`) and opens only those two routes: the database holds it
    (a viewer or `INFO FOR DB` can read a param, and a backup would copy it if the exporter did
    not skip it), so it must not be the secret. The URL and the credential live in database
    params `$_00_ingest_url`, `$_00_unregister_url` and `$_00_ingest_token` (PERMISSIONS NONE),
    bound as parameters when defined; the `$_00_ingest_secret` of older releases (which held
    the secret itself) is removed.
- `_00_schema_state`: one row per synced table with its fingerprint (xxh3 of DEFINE TABLE +
  INFO FOR TABLE), rewritten only when it moves; rows of tables no longer synced are removed.

Re-running changes nothing: tables are (re)defined only when their definition differs (a table
redefinition would add an entry to its changefeed), and fields, events and params are written
with OVERWRITE, which leaves identical text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dbclient import Database, DbQueryError, is_identifier, schema_fingerprint
from ipc.peerauth import ingest_credential
from maintenance.impersonation import signing_key
from svccli.outbox import OutboxResult, OutboxSchema, outbox_schemas
from svccli.settings import ConfigError, SchemaSettings, parse_duration_ns

META_PREFIX = "_00_"
NOSYNC_MARK = "@nosync"
OWN_ROWS = "auth_id = $auth.id"


class HttpTransportUnsupported(ConfigError):
    """The database cannot run `http::*` functions, so transport http cannot work."""


@dataclass(frozen=True)
class MetaTable:
    """One meta table: its kind, comment, record-user permissions, fields and feed."""

    name: str
    comment: str
    select: str | None = None  # WHERE expression for record users; None = NONE
    create: str | None = None
    update: str | None = None
    delete: str | None = None
    relation: bool = False
    fields: tuple[str, ...] = ()  # DEFINE FIELD tails: "<name> TYPE ..."
    changefeed: bool = False  # carries the changefeed under transport `changefeed`
    indexes: tuple[str, ...] = ()  # DEFINE INDEX tails: "<name> FIELDS ..."


_SERVICE_ONLY = "PERMISSIONS FOR select FULL, FOR create, update NONE"
# Written by the record user that creates its row, then never changed by one (the service
# registered the view with these values; a changed `surql` would go unnoticed).
_CLIENT_ONCE = "PERMISSIONS FOR select FULL, FOR create FULL, FOR update NONE"
_FIXED = "PERMISSIONS FOR select FULL, FOR create, update NONE"
IMP_OWNER = "admin = $auth"

META_TABLES: tuple[MetaTable, ...] = (
    MetaTable(
        "_00_query",
        "view rows: one per client session x query; deleting a row unregisters the view",
        select=OWN_ROWS, create=OWN_ROWS, update=OWN_ROWS, delete=OWN_ROWS, changefeed=True,
        fields=(
            f"surql TYPE option<string> {_CLIENT_ONCE}",
            f"params TYPE any {_CLIENT_ONCE}",
            f"clientId TYPE option<string> {_CLIENT_ONCE}",
            # A record user's row is always its own: the value it sent is replaced by its
            # `$auth.id` (system users, the service, have no `$auth.id` and write it as given).
            ("auth_id TYPE any VALUE IF $auth.id != NONE THEN $auth.id ELSE $value END "
             "PERMISSIONS FOR select FULL, FOR create FULL, FOR update NONE"),
            # Record users refresh it on their own rows: never later than now (plus skew), so
            # a date in the far future cannot keep a view alive for ever (ssp.hub.loops also
            # ignores such a value); a string must read as a date.
            ("lastActiveAt TYPE option<datetime | string> ASSERT $value = NONE OR (IF "
             "type::is_string($value) THEN <datetime> $value ELSE $value END) "
             "<= time::now() + 1m"),
            f"ttl TYPE option<duration | string> {_CLIENT_ONCE}",
            f"subscribers TYPE option<int> {_SERVICE_ONLY}",
            f"rowCount TYPE option<int> {_SERVICE_ONLY}",
            ("state TYPE option<string> ASSERT $value = NONE OR $value IN "
             f"['materializing', 'ready'] {_SERVICE_ONLY}"),
            # The service's refusal of a row's registration, `{error, message, status}`.
            f"error TYPE option<object> {_SERVICE_ONLY}",
        ),
    ),
    MetaTable(
        "_00_version",
        "per-record content versions, id [table, record key]; rv mirrors _00_rv of the row",
        changefeed=True,
    ),
    MetaTable(
        "_00_list_ref",
        "shared view-membership edges (ref mode single): in = view, out = row",
        select=OWN_ROWS, relation=True, changefeed=True,
        # (Re)materialising a view deletes its prior edges `WHERE in = $q`: without the index
        # that scans every user's edges (25,000 edges: 183 ms per view; indexed: 1.3 ms).
        indexes=("_00_list_ref_in FIELDS in",),
    ),
    MetaTable("_00_schema_state", "schema fingerprint per synced table, id = table name"),
    MetaTable("_00_query_allowlist", "allowed query shapes, one row per <app>__<version>"),
    MetaTable("_00_admin", "operator roster for the admin listener (managed by the CLI)"),
    MetaTable("_00_crdt", "Loro state of @crdt fields, id [table, record key, field]"),
    MetaTable(
        "_00_impersonation",
        "impersonation sessions: admin acts as target until expires_at or revoked_at",
        # The admin reads and revokes its own sessions; only system users create them
        # (fn::_00_impersonate::start). The impersonated session ($auth = target) sees none.
        select=IMP_OWNER, update=IMP_OWNER,
        fields=(
            f"admin TYPE record {_FIXED}",
            f"target TYPE record {_FIXED}",
            f"created_at TYPE datetime DEFAULT time::now() {_FIXED}",
            f"expires_at TYPE datetime {_FIXED}",
            # Once set, never cleared: a revocation is final, even for the admin.
            "revoked_at TYPE option<datetime> VALUE $before ?? $value",
        ),
    ),
)

HTTP_PARAMS = ("_00_ingest_url", "_00_unregister_url", "_00_ingest_token")
#: params of older releases, removed by every apply (`_00_ingest_secret` held the secret)
RETIRED_PARAMS = ("_00_ingest_secret",)
#: params that hold a credential: never written into a backup (backup/schema.py reads this)
CREDENTIAL_PARAMS = ("_00_ingest_token", *RETIRED_PARAMS)

#: `fn::_00_impersonate::*`. `start` and `active` are for system users only (the backend
#: that opens a session; the access method's AUTHENTICATE block, which runs as the system);
#: `remaining_secs` and `revoke` may be called by the admin record user, whose table
#: permissions limit them to its own sessions.
IMPERSONATE_FUNCTIONS: tuple[str, ...] = (
    ("DEFINE FUNCTION OVERWRITE fn::_00_impersonate::start($admin: record, $target: record, "
     "$ttl: duration) -> object { "
     "IF $admin = $target { THROW 'an admin cannot impersonate themselves' }; "
     "IF $ttl <= 0s { THROW 'the session duration must be positive' }; "
     "RETURN CREATE ONLY _00_impersonation SET admin = $admin, target = $target, "
     "expires_at = time::now() + $ttl; } "
     "COMMENT 'open an impersonation session (system users only)' PERMISSIONS NONE"),
    ("DEFINE FUNCTION OVERWRITE fn::_00_impersonate::active($session: any, $target: any) "
     "-> bool { "
     "LET $s = IF type::is_record($session, '_00_impersonation') "
     "{ (SELECT * FROM ONLY $session) } ELSE { NONE }; "
     "RETURN $s != NONE AND $s.revoked_at = NONE AND $s.expires_at > time::now() "
     "AND $s.target = $target; } "
     "COMMENT 'is the session open for this target (the access method asks)' "
     "PERMISSIONS NONE"),
    ("DEFINE FUNCTION OVERWRITE fn::_00_impersonate::remaining_secs("
     "$session: record<_00_impersonation>) -> int { "
     "LET $s = (SELECT * FROM ONLY $session); "
     "RETURN IF $s = NONE OR $s.revoked_at != NONE OR $s.expires_at <= time::now() { 0 } "
     "ELSE { duration::secs($s.expires_at - time::now()) }; } "
     "COMMENT 'seconds the session has left, 0 when revoked or expired (for the mint)' "
     "PERMISSIONS FULL"),
    ("DEFINE FUNCTION OVERWRITE fn::_00_impersonate::revoke("
     "$session: record<_00_impersonation>) -> bool { "
     "UPDATE $session SET revoked_at = time::now() RETURN NONE; "
     "RETURN (SELECT VALUE revoked_at FROM ONLY $session) != NONE; } "
     "COMMENT 'end a session for good; tokens minted for it stop authenticating' "
     "PERMISSIONS FULL"),
)

#: How long a connection authenticated with an impersonation token stays signed in. The
#: engine checks revocation only when a token authenticates, a session outlives its token
#: (measured: core 3.2.4 keeps a session past the token's `exp`), and the session duration is
#: fixed when the access is defined (an expression there is evaluated once, then): so this
#: bounds how long a revoked or expired impersonation keeps an already open connection. A
#: client re-authenticates with its token when the session ends (the token lasts up to 1 h);
#: each time the AUTHENTICATE block checks the session row again. `SVC_IMPERSONATION_SESSION`
#: (ours) sets it (`SchemaSettings.impersonation_session_ms`, default 10 s).
def impersonation_access_sql(key: str, session_ms: int) -> str:
    """DEFINE ACCESS `_00_impersonate` with the HS256 `key` and a session of `session_ms`
    milliseconds (never log this text)."""
    assert "'" not in key and "\\" not in key, "the key is hex"
    return (
        "DEFINE ACCESS OVERWRITE _00_impersonate ON DATABASE TYPE RECORD "
        f"WITH JWT ALGORITHM HS256 KEY '{key}' "
        "AUTHENTICATE { IF !fn::_00_impersonate::active(type::record($token.imp), $auth) "
        "{ THROW 'the impersonation session is revoked, expired or not for this user' }; "
        "RETURN $auth; } "
        f"DURATION FOR TOKEN 1h, FOR SESSION {int(session_ms)}ms")


# ---------------------------------------------------------------------- statement builders


def meta_table_sql(t: MetaTable, retention: str | None, keep_feed: str | None = None) -> str:
    """The DEFINE TABLE OVERWRITE statement for a meta table.

    `retention` (transport changefeed) gives the tables that carry a feed `CHANGEFEED
    <retention> INCLUDE ORIGINAL`; otherwise `keep_feed` (an existing `CHANGEFEED` clause's
    arguments, e.g. `1h INCLUDE ORIGINAL`) is kept as it is: we never remove a feed someone
    else relies on (the embedded host adds feeds to tables it serves LIVE on).
    """
    kind = "RELATION" if t.relation else "NORMAL"
    assert "'" not in t.comment and "\\" not in t.comment, "comments are formatted as literals"
    if retention and t.changefeed:
        feed = f" CHANGEFEED {retention} INCLUDE ORIGINAL"
    else:
        feed = f" CHANGEFEED {keep_feed}" if keep_feed else ""

    def perm(expr: str | None) -> str:
        return f"WHERE {expr}" if expr else "NONE"

    return (
        f"DEFINE TABLE OVERWRITE {t.name} TYPE {kind} SCHEMALESS{feed} COMMENT '{t.comment}' "
        f"PERMISSIONS FOR select {perm(t.select)} FOR create {perm(t.create)} "
        f"FOR update {perm(t.update)} FOR delete {perm(t.delete)}"
    )


def desired_meta_structure(t: MetaTable, retention_ns: int | None) -> dict[str, Any]:
    """What `INFO FOR DB STRUCTURE` reports for `t` once defined (compared before redefining)."""
    return {
        "kind": "RELATION" if t.relation else "NORMAL",
        "schemafull": False,
        "comment": t.comment,
        "permissions": {
            "select": t.select or False,
            "create": t.create or False,
            "update": t.update or False,
            "delete": t.delete or False,
        },
        "changefeed": (retention_ns, True) if retention_ns and t.changefeed else None,
    }


def current_structure(entry: Mapping[str, Any]) -> dict[str, Any]:
    """Project an `INFO FOR DB STRUCTURE` table entry onto the keys we manage."""
    feed = entry.get("changefeed")
    kind = entry.get("kind") or {}
    return {
        "kind": kind.get("kind") if isinstance(kind, Mapping) else kind,
        "schemafull": bool(entry.get("schemafull")),
        "comment": entry.get("comment"),
        "permissions": dict(entry.get("permissions") or {}),
        "changefeed": _feed_tuple(feed),
    }


def _feed_tuple(feed: Any) -> tuple[int, bool] | None:
    if not isinstance(feed, Mapping):
        return None
    expiry = feed.get("expiry")
    elapsed = getattr(expiry, "elapsed", expiry)
    return (int(elapsed) if elapsed is not None else 0, bool(feed.get("original")))


def version_upsert(table: str, which: str, deleted: bool) -> str:
    """UPSERT of the `_00_version` row of the record in `$before`/`$after` (`which`)."""
    rv = f"(${which}._00_rv ?? 0) + 1" if deleted else f"${which}._00_rv"
    return (f"UPSERT type::record('_00_version', ['{table}', record::id(${which}.id)]) "
            f"SET rv = {rv}, deleted = {'true' if deleted else 'false'}")


def typed_copy(doc: str) -> str:
    """The row as the database's own CBOR in base64 text, posted beside its JSON: JSON loses
    record links, datetimes, decimals and durations of SCHEMALESS fields
    (`dbclient.eventrecord`)."""
    return f"encoding::base64::encode(encoding::cbor::encode({doc}))"


def own_record(table: str, doc: str) -> str:
    """An event's guard: the document is a record of the event's own table. SurrealDB 3.0.x
    also runs a table's events for each edge a DELETE of its record removes, with the edge
    as `$before` (3.2 does not): without the guard, transport http posts the edge as a row of
    the table (the ingest refuses it, so the application's DELETE fails) and the version
    event writes a `_00_version` row for it."""
    return f"record::tb(({doc}).id) = '{table}'"


def synced_table_sql(table: str, transport: str, retention: str,
                     current_feed: tuple[int, bool] | None) -> list[str]:
    """Statements that hook one application table into the service (idempotent)."""
    if not is_identifier(table):
        raise ValueError(f"table {table!r} is not a plain identifier")
    out: list[str] = []
    if transport == "changefeed" and current_feed != (parse_duration_ns(retention), True):
        out.append(f"ALTER TABLE {table} CHANGEFEED {retention} INCLUDE ORIGINAL")
    # The engine computes the version from the field's own previous value ($before in a field
    # VALUE), so writes by record users bump it too, and a client-supplied value is ignored.
    # A record created again goes on from its `_00_version` row (the DELETE left rv + 1
    # there): versions never go back, or a wait for the DELETE's version (transport http,
    # ssp/hub/visibility.py) would see the re-created row's lower one and wait it out. A
    # record user cannot read `_00_version`: its re-create starts again at 1, as before.
    out.append(f"DEFINE FIELD OVERWRITE _00_rv ON {table} TYPE int VALUE IF $before != NONE "
               f"{{ $before + 1 }} ELSE {{ ((SELECT VALUE rv FROM ONLY type::record("
               f"'_00_version', ['{table}', record::id($this.id)])) ?? 0) + 1 }} "
               "COMMENT 'row content version, bumped by every write (svc schema apply)'")
    if transport == "changefeed":
        # Two events, each one plain UPSERT under its WHEN, not one event branching on
        # $event: the engine ran the branching form at ~2x the CPU of the plain one, and the
        # event is most of what an application's UPDATE costs it (loadtests/probe_host_costs.py).
        # A CREATE or UPDATE always has its own record as $after; only a DELETE needs the
        # guard (`own_record`).
        out += [
            f"REMOVE EVENT IF EXISTS _00_{table}_mutation ON {table}",
            f"REMOVE EVENT IF EXISTS _00_{table}_delete ON {table}",
            (f"DEFINE EVENT OVERWRITE _00_{table}_version ON {table} "
             f"WHEN $event != 'DELETE' THEN {version_upsert(table, 'after', False)}"),
            (f"DEFINE EVENT OVERWRITE _00_{table}_version_gone ON {table} "
             f"WHEN $event = 'DELETE' AND {own_record(table, '$before')} "
             f"THEN {version_upsert(table, 'before', True)}"),
        ]
    else:
        headers = "{ Authorization: 'Bearer ' + $_00_ingest_token }"
        out += [
            f"REMOVE EVENT IF EXISTS _00_{table}_version ON {table}",
            f"REMOVE EVENT IF EXISTS _00_{table}_version_gone ON {table}",
            (f"DEFINE EVENT OVERWRITE _00_{table}_mutation ON {table} "
             f"WHEN $event IN ['CREATE', 'UPDATE'] AND {own_record(table, '$after')} THEN {{ "
             f"{version_upsert(table, 'after', False)}; "
             f"http::post($_00_ingest_url, {{ table: '{table}', op: $event, "
             f"id: <string> $after.id, record: $after, record_cbor: {typed_copy('$after')} "
             f"}}, {headers}); }}"),
            (f"DEFINE EVENT OVERWRITE _00_{table}_delete ON {table} "
             f"WHEN $event = 'DELETE' AND {own_record(table, '$before')} THEN {{ "
             f"{version_upsert(table, 'before', True)}; "
             f"http::post($_00_ingest_url, {{ table: '{table}', op: 'DELETE', "
             f"id: <string> $before.id, record: $before, record_cbor: {typed_copy('$before')} "
             f"}}, {headers}); }}"),
        ]
    return out


def query_cleanup_sql(transport: str) -> str:
    """`_00_dbsp_cleanup` on `_00_query` (http) or its removal (changefeed reads deletes)."""
    if transport == "changefeed":
        return "REMOVE EVENT IF EXISTS _00_dbsp_cleanup ON _00_query"
    return ("DEFINE EVENT OVERWRITE _00_dbsp_cleanup ON _00_query WHEN $event = 'DELETE' THEN { "
            "http::post($_00_unregister_url, { id: <string> record::id($before.id) }, "
            "{ Authorization: 'Bearer ' + $_00_ingest_token }); }")


def query_request_sql(transport: str) -> str:
    """`_00_query_request` on `_00_query` (http): a row a client wrote to ask for a view
    (`dbclient.viewrows.is_request`: a query, no state, no refusal) posted to the ingest as
    a `_00_query` event, as the changefeed would have carried it; rows the service itself
    updates (state, rowCount) are not posted. Removed under changefeed, which reads them."""
    if transport == "changefeed":
        return "REMOVE EVENT IF EXISTS _00_query_request ON _00_query"
    return ("DEFINE EVENT OVERWRITE _00_query_request ON _00_query "
            "WHEN $event IN ['CREATE', 'UPDATE'] AND type::is_string($after.surql) "
            "AND $after.state = NONE AND $after.error = NONE THEN { "
            "http::post($_00_ingest_url, { table: '_00_query', op: $event, "
            "id: <string> $after.id, record: $after, "
            f"record_cbor: {typed_copy('$after')} }}, "
            "{ Authorization: 'Bearer ' + $_00_ingest_token }); }")


# ---------------------------------------------------------------------- apply


@dataclass
class ApplyReport:
    """What `apply_schema` did, per object: created, updated or unchanged."""

    transport: str
    meta: dict[str, str] = field(default_factory=dict)
    synced: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    fingerprints: dict[str, str] = field(default_factory=dict)
    updated_state: list[str] = field(default_factory=list)
    removed_state: list[str] = field(default_factory=list)
    access: str = ""  # what happened to the `_00_impersonate` access method
    outboxes: list[OutboxResult] = field(default_factory=list)
    project_dir: Path | None = None

    def lines(self) -> list[str]:
        """A short human summary (never contains the secret or the ingest URL's params)."""
        out = [f"transport: {self.transport}"]
        out += [f"meta   {name}: {status}" for name, status in self.meta.items()]
        if self.access:
            out.append(f"access _00_impersonate: {self.access}")
        out += [r.line(self.project_dir or Path("/")) for r in self.outboxes]
        out += [f"synced {name}: {status}" for name, status in self.synced.items()]
        out += [f"skip   {name}: {why}" for name, why in self.skipped.items()]
        out += [f"schema state written for {name}" for name in self.updated_state]
        out += [f"schema state removed for {name}" for name in self.removed_state]
        changed = sum(1 for s in [*self.meta.values(), *self.synced.values()] if s != "unchanged")
        out.append(f"{changed} object(s) created or updated, "
                   f"{len(self.meta) + len(self.synced) - changed} unchanged")
        return out


async def probe_http_functions(db: Database, url: str) -> None:
    """Fail with HttpTransportUnsupported when the database cannot run `http::*` functions.

    A network failure (the ingest service not up yet) proves the functions exist and passes.
    """
    try:
        await db.query("RETURN http::head($u)", {"u": url})
    except DbQueryError as e:
        msg = e.engine_message
        low = msg.lower()
        # A remote answer ("error processing a remote HTTP request: 405 Method Not Allowed")
        # proves the functions run; refusals name the function, the target or the feature.
        refused = ("not enabled" in low or "network target" in low
                   or "not allowed to be executed" in low or "capabilit" in low)
        if refused and "remote http request:" not in low:
            raise HttpTransportUnsupported(
                "transport http needs the database to run http::post in events, but it "
                f"refuses: {msg}. Use --transport changefeed (or sync.transport: changefeed), "
                "or enable network functions on the database server.") from None


async def apply_schema(db: Database, settings: SchemaSettings) -> ApplyReport:
    """Write the meta schema and sync hooks for `settings.transport`. Idempotent."""
    transport = settings.transport
    retention = settings.retention
    retention_ns = parse_duration_ns(retention) if transport == "changefeed" else None
    report = ApplyReport(transport, project_dir=settings.project.dir if settings.project
                         else None)
    # read and checked before anything is written: a refused file changes nothing
    outboxes = outbox_schemas(settings.project) if settings.project is not None else []

    if transport == "http":
        assert settings.ingest_url is not None
        await probe_http_functions(db, settings.ingest_url)

    structure = await _structure(db)
    definitions = await db.table_definitions()
    before = {name: await _fingerprint(db, name, definitions) for name in definitions}

    for t in META_TABLES:
        statements: list[tuple[str, dict[str, Any] | None]] = []
        cur = structure.get(t.name)
        desired = desired_meta_structure(t, retention_ns)
        keep_feed: str | None = None
        if cur is not None and desired["changefeed"] is None:
            # Not ours to have a feed here, but not ours to remove one either.
            desired["changefeed"] = _feed_tuple(cur.get("changefeed"))
            keep_feed = _feed_clause(definitions.get(t.name, ""))
        if cur is None or current_structure(cur) != desired:
            statements.append(
                (meta_table_sql(t, retention if retention_ns else None, keep_feed), None))
        for f in t.fields:
            fname, rest = f.split(" ", 1)
            statements.append((f"DEFINE FIELD OVERWRITE {fname} ON {t.name} {rest}", None))
        for ix in t.indexes:
            iname, rest = ix.split(" ", 1)
            statements.append((f"DEFINE INDEX IF NOT EXISTS {iname} ON {t.name} {rest}", None))
        if t.name == "_00_query":
            statements.append((query_cleanup_sql(transport), None))
            statements.append((query_request_sql(transport), None))
        if statements:
            await db.transaction(statements)

    if transport == "http":
        assert settings.ingest_url is not None and settings.service_base_url is not None
        await db.transaction([
            ("DEFINE PARAM OVERWRITE $_00_ingest_url VALUE $v PERMISSIONS NONE",
             {"v": settings.ingest_url}),
            ("DEFINE PARAM OVERWRITE $_00_unregister_url VALUE $v PERMISSIONS NONE",
             {"v": settings.service_base_url + "/view/unregister"}),
            ("DEFINE PARAM OVERWRITE $_00_ingest_token VALUE $v PERMISSIONS NONE",
             # without a secret the SSP takes any bearer, but a bearer there must be
             {"v": ingest_credential(settings.auth_secret) if settings.auth_secret
              else "no-secret"}),
            *((f"REMOVE PARAM IF EXISTS ${p}", None) for p in RETIRED_PARAMS),
        ])
    else:
        await db.transaction([(f"REMOVE PARAM IF EXISTS ${p}", None)
                              for p in (*HTTP_PARAMS, *RETIRED_PARAMS)])

    # The functions exist either way (the access method calls one); the access method only
    # while impersonation is on, so switching it off ends every impersonation token.
    imp: list[tuple[str, dict[str, Any] | None]] = [(f, None) for f in IMPERSONATE_FUNCTIONS]
    if settings.impersonation:
        imp.append((impersonation_access_sql(signing_key(settings.auth_secret),
                                             settings.impersonation_session_ms), None))
        report.access = "defined"
    else:
        imp.append(("REMOVE ACCESS IF EXISTS _00_impersonate ON DATABASE", None))
        report.access = "removed (SVC_IMPERSONATION is off)"
    await db.transaction(imp)

    if outboxes:
        # before the sync hooks, so the outbox tables are hooked in this same run
        for schema in outboxes:
            report.outboxes.append(await _apply_outbox(db, schema))
        structure = await _structure(db)

    synced: list[str] = []
    for name in sorted(structure):
        entry = structure[name]
        if name.startswith(META_PREFIX):
            continue
        if NOSYNC_MARK in str(entry.get("comment") or ""):
            report.skipped[name] = "comment has @nosync"
            continue
        if entry.get("view"):
            report.skipped[name] = "computed view table (DEFINE TABLE ... AS SELECT)"
            continue
        if not is_identifier(name):
            raise ConfigError(
                f"table {name!r} is not a plain identifier, so it cannot be synced; rename it "
                f"or add {NOSYNC_MARK} to its comment")
        feed = _feed_tuple(entry.get("changefeed"))
        await db.transaction([(s, None) for s in synced_table_sql(name, transport, retention,
                                                                  feed)])
        synced.append(name)

    definitions = await db.table_definitions()
    after = {name: await _fingerprint(db, name, definitions) for name in definitions}
    for t in META_TABLES:
        report.meta[t.name] = _status(before.get(t.name), after.get(t.name))
    for name in synced:
        report.synced[name] = _status(before.get(name), after.get(name))
        fingerprint = after[name]
        assert fingerprint is not None  # synced tables are plain identifiers
        report.fingerprints[name] = fingerprint

    await _write_schema_state(db, report)
    return report


async def _apply_outbox(db: Database, schema: OutboxSchema) -> OutboxResult:
    """One backend's schema file in one transaction; each of its tables' status."""
    definitions = await db.table_definitions()
    before = {t: await _fingerprint(db, t, definitions) if t in definitions else None
              for t in schema.tables}
    try:
        await db.transaction([(s, None) for s in schema.statements])
    except DbQueryError as e:
        raise DbQueryError(f"app {schema.app}: method.schema {schema.file}: "
                           f"{e.engine_message}", e.statement_index) from None
    definitions = await db.table_definitions()
    result = OutboxResult(schema)
    for t in schema.tables:
        after = await _fingerprint(db, t, definitions) if t in definitions else None
        result.tables[t] = _status(before[t], after) if after is not None else "not defined"
    return result


async def _structure(db: Database) -> dict[str, dict[str, Any]]:
    info = await db.query_one("INFO FOR DB STRUCTURE", idempotent=True)
    return {str(t["name"]): t for t in (info or {}).get("tables") or []}


async def _fingerprint(db: Database, name: str, definitions: Mapping[str, str]) -> str | None:
    if not is_identifier(name):
        return None
    return schema_fingerprint(definitions[name], await db.table_info(name))


def _feed_clause(definition: str) -> str | None:
    """The arguments of the `CHANGEFEED` clause in a DEFINE TABLE text, if any."""
    m = re.search(r"\bCHANGEFEED (\S+)( INCLUDE ORIGINAL)?", definition)
    return None if m is None else m.group(1) + (m.group(2) or "")


def _status(before: str | None, after: str | None) -> str:
    if before is None:
        return "created"
    return "unchanged" if before == after else "updated"


async def _write_schema_state(db: Database, report: ApplyReport) -> None:
    rows = await db.query_one("SELECT id, fingerprint FROM _00_schema_state", idempotent=True)
    existing = {str(r["id"].id): r.get("fingerprint") for r in rows or []}
    statements: list[tuple[str, dict[str, Any] | None]] = []
    for name, fp in report.fingerprints.items():
        if existing.get(name) != fp:
            statements.append((
                ("UPSERT type::record('_00_schema_state', $t) SET fingerprint = $fp, "
                 "transport = $tr, updated_at = time::now()"),
                {"t": name, "fp": fp, "tr": report.transport}))
            report.updated_state.append(name)
    for name in sorted(set(existing) - set(report.fingerprints)):
        statements.append(("DELETE type::record('_00_schema_state', $t)", {"t": name}))
        report.removed_state.append(name)
    if statements:
        await db.transaction(statements)
