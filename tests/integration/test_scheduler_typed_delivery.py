"""Cluster mode, changefeed transport: record links and datetimes in SCHEMALESS fields keep their
types from the database through the real scheduler to two real SSPs.

The scheduler reads typed rows from the changefeed; what it forwards to the SSPs must arrive as
it was stored (a link as a record id, not its text), so random views comparing schemaless links
with record ids, following links (`thread.score`) and comparing datetimes end with the same
edges as SurrealDB's own answer. The three hashes of each table agree: the SSPs'
`circuit_hashes`, the scheduler's `/health/snapshot` (its replica) and one computed here from
the rows the database returns.
"""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiohttp
from surrealdb import RecordID

from dbclient import Database
from engine.hashing import hash_text, table_hash
from engine.values import record_id_text
from tests.integration.test_scheduler_process import SchedulerProc, launch, write_config
from tests.support.procs import DbHost, free_port
from tests.support.ssp_stack import (
    Ssp,
    app_write,
    apply_schema,
    edges,
    root_db,
    start_ssp,
    wait_for,
)

SCHEMA = """
DEFINE TABLE user SCHEMALESS;
DEFINE TABLE thread SCHEMALESS;
DEFINE TABLE comment SCHEMALESS;
"""
USERS = ("u1", "u2", "u3")
THREADS = 8
COMMENTS = 24
BASE = datetime(2026, 1, 1, tzinfo=UTC)
TABLES = ("thread", "comment")


def _day(rng: random.Random) -> str:
    return (BASE + timedelta(days=rng.randrange(1, 20))).strftime("%Y-%m-%dT%H:%M:%SZ")


def random_view(rng: random.Random) -> str:
    """One query over schemaless links and datetimes (`$auth.id` is the view's user)."""
    t = f"thread:t{rng.randrange(THREADS)}"
    pick = rng.randrange(9)
    return [
        f"SELECT * FROM comment WHERE thread = {t}",
        "SELECT * FROM comment WHERE author = $auth.id ORDER BY created DESC LIMIT 5",
        f"SELECT * FROM comment WHERE created > d'{_day(rng)}'",
        f"SELECT * FROM comment WHERE thread.score > {rng.randrange(1, 6)}",
        "SELECT * FROM thread WHERE author = $auth.id",
        f"SELECT * FROM thread WHERE created <= d'{_day(rng)}' ORDER BY created LIMIT 3",
        "SELECT * FROM comment WHERE thread.author = $auth.id",
        f"SELECT * FROM comment WHERE thread IN [{t}, thread:t{rng.randrange(THREADS)}]",
        f"SELECT * FROM comment WHERE tags CONTAINS {t} AND created > d'{_day(rng)}'",
    ][pick]


class Clock:
    """Distinct datetimes (microseconds included), so ORDER BY created has no ties."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[datetime] = set()

    def next(self) -> datetime:
        while True:
            at = BASE + timedelta(days=self.rng.randrange(0, 21),
                                  microseconds=self.rng.randrange(86_400_000_000))
            if at not in self.used:
                self.used.add(at)
                return at


async def random_write(root: Database, rng: random.Random, clock: Clock) -> None:
    """One write of typed values into a schemaless table (links, datetimes, decimals...)."""
    user = RecordID("user", rng.choice(USERS))
    thread = RecordID("thread", f"t{rng.randrange(THREADS)}")
    roll = rng.random()
    if roll < 0.35:
        await app_write(root, "UPSERT type::record('comment', $k) SET thread = $t, author = $a, "
                        "created = $d, score = $n, tags = [$t, $a], meta = {by: $a, at: $d}, "
                        "amount = $amount, ref = $ref, wait = 5m",
                        {"k": f"c{rng.randrange(COMMENTS)}", "t": thread, "a": user,
                         "d": clock.next(), "n": rng.randrange(10),
                         "amount": Decimal(f"{rng.randrange(1000)}.{rng.randrange(100):02d}"),
                         "ref": uuid.UUID(int=rng.getrandbits(128))})
    elif roll < 0.5:
        await app_write(root, "UPDATE type::record('comment', $k) SET thread = $t",
                        {"k": f"c{rng.randrange(COMMENTS)}", "t": thread})
    elif roll < 0.6:
        await app_write(root, "UPDATE type::record('comment', $k) SET created = $d",
                        {"k": f"c{rng.randrange(COMMENTS)}", "d": clock.next()})
    elif roll < 0.8:
        await app_write(root, "UPSERT type::record('thread', $k) SET author = $a, score = $n, "
                        "created = $d, title = $title",
                        {"k": thread.id, "a": user, "n": rng.randrange(8), "d": clock.next(),
                         "title": f"title {rng.randrange(100)}"})
    elif roll < 0.9:
        await app_write(root, "UPDATE type::record('thread', $k) SET score = $n",
                        {"k": thread.id, "n": rng.randrange(8)})
    elif roll < 0.95:
        await app_write(root, "DELETE type::record('comment', $k)",
                        {"k": f"c{rng.randrange(COMMENTS)}"})
    else:
        await app_write(root, "DELETE $t", {"t": thread})


async def expected(root: Database, surql: str, user: str) -> set[str]:
    """SurrealDB's answer as the view's user: the ids of its rows."""
    rows = await root.query_one(surql.replace("$auth.id", "$uid"),
                                {"uid": RecordID("user", user)})
    return {record_id_text(r["id"]) for r in rows or []}


async def differences(root: Database, views: dict[str, tuple[str, str]]) -> dict[str, Any]:
    out = {}
    for key, (surql, user) in views.items():
        want = await expected(root, surql, user)
        got = await edges(root, f"_00_list_ref_user_{user}", key)
        if want != got:
            out[key] = {"surql": surql, "user": user, "missing": sorted(want - got),
                        "extra": sorted(got - want)}
    return out


async def jget(http: aiohttp.ClientSession, url: str) -> Any:
    async with http.get(url, headers={"Authorization": "Bearer any"}) as r:
        return json.loads(await r.text())


async def database_hashes(root: Database) -> dict[str, str]:
    """Each table's hash computed from the rows SurrealDB returns (the judge of both sides)."""
    return {t: hash_text(table_hash(await root.query_one(f"SELECT * FROM {t}") or []))
            for t in TABLES}


async def test_views_over_schemaless_links_and_datetimes_equal_surrealdb(
        tmp_path: Path, shared_db_host: DbHost) -> None:
    host = shared_db_host
    name = "typed_" + uuid.uuid4().hex[:8]
    rng = random.Random(20)
    clock = Clock(rng)
    root = await root_db(host, name, name)
    await root.query(SCHEMA)
    for u in USERS:
        await root.query("CREATE type::record('user', $u) SET name = $u", {"u": u})
    for _ in range(30):  # rows the SSPs bootstrap through the scheduler's proxy
        await random_write(root, rng, clock)
    apply_schema(host, name, name)
    port = free_port()
    s: SchedulerProc = launch(
        tmp_path, write_config(tmp_path, host, name, port, ssp_poll_interval_ms=100,
                               load_balance="round_robin", snapshot_update_interval_secs=1),
        port, name, SVC_INGEST_TRANSPORT="changefeed")
    common = {"SVC_SCHEDULER_URL": s.url, "SVC_INGEST_TRANSPORT": "changefeed",
              "SVC_SSP_SHARDS": "1", "HEARTBEAT_INTERVAL_MS": "200"}
    ssps: list[Ssp] = [start_ssp(tmp_path, host, name, name, SVC_SSP_ID="ssp-0", **common)]
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            async def ready(ids: set[str]) -> bool:
                m = await jget(http, s.url + "/metrics")
                return {x["id"] for x in m["ssps"] if x["state"] == "ready"} == ids

            await wait_for(lambda: ready({"ssp-0"}), 90, "ssp-0 ready")

            # ssp-1 registers while writes flow: the events of its bootstrap window are
            # buffered by the scheduler and replayed to it, on the same typed path.
            async def writer() -> int:
                n = 0
                while n < 20 or not await ready({"ssp-0", "ssp-1"}):
                    await random_write(root, rng, clock)
                    n += 1
                    assert n < 100_000, "ssp-1 never became ready"
                return n

            writing = asyncio.create_task(writer())
            ssps.append(start_ssp(tmp_path, host, name, name, SVC_SSP_ID="ssp-1", **common))
            await asyncio.wait_for(writing, 120)
            views: dict[str, tuple[str, str]] = {}
            placed: set[str] = set()
            for k in range(30):
                surql, user = random_view(rng), rng.choice(USERS)
                body = {"id": f"query:v{k}", "surql": surql, "clientId": "c1", "ttl": "10m",
                        "params": {"auth_id": f"user:{user}"}}
                async with http.post(s.url + "/view/register", json=body) as r:
                    reply = await r.json()
                    assert r.status == 200, (surql, reply)
                views[f"v{k}"] = (surql, user)
                placed.add(reply["ssp_id"])
            assert placed == {"ssp-0", "ssp-1"}  # round robin: views on both SSPs

            for _ in range(150):  # through the database only: the scheduler tails the feed
                await random_write(root, rng, clock)

            async def converged() -> bool:
                return not await differences(root, views)

            try:
                await wait_for(converged, 90, "every view's edges equal SurrealDB's answer")
            except AssertionError:
                raise AssertionError(f"views differ: {await differences(root, views)}") from None

            want = await database_hashes(root)
            seen: dict[str, Any] = {}

            async def same_hashes() -> bool:
                h = await jget(http, s.url + "/health")
                latest = h["scheduler"]["latest_seq"]
                snap = await jget(http, s.url + "/health/snapshot")
                seen["scheduler"] = {t: snap["hashes"].get(t) for t in TABLES}
                drained = snap["lag"] == 0
                for p in ssps:
                    base = f"http://127.0.0.1:{p.port}"
                    info = (await jget(http, base + "/info"))[0]
                    seen[info["id"]] = {t: info["circuit_hashes"].get(t) for t in TABLES}
                    drained = drained and (await jget(http, base + "/debug/heartbeat")
                                           )["last_seq"] == latest
                return drained and all(v == want for v in seen.values())

            try:
                await wait_for(same_hashes, 60, "equal hashes")
            except AssertionError:
                raise AssertionError(f"hashes differ from the database's {want}: "
                                     f"{seen}") from None
            for p in ssps:  # the bootstrap through the proxy passed its check the first time
                assert "integrity check" not in p.process.log_text()
    finally:
        codes = [p.stop() for p in ssps]
        s.process.stop()
        await root.close()
    assert codes == [0, 0], [p.process.log_text()[-2000:] for p in ssps]
