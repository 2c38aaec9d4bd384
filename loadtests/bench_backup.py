"""Backup and restore throughput against a plain paged SELECT of the same data, in one run.

    python loadtests/bench_backup.py [--rows 100000,1000000] [--page 1000]

For each row count: a memory-only database host and a local S3 server (``rclone serve s3``)
as real processes; a table of rows with the kinds of values real rows carry (links, a
datetime, a decimal, an array, an object), made by the engine itself; then, in order:

* ``select``: the baseline, every row read by keyset pages (``ORDER BY id LIMIT n``, then
  ``WHERE id > $last``) through the same client, nothing else done with them;
* ``backup``: ``backup.service`` end to end (schema, keyset pages, CBOR, gzip, multipart
  upload, catalog entry);
* ``restore``: download, checksum, wipe, schema, import in batches of 1,000, events and views
  defined again, row counts checked (the owner's rebuild is a no-op here: that is the
  scheduler's re-clone, measured by its own benchmarks).

MB/s is over the uncompressed CBOR of the dump (the rows, as the backup writes them: the same
bytes for all three); the dump's gzip size is printed too. Ratios are against ``select``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backup.config import objstore_from_env
from backup.exporter import pages
from backup.service import BackupService
from dbclient import Database, DbConfig
from tests.support.objstore import start_s3
from tests.support.procs import start_db_host

SCHEMA = """
DEFINE TABLE user SCHEMAFULL;
DEFINE FIELD name ON user TYPE string;
DEFINE TABLE item SCHEMAFULL CHANGEFEED 1h INCLUDE ORIGINAL;
DEFINE FIELD owner ON item TYPE record<user>;
DEFINE FIELD title ON item TYPE string;
DEFINE FIELD n ON item TYPE int;
DEFINE FIELD price ON item TYPE decimal;
DEFINE FIELD at ON item TYPE datetime;
DEFINE FIELD tags ON item TYPE array<string>;
DEFINE FIELD meta ON item TYPE object FLEXIBLE;
DEFINE INDEX item_owner ON item FIELDS owner;
"""


class NoTarget:
    async def hold(self, reason: str) -> None: ...
    async def rebuild(self, reason: str) -> None: ...
    async def blocked(self, reason: str) -> None: ...


async def seed(db: Database, rows: int) -> None:
    await db.query(SCHEMA)
    await db.query("FOR $i IN 0..100 { CREATE type::record('user', $i) SET name = 'u' + "
                   "<string> $i }")
    for start in range(0, rows, 2000):
        await db.query(
            "INSERT INTO item (SELECT VALUE {id: type::record('item', $this), owner: "
            "type::record('user', $this % 100), title: 'item number ' + <string> $this, "
            "n: $this, price: <decimal> ($this % 1000) / 100, at: d'2025-01-01T00:00:00Z' + "
            "<duration> (<string> ($this % 86400) + 's'), tags: ['a', 'b', <string> ($this % 7)], "
            "meta: {views: $this % 1000, pinned: $this % 2 = 0}} FROM array::range($s, $e)) "
            "RETURN NONE", {"s": start, "e": min(rows, start + 2000)})


def note(text: str) -> None:
    """A phase's time on stderr as soon as it is known (a long run stopped early keeps them)."""
    print(f"  [{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


async def wait(svc: BackupService, kind: str, job_id: str) -> dict[str, Any]:
    while True:
        rec = (svc.registry.backups if kind == "backup" else svc.registry.restores)[job_id]
        if rec.get("status") in ("done", "failed") or rec.get("stage") in ("done", "failed"):
            return rec
        await asyncio.sleep(0.05)


async def one(rows: int, page: int, tmp: Path) -> dict[str, Any]:
    host = start_db_host(tmp, memory=True)
    s3 = start_s3(tmp)
    try:
        cfg = DbConfig.from_env({"SVC_DB_URL": host.ws_url, "SVC_DB_USER": host.user,
                                 "SVC_DB_PASS": host.password, "SVC_DB_NS": "bench",
                                 "SVC_DB_NAME": "bench", "SVC_SSP_DB_TIMEOUT_SECS": "600"})
        db = Database(cfg)
        await db.connect()
        t = time.perf_counter()
        await seed(db, rows)
        seeded = time.perf_counter() - t
        note(f"{rows} rows seeded in {seeded:.1f}s")
        total = rows + 100

        t = time.perf_counter()
        n = 0
        for table in ("item", "user"):
            async for p in pages(db, table, page):
                n += len(p)
        select_secs = time.perf_counter() - t
        assert n == total, n
        note(f"select {select_secs:.1f}s")

        svc = BackupService(cfg, objstore_from_env(s3.env()), tmp / "reg", prefix="bench",
                            target=NoTarget())
        await svc.start()
        t = time.perf_counter()
        rec = svc.create_backup()
        done = await wait(svc, "backup", rec["backup_id"])
        backup_secs = time.perf_counter() - t
        assert done["status"] == "done", done
        note(f"backup {backup_secs:.1f}s ({done['raw_bytes']} bytes raw, {done['bytes']} gzip)")

        t = time.perf_counter()
        r = await svc.start_restore(rec["backup_id"])
        res = await wait(svc, "restore", r["restore_id"])
        restore_secs = time.perf_counter() - t
        assert res["stage"] == "done", res
        await svc.stop()
        await db.close()
        return {"rows": total, "seed_secs": seeded, "raw_mb": done["raw_bytes"] / 1e6,
                "gzip_mb": done["bytes"] / 1e6, "select": select_secs, "backup": backup_secs,
                "restore": restore_secs, "import_secs": res.get("import_secs")}
    finally:
        s3.stop()
        host.process.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default="100000,1000000",
                    help="comma-separated row counts (default 100000,1000000)")
    ap.add_argument("--page", type=int, default=1000, help="rows per keyset page (baseline)")
    args = ap.parse_args()
    counts = [int(x) for x in args.rows.split(",") if x.strip()]
    print(f"{'rows':>9} {'case':>8} {'secs':>8} {'rows/s':>9} {'MB/s':>7} {'vs select':>9}")
    for rows in counts:
        with tempfile.TemporaryDirectory() as d:
            out = asyncio.run(one(rows, args.page, Path(d)))
        base = out["select"]
        for case in ("select", "backup", "restore"):
            secs = out[case]
            print(f"{out['rows']:>9} {case:>8} {secs:>8.1f} {out['rows'] / secs:>9.0f} "
                  f"{out['raw_mb'] / secs:>7.2f} {base / secs:>8.2f}x", flush=True)
        print(f"{'':>9} data {out['raw_mb']:.1f} MB as CBOR, dump {out['gzip_mb']:.1f} MB "
              f"gzip; seeded in {out['seed_secs']:.1f}s; import alone "
              f"{out['import_secs']}s", flush=True)


if __name__ == "__main__":
    main()
