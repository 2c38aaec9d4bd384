"""An app's `env` sources read for their values: what `${NAME}` in `auth.token` resolves from.

A reference is looked up in the process environment first (it wins: it describes this
deployment), then in the variables the app's `env` gives its `dev` side: the sources in the
order written, a later one overriding an earlier one (the order `svc project show` documents);
a split contributes its `dev` side, a dotenv path the file's variables (read with
python-dotenv, no interpolation: values are taken as written), an inline map its values.
Vault sources have no value here. A dotenv file that does not exist contributes nothing.

Values are never put into messages or logs; :class:`Variable` hides its value from `repr`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dotenv import dotenv_values

from project.appconfig import EnvSplit

__all__ = ["Variable", "app_variables", "dotenv_file", "env_leaves", "variable_lookup"]

PROCESS = "environment"


@dataclass(frozen=True)
class Variable:
    """A variable's value and where it came from (`environment`, `inline`, a dotenv path)."""

    value: str = field(repr=False)
    source: str


def env_leaves(env: Any, side: str) -> Iterator[Any]:
    """The plain sources (`vault`, a dotenv path, `{vault: [...]}`, an inline map) that `side`
    (`dev` or `cloud`) gets from an `env` value, in order."""
    for item in env if isinstance(env, list) else [env] if env is not None else []:
        if isinstance(item, EnvSplit):
            chosen = item.dev if side == "dev" else item.cloud
            yield from chosen if isinstance(chosen, list) else [chosen] if chosen else []
        else:
            yield item


def dotenv_file(src: str, app_dir: Path, project_dir: Path) -> Path:
    """A dotenv path of `env`: `${PROJECT_DIR}` expanded, relative to the app's directory."""
    return app_dir / src.replace("${PROJECT_DIR}", str(project_dir))


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def app_variables(env: Any, app_dir: Path, project_dir: Path,
                  side: str = "dev") -> dict[str, Variable]:
    """The variables `side` gets from an app's `env` value, merged in order."""
    out: dict[str, Variable] = {}
    for src in env_leaves(env, side):
        if isinstance(src, str) and src != "vault":
            path = dotenv_file(src, app_dir, project_dir)
            if not path.is_file():
                continue
            for name, value in dotenv_values(path, interpolate=False).items():
                if value is not None:  # a bare `NAME` line sets nothing
                    out[name] = Variable(value, src)
        elif isinstance(src, dict):
            for name, value in src.items():
                out[name] = Variable(_text(value), "inline")
    return out


def variable_lookup(env: Any, app_dir: Path, project_dir: Path,
                    process: Mapping[str, str]) -> Callable[[str], Variable | None]:
    """`NAME -> Variable | None`: the process environment, else the app's `dev` variables."""
    own: dict[str, Variable] | None = None

    def lookup(name: str) -> Variable | None:
        nonlocal own
        if name in process:
            return Variable(process[name], PROCESS)
        if own is None:  # files are read only when a reference needs them
            own = app_variables(env, app_dir, project_dir)
        return own.get(name)
    return lookup
