"""The database host's statement counters: shapes hide literals, counts stay bounded."""

from __future__ import annotations

from dbhost import stats as st
from dbhost.stats import StatementStats, statement_shape


def test_a_shape_hides_every_literal_and_joins_texts_that_differ_only_in_them() -> None:
    a = statement_shape("UPDATE post:17 SET score = 41, title = 'hello' WHERE n > 2.5")
    b = statement_shape("UPDATE post:18   SET score = 7, title = 'it\\'s'\nWHERE n > 10")
    assert a == b == "UPDATE post:? SET score = 0, title = '?' WHERE n > 0"
    secret = statement_shape("DEFINE USER app ON DATABASE PASSWORD 's3cr3t-pass' ROLES EDITOR")
    assert "s3cr3t" not in secret and "'?'" in secret
    assert "mail@example" not in statement_shape('SELECT * FROM user WHERE email = "mail@example.org"')
    # parameters and identifiers with digits are kept: they are the statement's shape
    assert statement_shape("SELECT * FROM t1 WHERE x = $p1") == "SELECT * FROM t1 WHERE x = $p1"
    assert statement_shape("SELECT * FROM `a b`:⟨key 1⟩") == "SELECT * FROM `a b`:'?'"


def test_counters_rank_shapes_by_engine_time_and_stay_bounded(monkeypatch) -> None:
    monkeypatch.setattr(st, "MAX_SHAPES", 3)
    monkeypatch.setattr(st, "MAX_CACHED_TEXTS", 2)
    s = StatementStats()
    for i in range(5):
        s.record(s.shape_of("query", f"UPDATE post:{i} SET n = {i}"), 0.002)
    s.record(s.shape_of("query", "SELECT * FROM post"), 0.020, failed=True)
    s.record(s.shape_of("version", None), 0.001)
    for i in range(4):  # new shapes beyond the cap are counted together
        s.record(s.shape_of("query", f"DEFINE TABLE t{i}"), 0.001)
    r = s.report()
    rows = {x["shape"]: x for x in r["statements"]}
    assert [x["shape"] for x in r["statements"]][0] == "query SELECT * FROM post"
    assert rows["query UPDATE post:? SET n = 0"]["count"] == 5
    assert rows["query SELECT * FROM post"]["errors"] == 1
    assert rows[st.OTHER]["count"] == 4
    assert r["shapes"] == 4 and r["requests"] == 11
    assert abs(sum(x["share"] for x in r["statements"]) - 1.0) < 0.01
    assert len(s._texts) <= 2
    s.reset()
    assert s.report()["requests"] == 0
