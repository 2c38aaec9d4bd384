"""Providers: how a pool gets and gives back machines.

A provider boots a machine that runs the pool agent (``scheduler.pools.agent``) pointed at the
pool listener with the machine's id and token, says whether a machine it booted is still
there, and destroys one. The pool service (``service.py``) decides when; a provider only acts.
``boot`` raising :class:`BootError` (or the machine never registering) is a boot failure,
counted by the pool's breaker.

:class:`LocalProvider` starts each agent as a real process on this machine (the venv's
python, ``-m scheduler.pools.agent``, or the pool's ``command``), its own process group, its
output appended to ``pool-agents/<machine>.log`` beside the replica. The token goes through the
environment, never the command line.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Protocol

from scheduler.pools.config import PoolSpec


class BootError(RuntimeError):
    """The provider could not start the machine (the message is shown to operators)."""


class Provider(Protocol):
    def boot(self, pool: PoolSpec, machine_id: str, token: str, pool_url: str,
             heartbeat_ms: int) -> dict[str, Any]:
        """Start a machine; its provider reference (kept with the machine record)."""

    def alive(self, ref: dict[str, Any]) -> bool | None:
        """Whether the machine still exists: True, False (gone), None (cannot tell)."""

    def exit_code(self, ref: dict[str, Any]) -> int | None:
        """How a machine that is gone ended, when known."""

    def destroy(self, ref: dict[str, Any], *, force: bool = False) -> None:
        """Stop the machine (idempotent)."""

    async def stop_all(self, timeout: float = 10.0) -> None:
        """The scheduler stops: end every machine this process started."""


class LocalProvider:
    """Agents as child processes of the scheduler (see the module docstring)."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    def boot(self, pool: PoolSpec, machine_id: str, token: str, pool_url: str,
             heartbeat_ms: int) -> dict[str, Any]:
        argv = list(pool.command or (sys.executable, "-m", "scheduler.pools.agent"))
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SVC_", "OBJSTORE_"))}
        env.update({"SVC_POOL_URL": pool_url, "SVC_POOL_MACHINE_ID": machine_id,
                    "SVC_POOL_TOKEN": token, "SVC_POOL_SLOTS": str(pool.slots),
                    "SVC_POOL_NAME": pool.name, "SVC_POOL_HEARTBEAT_MS": str(heartbeat_ms),
                    "PYTHONUNBUFFERED": "1"})
        self.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            with open(self.log_dir / f"{machine_id}.log", "ab") as out:
                proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                        stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as e:
            raise BootError(f"could not start the agent: {e.strerror or type(e).__name__}") \
                from None
        self.procs[proc.pid] = proc
        return {"provider": "local", "pid": proc.pid}

    def alive(self, ref: dict[str, Any]) -> bool | None:
        pid = ref.get("pid")
        if not isinstance(pid, int):
            return None
        proc = self.procs.get(pid)
        if proc is not None:
            return proc.poll() is None
        # Started by an earlier scheduler process: not our child, ask the kernel.
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def exit_code(self, ref: dict[str, Any]) -> int | None:
        proc = self.procs.get(ref.get("pid") or -1)
        return proc.poll() if proc is not None else None

    def destroy(self, ref: dict[str, Any], *, force: bool = False) -> None:
        pid = ref.get("pid")
        if not isinstance(pid, int):
            return
        proc = self.procs.get(pid)
        if proc is not None and proc.poll() is not None:
            self.procs.pop(pid, None)
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL if force else signal.SIGTERM)

    async def stop_all(self, timeout: float = 10.0) -> None:
        """SIGTERM every agent this process started, wait, then SIGKILL what is left."""
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while any(p.poll() is None for p in self.procs.values()) \
                and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)


def make_provider(kind: str, log_dir: Path) -> Provider:
    if kind == "local":
        return LocalProvider(log_dir)
    raise ValueError(f"unknown provider {kind}")
