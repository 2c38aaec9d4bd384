"""Engine benchmark: incremental view maintenance vs re-running the views.

    python loadtests/bench_engine.py [--quick] [--seed N]

Prints ONE table, measured in one run. `changes/s` is wall-clock; `cpu ch/s` divides by the
process's CPU time instead (the machine may be shared: compare both, and `uptime`).
- W1: user/thread/comment tables (1k / 20k / 200k rows), 1,000 mixed views (40% filters, 30%
  ORDER BY + LIMIT 20, 20% a thread with its last 10 comments and its author, 10% per-user
  `author = $auth.id`), 100,000 writes (70% UPDATE, 20% CREATE, 10% DELETE): changes/s and the
  per-change latency of `ingest` (p50/p99), plus the same writes through `ingest_batch`, the
  cost of writing the changed rows' bytes back to the (anonymous) arena afterwards, and the
  one-by-one run with a file-backed arena (bytes written at the end of every call).
- W2: 100,000 per-user views of one shape over the same data: memory per view (RSS delta and
  tracemalloc-free), changes/s, p50/p99.
- naive: the W1 writes applied to SurrealDB itself (embedded engine, indexes on the correlation
  fields) re-running every view that reads the changed table; measured on a sample of writes and
  views and extrapolated per change (it is far too slow to run in full). The ratio column is
  naive cost / engine cost per change.
- pydbsp: reported when importable (PyPI's pydbsp needs Python >= 3.12; this venv is 3.11).
- scaling: per-change cost with `thread` at 10k vs 1M rows and fixed view sizes; registration
  time of one view over 10,000 qualifying rows.

`--quick` runs everything scaled down (seconds); `tests/engine/test_bench_smoke.py` runs it.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from surrealdb import RecordID  # noqa: E402

T0 = datetime(2024, 1, 1, tzinfo=UTC)
STATUSES = ["open", "closed", "archived", "draft"]
CATEGORIES = [f"c{i}" for i in range(50)]
TAGS = [f"t{i}" for i in range(40)]
Event = tuple[str, str, str, dict[str, Any] | None]


@dataclass(frozen=True)
class Sizes:
    """Every size the benchmark uses; --quick scales them down."""

    users: int
    threads: int
    comments: int
    views: int
    writes: int
    w2_views: int
    w2_writes: int
    naive_writes: int
    naive_views_per_write: int
    scale_small: int
    scale_large: int
    scale_writes: int
    register_rows: int
    mix_threads: int
    mix_comments: int
    mix_views: int
    mix_writes: int
    mix_extra: int  # large views registered last, for RSS per additional member


FULL = Sizes(users=1_000, threads=20_000, comments=200_000, views=1_000, writes=100_000,
             w2_views=100_000, w2_writes=20_000, naive_writes=12, naive_views_per_write=15,
             scale_small=10_000, scale_large=1_000_000, scale_writes=20_000,
             register_rows=10_000, mix_threads=20_000, mix_comments=100_000, mix_views=1_000,
             mix_writes=20_000, mix_extra=40)
QUICK = Sizes(users=50, threads=500, comments=2_000, views=60, writes=1_000, w2_views=1_000,
              w2_writes=500, naive_writes=5, naive_views_per_write=5, scale_small=500,
              scale_large=5_000, scale_writes=300, register_rows=1_000, mix_threads=1_000,
              mix_comments=5_000, mix_views=100, mix_writes=1_000, mix_extra=5)


# ------------------------------------------------------------------------------ data & views

def user_row(i: int, r: random.Random) -> dict[str, Any]:
    return {"id": RecordID("user", i), "name": f"user{i}", "age": r.randint(15, 80),
            "active": r.random() < 0.8, "created_at": T0 + timedelta(minutes=i)}


def thread_row(i: int, r: random.Random, users: int) -> dict[str, Any]:
    return {"id": RecordID("thread", i), "title": f"thread {i}",
            "author": RecordID("user", r.randrange(users)), "status": r.choice(STATUSES),
            "category": r.choice(CATEGORIES), "score": r.randint(0, 1000),
            "created_at": T0 + timedelta(seconds=i)}


def comment_row(i: int, r: random.Random, users: int, threads: int) -> dict[str, Any]:
    return {"id": RecordID("comment", i), "thread": RecordID("thread", r.randrange(threads)),
            "author": RecordID("user", r.randrange(users)), "body": f"comment {i}",
            "votes": r.randint(0, 50), "created_at": T0 + timedelta(seconds=i)}


@dataclass
class Data:
    """Rows per table, in a form both the engine and SurrealDB take."""

    rows: dict[str, list[dict[str, Any]]]
    next_id: dict[str, int] = field(default_factory=dict)


def make_data(s: Sizes, r: random.Random) -> Data:
    rows = {
        "user": [user_row(i, r) for i in range(s.users)],
        "thread": [thread_row(i, r, s.users) for i in range(s.threads)],
        "comment": [comment_row(i, r, s.users, s.threads) for i in range(s.comments)],
    }
    return Data(rows, {t: len(v) for t, v in rows.items()})


def w1_views(s: Sizes, r: random.Random) -> list[tuple[str, dict[str, Any]]]:
    """The W1 mix: 40% filters, 30% ORDER BY + LIMIT 20, 20% thread page, 10% per-user."""
    views: list[tuple[str, dict[str, Any]]] = []
    for i in range(s.views):
        kind = i % 10
        if kind < 4:
            views.append(("SELECT * FROM thread WHERE category = $cat AND status = $st "
                          "AND score >= $min",
                          {"cat": r.choice(CATEGORIES), "st": r.choice(STATUSES),
                           "min": r.randint(0, 900)}))
        elif kind < 7:
            views.append(("SELECT id, title, score FROM thread WHERE category = $cat "
                          "ORDER BY score DESC LIMIT 20", {"cat": r.choice(CATEGORIES)}))
        elif kind < 9:
            views.append((
                "SELECT id, title, (SELECT id, body, created_at FROM comment "
                "WHERE thread = $parent.id ORDER BY created_at DESC LIMIT 10) AS comments, "
                "(SELECT id, name FROM user WHERE id = $parent.author LIMIT 1)[0] AS author "
                "FROM thread WHERE id = $thread",
                {"thread": RecordID("thread", r.randrange(s.threads))}))
        else:
            views.append(("SELECT * FROM thread WHERE author = $auth.id",
                          {"auth": {"id": RecordID("user", r.randrange(s.users))}}))
    return views


PER_USER = "SELECT id, title, score FROM thread WHERE author = $auth.id"
USER_TOP = ("SELECT id, title, created_at FROM thread WHERE author = $auth.id "
            "ORDER BY created_at DESC LIMIT 10")
# The issue-19 class: an unbounded list with a correlated top-5 subquery per row, over many
# distinct range constants (each view holds about half of the threads).
LARGE = ("SELECT *, (SELECT id, votes FROM comment WHERE thread = $parent.id "
         "ORDER BY votes DESC LIMIT 5) AS cs FROM thread WHERE score > $min")
NARROW = "SELECT id, title, score FROM thread WHERE score >= $lo AND score < $hi"
TAG_TOP = ("SELECT id, title, score FROM thread WHERE tags CONTAINS $tag "
           "ORDER BY score DESC LIMIT 20")


def make_writes(data: Data, n: int, r: random.Random, text: Callable[[Any], str],
                tables: tuple[str, ...] = ("comment", "comment", "thread", "thread", "user"),
                touch: Callable[[str, dict[str, Any], random.Random, int, int], None] | None = None,
                ) -> list[Event]:
    """70% UPDATE, 20% CREATE, 10% DELETE over live ids (the id sets evolve as we go);
    ``touch(table, row, r, users, threads)`` changes a row for an UPDATE (default _touch)."""
    touch = touch or _touch
    live = {t: [row["id"].id for row in rows] for t, rows in data.rows.items()}
    current = {t: {row["id"].id: row for row in rows} for t, rows in data.rows.items()}
    users, threads = len(data.rows["user"]), len(data.rows["thread"])
    events: list[Event] = []
    for _ in range(n):
        table = r.choice(tables)
        roll = r.random()
        ids = live[table]
        if roll < 0.2 or not ids:
            key = data.next_id[table]
            data.next_id[table] += 1
            row = _new_row(table, key, r, users, threads)
            ids.append(key)
            current[table][key] = row
            events.append((table, "CREATE", text(row["id"]), row))
        elif roll < 0.3:
            pos = r.randrange(len(ids))
            key = ids[pos]
            ids[pos] = ids[-1]
            ids.pop()
            del current[table][key]
            events.append((table, "DELETE", text(RecordID(table, key)), None))
        else:
            key = r.choice(ids)
            row = dict(current[table][key])
            touch(table, row, r, users, threads)
            current[table][key] = row
            events.append((table, "UPDATE", text(row["id"]), row))
    return events


def _new_row(table: str, key: int, r: random.Random, users: int, threads: int) -> dict[str, Any]:
    if table == "user":
        return user_row(key, r)
    if table == "thread":
        return thread_row(key, r, users)
    return comment_row(key, r, users, threads)


def _touch(table: str, row: dict[str, Any], r: random.Random, users: int, threads: int) -> None:
    if table == "user":
        row["age"] = r.randint(15, 80)
        row["name"] = f"user{row['id'].id}-{r.randrange(100)}"
    elif table == "thread":
        fields = ["score", "score", "status", "category", "author"]
        if "tags" in row:  # the mix's threads carry tags (W1's do not: its stream is unchanged)
            fields.append("tags")
        field_ = r.choice(fields)
        if field_ == "tags":
            row["tags"] = r.sample(TAGS, r.randint(1, 3))
        elif field_ == "score":
            row["score"] = r.randint(0, 1000)
        elif field_ == "status":
            row["status"] = r.choice(STATUSES)
        elif field_ == "category":
            row["category"] = r.choice(CATEGORIES)
        else:
            row["author"] = RecordID("user", r.randrange(users))
    else:
        row["votes"] = r.randint(0, 50)
        if r.random() < 0.3:
            row["created_at"] = row["created_at"] + timedelta(days=1)


# ------------------------------------------------------------------------------ measuring

@dataclass
class Result:
    """One line of the table."""

    name: str
    changes: int
    seconds: float
    latencies_ns: list[int] = field(default_factory=list)
    per_change_s: float | None = None  # when extrapolated instead of measured one by one
    note: str = ""
    ratio: str = ""
    cpu_seconds: float | None = None  # process CPU time (the machine may be shared)

    @property
    def cost(self) -> float:
        """Seconds per change."""
        if self.per_change_s is not None:
            return self.per_change_s
        return self.seconds / max(self.changes, 1)

    def pct(self, q: float) -> str:
        if not self.latencies_ns:
            return "-"
        ordered = sorted(self.latencies_ns)
        return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000:.0f}"


def rss_bytes() -> int:
    """Resident set size of this process (Linux)."""
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def engine_api() -> tuple[Any, Callable[[Any], str]]:
    from engine import ViewEngine
    from engine.values import record_id_text

    return ViewEngine, record_id_text


def build_engine(data: Data, views: Iterable[tuple[str, dict[str, Any]]],
                 prefix: str = "v", **engine_kwargs: Any) -> tuple[Any, float]:
    view_engine, _ = engine_api()
    eng = view_engine(**engine_kwargs)
    for table, rows in data.rows.items():
        eng.load(table, rows)
    start = time.perf_counter()
    for i, (surql, params) in enumerate(views):
        eng.register(f"{prefix}{i}", surql, params)
    return eng, time.perf_counter() - start


def feed_one_by_one(eng: Any, name: str, events: list[Event]) -> Result:
    """One call per write, through the API an SSP shard calls: ``ingest_groups`` (views
    sharing a delta come as one group; ``ingest`` would add a dict of one entry per view)."""
    lat: list[int] = []
    clock = time.perf_counter_ns
    gc.collect()
    cpu = time.process_time()
    start = time.perf_counter()
    ingest = eng.ingest_groups
    for table, op, rid, rec in events:
        t = clock()
        ingest(table, op, rid, rec)
        lat.append(clock() - t)
    return Result(name, len(events), time.perf_counter() - start, lat,
                  cpu_seconds=time.process_time() - cpu)


def feed_batches(eng: Any, name: str, events: list[Event], size: int = 100) -> Result:
    gc.collect()
    cpu = time.process_time()
    start = time.perf_counter()
    for i in range(0, len(events), size):
        eng.ingest_batch_groups(events[i:i + size])  # the shard's call
    return Result(name, len(events), time.perf_counter() - start,
                  note=f"batches of {size}; latency is per batch, not shown",
                  cpu_seconds=time.process_time() - cpu)


# ------------------------------------------------------------------------------ workloads

def run_w1(s: Sizes, seed: int) -> tuple[list[Result], Data, list[tuple[str, dict[str, Any]]],
                                         list[Event], Result]:
    _, text = engine_api()
    r = random.Random(seed)
    data = make_data(s, r)
    views = w1_views(s, r)
    snapshot = Data({t: list(rows) for t, rows in data.rows.items()}, dict(data.next_id))
    events = make_writes(data, s.writes, r, text)
    eng, reg = build_engine(snapshot, views)
    start = time.perf_counter()
    loaded = eng.sync_arena()  # the bootstrap rows' bytes, so the next sync is W1's alone
    load_s = time.perf_counter() - start
    one = feed_one_by_one(eng, "W1 ingest (one by one)", events)
    one.note = f"{s.views} views registered in {reg:.2f}s"
    start = time.perf_counter()
    written = eng.sync_arena()
    back = Result("W1 arena write-back (anonymous arena)", written, time.perf_counter() - start,
                  note=f"rows W1 changed, encoded once each after the run; per row written; "
                       f"the {loaded:,} bootstrap rows took {load_s:.2f}s", ratio="-")
    del eng
    gc.collect()
    eng, _ = build_engine(snapshot, views)
    batch = feed_batches(eng, "W1 ingest_batch", events)
    del eng
    gc.collect()
    with tempfile.TemporaryDirectory() as arena_dir:
        eng, _ = build_engine(snapshot, views, arena_dir=arena_dir)
        filed = feed_one_by_one(eng, "W1 one by one, file-backed arena", events)
        filed.note = "arena_dir set: each call writes its changed rows' bytes before returning"
        del eng
        gc.collect()
    return [one, batch, back, filed], snapshot, views, events, one


def run_w2(s: Sizes, seed: int, data: Data) -> list[Result]:
    view_engine, text = engine_api()
    r = random.Random(seed + 2)
    eng = view_engine()
    for table, rows in data.rows.items():
        eng.load(table, rows)
    gc.collect()
    before = rss_bytes()
    start = time.perf_counter()
    for i in range(s.w2_views):
        eng.register(f"u{i}", PER_USER, {"auth": {"id": RecordID("user", i % s.users)}})
    reg = time.perf_counter() - start
    gc.collect()
    per_view = (rss_bytes() - before) / s.w2_views
    traced = traced_bytes_per_view(data, min(s.w2_views, 10_000), s.users)
    work = Data({t: list(rows) for t, rows in data.rows.items()}, dict(data.next_id))
    events = make_writes(work, s.w2_writes, r, text, tables=("thread",))
    res = feed_one_by_one(eng, f"W2 {s.w2_views:,} per-user views", events)
    res.note = (f"{per_view:,.0f} B/view (RSS delta), {traced:,.0f} B/view (tracemalloc), "
                f"registered in {reg:.2f}s")
    moves = author_moves(replay_rows(data, events)["thread"], s.w2_writes, s.users, r, text)
    moved = feed_one_by_one(eng, "W2 moves: every write changes the author", moves)
    moved.note = "same views; each UPDATE moves a thread from one user's views to another's"
    del eng
    gc.collect()
    eng = view_engine()
    for table, rows in data.rows.items():
        eng.load(table, rows)
    start = time.perf_counter()
    for i in range(s.w2_views):
        eng.register(f"t{i}", USER_TOP, {"auth": {"id": RecordID("user", i % s.users)}})
    reg = time.perf_counter() - start
    top = feed_one_by_one(eng, "W2 moves, per-user top-10 views", moves)
    top.note = (f"{s.w2_views:,} views of `author = $auth.id ORDER BY created_at DESC "
                f"LIMIT 10`, registered in {reg:.2f}s")
    del eng
    gc.collect()
    return [res, moved, top]


def replay_rows(data: Data, events: list[Event]) -> dict[str, dict[str, dict[str, Any]]]:
    """Each table's rows (by id text) after ``events`` were applied to ``data``."""
    _, text = engine_api()
    state = {t: {text(row["id"]): row for row in rows} for t, rows in data.rows.items()}
    for table, op, rid, rec in events:
        if op == "DELETE":
            state[table].pop(rid, None)
        else:
            assert rec is not None
            state[table][rid] = rec
    return state


def author_moves(threads: dict[str, dict[str, Any]], n: int, users: int, r: random.Random,
                 text: Callable[[Any], str]) -> list[Event]:
    """``n`` UPDATEs, each giving a live thread another author."""
    current = dict(threads)
    ids = sorted(current)
    events: list[Event] = []
    for _ in range(n):
        rid = r.choice(ids)
        row = dict(current[rid])
        old = row.get("author")
        while row.get("author") == old:
            row["author"] = RecordID("user", r.randrange(users))
        current[rid] = row
        events.append(("thread", "UPDATE", text(row["id"]), row))
    return events


def traced_bytes_per_view(data: Data, views: int, users: int) -> float:
    """Python heap bytes per registered per-user view (tracemalloc, on a fresh engine)."""
    import tracemalloc

    view_engine, _ = engine_api()
    eng = view_engine()
    for table, rows in data.rows.items():
        eng.load(table, rows)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(views):
            eng.register(f"t{i}", PER_USER, {"auth": {"id": RecordID("user", i % users)}})
        gc.collect()
        return (tracemalloc.get_traced_memory()[0] - before) / views
    finally:
        tracemalloc.stop()


def run_naive(s: Sizes, seed: int, data: Data, views: list[tuple[str, dict[str, Any]]],
              events: list[Event]) -> Result:
    """SurrealDB re-running every view that reads the changed table, extrapolated per change."""
    from tests.engine.judge import Judge

    judge = Judge()
    judge.run("DEFINE INDEX comment_thread ON comment FIELDS thread; "
              "DEFINE INDEX thread_author ON thread FIELDS author; "
              "DEFINE INDEX thread_category ON thread FIELDS category")
    for table, rows in data.rows.items():
        for i in range(0, len(rows), 1000):  # one INSERT of >1,000 rows degrades on mem://
            judge.run(f"INSERT INTO {table} $rows", {"rows": rows[i:i + 1000]})
    reads = {"user": [], "thread": [], "comment": []}  # views that read each table
    for surql, params in views:
        for table in reads:
            if f"FROM {table}" in surql:
                reads[table].append((surql, params))
    r = random.Random(seed + 3)
    sample = r.sample(events, min(s.naive_writes, len(events)))
    from engine.values import parse_record_id

    write_s = 0.0
    per_change = 0.0
    per_change_no_pages = 0.0
    by_kind: dict[str, list[float]] = {}
    for table, op, rid, rec in sample:
        start = time.perf_counter()
        judge.write(table, op, parse_record_id(rid), rec)
        write_s += time.perf_counter() - start
        affected = reads[table]
        chosen = r.sample(affected, min(s.naive_views_per_write, len(affected)))
        spent: dict[str, list[float]] = {}
        for surql, params in chosen:
            start = time.perf_counter()
            judge.query(surql, params)
            took = time.perf_counter() - start
            spent.setdefault(view_kind(surql), []).append(took)
            by_kind.setdefault(view_kind(surql), []).append(took)
        # extrapolate kind by kind: each affected view costs the mean of its kind's samples
        counts: dict[str, int] = {}
        for surql, _ in affected:
            counts[view_kind(surql)] = counts.get(view_kind(surql), 0) + 1
        all_samples = [t for ts in spent.values() for t in ts]
        fallback = sum(all_samples) / max(len(all_samples), 1)
        for kind, count in counts.items():
            mean = sum(spent[kind]) / len(spent[kind]) if spent.get(kind) else \
                _mean(by_kind.get(kind), fallback)
            per_change += mean * count
            if kind != "thread page":
                per_change_no_pages += mean * count
    judge.close()
    cost = per_change / len(sample)
    kinds = ", ".join(f"{k} {_mean(v, 0) * 1000:.1f} ms" for k, v in sorted(by_kind.items()))
    return Result("naive: SurrealDB re-runs affected views", len(sample), 0.0,
                  per_change_s=cost,
                  note=f"{cost:.3f} s/change ({per_change_no_pages / len(sample):.3f} without "
                       f"thread pages); per view: {kinds}; {len(sample)} writes x "
                       f"{s.naive_views_per_write} sampled views; write itself "
                       f"{write_s / len(sample) * 1e6:.0f} us")


def _mean(values: list[float] | None, default: float) -> float:
    return sum(values) / len(values) if values else default


def view_kind(surql: str) -> str:
    """Which W1 view family a query belongs to (for the naive cost breakdown)."""
    if "$parent" in surql:
        return "thread page"
    if "ORDER BY" in surql:
        return "top-20"
    if "$auth" in surql:
        return "per-user"
    return "filter"


def run_pydbsp() -> Result:
    try:
        import pydbsp  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - reported in the table, not fatal
        return Result("pydbsp filter view", 0, 0.0,
                      note=f"not run: {type(exc).__name__} (PyPI pydbsp requires Python>=3.12)")
    return Result("pydbsp filter view", 0, 0.0, note="importable but not wired in this script")


def run_scaling(s: Sizes, seed: int) -> list[Result]:
    """Per-change cost at two table sizes with identical views (each matches 50 rows)."""
    view_engine, text = engine_api()
    out: list[Result] = []
    costs: list[float] = []
    for size in (s.scale_small, s.scale_large):
        r = random.Random(seed + 4)
        eng = view_engine()
        eng.load("user", [user_row(i, r) for i in range(10)])
        eng.load("comment", [])
        # buckets 0..99 hold 50 rows each whatever the table size; the rest are bucket -1
        rows = [{"id": RecordID("thread", i), "bucket": i % 100 if i < 5000 else -1,
                 "score": r.randint(0, 1000), "author": RecordID("user", i % 10)}
                for i in range(size)]
        eng.load("thread", rows)
        for b in range(100):
            eng.register(f"s{b}", "SELECT id, score FROM thread WHERE bucket = $b "
                                  "ORDER BY score DESC LIMIT 20", {"b": b})
        events: list[Event] = []
        for _ in range(s.scale_writes):
            i = r.randrange(size) if r.random() < 0.5 else r.randrange(min(size, 5000))
            row = dict(rows[i], score=r.randint(0, 1000))
            rows[i] = row
            events.append(("thread", "UPDATE", text(row["id"]), row))
        res = feed_one_by_one(eng, f"scaling: thread at {size:,} rows", events)
        res.note = "100 views x 50 qualifying rows, ORDER BY score DESC LIMIT 20"
        costs.append(res.cost)
        out.append(res)
        del eng, rows
        gc.collect()
    out[1].ratio = f"{costs[1] / costs[0]:.2f}x of small"
    return out


def run_register(s: Sizes, seed: int) -> Result:
    view_engine, _ = engine_api()
    r = random.Random(seed + 5)
    eng = view_engine()
    eng.load("thread", [{"id": RecordID("thread", i), "score": r.randint(0, 1000),
                         "status": "open" if i < s.register_rows else "closed"}
                        for i in range(s.register_rows * 2)])
    gc.collect()
    cpu = time.process_time()
    start = time.perf_counter()
    members = eng.register("big", "SELECT * FROM thread WHERE status = 'open'", {})
    took = time.perf_counter() - start
    cpu = time.process_time() - cpu
    assert len(members) == s.register_rows, "registration returned the wrong membership"
    return Result(f"register 1 view over {s.register_rows:,} qualifying rows", 1, took,
                  per_change_s=took, note="changes/s = registrations/s; p50 = its duration",
                  latencies_ns=[int(took * 1e9)], cpu_seconds=cpu)


# ------------------------------------------------------------------------------ the mix

def make_mix_data(s: Sizes, r: random.Random) -> Data:
    """Users, threads with 1-3 tags each, comments: the mix's own tables."""
    threads = []
    for i in range(s.mix_threads):
        row = thread_row(i, r, s.users)
        row["tags"] = r.sample(TAGS, r.randint(1, 3))
        threads.append(row)
    rows = {"user": [user_row(i, r) for i in range(s.users)], "thread": threads,
            "comment": [comment_row(i, r, s.users, s.mix_threads)
                        for i in range(s.mix_comments)]}
    return Data(rows, {t: len(v) for t, v in rows.items()})


def mix_views(s: Sizes, r: random.Random) -> list[tuple[str, str, dict[str, Any]]]:
    """(kind, surql, params): per 50 views, 10 large subquery lists (190 distinct constants),
    14 narrow score ranges, 12 per-user top-10, 6 tag top-20 and 8 of W1's kinds."""
    out: list[tuple[str, str, dict[str, Any]]] = []
    w1 = w1_views(Sizes(**{**s.__dict__, "views": s.mix_views, "threads": s.mix_threads}), r)
    for i in range(s.mix_views):
        k = i % 50
        if k < 10:
            out.append(("large", LARGE, {"min": 5 * r.randrange(190)}))
        elif k < 24:
            lo = r.randrange(1000)
            out.append(("narrow", NARROW, {"lo": lo, "hi": lo + 3}))
        elif k < 36:
            out.append(("user top-10", USER_TOP,
                        {"auth": {"id": RecordID("user", r.randrange(s.users))}}))
        elif k < 42:
            out.append(("tag top-20", TAG_TOP, {"tag": r.choice(TAGS)}))
        else:
            surql, params = w1[i]
            out.append(("W1 kinds", surql, params))
    return out


def run_mix(s: Sizes, seed: int) -> list[Result]:
    """The mix in this process: registration, RSS, one-by-one ingest."""
    view_engine, text = engine_api()
    r = random.Random(seed + 6)
    data = make_mix_data(s, r)
    views = mix_views(s, r)
    # extra large views at constants no view uses, each above the smallest registered one:
    # their rows are already projected for the shape, so they only add membership
    extra = [{"min": 5 * r.randrange(1, 190) + 2} for _ in range(s.mix_extra)]
    work = Data({t: list(rows) for t, rows in data.rows.items()}, dict(data.next_id))
    events = make_writes(work, s.mix_writes, r, text)
    gc.collect()
    rss0 = rss_bytes()
    eng = view_engine()
    for table, rows in data.rows.items():
        eng.load(table, rows)
    gc.collect()
    rss_data = rss_bytes()
    spent: dict[str, list[float]] = {}
    members = 0
    cpu = time.process_time()
    start = time.perf_counter()
    for i, (kind, surql, params) in enumerate(views):
        t = time.perf_counter()
        members += len(eng.register(f"m{i}", surql, params))
        spent.setdefault(kind, []).append(time.perf_counter() - t)
    reg = time.perf_counter() - start
    cpu = time.process_time() - cpu
    gc.collect()
    rss_lazy = rss_bytes()
    lazy_rows = eng.lazy_rows()
    t = time.perf_counter()
    eng.complete()  # what a shard does when idle (engine.lazy)
    completed = time.perf_counter() - t
    gc.collect()
    rss_views = rss_bytes()
    added = 0
    for j, params in enumerate(extra):
        added += len(eng.register(f"x{j}", LARGE, params))
    gc.collect()
    per_member = (rss_bytes() - rss_views) / max(added, 1)
    for j in range(len(extra)):
        eng.unregister(f"x{j}")
    kinds = "; ".join(f"{k} {len(v)}: {sum(v):.2f}s, max {max(v) * 1000:.0f} ms"
                      for k, v in spent.items())
    reg_res = Result(f"mix: register {len(views):,} views", len(views), reg,
                     latencies_ns=[int(x * 1e9) for v in spent.values() for x in v],
                     note=f"{members:,} members; {kinds}; {lazy_rows:,} rows left lazy "
                          f"(RSS {(rss_lazy - rss_data) / 2**20:,.0f} MiB), projected "
                          f"after in {completed:.2f}s", ratio="-", cpu_seconds=cpu)
    one = feed_one_by_one(eng, "mix ingest (one by one)", events)
    gc.collect()
    rss_end = rss_bytes()
    del eng
    # the SSP's shards take `ingest_batch` (up to the hub's BATCH_MAX events under load): the
    # same writes in batches, each size on an engine of its own registered the same way
    def registered() -> Any:
        e = view_engine()
        for table, rows in data.rows.items():
            e.load(table, rows)
        for i, (_, surql, params) in enumerate(views):
            e.register(f"m{i}", surql, params)
        return e

    batches = []
    if lazy_rows:
        # rows left lazy: the first write reaching each projects it (a shard never idle)
        gc.collect()
        eng = registered()
        res = feed_one_by_one(eng, "mix ingest (one by one), rows left lazy", events)
        res.note = f"{lazy_rows:,} lazy rows projected by the writes that reach them"
        batches.append(res)
        del eng
    for size in (100, 2000):
        gc.collect()
        eng = registered()
        eng.complete()
        res = feed_batches(eng, f"mix ingest_batch ({size} per batch)", events, size)
        res.ratio = "-"
        if one.cpu_seconds and res.cpu_seconds:
            res.note += f"; {one.cpu_seconds / res.cpu_seconds:.2f}x the one-by-one rate (cpu)"
        batches.append(res)
        del eng
    one.ratio = "-"
    one.note = (f"RSS {max(rss_views, rss_end) / 2**20:,.0f} MiB total (generated data "
                f"{rss0 / 2**20:,.0f} MiB, engine rows "
                f"{(rss_data - rss0) / 2**20:,.0f} MiB, views {(rss_views - rss_data) / 2**20:,.0f}"
                f" MiB); {per_member:,.1f} B RSS per additional member ({s.mix_extra} more large "
                f"views, {added:,} members)")
    return [reg_res, one, *batches]


def run_mix_subprocess(s: Sizes, quick: bool, seed: int, gc_mode: str) -> list[Result]:
    """The mix in a fresh interpreter, so its total RSS is its own."""
    import json
    import subprocess

    cmd = [sys.executable, str(Path(__file__).resolve()), "--only", "mix", "--json",
           "--seed", str(seed), "--gc", gc_mode] + (["--quick"] if quick else [])
    over = {k[4:]: v for k, v in s.__dict__.items()
            if k.startswith("mix_") and v != (QUICK if quick else FULL).__dict__[k]}
    if over:
        cmd += ["--mix", ",".join(f"{k}={v}" for k, v in over.items())]
    proc = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return [Result(**d) for d in json.loads(proc.stdout.splitlines()[-1])]


def run_register_large(s: Sizes, seed: int) -> list[Result]:
    """One large view with a per-row subquery over ``register_rows`` qualifying threads: the
    first registration builds the shape's projection, a second (another constant) shares it.
    The comment table keeps its link columns from its load (their cost is the load's, shown
    on the first row); the rows after show a registration that must build every column."""
    view_engine, _ = engine_api()
    r = random.Random(seed + 7)
    n = s.register_rows
    eng = view_engine()
    eng.load("thread", [{"id": RecordID("thread", i), "title": f"t{i}", "score": i % 1000}
                        for i in range(n * 2)])
    comments = [comment_row(i, r, 10, n * 2) for i in range(n * 10)]
    gc.collect()
    start = time.perf_counter()
    eng.load("comment", comments)
    load = time.perf_counter() - start
    del comments
    table = eng.store.table("comment")
    links = list(table.cols.tags) if table.cols is not None else []
    table.cols = None
    start = time.perf_counter()
    table.keep_links()  # the same columns again, timed alone
    keep = time.perf_counter() - start
    out = [Result(f"load {n * 10:,} comments", n * 10, load, latencies_ns=[int(load * 1e9)],
                  note=f"of which {keep * 1000:.1f} ms keep the link columns {links}",
                  ratio="-")]
    gc.collect()
    steps = (("builds projection + sort column", 499, "links kept from the load"),
             ("shares the projection", 500, ""),
             ("builds projection, columns kept", 499, "drop views"),
             ("builds projection + every column", 499, "drop views and columns"))
    for label, low, before in steps:
        if before.startswith("drop"):
            # every view gone (the projection with them); the table keeps its columns or not
            for v in ("big499", "big500"):
                eng.unregister(v)
            if "columns" in before:
                table.cols = None
            gc.collect()
        cpu = time.process_time()
        start = time.perf_counter()
        members = eng.register(f"big{low}", LARGE, {"min": low})
        took = time.perf_counter() - start
        cpu = time.process_time() - cpu
        rows = sum(1 for m in members if m.startswith("thread:"))
        lazy = eng.lazy_rows()
        out.append(Result(f"register large view: {label}", 1, took, per_change_s=took,
                          latencies_ns=[int(took * 1e9)], cpu_seconds=cpu,
                          note=f"{rows:,} threads with their top-5 comments, {len(members):,} "
                               f"members; {lazy:,} rows lazy", ratio="-"))
    lazy = eng.lazy_rows()
    cpu = time.process_time()
    start = time.perf_counter()
    eng.complete()
    took = time.perf_counter() - start
    out.append(Result("large view: project lazy rows (idle work)", lazy, took,
                      latencies_ns=[int(took * 1e9)], cpu_seconds=time.process_time() - cpu,
                      note="changes = rows projected", ratio="-"))
    return out


# ------------------------------------------------------------------------------ table

def print_table(results: list[Result], naive_cost: float) -> None:
    header = f"{'scenario':44} {'changes':>9} {'changes/s':>11} {'cpu ch/s':>9} {'p50 us':>9} " \
             f"{'p99 us':>9} {'naive/this':>11}  notes"
    print(header)
    print("-" * len(header))
    for res in results:
        rate = "-"
        if res.cost > 0:
            rate = f"{1 / res.cost:,.0f}" if res.cost < 0.1 else f"{1 / res.cost:.4f}"
        ratio = res.ratio
        # the naive baseline ran the W1 writes and views: only W1 rows compare with it
        if not ratio and res.cost > 0 and naive_cost > 0 and res.name.startswith("W1"):
            ratio = f"{naive_cost / res.cost:,.0f}x"
        cpu = "-"
        if res.cpu_seconds:
            cpu = f"{res.changes / res.cpu_seconds:,.0f}"
        print(f"{res.name:44} {res.changes:>9,} {rate:>11} {cpu:>9} {res.pct(0.5):>9} "
              f"{res.pct(0.99):>9} {ratio:>11}  {res.note}")


SCENARIOS = ("w1", "w2", "mix", "naive", "scaling", "register")


def main(argv: list[str] | None = None) -> int:
    """Run the scenarios and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="scaled-down run (seconds)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", default=",".join(SCENARIOS),
                        help=f"comma-separated subset of {', '.join(SCENARIOS)}")
    parser.add_argument("--json", action="store_true",
                        help="print the rows as one JSON line (used for the mix subprocess)")
    parser.add_argument("--gc", choices=("engine", "default"), default="engine",
                        help="the collector's settings: the shard's (engine.gcpolicy, as "
                             "deployed) or CPython's defaults")
    parser.add_argument("--mix", default="",
                        help="override mix sizes, e.g. threads=5000,comments=25000,writes=3000")
    args = parser.parse_args(argv)
    if args.gc == "engine":
        from engine import gcpolicy

        gcpolicy.configure()
    s = QUICK if args.quick else FULL
    if args.mix:
        over = dict(kv.split("=", 1) for kv in args.mix.split(","))
        s = replace(s, **{f"mix_{k}": int(v) for k, v in over.items()})
    only = {x.strip() for x in args.only.split(",") if x.strip()}
    unknown = only - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenarios {sorted(unknown)}")
    if args.json:
        import json

        rows = run_mix(s, args.seed) if only == {"mix"} else []
        print(json.dumps([r.__dict__ for r in rows]))
        return 0
    started = time.perf_counter()
    results: list[Result] = []
    naive_cost = 0.0
    # W2 first: its RSS delta is only meaningful before other scenarios free memory to reuse
    if "w2" in only:
        results += run_w2(s, args.seed, make_data(s, random.Random(args.seed)))
        gc.collect()
    if "mix" in only:
        results += run_mix_subprocess(s, args.quick, args.seed, args.gc)
    if only & {"w1", "naive"}:
        w1, data, views, events, one = run_w1(s, args.seed)
        if "w1" in only:
            results += w1
        if "naive" in only:
            naive = run_naive(s, args.seed, data, views, events)
            naive_cost = naive.cost
            results += [naive, run_pydbsp()]
        del data, views, events, one
        gc.collect()
    if "scaling" in only:
        results += run_scaling(s, args.seed)
    if "register" in only:
        results += [run_register(s, args.seed)] + run_register_large(s, args.seed)
    print(f"engine benchmark ({'quick' if args.quick else 'full'}), seed {args.seed}: "
          f"user {s.users:,}, thread {s.threads:,}, comment {s.comments:,} (mix: thread "
          f"{s.mix_threads:,}, comment {s.mix_comments:,}); "
          f"ratio = naive cost per change / this row's cost per change")
    import engine

    print(f"engine package: {Path(engine.__file__).resolve().parent}; collector: "
          f"{args.gc} (thresholds {gc.get_threshold()})")
    print_table(results, naive_cost)
    print(f"total {time.perf_counter() - started:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
