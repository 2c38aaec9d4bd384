"""The reaper of retired edges (mode `dedicated`) end to end: database host + `python -m ssp`.
Its queue in memory is bounded (`SVC_SSP_REAPER_MAX_QUEUED`); what goes past it waits in the
database and is still deleted, and so are retired rows an earlier run left behind."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from surrealdb import RecordID

from dbclient import Database
from tests.support.procs import DbHost
from tests.support.ssp_stack import (
    APP_SCHEMA,
    Ssp,
    apply_schema,
    edges,
    root_db,
    start_ssp,
    unique_db,
    wait_for,
)

BOUND = 4  # edges the reaper may hold in memory in these tests
VIEW = "SELECT * FROM post WHERE owner = $auth.id AND n > 0"
TABLE = "_00_list_ref_user_erin"
ERIN = RecordID("user", "erin")


@dataclass
class Db:
    host: DbHost
    ns: str
    name: str
    root: Database
    tmp: Path

    def ssp(self) -> Ssp:
        return start_ssp(self.tmp, self.host, self.ns, self.name,
                         SVC_SSP_REAPER_MAX_QUEUED=str(BOUND))


@pytest.fixture
async def db(host: DbHost, tmp_path: Path) -> AsyncIterator[Db]:
    ns, name = unique_db()
    root = await root_db(host, ns, name)
    await root.query(APP_SCHEMA)
    await root.query("CREATE user:erin SET name = 'erin', pass = 'x'")
    apply_schema(host, ns, name)
    try:
        yield Db(host, ns, name, root, tmp_path)
    finally:
        await root.close()


def stop(ssp: Ssp) -> None:
    code = ssp.stop()
    assert code == 0, ssp.process.log_text()[-3000:]


async def register(ssp: Ssp, key: str) -> None:
    r = await ssp.call("POST /view/register", {
        "id": f"query:{key}", "surql": VIEW, "clientId": "c1", "ttl": "10m",
        "params": {"auth_id": "user:erin"}})
    assert r["status"] == 200, r


async def reaper(ssp: Ssp) -> dict[str, Any]:
    figures = (await ssp.call("GET /debug/memory"))["body"]["reaper"]
    assert isinstance(figures, dict)
    return figures


async def rows(root: Database) -> list[dict[str, Any]]:
    """Every row of erin's edge table, retired or not."""
    out = await root.query_one(f"SELECT in, out, removed FROM {TABLE}")
    return list(out or [])


async def test_more_edges_retire_than_the_queue_holds_and_every_one_is_deleted(db: Db) -> None:
    # 30 members of 40 leave by UPDATE (their rows stay: their edges are retired rows only the
    # reaper deletes), 26 more than the reaper may hold. It never holds more than its bound,
    # what went past it is read back from the database, and the table ends with one row per
    # member: every retired edge deleted, none forgotten.
    ssp = db.ssp()
    try:
        await ssp.wait_ready()
        await register(ssp, "erins")
        keys = [f"p{i}" for i in range(40)]
        await db.root.query("FOR $k IN $keys { CREATE type::record('post', $k) SET owner = $o, "
                            "title = 't', n = 1 }", {"keys": keys, "o": ERIN})
        members = {f"post:{k}" for k in keys}
        await wait_for(lambda: _has(db.root, members), what="40 members in")
        await db.root.query("FOR $k IN $keys { UPDATE type::record('post', $k) SET n = 0 }",
                            {"keys": keys[10:]})
        stay = {f"post:{k}" for k in keys[:10]}

        async def converged() -> bool:
            r = await rows(db.root)
            return (sorted(str(x["out"]) for x in r) == sorted(stay)
                    and not any(x.get("removed") for x in r))
        await wait_for(converged, timeout=60, what="one edge row per member")
        figures = await reaper(ssp)
        assert figures["queued_peak"] <= BOUND, figures
        assert figures["overflowed"] >= 30 - BOUND, figures  # went past it, to the database
        assert figures["refilled"] >= 30 - BOUND and figures["queued"] == 0, figures
        assert figures["reaped"] == 30 and figures["failures"] == 0, figures
        assert await edges(db.root, TABLE, "erins") == stay
    finally:
        stop(ssp)


async def test_a_restart_finds_retired_rows_an_earlier_run_left(db: Db) -> None:
    # An earlier run's queue was memory: the retired rows it had not deleted are in the
    # database only. Rows of a view this run restores and of one it does not (its `_00_query`
    # row went while no SSP ran, so no materialisation lists them) are deleted after a restart;
    # the live edges stay.
    ssp = db.ssp()
    try:
        await ssp.wait_ready()
        await register(ssp, "erins")
        await db.root.query("CREATE post:a SET owner = $o, title = 't', n = 1", {"o": ERIN})
        await wait_for(lambda: _has(db.root, {"post:a"}), what="post:a in")
    finally:
        stop(ssp)
    # What a run stopped before its reaper's turn leaves: retired edges of members that left
    # (the rows stay), here of the restored view and of a view that is gone.
    await db.root.query(
        "FOR $k IN $keys { CREATE type::record('post', $k) SET owner = $o, title = 't', n = 0; "
        "FOR $q IN [_00_query:erins, _00_query:gone] { "
        f"RELATE $q->(type::record('{TABLE}', [$q, type::record('post', $k)]))"
        "->(type::record('post', $k)) SET seq = 0, removed = true } }",
        {"keys": [f"old{i}" for i in range(10)], "o": ERIN})
    assert len(await rows(db.root)) == 21
    ssp = db.ssp()
    try:
        await ssp.wait_ready()

        async def left_alone() -> bool:
            r = await rows(db.root)
            return [str(x["out"]) for x in r] == ["post:a"] and not r[0].get("removed")
        await wait_for(left_alone, timeout=60, what="the earlier run's retired rows deleted")
        figures = await reaper(ssp)
        assert figures["queued_peak"] <= BOUND and figures["failures"] == 0, figures
    finally:
        stop(ssp)


async def _has(root: Database, want: set[str]) -> bool:
    return await edges(root, TABLE, "erins") == want
