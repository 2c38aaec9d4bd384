"""What removing an edge costs on the embedded engine, per statement form and per table layout.

    .venv/bin/python loadtests/probe_edge_removal.py [--tables 10,100,1000] [--records 100]

Why: in mode `dedicated` every user owning a view has an edge table, and SurrealDB 3.2.4
(surrealdb-embedded) pays for every table defined in the database on each record it deletes.
This probe measures, in a fresh `mem://` engine per case, the engine's CPU time (process time,
so other load on the machine matters less than for wall time) per record for each way the SSP
could take an edge away, with N extra tables defined as the SSP defines per-user edge tables:

- forms: `DELETE <id>` one statement per edge; `DELETE [ids]` one statement for all;
  `DELETE t WHERE ...` a scan; `DELETE t:a..b` a range; and the retire step the SSP uses in
  mode `dedicated` (an `UPDATE` marking the edge `removed`), its revival (`RELATE` over the
  retired edge), and a `RELATE` of a new edge for comparison;
- stages: where in a DELETE the cost sits. `DELETE id WHERE false` stops after the record is
  read and its condition checked; `DELETE` of a missing id stops before; `OPTION IMPORT`
  skips the LIVE, event, changefeed, table-view and REFERENCE-cleanup steps; `DELETE x<->?`
  of a record with no edges runs the graph purge a DELETE runs, alone;
- layouts (at the largest N): what in a table's definition the cost grows with (a plain
  table, `TYPE RELATION`, a changefeed, the select rule, a long COMMENT), and the same N
  tables defined in another database of the namespace (the control: no cost);
- other definitions (at the largest N, plain tables): fields, an index or an event on each
  table, or N functions or params instead of tables.

Found (session 9, surrealdb-embedded 3.0.0b10 = core 3.2.4, load 1-4; CPU us per edge, 1,000
SSP-like tables against 10): every DELETE form costs the same per record, 5,000-6,000 against
60-140 (`DELETE id`, `DELETE [ids]`, `DELETE WHERE`, a range, one transaction or many); an
UPDATE, a revival or a new RELATE ~35-50 at both counts. `WHERE false` and a missing id cost
~25 at both counts and `DELETE x<->?` of a record with no edges ~25: the cost is in removing
an existing record, after its condition, and not in the graph purge's lookup. `OPTION IMPORT`
does not change it, nor does the storage (`surrealkv://` as `mem://`). It follows the tables
defined in the database and the size of their definitions: ~1.7-2.8 us per plain table, ~4.6
with the SSP's select rule, ~3.9 with a 400-byte COMMENT; an index or an event per table adds
a little; 3,000 fields on one table, 1,000 functions or 1,000 params cost ~nothing; tables in
another database nothing. So each removed record reads and decodes the whole table catalogue
of its database. The engine's library is stripped (perf shows memcmp, memmove and malloc,
nothing named), and the newest surrealdb source on GitHub (3.1.0-alpha) reads no catalogue on
that path (`doc/delete.rs`, `doc/purge.rs`: per-table lookups only): the scan came later.
Nothing a client can write avoids it, and an edge cannot be reused for another member: an
UPDATE keeps `in` and `out` as they were, a RELATE or INSERT RELATION naming another `out`
fails ("Found m:1 for the `out` field, which does not match the existing field value").
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from surrealdb_embedded import SyncEmbeddedDB  # noqa: E402

from dbclient.cbor import decode, encode  # noqa: E402

EDGE_TABLE = ("DEFINE TABLE x{i} TYPE RELATION SCHEMALESS CHANGEFEED 1h INCLUDE ORIGINAL "
              "PERMISSIONS FOR select WHERE $auth = user:u{i} FOR create, update, delete NONE")
LAYOUTS = {
    "plain table": "DEFINE TABLE x{i} SCHEMALESS",
    "TYPE RELATION": "DEFINE TABLE x{i} TYPE RELATION SCHEMALESS",
    "+ changefeed": "DEFINE TABLE x{i} TYPE RELATION SCHEMALESS CHANGEFEED 1h INCLUDE ORIGINAL",
    "+ select rule (SSP)": EDGE_TABLE,
    "plain + 400-byte COMMENT": "DEFINE TABLE x{i} SCHEMALESS COMMENT '" + "x" * 400 + "'",
}
# Other definitions than tables' own (N of each, in the same database).
OTHERS = {
    "plain + 3 fields each": ("DEFINE TABLE x{i} SCHEMALESS; DEFINE FIELD a ON x{i}; "
                              "DEFINE FIELD b ON x{i}; DEFINE FIELD c ON x{i}"),
    "plain + an index each": "DEFINE TABLE x{i} SCHEMALESS; DEFINE INDEX ia ON x{i} FIELDS a",
    "plain + an event each": ("DEFINE TABLE x{i} SCHEMALESS; "
                              "DEFINE EVENT ev ON x{i} WHEN false THEN 1"),
    "functions, no table": "DEFINE FUNCTION fn::f{i}() {{ RETURN 1 }}",
    "params, no table": "DEFINE PARAM $p{i} VALUE 1",
}
FORMS = {
    "DELETE id": ("each", "DELETE e:{i} RETURN NONE"),
    "DELETE WHERE false": ("each", "DELETE e:{i} WHERE false RETURN NONE"),
    "DELETE missing id": ("each", "DELETE e:missing{i} RETURN NONE"),
    "DELETE, IMPORT": ("import", "DELETE e:{i} RETURN NONE"),
    "DELETE m<->? none": ("each", "DELETE q:none{i}<->? RETURN NONE"),
    "DELETE [ids]": ("all", "DELETE [{ids}] RETURN NONE"),
    "DELETE WHERE": ("all", "DELETE e WHERE id >= e:{lo} AND id < e:{hi} RETURN NONE"),
    "DELETE range": ("all", "DELETE e:{lo}..{hi} RETURN NONE"),
    "retire (UPDATE)": ("each", "UPDATE e:{i} SET removed = true, seq = 2 WHERE !removed "
                                "RETURN NONE"),
    "revive (RELATE)": ("each", "RELATE q:1->e:{i}->m:{i} SET seq = 3, removed = NONE "
                                "RETURN NONE"),
    "RELATE new": ("each", "RELATE q:1->(type::record('e', {i} + 1000000))->m:{i} SET seq = 3 "
                           "RETURN NONE"),
}
_ids = itertools.count()


class Engine:
    """One embedded engine on `mem://`."""

    def __init__(self) -> None:
        self.db = SyncEmbeddedDB("mem://")
        self.db.connect()

    def call(self, method: str, params: list[Any]) -> Any:
        reply = decode(self.db.execute(encode({"id": next(_ids), "method": method,
                                               "params": params})))
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply["result"]

    def run(self, text: str) -> None:
        for st in self.call("query", [text, {}]):
            if st["status"] != "OK":
                raise RuntimeError(st["result"])

    def close(self) -> None:
        self.db.close()


def prepare(tables: int, layout: str, other_db: bool, n: int) -> Engine:
    """An engine with `tables` tables of `layout` (in database `other` when `other_db`) and,
    in database `t`, `n` records `m:i`, one view `q:1` and its `n` edges `e:i`."""
    eng = Engine()
    eng.call("use", ["t", "other" if other_db else "t"])
    stmts = [layout.format(i=i) for i in range(tables)]
    for i in range(0, len(stmts), 250):
        eng.run("; ".join(stmts[i:i + 250]))
    eng.call("use", ["t", "t"])
    eng.run("DEFINE TABLE q SCHEMALESS; DEFINE TABLE m SCHEMALESS; "
            "DEFINE TABLE e TYPE RELATION SCHEMALESS")
    eng.run(f"CREATE q:1; FOR $i IN 0..{n} {{ CREATE type::record('m', $i) }}; "
            f"FOR $i IN 0..{n} {{ RELATE q:1->(type::record('e', $i))->(type::record('m', $i)) "
            "SET seq = 1 }")
    return eng


def per_record_us(eng: Engine, form: str, n: int) -> float:
    """CPU microseconds per edge for `form` over edges 0..n-1, in one transaction."""
    kind, text = FORMS[form]
    if kind in ("each", "import"):
        body = "; ".join(text.format(i=i) for i in range(n))
    else:
        body = text.format(ids=", ".join(f"e:{i}" for i in range(n)), lo=0, hi=n)
    start = time.process_time()
    eng.run(("OPTION IMPORT; " if kind == "import" else "") + f"BEGIN; {body}; COMMIT;")
    return (time.process_time() - start) / n * 1e6


def measure_form(tables: int, form: str, n: int) -> float:
    eng = prepare(tables, EDGE_TABLE, False, n)
    try:
        if form == "revive (RELATE)":
            per_record_us(eng, "retire (UPDATE)", n)
        return per_record_us(eng, form, n)
    finally:
        eng.close()


def measure_layout(tables: int, layout: str, other_db: bool, n: int) -> float:
    eng = prepare(tables, layout, other_db, n)
    try:
        return per_record_us(eng, "DELETE id", n)
    finally:
        eng.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tables", default="10,100,1000")
    p.add_argument("--records", type=int, default=100)
    args = p.parse_args(argv)
    counts = [int(x) for x in args.tables.split(",")]
    n = args.records
    print(f"CPU us per edge, one transaction of {n}, extra tables defined like the SSP's "
          "per-user edge tables")
    print(f"{'form':<18}" + "".join(f"{str(c) + ' tables':>13}" for c in counts)
          + f"{'x vs ' + str(counts[0]):>10}")
    for form in FORMS:
        row = [measure_form(c, form, n) for c in counts]
        print(f"{form:<18}" + "".join(f"{v:>13.0f}" for v in row)
              + f"{row[-1] / row[0]:>9.1f}x")
    big = counts[-1]
    print(f"\nDELETE id, CPU us per edge with {big} extra tables of each layout")
    print(f"{'layout':<26}{'same database':>15}{'us per table':>14}")
    for name, layout in LAYOUTS.items():
        v = measure_layout(big, layout, False, n)
        print(f"{name:<26}{v:>15.0f}{v / big:>14.2f}")
    v = measure_layout(big, EDGE_TABLE, True, n)
    print(f"{'SSP tables, other database':<26}{v:>15.0f}{v / big:>14.2f}")
    for name, layout in OTHERS.items():
        v = measure_layout(big, layout, False, n)
        print(f"{name:<26}{v:>15.0f}{v / big:>14.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
