"""From a project's validated apps to the processes that run them.

Decisions where the spec is open (also in the README, "Running the apps"):

- **Which apps.** Scope `dev` runs apps with scope `all` or `devOnly`; scope `cloud` those with
  `all` or `cloudOnly`. An app that depends on one the scope leaves out is refused before
  anything starts.
- **What runs.** `dev` as a string: `sh -c` with it. `{type: python, script}`: a path
  (`*.py` or with a `/`) runs as a script, anything else as a module (`python -m`); the
  interpreter is the `.venv` of the app's working directory, of the app, or of the project,
  else the one running the supervisor. `{type: node, script}`: a file runs with `node`; a
  name of `package.json`'s `scripts` with `npm run`. A `container` app without `dev` runs its
  `image` through the Docker executor (`cloud.containerapp`: host network, so a port is not
  remapped; its `volumes`, `args`, `workdir`): refused with a clear error when no Docker daemon
  answers, or the image is not on it (nothing is pulled). `{type: container, file}` (an image
  built from a file) is refused: building is not supported yet. In scope
  `cloud`, `deploy.cmd` (a shell command) replaces `dev` when set. The working directory is
  the app's directory, or `dev.workdir` relative to it.
- **Readiness.** A `container` app with `healthcheck`: GET it on the first published host
  port of `ports` (the spec); a `backend` with `deploy.healthcheck`: GET it on the deploy port;
  otherwise ready once started.
- **Environment.** The base environment, then the app's resolved variables; `PORT` is set to
  the app's port (deploy port of a backend or frontend, first published host port of a
  container) unless the app's variables set it.
"""

from __future__ import annotations

import graphlib
import json
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from apps.container import container_argv
from apps.model import AppFailed, Command, HealthCheck, Scope
from project.appconfig import (
    AppConfig,
    DevContainer,
    DevNode,
    DevPython,
    VaultWhitelist,
    parse_port,
)
from project.envsources import app_variables, env_leaves
from project.rootconfig import LoadedApp, Project

__all__ = ["app_command", "app_health", "app_port", "container_volumes", "in_scope", "order",
           "resolve_env", "runs_image", "vault_keys"]

_SCOPES: dict[str, tuple[str, ...]] = {"dev": ("all", "devOnly"), "cloud": ("all", "cloudOnly")}


def in_scope(app: AppConfig, scope: Scope) -> bool:
    return app.scope in _SCOPES[scope]


def order(apps: Iterable[LoadedApp], scope: Scope) -> list[LoadedApp]:
    """The apps of `scope` in an order where every app comes after what it depends on.
    AppFailed for a dependency the scope leaves out, or a cycle (validation refuses both
    already; a caller may pass apps it built itself)."""
    every = {a.name: a for a in apps}
    chosen = {n: a for n, a in every.items() if in_scope(a.config, scope)}
    graph: dict[str, set[str]] = {}
    for name, app in chosen.items():
        deps = set(app.config.dependsOn or [])
        for dep in sorted(deps):
            if dep not in chosen:
                why = (f"its scope is {every[dep].config.scope}" if dep in every
                       else "no such app")
                raise AppFailed(name, f"depends on {dep}, which scope {scope} does not run "
                                f"({why})")
        graph[name] = deps
    try:
        names = list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as e:
        ring = " -> ".join(e.args[1])
        raise AppFailed(e.args[1][0], f"dependency cycle: {ring}") from None
    return [chosen[n] for n in names]


def app_port(app: AppConfig) -> int | None:
    """The port the app listens on: the first published host port of a container (`ports`,
    else a dev container's `port`/`ports`), else the deploy port."""
    ports: list[int | str] = list(app.ports or [])
    if isinstance(app.dev, DevContainer):
        ports += [app.dev.port] if app.dev.port else []
        ports += list(app.dev.ports or [])
    if ports:
        return parse_port(ports[0])[0]
    return app.deploy_port()


def app_health(app: AppConfig) -> HealthCheck:
    """The readiness check the app's file asks for (see the module's docstring)."""
    if app.type == "container" and app.healthcheck is not None:
        return HealthCheck("http", port=app_port(app), path=app.healthcheck)
    if app.type == "backend" and app.deploy is not None and app.deploy.healthcheck is not None:
        return HealthCheck("http", port=app.deploy_port(), path=app.deploy.healthcheck)
    return HealthCheck("none")


def _python(cwd: Path, app_dir: Path, project_dir: Path) -> str:
    for base in (cwd, app_dir, project_dir):
        candidate = base / ".venv" / "bin" / "python"
        if candidate.is_file():
            return str(candidate)
    return sys.executable


def _node_argv(name: str, dev: DevNode, cwd: Path) -> tuple[str, ...]:
    script = dev.script
    if script.endswith((".js", ".mjs", ".cjs")) or (cwd / script).is_file():
        return ("node", script)
    manifest = cwd / "package.json"
    try:
        scripts = json.loads(manifest.read_text(encoding="utf-8")).get("scripts") or {}
    except (OSError, ValueError, AttributeError):
        scripts = {}
    if isinstance(scripts, dict) and script in scripts:
        return ("npm", "run", "--silent", script)
    raise AppFailed(name, f"dev.script {script!r} is neither a file in {cwd} nor a script of "
                    "its package.json")


def _docker_refusal(name: str) -> AppFailed | None:
    """Why a container app cannot run here, or None when a Docker daemon answers."""
    try:
        import docker  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return AppFailed(name, "a container app needs a Docker daemon and the docker SDK; "
                         "the SDK is not installed here (pip install docker), so nothing runs "
                         "it")
    try:
        docker.from_env(timeout=3).ping()
    except Exception as e:  # any failure to reach it means the same to the user
        return AppFailed(name, "a container app needs a Docker daemon; none answers "
                         f"(DOCKER_HOST={os.environ.get('DOCKER_HOST', 'unset')}): "
                         f"{type(e).__name__}")
    return None


def _container_command(app: LoadedApp, app_dir: Path, project_dir: Path,
                       scope: Scope) -> tuple[str, ...]:
    """A `type: container` app's image through the Docker executor (`cloud.containerapp`)."""
    cfg = app.config
    if isinstance(cfg.dev, DevContainer) or cfg.image is None:
        refused = _docker_refusal(app.name)
        raise refused or AppFailed(app.name, "building an image from dev.file is not "
                                   "supported yet: give the app a prebuilt image")
    for spec in cfg.ports or []:
        host, inside, _ = parse_port(spec)
        if host != inside:
            raise AppFailed(app.name, f"port {spec}: containers run on the host network "
                            "here, so a port cannot be remapped (use the same port on both "
                            "sides)")
    refused = _docker_refusal(app.name)
    if refused is not None:
        raise refused
    res = cfg.deploy.resources if cfg.deploy is not None and scope == "cloud" else None
    return container_argv(app.name, cfg.image, list(cfg.args or []),
                          container_volumes(cfg, app_dir, project_dir), cfg.workdir,
                          res.memory if res else None, float(res.vcpus) if res else None)


def runs_image(app: AppConfig, scope: Scope) -> bool:
    """The app runs its prebuilt `image` (a `container` app with neither a `dev` command nor,
    in scope `cloud`, a `deploy.cmd`)."""
    if scope == "cloud" and app.deploy is not None and app.deploy.cmd:
        return False
    return app.type == "container" and app.dev is None and app.image is not None


def container_volumes(cfg: AppConfig, app_dir: Path, project_dir: Path) -> list[str]:
    """The app's `volumes` with `${PROJECT_DIR}` expanded and relative sources resolved
    against its directory."""
    volumes = []
    for v in cfg.volumes or []:
        src, _, rest = v.replace("${PROJECT_DIR}", str(project_dir)).partition(":")
        if src.startswith("."):
            src = str((app_dir / src).resolve())
        volumes.append(f"{src}:{rest}")
    return volumes


def app_command(app: LoadedApp, scope: Scope, *, env: Mapping[str, str],
                project_dir: Path) -> Command:
    """The process that runs `app` in `scope` with exactly `env` (already merged), or
    AppFailed when it cannot be run here."""
    cfg = app.config
    app_dir = app.dir if app.dir.is_absolute() else project_dir / app.dir
    dev = cfg.dev
    argv: tuple[str, ...]
    cwd = app_dir
    if scope == "cloud" and cfg.deploy is not None and cfg.deploy.cmd:
        argv = ("sh", "-c", cfg.deploy.cmd)
    elif isinstance(dev, str):
        argv = ("sh", "-c", dev)
    elif isinstance(dev, DevPython):
        cwd = app_dir / dev.workdir if dev.workdir else app_dir
        py = _python(cwd, app_dir, project_dir)
        is_path = dev.script.endswith(".py") or "/" in dev.script
        argv = (py, dev.script) if is_path else (py, "-m", dev.script)
    elif isinstance(dev, DevNode):
        cwd = app_dir / dev.workdir if dev.workdir else app_dir
        argv = _node_argv(app.name, dev, cwd)
    elif isinstance(dev, DevContainer) or cfg.type == "container":
        argv = _container_command(app, app_dir, project_dir, scope)
    else:
        raise AppFailed(app.name, f"has no dev command to run (scope {scope})")
    if not cwd.is_dir():
        raise AppFailed(app.name, f"working directory {cwd} does not exist")
    full = dict(env)
    port = app_port(cfg)
    if port is not None:
        full.setdefault("PORT", str(port))
    return Command(app.name, argv, cwd, full, app_health(cfg), tuple(cfg.dependsOn or ()))


def resolve_env(project: Project, scope: Scope) -> dict[str, dict[str, str]]:
    """Each app's variables for `scope` from its `env` sources that need no platform: inline
    maps and dotenv files, the `dev` or `cloud` side of a split, merged in order, with
    `${PROJECT_DIR}` expanded to the project's directory. Vault
    sources contribute nothing here (see `vault_keys`); on the platform, the cloud side is
    resolved with the vault by the platform."""
    out: dict[str, dict[str, str]] = {}
    for name, app in project.apps.items():
        found = app_variables(app.config.env, app.dir, project.dir, side=scope)
        # the spec: `${PROJECT_DIR}` is expanded in env values too
        out[name] = {k: v.value.replace("${PROJECT_DIR}", str(project.dir))
                     for k, v in found.items()}
    return out


def vault_keys(app: AppConfig, scope: Scope) -> list[str] | None:
    """What the app's `scope` side asks of the vault: `["*"]` for every secret, the listed
    keys, or None for nothing."""
    keys: list[str] = []
    for src in env_leaves(app.env, scope):
        if src == "vault":
            return ["*"]
        if isinstance(src, VaultWhitelist):
            keys += [k for k in src.vault if k not in keys]
    return keys or None
