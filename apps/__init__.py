"""Running a project's apps (the `project.yml` apps' `dev` commands, or `deploy.cmd` in the
cloud scope) as supervised local processes: `svc dev` uses it, and so does the platform's
local executor.

The public interface (stable; everything else in the package is internal):

- :class:`Supervisor` -- ``Supervisor(apps, *, workdir, env=None, scope="dev", sink=None,
  base_env=None, health=None, before=(), log_lines=1000, grace=5.0)`` or
  ``Supervisor.for_project(project, scope, env=None, ...)``; ``await start()``,
  ``await stop()``, ``status() -> list[AppStatus]``,
  ``logs(app=None, *, limit, level, text, since, after) -> (lines, truncated)``,
  ``await wait_exit() -> list[AppStatus]``, ``names``.
- :class:`AppFailed` -- the one error: ``.app``, ``.reason``, ``.tail`` (last log lines),
  ``report()``.
- :class:`AppStatus`, :class:`LogLine`, :class:`HealthCheck`, :class:`Command` -- values.
- :func:`resolve_env` -- each app's inline and dotenv variables for a scope (no vault);
  :func:`vault_keys` -- what an app asks of the vault; :func:`order` -- the apps of a scope in
  start order; :func:`group_members` -- the live processes of a process group (for counting
  what is left); :func:`sweep` -- kill what is left of a run (``Supervisor(run_id=...)``,
  every process's ``SVC_APPS_RUN``) after its supervisor was killed outright;
  :func:`marked` -- the live processes of a run; :func:`descendants`, :func:`alive` -- the
  live processes under a pid, which of some pids still live (counting orphans in tests).

Decisions where the spec is open are in :mod:`apps.plan` and the README ("Running the apps").
"""

from apps.model import AppFailed, AppStatus, Command, HealthCheck, LogLine, Scope
from apps.plan import order, resolve_env, vault_keys
from apps.procgroup import alive, descendants, group_members, marked, sweep
from apps.supervisor import Supervisor

__all__ = ["AppFailed", "AppStatus", "Command", "HealthCheck", "LogLine", "Scope",
           "Supervisor", "alive", "descendants", "group_members", "marked", "order",
           "resolve_env", "sweep", "vault_keys"]
