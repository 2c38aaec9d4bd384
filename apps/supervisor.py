"""The supervisor: a project's apps as processes, started in `dependsOn` order, each ready
before its dependents start, their output kept in bounded logs, all stopped with nothing left.

Each process runs in a session (so a process group) of its own, wrapped by `ipc.lifeline`
so it receives SIGTERM if the supervisor's process dies however it dies. Stopping signals the
whole group: SIGTERM, then SIGKILL after the grace period, and waits until no live member of
the group is left (a shell's grandchildren included).
"""

from __future__ import annotations

import asyncio
import graphlib
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apps.health import attempt
from apps.logs import LogBook
from apps.model import AppFailed, AppStatus, Command, HealthCheck, LogLine, Scope, State, Stream
from apps.plan import app_command, order, resolve_env
from apps.procgroup import RUN_ENV, stop_group
from ipc.lifeline import lifeline_argv
from project.rootconfig import LoadedApp, Project

__all__ = ["Supervisor", "describe_exit"]

TAIL_LINES = 20
_CHUNK = 65536


def describe_exit(rc: int) -> str:
    if rc < 0:
        try:
            return f"signal {signal.Signals(-rc).name}"
        except ValueError:
            return f"signal {-rc}"
    return f"code {rc}"


@dataclass
class _Proc:
    cmd: Command
    state: State = "pending"
    proc: asyncio.subprocess.Process | None = None
    started_at: float | None = None
    ready_at: float | None = None
    exit_code: int | None = None
    reason: str | None = None
    exited: asyncio.Event = field(default_factory=asyncio.Event)
    log_seen: asyncio.Event = field(default_factory=asyncio.Event)
    readers: list[asyncio.Task[None]] = field(default_factory=list)
    waiter: asyncio.Task[None] | None = None


class Supervisor:
    """Runs the apps of one project.

    `apps`: validated apps (`project.rootconfig.LoadedApp`); those outside `scope` are left
    out. `workdir`: the project's directory (relative app directories are under it, and its
    `.venv` is a python app's interpreter of last resort). `env`: app name -> its resolved
    variables (`apps.plan.resolve_env` locally; the platform's resolution with the vault in the
    cloud), laid over `base_env` (default: this process's environment). `sink`: called with
    every log line as it is read. `health`: app name -> a readiness check replacing the one
    the app's file implies. `before`: processes started before every app (`svc dev`'s local
    stack). `log_lines`: the ring's size per app. `grace`: seconds between SIGTERM and SIGKILL.
    `run_id`: put in every process's environment as `SVC_APPS_RUN` (default: a random id), so
    `apps.sweep(run_id)` finds what is left of the run if this process is killed outright.

    Raises AppFailed at once for an app that cannot be run here (no dev command, a node script
    that is not there, a container without a Docker daemon, a dependency out of scope)."""

    def __init__(self, apps: Iterable[LoadedApp], *, workdir: Path,
                 env: Mapping[str, Mapping[str, str]] | None = None, scope: Scope = "dev",
                 sink: Callable[[LogLine], None] | None = None,
                 base_env: Mapping[str, str] | None = None,
                 health: Mapping[str, HealthCheck] | None = None,
                 before: Sequence[Command] = (), log_lines: int = 1000,
                 grace: float = 5.0, run_id: str | None = None) -> None:
        self.scope = scope
        self.grace = grace
        self.run_id = run_id or uuid.uuid4().hex
        self._book = LogBook(log_lines, sink)
        base = dict(os.environ if base_env is None else base_env)
        env = env or {}
        cmds: list[Command] = list(before)
        first = tuple(c.name for c in before)
        for app in order(apps, scope):
            if app.name in first:
                raise AppFailed(app.name, "has the name of a process started before the apps")
            cmd = app_command(app, scope, env={**base, **env.get(app.name, {})},
                              project_dir=workdir)
            if health and app.name in health:
                cmd = Command(cmd.name, cmd.argv, cmd.cwd, cmd.env, health[app.name],
                              cmd.depends_on)
            cmds.append(Command(cmd.name, cmd.argv, cmd.cwd, cmd.env, cmd.health,
                                first + cmd.depends_on))
        self._procs: dict[str, _Proc] = {c.name: _Proc(c) for c in cmds}
        self._spawned: list[str] = []  # start order, for stopping in reverse
        self._any_exit = asyncio.Event()
        self._started = False
        self._stopping = False

    @classmethod
    def for_project(cls, project: Project, scope: Scope = "dev", *,
                    env: Mapping[str, Mapping[str, str]] | None = None,
                    **kwargs: Any) -> Supervisor:
        """The apps of a loaded project; `env` defaults to what `apps.plan.resolve_env`
        reads for `scope` (inline maps and dotenv files)."""
        return cls(project.apps.values(), workdir=project.dir, scope=scope,
                   env=resolve_env(project, scope) if env is None else env,
                   **kwargs)

    # ------------------------------------------------------------------ public

    @property
    def names(self) -> list[str]:
        """The processes it runs, in start order (dependencies first)."""
        return list(self._procs)

    async def start(self) -> None:
        """Start everything in dependency order; independent apps start together. Returns when
        every app is ready. On the first failure (a health check that never passes, an exit
        before everything is up, a process that cannot be spawned) everything started is
        stopped and AppFailed raised. Cancelling it stops what it started too."""
        if self._started:
            raise RuntimeError("a supervisor starts once")
        self._started = True
        sorter = graphlib.TopologicalSorter(
            {n: set(p.cmd.depends_on) for n, p in self._procs.items()})
        sorter.prepare()
        bringing: dict[asyncio.Task[Any], str] = {}
        exit_watch = asyncio.create_task(self._any_exit.wait())
        try:
            while sorter.is_active():
                for name in sorter.get_ready():
                    bringing[asyncio.create_task(self._bring_up(name))] = name
                done, _ = await asyncio.wait([*bringing, exit_watch],
                                             return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    if task is exit_watch:
                        raise self._first_exit()
                for task in done:
                    name = bringing.pop(task)
                    task.result()
                    sorter.done(name)
        except BaseException:
            for task in bringing:
                task.cancel()
            await asyncio.gather(*bringing, return_exceptions=True)
            await self.stop()
            raise
        finally:
            exit_watch.cancel()

    async def stop(self) -> None:
        """Stop every process, dependents first: SIGTERM to its group, SIGKILL after `grace`;
        returns once no live process of any group is left. Idempotent."""
        self._stopping = True
        for name in reversed(self._spawned):
            p = self._procs[name]
            assert p.proc is not None
            if p.state in ("starting", "ready"):
                p.state = "stopping"
            clean = await stop_group(p.proc.pid, self.grace)
            if not clean:
                self._note(name, f"did not stop within {self.grace:g}s of SIGTERM: killed",
                           "warn")
            if p.waiter is not None:
                await p.waiter
        self._spawned.clear()

    def status(self) -> list[AppStatus]:
        return [AppStatus(n, p.state, p.proc.pid if p.proc else None, p.started_at,
                          p.ready_at, p.exit_code, p.reason) for n, p in self._procs.items()]

    def logs(self, app: str | None = None, *, limit: int = 200, level: str | None = None,
             text: str | None = None, since: float | None = None, after: int | None = None
             ) -> tuple[list[LogLine], bool]:
        """See `apps.logs.LogBook.read`. KeyError for an app it does not run."""
        if app is not None and app not in self._procs:
            raise KeyError(app)
        return self._book.read(app, limit=limit, level=level, text=text, since=since,
                               after=after)

    async def wait_exit(self) -> list[AppStatus]:
        """Return once any process has exited on its own (not stopped by `stop`): the
        statuses of those that have."""
        await self._any_exit.wait()
        return [s for s in self.status() if s.state in ("exited", "failed")]

    # ------------------------------------------------------------------ internals

    def _note(self, name: str, text: str, level: str = "info") -> None:
        self._book.add(name, "supervisor", text, level)

    def _failed(self, p: _Proc, reason: str) -> AppFailed:
        return AppFailed(p.cmd.name, reason, self._book.tail(p.cmd.name, TAIL_LINES))

    def _first_exit(self) -> AppFailed:
        for p in self._procs.values():
            if p.exit_code is not None:
                return self._failed(p, p.reason or "exited")
        return AppFailed("?", "a process exited")  # not reached: the event follows an exit

    async def _spawn(self, p: _Proc) -> None:
        cmd = p.cmd
        p.state = "starting"
        try:
            p.proc = await asyncio.create_subprocess_exec(
                *lifeline_argv(cmd.argv, sig=signal.SIGTERM), cwd=cmd.cwd,
                env={**cmd.env, RUN_ENV: self.run_id},
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, start_new_session=True)
        except OSError as e:
            p.state = "failed"
            p.reason = f"cannot start: {e.strerror or e}"
            raise self._failed(p, p.reason) from None
        self._spawned.append(cmd.name)
        p.started_at = time.time()
        assert p.proc.stdout is not None and p.proc.stderr is not None
        p.readers = [asyncio.create_task(self._read(p, "stdout", p.proc.stdout)),
                     asyncio.create_task(self._read(p, "stderr", p.proc.stderr))]
        p.waiter = asyncio.create_task(self._wait(p))
        self._note(cmd.name, f"started (pid {p.proc.pid}); ready when: "
                   f"{cmd.health.describe()}")

    async def _read(self, p: _Proc, stream: Stream, reader: asyncio.StreamReader) -> None:
        pending = b""
        pattern = p.cmd.health.pattern if p.cmd.health.kind == "log" else None
        while True:
            chunk = await reader.read(_CHUNK)
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            if len(pending) > _CHUNK:  # a line without end: kept in pieces
                lines.append(pending)
                pending = b""
            for raw in lines:
                text = raw.decode("utf-8", "replace")
                self._book.add(p.cmd.name, stream, text)
                if pattern is not None and pattern in text:
                    p.log_seen.set()
        if pending:
            self._book.add(p.cmd.name, stream, pending.decode("utf-8", "replace"))

    async def _wait(self, p: _Proc) -> None:
        assert p.proc is not None
        rc = await p.proc.wait()
        # the last lines (a traceback) before the exit is reported; a grandchild still
        # holding the pipes must not hold the report back for long
        await asyncio.wait(p.readers, timeout=1.0)
        p.exit_code = rc
        if p.state == "failed":
            pass  # its health check failed: the stop that followed does not hide that
        elif p.state == "stopping" or self._stopping:
            p.state = "stopped"
            self._note(p.cmd.name, f"stopped ({describe_exit(rc)})")
        else:
            was = p.state
            p.state = "failed" if was == "starting" else "exited"
            p.reason = (f"exited with {describe_exit(rc)} before it was ready"
                        if was == "starting" else f"exited with {describe_exit(rc)}")
            self._note(p.cmd.name, p.reason, "error")
            self._any_exit.set()
        p.exited.set()

    async def _wait_exit_for(self, p: _Proc, seconds: float) -> bool:
        """Wait up to `seconds` for the process to exit; True when it did."""
        try:
            await asyncio.wait_for(p.exited.wait(), seconds)
        except TimeoutError:
            return False
        return True

    async def _bring_up(self, name: str) -> None:
        p = self._procs[name]
        await self._spawn(p)
        check = p.cmd.health
        if check.kind == "none":
            self._ready(p)
            return
        loop = asyncio.get_running_loop()
        began = loop.time()
        if check.kind == "log":
            budget = check.interval * check.retries
            seen = asyncio.create_task(p.log_seen.wait())
            gone = asyncio.create_task(p.exited.wait())
            try:
                await asyncio.wait([seen, gone], timeout=budget,
                                   return_when=asyncio.FIRST_COMPLETED)
            finally:
                seen.cancel()
                gone.cancel()
            if p.log_seen.is_set():
                self._ready(p)
                return
            if p.exited.is_set():
                raise self._failed(p, p.reason or "exited")
            raise self._failed(p, f"not ready within {budget:g}s: no {check.describe()}")
        last = "not tried"
        for _ in range(check.retries):
            if p.exited.is_set():
                raise self._failed(p, p.reason or "exited")
            outcome = await attempt(check, p.cmd.cwd, p.cmd.env)
            if outcome is None:
                self._ready(p)
                return
            last = outcome
            if await self._wait_exit_for(p, check.interval):
                raise self._failed(p, p.reason or "exited")
        reason = (f"health check failed: {check.describe()} did not pass in {check.retries} "
                  f"attempts over {loop.time() - began:.1f}s (last: {last})")
        p.state = "failed"
        p.reason = reason
        self._note(name, reason, "error")
        raise self._failed(p, reason)

    def _ready(self, p: _Proc) -> None:
        p.state = "ready"
        p.ready_at = time.time()
        self._note(p.cmd.name, "ready")
