"""Which test module a pytest-xdist worker takes next in the whole run (``--dist loadfile``).

xdist hands out modules (work units) in order of their number of tests, most first. Test
count says little about cost here: a module of 4 tests that deploys a platform in Docker runs
longer than a module of 400 unit tests, and when such a module is handed out last one worker
runs it alone while the other one idles. The scheduler below hands out modules by their
measured cost instead, most expensive first (longest-processing-time first), so the modules
left at the end are the short ones and both workers finish close together.

The costs are the seconds a module took in one process (``suite_costs.json``, from a junit
report: ``python -m tests.support.suite_order REPORT.xml ...`` rewrites the table). A module
the table does not know (new, renamed) counts as the table's median: it goes in the middle,
never first or last by accident. The table only orders the work; a stale figure costs some
idle time at the end of a run, never a test.
"""

from __future__ import annotations

import json
import statistics
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path
from typing import Any

COSTS = Path(__file__).with_name("suite_costs.json")
_ROOT = Path(__file__).resolve().parents[2]


def load_costs(path: Path = COSTS) -> dict[str, float]:
    """Module path (as in a node id, ``tests/x/test_y.py``) -> seconds; empty when unreadable
    (the order then falls back to the table-less one: every module in the middle)."""
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in raw.get("modules", {}).items()
            if isinstance(v, (int, float))}


def ordered(scopes: list[str], costs: dict[str, float]) -> list[str]:
    """``scopes`` (module paths) most expensive first; unknown ones at the median cost.
    Equal costs keep their given order (the sort is stable)."""
    middle = statistics.median(costs.values()) if costs else 0.0
    return sorted(scopes, key=lambda s: -costs.get(s, middle))


def make_scheduler(config: Any, log: Any) -> Any:
    """xdist's file scheduler with the work queue in cost order (see the module docstring)."""
    from xdist.scheduler import LoadFileScheduling

    costs = load_costs()

    class CostOrderedScheduling(LoadFileScheduling):
        def _assign_work_unit(self, node: Any) -> None:
            # The queue is filled once, when every worker has collected; it is put in cost
            # order before any unit leaves it (a unit a crashed worker gave back is re-sorted
            # in with the others).
            for scope in ordered(list(self.workqueue), costs):
                self.workqueue.move_to_end(scope)
            super()._assign_work_unit(node)

    return CostOrderedScheduling(config, log)


def costs_from_junit(paths: list[Path]) -> dict[str, float]:
    """Seconds per module in junit reports: each test's setup + call + teardown, summed per
    module (its shared fixtures are paid by its first test, so they count too); with several
    reports the least of a module's sums, the run least disturbed by a busy machine or by a
    failure's timeouts."""
    out: dict[str, float] = {}
    for p in paths:
        sums: dict[str, float] = defaultdict(float)
        for case in ET.parse(p).getroot().iter("testcase"):
            module = _module_path(case.get("classname") or "")
            if module is not None:
                sums[module] += float(case.get("time") or 0.0)
        for module, secs in sums.items():
            out[module] = min(secs, out.get(module, secs))
    return {k: round(v, 1) for k, v in sorted(out.items())}


def _module_path(classname: str) -> str | None:
    """``tests.integration.test_x.TestClass`` -> ``tests/integration/test_x.py``."""
    parts = classname.split(".")
    for n in range(len(parts), 0, -1):
        candidate = "/".join(parts[:n]) + ".py"
        if (_ROOT / candidate).is_file():
            return candidate
    return None


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m tests.support.suite_order REPORT.xml [REPORT.xml ...]\n"
              "merges the reports' per-module seconds into tests/support/suite_costs.json",
              file=sys.stderr)
        return 2
    table = {"modules": {}} if not COSTS.exists() else json.loads(COSTS.read_text())
    table.setdefault("modules", {}).update(costs_from_junit([Path(a) for a in argv]))
    table["modules"] = dict(sorted(table["modules"].items()))
    COSTS.write_text(json.dumps(table, indent=1) + "\n")
    print(f"{len(table['modules'])} modules in {COSTS}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
