"""The compiled engine (engine.native): used when current, never when stale, and it gives the
pure-Python engine's answers."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from engine import native

ROOT = Path(__file__).resolve().parents[2]

# Replays the benchmark's small mix (loads, 100 views of five kinds, 1,000 writes of every
# kind) and prints the registrations' members and every write's delta groups as JSON.
# `sys.prefix` pointed elsewhere before `import engine` finds no build: pure Python.
_REPLAY = """
import json, random, sys
if sys.argv[1] == "pure":
    sys.prefix = "/nonexistent-prefix"
sys.path.insert(0, sys.argv[2])
from loadtests import bench_engine as B
import engine, engine.native
s = B.QUICK
view_engine, text = B.engine_api()
r = random.Random(5)
data = B.make_mix_data(s, r)
views = B.mix_views(s, r)
work = B.Data({t: list(rows) for t, rows in data.rows.items()}, dict(data.next_id))
events = B.make_writes(work, s.mix_writes, r, text)
eng = view_engine()
for table, rows in data.rows.items():
    eng.load(table, rows)
out = {"compiled": engine.native.compiled(), "members": [], "groups": []}
for i, (_, surql, params) in enumerate(views):
    out["members"].append(sorted(eng.register(f"m{i}", surql, params)))
half = len(events) // 2
for ev in events[:half]:
    out["groups"].append(sorted([sorted(vs), sorted(d.added), sorted(d.removed),
                                 sorted(d.updated)] for vs, d in eng.ingest_groups(*ev)))
eng.complete()
for ev in events[half:]:
    out["groups"].append(sorted([sorted(vs), sorted(d.added), sorted(d.removed),
                                 sorted(d.updated)] for vs, d in eng.ingest_groups(*ev)))
print(json.dumps(out))
"""


def _replay(mode: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", _REPLAY, mode, str(ROOT)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got: dict[str, Any] = json.loads(proc.stdout)
    return got


def test_this_run_uses_the_current_build() -> None:
    """ops/run and ops/test build the engine before anything imports it."""
    assert native.activate([]), "no current build: run `python -m engine build`"
    import engine.core  # noqa: F401

    assert native.compiled() == sorted(f"engine.{m}" for m in native.MODULES)
    assert engine.__path__[0] == str(native.home() / "engine")


def test_compiled_and_pure_engines_give_the_same_answers() -> None:
    pure = _replay("pure")
    fast = _replay("compiled")
    assert pure["compiled"] == []
    assert fast["compiled"] == sorted(f"engine.{m}" for m in native.MODULES)
    assert pure["members"] == fast["members"]
    assert sum(map(len, fast["members"])) > 1000
    assert len(pure["groups"]) == len(fast["groups"]) == 1000
    for i, (a, b) in enumerate(zip(pure["groups"], fast["groups"])):
        assert a == b, f"write {i}: pure {a} != compiled {b}"
    assert sum(1 for g in fast["groups"] if g) > 500  # the writes did reach views


def _import_in(pkg_root: Path) -> list[str]:
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import engine, engine.core, "
            "engine.native as n; print(','.join(n.compiled()))")
    proc = subprocess.run([sys.executable, "-c", code, str(pkg_root)], cwd=pkg_root,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [m for m in proc.stdout.strip().split(",") if m]


def test_an_edited_engine_runs_as_python_until_rebuilt(tmp_path: Path) -> None:
    same = tmp_path / "same"
    shutil.copytree(ROOT / "engine", same / "engine",
                    ignore=shutil.ignore_patterns("__pycache__"))
    # the same sources elsewhere: the build matches them
    assert _import_in(same) == sorted(f"engine.{m}" for m in native.MODULES)
    edited = tmp_path / "edited"
    shutil.copytree(same, edited)
    delta = edited / "engine" / "delta.py"
    delta.write_text(delta.read_text() + "\n# an edit the build has not seen\n")
    assert _import_in(edited) == []
    # an edit to a module that is not compiled counts too (compiled code calls into it)
    edited2 = tmp_path / "edited2"
    shutil.copytree(same, edited2)
    lexer = edited2 / "engine" / "lexer.py"
    lexer.write_text(lexer.read_text() + "\n")
    assert _import_in(edited2) == []


def test_status_and_usage() -> None:
    run = [sys.executable, "-m", "engine"]
    st = subprocess.run([*run, "status"], cwd=ROOT, capture_output=True, text=True,
                        timeout=120)
    assert st.returncode == 0 and st.stdout.startswith("compiled (engine.")
    bad = subprocess.run([*run, "bogus"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and "usage" in bad.stderr
    assert native.build() is False  # current: nothing to do


def test_row_caches_outlived_by_their_table_are_dropped_safely() -> None:
    # plans come and go while their table stays: the table's weak references to their row
    # caches are called after the caches died (mypyc 2.4 compiled that call into a crash,
    # hence engine.rowcache stays Python). In a child: a crash must not take pytest with it.
    code = """
from surrealdb import RecordID
from engine import ViewEngine
from engine.store import TableStore
t = TableStore("x")
for i in range(50):
    c = t.cache()
    c["x:1"] = i
    del c
    t.put(f"x:{i}", {"id": RecordID("x", i)})
    t.delete(f"x:{i}")
kept = t.cache()
kept["x:1"] = 1
t.put("x:1", {"id": RecordID("x", 1)})
assert "x:1" not in kept and len(t.caches.refs) == 1
eng = ViewEngine()
eng.load("post", [{"id": RecordID("post", i), "n": i} for i in range(20)])
for i in range(30):  # each registration after the last unregistration compiles a new plan
    eng.register("v", "SELECT id, n FROM post ORDER BY n DESC LIMIT 3", {})
    eng.ingest("post", "UPDATE", f"post:{i % 20}", {"id": RecordID("post", i % 20), "n": 100 + i})
    eng.unregister("v")
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
