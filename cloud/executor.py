"""Executors: what runs a deployment's role instances. Only the reconcile worker
(``cloud.reconcile``) calls one; the API and MCP only write records.

The interface is four calls on one :class:`Role` (a role instance's command, environment,
health URL): :meth:`Executor.start` (returns a :class:`Handle`: pid and process group, or a
container id), :meth:`Executor.healthy`, :meth:`Executor.stop`, and :meth:`Executor.reap` (a
handle recorded in the store by a worker that died: kill what is left of it). Output goes to
a :class:`LogSink` line by line; the worker writes it into bounded storage.

:class:`LocalExecutor` runs each instance as a local process in a session (process group) of
its own, through ``ipc.lifeline`` so it gets SIGTERM when the platform's process dies, even
by ``kill -9``; the group id is recorded in the store before the instance counts as started,
so a platform restarted after a crash kills whatever survived (:meth:`LocalExecutor.reap`).
``cloud.docker_executor`` runs them as containers; a Kubernetes or Nomad executor implements
the same calls (cloud/README.md, "Executors").
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import http.client
import logging
import os
import signal
import socket
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from typing import Protocol

from cloud.imagebuild import ImageBuild
from ipc.lifeline import lifeline_argv

log = logging.getLogger("cloud.executor")

__all__ = ["Executor", "ExecutorError", "Handle", "LocalExecutor", "LogSink", "Role", "free_port",
           "reserve_port",
           "probe_health"]

#: called with (stream, line) for each line an instance writes; stream is stdout or stderr
LogSink = Callable[[str, str], None]


@dataclass(frozen=True)
class Role:
    """One role instance to run: ``name`` is unique within its deployment (``db``,
    ``schema``, ``scheduler``, ``ssp-1``...)."""

    name: str
    kind: str  # db | schema | scheduler | ssp | app
    argv: tuple[str, ...]
    env: dict[str, str] = field(repr=False)
    health_url: str | None = None
    #: a set-up step: healthy means it exited 0
    oneshot: bool = False
    #: healthy when this holds for (status, body) of health_url; default: status 200
    ready: Callable[[int, bytes], bool] | None = None
    timeout_secs: float = 120.0
    cwd: str | None = None
    #: where it answers (for the records and the deploy log)
    url: str | None = None
    #: what identifies it to an executor that keeps labels (the worker adds its instance id)
    labels: dict[str, str] = field(default_factory=dict)
    #: its own limits (``deploy.resources``); None: the executor's defaults
    memory_mb: int | None = None
    cpus: float | None = None
    #: a container image of its own (a ``project.yml`` container app) with its volumes
    #: (``src:dst[:ro|rw]``); executors without containers refuse it
    image: str | None = None
    volumes: tuple[str, ...] = ()
    #: how ``image`` is built from the app's Containerfile (``Executor.build``, in the
    #: deployment's building phase), or None for a prebuilt image
    build: ImageBuild | None = None
    #: replaces the image's entrypoint (``deploy.cmd`` of a built image); None: the image's
    entrypoint: tuple[str, ...] | None = None


class ExecutorError(Exception):
    """An executor cannot do what it was asked (no daemon, no image): the message is the
    deployment's error as it stands."""


@dataclass(frozen=True)
class Handle:
    """What the store records of a started instance: enough to find it after a crash."""

    executor: str
    pid: int
    pgid: int
    ref: str = ""  # a container or allocation id for the executors that have one


class Executor(Protocol):
    name: str

    async def start(self, role: Role, sink: LogSink,
                    record: Callable[[Handle], Awaitable[None]]) -> Handle:
        """Start ``role``; ``record`` is awaited with the handle before this returns (the
        store must know an instance before anything else can fail)."""

    async def healthy(self, role: Role, handle: Handle, deadline: float) -> str | None:
        """Wait until healthy or ``deadline`` (monotonic); ``None`` when healthy, else why
        not (exited, timed out)."""

    async def alive(self, handle: Handle) -> bool:
        """The instance is still running."""

    async def stop(self, handle: Handle, timeout: float = 15.0) -> int | None:
        """Stop it (SIGTERM, then SIGKILL of its group after ``timeout``); its exit code."""

    async def reap(self, handle: Handle) -> bool:
        """Kill what is left of an instance recorded by an earlier process; True if
        something was running."""

    async def no_containers(self) -> str | None:
        """Why a role with a container ``image`` cannot run here now, or None when it can."""

    async def release(self) -> int:
        """At a clean stop, once every recorded instance was stopped: remove whatever this
        executor started that is still there (a start whose record never came); how many."""

    async def build(self, spec: ImageBuild, emit: Callable[[str], None]) -> bool:
        """Build an app's image unless the same inputs were built before (True when built);
        ``emit`` gets the build's lines. ``cloud.imagebuild.BuildFailed`` when it fails,
        ExecutorError when this executor cannot build."""

    async def prune_images(self, project: str, keep: Collection[str]) -> list[str]:
        """Remove the images this executor built for ``project`` (a slug) whose tags are not
        in ``keep``; the tags removed (none for an executor that does not build)."""

    async def sweep(self) -> int:
        """At start, before anything runs: remove whatever an earlier run of this platform
        left that the executor can find by itself (labels); how many."""


#: how long a port this process handed out is not handed out again: a plan probes each of
#: its ports (a stack's database, scheduler, admin, SSPs, its apps) and closes the probe, and
#: the kernel may give the same port to the next probe; the second process to bind it fails
#: (a scheduler exits 3 before it is healthy). Minutes: a role starts within them.
PORT_RESERVE_SECS = 300.0
_handed_out: dict[int, float] = {}  # port -> when (monotonic)


def free_port(host: str = "127.0.0.1") -> int:
    """A loopback TCP port free now and not handed out by this process in the last
    ``PORT_RESERVE_SECS``."""
    now = time.monotonic()
    for p in [p for p, at in _handed_out.items() if now - at > PORT_RESERVE_SECS]:
        del _handed_out[p]
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = int(s.getsockname()[1])
        if port not in _handed_out:
            _handed_out[port] = now
            return port
    raise ExecutorError("no free loopback port that was not just handed out")


def reserve_port(port: int) -> bool:
    """Hand out ``port`` too (a service's next ports, beside the one ``free_port`` gave):
    False when this process handed it out lately."""
    if port in _handed_out:
        return False
    _handed_out[port] = time.monotonic()
    return True


def probe_health(url: str) -> tuple[int, bytes] | None:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as r:
            return int(r.status), r.read()
    except urllib.error.HTTPError as e:
        return int(e.code), e.read()
    except (urllib.error.URLError, OSError, http.client.HTTPException):
        return None


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class LocalExecutor:
    """Local processes (development and the suite); see the module docstring."""

    name = "local"

    def __init__(self) -> None:
        self._procs: dict[int, asyncio.subprocess.Process] = {}
        self._pumps: dict[int, list[asyncio.Task[None]]] = {}

    async def start(self, role: Role, sink: LogSink,
                    record: Callable[[Handle], Awaitable[None]]) -> Handle:
        if role.image:
            raise ExecutorError(f"{role.name}: the local executor runs no container images")
        env = {**role.env, "PYTHONUNBUFFERED": "1"}
        proc = await asyncio.create_subprocess_exec(
            *lifeline_argv(list(role.argv), sig=signal.SIGTERM), env=env, cwd=role.cwd,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, start_new_session=True)
        handle = Handle(self.name, proc.pid, proc.pid)
        self._procs[proc.pid] = proc
        loop = asyncio.get_running_loop()
        assert proc.stdout is not None and proc.stderr is not None
        self._pumps[proc.pid] = [loop.create_task(self._pump(proc.stdout, "stdout", sink)),
                                 loop.create_task(self._pump(proc.stderr, "stderr", sink))]
        try:
            await record(handle)
        except BaseException:
            await self.stop(handle, timeout=2.0)
            raise
        log.info("started %s (pid %d)", role.name, proc.pid)
        return handle

    @staticmethod
    async def _pump(stream: asyncio.StreamReader, name: str, sink: LogSink) -> None:
        while True:
            try:
                line = await stream.readline()
            except ValueError:  # a line over the reader's limit: take what is there
                line = await stream.read(64 * 1024)
            if not line:
                return
            sink(name, line.decode("utf-8", "replace").rstrip("\n"))

    async def healthy(self, role: Role, handle: Handle, deadline: float) -> str | None:
        proc = self._procs.get(handle.pid)
        if proc is None:
            return "not started by this executor"
        while True:
            if proc.returncode is not None:
                if role.oneshot and proc.returncode == 0:
                    return None
                return f"{role.name} exited with {proc.returncode} before it was healthy"
            if role.oneshot:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(proc.wait(), max(0.0, deadline - time.monotonic()))
                    continue
            elif role.health_url is not None:
                got = await asyncio.to_thread(probe_health, role.health_url)
                if got is not None and (role.ready(*got) if role.ready else got[0] == 200):
                    return None
            else:
                return None
            if time.monotonic() > deadline:
                return f"{role.name} was not healthy within {role.timeout_secs:.0f}s"
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 0.2)

    async def alive(self, handle: Handle) -> bool:
        proc = self._procs.get(handle.pid)
        if proc is not None:
            return proc.returncode is None
        return _group_alive(handle.pgid)

    async def stop(self, handle: Handle, timeout: float = 15.0) -> int | None:
        proc = self._procs.pop(handle.pid, None)
        if proc is None:
            await self.reap(handle)
            return None
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), timeout)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        # the exited (unreaped by us: asyncio reaped the leader) group may keep children:
        # whatever it started goes with it
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(handle.pgid, signal.SIGKILL)
        for t in self._pumps.pop(handle.pid, []):
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(t, 2.0)
        return proc.returncode

    async def no_containers(self) -> str | None:
        return "the platform's local executor has no Docker daemon configured"

    async def release(self) -> int:
        # every process runs through ipc.lifeline: none outlives the platform
        return 0

    async def build(self, spec: ImageBuild, emit: Callable[[str], None]) -> bool:
        raise ExecutorError(f"app {spec.app}: building an image needs a Docker daemon: "
                            f"{await self.no_containers()}")

    async def prune_images(self, project: str, keep: Collection[str]) -> list[str]:
        return []  # it builds nothing

    async def sweep(self) -> int:
        # a process carries no label the executor could search by: the recorded groups are
        # reaped one by one (reap), and ipc.lifeline has normally stopped them already
        return 0

    async def reap(self, handle: Handle) -> bool:
        """An instance of a process that died: its group is killed if it still exists.

        A group id is only reused once every member of the group is gone, and a leader that
        outlived its starter is re-parented, so a live group with this id is the one we
        started (the ``ipc.lifeline`` SIGTERM has normally stopped it already)."""
        if handle.executor != self.name or handle.pgid <= 1:
            return False
        if not _group_alive(handle.pgid):
            return False
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(handle.pgid, signal.SIGTERM)
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and _group_alive(handle.pgid):
            await asyncio.sleep(0.05)
        try:
            os.killpg(handle.pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError) as e:
            if getattr(e, "errno", None) not in (errno.ESRCH, errno.EPERM):
                raise
        return True


def python_argv(*module_args: str) -> tuple[str, ...]:
    return (sys.executable, "-m", *module_args)
