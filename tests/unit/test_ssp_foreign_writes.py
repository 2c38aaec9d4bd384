"""Unit tests of how the SSP keeps edges right when others change them: the member index and
the marks a DELETE adds, the publisher's dropped tables, the reaper beside them, the
reconciler's read-back (the same paths run through real processes in
tests/integration/test_edges_*.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from surrealdb import RecordID

from ssp.hub.members import MemberIndex
from ssp.hub.reconcile import SLICE_EDGES, Reconciler
from ssp.hub.sequencer import Sequencer
from ssp.hub.state import ViewRegistry, ViewState
from ssp.publisher import MARK_READY, Publisher, PubView, Teardown
from tests.support.fakedb import FakeDb


def test_the_member_index_follows_adds_and_removes_of_several_views() -> None:
    idx = MemberIndex()
    idx.add("v1", ["c:1", "c:2"])
    idx.add("v2", ["c:2"])
    idx.add("v2", ["c:2"])  # twice: still one
    assert sorted(idx.views_of("c:2")) == ["v1", "v2"] and list(idx.views_of("c:1")) == ["v1"]
    idx.remove("v1", ["c:2", "c:9"])
    assert list(idx.views_of("c:2")) == ["v2"]
    idx.remove("v2", ["c:2"])
    idx.remove("v1", ["c:1"])
    assert len(idx) == 0 and list(idx.views_of("c:1")) == []


def test_the_registry_keeps_the_member_index_with_its_views() -> None:
    reg = ViewRegistry()
    a = ViewState("query:a", RecordID("_00_query", "a"), "t", None, {"c:1", "c:2"})
    b = ViewState("query:b", RecordID("_00_query", "b"), "t", None, {"c:2"})
    reg["query:a"] = a
    reg["query:b"] = b
    assert sorted(reg.members.views_of("c:2")) == ["query:a", "query:b"]
    reg["query:a"] = ViewState("query:a", RecordID("_00_query", "a"), "t", None, {"c:3"})
    assert list(reg.members.views_of("c:1")) == [] and list(reg.members.views_of("c:3")) == [
        "query:a"]
    reg.pop("query:b")
    assert list(reg.members.views_of("c:2")) == []
    reg.clear()
    assert len(reg.members) == 0


def _delivering(views: dict[str, ViewState]) -> tuple[Sequencer, Publisher]:
    reg = ViewRegistry()
    for vid, v in views.items():
        reg[vid] = v
    pub = Publisher(FakeDb(), ref_mode="dedicated", throttle_ms=0,  # type: ignore[arg-type]
                    view_lookup=reg.get, rv_lookup=lambda rid: 1)
    state = SimpleNamespace(views=reg, publisher=pub)
    return Sequencer(state, None, None, None), pub  # type: ignore[arg-type]


def test_a_delete_marks_the_views_that_still_hold_the_record_after_the_batch() -> None:
    # comment:1 deleted and created again in one batch (the engine reports nothing), user:5
    # deleted but still a member by reference (an id inside a row): the database took both
    # edges along, so both are marked; comment:2 left its view (a delta) and is marked once.
    v = ViewState("query:v", RecordID("_00_query", "v"), "t", None,
                  {"comment:1", "comment:2", "user:5"})
    seq, pub = _delivering({"query:v": v})
    kept = [("comment", "DELETE", "comment:1", None), ("comment", "CREATE", "comment:1", {}),
            ("user", "DELETE", "user:5", None), ("comment", "DELETE", "comment:2", None),
            ("comment", "DELETE", "comment:9", None)]
    reply = {"groups": [[["query:v"], {"added": [], "removed": ["comment:2"],
                                       "updated": []}]]}
    seq.deliver(kept, [reply], False, None)
    assert pub.dirty == {"query:v": {"comment:1", "comment:2", "user:5"}}
    assert v.members == {"comment:1", "user:5"}
    assert list(seq.state.views.members.views_of("comment:2")) == []


async def test_take_batch_keeps_one_kind_of_event_together() -> None:
    seq = Sequencer(SimpleNamespace(), None, None, None)  # type: ignore[arg-type]
    loop = asyncio.get_running_loop()
    for i, deferred in enumerate([False, False, True, False]):
        seq._queue.put_nowait((("c", "UPDATE", f"c:{i}", {}), loop.create_future(), deferred,
                               0.0))
    sizes = []
    while not seq._queue.empty():
        sizes.append(len(seq.take_batch(seq._queue.get_nowait())))
    assert sizes == [2, 1, 1]


def _view(table: str, members: set[str], key: str = "v") -> PubView:
    return PubView(f"query:{key}", RecordID("_00_query", key), table, RecordID("user", "a"),
                   members)


async def test_nothing_is_written_to_a_dropped_table_and_its_teardowns_delete_only_the_row(
        ) -> None:
    db = FakeDb()
    gone = _view("_00_list_ref_user_a", {"post:1"})
    other = _view("_00_list_ref_user_b", {"post:2"}, key="w")
    views = {"query:v": gone, "query:w": other}
    pub = Publisher(db, ref_mode="dedicated", throttle_ms=0,  # type: ignore[arg-type]
                    view_lookup=views.get, rv_lookup=lambda rid: 1)
    pub.mark("query:v", ["post:1"])
    pub.materialise(gone)
    pub.mark("query:w", ["post:2"])
    pub.drop_table("_00_list_ref_user_a")
    await pub.quiesce("_00_list_ref_user_a")  # nothing holds one of its views
    await pub.flush()
    [tx] = db.transactions
    assert all("_00_list_ref_user_a" not in str(p) for _, p in tx), tx
    assert not pub.pending and pub.pending_ops == 0
    del views["query:v"]
    pub.teardown(Teardown("query:v", gone.record, gone.edge_table, 2))
    await pub.flush()
    assert db.transactions[1] == [("DELETE $q", {"q": gone.record})]
    views["query:v"] = gone
    pub.restore_table("_00_list_ref_user_a")
    pub.materialise(gone)
    await pub.flush()
    assert [s for s, _ in db.transactions[2]][-1] == MARK_READY


async def test_quiesce_waits_for_a_flush_holding_a_view_of_the_table() -> None:
    db = FakeDb(delay=0.05)
    v = _view("_00_list_ref_user_a", {"post:1"})
    pub = Publisher(db, ref_mode="dedicated", throttle_ms=0,  # type: ignore[arg-type]
                    view_lookup={"query:v": v}.get, rv_lookup=lambda rid: 1)
    pub.mark("query:v", ["post:1"])
    flush = asyncio.create_task(pub.flush())
    await asyncio.sleep(0)  # the flush took the view and waits on the database
    pub.drop_table("_00_list_ref_user_a")
    await pub.quiesce("_00_list_ref_user_a")
    assert flush.done() and len(db.transactions) == 1


T = "_00_list_ref_user_a"


class _ReadBack:
    """The database as the reconciler reads it: per view key its edges' `out`s (under the
    ids the SSP gives them) and (id, out) pairs under other ids; the `_00_query` rows."""

    def __init__(self, edges: dict[str, list[RecordID]], rows: list[dict[str, Any]],
                 foreign: dict[str, list[tuple[RecordID, RecordID]]] | None = None) -> None:
        self.edges, self.rows, self.foreign = edges, rows, foreign or {}
        self.reads: list[int] = []  # views per read

    async def query(self, sql: str, params: dict[str, Any], **_kw: Any) -> list[Any]:
        views = [params[f"q{i}"] for i in range(len(params) - 1)]
        self.reads.append(len(views))
        return [[{"id": RecordID(T, [q, o]), "out": o} for o in self.edges.get(str(q.id), [])]
                + [{"id": i, "out": o} for i, o in self.foreign.get(str(q.id), [])]
                for q in views] + [self.rows]


def _reconciler(views: dict[str, PubView], db: _ReadBack,
                pub_db: FakeDb | None = None) -> tuple[Reconciler, Publisher]:
    pub = Publisher(FakeDb(), ref_mode="dedicated", throttle_ms=0,  # type: ignore[arg-type]
                    view_lookup=views.get, rv_lookup=lambda rid: 1)
    state = SimpleNamespace(views=views, publisher=pub, db=db, pub_db=pub_db or FakeDb(),
                            status="ready")
    return Reconciler(state), pub  # type: ignore[arg-type]


async def test_a_retired_edge_is_not_a_member_for_the_reconciler() -> None:
    v = PubView("query:r", RecordID("_00_query", "r"), T, None, {"c:1"}, row_count=1)
    db = _ReadBack({}, [])
    db.query = _with_retired(db.query, RecordID(T, [v.record, RecordID("c", 1)]),
                             RecordID("c", 1))  # type: ignore[method-assign]
    rec, pub = _reconciler({"query:r": v}, db)
    await rec.check_slice()
    assert pub.dirty == {"query:r": {"c:1"}}  # its member's edge is retired: written again


def _with_retired(query: Any, eid: RecordID, out: RecordID) -> Any:
    async def q(sql: str, params: dict[str, Any], **kw: Any) -> list[Any]:
        res = await query(sql, params, **kw)
        res[0] = [*res[0], {"id": eid, "out": out, "removed": True}]
        return list(res)
    return q


async def test_the_reconciler_deletes_edges_under_ids_the_ssp_never_writes() -> None:
    v = PubView("query:f", RecordID("_00_query", "f"), T, None, {"c:1"}, row_count=1)
    stray = RecordID(T, "random")
    db = _ReadBack({"f": [RecordID("c", 1)]}, [], foreign={"f": [(stray, RecordID("c", 1))]})
    pub_db = FakeDb()
    rec, pub = _reconciler({"query:f": v}, db, pub_db)
    await rec.check_slice()
    assert pub_db.queries == [("DELETE $ids", {"ids": [stray]})]
    assert not pub.dirty  # its own edge is right: nothing to write


async def test_the_reconciler_marks_missing_and_extra_edges_and_repairs_a_changed_row() -> None:
    t = T
    a = PubView("query:a", RecordID("_00_query", "a"), t, None, {"c:1", "c:2"}, row_count=2)
    b = PubView("query:b", RecordID("_00_query", "b"), t, None, {"c:3"}, row_count=1)
    ok = PubView("query:ok", RecordID("_00_query", "ok"), t, None, {"c:4"}, row_count=1)
    views = {"query:a": a, "query:b": b, "query:ok": ok}
    db = _ReadBack({"a": [RecordID("c", 1), RecordID("c", 9)], "b": [RecordID("c", 3)],
                    "ok": [RecordID("c", 4)]},
                   [{"id": a.record, "state": "ready", "rowCount": 2},
                    {"id": b.record, "state": "ready", "rowCount": 7},
                    {"id": ok.record, "state": "ready", "rowCount": 1}])
    rec, pub = _reconciler(views, db)
    assert await rec.check_slice() == 2
    assert pub.dirty == {"query:a": {"c:2", "c:9"}}  # one missing, one extra
    assert set(pub.initial) == {"query:b"}  # its row's count was changed: written again
    assert rec.stats.as_dict() | {"last_error": ""} == {
        "passes": 1, "views_checked": 3, "edges_marked": 2, "rows_repaired": 1,
        "last_error": ""}


async def test_the_reconciler_skips_busy_and_unpublished_views_without_spinning() -> None:
    t = "_00_list_ref_user_a"
    busy = PubView("query:x", RecordID("_00_query", "x"), t, None, {"c:1"}, row_count=1)
    new = PubView("query:n", RecordID("_00_query", "n"), t, None, {"c:2"})  # no row_count yet
    views = {"query:x": busy, "query:n": new}
    db = _ReadBack({}, [])
    rec, pub = _reconciler(views, db)
    pub.mark("query:x", ["c:1"])
    assert await rec.check_slice() == 0 and db.reads == []
    assert rec.stats.passes == 1


async def test_a_slice_reads_at_most_its_edge_budget_and_a_pass_covers_every_view() -> None:
    t = "_00_list_ref_user_a"
    views = {f"query:v{i}": PubView(f"query:v{i}", RecordID("_00_query", f"v{i}"), t, None,
                                    {f"c:{i}_{j}" for j in range(SLICE_EDGES // 2)},
                                    row_count=SLICE_EDGES // 2) for i in range(5)}
    db = _ReadBack({f"v{i}": [RecordID("c", f"{i}_{j}") for j in range(SLICE_EDGES // 2)]
                    for i in range(5)}, [])
    rec, _pub = _reconciler(views, db)
    for _ in range(3):
        await rec.check_slice()
    assert db.reads == [2, 2, 1] and rec.stats.views_checked == 5 and rec.stats.passes == 1


async def test_the_reaper_forgets_retired_edges_of_a_dropped_table() -> None:
    # A DELETE naming a record of a missing table fails its whole transaction: the reaper
    # must not hold such edges, or it would fail for ever.
    db = FakeDb()
    gone = _view("_00_list_ref_user_a", set())
    kept = _view("_00_list_ref_user_b", set(), key="w")
    views = {"query:v": gone, "query:w": kept}
    pub = Publisher(db, ref_mode="dedicated", throttle_ms=0,  # type: ignore[arg-type]
                    view_lookup=views.get, rv_lookup=lambda rid: 1)
    assert pub.reaper is not None
    e1 = RecordID("_00_list_ref_user_a", [gone.record, RecordID("c", 1)])
    e2 = RecordID("_00_list_ref_user_b", [kept.record, RecordID("c", 2)])
    pub.reaper.add("query:v", [e1])
    pub.reaper.add("query:w", [e2])
    pub.drop_table("_00_list_ref_user_a")
    await pub.reaper.reap_once()
    [tx] = db.transactions
    assert tx[0][1]["ids"] == [e2]
    assert pub.reaper.figures()["queued"] == 0
