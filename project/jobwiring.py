"""A project's backends as job configuration: the SSP's `SVC_JOB_CONFIG` entries and the
scheduler's `job_tables`.

Every backend app with an outbox `method` becomes one `SVC_JOB_CONFIG` entry keyed by the app
name: `name` is the outbox table, `base_url` is the app's `baseUrl`, or, without one, the
backend's local address `http://127.0.0.1:<deploy.port>` (default 8080: the dev server listens
on the port it is deployed with), `auth_token` is `auth.token` with its `${NAME}` references
replaced from the environment given, else from the app's own `env` sources
(`project.envsources`: dotenv files, inline maps, the `dev` side of a split, in order); a
reference found in neither is an error (a backend called without its token would answer 401 on
every job), `concurrency` is
`method.concurrency` and `timeout_secs` is `deploy.timeout`.

The scheduler's `job_tables` are the root's `job_tables` followed by the outbox tables.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from project.appconfig import substitute
from project.envsources import Variable, variable_lookup
from project.rootconfig import Issue, LoadedApp, Project, ProjectInvalid

__all__ = ["job_config", "scheduler_job_tables", "token_lookup", "token_refs"]


def token_refs(token: str | None) -> list[str]:
    """The variable names `${NAME}` in a token."""
    if token is None:
        return []
    _, names = substitute(token, lambda _name: None)
    return names


def token_lookup(app: LoadedApp, project: Project,
                 env: Mapping[str, str]) -> Callable[[str], Variable | None]:
    """Where `${NAME}` in the app's `auth.token` resolves: the process environment `env`, else
    the app's own `env` sources."""
    return variable_lookup(app.config.env, app.dir, project.dir, env)


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
            lookup = token_lookup(app, project, env)

            def value(name: str, lookup: Callable[[str], Variable | None] = lookup
                      ) -> str | None:
                found = lookup(name)
                return None if found is None else found.value
            token, missing = substitute(cfg.auth.token, value)
            for var in missing:
                issues.append(Issue(str(app.file), "auth.token",
                                    f"references ${{{var}}}, which is not set (in the "
                                    "environment or the app's env sources)"))
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
