"""The database layer: one SurrealDB client (over the official SDK) for every component.

Components reach the database only through this package and a URL (`SVC_DB_URL`), never by
importing the database host, so code that works on the embedded host works on a real server.
"""

from dbclient import cbor as _cbor

_cbor.install()  # the SDK's wire codec through cbor2's C extension (see dbclient.cbor)

from dbclient.config import DbConfig, DbUrl, normalise_db_url
from dbclient.database import Database, LiveSubscription, record_signin
from dbclient.errors import DbAuthError, DbConnectionError, DbError, DbQueryError, DbTimeout
from dbclient.sql import (
    SQL_NULL,
    SqlNull,
    build_transaction,
    check_params,
    is_identifier,
    rename_params,
    require_identifier,
    schema_fingerprint,
    show_changes_sql,
)

__all__ = [
    "SQL_NULL",
    "Database",
    "DbAuthError",
    "DbConfig",
    "DbConnectionError",
    "DbError",
    "DbQueryError",
    "DbTimeout",
    "DbUrl",
    "LiveSubscription",
    "SqlNull",
    "build_transaction",
    "check_params",
    "is_identifier",
    "normalise_db_url",
    "record_signin",
    "rename_params",
    "require_identifier",
    "schema_fingerprint",
    "show_changes_sql",
]
