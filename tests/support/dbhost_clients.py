"""Helpers shared by the database host's integration tests (SDK clients, live streams)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from surrealdb import AsyncSurreal

from tests.support.procs import DbHost

SCHEMA = """
DEFINE TABLE user SCHEMAFULL PERMISSIONS FOR select WHERE id = $auth.id;
DEFINE FIELD name ON user TYPE string;
DEFINE FIELD pass ON user TYPE string;
DEFINE ACCESS account ON DATABASE TYPE RECORD
    SIGNUP (CREATE user SET name = $name, pass = crypto::argon2::generate($pass))
    SIGNIN (SELECT * FROM user WHERE name = $name AND crypto::argon2::compare(pass, $pass))
    DURATION FOR SESSION 1h;
DEFINE TABLE post SCHEMAFULL
    PERMISSIONS FOR select WHERE owner = $auth.id FOR create, update, delete FULL;
DEFINE FIELD owner ON post TYPE record<user>;
DEFINE FIELD title ON post TYPE string;
DEFINE FIELD n ON post TYPE int DEFAULT 0;
"""


def unique_db() -> tuple[str, str]:
    """A namespace/database pair no other test uses."""
    return "test", "db_" + uuid.uuid4().hex[:10]


async def root_client(host: DbHost, ns: str, db: str, url: str | None = None) -> Any:
    """An SDK client signed in as root and using ns/db."""
    client = AsyncSurreal(url or host.ws_url)
    await client.signin({"username": host.user, "password": host.password})
    await client.use(ns, db)
    return client


async def record_user(host: DbHost, ns: str, db: str, name: str, *, signup: bool = True,
                      url: str | None = None) -> Any:
    """An SDK client signed up (or in) as record user `name` through the `account` access."""
    client = AsyncSurreal(url or host.ws_url)
    creds = {"namespace": ns, "database": db, "access": "account",
             "variables": {"name": name, "pass": f"{name}-secret"}}
    if signup:
        await client.signup(creds)
    else:
        await client.signin(creds)
    await client.use(ns, db)
    return client


def stream(client: Any, qid: Any) -> asyncio.Queue[dict[str, Any]]:
    """Every notification of live query `qid` (the whole {id, action, record, result})."""
    q: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    client.live_queues.setdefault(str(qid), []).append(q)
    return q


async def take(q: asyncio.Queue[dict[str, Any]], n: int, timeout: float = 20.0
               ) -> list[dict[str, Any]]:
    """The next n notifications; fails if they do not come (the timeout only stops a hang)."""
    out = []
    for _ in range(n):
        out.append(await asyncio.wait_for(q.get(), timeout))
    return out


def actions(notes: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(action, record id text) of each notification."""
    return [(n["action"], str(n["record"])) for n in notes]


async def close(*clients: Any) -> None:
    """Close SDK clients (the HTTP client keeps no connection and has no close)."""
    for c in clients:
        if hasattr(c, "socket"):
            await c.close()
