"""Unit tests of how the SSP keeps edges right when the database changes them itself: the
sequencer's batch boundary at a re-written deleted id, and the publisher's dropped tables."""

from __future__ import annotations

import asyncio

from surrealdb import RecordID

from ssp.hub.sequencer import ends_batch
from ssp.publisher import MARK_READY, Publisher, PubView, Teardown
from tests.support.fakedb import FakeDb


def batches(events: list[tuple[str, str, str, None]]) -> list[list[str]]:
    """How the sequencer's rule cuts a queue of events into batches (op + id per event)."""
    out: list[list[str]] = []
    deleted: set[str] = set()
    for ev in events:
        if not out or ends_batch(ev, deleted):
            deleted = set()
            ends_batch(ev, deleted)
            out.append([])
        out[-1].append(f"{ev[1]} {ev[2]}")
    return out


def test_a_batch_ends_before_a_write_of_an_id_it_deleted() -> None:
    ev = [("c", "CREATE", "c:1", None), ("c", "DELETE", "c:1", None),
          ("c", "UPDATE", "c:2", None), ("c", "CREATE", "c:1", None),
          ("c", "DELETE", "c:2", None), ("c", "DELETE", "c:2", None),
          ("c", "UPDATE", "c:1", None), ("c", "UPDATE", "c:2", None)]
    assert batches(ev) == [["CREATE c:1", "DELETE c:1", "UPDATE c:2"],
                           ["CREATE c:1", "DELETE c:2", "DELETE c:2", "UPDATE c:1"],
                           ["UPDATE c:2"]]


def test_writes_without_a_prior_delete_share_a_batch() -> None:
    ev = [("c", op, f"c:{i % 3}", None) for i, op in enumerate(["CREATE", "UPDATE"] * 5)]
    assert len(batches(ev)) == 1


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
