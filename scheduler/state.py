"""`CoordinatorState`, what the coordinator's components share: the WAL and the replica, the SSP
entries, the view tracker, the publication cursor, the HTTP session to the SSPs and the
background tasks. The components (`scheduler.roster`, `scheduler.placement`,
`scheduler.delivery`, `scheduler.ssppool`, `scheduler.status`) each take it and the few peers
they call; `scheduler.core.Scheduler`, the composition root, builds them."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

import aiohttp

from dbclient import Database
from dbclient.fieldtypes import FieldTypes
from ipc.peerauth import SCHEDULER, PeerKeys
from scheduler.config import SchedulerConfig
from scheduler.entries import SspEntry
from scheduler.incidents import IncidentStore
from scheduler.replica import Replica
from scheduler.views import ViewTracker
from scheduler.wal import GroupCommitter, Wal
from timetext.timestamps import parse_timestamp

log = logging.getLogger("scheduler")
P = ParamSpec("P")
T = TypeVar("T")


class CoordinatorState:
    """The coordinator's files, entries and counters (see the module docstring)."""

    def __init__(self, cfg: SchedulerConfig, db: Database | None) -> None:
        self.cfg = cfg
        # cloning | ready | restoring (scheduler.core)
        self.state = "cloning"
        self.started = time.monotonic()
        self.db = db if db is not None else Database(cfg.db)
        self.replica = Replica.open(cfg.replica_db_path)
        # For rows that arrive as JSON (/ingest).
        self.field_types = FieldTypes(self.db, parse_datetime=parse_timestamp)
        self.wal = Wal.open(cfg.wal_path, min_next_seq=self.replica.applied_seq + 1)
        self.committer = GroupCommitter(self.wal)
        self.tracker = ViewTracker(cfg.replica_db_path.parent / "views.sqlite",
                                   clear=cfg.clear_views_on_start)
        self.entries: dict[str, SspEntry] = {}
        self.progress: dict[str, dict[str, Any]] = {}
        self.extra_health: dict[str, Callable[[], dict[str, Any]]] = {}
        # Jobs dispatched and not finished (the job plane replaces it when wired).
        self.running_jobs: Callable[[], int] = lambda: 0
        self.extra_snapshot: dict[str, Callable[[], dict[str, Any]]] = {}
        self.after_drain: list[Callable[[], Awaitable[None]]] = []
        self.ssp_events: list[Callable[[str, str, str], None]] = []
        self.incidents = IncidentStore(
            cfg.data_dir, source=cfg.scheduler_id,
            secrets=(cfg.auth_secret or "", cfg.db.password or "", cfg.admin.password or ""))
        self.ingested = 0
        self.dropped_batches = 0
        self.last_clone: dict[str, Any] | None = None
        # The backup plane (scheduler.backups): while set, the state is Restoring (ingest,
        # reclone and SSP registration answer 503; the changefeed tail is stopped).
        self.restore_hold: str | None = None
        # The next seq to hand to the SSP queues, and the committed events waiting for the
        # ones before them (scheduler.delivery).
        self.next_pub = self.wal.last_seq + 1
        self.pending: dict[int, dict[str, Any]] = {}
        # Held while the WAL is applied to the replica, and while a registration freezes it.
        self.drain_lock = asyncio.Lock()
        # The thread every WAL fold and replay into the replica runs on (`in_replica_thread`).
        self.replica_thread = ThreadPoolExecutor(1, thread_name_prefix="replica")
        # The round-robin placement's turn (scheduler.placement).
        self.rr_turn = 0
        self.tasks: set[asyncio.Task[Any]] = set()
        self.session: aiohttp.ClientSession | None = None
        # Credentials of the hops to and from the SSPs (`ipc.peerauth`); None without a secret.
        self.peer_keys = PeerKeys(cfg.auth_secret) if cfg.auth_secret else None
        # Which replica the sequence numbers belong to: a new random text at every clone
        # (start-up on a new replica, reclone, restore), kept in the clone marker. An SSP's
        # snapshot of another epoch, or one older than the WAL's first event, starts cold.
        self.epoch = ""

    def peer_auth(self, ssp_id: str) -> dict[str, str]:
        """The Authorization header the scheduler sends SSP ``ssp_id``: the credential derived
        for that SSP alone (any bearer passes an SSP without a secret)."""
        token = "scheduler" if self.peer_keys is None else self.peer_keys.issue(SCHEDULER, ssp_id)
        return {"Authorization": f"Bearer {token}"}

    def spawn(self, coro: Awaitable[Any], name: str) -> None:
        """Run ``coro`` in the background; its failure is logged, ``close`` cancels it."""
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self.tasks.add(task)
        task.add_done_callback(self.task_done)

    def task_done(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task %s failed", task.get_name(), exc_info=task.exception())

    async def in_replica_thread(self, fn: Callable[P, T], *args: P.args,
                                **kwargs: P.kwargs) -> T:
        """Run `fn` on the replica's own thread. Why one thread and not `asyncio.to_thread`:
        glibc gives each thread that allocates its own malloc arena and keeps what an arena
        once held. The fold's parts, run on whichever default-pool threads the WAL appends
        left idle, each grew another thread's arena to a fold's working set: the scheduler
        stepped up ~8 MB of thread arenas at a soak's first fold, and later folds grew
        further arenas (`loadtests/probe_fold_threads.py`: over 4 folds the pool's arenas
        went 7.1 -> 11.1 MB, one thread's stayed at 6.5 MB)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.replica_thread, lambda: fn(*args, **kwargs))

    def apply_wal(self, events: Iterable[tuple[int, Mapping[str, Any]]] | None = None
                  ) -> int:
        """Apply the WAL (or ``events``, a part of its replay) to the replica and truncate it
        (blocking: run in a thread, under ``drain_lock``); returns the events it read."""
        res = self.replica.apply(self.wal.replay(self.replica.applied_seq)
                                 if events is None else events)
        for seq, why in res.rejected[:20]:
            log.warning("replica rejected WAL event %d: %s", seq, why)
        # Absorbed events are kept for `wal_retain_events` more: a restarting SSP that holds
        # the rows up to a position inside them is sent only the events after it.
        self.wal.truncate_through(self.replica.applied_seq - self.cfg.wal_retain_events)
        return res.applied + res.stale + res.already + len(res.rejected)
