"""Scheduler mode: the job runner's status changes reported to the scheduler's
`POST /job/result` (`ResultReporter`, a bounded queue and a few senders)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from typing import Any

import aiohttp

from engine.jsonvalues import to_json as jsonable

log = logging.getLogger("ssp.jobs")

REPORTS_QUEUED = 10_000
REPORT_SENDERS = 4
REPORT_TIMEOUT_SECS = 5.0


class ResultReporter:
    """Scheduler mode: job status changes -> the scheduler's `POST /job/result`.

    The latest status per job waits in `queued` (a newer one replaces it); `REPORT_SENDERS`
    tasks post them, never two of one job at once, so a job's statuses arrive in order."""

    def __init__(self, url: str, auth_secret: str | None) -> None:
        self.url = url.rstrip("/") + "/job/result"
        self.headers = {"Authorization": f"Bearer {auth_secret}"} if auth_secret else {}
        self.queued: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.sending: set[str] = set()
        self.ready = asyncio.Event()
        self.stats = {"sent": 0, "failed": 0, "dropped": 0}
        self._tasks: list[asyncio.Task[None]] = []

    def report(self, job_id: str, status: str, *, result: Any = None,
               error: str | None = None) -> None:
        body: dict[str, Any] = {"job_id": job_id, "status": status}
        if result is not None:
            body["result"] = result if isinstance(result, dict) else {"value": result}
        if error is not None:
            body["error"] = error
        self.queued[job_id] = body
        self.queued.move_to_end(job_id)
        while len(self.queued) > REPORTS_QUEUED:
            self.queued.popitem(last=False)
            self.stats["dropped"] += 1
        self.ready.set()

    def start(self, session: aiohttp.ClientSession) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._sender(session), name=f"job-results-{i}")
                       for i in range(REPORT_SENDERS)]

    async def stop(self, session: aiohttp.ClientSession, timeout: float = 2.0) -> None:
        """Send what is queued (bounded by `timeout`), then stop the senders."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while self.queued or self.sending:
                    await asyncio.sleep(0.02)
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _next(self) -> dict[str, Any] | None:
        for job_id in self.queued:
            if job_id not in self.sending:
                self.sending.add(job_id)
                return self.queued.pop(job_id)
        return None

    async def _sender(self, session: aiohttp.ClientSession) -> None:
        while True:
            body = self._next()
            if body is None:
                self.ready.clear()
                await self.ready.wait()
                continue
            try:
                async with session.post(self.url, json=jsonable(body), headers=self.headers,
                                        timeout=aiohttp.ClientTimeout(total=REPORT_TIMEOUT_SECS)
                                        ) as resp:
                    await resp.read()
                    ok = resp.status == 200
                if not ok:
                    log.warning("job result %s for %s: the scheduler answered %d",
                                body["status"], body["job_id"], resp.status)
            except (aiohttp.ClientError, TimeoutError) as e:
                ok = False
                log.warning("job result %s for %s not delivered: %s", body["status"],
                            body["job_id"], type(e).__name__)
            finally:
                self.sending.discard(body["job_id"])
                if self.queued:
                    self.ready.set()  # this job's newer status may be waiting
            self.stats["sent" if ok else "failed"] += 1
