"""Engine CPU per edge write in mode `dedicated` (one edge table per user) against `single`.

    .venv/bin/python loadtests/probe_edge_modes.py [--users 1000] [--edges 200] [--rounds 10]

Why: `loadtests/bench_ssp.py` reached fewer events/s in `dedicated` than in `single`, and the
question was whether the database pays more per edge when the edges of a flush go to many
per-user tables. This probe runs the engine in-process (surrealdb-embedded on surrealkv, as
`svc-db --memory` does), defines `--users` edge tables exactly as the SSP does (`TYPE
RELATION`, changefeed, the select rule) plus `_00_list_ref` with its index on `in`, and
times transactions of `--edges` edges spread over random users' views, in the SSP's own
statements (`ssp.publisher.UPSERT_FLAT`, `UPSERT_FLAT_SINGLE`, `RETIRE`):

- RELATE over edges that exist (a member that changed: most of a steady load);
- RELATE of new edges (a member that joined);
- UPDATE of edges that exist (what an upsert would cost if the SSP knew the edge is there);
- retiring edges (mode `dedicated`'s removal) against deleting them (mode `single`'s; here the
  per-user tables are defined in the same database, so the DELETE pays for them as it would in
  a `dedicated` database: a `single` database without them deletes far cheaper,
  `probe_edge_removal.py`).

CPU is the process's time (the engine's threads included), so other work on the machine
moves it less than wall time; modes alternate, each figure is the mean over `--rounds`.
"""

from __future__ import annotations

import argparse
import itertools
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from surrealdb import RecordID  # noqa: E402
from surrealdb_embedded import SyncEmbeddedDB  # noqa: E402

from dbclient.cbor import decode, encode  # noqa: E402
from ssp.publisher import RETIRE, UPSERT_FLAT, UPSERT_FLAT_SINGLE  # noqa: E402

UPDATE_FLAT = ("FOR $r IN $rows { UPDATE type::record($r[0], [$r[1], $r[2]]) "
               "SET rv = $r[3], seq = $seq, removed = NONE RETURN NONE }")
MEMBERS_PER_VIEW = 5  # existing edges per view: the members an update hits


class Engine:
    def __init__(self, url: str) -> None:
        self.db = SyncEmbeddedDB(url)
        self.db.connect()
        self._ids = itertools.count()
        self.call("use", ["probe", "probe"])

    def call(self, method: str, params: list[Any]) -> Any:
        reply = decode(self.db.execute(encode({"id": next(self._ids), "method": method,
                                               "params": params})))
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply["result"]

    def query(self, sql: str, params: dict[str, Any] | None = None) -> list[Any]:
        out = self.call("query", [sql, params or {}])
        for r in out:
            if r.get("status") != "OK":
                raise RuntimeError(r)
        return out

    def cpu(self, sql: str, params: dict[str, Any]) -> float:
        t = time.process_time()
        self.query(f"BEGIN; {sql}; COMMIT;", params)
        return time.process_time() - t


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--users", type=int, default=1000)
    p.add_argument("--edges", type=int, default=200, help="edges per transaction")
    p.add_argument("--rounds", type=int, default=10)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="probe-edge-modes-"))
    try:
        run(Engine(f"surrealkv://{tmp / 'data'}"), args)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def run(db: Engine, args: argparse.Namespace) -> None:
    users = args.users
    for u in range(users):
        db.query(f"DEFINE TABLE _00_list_ref_user_u{u} TYPE RELATION SCHEMALESS CHANGEFEED 1h "
                 f"INCLUDE ORIGINAL PERMISSIONS FOR select WHERE $auth = user:u{u} "
                 "FOR create, update, delete NONE")
    db.query("DEFINE TABLE _00_list_ref TYPE RELATION SCHEMALESS CHANGEFEED 1h INCLUDE "
             "ORIGINAL; DEFINE INDEX _00_list_ref_in ON _00_list_ref FIELDS in")
    rng = random.Random(1)
    seq = itertools.count(1)
    fresh = itertools.count()

    def rows(mode: str, n: int, new: bool) -> list[list[Any]]:
        out = []
        for _ in range(n):
            u, c = rng.randrange(users), rng.randrange(10)
            key = f"n{next(fresh)}" if new else f"p{u}_{rng.randrange(MEMBERS_PER_VIEW)}"
            table = "_00_list_ref" if mode == "single" else f"_00_list_ref_user_u{u}"
            r: list[Any] = [table, RecordID("_00_query", f"u{u}c{c}"), RecordID("post", key), 1]
            if mode == "single":
                r.append(RecordID("user", f"u{u}"))
            out.append(r)
        return out

    def upsert(mode: str) -> str:
        return UPSERT_FLAT_SINGLE if mode == "single" else UPSERT_FLAT

    # every view's members exist as edges in both modes
    for mode in ("single", "dedicated"):
        for u in range(users):
            db.query(upsert(mode), {"seq": next(seq), "rows": [
                ["_00_list_ref" if mode == "single" else f"_00_list_ref_user_u{u}",
                 RecordID("_00_query", f"u{u}c{c}"), RecordID("post", f"p{u}_{k}"), 1,
                 *([RecordID("user", f"u{u}")] if mode == "single" else [])]
                for c in range(10) for k in range(MEMBERS_PER_VIEW)]})
    cases: list[tuple[str, str, Any]] = [
        ("RELATE, edge exists", "single", lambda: (upsert("single"), rows("single", n, False))),
        ("RELATE, edge exists", "dedicated",
         lambda: (upsert("dedicated"), rows("dedicated", n, False))),
        ("RELATE, new edge", "single", lambda: (upsert("single"), rows("single", n, True))),
        ("RELATE, new edge", "dedicated",
         lambda: (upsert("dedicated"), rows("dedicated", n, True))),
        ("UPDATE, edge exists", "dedicated",
         lambda: (UPDATE_FLAT, rows("dedicated", n, False))),
    ]
    n = args.edges
    spent: dict[tuple[str, str], float] = {}
    for _ in range(args.rounds):
        for label, mode, make in cases:
            sql, rs = make()
            key = (label, mode)
            spent[key] = spent.get(key, 0.0) + db.cpu(sql, {"rows": rs, "seq": next(seq)})
        # removals: the edges written as new just above, retired (dedicated) or deleted
        for mode in ("single", "dedicated"):
            gone = rows(mode, n, True)
            db.query(upsert(mode), {"rows": gone, "seq": next(seq)})
            ids = [RecordID(r[0], [r[1], r[2]]) for r in gone]
            sql = RETIRE if mode == "dedicated" else "DELETE $ids RETURN NONE"
            key = ("retire" if mode == "dedicated" else "DELETE", mode)
            spent[key] = spent.get(key, 0.0) + db.cpu(sql, {"ids": ids, "seq": next(seq)})
    print(f"engine CPU per edge, us ({args.edges} edges per transaction, {args.rounds} "
          f"rounds, {users} per-user edge tables defined)")
    print(f"{'statement':<22} {'single':>10} {'dedicated':>10} {'ded / single':>13}")
    per = args.rounds * n
    for label in ("RELATE, edge exists", "RELATE, new edge", "UPDATE, edge exists",
                  "removal"):
        if label == "removal":
            s, d = spent[("DELETE", "single")], spent[("retire", "dedicated")]
            label = "DELETE / retire"
        else:
            s, d = spent.get((label, "single"), 0.0), spent[(label, "dedicated")]
        ratio = f"{d / s:>12.2f}x" if s else f"{'-':>13}"
        print(f"{label:<22} {s / per * 1e6 if s else float('nan'):>10.1f} "
              f"{d / per * 1e6:>10.1f} {ratio}")


if __name__ == "__main__":
    sys.exit(main())
