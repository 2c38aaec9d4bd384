"""The Docker executor: each role instance of a deployment is a container of the Docker
Engine, driven through the ``docker`` SDK (``SVC_CLOUD_EXECUTOR=docker``).

Choices (cloud/README.md, "Executors"):

- **Network.** Every container joins the host's network (``network_mode=host``): the roles
  find each other on the loopback ports the reconcile worker picked, exactly as local
  processes do, and a daemon started with ``--bridge=none --iptables=false`` (no bridge, no
  NAT rules) serves them.
- **Image.** No registry is reachable, so nothing is pulled. The default image,
  ``svc-hostroot:1``, is imported the first time it is missing from a tarball made here
  with no file in it (a few KB: the host's ``/bin -> usr/bin``-style symlinks and empty
  mount points; ``docker import``): a container of it sees the host's system directories,
  the platform's Python and its code through read-only bind mounts, and its own working
  directory (the deployment's) read-write. The container isolates the
  process (its own pid namespace, cgroup limits, a private ``/tmp``) without a second copy
  of the runtime. ``SVC_CLOUD_DOCKER_IMAGE`` names another image (it must exist locally and
  hold the same paths).
- **Limits and labels.** Memory and CPUs per container (``SVC_CLOUD_DOCKER_MEMORY_MB``,
  ``SVC_CLOUD_DOCKER_CPUS``, or a role's own from ``project.yml``'s ``deploy.resources``);
  labels ``svc.platform``, ``svc.project``, ``svc.deployment``, ``svc.role``,
  ``svc.instance`` on every container: orphans are found by label, not by memory.
- **Crash safety.** A container outlives the process that started it (the daemon owns it).
  Each executor labels its containers with a random ``svc.epoch`` and, before its first
  container, starts a watcher (``cloud.dockerwatch``) that the kernel signals when the
  executor's process dies, even by ``kill -9``: it removes the containers of that epoch, so
  a platform (or a ``svc dev`` container app) killed and never restarted leaves none behind.
  Should the watcher itself be killed, a platform restarted later still removes every
  container labelled with its ``svc.platform`` (:meth:`DockerExecutor.sweep`) before it
  resumes anything, besides the per-instance :meth:`DockerExecutor.reap` of what the store
  recorded.
- **Logs.** Two following log streams per container (stdout, stderr) read in threads, each
  line handed to the worker's sink on its event loop: the same bounded per-instance storage
  as local processes.

The SDK is blocking; every call runs in a thread (``asyncio.to_thread``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import logging
import math
import os
import secrets
import signal
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cloud.executor import ExecutorError, Handle, LocalExecutor, LogSink, Role, probe_health
from cloud.imagebuild import BuildStop, ImageBuild, build_image, prune_builds
from ipc.envvars import env_int
from ipc.lifeline import lifeline_argv

log = logging.getLogger("cloud.docker")

__all__ = ["DEFAULT_IMAGE", "DockerExecutor", "DockerSettings", "LocalWithContainers",
           "host_mounts", "hostroot_tarball", "import_hostroot_image"]

DEFAULT_IMAGE = "svc-hostroot:1"
LABEL = "svc."
#: host directories a container of the host-root image sees read-only (those that exist)
_SYSTEM_DIRS = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc")
_CODE_ROOT = str(Path(__file__).resolve().parent.parent)
#: connections kept to the daemon: every container holds two following log streams, and
#: past the pool's size each finished request's connection is dropped with a warning
_POOL = 128


@dataclass(frozen=True)
class DockerSettings:
    """What ``SVC_CLOUD_EXECUTOR=docker`` reads (``cloud.config``)."""

    #: the daemon; empty: the SDK's own default (``DOCKER_HOST``, else the local socket)
    host: str = ""
    image: str = DEFAULT_IMAGE
    memory_mb: int = 2048
    cpus: float = 1.0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> DockerSettings:
        """ValueError naming the variable for a value that cannot be used."""
        raw_cpus = env.get("SVC_CLOUD_DOCKER_CPUS", "").strip()
        try:
            cpus = float(raw_cpus) if raw_cpus else 1.0
        except ValueError:
            cpus = math.nan
        if not (math.isfinite(cpus) and 0.01 <= cpus <= 1024):
            raise ValueError("SVC_CLOUD_DOCKER_CPUS must be a number of CPUs between 0.01 and "
                             f"1024, got {raw_cpus[:20]!r}")
        return cls(host=env.get("SVC_CLOUD_DOCKER_HOST", "").strip()
                   or env.get("DOCKER_HOST", "").strip(),
                   image=env.get("SVC_CLOUD_DOCKER_IMAGE", "").strip() or DEFAULT_IMAGE,
                   memory_mb=env_int(env, "SVC_CLOUD_DOCKER_MEMORY_MB", 2048, minimum=64),
                   cpus=cpus)


def host_mounts(extra_ro: Iterable[str] = ()) -> list[str]:
    """Read-only bind mounts (``src:dst:ro``) that let a container of the host-root image run
    the platform's own Python and code: the system directories that are directories here
    (a merged ``/usr``'s ``/bin``, ``/lib``... are symlinks inside the image), the
    interpreter's prefixes, the code root. Nested paths are left out (their parent is
    mounted). ``/sbin`` stays the image's own: the daemon puts its init there."""
    want = [d for d in _SYSTEM_DIRS if d != "/sbin" and not os.path.islink(d)]
    want += [sys.base_prefix, sys.prefix, _CODE_ROOT,
             str(Path(sys.executable).resolve().parent.parent), *extra_ro]
    real = sorted({os.path.realpath(p) for p in want if p and os.path.exists(p)})
    kept: list[str] = []
    for p in real:
        if not any(p == k or p.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(p)
    return [f"{p}:{p}:ro" for p in kept]


def hostroot_tarball() -> bytes:
    """The image's whole content: the host's top-level symlinks of a merged ``/usr``
    (``/bin -> usr/bin``...) and empty mount points; no file."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in _SYSTEM_DIRS:
            info = tarfile.TarInfo(d.lstrip("/"))
            if d != "/sbin" and os.path.islink(d):
                info.type, info.linkname = tarfile.SYMTYPE, os.readlink(d)
            else:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for d in ("tmp", "proc", "sys", "dev", "root", "run"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
    return buf.getvalue()


def import_hostroot_image(client: Any, ref: str = DEFAULT_IMAGE) -> None:
    """``docker import`` of :func:`hostroot_tarball` as ``ref`` (no registry, nothing
    downloaded)."""
    repo, _, tag = ref.rpartition(":") if ":" in ref else (ref, "", "latest")
    client.api.import_image_from_data(hostroot_tarball(), repository=repo or ref,
                                      tag=tag or "latest")


def _errors() -> Any:
    import docker.errors

    return docker.errors


class DockerExecutor:
    """Role instances as containers; see the module docstring."""

    name = "docker"

    def __init__(self, settings: DockerSettings, platform: str,
                 client: Any | None = None) -> None:
        self.settings = settings
        self.platform = platform
        self._client = client
        self._pumps: dict[str, list[threading.Thread]] = {}
        self._image_ready = False
        #: labels this executor's containers only (its watcher removes them when it dies)
        self.epoch = secrets.token_hex(8)
        self._watcher: subprocess.Popen[bytes] | None = None

    def _watch(self) -> None:
        """Start the containers' lifeline once (see the module docstring). From the calling
        thread, which must live as long as the process: the kernel's parent-death signal
        follows the thread that forked."""
        if self._watcher is not None and self._watcher.poll() is None:
            return
        env = dict(os.environ)
        if self.settings.host:
            env["DOCKER_HOST"] = self.settings.host
        self._watcher = subprocess.Popen(
            lifeline_argv([sys.executable, "-m", "cloud.dockerwatch",
                           f"{LABEL}epoch={self.epoch}"], sig=signal.SIGTERM),
            env=env, stdin=subprocess.DEVNULL, start_new_session=True)

    # ------------------------------------------------------------------ the daemon
    @property
    def reached(self) -> bool:
        """A daemon answered this executor since it was made."""
        return self._client is not None

    def client(self) -> Any:
        if self._client is None:
            self._client = self._connect(_POOL)
        return self._client

    def _connect(self, pool: int) -> Any:
        """A new client of the daemon, answering; ExecutorError when none answers."""
        import docker

        try:
            client = (docker.DockerClient(base_url=self.settings.host, timeout=30,
                                          max_pool_size=pool)
                      if self.settings.host else docker.from_env(timeout=30,
                                                                 max_pool_size=pool))
            client.ping()
        except Exception as e:  # noqa: BLE001 - any failure to reach it means the same
            raise ExecutorError(
                "the Docker executor: no Docker daemon answers at "
                f"{self.settings.host or os.environ.get('DOCKER_HOST') or 'the default socket'}"
                f" ({type(e).__name__})") from None
        return client

    def _ensure_image(self) -> None:
        if self._image_ready:
            return
        c = self.client()
        try:
            c.images.get(self.settings.image)
        except _errors().ImageNotFound:
            if self.settings.image != DEFAULT_IMAGE:
                raise ExecutorError(f"the Docker executor: image {self.settings.image!r} is not "
                                    "on the daemon (nothing is pulled)") from None
            import_hostroot_image(c, self.settings.image)
            log.info("imported %s (host-root image, no files)", self.settings.image)
        self._image_ready = True

    def labels(self, role: Role) -> dict[str, str]:
        return {f"{LABEL}platform": self.platform,
                f"{LABEL}project": role.env.get("SVC_CLOUD_PROJECT", ""),
                f"{LABEL}deployment": role.env.get("SVC_CLOUD_DEPLOYMENT", ""),
                f"{LABEL}role": role.name, **role.labels, f"{LABEL}epoch": self.epoch}

    # ------------------------------------------------------------------ the five calls
    async def start(self, role: Role, sink: LogSink,
                    record: Callable[[Handle], Awaitable[None]]) -> Handle:
        loop = asyncio.get_running_loop()
        self._watch()
        container = await asyncio.to_thread(self._run, role)
        handle = Handle(self.name, container["pid"], container["pid"], container["id"])
        self._pumps[handle.ref] = [
            self._pump(handle.ref, stream, lambda s, t: loop.call_soon_threadsafe(sink, s, t))
            for stream in ("stdout", "stderr")]
        try:
            await record(handle)
        except BaseException:
            await self.stop(handle, timeout=2.0)
            raise
        log.info("started %s (container %s)", role.name, handle.ref[:12])
        return handle

    def _run(self, role: Role) -> dict[str, Any]:
        c = self.client()
        if role.image:
            # an app's own image: what it declares, nothing of the host's
            image, volumes = role.image, list(role.volumes)
            try:
                c.images.get(image)
            except _errors().ImageNotFound:
                raise ExecutorError(f"the Docker executor: image {image!r} of {role.name} is "
                                    "not on the daemon (nothing is pulled: docker load or "
                                    "docker import it first)") from None
        else:
            self._ensure_image()
            image, volumes = self.settings.image, host_mounts()
            if role.cwd:
                os.makedirs(role.cwd, exist_ok=True)
                volumes.append(f"{role.cwd}:{role.cwd}:rw")
        mem = role.memory_mb or self.settings.memory_mb
        cpus = role.cpus or self.settings.cpus
        try:
            ct = c.containers.run(
                image, list(role.argv) or None, entrypoint=list(role.entrypoint)
                if role.entrypoint is not None else None, detach=True, network_mode="host",
                environment={**role.env, "PYTHONUNBUFFERED": "1"}, working_dir=role.cwd,
                labels=self.labels(role), volumes=volumes, tmpfs={"/tmp": "rw,size=256m"},
                mem_limit=f"{mem}m", nano_cpus=int(cpus * 1e9), init=True,
                shm_size="256m", stdin_open=False, tty=False)
            ct.reload()
        except _errors().APIError as e:
            raise ExecutorError(f"the Docker executor could not start {role.name}: "
                                f"{getattr(e, 'explanation', None) or e}") from None
        # the worker treats pid 0 as "nothing to stop": a container that already exited has
        # no pid, yet it must be stopped and removed (this executor acts on the id alone)
        return {"id": ct.id, "pid": int(ct.attrs["State"].get("Pid") or 0) or 1}

    def _pump(self, ref: str, stream: str, emit: Callable[[str, str], object]
              ) -> threading.Thread:
        def read() -> None:
            partial = b""
            try:
                ct = self.client().containers.get(ref)
                for chunk in ct.logs(stdout=stream == "stdout", stderr=stream == "stderr",
                                     stream=True, follow=True):
                    partial += chunk
                    *lines, partial = partial.split(b"\n")
                    for line in lines:
                        emit(stream, line.decode("utf-8", "replace"))
                if partial:
                    emit(stream, partial.decode("utf-8", "replace"))
            except Exception as e:  # noqa: BLE001 - a removed container ends its stream
                log.debug("log stream of %s ended: %s", ref[:12], type(e).__name__)

        t = threading.Thread(target=read, name=f"docker-logs-{ref[:12]}-{stream}", daemon=True)
        t.start()
        return t

    def _state(self, ref: str) -> dict[str, Any] | None:
        try:
            ct = self.client().containers.get(ref)
        except _errors().NotFound:
            return None
        return dict(ct.attrs.get("State") or {})

    async def healthy(self, role: Role, handle: Handle, deadline: float) -> str | None:
        while True:
            state = await asyncio.to_thread(self._state, handle.ref)
            if state is None:
                return f"{role.name}: its container is gone"
            if not state.get("Running"):
                code = state.get("ExitCode")
                if role.oneshot and code == 0:
                    # done: the worker forgets a finished step, so its container goes now
                    # (after its output was read), not at the deployment's end
                    await self.stop(handle, timeout=1.0)
                    return None
                why = " (out of memory)" if state.get("OOMKilled") else ""
                return f"{role.name} exited with {code}{why} before it was healthy"
            if not role.oneshot:
                if role.health_url is None:
                    return None
                got = await asyncio.to_thread(probe_health, role.health_url)
                if got is not None and (role.ready(*got) if role.ready else got[0] == 200):
                    return None
            if time.monotonic() > deadline:
                return f"{role.name} was not healthy within {role.timeout_secs:.0f}s"
            await asyncio.sleep(0.2)

    async def alive(self, handle: Handle) -> bool:
        state = await asyncio.to_thread(self._state, handle.ref)
        return bool(state and state.get("Running"))

    async def stop(self, handle: Handle, timeout: float = 15.0) -> int | None:
        code = await asyncio.to_thread(self._remove, handle.ref, timeout)
        for t in self._pumps.pop(handle.ref, []):
            await asyncio.to_thread(t.join, 2.0)
        return code

    def _remove(self, ref: str, timeout: float) -> int | None:
        """Stop (SIGTERM, SIGKILL after ``timeout``), read the exit code, remove."""
        try:
            ct = self.client().containers.get(ref)
        except _errors().NotFound:
            return None
        with contextlib.suppress(_errors().APIError):
            ct.stop(timeout=max(1, int(timeout)))
        code = None
        with contextlib.suppress(_errors().APIError):
            ct.reload()
            code = ct.attrs["State"].get("ExitCode")
        with contextlib.suppress(_errors().NotFound):
            ct.remove(force=True)
        return int(code) if code is not None else None

    async def reap(self, handle: Handle) -> bool:
        if handle.executor != self.name or not handle.ref:
            return False
        state = await asyncio.to_thread(self._state, handle.ref)
        if state is None:
            return False
        await asyncio.to_thread(self._remove, handle.ref, 5.0)
        return bool(state.get("Running"))

    async def no_containers(self) -> str | None:
        """Why this executor cannot run a container now (no daemon answers), or None."""
        try:
            await asyncio.to_thread(self.client)
        except ExecutorError as e:
            return str(e)
        return None

    async def build(self, spec: ImageBuild, emit: Callable[[str], None]) -> bool:
        """``cloud.imagebuild.build_image`` in a thread, each line handed to ``emit`` on the
        caller's loop. The executor's own image is made first (imported when missing), so a
        Containerfile can start ``FROM`` it without anything downloaded."""
        loop = asyncio.get_running_loop()
        await asyncio.to_thread(self._ensure_image)
        # a client of its own: a cancel stops the build by cutting its connection
        # (cloud.imagebuild.BuildStop), which must not be one the other calls share
        client = await asyncio.to_thread(self._connect, 2)
        stop = BuildStop()
        # this platform's label: old images are pruned by it (prune_images), never another's
        spec = dataclasses.replace(spec, labels={**spec.labels, f"{LABEL}platform": self.platform})

        def hand_over(line: str) -> None:
            loop.call_soon_threadsafe(emit, line)
        running = asyncio.ensure_future(asyncio.to_thread(build_image, client, spec,
                                                          hand_over, stop))
        try:
            return await asyncio.shield(running)
        except asyncio.CancelledError:
            # the deployment was cancelled: stop the build on the daemon and wait for its
            # thread to see it, so nothing of the build runs on once this returns
            stop.stop()
            while not running.done():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait([running])
            if not running.cancelled():
                running.exception()  # BuildCancelled, as expected: the cancel goes on
            raise
        finally:
            client.close()

    async def prune_images(self, project: str, keep: Collection[str]) -> list[str]:
        """Remove the images this platform built for ``project`` that are not in ``keep``
        (``cloud.imagebuild.prune_builds``); the tags removed. A refusal (an image in use)
        is logged, never raised: old images must not fail a deployment that runs."""
        labels = {f"{LABEL}platform": self.platform, f"{LABEL}project": project}
        removed, refused = await asyncio.to_thread(prune_builds, self.client(), labels, keep)
        for why in refused:
            log.warning("old image not removed: %s", why)
        return removed

    async def release(self) -> int:
        """Remove the containers of this executor's epoch that are still there: what its
        watcher would remove once this process is gone, done before the process ends, so a
        clean stop leaves nothing behind even for a container whose start was never
        recorded (a relaunch cancelled by the stop while the daemon created it)."""
        if not self.reached:
            return 0  # never reached a daemon: nothing of ours can be there

        def run() -> list[str]:
            api = self.client().api
            found = api.containers(all=True, filters={"label": f"{LABEL}epoch={self.epoch}"})
            for entry in found:
                with contextlib.suppress(_errors().NotFound):
                    api.remove_container(entry["Id"], force=True)
            return [f"{(e.get('Labels') or {}).get(LABEL + 'role', '?')} "
                    f"({(e.get('Labels') or {}).get(LABEL + 'instance', '?')}, "
                    f"{e.get('State', '?')})" for e in found]

        gone = await asyncio.to_thread(run)
        if gone:
            log.warning("removed %d container(s) at the stop that no instance record held: %s",
                        len(gone), ", ".join(gone))
        return len(gone)

    async def sweep(self) -> int:
        """Remove every container of this platform (by its ``svc.platform`` label): called
        once at start, before anything of this process runs, so whatever is found was left by
        a predecessor (recorded or not: a crash between the daemon's start and the record)."""
        def run() -> int:
            api = self.client().api
            found = api.containers(all=True,
                                   filters={"label": f"{LABEL}platform={self.platform}"})
            for entry in found:
                with contextlib.suppress(_errors().NotFound):
                    api.remove_container(entry["Id"], force=True)
            return len(found)

        n = await asyncio.to_thread(run)
        if n:
            log.warning("removed %d container(s) left by an earlier run of this platform", n)
        return n


class LocalWithContainers:
    """The local executor, with a ``project.yml`` container app's image (a role with
    ``image``) run on a Docker daemon by a :class:`DockerExecutor` of the same platform label
    (so its containers carry the same labels, limits and lifeline as the Docker executor's).
    Calls on a handle go to the executor that made it. The daemon is only contacted for a
    container: a platform without one runs everything else as before, and a deployment with
    a container app fails before anything starts (the worker asks :meth:`no_containers`)."""

    name = "local"

    def __init__(self, local: LocalExecutor, containers: DockerExecutor) -> None:
        self.local = local
        self.containers = containers

    def _of(self, handle: Handle) -> LocalExecutor | DockerExecutor:
        return self.containers if handle.executor == self.containers.name else self.local

    async def start(self, role: Role, sink: LogSink,
                    record: Callable[[Handle], Awaitable[None]]) -> Handle:
        ex = self.containers if role.image else self.local
        return await ex.start(role, sink, record)

    async def healthy(self, role: Role, handle: Handle, deadline: float) -> str | None:
        return await self._of(handle).healthy(role, handle, deadline)

    async def alive(self, handle: Handle) -> bool:
        return await self._of(handle).alive(handle)

    async def stop(self, handle: Handle, timeout: float = 15.0) -> int | None:
        return await self._of(handle).stop(handle, timeout)

    async def reap(self, handle: Handle) -> bool:
        return await self._of(handle).reap(handle)

    async def sweep(self) -> int:
        n = await self.local.sweep()
        if self.containers.settings.host or os.environ.get("DOCKER_HOST") \
                or os.path.exists("/var/run/docker.sock"):
            try:
                n += await self.containers.sweep()
            except ExecutorError:
                pass  # no daemon now: none of its containers can be running either
        return n

    async def no_containers(self) -> str | None:
        return await self.containers.no_containers()

    async def release(self) -> int:
        return await self.containers.release()

    async def build(self, spec: ImageBuild, emit: Callable[[str], None]) -> bool:
        return await self.containers.build(spec, emit)

    async def prune_images(self, project: str, keep: Collection[str]) -> list[str]:
        if not self.containers.reached:
            return []  # never reached a daemon in this run: it built nothing to prune
        return await self.containers.prune_images(project, keep)
