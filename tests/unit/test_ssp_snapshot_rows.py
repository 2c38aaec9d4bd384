"""The SSP's snapshot keeps each row's record id and `_00_rv` beside its bytes, so a warm
start stores rows without decoding them; a snapshot without those lists (an older one) is
read by decoding each row, to the same arena, versions and shard load."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from surrealdb import RecordID

from engine.arena import RowStore
from ssp.hub import loading as loading_mod
from ssp.hub.loading import Loading
from ssp.hub.snapshot import Snapshot


class Pool:
    def __init__(self) -> None:
        self.loaded: list[tuple[str, list[str]]] = []

    async def load_into(self, shards: Any, table: str, rids: list[str]) -> list[Any]:
        self.loaded.append((table, list(rids)))
        return []


def state(tmp: Path | None = None) -> Any:
    return SimpleNamespace(
        rows=RowStore(), rv={}, tables=set(), shards=[], link=None, status="ready",
        cursor=SimpleNamespace(cursors={"post": 7}),
        cfg=SimpleNamespace(snapshot_dir=tmp, ssp_id="s1"))


def written(tmp: Path) -> dict[str, Any]:
    src = state(tmp)
    for i in range(50):
        row = {"id": RecordID("post", i), "n": i, "tags": ["a", str(i)], "_00_rv": i + 1}
        src.rows.put("post", f"post:{i}", row)
        src.rv[f"post:{i}"] = i + 1
    src.rows.put("post", "post:x", {"id": RecordID("post", "x")})  # no version (None)
    src.rv["post:x"] = None
    assert Snapshot(src).write()
    data: dict[str, Any] = json.loads((tmp / "snapshot.json").read_text())
    return data


async def load(snap: dict[str, Any]) -> tuple[Any, Pool]:
    st, pool = state(), Pool()
    await Loading(st, pool, None, None, None, None)._put_rows("post", snap)  # type: ignore[arg-type]
    return st, pool


async def test_a_snapshot_with_ids_loads_without_decoding_rows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    snap = written(tmp_path)
    assert len(snap["ids"]["post"]) == len(snap["rows"]["post"]) == len(snap["rv"]["post"]) == 51
    slow, slow_pool = await load({k: v for k, v in snap.items() if k not in ("ids", "rv")})

    def refuse(_: bytes) -> Any:
        raise AssertionError("a row was decoded")

    monkeypatch.setattr(loading_mod, "unpack_value", refuse)
    fast, fast_pool = await load(snap)
    assert fast.rv == slow.rv and fast.rv["post:3"] == 4 and fast.rv["post:x"] is None
    assert sorted(fast_pool.loaded[0][1]) == sorted(slow_pool.loaded[0][1])
    assert len(fast_pool.loaded[0][1]) == 51
    for rid in fast.rv:
        assert fast.rows.get_bytes("post", rid) == slow.rows.get_bytes("post", rid) is not None
    assert fast.rows.hash("post") == slow.rows.hash("post") != 0


async def test_lists_that_do_not_match_the_rows_are_not_trusted(tmp_path: Path) -> None:
    snap = written(tmp_path)
    snap["ids"]["post"] = snap["ids"]["post"][:-1]  # one short: decode each row instead
    st, _ = await load(snap)
    assert st.rows.count("post") == 51 and st.rv["post:7"] == 8
