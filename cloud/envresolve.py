"""What an app's process environment is on the platform: its ``project.yml`` ``env`` (the
``cloud`` side of the spec's "App configuration file") resolved against the platform's
variables and vault.

Order, later overriding earlier: the project's environment variables for every app, then
those set for this app, then the app's ``env`` sources in the order written: ``vault`` adds
every vault secret of the environment, ``{vault: [KEYS]}`` only those (a listed key missing
from the vault is an error naming it: an app must not start without a secret it asked for),
a dotenv path its file (relative to the app's directory, ``${PROJECT_DIR}`` expanded), an
inline map its values. A ``{dev, cloud}`` split contributes its ``cloud`` side.

Values stay :class:`cloud.secret.Secret` throughout; the caller decides where they go
(``svc cloud env pull`` writes a dotenv file; the deployments of the platform's next part put
them in a process environment).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from dotenv import dotenv_values

from cloud.secret import Secret
from project.appconfig import VaultWhitelist
from project.envsources import dotenv_file, env_leaves

__all__ = ["MissingVaultKeys", "resolve_app_env"]


class MissingVaultKeys(ValueError):
    def __init__(self, app: str, keys: list[str]) -> None:
        super().__init__(f"app {app}: env asks the vault for {', '.join(keys)}, which the "
                         "vault of this environment does not hold (vault_set or "
                         "vault_generate them)")
        self.keys = keys


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def resolve_app_env(app: str, env: Any, *, platform_all: Mapping[str, Secret],
                    platform_app: Mapping[str, Secret], vault: Mapping[str, Secret],
                    app_dir: Path, project_dir: Path,
                    fingerprint: Callable[[str], str], side: str = "cloud"
                    ) -> dict[str, Secret]:
    out: dict[str, Secret] = {**platform_all, **platform_app}
    missing: list[str] = []
    for src in env_leaves(env, side):
        if isinstance(src, str) and src == "vault":
            out.update(vault)
        elif isinstance(src, VaultWhitelist):
            for k in src.vault:
                if k in vault:
                    out[k] = vault[k]
                elif k not in missing:
                    missing.append(k)
        elif isinstance(src, str):
            path = dotenv_file(src, app_dir, project_dir)
            if path.is_file():
                for k, v in dotenv_values(path, interpolate=False).items():
                    if v is not None:
                        out[k] = Secret(v, fingerprint(v))
        elif isinstance(src, dict):
            for k, v in src.items():
                out[k] = Secret(_text(v), fingerprint(_text(v)))
    if missing:
        raise MissingVaultKeys(app, missing)
    return out
