"""Outbox job tables (`SVC_JOB_CONFIG`): read by the SSP's job runner (`ssp.jobs`) and by the
scheduler's machine pools (`scheduler.pools`), which run the tables of `run_on` backends."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class JobConfigError(ValueError):
    """`SVC_JOB_CONFIG` has the wrong shape (the message names the key; never the token)."""


@dataclass(frozen=True)
class JobTable:
    """One outbox job table from `SVC_JOB_CONFIG` (`auth_token` never printed)."""

    key: str
    name: str
    base_url: str
    auth_token: str = field(repr=False)
    # optional keys of the entry: the app's `method.concurrency` and `deploy.timeout`, ours
    concurrency: int = 1
    timeout_secs: float = 10.0
    lease_secs: float = 30.0  # ours: how long a claim holds without renewal
    backoff_ms: int = 1000  # ours: first retry wait, doubled per attempt (cap 30 s)


def _job_limits(key: str, spec: dict[str, Any]) -> dict[str, Any]:
    """The optional numeric keys of one `SVC_JOB_CONFIG` entry, checked."""
    out: dict[str, Any] = {}
    for name, kind, minimum in (("concurrency", int, 1), ("timeout_secs", float, 0.001),
                                ("lease_secs", float, 0.1), ("backoff_ms", int, 0)):
        if name not in spec:
            continue
        v = spec[name]
        wrong_kind = kind is int and not isinstance(v, int)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or wrong_kind or v < minimum:
            raise JobConfigError(f"SVC_JOB_CONFIG job_tables.{key}.{name} must be "
                                 f"{'an integer' if kind is int else 'a number'} >= {minimum}")
        out[name] = kind(v)
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", spec["name"]):  # it is put into queries
        raise JobConfigError(f"SVC_JOB_CONFIG job_tables.{key}.name must be a table name")
    return out


def parse_job_tables(env: Mapping[str, str]) -> list[JobTable]:
    """Every entry of `SVC_JOB_CONFIG` (unset: none); JobConfigError on a bad shape."""
    raw = env.get("SVC_JOB_CONFIG", "").strip()
    try:
        doc = json.loads(raw) if raw else {"job_tables": {}}
    except json.JSONDecodeError as e:
        raise JobConfigError(f"SVC_JOB_CONFIG is not valid JSON: {e.msg} at position {e.pos}"
                             ) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("job_tables", {}), dict):
        raise JobConfigError("SVC_JOB_CONFIG must be {\"job_tables\": {<key>: {name, base_url, "
                             "auth_token}}}")
    return tables_from_specs(doc.get("job_tables", {}))


def tables_from_specs(specs: Mapping[str, Any]) -> list[JobTable]:
    """The `job_tables` entries of an `SVC_JOB_CONFIG` document (or of one merged with the
    project file's outboxes) as JobTables; JobConfigError on a bad entry."""
    jobs = []
    for key, spec in specs.items():
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) \
                or not isinstance(spec.get("base_url"), str):
            raise JobConfigError(f"SVC_JOB_CONFIG job_tables.{key} needs string name and "
                                 "base_url")
        jobs.append(JobTable(key, spec["name"], spec["base_url"],
                             str(spec.get("auth_token", "")), **_job_limits(key, spec)))
    return jobs
