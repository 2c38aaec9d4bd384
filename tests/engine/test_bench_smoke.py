"""Keeps the benchmarks under `loadtests/` working (no timing assertions)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_engine_quick_prints_its_table() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "loadtests" / "bench_engine.py"), "--quick"],
                          check=False, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    for name in ("W1 ingest (one by one)", "W1 ingest_batch", "W1 arena write-back",
                 "W1 one by one, file-backed arena", "per-user views",
                 "naive: SurrealDB", "pydbsp", "scaling: thread at", "register 1 view",
                 "W2 moves", "mix: register", "mix ingest (one by one)",
                 "mix ingest_batch (100 per batch)", "mix ingest_batch (2000 per batch)",
                 "mix ingest (one by one), rows left lazy",
                 "load 10,000 comments", "keep the link columns ['thread', 'author']",
                 "register large view: builds projection + sort column",
                 "register large view: shares", "register large view: builds projection, columns",
                 "register large view: builds projection + every column",
                 "large view: project lazy rows"):
        assert any(name in line for line in lines), f"missing row {name!r}:\n{proc.stdout}"


def test_probe_delete_cost_prints_its_table() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "loadtests" / "probe_delete_cost.py"),
                           "--tables", "1,20", "--records", "5"],
                          check=False, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split() for line in proc.stdout.splitlines()[1:]]
    assert [r[0] for r in rows] == ["1", "20"], proc.stdout
    assert all(float(x) > 0 for r in rows for x in r[1:4]), proc.stdout


def test_bench_shard_load_prints_both_paths() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "loadtests" / "bench_shard_load.py"),
                           "--rows", "3000", "--shards", "1"],
                          check=False, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    base = next(line for line in lines if line.startswith("baseline: rows over the socket"))
    arena = next(line for line in lines if line.startswith("arena handles"))
    assert base.split()[-1] == "1.00x"
    # 8 bytes per row on the wire instead of the row: far fewer megabytes sent.
    assert float(arena.split()[-2]) < float(base.split()[-2]) / 4, proc.stdout


def test_bench_ssp_start_warm_start_ends_in_the_cold_state() -> None:
    # Real host and SSPs: the warm start (snapshot + catch-up of writes made while the SSP was
    # down) must hold the same rows as a cold bootstrap and publish SurrealDB's answer; the
    # script exits 1 otherwise.
    proc = subprocess.run([sys.executable, str(ROOT / "loadtests" / "bench_ssp_start.py"),
                           "--rows", "3000", "--users", "40", "--down-writes", "300"],
                          check=False, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "circuit_hashes equal: yes" in out, out
    assert "warm yes, cold yes" in out, out
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    assert [r.split(":")[0] for r in rows[1:]] == ["| cold", "| warm", "| cold again"], out


def test_probe_columnar_topk_finds_the_engines_members() -> None:
    # The probe exits 1 when the members it computes column-wise (from columns read in order
    # or gathered per thread), or the engine's lazy registration, differ from the engine's
    # projected rows (ties on votes break by comment id, as in SurrealDB).
    proc = subprocess.run([sys.executable, str(ROOT / "loadtests" / "probe_columnar_topk.py"),
                           "--rows", "500", "--repeat", "1"],
                          check=False, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    steps = [line.split("|")[1].strip() for line in proc.stdout.splitlines()
             if line.startswith("| ") and not line.startswith("| step")]
    assert steps == ["engine (baseline)", "columns from dicts", "top-k from arrays",
                     "member texts", "columnar total", "top-k, rows gathered per thread",
                     "engine, lazy rows + columns built", "engine, lazy rows, columns kept"], \
        proc.stdout


def test_probe_shard_batches_prints_every_size() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "loadtests" / "probe_shard_batches.py"),
                           "--quick", "--sizes", "1,50"],
                          check=False, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in proc.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| batch")]
    assert [r[0] for r in rows] == ["1", "50"], proc.stdout
    assert rows[0][3] == "1.00", proc.stdout  # the baseline's own ratio
    # every size measured its replies (the wire form: views sharing a delta grouped)
    assert all(float(r[2].replace(",", "")) > 0 and float(r[5]) > 0 for r in rows), proc.stdout


def test_bench_mixes_quick_prints_every_shape_and_the_worst() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "loadtests" / "bench_mixes.py"), "--quick",
                           "--seeds", "5", "--naive", "1", "--naive-views", "1"],
                          check=False, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    shapes = [line.split()[0] for line in out.splitlines() if line.startswith("  S")]
    assert len(shapes) == 12, out
    rows = [line for line in out.splitlines() if line.split()[:1] and line.split()[0] in shapes
            and not line.startswith(" ")]
    assert len(rows) == 12, out
    # every shape registered, ran, and has the baseline's ratio (SurrealDB re-running it)
    assert all(r.split()[-1].endswith("x") and not r.split()[3].startswith("rejected")
               for r in rows), out
    for name in ("mix ", "mix b", "worst shape (x budget)", "=== summary", "naive/this"):
        assert name in out, f"missing {name!r}:\n{out}"
    for preset in ("forum", "shop"):
        proc = subprocess.run([sys.executable, str(ROOT / "loadtests" / "bench_mixes.py"),
                               "--quick", "--mix", preset, "--seeds", "1", "--no-mix"],
                              check=False, cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "worst shape" in proc.stdout, proc.stdout
