"""A project's apps (its ``project.yml``) as roles of a deployment.

The planning is the ``apps`` package's (the same as ``svc dev``'s): which apps the ``cloud``
scope runs (``all`` and ``cloudOnly``; ``devOnly`` left out), in ``dependsOn`` order, what
command runs each (``deploy.cmd``, else its ``dev`` shell command, python script or module,
node script), in which directory, with which readiness check. What differs on the platform:

- **Environment.** The app's ``env`` is resolved with the platform's values and vault
  (``cloud.envresolve``: the ``cloud`` side of ``{dev, cloud}`` splits), laid over the
  inherited base environment the stack's roles get, without the stack's own credentials.
- **Ports.** Two deployments run side by side while the new one comes up, so an app cannot
  keep the fixed port its file names: each app with a port gets a free loopback port per
  deployment in ``PORT`` (overriding its variables), and its readiness check is made there.
  An app on the platform listens on ``$PORT``.
- **Run id.** Every app process carries ``SVC_APPS_RUN=<deployment id>`` (``apps.sweep``
  finds what a killed platform left of a deployment's apps, grandchildren that left the
  process group included).

- **Container apps.** A ``type: container`` app that runs its prebuilt ``image`` (no ``dev``
  command, no ``deploy.cmd``) is a role with that image: the Docker executor runs it as a
  container on the host network (labels, limits from ``deploy.resources``, its ``volumes``,
  ``args`` and ``workdir``; its variables without the host's own, as under ``svc dev``); the
  local executor hands it to a Docker daemon when one answers
  (``cloud.docker_executor.LocalWithContainers``). Like every app it listens on ``$PORT``.

- **Built images.** An app with ``deploy.containerfile`` runs the image built from it (the
  Containerfile's path relative to the app's directory, inside ``deploy.context``, which is
  relative to the project's root, default the root); the build is the deployment's
  ``building`` phase (``Executor.build``, ``cloud.imagebuild``), tagged by a hash of its
  inputs. ``deploy.build_args`` are resolved like ``env`` and reach the build only.
  ``deploy.cmd`` replaces the image's entrypoint and command (``sh -c``).
- **Static sites.** An app with ``deploy.static`` is served by the platform: its
  ``static.build`` (a shell command in the app's directory) runs first as a one-shot role
  ``app-<name>.build``, then ``cloud.staticsite`` serves ``static.dir`` (default ``dist``)
  on ``$PORT``; ready when ``/`` answers below 500.

An app that cannot be planned (a dependency out of scope, a container app without a daemon,
a vault key the vault lacks) fails the deployment before anything starts.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from apps import AppFailed, order
from apps.model import Command
from apps.plan import app_command, app_health, app_port, container_volumes, runs_image
from apps.procgroup import RUN_ENV
from cloud.containerapp import container_env
from cloud.envresolve import MissingVaultKeys, resolve_app_env
from cloud.executor import Role, free_port
from cloud.imagebuild import ImageBuild, build_tag, inside
from cloud.secret import Secret
from project.appconfig import AppConfig
from project.rootconfig import LoadedApp, Project

__all__ = ["APP_PREFIX", "SETTLE_SECS", "AppPlanError", "describe", "needs_containers",
           "plan_app_roles", "role_app"]

#: role names of apps: ``app-<name>`` (never the name of a stack role)
APP_PREFIX = "app-"
#: an app without a readiness check must still be running this long after its start
SETTLE_SECS = 1.0
#: how long a static site's build command may run
STATIC_BUILD_SECS = 600.0


class AppPlanError(Exception):
    def __init__(self, app: str, message: str) -> None:
        super().__init__(message)
        self.app = app
        self.message = message


def builds_image(cfg: AppConfig) -> bool:
    """The app runs the image built from its ``deploy.containerfile``."""
    return cfg.deploy is not None and bool(cfg.deploy.containerfile) \
        and cfg.deploy.static is None


def needs_containers(project: Project) -> bool:
    """Some cloud-scope app runs its own image, prebuilt or built (the worker then asks
    whether a Docker daemon answers before it plans)."""
    return any(runs_image(a.config, "cloud") or builds_image(a.config)
               for a in project.apps.values() if a.config.scope in ("all", "cloudOnly"))


def _built_image(app: LoadedApp, project: Project, *, slug: str,
                 vault: Mapping[str, Secret], fingerprint: Callable[[str], str],
                 tree_of: Callable[[Path], str]) -> ImageBuild:
    d = app.config.deploy
    assert d is not None and d.containerfile
    app_dir = app.dir if app.dir.is_absolute() else project.dir / app.dir
    ctx = inside(project.dir, d.context or ".")
    if ctx is None or not ctx.is_dir():
        raise AppPlanError(app.name, f"app {app.name}: deploy.context {d.context!r} is not a "
                           "directory inside the project")
    cf = inside(app_dir, d.containerfile)
    if cf is None or not cf.is_file() or ctx not in cf.parents:
        raise AppPlanError(app.name, f"app {app.name}: deploy.containerfile "
                           f"{d.containerfile!r} is not a file of the build context "
                           f"({d.context or 'the project root'}); its path is relative to "
                           "the app's directory")
    try:
        args = resolve_app_env(app.name, d.build_args, platform_all={}, platform_app={},
                               vault=vault, app_dir=app_dir, project_dir=project.dir,
                               fingerprint=fingerprint)
    except MissingVaultKeys as e:
        raise AppPlanError(app.name, f"{e} (deploy.build_args)") from None
    rel = cf.relative_to(ctx).as_posix()
    tag = build_tag(slug, app.name, tree_of(ctx), rel,
                    {k: s.fingerprint for k, s in args.items()})
    return ImageBuild(app.name, str(ctx), rel, tag, {k: s.reveal() for k, s in args.items()},
                      labels={"svc.project": slug, "svc.app": app.name})


def _static_roles(app: LoadedApp, project: Project, env: dict[str, str],
                  port: int) -> list[Role]:
    d = app.config.deploy
    assert d is not None and d.static is not None
    app_dir = app.dir if app.dir.is_absolute() else project.dir / app.dir
    site = inside(app_dir, d.static.dir)
    if site is None or site == app_dir.resolve():
        raise AppPlanError(app.name, f"app {app.name}: deploy.static.dir {d.static.dir!r} "
                           "must be a directory below the app's directory")
    roles: list[Role] = []
    if d.static.build:
        roles.append(Role(name=f"{APP_PREFIX}{app.name}.build", kind="app",
                          argv=("sh", "-c", d.static.build), env=dict(env), oneshot=True,
                          timeout_secs=STATIC_BUILD_SECS, cwd=str(app_dir)))
    roles.append(Role(name=APP_PREFIX + app.name, kind="app",
                      argv=(sys.executable, "-m", "cloud.staticsite", str(site)),
                      env=dict(env), health_url=f"http://127.0.0.1:{port}/",
                      ready=lambda status, _body: status < 500,
                      timeout_secs=max(30.0, float(d.timeout)), cwd=str(app_dir),
                      url=f"http://127.0.0.1:{port}"))
    return roles


def plan_app_roles(project: Project, *, deployment: str, base_env: Mapping[str, str],
                   platform: Mapping[str, Mapping[str, Secret]],
                   vault: Mapping[str, Secret], fingerprint: Callable[[str], str],
                   no_containers: str | None = None, slug: str = "",
                   tree_of: Callable[[Path], str] | None = None) -> list[Role]:
    """The roles of the project's cloud-scope apps in start order; AppPlanError naming the
    app when one cannot be run. ``no_containers``: why this platform cannot run a container
    app's image (no daemon answers), or None when it can. ``tree_of``: what identifies a
    directory's content (the git tree of a checkout), for the tags of built images."""
    try:
        chosen = order(project.apps.values(), "cloud")
    except AppFailed as e:
        raise AppPlanError(e.app, f"app {e.app}: {e.reason}") from None
    roles: list[Role] = []
    for app in chosen:
        try:
            resolved = resolve_app_env(
                app.name, app.config.env, platform_all=platform.get("", {}),
                platform_app=platform.get(app.name, {}), vault=vault, app_dir=app.dir,
                project_dir=project.dir, fingerprint=fingerprint)
        except MissingVaultKeys as e:
            raise AppPlanError(app.name, str(e)) from None
        env = {**base_env, **{k: s.reveal() for k, s in resolved.items()},
               RUN_ENV: deployment}
        port = free_port() if app_port(app.config) is not None else None
        if port is not None:
            env["PORT"] = str(port)
        deploy = app.config.deploy
        if deploy is not None and deploy.static is not None:
            if port is None:  # a container app's file names no port: it still needs one
                port = free_port()
                env["PORT"] = str(port)
            roles += _static_roles(app, project, env, port)
            continue
        built = None
        if builds_image(app.config):
            if no_containers is not None:
                raise AppPlanError(app.name, f"app {app.name}: building its image (deploy."
                                   f"containerfile) needs a Docker daemon: {no_containers}")
            built = _built_image(app, project, slug=slug, vault=vault,
                                 fingerprint=fingerprint,
                                 tree_of=tree_of or (lambda p: str(p)))
        image = built.tag if built is not None else \
            app.config.image if runs_image(app.config, "cloud") else None
        if image is not None:
            if no_containers is not None:
                raise AppPlanError(app.name, f"app {app.name}: a container app (image "
                                   f"{image}) needs a Docker daemon: {no_containers}")
            app_dir = app.dir if app.dir.is_absolute() else project.dir / app.dir
            cmd = Command(app.name, tuple(app.config.args or ()), app_dir,
                          container_env(env), app_health(app.config), ())
        else:
            try:
                cmd = app_command(app, "cloud", env=env, project_dir=project.dir)
            except AppFailed as e:
                raise AppPlanError(app.name, f"app {e.app}: {e.reason}") from None
        check = cmd.health
        health_url = (f"http://127.0.0.1:{port}{check.path}"
                      if check.kind == "http" and port is not None else None)
        timeout = check.interval * check.retries if health_url else 60.0
        deploy_timeout = app.config.deploy.timeout if app.config.deploy else None
        if deploy_timeout and health_url:
            # the file's own start budget (spec: `deploy.timeout`) when longer
            timeout = max(timeout, float(deploy_timeout))
        res = app.config.deploy.resources if app.config.deploy is not None else None
        roles.append(Role(name=APP_PREFIX + app.name, kind="app", argv=cmd.argv,
                          env=dict(cmd.env), health_url=health_url, timeout_secs=timeout,
                          cwd=app.config.workdir if image is not None else str(cmd.cwd),
                          url=f"http://127.0.0.1:{port}" if port is not None else None,
                          image=image, build=built,
                          entrypoint=("/bin/sh", "-c", deploy.cmd)
                          if built is not None and deploy is not None and deploy.cmd
                          else None,
                          volumes=tuple(container_volumes(app.config, cmd.cwd, project.dir))
                          if image is not None else (),
                          memory_mb=res.memory if res is not None and image else None,
                          cpus=float(res.vcpus) if res is not None and image else None))
    return roles


def describe(roles: list[Role]) -> list[str]:
    """Deploy-log lines for the planned apps (commands by their program only: an argv may
    carry a value from the environment)."""
    out: list[str] = []
    for r in roles:
        prog = r.argv[0].rsplit("/", 1)[-1] if r.argv else "?"
        ready = (f"ready when GET {r.health_url} answers"
                 + (" 200" if r.ready is None else " below 500")) if r.health_url else \
            f"ready once running {SETTLE_SECS:g}s"
        if "cloud.staticsite" in r.argv:
            prog = "a static site"
        what = (f"container of the image built from {r.build.containerfile} ({r.image})"
                if r.build else f"container of image {r.image}" if r.image
                else f"{prog} in its directory")
        if r.oneshot:
            ready = "done when it exits 0"
        out.append(f"app {r.name[len(APP_PREFIX):]}: {what}; {ready}")
    return out


def role_app(role: Role) -> str | None:
    return role.name[len(APP_PREFIX):] if role.kind == "app" else None
