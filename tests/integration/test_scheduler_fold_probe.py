"""loadtests/probe_scheduler_fold.py runs against today's scheduler modules (it calls the
fold the scheduler runs, and broke unnoticed when that moved into CoordinatorState)."""

from __future__ import annotations

import subprocess
import sys

from tests.support.procs import ROOT


def test_the_fold_probe_folds_and_prints_a_row_per_fold() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "loadtests" / "probe_scheduler_fold.py"),
                           "--events", "2000", "--folds", "2", "--rows", "300"],
                          check=False, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split() for line in proc.stdout.splitlines()
            if line.split()[:1] in (["1"], ["2"])]
    assert len(rows) == 2, proc.stdout
    # RSS, replica, its -wal, the WAL before the fold, the fold's seconds: all measured
    assert all(len(r) == 6 and float(r[1]) > 0 and float(r[4]) > 0 for r in rows), proc.stdout
