"""SSP start-up: cold bootstrap vs warm start (snapshot.json + changefeed catch-up), in one run,
and a check that both end in the same state.

    .venv/bin/python loadtests/bench_ssp_start.py [--rows 100000] [--users 1000]
        [--down-writes 2000] [--down-secs 6] [--shards 1]

What runs: a database host (`python -m dbhost --memory`), one database holding `--rows` posts
over `--users` users and one view per user (`SELECT * FROM post WHERE owner = $auth.id ORDER
BY n DESC LIMIT 5`; `n` is unique, so the LIMIT cut has no ties), `svc schema apply`
(transport changefeed), and real `python -m ssp` processes with `SVC_SSP_SNAPSHOT_DIR` and ref
mode `single` (every edge in one table, read with one query):

1. cold start: bootstrap from the database (keyset pages of `SVC_SSP_BOOTSTRAP_PAGE_SIZE`),
   register the views; SIGTERM writes `snapshot.json` on the way out.
2. while the SSP is down, `--down-writes` changes are written through the database (60 %
   UPDATE of `n`, 20 % CREATE, 20 % DELETE): the warm start must catch up on them. It stays
   down `--down-secs` longer than a cold start's 5 s feed margin, so only the snapshot's
   cursors can find those writes.
3. warm start: rows from `snapshot.json`, catch-up from its feed cursors, views restored
   from `_00_query`.
4. the snapshot is removed and a second cold start runs on the same data: the reference.

Columns: time from spawning the process to the first `GET /health` 200 (bootstrap and view
restore done) and to every edge committed (publication drained). Same state: the warm start's
`/info` `circuit_tables` and `circuit_hashes` equal the reference's, and after each start the
edge set equals SurrealDB's own answer to every view's query. Exit status 1 when they differ.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from surrealdb import RecordID

from dbclient import Database, DbConfig
from engine.values import record_id_text
from ipc.rpc import RpcClient
from loadtests.bench_ssp import drained, hub_call
from tests.support.procs import start_db_host
from tests.support.ssp_stack import (
    Ssp,
    apply_schema,
    db_env,
    start_ssp,
)

SCHEMA = """
DEFINE TABLE user SCHEMALESS;
DEFINE TABLE post SCHEMAFULL;
DEFINE FIELD owner ON post TYPE record<user>;
DEFINE FIELD n ON post TYPE int;
DEFINE INDEX post_owner ON post FIELDS owner;
"""
VIEW = "SELECT * FROM post WHERE owner = $auth.id ORDER BY n DESC LIMIT 5"


class World:
    """The source data as the benchmark wrote it: post key -> owner index; `n` values unique."""

    def __init__(self, rows: int, users: int, seed: int = 7) -> None:
        self.rng = random.Random(seed)
        self.users = users
        self.posts: dict[str, int] = {f"p{i}": i % users for i in range(rows)}
        self.next_n = rows
        self.created = 0

    def fresh_n(self) -> int:
        self.next_n += 1
        return self.next_n


async def seed(db: Database, world: World, rows: int) -> None:
    await db.query(SCHEMA)
    for i in range(0, world.users, 1000):
        await db.query("INSERT INTO user $rows",
                       {"rows": [{"id": RecordID("user", f"u{j}")}
                                 for j in range(i, min(world.users, i + 1000))]})
    ns = list(range(rows))
    world.rng.shuffle(ns)
    items = list(world.posts.items())
    for i in range(0, len(items), 1000):
        await db.query("INSERT INTO post $rows", {"rows": [
            {"id": RecordID("post", key), "owner": RecordID("user", f"u{u}"), "n": ns[i + k]}
            for k, (key, u) in enumerate(items[i:i + 1000])]})


async def write_while_down(db: Database, world: World, count: int) -> None:
    """`count` changes through the database, 100 statements per request."""
    stmts: list[str] = []
    for _ in range(count):
        roll = world.rng.random()
        if roll < 0.2 or len(world.posts) < 10:
            world.created += 1
            key, u = f"c{world.created}", world.rng.randrange(world.users)
            world.posts[key] = u
            stmts.append(f"CREATE post:{key} SET owner = user:u{u}, n = {world.fresh_n()}")
        elif roll < 0.4:
            key = world.rng.choice(list(world.posts))
            del world.posts[key]
            stmts.append(f"DELETE post:{key}")
        else:
            key = world.rng.choice(list(world.posts))
            stmts.append(f"UPDATE post:{key} SET n = {world.fresh_n()}")
        if len(stmts) == 100:
            await db.query("; ".join(stmts))
            stmts = []
    if stmts:
        await db.query("; ".join(stmts))


async def expected_edges(db: Database, users: int) -> set[tuple[str, str]]:
    """SurrealDB's own answer to every view's query, as (view record, member) texts."""
    out: set[tuple[str, str]] = set()
    for u in range(users):
        rows = await db.query_one(VIEW.replace("$auth.id", "$o"), {"o": RecordID("user", f"u{u}")})
        out.update((f"_00_query:v{u}", record_id_text(r["id"])) for r in rows or [])
    return out


async def published_edges(db: Database) -> set[tuple[str, str]]:
    rows = await db.query_one("SELECT in, out FROM _00_list_ref") or []
    return {(record_id_text(r["in"]), record_id_text(r["out"])) for r in rows}


async def timed_start(tmp: Path, host: Any, ns: str, dbn: str, env: dict[str, str]
                      ) -> tuple[Ssp, float, float, dict[str, Any]]:
    """Start an SSP; (ssp, seconds to /health 200, seconds to publication drained, /info)."""
    t0 = time.perf_counter()
    ssp = start_ssp(tmp, host, ns, dbn, **env)
    await ssp.wait_ready(timeout=900)
    ready = time.perf_counter() - t0
    client = RpcClient(ssp.hub_endpoint)
    try:
        await drained(client)
        published = time.perf_counter() - t0
        info = (await hub_call(client, "GET /info"))["body"][0]
    finally:
        client.close()
    return ssp, ready, published, info


async def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--users", type=int, default=1000)
    p.add_argument("--down-writes", type=int, default=2000)
    p.add_argument("--down-secs", type=float, default=6.0)
    p.add_argument("--shards", type=int, default=1)
    args = p.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="bench-ssp-start-"))
    host = start_db_host(tmp)
    ns, dbn = "bench", f"start_{uuid.uuid4().hex[:6]}"
    snap = tmp / "snap"
    env = {"SVC_SSP_SHARDS": str(args.shards), "SVC_SSP_SNAPSHOT_DIR": str(snap),
           "SVC_SSP_REF_MODE": "single", "SVC_SCHEMA_POLL_SECS": "0",
           "SVC_SSP_QUERY_UPDATE_THROTTLE_MS": "100"}
    db = Database(DbConfig.from_env(db_env(host, ns, dbn)))
    results: list[tuple[str, float, float]] = []
    ok = True
    try:
        await db.connect()
        world = World(args.rows, args.users)
        await seed(db, world, args.rows)
        apply_schema(host, ns, dbn, "changefeed")

        ssp, ready, published, _ = await timed_start(tmp, host, ns, dbn, env)
        client = RpcClient(ssp.hub_endpoint)
        try:
            sem = asyncio.Semaphore(32)

            async def reg(u: int) -> None:
                async with sem:
                    r = await hub_call(client, "POST /view/register", {
                        "id": f"query:v{u}", "surql": VIEW, "clientId": "bench", "ttl": "1h",
                        "params": {"auth_id": f"user:u{u}"}})
                    assert r["status"] == 200, r
            await asyncio.gather(*(reg(u) for u in range(args.users)))
            await drained(client)
        finally:
            client.close()
        results.append((f"cold: bootstrap {args.rows:,} rows (views registered after)",
                        ready, published))
        assert ssp.stop() == 0, ssp.process.log_text()[-3000:]
        assert (snap / "snapshot.json").exists(), "no snapshot written on SIGTERM"
        snap_mb = (snap / "snapshot.json").stat().st_size / 2**20

        await write_while_down(db, world, args.down_writes)
        await asyncio.sleep(args.down_secs)
        want = await expected_edges(db, args.users)

        ssp, ready, published, info_warm = await timed_start(tmp, host, ns, dbn, env)
        log = ssp.process.log_text()
        assert ssp.stop() == 0
        assert "warm start from snapshot" in log, "the second start was not warm"
        edges_warm = await published_edges(db)
        name = (f"warm: snapshot ({snap_mb:.1f} MB) + catch-up of {args.down_writes:,} "
                f"writes, {args.users:,} views restored")
        results.append((name, ready, published))

        (snap / "snapshot.json").unlink()
        ssp, ready, published, info_cold = await timed_start(tmp, host, ns, dbn, env)
        assert ssp.stop() == 0
        edges_cold = await published_edges(db)
        results.append((f"cold again: bootstrap + {args.users:,} views restored (reference)",
                        ready, published))

        base_ready, base_pub = results[2][1], results[2][2]
        print(f"\nSSP start-up, {args.rows:,} rows, {args.users:,} views, "
              f"{args.shards} shard(s), transport changefeed\n")
        print("| start | to /health 200 s | to edges committed s | vs cold (ready) |")
        print("|---|---|---|---|")
        for name, r, pub in results:
            print(f"| {name} | {r:.2f} | {pub:.2f} | {base_ready / r:.2f}x |")
        same_info = (info_warm["circuit_tables"] == info_cold["circuit_tables"]
                     and info_warm["circuit_hashes"] == info_cold["circuit_hashes"])
        print(f"\nwarm vs cold reference: circuit_tables and circuit_hashes equal: "
              f"{'yes' if same_info else 'NO'}; post rows {info_warm['circuit_tables'].get('post')}"
              f" vs {info_cold['circuit_tables'].get('post')}")
        print(f"edges equal SurrealDB's answer ({len(want):,} edges): "
              f"warm {'yes' if edges_warm == want else 'NO'}, "
              f"cold {'yes' if edges_cold == want else 'NO'}")
        print(f"warm start is {base_pub / results[1][2]:.2f}x faster to edges committed")
        ok = same_info and edges_warm == want and edges_cold == want
        if not ok:
            print(f"missing after warm: {sorted(want - edges_warm)[:5]}; "
                  f"extra: {sorted(edges_warm - want)[:5]}")
    finally:
        await db.close()
        host.process.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
