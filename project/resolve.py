"""A project with every default filled in and every secret masked, for `svc project show`.

Masked: `auth.token` (its `${NAME}` references are listed with where each resolves), every
environment value (inline maps, dotenv files, `deploy.build_args`), the SSP job config's
`auth_token`, and the shell commands `dev` (as a string) and `deploy.cmd`: people write
`API_KEY=... node server.js` there, so only their length is shown. Environment sources are merged in order for each side (`dev`, `cloud`), later
sources overriding earlier ones, as the app would see them; vault variables are shown as
coming from the vault (their values are not known here).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dotenv import dotenv_values

from project.appconfig import AppConfig, VaultWhitelist
from project.envsources import Variable, dotenv_file, env_leaves
from project.jobwiring import scheduler_job_tables, token_lookup, token_refs
from project.rootconfig import LoadedApp, Project

MASK = "***"


def expand_project_dir(text: str, project_dir: Path) -> str:
    """`${PROJECT_DIR}` replaced by the root project's directory."""
    return text.replace("${PROJECT_DIR}", str(project_dir))


def _dotenv_keys(path: Path) -> list[str] | None:
    if not path.is_file():
        return None
    # python-dotenv, as project.envsources reads the values; no interpolation
    return list(dotenv_values(path, interpolate=False))


def merged_env(env: Any, side: str, app_dir: Path, project_dir: Path) -> dict[str, Any]:
    """The variables `side` (`dev` or `cloud`) gets from an `env` value, values masked:
    `{vars: {KEY: source}, vault: all|[KEYS]|None, missing: [dotenv files not found]}`."""
    out: dict[str, Any] = {"vars": {}, "vault": None, "missing": []}

    def leaf(src: Any) -> None:
        if isinstance(src, str) and src == "vault":
            out["vault"] = "all"
        elif isinstance(src, str):
            path = dotenv_file(src, app_dir, project_dir)
            keys = _dotenv_keys(path)
            if keys is None:
                out["missing"].append(src)
            for k in keys or []:
                out["vars"][k] = f"{MASK} ({src})"
        elif isinstance(src, VaultWhitelist):
            if out["vault"] != "all":
                out["vault"] = list(dict.fromkeys([*(out["vault"] or []), *src.vault]))
        elif isinstance(src, dict):
            for k in src:
                out["vars"][k] = f"{MASK} (inline)"

    for src in env_leaves(env, side):
        leaf(src)
    return out


def masked_command(text: str) -> str:
    """A shell command as `show` prints it: it may carry inline credentials."""
    return f"{MASK} (shell command, {len(text)} characters)"


def _source(found: Variable | None) -> str:
    return "not set" if found is None else f"set ({found.source})"


def _app(app: LoadedApp, project: Project, env: Mapping[str, str]) -> dict[str, Any]:
    cfg: AppConfig = app.config
    doc = cfg.model_dump(by_alias=True, exclude_none=True, exclude={"env"})
    doc["file"] = str(app.file)
    if isinstance(doc.get("dev"), str):
        doc["dev"] = masked_command(doc["dev"])
    if isinstance(doc.get("deploy"), dict) and isinstance(doc["deploy"].get("cmd"), str):
        doc["deploy"]["cmd"] = masked_command(doc["deploy"]["cmd"])
    if cfg.auth is not None:
        refs = token_refs(cfg.auth.token)
        lookup = token_lookup(app, project, env)
        doc["auth"] = {"type": "token",
                       "token": MASK if cfg.auth.token else None,
                       # where each reference resolves (never its value)
                       "references": {r: _source(lookup(r)) for r in refs}}
    if "deploy" in doc or cfg.type != "container":
        deploy = doc.setdefault("deploy", {
            "expose": False, "timeoutOverridable": False, "timeout": 10,
            "resources": {"vcpus": 1, "memory": 512, "disk": 5}})
        if cfg.deploy_port() is not None:
            deploy["port"] = cfg.deploy_port()
        deploy.setdefault("context", str(project.dir))
        if cfg.type != "backend":
            for key in ("timeout", "timeoutOverridable"):
                deploy.pop(key, None)
        if cfg.deploy is not None and cfg.deploy.build_args is not None:
            deploy["build_args"] = merged_env(cfg.deploy.build_args, "cloud", app.dir,
                                              project.dir)
    if cfg.volumes:
        doc["volumes"] = [expand_project_dir(v.split(":", 1)[0], project.dir) + ":"
                          + v.split(":", 1)[1] for v in cfg.volumes]
    if cfg.env is not None:
        doc["env"] = {side: merged_env(cfg.env, side, app.dir, project.dir)
                      for side in ("dev", "cloud")}
    if app.outbox_table is not None:
        doc["method"]["table"] = app.outbox_table
    return doc


def _names(section: Any) -> Any:
    if isinstance(section, dict):
        return sorted(section)
    return None if section is None else f"{len(section)} entries"


def resolved(project: Project, env: Mapping[str, str]) -> dict[str, Any]:
    """The whole project as the services would use it, secrets masked."""
    root = project.root
    jobs: dict[str, Any] = {}
    for name, app in project.apps.items():
        cfg = app.config
        if cfg.type != "backend" or cfg.method is None or app.outbox_table is None:
            continue
        lookup = token_lookup(app, project, env)
        missing = [r for r in token_refs(cfg.auth.token if cfg.auth else None)
                   if lookup(r) is None]
        has_token = cfg.auth is not None and bool(cfg.auth.token)
        jobs[name] = {
            "name": app.outbox_table,
            "base_url": (cfg.baseUrl or f"http://127.0.0.1:{cfg.deploy_port()}").rstrip("/"),
            "auth_token": (f"(not set: ${{{missing[0]}}})" if missing
                           else MASK if has_token else ""),
            "concurrency": cfg.method.concurrency,
            "timeout_secs": cfg.deploy.timeout if cfg.deploy is not None else 10,
        }
    return {
        "file": str(project.file),
        "sync": {"transport": root.sync.transport},
        "refMode": root.refMode,
        "impersonation": {"enabled": root.impersonation.enabled},
        "job_tables": scheduler_job_tables(project),
        "ssp_job_config": {"job_tables": jobs},
        # names only: their contents are project.workflows' to check and may carry payloads
        "workflows": _names(root.workflows),
        "schedules": _names(root.schedules),
        "apps": {name: _app(app, project, env) for name, app in project.apps.items()},
    }
