"""A project's backends as job configuration: the SSP's `SVC_JOB_CONFIG` entries and the
scheduler's `job_tables`.

Every backend app with an outbox `method` becomes one `SVC_JOB_CONFIG` entry keyed by the app
name: `name` is the outbox table, `base_url` is the app's `baseUrl`, or, without one, the
backend's local address `http://127.0.0.1:<deploy.port>` (default 8080: the dev server listens
on the port it is deployed with), `auth_token` is `auth.token` with its `${NAME}` references
replaced from the environment given (a reference to an unset variable is an error: a backend
called without its token would answer 401 on every job), `concurrency` is
`method.concurrency` and `timeout_secs` is `deploy.timeout`.

The scheduler's `job_tables` are the root's `job_tables` followed by the outbox tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from project.appconfig import substitute
from project.rootconfig import Issue, Project, ProjectInvalid

__all__ = ["job_config", "scheduler_job_tables", "token_refs"]


def token_refs(token: str | None) -> list[str]:
    """The variable names `${NAME}` in a token."""
    if token is None:
        return []
    _, names = substitute(token, lambda _name: None)
    return names


def job_config(project: Project, env: Mapping[str, str]) -> dict[str, Any]:
    """`{job_tables: {<app>: {name, base_url, auth_token, concurrency, timeout_secs}}}` for
    every backend with an outbox; ProjectInvalid when a token references an unset variable."""
    tables: dict[str, Any] = {}
    issues: list[Issue] = []
    for name, app in project.apps.items():
        cfg = app.config
        if cfg.type != "backend" or cfg.method is None or app.outbox_table is None:
            continue
        token = ""
        if cfg.auth is not None and cfg.auth.token is not None:
            token, missing = substitute(cfg.auth.token, env.get)
            for var in missing:
                issues.append(Issue(str(app.file), "auth.token",
                                    f"references ${{{var}}}, which is not set"))
        base_url = cfg.baseUrl or f"http://127.0.0.1:{cfg.deploy_port()}"
        tables[name] = {
            "name": app.outbox_table,
            "base_url": base_url.rstrip("/"),
            "auth_token": token,
            "concurrency": cfg.method.concurrency,
            "timeout_secs": cfg.deploy.timeout if cfg.deploy is not None else 10,
        }
    if issues:
        raise ProjectInvalid(issues)
    return {"job_tables": tables}


def scheduler_job_tables(project: Project) -> list[str]:
    """The root's `job_tables`, then every app's outbox table, without repeats."""
    names = list(project.root.job_tables)
    names += [a.outbox_table for a in project.apps.values()
              if a.config.type == "backend" and a.outbox_table is not None]
    return list(dict.fromkeys(names))
