"""The engine's calls to the job plane: asking an SSP to admit a job's table now (a poke, so
a step does not wait for the SSP's own poll) and killing jobs (the pending ones failed in the
database, the processing ones flagged and the kill broadcast). Both are best effort and run
in the background: the database rows stay the truth the follower reads."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from surrealdb import RecordID

from dbclient import Database, DbError
from engine.values import record_id_text
from jobs import rows as jobrows

log = logging.getLogger("scheduler.workflows")

__all__ = ["JobCalls"]


class JobCalls:
    """`job_plane` gives the scheduler's job plane (or None); `wake` is set once a kill went
    out (the loop reads the killed jobs at once)."""

    def __init__(self, db: Database, job_plane: Callable[[], Any], wake: asyncio.Event) -> None:
        self.db = db
        self._job_plane = job_plane
        self._wake = wake
        self._poking: dict[str, bool] = {}
        self._bg: set[asyncio.Task[Any]] = set()

    def tasks(self) -> list[asyncio.Task[Any]]:
        """The calls still under way (stopped with the engine)."""
        return list(self._bg)

    def _spawn(self, coro: Awaitable[Any], name: str) -> None:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)

    def poke(self, job: RecordID) -> None:
        """Ask an SSP to admit the job's table now (one request per table at a time; a poke
        arriving meanwhile makes it ask again once the first is answered)."""
        table = job.table_name
        if table in self._poking:
            self._poking[table] = True
            return
        self._poking[table] = False
        self._spawn(self._poke_loop(job), f"poke-{table}")

    async def _poke_loop(self, job: RecordID) -> None:
        table = job.table_name
        try:
            while True:
                plane = self._job_plane()
                if plane is not None:
                    try:
                        out = await plane.dispatch(record_id_text(job), table)
                        if out and out[0] != 200:
                            log.info("dispatch of %s answered %s", record_id_text(job), out[0])
                    except Exception as e:  # noqa: BLE001 - a poke is best effort
                        log.info("dispatch of %s failed: %s", record_id_text(job), e)
                if not self._poking.get(table):
                    return
                self._poking[table] = False
        finally:
            self._poking.pop(table, None)

    def kill(self, jobs: list[RecordID]) -> None:
        if jobs:
            self._spawn(self._kill(jobs), "kill-jobs")

    async def _kill(self, jobs: list[RecordID]) -> None:
        """Fail the pending ones outright (no SSP has them), flag the processing ones (the
        owner sees the flag at its next lease renewal) and broadcast the kill (the owner
        cancels the call at once)."""
        for job in jobs:
            try:
                await self.db.query(
                    f"{jobrows.fail_pending('NONE')}; {jobrows.FLAG_PROCESSING_KILL}",
                    {"j": job, "kind": "killed", "text": "killed"})
            except DbError as e:
                log.warning("kill of %s: flagging failed: %s", record_id_text(job), e)
            plane = self._job_plane()
            if plane is not None:
                try:
                    await plane.kill(record_id_text(job))
                except Exception as e:  # noqa: BLE001 - the flag above still stops it
                    log.info("kill broadcast of %s failed: %s", record_id_text(job), e)
        self._wake.set()
