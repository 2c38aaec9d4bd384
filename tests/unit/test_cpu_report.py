"""The suite's CPU report (tests/support/cpu_report.py): per module, the worker's own CPU and
that of the processes its tests started."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

BURNER = """
import subprocess, sys

def test_a_child_burns_cpu():
    subprocess.run([sys.executable, "-c", "x = 0\\nfor i in range(3_000_000): x += i"], check=True)

def test_quiet():
    assert True
"""


def test_report_counts_children_cpu_per_module(tmp_path: Path) -> None:
    tests = tmp_path / "t"
    tests.mkdir()
    (tests / "test_burn.py").write_text(BURNER)
    (tests / "conftest.py").write_text(
        "from tests.support import cpu_report\n"
        "def pytest_configure(config):\n    cpu_report.register(config)\n")
    out = tmp_path / "report"
    env = {**os.environ, "SVC_TEST_CPU_REPORT": str(out), "PYTHONPATH": str(ROOT)}
    env.pop("PYTEST_XDIST_WORKER", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--rootdir", str(tests), str(tests)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [row] = json.loads((out / "main.json").read_text()).values()
    assert row["tests"] == 2
    assert row["children"] > 0.05  # the child's loop, counted once it was waited for
    printed = subprocess.run([sys.executable, "-m", "tests.support.cpu_report", str(out)],
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "test_burn.py" in printed and "total CPU s over 1 modules" in printed


def test_no_report_without_the_variable(tmp_path: Path) -> None:
    tests = tmp_path / "t"
    tests.mkdir()
    (tests / "test_one.py").write_text("def test_one():\n    assert True\n")
    (tests / "conftest.py").write_text(
        "from tests.support import cpu_report\n"
        "def pytest_configure(config):\n    cpu_report.register(config)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("SVC_TEST_CPU_REPORT", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--rootdir", str(tests), str(tests)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not list(tmp_path.rglob("main.json"))
