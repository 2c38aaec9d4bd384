"""`loadtests/locustfile_ssp.py` runs headless against a real SSP (HTTP through gunicorn) and
writes its CSV: both routes answered, none of them with an error."""

from __future__ import annotations

import asyncio
import csv
import io
import subprocess
import sys
from pathlib import Path

from tests.support.procs import DbHost
from tests.support.ssp_stack import apply_schema, root_db, start_ssp, unique_db

ROOT = Path(__file__).resolve().parents[2]


async def test_locustfile_drives_ingest_and_register_with_csv_output(host: DbHost,
                                                                     tmp_path: Path) -> None:
    ns, db = unique_db()
    root = await root_db(host, ns, db)
    await root.query("DEFINE TABLE user SCHEMALESS; DEFINE TABLE post SCHEMALESS")
    apply_schema(host, ns, db)  # the meta tables; the events come from locust alone
    ssp = start_ssp(tmp_path, host, ns, db, SVC_INGEST_TRANSPORT="http", SVC_SSP_SHARDS="1")
    try:
        await ssp.wait_ready()
        await asyncio.to_thread(ssp.process.wait_http, f"http://127.0.0.1:{ssp.port}/health",
                                timeout=60.0)
        out = tmp_path / "load"
        env = {"PATH": "/usr/bin:/bin", "SSP_LOAD_USERS": "5", "SSP_LOAD_ROWS": "200",
               "SSP_LOAD_REGISTER_WEIGHT": "5", "SVC_AUTH_SECRET": "dev"}
        proc = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "locust", "-f", str(ROOT / "loadtests" / "locustfile_ssp.py"),
             "--headless", "-u", "4", "-r", "4", "-t", "5s", "--csv", str(out),
             "--host", f"http://127.0.0.1:{ssp.port}", "--only-summary"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        text = await asyncio.to_thread(Path(f"{out}_stats.csv").read_text)
        rows = {r["Name"]: r for r in csv.DictReader(io.StringIO(text))}
        for name in ("/ingest", "/view/register"):
            assert int(rows[name]["Request Count"]) > 0, rows
            assert int(rows[name]["Failure Count"]) == 0, rows
        posts = await root.query_one("SELECT count() FROM _00_query GROUP ALL")
        assert posts and posts[0]["count"] > 0  # the registrations reached the database
    finally:
        code = ssp.stop()
        await root.close()
    assert code == 0, ssp.process.log_text()[-3000:]
