"""What a service process takes from the project file: the one rule for the root file's settings.

The root file's `refMode`, `sync.transport` and `impersonation.enabled` are defaults for the
environment variables `SVC_SSP_REF_MODE`, `SVC_INGEST_TRANSPORT` and `SVC_IMPERSONATION`
(`on` / `off`): a variable set to a non-blank value wins (the
environment describes this deployment, the file is checked in and shared); without it the
file's value applies; without either the component keeps its own default. The SSP, the
scheduler and `svc schema apply` all call :func:`with_project_defaults`, so the rule lives here
only.

Nothing here reads `os.environ`: callers pass their environment mapping.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the models cost ~0.5 s of CPU to import: only a project file needs them
    from project.rootconfig import Project, RootConfig

__all__ = [
    "PROJECT_FILE_VAR",
    "ROOT_DEFAULTS",
    "load_service_project",
    "root_defaults",
    "setting_source",
    "with_project_defaults",
]

PROJECT_FILE_VAR = "SVC_PROJECT_FILE"
#: environment variable -> the root file's key that gives its default
ROOT_DEFAULTS: dict[str, str] = {
    "SVC_SSP_REF_MODE": "refMode",
    "SVC_INGEST_TRANSPORT": "sync.transport",
    "SVC_IMPERSONATION": "impersonation.enabled",
}


def load_service_project(env: Mapping[str, str]) -> Project | None:
    """The validated project named by `SVC_PROJECT_FILE`, None when the variable is unset or
    blank; :class:`project.rootconfig.ProjectInvalid` lists every problem."""
    path = env.get(PROJECT_FILE_VAR, "").strip()
    if not path:
        return None
    from project.rootconfig import load_project

    return load_project(Path(path))


def root_defaults(root: RootConfig) -> dict[str, str]:
    """The environment defaults the root file gives (only the keys it sets)."""
    values: dict[str, str | None] = {"SVC_SSP_REF_MODE": root.refMode,
                                     "SVC_INGEST_TRANSPORT": root.sync.transport}
    if "enabled" in root.impersonation.model_fields_set:  # only when the file says it
        values["SVC_IMPERSONATION"] = "on" if root.impersonation.enabled else "off"
    return {name: value for name, value in values.items() if value is not None}


def _is_set(env: Mapping[str, str], name: str) -> bool:
    return bool(env.get(name, "").strip())


def with_project_defaults(env: Mapping[str, str], project: Project | None) -> dict[str, str]:
    """`env` with the project's root settings filled in where the variable is unset or blank."""
    out = dict(env)
    if project is not None:
        for name, value in root_defaults(project.root).items():
            if not _is_set(env, name):
                out[name] = value
    return out


def setting_source(env: Mapping[str, str], project: Project | None, name: str) -> str:
    """Where the value of `name` comes from: the variable itself, the project file's key, or
    `default` (the component's own)."""
    if _is_set(env, name):
        return name
    if project is not None and name in root_defaults(project.root):
        return f"project file {project.file} ({ROOT_DEFAULTS[name]})"
    return "default"
