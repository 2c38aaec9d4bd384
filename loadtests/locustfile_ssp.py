"""Locust load for the SSP's hot routes: `POST /ingest` and `POST /view/register`.

Run headless against a running SSP (`ops/run`, or `svc-ssp`), with CSV output::

    SVC_AUTH_SECRET=<secret> .venv/bin/locust -f loadtests/locustfile_ssp.py --headless \\
        -u 50 -r 10 -t 30s --csv out --host http://127.0.0.1:8667

Writes `out_stats.csv`, `out_stats_history.csv`, `out_failures.csv`, `out_exceptions.csv`.
The bearer comes from `SVC_AUTH_SECRET` (unset: any bearer, which an SSP without a secret
accepts). Tune the mix and the data with environment variables:

- `SSP_LOAD_TABLE` (default `post`): the table the ingest events write;
- `SSP_LOAD_ROWS` (default 10000): ids are `<table>:<n>` for n below this, so events mix
  CREATE of new rows, UPDATE of known ones and an occasional DELETE;
- `SSP_LOAD_USERS` (default 100): the `author` values, and the users views are registered for
  (`params.auth_id`; each view is `... WHERE author = $auth.id ORDER BY score DESC LIMIT 20`);
- `SSP_LOAD_REGISTER_WEIGHT` (default 1) against ingest's 20: how often a user registers a view.

Every answer that is not 200 counts as a failure, with the status and error code in its name,
so `out_failures.csv` shows, e.g., how many 503 `SSP_NOT_READY` the SSP gave under load.
"""

from __future__ import annotations

import os
import random
import uuid

from locust import FastHttpUser, between, task

TABLE = os.environ.get("SSP_LOAD_TABLE", "post")
ROWS = int(os.environ.get("SSP_LOAD_ROWS", "10000"))
USERS = int(os.environ.get("SSP_LOAD_USERS", "100"))
REGISTER_WEIGHT = int(os.environ.get("SSP_LOAD_REGISTER_WEIGHT", "1"))
SECRET = os.environ.get("SVC_AUTH_SECRET") or "dev"


def _check(response: object) -> None:
    """Mark every non-200 as a failure named by its status and error code."""
    status = response.status_code  # type: ignore[attr-defined]
    if status == 200:
        response.success()  # type: ignore[attr-defined]
        return
    try:
        code = response.json().get("error", "")  # type: ignore[attr-defined]
    except (ValueError, AttributeError):  # not a JSON object: the status alone names it
        code = ""
    response.failure(f"{status} {code}".strip())  # type: ignore[attr-defined]


class SspUser(FastHttpUser):
    """One client: mostly ingest events, now and then a view registration."""

    wait_time = between(0.0, 0.01)

    def on_start(self) -> None:
        self.headers = {"Authorization": f"Bearer {SECRET}", "Content-Type": "application/json"}
        self.client_id = f"load-{uuid.uuid4().hex[:8]}"
        self.known: set[int] = set()

    @task(20)
    def ingest(self) -> None:
        n = random.randrange(ROWS)
        if n in self.known and random.random() < 0.05:
            op = "DELETE"
            self.known.discard(n)
        elif n in self.known:
            op = "UPDATE"
        else:
            op = "CREATE"
            self.known.add(n)
        rid = f"{TABLE}:{n}"
        record = {
            "id": rid,
            "author": f"user:{random.randrange(USERS)}",
            "title": f"title {n}",
            "score": random.randint(0, 1000),
        }
        body = {"table": TABLE, "op": op, "id": rid, "record": record}
        with self.client.post("/ingest", json=body, headers=self.headers, name="/ingest",
                              catch_response=True) as response:
            _check(response)

    @task(REGISTER_WEIGHT)
    def register(self) -> None:
        user = random.randrange(USERS)
        body = {
            "id": f"query:load_{self.client_id}_{user}",
            "surql": f"SELECT * FROM {TABLE} WHERE author = $auth.id ORDER BY score DESC LIMIT 20",
            "clientId": self.client_id,
            "ttl": "10m",
            # the identity the view runs as ($auth.id), as the SSP reads it from the params
            "params": {"auth_id": f"user:{user}"},
        }
        with self.client.post("/view/register", json=body, headers=self.headers, name="/view/register",
                              catch_response=True) as response:
            _check(response)
