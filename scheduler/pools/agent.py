"""The pool agent: one machine of a machine pool (``python -m scheduler.pools.agent``).

Started by a provider with ``SVC_POOL_URL`` (the pool listener), ``SVC_POOL_MACHINE_ID``,
``SVC_POOL_TOKEN`` (never logged), ``SVC_POOL_SLOTS`` and ``SVC_POOL_HEARTBEAT_MS``. It
registers, then runs three loops until told to stop:

* heartbeat: reports the jobs it runs; cancels the ones the scheduler names (killed, or no
  longer this machine's); learns it must drain;
* take: while it has free slots and is not draining, asks for at most that many jobs (a long
  poll) and runs each: ``POST url`` with the payload and headers it was given, redirects not
  followed, bounded by ``timeout_secs``; the raw answer (status, body, ``Retry-After``) or the
  failure (``timeout``, ``unreachable``, ``killed``) goes back as the result, which the
  scheduler classifies and writes;
* drain: no new jobs; once the running ones reported, ``drained`` and exit 0.

Exit: 0 after a drain, a SIGTERM (running calls are abandoned; the scheduler hands their rows
back), or when the scheduler says the machine was removed (410); 3 when the pool listener
cannot be reached for ``SVC_POOL_ORPHAN_SECS`` (60): an orphan left by a scheduler that died.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from typing import Any

import aiohttp

log = logging.getLogger("pool-agent")

BODY_MAX = 65_536


class Removed(Exception):
    """The scheduler answered 410 or 404: this machine is gone; exit."""


class Agent:
    def __init__(self, url: str, machine_id: str, token: str, slots: int, heartbeat_ms: int,
                 orphan_secs: float) -> None:
        self.base = f"{url.rstrip('/')}/pool/v1/machines/{machine_id}"
        self.machine_id = machine_id
        self.auth = {"Authorization": f"Bearer {token}"}
        self.slots = slots
        self.heartbeat_secs = heartbeat_ms / 1000
        self.orphan_secs = orphan_secs
        self.running: dict[str, asyncio.Task[None]] = {}
        self.killing: set[str] = set()
        self.draining = False
        self.freed = asyncio.Event()
        self.done = asyncio.Event()
        self.exit_code = 0
        self.last_ok = time.monotonic()
        self.session: aiohttp.ClientSession | None = None
        self.calls: aiohttp.ClientSession | None = None

    async def _post(self, action: str, body: dict[str, Any], timeout: float = 10.0
                    ) -> dict[str, Any] | None:
        """The listener's answer; None when it could not be reached or answered 5xx/409."""
        assert self.session is not None
        try:
            async with self.session.post(f"{self.base}/{action}", json=body, headers=self.auth,
                                         timeout=aiohttp.ClientTimeout(total=timeout)) as r:
                doc = await r.json(content_type=None)
                if r.status in (404, 410):
                    raise Removed(str((doc or {}).get("message") or r.status))
                if r.status == 401:
                    raise Removed("the scheduler refused this machine's token")
                self.last_ok = time.monotonic()
                return doc if r.status == 200 else None
        except (aiohttp.ClientError, TimeoutError, ValueError) as e:
            if time.monotonic() - self.last_ok > self.orphan_secs:
                log.error("the pool listener is unreachable for %ss: exiting", self.orphan_secs)
                self.exit_code = 3
                self.done.set()
            log.warning("%s failed: %s", action, type(e).__name__)
            return None

    async def run(self) -> int:
        self.session = aiohttp.ClientSession()
        self.calls = aiohttp.ClientSession()
        try:
            while (await self._post("register", {"version": "1"})) is None:
                if self.done.is_set():
                    return self.exit_code
                await asyncio.sleep(0.2)
            log.info("registered as %s (%d slots)", self.machine_id, self.slots)
            loops = [asyncio.create_task(self._guard(self._heartbeats())),
                     asyncio.create_task(self._guard(self._takes()))]
            await self.done.wait()
            for t in loops:
                t.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
            for t in self.running.values():
                t.cancel()
            await asyncio.gather(*self.running.values(), return_exceptions=True)
            return self.exit_code
        except Removed as e:
            log.info("the scheduler removed this machine (%s): exiting", e)
            return 0
        finally:
            await self.session.close()
            await self.calls.close()

    async def _guard(self, coro: Any) -> None:
        try:
            await coro
        except Removed as e:
            log.info("the scheduler removed this machine (%s): exiting", e)
            self.done.set()

    async def _heartbeats(self) -> None:
        while not self.done.is_set():
            doc = await self._post("heartbeat", {"running": sorted(self.running)})
            if doc is not None:
                if doc.get("drain") and not self.draining:
                    log.info("drain: finishing %d jobs, taking no new ones", len(self.running))
                    self.draining = True
                    self.freed.set()
                for job_id in doc.get("cancel") or []:
                    task = self.running.get(job_id)
                    if task is not None:
                        log.info("job %s: cancelled by the scheduler", job_id)
                        self.killing.add(job_id)
                        task.cancel()
            await asyncio.sleep(self.heartbeat_secs)

    async def _takes(self) -> None:
        while not self.done.is_set():
            if self.draining:
                if not self.running:
                    await self._post("drained", {})
                    log.info("drained: exiting")
                    self.done.set()
                    return
                self.freed.clear()
                await self.freed.wait()
                continue
            free = self.slots - len(self.running)
            if free <= 0:
                self.freed.clear()
                await self.freed.wait()
                continue
            doc = await self._post("take", {"max": free, "wait_ms": 2000}, timeout=15.0)
            if doc is None:
                await asyncio.sleep(0.5)
                continue
            if doc.get("drain"):
                self.draining = True
            for job in doc.get("jobs") or []:
                self.running[job["id"]] = asyncio.create_task(self._job(job))

    async def _job(self, job: dict[str, Any]) -> None:
        job_id = job["id"]
        try:
            outcome = await self._call(job)
        except asyncio.CancelledError:
            if job_id not in self.killing:
                raise  # shutting down: the scheduler hands the row back
            outcome = {"error_kind": "killed", "error": "killed"}
        try:
            await self._report(job_id, outcome)
        finally:
            self.killing.discard(job_id)
            self.running.pop(job_id, None)
            self.freed.set()

    async def _call(self, job: dict[str, Any]) -> dict[str, Any]:
        assert self.calls is not None
        try:
            async with self.calls.post(
                    job["url"], json=job.get("payload"), headers=job.get("headers") or {},
                    allow_redirects=False,
                    timeout=aiohttp.ClientTimeout(total=float(job.get("timeout_secs") or 10))
            ) as r:
                text = (await r.content.read(BODY_MAX)).decode(errors="replace")
                return {"status": r.status, "body": text,
                        "retry_after": r.headers.get("Retry-After")}
        except TimeoutError:
            return {"error_kind": "timeout", "error": "timed out"}
        except aiohttp.ClientError as e:
            return {"error_kind": "unreachable", "error": f"{type(e).__name__}: {e}"[:300]}

    async def _report(self, job_id: str, outcome: dict[str, Any]) -> None:
        """Until the scheduler took it (or refused it for good: not this machine's)."""
        assert self.session is not None
        body = {"job_id": job_id, **outcome}
        while not self.done.is_set():
            try:
                async with self.session.post(f"{self.base}/result", json=body,
                                             headers=self.auth,
                                             timeout=aiohttp.ClientTimeout(total=10)) as r:
                    if r.status in (200, 409):
                        self.last_ok = time.monotonic()
                        return
                    if r.status in (404, 410):
                        self.done.set()
                        return
            except (aiohttp.ClientError, TimeoutError):
                pass
            await asyncio.sleep(0.5)


def main() -> int:
    logging.basicConfig(level=os.environ.get("SVC_LOG_LEVEL", "INFO").upper(),
                        format="%(asctime)s %(levelname)s pool-agent: %(message)s",
                        stream=sys.stderr)
    env = os.environ
    try:
        agent = Agent(env["SVC_POOL_URL"], env["SVC_POOL_MACHINE_ID"], env["SVC_POOL_TOKEN"],
                      int(env.get("SVC_POOL_SLOTS", "1")),
                      int(env.get("SVC_POOL_HEARTBEAT_MS", "1000")),
                      float(env.get("SVC_POOL_ORPHAN_SECS", "60")))
    except (KeyError, ValueError) as e:
        print(f"pool-agent: missing or bad setting: {e}", file=sys.stderr)
        return 2

    async def run() -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, agent.done.set)
        return await agent.run()

    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
