"""CPU per test module, for finding where a whole run's time goes on a noisy machine.

Wall time per module says little on a shared 2-core machine (it grows with everyone else's
load); CPU seconds do not. With ``SVC_TEST_CPU_REPORT=DIR`` each pytest process (each xdist
worker) writes ``DIR/<worker>.json``: per module, the CPU seconds of the worker itself and of
the processes its tests started and waited for (database hosts, SSPs, schedulers, with their
own children), and the wall seconds. ``python -m tests.support.cpu_report DIR`` prints the
modules by CPU, most first.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections.abc import Generator
from pathlib import Path

import pytest

ENV = "SVC_TEST_CPU_REPORT"


def _cpu() -> tuple[float, float]:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


class CpuReport:
    """Accumulates each test's share (setup, call, teardown) under its module's path."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.modules: dict[str, dict[str, float]] = {}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, None, None]:
        self_0, kids_0 = _cpu()
        wall_0 = time.monotonic()
        yield
        self_1, kids_1 = _cpu()
        row = self.modules.setdefault(item.nodeid.split("::")[0],
                                      {"self": 0.0, "children": 0.0, "wall": 0.0, "tests": 0})
        row["self"] += self_1 - self_0
        row["children"] += kids_1 - kids_0
        row["wall"] += time.monotonic() - wall_0
        row["tests"] += 1

    def pytest_sessionfinish(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        (self.out / f"{worker}.json").write_text(json.dumps(self.modules, indent=1))


def register(config: pytest.Config) -> None:
    """Install the report when the environment asks for it."""
    out = os.environ.get(ENV)
    if out:
        config.pluginmanager.register(CpuReport(Path(out)), "svc-cpu-report")


def main(argv: list[str]) -> int:
    rows: dict[str, dict[str, float]] = {}
    for f in sorted(Path(argv[0]).glob("*.json")):
        for mod, r in json.loads(f.read_text()).items():
            acc = rows.setdefault(mod, {"self": 0.0, "children": 0.0, "wall": 0.0, "tests": 0})
            for k in acc:
                acc[k] += r[k]
    total = sum(r["self"] + r["children"] for r in rows.values())
    print(f"{'cpu s':>8} {'self':>7} {'kids':>7} {'wall s':>7} {'tests':>5} {'cum %':>6}  module")
    cum = 0.0
    for mod, r in sorted(rows.items(), key=lambda kv: -(kv[1]["self"] + kv[1]["children"])):
        cpu = r["self"] + r["children"]
        cum += cpu
        print(f"{cpu:8.1f} {r['self']:7.1f} {r['children']:7.1f} {r['wall']:7.1f} "
              f"{int(r['tests']):5d} {100 * cum / total:6.1f}  {mod}")
    print(f"{total:8.1f} total CPU s over {len(rows)} modules")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
