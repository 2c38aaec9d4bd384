"""App client for live views (Python, async, on the official `surrealdb` SDK).

    client = await connect("ws://127.0.0.1:8000", "app", "main",
                           {"access": "account", "variables": {"name": "alice", "pass": "..."}},
                           service_url="http://127.0.0.1:9667")
    top = await client.view("SELECT * FROM thread ORDER BY score DESC LIMIT 10")
    async for step in top:          # or top.subscribe(callback)
        print(step.status, step.rows, step.added, step.removed, step.changed)

How a view works here:
- The service holds the view: the client asks it to register the view (`/view/register`, the
  view id hashed with this session's random salt, so two sessions of one user are two views)
  and the service writes the `_00_query` row and the view's edges.
- The client LIVE-subscribes to the user's own edge table and, on each edge notification,
  reads the members (`!removed` edges) and their rows in one request, with the query's own
  projection, WHERE and ORDER BY applied by SurrealDB to exactly those records
  (`viewclient.query`). Status `materializing` until the row says `ready`.
- `lastActiveAt` is written at 0.9 x ttl; `close()` deletes the row (the service unregisters).
- A dropped database connection, or a service that stops answering `/health`, turns every
  view to `gap`; the client reconnects, registers again, LIVE-subscribes again and reads
  again, so nothing is silently missed.
- `create`/`update`/`delete` show in the views at once and are rolled back when the database
  refuses them (then listed in `failed_writes`); `run(table, path, payload)` writes an outbox
  job and waits for its result.
"""

from viewclient.client import Client, FailedWrite, JobFailed, ViewError, connect
from viewclient.naming import edge_table
from viewclient.view import GAP, MATERIALIZING, READY, Step, View

__all__ = ["Client", "FailedWrite", "JobFailed", "ViewError", "connect", "edge_table", "View",
           "Step", "GAP", "MATERIALIZING", "READY"]
