"""`views.json` (`ssp.hub.warmviews`): written with the position of the snapshot's rows, read
once (deleted by the read, whatever it finds), used only for the same position; a checkpoint
write of the snapshot deletes it, and so does a clean resync's wipe."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from surrealdb import RecordID

from ssp.hub.state import ViewState
from ssp.hub.warmviews import VIEWS_FILE, take_views, write_views
from ssp.link import SchedulerLink


def view(vid: str, members: set[str]) -> ViewState:
    return ViewState(view_id=vid, record=RecordID("_00_query", vid.split(":")[1]),
                     edge_table="_00_list_ref_user_alice", auth=RecordID("user", "alice"),
                     members=members, surql="SELECT * FROM post", params={"auth_id": "user:alice"},
                     client_ids={"c1", "c2"}, client_id="c2", ttl="1h", ttl_ms=3_600_000,
                     last_active_ms=1_000)


def test_the_views_are_read_once_and_only_for_the_rows_they_were_written_with(
        tmp_path: Path) -> None:
    path = tmp_path / VIEWS_FILE
    assert write_views(path, {"epoch": "e1", "seq": 7}, [view("query:a", {"post:1", "post:2"})])
    got, why = take_views(path, "e1", 7)
    assert why == "" and not path.exists()
    assert got == [{"id": "query:a", "surql": "SELECT * FROM post",
                    "params": {"auth_id": "user:alice"}, "auth": "user:alice",
                    "client_id": "c2", "client_ids": ["c1", "c2"], "ttl": "1h",
                    "ttl_ms": 3_600_000, "last_active_ms": 1_000, "format": None,
                    "row_count": None, "members": ["post:1", "post:2"]}]
    assert take_views(path, "e1", 7) == ([], "no views file (the last stop was not graceful, "
                                             "or not drained)")
    for epoch, seq in (("e1", 8), ("e2", 7)):
        write_views(path, {"epoch": "e1", "seq": 7}, [view("query:a", set())])
        got, why = take_views(path, epoch, seq)
        assert got == [] and "other rows" in why and not path.exists()
    path.write_text("{not json")
    got, why = take_views(path, "e1", 7)
    assert got == [] and "unreadable" in why and not path.exists()
    path.write_text("[]")
    got, why = take_views(path, "e1", 7)
    assert got == [] and "unknown form" in why and not path.exists()


def test_a_checkpoint_deletes_the_views_and_a_clean_wipe_too(tmp_path: Path) -> None:
    from ssp.hub.snapshot import Snapshot

    link = SimpleNamespace(epoch="e1")
    rows = SimpleNamespace(tables=lambda: [], entries=lambda t: [])
    state: Any = SimpleNamespace(
        cfg=SimpleNamespace(snapshot_dir=tmp_path, ssp_id="s1", arena_dir=None),
        rows=rows, rv={}, cursor=SimpleNamespace(cursors={}), link=link, status="ready",
        last_seq=5, views={"query:a": view("query:a", {"post:1"})})
    snap = Snapshot(state)
    assert snap.write(views=True)
    pos = json.loads((tmp_path / "snapshot.json").read_text())["scheduler"]
    assert pos == {"epoch": "e1", "seq": 5}
    assert json.loads((tmp_path / VIEWS_FILE).read_text())["scheduler"] == pos
    assert snap.write()  # a checkpoint: its members may be older than the edges later
    assert not (tmp_path / VIEWS_FILE).exists()

    snap.write(views=True)
    hub: Any = SimpleNamespace(cfg=SimpleNamespace(snapshot_dir=tmp_path, arena_dir=None,
                                                   scheduler_url="http://x",
                                                   scheduler_bearer=None),
                               wiped=False)
    SchedulerLink(hub).wipe()
    assert not (tmp_path / VIEWS_FILE).exists() and not (tmp_path / "snapshot.json").exists()


def test_only_a_ready_ssp_writes_a_snapshot_and_an_older_file_stays(tmp_path: Path) -> None:
    """A bootstrapping or failed SSP's rows are not the database's at its cursors (a restore
    that failed after the database was replaced leaves rows of a database that is gone)."""
    from ssp.hub.snapshot import Snapshot

    rows = SimpleNamespace(tables=lambda: [], entries=lambda t: [])
    state: Any = SimpleNamespace(
        cfg=SimpleNamespace(snapshot_dir=tmp_path, ssp_id="s1", arena_dir=None),
        rows=rows, rv={}, cursor=SimpleNamespace(cursors={"post": 3}), link=None,
        status="bootstrapping", last_seq=0, views={})
    snap = Snapshot(state)
    for status in ("bootstrapping", "failed"):
        state.status = status
        assert not snap.write() and not (tmp_path / "snapshot.json").exists()
    state.status = "ready"
    assert snap.write()
    before = (tmp_path / "snapshot.json").read_text()
    state.status, state.cursor.cursors = "bootstrapping", {"post": 9}
    assert not snap.write()
    assert (tmp_path / "snapshot.json").read_text() == before
