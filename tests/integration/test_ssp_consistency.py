"""After random writes through the database, every view's edges equal SurrealDB's own answer
for its query; a shard killed with SIGKILL is restarted and rebuilt, never silently wrong;
held ids registered again (new, identical and refused queries) and deleted `_00_query` rows
leave each view matching its current query, or with nothing left."""

from __future__ import annotations

import asyncio
import os
import random
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from surrealdb import RecordID

from dbclient import Database
from engine.values import record_id_text
from tests.support.procs import DbHost
from tests.support.ssp_stack import (
    APP_SCHEMA,
    Ssp,
    app_write,
    apply_schema,
    edges,
    root_db,
    start_ssp,
    unique_db,
    wait_for,
)

VIEWS = (
    "SELECT * FROM post WHERE owner = $auth.id",
    "SELECT * FROM post WHERE owner = $auth.id AND n > 3",
    "SELECT * FROM post WHERE owner = $auth.id ORDER BY n DESC LIMIT 3",
    "SELECT id, title, n FROM post WHERE n >= 5 ORDER BY n LIMIT 4",
)
USERS = ("u1", "u2", "u3")
# Queries the engine refuses; registering a held id with one keeps its view as it was.
REFUSED = (
    "SELECT * FROM post WHERE owner = $auth.id SPLIT title LIMIT 2",
    "SELECT count() FROM post WHERE owner = $auth.id GROUP BY owner",
    "SELECT * FROM post WHERE " + "(" * 65 + "owner = $auth.id" + ")" * 65,
    "SELECT * FROM post WHERE owner = $auth.id AND title CONTAINSNONE ['x']",
)


async def prepared_db(host: DbHost) -> tuple[str, str, Database]:
    """A fresh database with the app schema, the users and the service schema applied."""
    ns, db = unique_db()
    root = await root_db(host, ns, db)
    await root.query(APP_SCHEMA)
    for u in USERS:
        await root.query("CREATE type::record('user', $u) SET name = $u, pass = 'x'", {"u": u})
    apply_schema(host, ns, db)
    return ns, db, root


@pytest.fixture
async def env(host: DbHost, tmp_path: Path) -> AsyncIterator[tuple[Ssp, Database]]:
    ns, db, root = await prepared_db(host)
    # two shards: one killed while the other serves, views spread over both
    ssp = start_ssp(tmp_path, host, ns, db, SVC_SSP_SHARDS="2")
    try:
        await ssp.wait_ready()
        yield ssp, root
    finally:
        code = ssp.stop()
        await root.close()
        assert code == 0, ssp.process.log_text()[-3000:]


async def register_all(ssp: Ssp) -> dict[str, tuple[str, str]]:
    """Every view for every user; view key -> (surql, user)."""
    out = {}
    for vi, surql in enumerate(VIEWS):
        for u in USERS:
            key = f"v{vi}_{u}"
            r = await ssp.call("POST /view/register", {
                "id": f"query:{key}", "surql": surql, "clientId": "c", "ttl": "10m",
                "params": {"auth_id": f"user:{u}"}})
            assert r["status"] == 200, r
            out[key] = (surql, u)
    return out


async def expected(root: Database, surql: str, user: str) -> set[str]:
    """SurrealDB's own answer, as the view's user (`$auth.id` bound to that user)."""
    rows = await root.query_one(surql.replace("$auth.id", "$uid"),
                                {"uid": RecordID("user", user)})
    return {record_id_text(r["id"]) for r in rows}


async def converged(ssp: Ssp, root: Database, views: dict[str, tuple[str, str]]
                    ) -> dict[str, Any] | None:
    """None when every view's edges equal the database's answer, else the differences."""
    diff = {}
    for key, (surql, u) in views.items():
        want = await expected(root, surql, u)
        got = await edges(root, f"_00_list_ref_user_{u}", key)
        if want != got:
            diff[key] = {"missing": sorted(want - got), "extra": sorted(got - want)}
    return diff or None


async def random_writes(root: Database, rng: random.Random, n: int) -> None:
    for _ in range(n):
        k = f"p{rng.randrange(30)}"
        roll = rng.random()
        owner = RecordID("user", rng.choice(USERS))
        if roll < 0.55:
            await app_write(root, "UPSERT type::record('post', $k) SET owner = $o, title = $t, "
                            "n = $n", {"k": k, "o": owner, "t": f"t{rng.randrange(5)}",
                                       "n": rng.randrange(10)})
        elif roll < 0.8:
            await app_write(root, "UPDATE type::record('post', $k) SET n = $n",
                            {"k": k, "n": rng.randrange(10)})
        else:
            await app_write(root, "DELETE type::record('post', $k)", {"k": k})


async def assert_converges(ssp: Ssp, root: Database, views: dict[str, tuple[str, str]]) -> None:
    async def ok() -> bool:
        return await converged(ssp, root, views) is None
    try:
        await wait_for(ok, timeout=60, what="edges equal the database's answers")
    except AssertionError:
        raise AssertionError(f"views differ: {await converged(ssp, root, views)}") from None


@pytest.mark.parametrize("seed", [1, 2])
async def test_edges_equal_surrealdb_after_random_writes(env: tuple[Ssp, Database],
                                                         seed: int) -> None:
    ssp, root = env
    rng = random.Random(seed)
    await random_writes(root, rng, 40)  # rows present before the views exist
    views = await register_all(ssp)
    await random_writes(root, rng, 120)
    await assert_converges(ssp, root, views)


async def test_killed_shard_is_rebuilt_and_views_stay_right(env: tuple[Ssp, Database]) -> None:
    ssp, root = env
    rng = random.Random(7)
    await random_writes(root, rng, 30)
    views = await register_all(ssp)
    await assert_converges(ssp, root, views)
    mem = (await ssp.call("GET /debug/memory"))["body"]
    victim = mem["shards"][0]["pid"]
    os.kill(victim, signal.SIGKILL)
    await random_writes(root, rng, 60)  # some land while the shard is down or rebuilding

    async def replaced() -> bool:
        m = (await ssp.call("GET /debug/memory"))["body"]
        return all(s.get("pid") and s["pid"] != victim for s in m["shards"][:1])
    await wait_for(replaced, what="shard restarted")
    health = await ssp.call("GET /health")
    assert health["status"] == 200 and health["body"]["status"] == "ready"

    async def reloaded() -> bool:
        # The new process read every row from the hub's arena: same count per table as the
        # hub (and as the shard that was never killed).
        hub_tables = (await ssp.call("GET /info"))["body"][0]["circuit_tables"]
        shards = (await ssp.call("GET /debug/memory"))["body"]["shards"]
        return all(s.get("tables", {}).get("post", 0) == hub_tables["post"] > 0 for s in shards)
    await wait_for(reloaded, what="the restarted shard holds every post row")
    await random_writes(root, rng, 30)
    await assert_converges(ssp, root, views)


async def test_a_shard_that_keeps_dying_makes_the_ssp_report_failed(
        env: tuple[Ssp, Database]) -> None:
    ssp, _root = env
    await register_all(ssp)
    killed: set[int] = set()

    async def shard0_pid() -> int | None:
        m = (await ssp.call("GET /debug/memory"))["body"]
        pid = m["shards"][0].get("pid")
        return pid if pid and pid not in killed else None

    for _ in range(6):  # more restarts than the supervisor allows within its window
        try:
            pid = await wait_for(shard0_pid, what="shard 0 running again")
        except AssertionError:
            break  # it was given up on: no new process
        killed.add(pid)
        os.kill(pid, signal.SIGKILL)

    async def failed() -> bool:
        h = await ssp.call("GET /health")
        return h["status"] == 503 and h["body"]["status"] == "failed"
    await wait_for(failed, what="health failed")
    r = await ssp.call("POST /ingest", {"table": "post", "op": "CREATE", "id": "post:x",
                                        "record": {"n": 1}})
    assert r["status"] == 503
    r = await ssp.call("POST /view/register", {
        "id": "query:late", "surql": VIEWS[0], "clientId": "c", "ttl": "10m",
        "params": {"auth_id": "user:u1"}})
    assert r["status"] == 503


async def test_concurrent_edge_transactions_converge_to_surrealdb(host: DbHost,
                                                                 tmp_path: Path) -> None:
    # No coalescing window and four flushes in flight: edge transactions of different views
    # overlap in the database while writers commit concurrently. Each view's writes stay in
    # order (a flush takes only views no other flush holds), so every view still ends equal to
    # SurrealDB's answer, and a flush the database refuses is retried, never dropped.
    ns, db, root = await prepared_db(host)
    ssp = start_ssp(tmp_path, host, ns, db, SVC_SSP_QUERY_UPDATE_THROTTLE_MS="0",
                    SVC_SSP_PUBLISH_FLUSHERS="4", SVC_SSP_SHARDS="2")
    try:
        await ssp.wait_ready()
        views = await register_all(ssp)
        flushes_before = (await ssp.call("GET /debug/memory"))["body"]["publication"]["flushes"]
        await asyncio.gather(*(random_writes(root, random.Random(seed), 50)
                               for seed in range(10, 14)))
        await assert_converges(ssp, root, views)
        pub = (await ssp.call("GET /debug/memory"))["body"]["publication"]
        # How marks spread over flushes depends on timing; that nothing is left is not.
        assert pub["flushes"] > flushes_before and pub["pending_operations"] == 0, pub
    finally:
        code = ssp.stop()
        await root.close()
    assert code == 0, ssp.process.log_text()[-3000:]


async def register_view(ssp: Ssp, key: str, surql: str, user: str) -> dict[str, Any]:
    return await ssp.call("POST /view/register", {
        "id": f"query:{key}", "surql": surql, "clientId": "c", "ttl": "10m",
        "params": {"auth_id": f"user:{user}"}})


async def leftovers(root: Database, gone: dict[str, str]) -> dict[str, Any] | None:
    """None when no view of `gone` (key -> user) has a row or an edge left."""
    left = {}
    for key, u in gone.items():
        row = await root.query_one("SELECT id FROM ONLY type::record('_00_query', $k)",
                                   {"k": key})
        got = await edges(root, f"_00_list_ref_user_{u}", key)
        if row is not None or got:
            left[key] = {"row": row is not None, "edges": sorted(got)}
    return left or None


@pytest.mark.parametrize("seed", [3, 4])
async def test_re_registrations_and_row_deletes_keep_views_equal_to_surrealdb(
        env: tuple[Ssp, Database], seed: int) -> None:
    ssp, root = env
    rng = random.Random(seed)
    await random_writes(root, rng, 30)
    views = await register_all(ssp)
    gone: dict[str, str] = {}  # key -> user: `_00_query` row deleted, nothing may be left
    counts = dict.fromkeys(("new", "same", "refused", "deleted", "back"), 0)
    kinds = ("write", "new", "same", "refused", "deleted", "back")
    for _ in range(70):
        kind = rng.choices(kinds, weights=(45, 12, 9, 12, 12, 10))[0]
        if (kind == "back" and not gone) or (kind not in ("write", "back") and not views):
            kind = "write"
        if kind == "write":
            await random_writes(root, rng, 3)
            continue
        counts[kind] += 1
        if kind == "back":
            # A deleted id registered again (after its delete): it lives again.
            key = rng.choice(sorted(gone))
            u = gone.pop(key)
            surql = rng.choice(VIEWS)
            r = await register_view(ssp, key, surql, u)
            assert r["status"] == 200, r
            views[key] = (surql, u)
            continue
        key = rng.choice(sorted(views))
        surql, u = views[key]
        if kind == "new":
            new = rng.choice([q for q in VIEWS if q != surql])
            r = await register_view(ssp, key, new, u)
            assert r["status"] == 200, r
            views[key] = (new, u)
        elif kind == "same":
            r = await register_view(ssp, key, surql, u)
            assert r["status"] == 200, r
        elif kind == "refused":
            r = await register_view(ssp, key, rng.choice(REFUSED), u)
            assert r["status"] == 400 and r["body"]["error"] == "rejected", r
            assert "keeps its previous query" in r["body"]["message"], r
        else:
            await app_write(root, "DELETE type::record('_00_query', $k)", {"k": key})
            del views[key]
            gone[key] = u
    assert all(counts.values()), counts  # the seed exercised every kind of step
    await random_writes(root, rng, 20)
    await assert_converges(ssp, root, views)

    async def clean() -> bool:
        return await leftovers(root, gone) is None
    try:
        await wait_for(clean, timeout=60, what="deleted views have nothing left")
    except AssertionError:
        raise AssertionError(f"left behind: {await leftovers(root, gone)}") from None
    for key, (surql, _u) in views.items():
        d = await ssp.call("GET /debug/view/{view_id}", params={"view_id": f"query:{key}"})
        assert d["status"] == 200 and d["body"]["surql"] == surql, (key, d)
    for key in gone:
        d = await ssp.call("GET /debug/view/{view_id}", params={"view_id": f"query:{key}"})
        assert d["status"] == 404, (key, d)
