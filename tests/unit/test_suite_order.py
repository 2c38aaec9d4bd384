"""The whole run's module order: xdist's file scheduler hands out the costliest modules first
(tests/support/suite_order.py), and the cost table is read from junit reports."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support import suite_order


class FakeConfig:
    """The controller's config as the scheduler reads it: two workers, xdist's default of
    reordering units by test count (which the cost order must override)."""

    option = type("Option", (), {"loadscopereorder": True})()

    def getvalue(self, name: str) -> Any:
        assert name == "tx"
        return ["2*popen"]


class FakeNode:
    """What xdist's scheduler calls on a worker: the tests it is sent, and its shutdown."""

    def __init__(self, name: str) -> None:
        self.gateway = type("G", (), {"id": name})()
        self.shutting_down = False
        self.sent: list[list[int]] = []

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.append(list(indices))

    def shutdown(self) -> None:
        self.shutting_down = True


def test_modules_are_ordered_by_cost_with_unknown_ones_at_the_median() -> None:
    costs = {"a.py": 5.0, "b.py": 300.0, "c.py": 1.0, "d.py": 40.0}
    assert suite_order.ordered(["a.py", "new.py", "b.py", "c.py", "d.py"], costs) == \
        ["b.py", "d.py", "new.py", "a.py", "c.py"]
    # without a table the given order stands
    assert suite_order.ordered(["x.py", "y.py"], {}) == ["x.py", "y.py"]


def test_the_scheduler_hands_out_the_costliest_module_first_whatever_its_test_count(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(suite_order, "load_costs",
                        lambda path=suite_order.COSTS: {"t/slow.py": 200.0, "t/mid.py": 30.0,
                                                        "t/many.py": 2.0})
    # xdist's own order would be by test count: many.py (6 tests) first
    collection = ([f"t/many.py::test_{i}" for i in range(6)]
                  + ["t/slow.py::test_0", "t/slow.py::test_1", "t/slow.py::test_2"]
                  + ["t/mid.py::test_0", "t/mid.py::test_1", "t/mid.py::test_2"]
                  + ["t/other.py::test_0", "t/other.py::test_1", "t/other.py::test_2"])
    sched = suite_order.make_scheduler(FakeConfig(), None)
    nodes = [FakeNode("gw0"), FakeNode("gw1")]
    for node in nodes:
        sched.add_node(node)
        sched.add_node_collection(node, collection)
    sched.schedule()

    def modules(node: FakeNode) -> list[str]:
        return [collection[batch[0]].split("::")[0] for batch in node.sent]

    # other.py is unknown: the median of 200, 30 and 2 puts it between mid.py and many.py
    assert modules(nodes[0]) == ["t/slow.py"]
    assert modules(nodes[1]) == ["t/mid.py"]
    assert list(sched.workqueue) == ["t/other.py", "t/many.py"]
    # the first worker to run low takes the next costliest
    for i in range(len(nodes[1].sent[0])):
        sched.mark_test_complete(nodes[1], nodes[1].sent[0][i])
    assert modules(nodes[1])[1:] == ["t/other.py"]


def test_costs_are_summed_per_module_from_junit_reports(tmp_path: Path) -> None:
    report = tmp_path / "r.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.unit.test_suite_order" name="a" time="1.25"/>'
        '<testcase classname="tests.unit.test_suite_order" name="b" time="0.5"/>'
        '<testcase classname="tests.conftest.Gone" name="c" time="3"/>'
        '<testcase classname="tests.no_such_module" name="d" time="9"/>'
        '</testsuite></testsuites>')
    got = suite_order.costs_from_junit([report])
    assert got == {"tests/unit/test_suite_order.py": 1.8, "tests/conftest.py": 3.0}
    # a second run: each module's least sum counts
    again = tmp_path / "again.xml"
    again.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.unit.test_suite_order" name="a" time="0.5"/>'
        '<testcase classname="tests.conftest.Gone" name="c" time="7"/>'
        '</testsuite></testsuites>')
    assert suite_order.costs_from_junit([report, again]) == \
        {"tests/unit/test_suite_order.py": 0.5, "tests/conftest.py": 3.0}


def test_the_committed_table_is_readable() -> None:
    costs = suite_order.load_costs()
    assert len(costs) > 100 and all(v >= 0 for v in costs.values()), costs
