"""`svc project validate` and `svc project show`: the project files, checked and resolved.

The root file is `--project FILE`, else `SVC_PROJECT_FILE`, else `./project.yml` (the rule the
services use too, except that they read only `SVC_PROJECT_FILE`, see the README). `validate`
also takes one app's `project.yml` (a file with none of the root's keys): that app's own rules are
checked, the rules between apps need the root.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from project.resolve import resolved
from project.rootconfig import Issue, RootConfig, check_app_file, check_project

EXIT_OK = 0
EXIT_INVALID = 2


def project_path(flag: str | None, env: Mapping[str, str], cwd: Path) -> Path:
    """Where the root project file is: the flag, `SVC_PROJECT_FILE`, `./project.yml`."""
    if flag:
        return Path(flag)
    from_env = env.get("SVC_PROJECT_FILE", "").strip()
    return Path(from_env) if from_env else cwd / "project.yml"


def _is_app_file(path: Path) -> bool:
    try:
        doc: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return False
    # an app file shares no key with the root file; an empty file counts as a root
    return isinstance(doc, dict) and bool(doc) and not set(doc) & set(RootConfig.model_fields)


def print_issues(issues: list[Issue]) -> None:
    for issue in issues:
        print(str(issue), file=sys.stderr)
    print(f"{len(issues)} problem{'s' if len(issues) != 1 else ''} found", file=sys.stderr)


def validate(path: Path) -> int:
    """Print every problem (file: path: reason) and exit 2, or a one-line summary and 0."""
    if _is_app_file(path):
        issues = check_app_file(path)
        if issues:
            print_issues(issues)
            return EXIT_INVALID
        print(f"{path}: valid app file (rules between apps are checked from the root file)")
        return EXIT_OK
    project, issues = check_project(path)
    if project is None:
        print_issues(issues)
        return EXIT_INVALID
    names = ", ".join(project.apps) or "none"
    print(f"{path}: valid ({len(project.apps)} apps: {names})")
    return EXIT_OK


def show(path: Path, env: Mapping[str, str]) -> int:
    """Print the resolved project as JSON, secrets masked; problems as `validate` does."""
    project, issues = check_project(path)
    if project is None:
        print_issues(issues)
        return EXIT_INVALID
    print(json.dumps(resolved(project, env), indent=2))
    return EXIT_OK
