"""Unit tests of the SSP's pure parts: naming, log ring, changefeed decoding, type restoration,
admission (slots, pending operations) and the publisher's coalescing and retry rules."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
from surrealdb import RecordID

from dbclient import DbQueryError
from dbclient.feed import feed_change
from engine import wire
from ssp.config import ConfigError, SspConfig
from ssp.hub import PUBLICATION_SLOTS, Hub, LogRing, claimed_auth
from ssp.naming import SINGLE_TABLE, edge_suffix, edge_table, view_record
from ssp.publisher import (
    MARK_READY,
    MAX_PENDING_OPS,
    RETIRE,
    RETIRE_STALE,
    UPSERT_FLAT,
    UPSERT_FLAT_SINGLE,
    UPSERT_GROUPS_SINGLE,
    Publisher,
    PubView,
    Teardown,
    logs_cascaded_deletes,
)
from ssp.reaper import REAP, EdgeReaper
from ssp.shards import shard_of
from tests.support.fakedb import FakeDb


def test_plain_user_ids_name_their_table_directly() -> None:
    assert edge_table(RecordID("user", "alice"), "dedicated") == "_00_list_ref_user_alice"
    assert edge_table(RecordID("user", 42), "dedicated") == "_00_list_ref_user_42"


def test_edge_table_suffixes_are_collision_free_and_identifiers() -> None:
    ids = [RecordID("user", "42"), RecordID("user", 42), RecordID("user", "a-b"),
           RecordID("user", "a_b"), RecordID("account", "alice"), RecordID("user", "alice"),
           RecordID("user", "é"), RecordID("user", "_61")]
    suffixes = [edge_suffix(r) for r in ids]
    assert len(set(suffixes)) == len(ids)
    for s in suffixes:
        assert s.replace("_", "").isalnum() and s.isascii()


def test_single_mode_and_anonymous_views_use_the_shared_table() -> None:
    assert edge_table(RecordID("user", "alice"), "single") == "_00_list_ref"
    assert edge_table(None, "dedicated") == "_00_list_ref"


def test_view_record_strips_the_query_prefix() -> None:
    assert view_record("query:abc") == RecordID("_00_query", "abc")


def test_shard_of_is_stable_and_in_range() -> None:
    assert shard_of("query:x", 4) == shard_of("query:x", 4)
    assert {shard_of(f"query:{i}", 3) for i in range(100)} == {0, 1, 2}


def test_claimed_auth_from_params() -> None:
    assert claimed_auth({"auth_id": "user:alice"}) == RecordID("user", "alice")
    assert claimed_auth({"auth": {"id": "user:⟨a-b⟩"}}) == RecordID("user", "a-b")
    assert claimed_auth({}) is None and claimed_auth(None) is None
    with pytest.raises(ValueError, match="auth_id"):
        claimed_auth({"auth_id": 3})
    with pytest.raises(ValueError, match="not a record id"):
        claimed_auth({"auth_id": "no colon here"})


def test_log_ring_cursor_backfill_and_gap() -> None:
    ring = LogRing(size=3)
    assert ring.poll(None, 10)["body"] == {"lines": [], "cursor": 0, "gap": False}
    for i in range(5):
        ring.add(f"l{i}")
    assert ring.poll(None, 2)["body"] == {"lines": ["l3", "l4"], "cursor": 5, "gap": False}
    assert ring.poll(4, None)["body"] == {"lines": ["l4"], "cursor": 5, "gap": False}
    assert ring.poll(5, None)["body"] == {"lines": [], "cursor": 5, "gap": False}
    behind = ring.poll(0, None)["body"]
    assert behind["gap"] is True and behind["lines"] == ["l2", "l3", "l4"]


def test_log_ring_cursor_from_a_previous_process_reports_a_gap() -> None:
    ring = LogRing(size=10)
    for i in range(3):
        ring.add(f"l{i}")
    # a viewer reconnecting with Last-Event-ID 40 from before a restart
    ahead = ring.poll(40, None)["body"]
    assert ahead == {"lines": ["l0", "l1", "l2"], "cursor": 3, "gap": True}
    ring.add("l3")
    assert ring.poll(ahead["cursor"], None)["body"] == {"lines": ["l3"], "cursor": 4,
                                                        "gap": False}


def test_log_ring_backfill_is_not_cut_to_the_follow_up_cap() -> None:
    ring = LogRing(size=2000)
    for i in range(1500):
        ring.add(i)
    body = ring.poll(None, 1200, cap=500)["body"]
    assert body["lines"] == list(range(300, 1500)) and body["cursor"] == 1500
    assert len(ring.poll(0, None, cap=500)["body"]["lines"]) == 500


def test_feed_changes_become_events() -> None:
    row = {"id": RecordID("post", 1), "n": 1}
    assert feed_change("post", {"update": row}) == ("post", "CREATE", "post:1", row)
    assert feed_change("post", {"current": row, "update": [{"op": "replace"}]}) == (
        "post", "UPDATE", "post:1", row)
    assert feed_change("post", {"delete": {"id": RecordID("post", 1), "original": row}}) == (
        "post", "DELETE", "post:1", row)
    assert feed_change("post", {"define_table": {"name": "post"}}) is None


def make_hub(**env: str) -> Hub:
    return Hub(SspConfig.from_env({"SVC_DB_URL": "ws://127.0.0.1:1", "SVC_SSP_SHARDS": "1",
                                   "SVC_SSP_RUN_DIR": "/tmp/ssp-unit", **env}))


def test_json_records_get_links_and_datetimes_back_from_field_types() -> None:
    hub = make_hub()
    hub.field_types["post"] = {"owner": "record", "at": "datetime"}
    out = hub.admission.restore_types("post", "post:1", {"owner": "user:alice",
                                               "at": "2025-01-31T12:00:00Z", "free": "user:bob"})
    assert out["id"] == RecordID("post", 1)
    assert out["owner"] == RecordID("user", "alice")
    assert out["at"] == datetime(2025, 1, 31, 12, tzinfo=UTC)
    assert out["free"] == "user:bob"  # schemaless: no definition, stays a string
    with pytest.raises(ValueError, match="not in table"):
        hub.admission.restore_types("post", "user:1", {})


async def test_ingest_is_refused_when_slots_are_full_and_nothing_is_applied() -> None:
    hub = make_hub()
    hub.status = "ready"
    hub.admission.slots = PUBLICATION_SLOTS
    body = {"table": "post", "op": "CREATE", "id": "post:1", "record": {"n": 1}}
    r = await hub.handle({"route": "POST /ingest", "body": body})
    assert r["status"] == 503 and r["body"]["error"] == "SSP_NOT_READY"
    assert hub.rows.tables() == [] and hub.seq == 0 and hub.publisher.overload_rejections == 1


async def test_ingest_is_refused_when_pending_operations_are_over_the_threshold() -> None:
    hub = make_hub()
    hub.status = "ready"
    hub.publisher.pending_ops = MAX_PENDING_OPS
    r = await hub.handle({"route": "POST /ingest", "body": {
        "table": "post", "op": "CREATE", "id": "post:1", "record": {}}})
    assert r["status"] == 503 and hub.rows.tables() == []


async def test_ingest_before_ready_is_503_and_bad_records_are_400() -> None:
    hub = make_hub()
    r = await hub.handle({"route": "POST /ingest", "body": {
        "table": "post", "op": "CREATE", "id": "post:1", "record": {}}})
    assert r["status"] == 503
    hub.status = "ready"
    for body in ({"table": "post", "op": "CREATE", "id": "post:1", "record": [1]},
                 {"table": "post", "op": "CREATE", "id": "post:1", "record": {"n": 2**70}},
                 {"table": "post", "op": "NOPE", "id": "post:1", "record": {}},
                 {"table": "post", "op": "CREATE", "id": "::", "record": {}}):
        r = await hub.handle({"route": "POST /ingest", "body": body})
        assert r["status"] == 400 and r["body"]["message"], body
    assert hub.rows.tables() == []


async def test_health_and_unknown_routes() -> None:
    hub = make_hub()
    r = await hub.handle({"route": "GET /health"})
    assert r == {"status": 503, "body": {"status": "bootstrapping"}}
    hub.db.consecutive_timeouts = 3
    hub.status = "ready"
    r = await hub.handle({"route": "GET /health"})
    assert r["status"] == 200
    assert r["body"]["db"] == {"status": "stalled", "consecutive_timeouts": 3}
    assert (await hub.handle({"route": "GET /nope"}))["status"] == 404
    assert (await hub.handle("junk"))["status"] == 400


def upserted(stmts: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    """The edges a flush's upsert statements write, as maps (flat rows and groups read back)."""
    out: list[dict[str, Any]] = []
    for sql, p in stmts:
        p = p or {}
        for r in p.get("rows", []) if sql in (UPSERT_FLAT, UPSERT_FLAT_SINGLE) else []:
            out.append({"table": r[0], "in": r[1], "out": r[2], "rv": r[3], "seq": p["seq"],
                        "auth_id": r[4] if len(r) > 4 else None})
        for g in p.get("groups", []):
            out.extend({"table": g[0], "in": g[1], "out": m, "rv": rv, "seq": p["seq"],
                        "auth_id": g[2]} for m, rv in g[3])
    return out


def make_pub(views: dict[str, PubView], db: FakeDb) -> Publisher:
    return Publisher(db, ref_mode="dedicated", throttle_ms=0,  # type: ignore[arg-type]
                     view_lookup=views.get, rv_lookup=lambda rid: 7)


def view(members: set[str]) -> PubView:
    return PubView("query:v", RecordID("_00_query", "v"), "_00_list_ref_user_alice",
                   RecordID("user", "alice"), members)


async def test_flush_writes_members_as_upserts_and_retires_the_others_in_one_transaction(
        ) -> None:
    db = FakeDb()
    v = view({"post:1"})
    pub = make_pub({"query:v": v}, db)
    pub.mark("query:v", ["post:1", "post:2"])
    await pub.flush()
    [tx] = db.transactions
    # mode dedicated: the edge of a member that left is retired (an UPDATE), not deleted
    assert [s for s, _ in tx] == [RETIRE, UPSERT_FLAT]
    gone = RecordID("_00_list_ref_user_alice", [v.record, RecordID("post", 2)])
    assert tx[0][1]["ids"] == [gone]
    # a flat row: [table, view, member, rv]; the flush's seq is one parameter
    assert tx[1][1]["rows"] == [["_00_list_ref_user_alice", v.record, RecordID("post", 1), 7]]
    assert isinstance(tx[1][1]["seq"], int) and tx[0][1]["seq"] == tx[1][1]["seq"]
    assert not pub.pending
    # ... and queued for the reaper, which deletes it while publication is quiet
    assert pub.reaper is not None and pub.reaper.figures()["queued"] == 1
    assert pub.quiet() and pub.idle()
    # A change waiting for its flush: not falling behind (the reconciler may read), but not
    # idle either: the reaper keeps to its busy share (issue 31: between the flushes of a
    # steady load it took ~45% of a database worker).
    pub.throttle = 60.0
    pub.mark("query:v", ["post:1"])
    assert pub.quiet() and not pub.idle()
    pub.throttle = 0.0
    await pub.flush()
    assert pub.idle()
    await pub.reaper.reap_once()
    assert db.transactions[-1] == [(REAP, {"ids": [gone]})]
    assert pub.reaper.figures()["queued"] == 0 and pub.reaper.figures()["reaped"] == 1


async def test_only_edges_the_flush_did_retire_are_queued_for_the_reaper() -> None:
    # An edge whose member's row was deleted went with the row (the database's cascade): the
    # RETIRE finds nothing there, and the reaper must not spend a DELETE on it.
    class CascadedDb(FakeDb):
        async def transaction(self, stmts: list[tuple[str, Any]]) -> list[Any]:
            out = await super().transaction(stmts)
            return [[i for i in r or [] if i.id[1] != RecordID("post", 2)] if s == RETIRE else r
                    for (s, _), r in zip(stmts, out, strict=True)]
    db = CascadedDb()
    v = view(set())
    pub = make_pub({"query:v": v}, db)
    pub.mark("query:v", ["post:2", "post:3"])
    await pub.flush()
    assert [s for s, _ in db.transactions[0]] == [RETIRE]
    assert pub.reaper is not None and pub.reaper.figures()["queued"] == 1
    await pub.reaper.reap_once()
    assert db.transactions[1] == [(REAP, {"ids": [RecordID(
        "_00_list_ref_user_alice", [v.record, RecordID("post", 3)])]})]


async def test_a_member_that_comes_back_takes_its_edge_off_the_reapers_queue() -> None:
    # A steady load moves rows in and out of views: a retired edge revived by the member's
    # return is not the reaper's any more, so the queue holds only edges retired now.
    db = FakeDb()
    v = view(set())
    pub = make_pub({"query:v": v}, db)
    assert pub.reaper is not None
    pub.mark("query:v", ["post:2", "post:3"])  # both left: retired
    await pub.flush()
    assert pub.reaper.figures()["queued"] == 2
    v.members.add("post:2")  # post:2 came back: its edge is upserted (revived)
    pub.mark("query:v", ["post:2"])
    await pub.flush()
    assert pub.reaper.figures()["queued"] == 1 and pub.reaper.figures()["revived"] == 1
    await pub.reaper.reap_once()
    assert db.transactions[-1] == [(REAP, {"ids": [RecordID(
        "_00_list_ref_user_alice", [v.record, RecordID("post", 3)])]})]


async def test_mode_single_deletes_the_edges_of_members_that_left() -> None:
    db = FakeDb()
    v = PubView("query:v", RecordID("_00_query", "v"), SINGLE_TABLE, RecordID("user", "a"),
                set())
    pub = Publisher(db, ref_mode="single", throttle_ms=0,  # type: ignore[arg-type]
                    view_lookup={"query:v": v}.get, rv_lookup=lambda rid: 7)
    pub.mark("query:v", ["post:2"])
    await pub.flush()
    assert [s for s, _ in db.transactions[0]] == ["DELETE $ids"]
    assert pub.reaper is None


async def test_the_reaper_leaves_views_a_flush_holds_and_keeps_edges_a_failure_left() -> None:
    db = FakeDb()
    v = view(set())
    views: dict[str, PubView] = {"query:v": v}
    pub = make_pub(views, db)
    assert pub.reaper is not None
    pub.reaper.add("query:v", [RecordID("e", [v.record, RecordID("post", 1)])])
    async with pub.hold("query:v"):  # a flush (or a hold) has the view: nothing to reap now
        assert not pub.quiet() and not pub.idle() and await pub.reaper.reap_once() == 0.0
    assert db.transactions == []
    db.fail = 1
    await pub.reaper.reap_once()  # fails: the edge stays queued, the view is released
    assert pub.reaper.figures()["queued"] == 1 and pub.reaper.figures()["failures"] == 1
    assert pub.claim("query:v", ["post:1"]) and not pub.claim("query:v", ["post:1"])
    await pub.unclaim(["query:v"])
    await pub.reaper.reap_once()
    assert len(db.transactions) == 1 and pub.reaper.figures()["queued"] == 0


async def test_a_flush_writes_a_view_the_reaper_holds_but_not_the_members_it_deletes(
        ) -> None:
    # The reaper holds the members whose edges it deletes, not their whole view: the view's
    # other changes are published meanwhile, the held ones right after its transaction.
    db = FakeDb()
    v = view({"post:1", "post:3"})
    pub = make_pub({"query:v": v}, db)
    assert pub.claim("query:v", ["post:1"])
    pub.mark("query:v", ["post:1", "post:2", "post:3"])
    await pub.flush()
    [tx] = db.transactions
    assert [e["out"] for e in upserted(tx)] == [RecordID("post", 3)]
    assert [r for s, p in tx if s == RETIRE for r in p["ids"]] == [
        RecordID("_00_list_ref_user_alice", [v.record, RecordID("post", 2)])]
    assert pub.pending and pub.figures().reaper_waits == 1 and pub.busy("query:v")
    assert await pub.flush() == 0  # still held: nothing else to write
    await pub.unclaim(["query:v"])
    await pub.flush()
    assert [e["out"] for e in upserted(db.transactions[-1])] == [RecordID("post", 1)]
    assert not pub.pending and not pub.busy("query:v")


class _BusyPublication:
    """A publication that is never idle: a steady load keeps its flushes coming."""

    def __init__(self) -> None:
        self.dropped: set[str] = set()

    def idle(self) -> bool:
        return False

    def claim(self, view_id: str, members: Any) -> bool:
        return True

    async def unclaim(self, view_ids: Any) -> None:
        return None


async def test_the_reaper_takes_its_share_while_publication_is_never_idle() -> None:
    # Waiting for quiet alone, retired edges piled up for as long as a steady load lasted.
    db = FakeDb()
    reaper = EdgeReaper(db, _BusyPublication())
    reaper.add("query:v", [RecordID("e", [RecordID("_00_query", "v"), RecordID("post", i)])
                           for i in range(3)])
    task = asyncio.create_task(reaper.run())
    try:
        for _ in range(500):
            if reaper.figures()["queued"] == 0:
                break
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    figures = reaper.figures()
    assert figures["queued"] == 0 and figures["reaped"] == 3, figures
    assert figures["busy_transactions"] >= 1 and db.transactions[0][0][0] == REAP


def _edges(view: str, table: str, keys: range) -> list[RecordID]:
    return [RecordID(table, [RecordID("_00_query", view), RecordID("post", i)]) for i in keys]


async def test_views_take_turns_in_the_reaper_so_a_busy_view_starves_none() -> None:
    # One view whose members keep leaving must not hold back another's retired edges: a view
    # only partly taken goes after the others (a global first-in-first-out took a's 100 first).
    db = FakeDb()
    reaper = EdgeReaper(db, _BusyPublication())
    reaper.add("query:a", _edges("a", "e", range(100)))
    reaper.add("query:b", _edges("b", "e", range(1)))
    await reaper.reap_once()
    await reaper.reap_once()
    second = db.transactions[1][0][1]["ids"]
    assert _edges("b", "e", range(1))[0] in second, second
    assert reaper.figures()["queued"] == 101 - sum(len(t[0][1]["ids"]) for t in db.transactions)


async def test_an_edge_retired_into_a_table_while_its_refill_reads_it_is_not_forgotten() -> None:
    # The queue is full (bound 1), so a second retired edge leaves only its table's name. The
    # refill takes the name off before its read; the read misses an edge retired meanwhile (it
    # committed after), so that edge puts the name back and a later turn finds it.
    gate = asyncio.Event()

    class GatedDb(FakeDb):
        async def query_one(self, sql: str, vars: Any = None, **_kw: Any) -> Any:
            await gate.wait()
            return []
    reaper = EdgeReaper(GatedDb(), _BusyPublication(), max_queued=1)
    reaper.overflow["e"] = None  # an earlier overflow (or the table list after a start)
    read = asyncio.create_task(reaper.refill_once())
    await asyncio.sleep(0)
    assert "e" not in reaper.overflow  # taken off before the read
    reaper.add("query:a", _edges("a", "e", range(2)))  # one queued, one past the bound
    gate.set()
    await read
    figures = reaper.figures()
    assert figures["queued"] == 1 and figures["overflowed"] == 1, figures
    assert list(reaper.overflow) == ["e"]


async def test_a_view_with_many_edges_goes_as_groups_of_at_most_a_chunk_and_small_ones_flat(
        ) -> None:
    db = FakeDb()
    big = PubView("query:big", RecordID("_00_query", "big"), SINGLE_TABLE,
                  RecordID("user", "bob"), {f"post:{i}" for i in range(2500)})
    small = PubView("query:s", RecordID("_00_query", "s"), SINGLE_TABLE, None, {"post:x"})
    views = {"query:big": big, "query:s": small}
    pub = Publisher(db, ref_mode="single", throttle_ms=0,  # type: ignore[arg-type]
                    view_lookup=views.get, rv_lookup=lambda rid: len(rid), max_ops=10_000)
    pub.mark("query:big", sorted(big.members))
    pub.mark("query:s", ["post:x"])
    await pub.flush()
    [tx] = db.transactions
    assert [s for s, _ in tx] == [UPSERT_GROUPS_SINGLE, UPSERT_GROUPS_SINGLE,
                                  UPSERT_FLAT_SINGLE, UPSERT_GROUPS_SINGLE]
    groups = [g for s, p in tx if s == UPSERT_GROUPS_SINGLE for g in p["groups"]]
    assert [len(g[3]) for g in groups] == [1000, 1000, 500]
    assert all(g[:3] == [SINGLE_TABLE, big.record, big.auth] for g in groups)
    sent = {str(out): rv for g in groups for out, rv in g[3]}
    assert sent == {str(RecordID("post", i)): len(f"post:{i}") for i in range(2500)}
    [flat] = [p["rows"] for s, p in tx if s == UPSERT_FLAT_SINGLE]
    assert flat == [[SINGLE_TABLE, small.record, RecordID("post", "x"), 6, None]]
    assert len({p["seq"] for _, p in tx}) == 1  # one flush, one seq
    assert not pub.pending


async def test_add_then_remove_within_a_window_coalesces_to_the_current_state() -> None:
    db = FakeDb()
    v = view(set())
    pub = make_pub({"query:v": v}, db)
    pub.mark("query:v", ["post:1"])
    pub.mark("query:v", ["post:1"])  # added, then removed: member set no longer has it
    await pub.flush()
    [tx] = db.transactions
    assert [s for s, _ in tx] == [RETIRE]


async def test_a_failed_flush_is_retried_with_nothing_lost() -> None:
    db = FakeDb()
    db.fail = 1
    v = view({"post:1"})
    pub = make_pub({"query:v": v}, db)
    pub.mark("query:v", ["post:1"])
    with pytest.raises(DbQueryError):
        await pub.flush()
    assert pub.pending
    await pub.flush()
    assert len(db.transactions) == 1 and db.transactions[0][0][0] == UPSERT_FLAT


async def test_materialise_marks_ready_and_teardown_is_dropped_after_re_registration() -> None:
    db = FakeDb()
    v = view({"post:1", "post:2"})
    views = {"query:v": v}
    pub = make_pub(views, db)
    pub.materialise(v)
    await pub.flush()
    [tx] = db.transactions
    # members upserted with the flush's seq, then the view's edges with another seq retired,
    # and every retired edge of the view listed for the reaper (an earlier run's too)
    assert [s for s, _ in tx] == [
        UPSERT_FLAT, RETIRE_STALE.format(table="_00_list_ref_user_alice"), MARK_READY]
    assert tx[1][1] == {"q": v.record, "seq": tx[0][1]["seq"]}
    assert tx[-1] == (MARK_READY, {"ups": [{"q": v.record, "n": 2}]})
    pub.teardown(Teardown("query:v", v.record, v.edge_table, 99))
    await pub.flush()  # still registered: the teardown is dropped
    assert len(db.transactions) == 1
    views.clear()
    pub.teardown(Teardown("query:v", v.record, v.edge_table, 100))
    await pub.flush()
    assert [s for s, _ in db.transactions[1]] == ["DELETE _00_list_ref_user_alice WHERE in = $q",
                                           "DELETE $q"]


async def test_flush_loop_with_throttle_coalesces_many_marks_into_one_transaction() -> None:
    db = FakeDb()
    v = view({f"post:{i}" for i in range(50)})
    pub = Publisher(db, ref_mode="dedicated", throttle_ms=50,  # type: ignore[arg-type]
                    view_lookup={"query:v": v}.get, rv_lookup=lambda rid: 1)
    pub.start()
    try:
        for i in range(50):
            pub.mark("query:v", [f"post:{i}"])
        assert await pub.drain(5.0)
    finally:
        await pub.stop()
    assert len(db.transactions) == 1
    inserted = [r for c in db.transactions for r in upserted(c)]
    assert sorted(str(r["out"]) for r in inserted) == sorted(
        str(RecordID("post", i)) for i in range(50))


_ = asyncio


async def test_a_timed_out_flush_is_retried_smaller() -> None:
    from dbclient import DbTimeout

    class SlowDb(FakeDb):
        async def transaction(self, stmts: list[tuple[str, Any]]) -> list[Any]:
            if sum(len((p or {}).get("rows", [])) for _, p in stmts) > 100:
                raise DbTimeout("transaction", 10)
            return await super().transaction(stmts)

    db = SlowDb()
    v = view({f"post:{i}" for i in range(400)})
    pub = make_pub({"query:v": v}, db)
    pub.mark("query:v", sorted(v.members))
    for _ in range(100):  # the budget halves per timeout, then grows back by a quarter
        if not pub.pending:
            break
        try:
            await pub.flush()
        except DbTimeout:
            pass
    assert not pub.pending
    written = sorted(str(r["out"]) for c in db.transactions for r in upserted(c))
    assert written == sorted(str(RecordID("post", i)) for i in range(400))


async def test_concurrent_flushes_never_share_a_view_and_hold_waits_for_them() -> None:
    gate = asyncio.Event()

    class GatedDb(FakeDb):
        async def transaction(self, stmts: list[tuple[str, Any]]) -> list[Any]:
            await gate.wait()
            return await super().transaction(stmts)

    db = GatedDb()
    a = PubView("query:a", RecordID("_00_query", "a"), "_00_list_ref_user_x",
                RecordID("user", "x"), {"post:1"})
    b = PubView("query:b", RecordID("_00_query", "b"), "_00_list_ref_user_x",
                RecordID("user", "x"), {"post:2"})
    pub = make_pub({"query:a": a, "query:b": b}, db)
    pub.budget = 1  # one view per flush
    pub.mark("query:a", ["post:1"])
    first = asyncio.create_task(pub.flush())
    await asyncio.sleep(0)
    pub.mark("query:a", ["post:1"])  # a is in flight: a second flush must leave it alone
    pub.mark("query:b", ["post:2"])
    second = asyncio.create_task(pub.flush())
    held = asyncio.create_task(_hold(pub, "query:a"))
    await asyncio.sleep(0.01)
    assert not held.done()  # waits for the flush holding a
    gate.set()
    await asyncio.gather(first, second, held)
    rows = [[str(r["out"]) for r in upserted(c)] for c in db.transactions]
    assert sorted(rows) == [["post:1"], ["post:2"]]
    assert pub.dirty == {"query:a": {"post:1"}}  # still pending for the next flush


async def _hold(pub: Publisher, vid: str) -> None:
    async with pub.hold(vid):
        pass


@pytest.mark.timeout(20)
async def test_flush_loops_wait_instead_of_spinning_while_views_are_held() -> None:
    gate = asyncio.Event()

    class GatedDb(FakeDb):
        async def transaction(self, stmts: list[tuple[str, Any]]) -> list[Any]:
            await gate.wait()
            return await super().transaction(stmts)

    db = GatedDb()
    v = view({"post:1"})
    pub = Publisher(db, ref_mode="dedicated", throttle_ms=0,  # type: ignore[arg-type]
                    view_lookup={"query:v": v}.get, rv_lookup=lambda rid: 1, flushers=3)
    pub.start()
    try:
        pub.mark("query:v", ["post:1"])
        await asyncio.sleep(0.02)  # one loop holds v inside its transaction
        pub.mark("query:v", ["post:1"])  # pending, but only for the held view
        await asyncio.sleep(0.05)  # returns only if the other loops yield
        gate.set()
        assert await pub.drain(5.0)
    finally:
        await pub.stop()
    assert len(db.transactions) == 2


async def test_a_flush_writes_at_most_max_tables_edge_tables_and_the_rest_follows() -> None:
    """SHOW CHANGES cannot page past 1,000 entries of one transaction (one per table), so one
    flush spanning every user's table would hide edges from changefeed readers."""
    from ssp.publisher import MAX_TABLES_PER_FLUSH

    db = FakeDb()
    users = MAX_TABLES_PER_FLUSH + 150
    views = {f"query:v{u}": PubView(f"query:v{u}", RecordID("_00_query", f"v{u}"),
                                    f"_00_list_ref_user_u{u}", RecordID("user", f"u{u}"),
                                    {f"post:{u}", f"post:x{u}"})
             for u in range(users)}
    pub = Publisher(db, ref_mode="dedicated", throttle_ms=0,  # type: ignore[arg-type]
                    view_lookup=views.get, rv_lookup=lambda rid: 1, max_ops=100_000)
    for vid in views:
        pub.mark(vid, ["post:" + vid.removeprefix("query:v"), "post:gone" + vid.removeprefix("query:v")])
    written: list[set[str]] = []
    while pub.pending:
        before = len(db.transactions)
        assert await pub.flush()
        stmts = db.transactions[before]
        rows = upserted(stmts)
        ids = [i for _, p in stmts for i in (p or {}).get("ids", [])]
        written.append({r["table"] for r in rows} | {i.table_name for i in ids})
    assert len(written) == 2
    assert all(len(t) <= MAX_TABLES_PER_FLUSH for t in written)
    assert set().union(*written) == {v.edge_table for v in views.values()}


async def test_a_row_arena_that_cannot_grow_fails_the_ssp_with_503(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    hub = make_hub()
    hub.status = "ready"
    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(hub.sequencer.run()), loop.create_task(hub.sequencer.collect())]
    try:
        body = {"table": "post", "op": "CREATE", "id": "post:1", "record": {"n": 1}}
        r = await hub.handle({"route": "POST /ingest", "body": body})
        assert r["status"] == 200 and hub.rows.count("post") == 1

        def no_space(*_a: Any) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr(hub.rows.arena, "put", no_space)
        body = {"table": "post", "op": "CREATE", "id": "post:2", "record": {"n": 2}}
        r = await hub.handle({"route": "POST /ingest", "body": body})
        assert r["status"] == 503 and "No space left" in r["body"]["message"], r
        assert hub.status == "failed" and hub.rows.count("post") == 1
        r = await hub.handle({"route": "GET /health"})
        assert r["status"] == 503 and r["body"]["status"] == "failed"
    finally:
        for t in tasks:
            t.cancel()
        hub.arena.close()


def test_publish_flushers_default_to_two_and_are_bounded() -> None:
    base = {"SVC_DB_URL": "ws://127.0.0.1:1"}
    assert SspConfig.from_env(base).publish_flushers == 2
    assert SspConfig.from_env({**base, "SVC_SSP_PUBLISH_FLUSHERS": "1"}).publish_flushers == 1
    for bad, words in (("0", "between 1 and 8, got 0"), ("9", "between 1 and 8, got 9"),
                       ("two", "integer")):
        with pytest.raises(ConfigError, match=words):
            SspConfig.from_env({**base, "SVC_SSP_PUBLISH_FLUSHERS": bad})
    hub = make_hub()
    try:
        assert hub.publisher.flushers == hub.cfg.publish_flushers == 2
    finally:
        hub.arena.close()


async def test_a_typed_ingest_body_is_decoded_and_applied() -> None:
    hub = make_hub()
    hub.status = "ready"
    hub.tables.add("post")
    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(hub.sequencer.run()), loop.create_task(hub.sequencer.collect())]
    try:
        body = wire.encode_event({"table": "post", "op": "CREATE", "id": "post:1",
                                  "record": {"id": RecordID("post", 1), "owner":
                                             RecordID("user", "alice")}})
        r = await hub.handle({"route": "POST /ingest", "body": body})
        assert r["status"] == 200, r
        assert hub.rows.count("post") == 1
        bad = await hub.handle({"route": "POST /ingest", "body": b"\xc1"})
        assert bad["status"] == 400 and "request body" in bad["body"]["message"], bad
    finally:
        for t in tasks:
            t.cancel()
        hub.arena.close()


@pytest.mark.parametrize(("version", "logged"), [
    ("surrealdb-3.2.4", True), ("surrealdb-3.3.0", True), ("surrealdb-4.0.0-beta", True),
    ("3.2.10", True), ("surrealdb-3.2.3", False), ("surrealdb-3.0.2", False),
    ("surrealdb-2.3.7", False), ("", False), ("unknown", False)])
def test_removals_take_the_logged_path_unless_the_release_logs_cascaded_deletes(
        version: str, logged: bool) -> None:
    # 3.0.2 logs no changefeed entry for the edges a DELETE takes along (and a DELETE without
    # its row); 3.2.4 does. A release not known to log them takes the logged path.
    assert logs_cascaded_deletes(version) is logged


async def test_publication_figures_split_the_latency_into_queue_and_transaction(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A fake clock: a change arrives at 10.0, its flush begins at 10.25 and its transaction
    # takes 0.5 s; the figures say where the 0.75 s went.
    clock = {"now": 10.0}
    monkeypatch.setattr("ssp.publisher.time.monotonic", lambda: clock["now"])

    class SlowDb(FakeDb):
        async def transaction(self, stmts: list[tuple[str, Any]]) -> list[Any]:
            clock["now"] += 0.5
            return await super().transaction(stmts)

    db = SlowDb()
    pub = make_pub({"query:v": view({"post:1"})}, db)
    pub.mark("query:v", ["post:1"], at=10.0)
    clock["now"] = 10.25
    await pub.flush()
    f = pub.figures()
    assert f.latency_p99_ms == pytest.approx(750)
    assert f.queued_p99_ms == pytest.approx(250)
    assert f.transaction_p50_ms == pytest.approx(500) == f.transaction_p99_ms
    body = f.debug_memory()
    assert body["queued_p99_ms"] == pytest.approx(250) and body["transaction_p99_ms"]
    assert body["slowest_transactions"] == [{"ms": 500.0, "operations": 1, "views": 1}]
    # A member the reaper holds is passed over, and the figures count it.
    assert pub.claim("query:v", ["post:1"])
    pub.mark("query:v", ["post:1"])
    assert await pub.flush() == 0 and pub.figures().reaper_waits == 1
    await pub.unclaim(["query:v"])
    assert await pub.flush() == 1
    pub.stats.clear_latencies()  # /debug/memory?reset_latency=1
    f = pub.figures()
    assert f.latency_p99_ms is None and f.transaction_p99_ms is None
    assert f.slowest_transactions == [] and f.reaper_waits == 0


def test_the_slowest_transactions_of_a_window_are_kept() -> None:
    from ssp.publisher import SLOWEST_KEPT, PublisherStats

    st = PublisherStats()
    for i, ms in enumerate([5.0, 90.0, 1.0, 40.0, 300.0, 2.0, 70.0, 8.0]):
        st.transaction(ms, i, 1)
    assert sorted(st.slowest, reverse=True)[:3] == [(300.0, 4, 1), (90.0, 1, 1), (70.0, 6, 1)]
    assert len(st.slowest) == SLOWEST_KEPT and min(st.slowest)[0] == 8.0
