"""Helpers of the backup tests: an app database made by the engine itself (cheap to seed),
table digests read by keyset pages, JSON requests."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
from surrealdb import RecordID

from dbclient import Database
from engine.hashing import bytes_hash, hash_text
from engine.values import canonical_bytes
from tests.support.ssp_stack import APP_SCHEMA

SCHEMA = APP_SCHEMA + "DEFINE TABLE likes TYPE RELATION IN user OUT post;"


async def jreq(http: aiohttp.ClientSession, method: str, url: str, *, token: str | None = None,
               body: Any = None) -> tuple[int, Any]:
    """One request; (status, JSON body or text)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with http.request(method, url, json=body, headers=headers) as r:
        text = await r.text()
        try:
            return r.status, json.loads(text) if text else None
        except ValueError:
            return r.status, text


async def seed(root: Database, users: int, posts: int, likes: int) -> None:
    """``users`` users, ``posts`` posts owned round-robin, ``likes`` edges user -> post."""
    await root.query(SCHEMA)
    await root.query("INSERT INTO user $rows", {"rows": [
        {"id": RecordID("user", f"u{i}"), "name": f"user {i}", "pass": "x"}
        for i in range(users)]})
    for start in range(0, posts, 1000):  # rows made by the engine: seeding stays cheap
        await root.query(
            "INSERT INTO post (SELECT VALUE {id: type::record('post', $this), owner: "
            "type::record('user', 'u' + <string> ($this % $users)), title: 'post ' + "
            "<string> $this, n: ($this * 7919) % 100003} FROM array::range($s, $e)) RETURN NONE",
            {"s": start, "e": min(posts, start + 1000), "users": users})
    if likes:
        await root.query("FOR $i IN 0..$n { RELATE (type::record('user', 'u' + <string> "
                         "($i % $users)))->likes->(type::record('post', $i * 3)) }",
                         {"n": likes - 1, "users": users})


async def table_digest(root: Database, table: str, page: int = 5000) -> tuple[int, str]:
    """(rows, hash) of a table as the database holds it, read by keyset pages."""
    n, h = 0, 0
    last = None
    while True:
        if last is None:
            rows = await root.query_one(f"SELECT * FROM {table} ORDER BY id LIMIT {page}",
                                        idempotent=True)
        else:
            rows = await root.query_one(f"SELECT * FROM {table} WHERE id > $l ORDER BY id "
                                        f"LIMIT {page}", {"l": last}, idempotent=True)
        for row in rows or []:
            h ^= bytes_hash(canonical_bytes(row))
        n += len(rows or [])
        if not rows or len(rows) < page:
            return n, hash_text(h)
        last = rows[-1]["id"]


async def digests(root: Database, tables: tuple[str, ...] = ("user", "post", "likes")
                  ) -> dict[str, tuple[int, str]]:
    return {t: await table_digest(root, t) for t in tables}
