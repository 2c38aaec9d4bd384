"""Outbox jobs: what the SSP's runner (`ssp.jobs`), the scheduler's machine pools
(`scheduler.pools`) and workflows (`scheduler.workflows`) share of a job.

A job is a row of a job table, and the database is the queue and the lock: a runner claims
the oldest pending rows with a conditional UPDATE, holds a lease it renews, writes the
outcome only while the row is still its own, and hands rows back when it stops or its lease
expires. One module per part:

- `tables.py`: the job tables (`SVC_JOB_CONFIG`, the project file's outboxes);
- `rows.py`: every SurrealQL statement over a job row (claim, lease, outcome, retry, kill,
  recovery, a new row), written once;
- `policy.py`: which answers are retried and after how long, error entries and results as
  written to the row, the URL of a call, secrets kept out of every text.
"""
