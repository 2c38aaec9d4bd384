"""A new window over most of a large table walks its first sort key's index in order and
evaluates rows only as far as its windows reach (engine.window, "walk"); the rest are
evaluated when removals empty the head, or when they are written. Checked against
SurrealDB after every random write (values, order, mixed kinds of sort values, NONE vs
NULL, ties by id), with the walk's kind set by the table's first row (int, float,
string, datetime); and the entries a registration makes bounded by what its windows reach."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from surrealdb import RecordID

from engine.store import rid_text
from tests.engine.codec import Case, View
from tests.engine.runner import engine_api, run_case

ROWS = 200  # large against the windows (4 x (LIMIT + 32)): the walk is taken

VIEWS = [
    "SELECT id, k FROM comment WHERE v >= $lo ORDER BY k LIMIT 3",
    "SELECT id, k, v FROM comment WHERE v >= $lo ORDER BY k DESC LIMIT 4 START 2",
    "SELECT id, k, v FROM comment WHERE v * 2 > $lo ORDER BY k DESC, v ASC LIMIT 2",
    "SELECT id, k FROM comment WHERE v < $hi AND v >= 0 ORDER BY k ASC, id DESC LIMIT 5",
    # through one link: a write to a thread requalifies the rows holding its link, walked
    # or not; rows holding an array of links are evaluated at registration
    "SELECT id, k FROM comment WHERE thread.score >= $lo AND v >= 0 ORDER BY k LIMIT 3",
    "SELECT id, k, v FROM comment WHERE thread.score < $hi AND v > 0 ORDER BY k DESC "
    "LIMIT 2 START 1",
    # an equality or IN through the link keeping many rows (engine.linkscan's candidates
    # as the walk's rows); without LIMIT the order is not walked
    "SELECT id, k FROM comment WHERE thread.score IN $set AND v >= 0 ORDER BY k LIMIT 3",
    "SELECT id, k, v FROM comment WHERE thread.score = $lo AND v > 0 ORDER BY k DESC "
    "LIMIT 2 START 1",
    "SELECT id, k FROM comment WHERE thread.score IN $set ORDER BY k, id DESC",
]
PARAMS: list[dict[str, Any]] = [{"lo": 1, "hi": 8, "set": [1, 2, 3, 5, 8]},
                                {"lo": 6, "hi": 2, "set": [6, 0, 9]},
                                {"lo": -1, "hi": 99, "set": [4, "x", 7]}]

_T0 = datetime(2024, 1, 1, tzinfo=UTC)


def _k(r: random.Random, kind: str, spread: int = 12) -> Any:
    """A sort value: mostly of ``kind`` with few distinct values (ties: ``spread`` + 1 of
    them), the rest of every other kind the walk must order apart (NONE, NULL, floats, huge
    ints, strings, ...)."""
    x = r.random()
    if x < 0.85:
        n = r.randint(0, spread)
        return (n if kind == "int" else n + 0.25 if kind == "float" else f"s{n:02d}"
                if kind == "str" else _T0 + timedelta(hours=n))
    others: list[Any] = ["absent", None, r.randint(0, 12) + 0.5, float(r.randint(0, 12)),
                         2**60, f"s{r.randint(0, 12):02d}", r.randint(0, 12),
                         _T0 + timedelta(minutes=r.randint(0, 900)), True, [1, 2]]
    return r.choice(others)


def _row(r: random.Random, i: int, kind: str, spread: int = 12) -> dict[str, Any]:
    row: dict[str, Any] = {"id": RecordID("comment", i), "v": r.randint(0, 9)}
    x = r.random()
    # threads 0-7, of which 6 and 7 may not exist; an array, an object, NULL, or none
    row["thread"] = (RecordID("thread", r.randint(0, 7)) if x < 0.82 else
                     [RecordID("thread", r.randint(0, 5))] if x < 0.87 else
                     {"score": r.randint(0, 9)} if x < 0.9 else None)  # an object's field
    if x > 0.95:
        del row["thread"]
    k = _k(r, kind, spread)
    if k != "absent":
        row["k"] = k
    return row


def _extreme(row: dict[str, Any], kind: str) -> bool:
    """Whether the row's sort value is not of ``kind`` (NONE, NULL and bools come first,
    huge ints and strings may come last) or among its first or last values: in the head of
    an ascending or of a descending window."""
    values = [_T0 + timedelta(hours=n) if kind == "datetime" else f"s{n:02d}" if kind == "str"
              else n + 0.25 if kind == "float" else n for n in (0, 1, 2, 11, 12)]
    k = row.get("k")
    return type(k) is not type(values[0]) or k in values


def _case(seed: int, kind: str, surql: str, n_rows: int = ROWS, spread: int = 12) -> Case:
    r = random.Random(seed)
    rows = [_row(r, i, kind, spread) for i in range(n_rows)]
    # the first row sets the walk's kind
    rows[0]["k"] = (3 if kind == "int" else 3.25 if kind == "float" else "s03"
                    if kind == "str" else _T0)
    cur = {i: row for i, row in enumerate(rows)}
    writes: list[Any] = []
    threads = [{"id": RecordID("thread", t), "score": r.randint(0, 9)} for t in range(6)]
    tpresent = set(range(6))
    for _ in range(250):
        if r.random() < 0.1:
            t = r.randint(0, 7)
            writes.append(("thread", "UPDATE" if t in tpresent else "CREATE",
                           RecordID("thread", t),
                           {"id": RecordID("thread", t), "score": r.randint(0, 9)}))
            tpresent.add(t)
            continue
        # most writes hit rows in the heads, so they leave (and refills walk further)
        heads = [i for i, row in cur.items() if _extreme(row, kind) and row["v"] >= 0]
        if spread < 12:
            # few sort values: a window's rows are the lowest ids of its first key
            heads = sorted(heads)[:30]
        if heads and r.random() < 0.8:
            # a row of the heads leaves every window, keeping its sort value
            i = r.choice(heads)
            row = {**cur[i], "v": -5}
            writes.append(("comment", "UPDATE", RecordID("comment", i), row))
            cur[i] = row
            continue
        i = r.randint(0, n_rows + 5)
        if i in cur and r.random() < 0.2:
            writes.append(("comment", "DELETE", RecordID("comment", i), None))
            del cur[i]
            continue
        row = _row(r, i, kind, spread)
        writes.append(("comment", "UPDATE" if i in cur else "CREATE",
                       RecordID("comment", i), row))
        cur[i] = row
    return Case(rows={"comment": rows, "thread": threads}, views=[View(surql, dict(p)) for p in PARAMS],
                writes=writes, note=f"walk {seed} {kind}: {surql}", check_updated=True)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("kind", ["int", "float", "str", "datetime"])
@pytest.mark.parametrize("surql", VIEWS)
def test_walked_windows_agree_with_surrealdb(surql: str, kind: str, seed: int) -> None:
    mismatch = run_case(_case(seed, kind, surql), check_updated=True)
    assert mismatch is None, str(mismatch)


@pytest.mark.parametrize("kind", ["int", "str"])
@pytest.mark.parametrize("surql", VIEWS)
def test_windows_walked_inside_a_key_of_many_rows_agree_with_surrealdb(surql: str, kind: str
                                                                        ) -> None:
    """Three sort values over 400 rows: a key holds ~110 rows, walked in entry order and
    left part way (engine.window, "_key_order"); removals from the heads walk on from
    there, inside the key or past it."""
    mismatch = run_case(_case(7, kind, surql, n_rows=400, spread=2), check_updated=True)
    assert mismatch is None, str(mismatch)


def _items(eng: Any, n: int, keys: int = 1000) -> None:
    eng.load("comment", [{"id": RecordID("comment", i), "k": i % keys, "v": i % 7}
                      for i in range(n)])


def test_a_wide_window_makes_entries_only_as_far_as_it_reaches() -> None:
    """``v >= 1 ORDER BY k LIMIT 10`` over 20,000 rows, 6 in 7 of them passing: the order
    holds entries for the rows under the first keys up to its head (42 entries and the
    ties of the last key), not for the 17,143 rows that pass."""
    view_engine, _ = engine_api()
    eng = view_engine()
    _items(eng, 20_000)
    got = eng.register("v", "SELECT id, k FROM comment WHERE v >= $lo ORDER BY k LIMIT 10",
                       {"lo": 1})
    assert [r["k"] for r in eng.result("v")] == [0] * 10 and len(got) == 10
    order = eng.views["v"].order
    assert len(order.entries) < 100


@pytest.mark.parametrize("q", ["SELECT id, k FROM comment WHERE v >= $lo ORDER BY k LIMIT 10",
                               "SELECT id, k FROM comment WHERE v >= $lo ORDER BY k DESC, id "
                               "DESC LIMIT 10"])
def test_a_key_of_many_rows_is_walked_only_as_far_as_the_window_reaches(q: str) -> None:
    """Five sort values over 20,000 rows (4,000 a key, 3,429 of them passing): the walk
    stops inside the first key it reaches, in entry order, and a second view of the shape
    shares that order; each window equals a fresh engine's after the rows it showed left
    six times (the walk goes on from where it stopped)."""
    view_engine, _ = engine_api()
    eng = view_engine()
    _items(eng, 20_000, keys=5)
    eng.register("v", q, {"lo": 1})
    eng.register("w", q, {"lo": 2})
    for vid in ("v", "w"):
        assert len(eng.views[vid].order.entries) < 100
    left: set[str] = set()
    for _ in range(6):  # more than the head keeps beyond the window: it is filled again
        for r in eng.result("v"):
            eng.ingest("comment", "UPDATE", rid_text(r["id"]), {"id": r["id"], "k": 2, "v": 0})
            left.add(rid_text(r["id"]))
    fresh = view_engine()
    fresh.load("comment", list(eng.store.table("comment").rows.values()))
    for vid, lo in (("v", 1), ("w", 2)):
        fresh.register(vid, q, {"lo": lo})
        assert eng.result(vid) == fresh.result(vid)
    assert len(eng.result("v")) == 10 and not left & {rid_text(r["id"]) for r in eng.result("v")}


def test_removals_walk_further_and_a_larger_page_too() -> None:
    """Rows leaving the head make the order walk on; a page of the same filter reaching
    further walks on at registration: each window equals a fresh engine's."""
    view_engine, _ = engine_api()
    q = "SELECT id, k FROM comment WHERE v >= $lo ORDER BY k DESC LIMIT $n START $s"
    eng = view_engine()
    _items(eng, 3_000)
    eng.register("a", q, {"lo": 1, "n": 5, "s": 0})
    for i in range(999, 900, -1):  # the rows with the largest keys leave, then come back
        for j in range(i, 3_000, 1000):
            eng.ingest("comment", "UPDATE", f"comment:{j}", {"id": RecordID("comment", j), "k": i,
                                                       "v": 0})
    eng.register("b", q, {"lo": 1, "n": 40, "s": 100})
    for j in range(950, 3_000, 1000):
        eng.ingest("comment", "UPDATE", f"comment:{j}", {"id": RecordID("comment", j), "k": 950,
                                                   "v": 3})
    fresh = view_engine()
    fresh.load("comment", [eng.store.table("comment").rows[r] for r in
                        eng.store.table("comment").rows])
    fresh.register("a", q, {"lo": 1, "n": 5, "s": 0})
    fresh.register("b", q, {"lo": 1, "n": 40, "s": 100})
    assert eng.result("a") == fresh.result("a")
    assert eng.result("b") == fresh.result("b")
    assert [r["k"] for r in eng.result("a")] == [950, 950, 950, 900, 900]



# ORDER BY id ("the latest"): walked by the keys of the record ids, of the first row's kind
ID_VIEWS = [
    "SELECT id, k FROM comment WHERE v >= $lo ORDER BY id DESC LIMIT 3",
    "SELECT id, k, v FROM comment WHERE v >= $lo ORDER BY id LIMIT 4 START 2",
    "SELECT id, k, v FROM comment WHERE v < $hi AND v >= 0 ORDER BY id DESC, k LIMIT 5",
    "SELECT id, k FROM comment WHERE thread.score >= $lo AND v >= 0 ORDER BY id DESC "
    "LIMIT 2 START 1",
    "SELECT id, k FROM comment WHERE thread.score IN $set AND v >= 0 ORDER BY id LIMIT 3",
]


def _id_key(r: random.Random, n: int, kind: str) -> Any:
    """A record-id key: mostly of ``kind``; the rest numbers and strings (ids order numbers
    before strings), of the other kind evaluated at registration."""
    x = r.random()
    if x < 0.85:
        return n if kind == "int" else f"c{n:04d}"
    return r.choice([n, -n, f"c{n:04d}", f"z{n}", f"C{n}"])


def _id_case(seed: int, kind: str, surql: str) -> Case:
    r = random.Random(seed)
    keys: list[Any] = [100 if kind == "int" else "c0100"]  # the first row sets the walk's kind
    seen = {repr(keys[0])}
    while len(keys) < ROWS:
        k = _id_key(r, r.randint(0, 400), kind)
        if repr(k) not in seen:
            seen.add(repr(k))
            keys.append(k)
    r.shuffle(keys[1:])
    rows = []
    for k in keys:
        row = _row(r, 0, "int")
        row["id"] = RecordID("comment", k)
        rows.append(row)
    cur = {repr(row["id"].id): row for row in rows}
    threads = [{"id": RecordID("thread", t), "score": r.randint(0, 9)} for t in range(6)]
    writes: list[Any] = []
    for _ in range(200):
        x = r.random()
        if x < 0.08:
            t = r.randint(0, 5)
            writes.append(("thread", "UPDATE", RecordID("thread", t),
                           {"id": RecordID("thread", t), "score": r.randint(0, 9)}))
            continue
        ordered = sorted(cur.values(), key=lambda row: (type(row["id"].id) is str,
                                                        str(row["id"].id).zfill(12)))
        if x < 0.6 and ordered:
            # a row at either end of the ids (the heads of ASC and DESC windows) leaves,
            # changes, or goes
            row = r.choice(ordered[:6] + ordered[-6:])
            rid = row["id"]
            if r.random() < 0.4:
                writes.append(("comment", "DELETE", rid, None))
                del cur[repr(rid.id)]
            else:
                new = {**row, "v": r.choice([-5, r.randint(0, 9)])}
                writes.append(("comment", "UPDATE", rid, new))
                cur[repr(rid.id)] = new
            continue
        # a new row, often past either end (the new latest), or one written again
        k = _id_key(r, r.choice([r.randint(0, 400), r.randint(400, 600), -r.randint(1, 50)]),
                    kind)
        row = _row(r, 0, "int")
        row["id"] = RecordID("comment", k)
        writes.append(("comment", "UPDATE" if repr(k) in cur else "CREATE", row["id"], row))
        cur[repr(k)] = row
    return Case(rows={"comment": rows, "thread": threads},
                views=[View(surql, dict(p)) for p in PARAMS], writes=writes,
                note=f"id walk {seed} {kind}: {surql}", check_updated=True)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("kind", ["int", "str"])
@pytest.mark.parametrize("surql", ID_VIEWS)
def test_windows_ordered_by_id_agree_with_surrealdb(surql: str, kind: str, seed: int) -> None:
    mismatch = run_case(_id_case(seed, kind, surql), check_updated=True)
    assert mismatch is None, str(mismatch)


def test_the_latest_rows_are_found_without_evaluating_the_table() -> None:
    """``ORDER BY id DESC LIMIT 10`` over 20,000 rows, 6 in 7 passing: the order holds
    entries for about the first 42 ids walked, not for the 17,143 rows that pass; a row
    created past the last id comes first, and removing the head walks on."""
    view_engine, _ = engine_api()
    eng = view_engine()
    _items(eng, 20_000)
    q = "SELECT id, k FROM comment WHERE v >= $lo ORDER BY id DESC LIMIT 10"
    got = eng.register("v", q, {"lo": 1})
    want = [i for i in range(19_999, -1, -1) if i % 7 >= 1][:10]
    assert [r["id"] for r in eng.result("v")] == [RecordID("comment", i) for i in want]
    assert len(got) == 10 and len(eng.views["v"].order.entries) < 100
    eng.ingest("comment", "CREATE", "comment:20000",
               {"id": RecordID("comment", 20_000), "k": 5, "v": 3})
    for i in want[:5]:
        eng.ingest("comment", "DELETE", f"comment:{i}", None)
    fresh = view_engine()
    fresh.load("comment", [eng.store.table("comment").rows[r] for r in
                           eng.store.table("comment").rows])
    fresh.register("v", q, {"lo": 1})
    assert eng.result("v") == fresh.result("v")
    assert eng.result("v")[0]["id"] == RecordID("comment", 20_000)


def test_a_refill_after_writes_walks_the_lists_made_at_registration() -> None:
    """The walk's lists outlive writes (engine.rangescan.walk_keys): windows that refill
    after their rows were deleted or moved walk on through the lists made when they were
    registered, not new sorts of the table's 20,000 ids or of a key's 4,000 rows; their
    windows equal a fresh engine's."""
    from engine.rangescan import WALK_NUMBER

    view_engine, _ = engine_api()
    eng = view_engine()
    _items(eng, 20_000, keys=5)
    q_id = "SELECT id, k, v FROM comment WHERE v >= $lo ORDER BY id DESC LIMIT 10"
    q_k = "SELECT id, k, v FROM comment WHERE v >= $lo ORDER BY k LIMIT 10"
    eng.register("i", q_id, {"lo": 1})
    eng.register("k", q_k, {"lo": 1})
    ts = eng.store.table("comment")
    made = ts.walks[("id", WALK_NUMBER)][0]
    order_k = eng.views["k"].circuit.key_orders
    made_k = {k: m for k, (m, _) in order_k.items()}
    for _ in range(5):  # 50 rows of each window leave: each refills more than once
        for r in eng.result("i"):
            eng.ingest("comment", "DELETE", rid_text(r["id"]), None)
        for r in eng.result("k"):
            eng.ingest("comment", "UPDATE", rid_text(r["id"]), {"id": r["id"], "k": 3, "v": 1})
    assert ts.walks[("id", WALK_NUMBER)][0] == made
    assert {k: m for k, (m, _) in order_k.items() if k in made_k} == made_k
    fresh = view_engine()
    fresh.load("comment", list(ts.rows.values()))
    fresh.register("i", q_id, {"lo": 1})
    fresh.register("k", q_k, {"lo": 1})
    assert eng.result("i") == fresh.result("i") and eng.result("k") == fresh.result("k")


@pytest.mark.parametrize("moved", [range(0, 32), range(40, 72)])
def test_rows_that_left_a_walked_key_are_not_counted_there(moved: range) -> None:
    """One key of 1,000 rows, ``LIMIT 1``: the walk evaluates 33 of them. 32 rows of the
    key, walked or not yet, move to a later key (still passing); the window refills
    through the list made before, which still holds them under the first key: counted
    there, the walk would stop short and the window would later show a moved row before
    the first key's next one."""
    view_engine, _ = engine_api()
    eng = view_engine()
    eng.load("comment", [{"id": RecordID("comment", i), "k": 0, "v": 1} for i in range(1_000)])
    eng.load("comment", [{"id": RecordID("comment", i), "k": 9, "v": 1}
                         for i in range(1_000, 1_100)])
    eng.register("v", "SELECT id, k FROM comment WHERE v >= 1 ORDER BY k LIMIT 1", {})
    for i in moved:
        eng.ingest("comment", "UPDATE", f"comment:{i}", {"id": RecordID("comment", i), "k": 5,
                                                       "v": 1})
    gone = set(moved)
    for i in range(80):  # the first key's rows leave one by one, the window follows
        if i in gone:
            continue
        want = min(j for j in range(1_000) if j not in gone)
        assert [r["id"] for r in eng.result("v")] == [RecordID("comment", want)]
        eng.ingest("comment", "DELETE", f"comment:{i}", None)
        gone.add(i)


WALK_QUERIES = [
    "SELECT id, k, v FROM comment WHERE v >= $lo ORDER BY id DESC LIMIT 10",
    "SELECT id, k, v FROM comment WHERE v < $lo ORDER BY id LIMIT 5 START 2",
    "SELECT id, k, v FROM comment WHERE v >= $lo ORDER BY k LIMIT 10 START 5",
    "SELECT id, k, v FROM comment WHERE v >= $lo ORDER BY k DESC, v ASC LIMIT 8",
    "SELECT id, k, v FROM comment WHERE v != $lo ORDER BY k DESC LIMIT 6",
]


@pytest.mark.parametrize("seed", range(3))
def test_windows_walked_through_lists_older_than_the_writes_agree_with_a_fresh_engine(
        seed: int) -> None:
    """Views registered between rounds of writes (their orders born after lists other
    views made), writes aimed at the rows the windows show (deleted, moved to another
    key, created past either end): after each round every window equals a fresh
    engine's, itself held to SurrealDB by the tests above."""
    view_engine, _ = engine_api()
    r = random.Random(seed)
    rows = {i: {"id": RecordID("comment", i), "k": r.randint(0, 3), "v": r.randint(0, 6)}
            for i in range(3_000)}
    eng = view_engine()
    eng.load("comment", list(rows.values()))
    views: dict[str, tuple[str, dict[str, Any]]] = {}
    lo_id, hi_id = -1, 3_000
    for _ in range(10):
        for _ in range(2):
            vid = f"v{len(views)}"
            views[vid] = (r.choice(WALK_QUERIES), {"lo": r.randint(0, 6)})
            eng.register(vid, *views[vid])
        for _ in range(60):
            shown = eng.result(r.choice(list(views)))
            x = r.random()
            if shown and x < 0.6:
                rid = r.choice(shown)["id"]
                if r.random() < 0.5:
                    eng.ingest("comment", "DELETE", rid_text(rid), None)
                    rows.pop(rid.id, None)
                    continue
                i = rid.id
            elif x < 0.8:
                if r.random() < 0.5:
                    i, hi_id = hi_id, hi_id + 1
                else:
                    i, lo_id = lo_id, lo_id - 1
            else:
                i = r.choice(list(rows))
            row = {"id": RecordID("comment", i), "k": r.randint(0, 3), "v": r.randint(0, 6)}
            eng.ingest("comment", "UPDATE" if i in rows else "CREATE", rid_text(row["id"]), row)
            rows[i] = row
        fresh = view_engine()
        fresh.load("comment", list(rows.values()))
        for vid, (q, p) in views.items():
            fresh.register(vid, q, p)
            assert eng.result(vid) == fresh.result(vid), (vid, q, p)


LINK_VIEWS = [
    "SELECT id, ref FROM comment WHERE v >= 0 ORDER BY ref DESC LIMIT 5",
    "SELECT id, ref FROM comment ORDER BY ref DESC, id DESC LIMIT 7 START 2",
    "SELECT id, ref, v FROM comment WHERE v > 2 ORDER BY v DESC, ref DESC LIMIT 6",
    "SELECT id, v FROM comment WHERE v > 2 ORDER BY id DESC LIMIT 4",
]


def _ref(r: random.Random) -> Any:
    """A link whose table names begin one another (``a``, ``ab``, ``b``, ``ba``) and whose
    keys are of every kind, or a value of another kind."""
    x = r.random()
    if x < 0.9:
        key = r.choice([r.randint(-3, 9), 2**40 + r.randint(0, 3), f"k{r.randint(0, 5)}", "",
                        [r.randint(0, 2), "x"], {"n": r.randint(0, 2)}])
        return RecordID(r.choice(["a", "ab", "b", "ba", "thread", "a_b"]), key)
    return r.choice([None, 7, "a:1", [RecordID("a", 1)]])


def _link_case(seed: int, surql: str) -> Case:
    r = random.Random(seed)
    keys: list[Any] = list(range(40)) + [f"s{i}" for i in range(10)] + [-5, 2**41]
    rows = [{"id": RecordID("comment", k), "v": r.randint(0, 9), "ref": _ref(r)} for k in keys]
    cur = {repr(row["id"].id): row for row in rows}
    writes: list[Any] = []
    for _ in range(120):
        k = r.choice(keys + [100 + r.randint(0, 5), f"t{r.randint(0, 3)}"])
        rid = RecordID("comment", k)
        if repr(k) in cur and r.random() < 0.2:
            writes.append(("comment", "DELETE", rid, None))
            del cur[repr(k)]
            continue
        row = {"id": rid, "v": r.randint(0, 9), "ref": _ref(r)}
        writes.append(("comment", "UPDATE" if repr(k) in cur else "CREATE", rid, row))
        cur[repr(k)] = row
    return Case(rows={"comment": rows}, views=[View(surql, {})], writes=writes,
                note=f"links desc {seed}: {surql}", check_updated=True)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("surql", LINK_VIEWS)
def test_descending_orders_of_links_agree_with_surrealdb(surql: str, seed: int) -> None:
    """Descending record ids and links (engine.plan.desc_key: table names reversed as
    tuples of ints, keys by kind) in SurrealDB's order: names that begin one another, keys
    of every kind, values of other kinds beside them."""
    mismatch = run_case(_link_case(seed, surql), check_updated=True)
    assert mismatch is None, str(mismatch)
