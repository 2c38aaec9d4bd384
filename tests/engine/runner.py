"""Replays a case against the view engine and the judge; reports the first disagreement.

Checked after registration and after EVERY write, for every view:
- ``members(view)`` equals the judge's membership for the same query over the same data;
- the write's delta is exact: ``added`` = entered, ``removed`` = left, a view whose membership
  changed is present, ``updated`` only names current members;
- ``result(view)`` equals SurrealDB's answer row for row (order, values, types);
- optionally (``check_updated``) ``updated`` names every member whose own content changed, and
  no member shown as one dict before and after with the same whole content;
and at the end of the sequence:
- ``ingest_batch`` of the whole sequence on a fresh engine gives the same memberships, and its
  merged delta per view is the net change (added = final - initial, removed = initial - final);
- table counts match the judge, and table hashes are equal for equal contents whatever the
  write order (a third engine loaded with the final rows in shuffled order).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from surrealdb import RecordID

from engine.value_types import NONE
from tests.engine.codec import Case, Event, View
from tests.engine.judge import NONE_VALUE, RELATIONS, TABLES, Judge, iter_record_ids


@dataclass
class Mismatch:
    """The first disagreement found while replaying a case."""

    step: str
    view: str
    detail: str

    def __str__(self) -> str:
        return f"at {self.step}, view {self.view!r}: {self.detail}"


def engine_api() -> tuple[Any, Any]:
    """Import the engine lazily (it is built in parallel with this suite)."""
    from engine import QueryRejected, ViewEngine

    return ViewEngine, QueryRejected


def _ids(values: Iterable[Any] | None) -> set[str]:
    return {str(v) for v in (values or ())}


def _diff(expected: set[str], actual: set[str]) -> str:
    return (f"expected {sorted(expected)}, got {sorted(actual)} "
            f"(missing {sorted(expected - actual)}, extra {sorted(actual - expected)})")


class Replay:
    """One engine and one judge fed the same case."""

    def __init__(self, case: Case, engine_kwargs: Mapping[str, Any] | None = None) -> None:
        view_engine, _ = engine_api()
        self.case = case
        self.judge = Judge()
        self.engine = view_engine(**dict(engine_kwargs or {}))
        self.view_ids = [f"v{i}" for i in range(len(case.views))]
        self.check_results = True
        self.check_updated = False
        self.last: dict[str, Any] = {}  # view id -> SurrealDB's previous answer

    def text(self, rid: RecordID) -> str:
        return self.judge.record_text(rid)

    def engine_record(self, record: Mapping[str, Any] | None) -> dict[str, Any] | None:
        return None if record is None else dict(record)

    def load(self) -> None:
        for table in TABLES:
            rows = self.case.rows.get(table, [])
            self.judge.load(table, rows)
            self.engine.load(table, [dict(row) for row in rows])

    def judge_members(self, view: View) -> set[str]:
        return self.judge.members(view.surql, view.params)

    def updated_mismatch(self, vid: str, view: View, delta: Any) -> str | None:
        """Members whose own content changed but that ``delta.updated`` does not name."""
        if not self.check_updated:
            return None
        now = _Answer(self.judge.query(view.surql, view.params, keep_none=True))
        before, after = self.last.get(vid), now
        self.last[vid] = now
        if before is None:
            return None
        # each answer's contents are walked once, as the "after" of one write and the
        # "before" of the next (the walks were half of a long differential case's time)
        old, new = before.contents(self, False), after.contents(self, False)
        changed = {rid for rid in old.keys() & new.keys()
                   if len(old[rid]) == 1 and len(new[rid]) == 1 and old[rid] != new[rid]}
        reported = _ids(delta.updated) if delta is not None else set()
        missed = changed - reported
        if missed:
            rid = sorted(missed)[0]
            return (f"delta.updated misses {sorted(missed)}: {rid} was {sorted(old[rid])[0]} "
                    f"and is now {sorted(new[rid])[0]}")
        # and no extra: a member shown as one dict before and after whose whole content
        # (nested rows included: a parent whose subquery list moved did change) is equal
        # must not be named
        # (a record also listed bare, as a VALUE subquery's row, is left out: its content
        # for the engine is the value it shows there, which no dict here tells)
        if not reported:
            return None
        full0, full1 = before.contents(self, True), after.contents(self, True)
        bare = before.listed(self) | after.listed(self)
        extra = {rid for rid in reported & full0.keys() & full1.keys()
                 if len(full0[rid]) == 1 and full0[rid] == full1[rid] and rid not in bare}
        if extra:
            rid = sorted(extra)[0]
            return (f"delta.updated names {sorted(extra)} whose content did not change: "
                    f"{rid} is {sorted(full1[rid])[0]}")
        return None

    def result_mismatch(self, vid: str, view: View) -> str | None:
        """Compare the engine's result rows with SurrealDB's (None when equal)."""
        if not self.check_results:
            return None
        want = strict(self.judge.query(view.surql, view.params, keep_none=True))
        got = strict(self.engine.result(vid))
        if want == got:
            return None
        if len(want) != len(got):
            return f"result has {len(got)} rows, SurrealDB {len(want)}: {got!r} vs {want!r}"
        for i, (w, g) in enumerate(zip(want, got)):
            if w != g:
                return f"result row {i} differs: engine {g!r}, SurrealDB {w!r}"
        return "result differs"

    def close(self) -> None:
        self.judge.close()


def run_case(case: Case, check_batch: bool = True, check_results: bool = True,
             check_updated: bool = False,
             engine_kwargs: Mapping[str, Any] | None = None) -> Mismatch | None:
    """Replay ``case``; None when the engine agrees with SurrealDB everywhere.

    With ``check_results`` the engine's ``result(view)`` rows must also equal SurrealDB's answer:
    same rows in the same order, same values and types (a key holding NONE counts as absent).
    With ``check_updated`` every member whose own content changed (its fields, not the members
    nested in it; type-exact, so 1 -> 1.0 is a change) must be in ``delta.updated``.
    ``engine_kwargs`` go to the ``ViewEngine`` under test (e.g. a file-backed ``arena_dir``)."""
    replay = Replay(case, engine_kwargs)
    replay.check_results = check_results
    replay.check_updated = check_updated
    try:
        return _run(replay, check_batch)
    finally:
        replay.close()


def _run(replay: Replay, check_batch: bool) -> Mismatch | None:
    case, judge, eng = replay.case, replay.judge, replay.engine
    _, query_rejected = engine_api()
    replay.load()
    current: dict[str, set[str]] = {}
    for vid, view in zip(replay.view_ids, case.views):
        expected = replay.judge_members(view)
        try:
            got = _ids(eng.register(vid, view.surql, dict(view.params)))
        except query_rejected as exc:
            return Mismatch("register", view.surql, f"rejected a supported query: {exc}")
        if got != expected:
            return Mismatch("register", view.surql, _diff(expected, got))
        bad = replay.result_mismatch(vid, view)
        if bad:
            return Mismatch("register", view.surql, bad)
        current[vid] = expected
        replay.updated_mismatch(vid, view, None)  # remembers the first answer
    initial = {vid: set(ms) for vid, ms in current.items()}

    for n, (table, op, rid, record) in enumerate(case.writes):
        step = f"write #{n} {op} {replay.text(rid)}"
        judge.write(table, op, rid, record)
        delta = eng.ingest(table, op, replay.text(rid), replay.engine_record(record)) or {}
        for vid, view in zip(replay.view_ids, case.views):
            expected = replay.judge_members(view)
            got = _ids(eng.members(vid))
            if got != expected:
                return Mismatch(step, view.surql, "members " + _diff(expected, got))
            bad = _check_delta(delta.get(vid), current[vid], expected) or \
                replay.result_mismatch(vid, view) or \
                replay.updated_mismatch(vid, view, delta.get(vid))
            if bad:
                return Mismatch(step, view.surql, bad)
            current[vid] = expected
        unknown = set(delta) - set(replay.view_ids)
        if unknown:
            return Mismatch(step, "-", f"delta for unknown views {sorted(unknown)}")

    for table in TABLES:
        want = len(judge.table_ids(table))
        if eng.table_count(table) != want:
            return Mismatch("end", "-", f"table_count({table}) = {eng.table_count(table)}, "
                                        f"judge has {want}")
    if check_batch:
        return _check_batch_and_hashes(replay, initial, current)
    return None


class _Answer:
    """One SurrealDB answer of a view with what ``updated_mismatch`` reads of it, computed
    on first use."""

    __slots__ = ("_contents", "_listed", "tree")

    def __init__(self, tree: Any) -> None:
        self.tree = tree
        self._contents: dict[bool, dict[str, set[str]]] = {}
        self._listed: set[str] | None = None

    def contents(self, replay: Replay, whole: bool) -> dict[str, set[str]]:
        got = self._contents.get(whole)
        if got is None:
            got = self._contents[whole] = own_contents(replay, self.tree, whole)
        return got

    def listed(self, replay: Replay) -> set[str]:
        if self._listed is None:
            self._listed = listed_ids(replay, self.tree)
        return self._listed


def own_contents(replay: Replay, tree: Any, whole: bool = False) -> dict[str, set[str]]:
    """Record id text -> the distinct contents of the dicts with that id in a result tree,
    without the fields that hold other members (a subquery array, a fetched record), or with
    every field when ``whole``."""
    out: dict[str, set[str]] = {}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            rid = node.get("id")
            if isinstance(rid, RecordID):
                own = node if whole else {
                    k: v for k, v in node.items() if not any(True for _ in iter_record_ids(v))}
                out.setdefault(replay.text(rid), set()).add(repr(strict(own)))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(tree)
    return out


def listed_ids(replay: Replay, tree: Any) -> set[str]:
    """Texts of the record ids a result tree lists bare (an element of a list)."""
    out: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                if isinstance(value, RecordID):
                    out.add(replay.text(value))
                else:
                    walk(value)

    walk(tree)
    return out


def strict(value: Any) -> Any:
    """A form of a value where == also compares types (1 vs 1.0 vs true vs 1dec) and where
    NONE (engine or judge marker) is one token; object keys holding NONE are dropped.

    Runs on every value of every answer of a differential case (a third of a long case's
    time): the common exact types (strings, ints, record ids, dicts and lists of them) are
    converted inline, the rest through :func:`_strict_other`."""
    t = type(value)
    if t is str:
        return ("str", value)
    if t is int:
        return ("int", value)
    if t is dict:
        out = {}
        for k, v in value.items():
            tv = type(v)
            if tv is str:
                out[k] = ("str", v)
            elif tv is int:
                out[k] = ("int", v)
            elif tv is RecordID:
                i = v.id
                ti = type(i)
                out[k] = ("rid", v.table_name, ("int", i) if ti is int else ("str", i)
                          if ti is str else strict(i))
            elif v is not NONE and v is not NONE_VALUE:
                out[k] = strict(v)
        return out
    if t is list:
        return [("str", v) if type(v) is str else ("int", v) if type(v) is int else strict(v)
                for v in value]
    if t is RecordID:
        return ("rid", value.table_name, strict(value.id))
    return _strict_other(value)


def _strict_other(value: Any) -> Any:
    if value is NONE or value is NONE_VALUE:
        return "<NONE>"
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, float):
        return ("float", "NaN") if value != value else ("float", value)
    if isinstance(value, Decimal):
        return ("dec", value)
    if isinstance(value, str):
        return ("str", value)
    if isinstance(value, RecordID):
        return ("rid", value.table_name, strict(value.id))
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items() if v is not NONE and v is not NONE_VALUE}
    if isinstance(value, (list, tuple)):
        return [strict(v) for v in value]
    return (type(value).__name__, value)


def _check_delta(delta: Any, before: set[str], after: set[str]) -> str | None:
    entered, left = after - before, before - after
    if delta is None:
        if entered or left:
            return f"no delta, but entered {sorted(entered)} left {sorted(left)}"
        return None
    added, removed, updated = _ids(delta.added), _ids(delta.removed), _ids(delta.updated)
    if added != entered:
        return "delta.added " + _diff(entered, added)
    if removed != left:
        return "delta.removed " + _diff(left, removed)
    if not updated <= after:
        return f"delta.updated names non-members {sorted(updated - after)}"
    return None


def final_rows(case: Case) -> dict[str, dict[Any, dict[str, Any]]]:
    """Contents after the whole write sequence (a model of full-row replacement)."""
    state = {t: {row["id"].id: row for row in case.rows.get(t, [])} for t in TABLES}
    for table, op, rid, record in case.writes:
        if op == "DELETE":
            state[table].pop(rid.id, None)
        else:
            state[table][rid.id] = dict(record or {}, id=rid)
    return state


def _check_batch_and_hashes(replay: Replay, initial: dict[str, set[str]],
                            final: dict[str, set[str]]) -> Mismatch | None:
    view_engine, _ = engine_api()
    case, eng = replay.case, replay.engine
    batch = view_engine()
    for table in TABLES:
        batch.load(table, [dict(row) for row in case.rows.get(table, [])])
    for vid, view in zip(replay.view_ids, case.views):
        batch.register(vid, view.surql, dict(view.params))
    events = [(t, op, replay.text(rid), replay.engine_record(rec))
              for t, op, rid, rec in case.writes]
    deltas = batch.ingest_batch(events) or {}
    for vid, view in zip(replay.view_ids, case.views):
        got = _ids(batch.members(vid))
        if got != final[vid]:
            return Mismatch("ingest_batch", view.surql, "members " + _diff(final[vid], got))
        bad = _check_delta(deltas.get(vid), initial[vid], final[vid])
        if bad:
            return Mismatch("ingest_batch (merged delta)", view.surql, bad)

    shuffled = view_engine()
    rng = random.Random(len(case.writes))
    for table, rows in final_rows(case).items():
        ordered = list(rows.values())
        rng.shuffle(ordered)
        shuffled.load(table, ordered)
    for table in TABLES:
        hashes = {eng.table_hash(table), batch.table_hash(table), shuffled.table_hash(table)}
        if len(hashes) != 1:
            return Mismatch("end", "-", f"table_hash({table}) differs for equal contents: "
                                        f"one-by-one {eng.table_hash(table)}, batch "
                                        f"{batch.table_hash(table)}, loaded "
                                        f"{shuffled.table_hash(table)}")
    return None


def shrink(case: Case, fails: Callable[[Case], bool] | None = None) -> Case:
    """Greedy delta debugging: drop views, writes, rows and fields while the case still fails."""
    def still_fails(candidate: Case) -> bool:
        if fails is not None:
            return fails(candidate)
        try:
            return run_case(candidate, check_updated=candidate.check_updated) is not None
        except Exception:  # a crash is a failure too, keep shrinking toward it
            return True

    def mk(rows: Any, views: Any, writes: Any) -> Case:
        return Case(rows, views, writes, best.note, case.check_updated)

    def without(seq: list[Any], i: int) -> list[Any]:
        return seq[:i] + seq[i + 1:]

    best = case
    progress = True
    while progress:
        progress = False
        for i in range(len(best.views) - 1, -1, -1):
            if len(best.views) > 1:
                cand = mk(best.rows, without(best.views, i), best.writes)
                if still_fails(cand):
                    best, progress = cand, True
        for i in range(len(best.writes) - 1, -1, -1):
            cand = mk(best.rows, best.views, _fix_ops(best.rows, _drop_write(best.writes, i)))
            if still_fails(cand):
                best, progress = cand, True
        for table in list(best.rows):
            for i in range(len(best.rows[table]) - 1, -1, -1):
                rows = dict(best.rows)
                rows[table] = without(rows[table], i)
                cand = mk(rows, best.views, _fix_ops(rows, best.writes))
                if still_fails(cand):
                    best, progress = cand, True
        for table in list(best.rows):
            for i, row in enumerate(best.rows[table]):
                for key in [k for k in row if k != "id" and not (table in RELATIONS
                                                                   and k in ("in", "out"))]:
                    rows = dict(best.rows)
                    rows[table] = list(rows[table])
                    rows[table][i] = {k: v for k, v in row.items() if k != key}
                    cand = mk(rows, best.views, best.writes)
                    if still_fails(cand):
                        best, progress = cand, True
                        break
    return best


def _drop_write(writes: list[Event], i: int) -> list[Event]:
    return writes[:i] + writes[i + 1:]


def _fix_ops(rows: dict[str, list[dict[str, Any]]], writes: list[Event]) -> list[Event]:
    """Keep ops consistent after removing rows: CREATE when absent, UPDATE when present."""
    present = {(t, row["id"].id) for t, rs in rows.items() for row in rs}
    out: list[Event] = []
    for table, op, rid, record in writes:
        key = (table, rid.id)
        if op == "DELETE":
            if key not in present:
                continue
            present.discard(key)
        else:
            op = "UPDATE" if key in present else "CREATE"
            present.add(key)
        out.append((table, op, rid, record))
    return out


def plain(x: Any) -> Any:
    """A projection's state (``Proj.pdeps``, ``Proj.istate``) with the subquery windows it
    reads (engine.join) by what they are instead of which object: comparable across
    engines."""
    from engine.join import Win

    if isinstance(x, Win):
        return x.describe()
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(plain(v) for v in x)
    return x


def traced_bytes_per_row_and_view(eng: Any, query: str,
                                  params: Callable[[int], dict[str, Any]],
                                  views: int, rows: int) -> float:
    """Heap bytes (tracemalloc) that registering views 1..`views` of `query` keeps, per row
    and view: the memory bound of a shape whose views each cover `rows` rows. View k gets
    `params(k)`; register the shape's first view before (it builds the shared state)."""
    import gc
    import tracemalloc

    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for k in range(1, views + 1):
            eng.register(f"v{k}", query, params(k))
        gc.collect()
        return float(tracemalloc.get_traced_memory()[0] - before) / rows / views
    finally:
        tracemalloc.stop()
