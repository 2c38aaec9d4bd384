"""A live top-10 list: the ten best-scored threads, printed again whenever another process
writes. Against `ops/run --memory` as it starts (database ws://127.0.0.1:8000, root/root,
namespace and database `main`, scheduler on :9667); the SVC_DB_* variables and
SVC_SERVICE_URL point it elsewhere. `--steps N` stops after N updates of the ready list (the tests use it).

The table must be hooked into the service (`svc schema apply` after it exists): the example
says so on stderr when it is not. The steps are in clients/README.md, "Example".
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from surrealdb import AsyncSurreal

from viewclient import connect

TOP10 = "SELECT id, title, score FROM thread ORDER BY score DESC LIMIT 10"
SETUP = """
DEFINE TABLE IF NOT EXISTS thread SCHEMALESS PERMISSIONS FOR select FULL;
DEFINE TABLE IF NOT EXISTS user SCHEMALESS PERMISSIONS FOR select WHERE id = $auth.id;
DEFINE ACCESS IF NOT EXISTS account ON DATABASE TYPE RECORD
    SIGNUP (CREATE user SET name = $name, pass = crypto::argon2::generate($pass))
    SIGNIN (SELECT * FROM user WHERE name = $name AND crypto::argon2::compare(pass, $pass))
    DURATION FOR SESSION 1h;
"""


async def main(steps: int | None) -> None:
    url = os.environ.get("SVC_DB_URL", "ws://127.0.0.1:8000")
    ns = os.environ.get("SVC_DB_NS", "main")
    db = os.environ.get("SVC_DB_NAME", "main")
    service = os.environ.get("SVC_SERVICE_URL", "http://127.0.0.1:9667")
    # The app's schema, as its owner would deploy it (root, once).
    root = AsyncSurreal(url)
    await root.signin({"username": os.environ.get("SVC_DB_USER", "root"),
                       "password": os.environ.get("SVC_DB_PASS", "root")})
    await root.use(ns, db)
    await root.query(SETUP)
    info = await root.query("INFO FOR TABLE thread")
    await root.close()
    fields = info.get("fields") if isinstance(info, dict) else None
    if "_00_rv" not in (fields or {}):
        # The service follows only tables `svc schema apply` hooked (changefeed or events).
        print("thread is not hooked into the service yet: run `svc schema apply` "
              "(clients/README.md); the list stays empty until then", file=sys.stderr, flush=True)
    creds = {"access": "account", "variables": {"name": "demo", "pass": "demo-pass"}}
    signup = AsyncSurreal(url)
    try:
        await signup.signup({"namespace": ns, "database": db, **creds})
    except Exception:  # noqa: BLE001 - signed up on an earlier run
        pass
    finally:
        await signup.close()

    client = await connect(url, ns, db, creds, service_url=service)
    try:
        top = await client.view(TOP10)
        seen, ready = 0, False
        async for step in top:
            print(f"[{step.status}] " + ", ".join(
                f"{r['title']} ({r['score']})" for r in step.rows), flush=True)
            if step.status == "ready" and not ready:
                ready = True  # the first full list; updates count from here
            elif ready and (step.added or step.removed or step.changed):
                seen += 1
                if steps is not None and seen >= steps:
                    return
    finally:
        await client.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=None)
    asyncio.run(main(ap.parse_args().steps))
