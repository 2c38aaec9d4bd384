"""The shrinker reduces a failing case to what the failure needs, keeping write ops consistent."""

from __future__ import annotations

from tests.engine.codec import Case, case_from_json, case_to_json, dump_case
from tests.engine.gen import make_case
from tests.engine.runner import shrink


def _touches_thread_3(case: Case) -> bool:
    return any(str(rid.id) == "3" and table == "thread" for table, _, rid, _ in case.writes)


def test_shrink_keeps_only_what_the_failure_needs() -> None:
    case = next(c for c in (make_case(s) for s in range(50)) if _touches_thread_3(c))
    small = shrink(case, _touches_thread_3)
    assert len(small.views) == 1
    assert len(small.writes) == 1 and _touches_thread_3(small)
    assert sum(len(rows) for rows in small.rows.values()) <= 1
    # the kept write is consistent with the kept rows
    table, op, rid, _ = small.writes[0]
    present = any(row["id"] == rid for row in small.rows.get(table, []))
    assert op in (("UPDATE", "DELETE") if present else ("CREATE",))
    assert case_to_json(case_from_json(case_to_json(small))) == case_to_json(small)
    assert dump_case(small).startswith("{")
