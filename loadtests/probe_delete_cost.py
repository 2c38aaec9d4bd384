"""How the embedded SurrealDB engine's DELETE cost grows with the number of defined tables.

    .venv/bin/python loadtests/probe_delete_cost.py [--tables 10,100,1000] [--records 200]

Why it matters: in `dedicated` edge mode every user has an edge table, so a database with 1,000
users defines 1,000+ tables, and every edge leaving a view is a DELETE. This probe defines N
extra tables in a fresh database of the embedded engine (surrealdb-embedded, `mem://`), then
times, per record, in one transaction each: UPDATE of existing records, DELETE of plain records
and DELETE of relation (edge) records. Baseline: the same operations with 10 tables.

The last two columns define the N tables as the SSP defines per-user edge tables (`TYPE
RELATION`, a changefeed, select permitted to one user) and time the edge DELETE again: a
table's permission expression makes every DELETE in the database slower still, which is why the
SSP writes the rule as `$auth = user:<key>` (one parameter, one literal) rather than
`$auth.id = user:<key>`.

Why the cost follows the tables (session 9, `probe_edge_removal.py` "stages" and "other
definitions"): removing an existing record reads and decodes the table catalogue of its
database, each time, in any statement form and in one transaction as in many; a condition
that fails, a missing id, an UPDATE or a RELATE do not. Definitions other than tables'
(fields, functions, params) do not count; a table's own definition counts by its size (its
permission expression most). So the application's own DELETEs pay it too.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.engine.judge import Judge  # noqa: E402


def _per_record(judge: Judge, stmt: str, n: int) -> float:
    text = "BEGIN; " + "; ".join(stmt.format(i=i) for i in range(n)) + "; COMMIT;"
    start = time.perf_counter()
    judge.run(text)
    return (time.perf_counter() - start) / n * 1e6


EDGE_LIKE = ("DEFINE TABLE extra{i} TYPE RELATION SCHEMALESS CHANGEFEED 1h INCLUDE ORIGINAL "
             "PERMISSIONS FOR select WHERE {rule} FOR create, update, delete NONE")


def measure(tables: int, n: int, rule: str | None = None) -> tuple[float, float, float]:
    """(UPDATE, DELETE plain, DELETE edge) microseconds per record with ``tables`` tables,
    plain ones, or per-user edge tables whose select permission is ``rule`` (``{i}``: the
    table's user)."""
    judge = Judge(tables=[])
    try:
        for i in range(tables):
            judge.run(f"DEFINE TABLE extra{i} SCHEMALESS" if rule is None
                      else EDGE_LIKE.format(i=i, rule=rule.format(i=i)))
        judge.run("DEFINE TABLE q SCHEMALESS; DEFINE TABLE m SCHEMALESS; "
                  "DEFINE TABLE plain SCHEMALESS; DEFINE TABLE edge TYPE RELATION SCHEMALESS")
        judge.run(f"CREATE q:1; FOR $i IN 0..{n} {{ CREATE type::record('m', $i); "
                  f"CREATE type::record('plain', $i) }}")
        judge.run(f"FOR $i IN 0..{n} {{ RELATE q:1->edge->(type::record('m', $i)) "
                  f"CONTENT {{id: type::record('edge', $i)}} }}")
        update = _per_record(judge, "UPDATE plain:{i} SET v = 1 RETURN NONE", n)
        plain = _per_record(judge, "DELETE plain:{i} RETURN NONE", n)
        edge = _per_record(judge, "DELETE edge:{i} RETURN NONE", n)
        return update, plain, edge
    finally:
        judge.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tables", default="10,100,1000")
    p.add_argument("--records", type=int, default=200)
    args = p.parse_args(argv)
    counts = [int(x) for x in args.tables.split(",")]
    rows = [(t, *measure(t, args.records),
             measure(t, args.records, "$auth.id = user:u{i}")[2],
             measure(t, args.records, "$auth = user:u{i}")[2]) for t in counts]
    base = rows[0]
    print(f"{'tables defined':>14} {'UPDATE us':>10} {'DELETE us':>10} {'DELETE edge us':>15} "
          f"{'DELETE vs ' + str(base[0]) + ' tables':>22} {'edge, $auth.id rule':>20} "
          f"{'edge, $auth rule':>17}")
    for t, upd, plain, edge, old_rule, new_rule in rows:
        print(f"{t:>14,} {upd:>10.0f} {plain:>10.0f} {edge:>15.0f} {plain / base[2]:>21.1f}x "
              f"{old_rule:>20.0f} {new_rule:>17.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
