"""The row arena across real processes: a spawned shard worker loads rows by handle from an
arena this process writes; a running SSP keeps its rows in a private arena under /dev/shm (or
in SVC_SSP_ARENA_DIR) whose hashes are the `/info` circuit hashes, and removes the private one
when it stops."""

from __future__ import annotations

from pathlib import Path

import zmq.asyncio
from surrealdb import RecordID

from dbclient import Database
from engine.hashing import hash_text, table_hash
from engine.values import canonical_bytes
from ssp.rowarena import PRIVATE_PREFIX, HubRows, pack_handles
from ssp.shard import encode_request
from ssp.shards import ShardHandle
from tests.support.procs import DbHost
from tests.support.ssp_stack import open_stack, view_body, wait_for

OWN = "SELECT * FROM post WHERE owner = $auth.id"


async def test_a_spawned_shard_reads_rows_by_handle_from_the_hubs_arena(tmp_path: Path) -> None:
    rows = HubRows(tmp_path / "arena", 1)  # 1 MiB segments: the rows span several
    exits: list[int] = []

    async def on_exit(_shard: ShardHandle, code: int) -> None:
        exits.append(code)

    shard = ShardHandle(0, f"ipc://{tmp_path}/shard-0.sock", zmq.asyncio.Context.instance(),
                        on_exit, arena_dir=str(tmp_path / "arena"))
    try:
        store = rows.store
        for i in range(6000):
            store.put_bytes("post", f"post:{i}", canonical_bytes(
                {"id": RecordID("post", i), "owner": RecordID("user", f"u{i % 4}"), "n": i,
                 "body": "x" * 200}))
        assert store.arena.segments > 1
        await shard.start()
        with rows.reading():
            for i in range(0, 6000, 2000):
                raw = pack_handles(store.handle("post", f"post:{k}")  # type: ignore[misc]
                                   for k in range(i, i + 2000))
                out = await shard.send(encode_request("load_handles",
                                                      {"tables": {"post": raw}}))
                assert out["ok"], out
        stats = await shard.call("stats", {})
        assert stats["tables"] == {"post": 6000}
        reg = await shard.call("register", {
            "view_id": "v", "surql": OWN.replace("$auth.id", "$o") + " AND n < 100",
            "params": {"o": RecordID("user", "u2")}})
        assert reg["members"] == sorted(f"post:{i}" for i in range(2, 100, 4))
        # The shard's decoded copy hashes like the hub's arena: the same rows, intact.
        h = await shard.call("hashes", {"tables": ["post"]})
        assert h["hashes"]["post"] == store.hash("post")
        assert not exits
    finally:
        await shard.stop()
        rows.close()


def _private_arenas() -> set[Path]:
    base = Path("/dev/shm")
    return set(base.glob(PRIVATE_PREFIX + "*")) if base.is_dir() else set()


def _segment_bytes(arena: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(arena.glob("seg-*.bin")))


async def _alice_and_posts(root: Database, n: int) -> None:
    await root.query("CREATE user:alice SET name = 'alice', pass = 'x'")
    for i in range(n):
        await root.query("CREATE type::record('post', $k) SET owner = user:alice, title = 't', "
                         "n = $n",
                         {"k": f"p{i}", "n": i})


async def test_ssp_rows_live_in_a_private_arena_removed_at_shutdown(host: DbHost,
                                                                   tmp_path: Path) -> None:
    before = _private_arenas()
    async with open_stack(host, tmp_path,
                          before_start=lambda root: _alice_and_posts(root, 30)) as st:
        pid = st.ssp.process.proc.pid  # type: ignore[union-attr]
        mine = [d for d in _private_arenas() - before
                if (d / "owner.pid").read_text() == str(pid)]
        assert len(mine) == 1, mine
        arena = mine[0]
        mem = (await st.ssp.call("GET /debug/memory"))["body"]
        assert mem["arena"]["private"] is True and mem["rows"] >= 31 and mem["row_bytes"] > 0
        assert mem["python_blocks"] > 10_000  # the hub's own heap, beside its RSS
        assert "objects" not in mem  # the object census only when asked (a pass over the heap)
        r = await st.ssp.call("POST /view/register", view_body("a", OWN))
        assert r["status"] == 200 and r["body"]["rowCount"] == 30, r
        census = (await st.ssp.call("GET /debug/memory",
                                    query={"objects": "5", "holders": "ViewState"}))["body"]
        assert len(census["objects"]["top"]) == 5 and census["objects"]["largest"]
        assert census["objects"]["holders"]["chains"], census["objects"]["holders"]
        await st.root.query("UPDATE post:p3 SET n = 99")

        async def stored() -> bool:
            rows = await st.root.query_one("SELECT * FROM post")
            got = (await st.ssp.call("GET /info"))["body"][0]["circuit_hashes"]["post"]
            if got != hash_text(table_hash(rows)):
                return False
            # Each row's canonical bytes, as the database has it now, are in the arena.
            seg = _segment_bytes(arena)
            return all(canonical_bytes(row) in seg for row in rows)
        await wait_for(stored, what="the arena holds the database's post rows")
    assert not arena.exists(), "the private arena outlived the SSP"


async def test_ssp_with_an_arena_dir_writes_its_segments_there(host: DbHost,
                                                              tmp_path: Path) -> None:
    arena = tmp_path / "arena"
    async with open_stack(host, tmp_path, before_start=lambda root: _alice_and_posts(root, 3),
                          SVC_SSP_ARENA_DIR=str(arena), SVC_SSP_ARENA_SEGMENT_MB="2") as st:
        mem = (await st.ssp.call("GET /debug/memory"))["body"]
        assert mem["arena"] == {"private": False, "segments": 1,
                                "segment_bytes": 2 * 1024 * 1024}
        assert (arena / "seg-000000.bin").stat().st_size == 2 * 1024 * 1024
        rows = await st.root.query_one("SELECT * FROM post")
        seg = _segment_bytes(arena)
        assert len(rows) == 3 and all(canonical_bytes(row) in seg for row in rows)
        r = await st.ssp.call("POST /view/register", view_body("a", OWN))
        assert r["status"] == 200 and r["body"]["rowCount"] == 3, r
    assert (arena / "arena.json").exists()  # a configured directory stays after exit
