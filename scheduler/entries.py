"""The scheduler's shared types and constants: SSP entries and their states, the events on
their way to the SSPs (`Outbound`), the core's answers (`Reply`)."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from engine import wire
from engine.values import RecordID, parse_record_id
from ipc.routebodies import INGEST_BATCH_MAX

# Events per POST /ingest to an SSP: the SSP's batched /ingest takes 1 to INGEST_BATCH_MAX
# (ipc.routebodies); `bootstrap_chunk_size` may lower it, never raise it (scheduler.config).
BATCH_MAX = INGEST_BATCH_MAX
_BACKOFF_MIN = 0.05
_BACKOFF_MAX = 2.0


class SspState(str, Enum):
    """Scheduler-side SSP states."""

    BOOTSTRAPPING = "bootstrapping"
    REPLAYING = "replaying"
    READY = "ready"
    LAGGING = "lagging"  # Ready, but more than max_buffer_per_ssp events wait to be sent


# A Lagging SSP keeps its queue (the spec forces a re-bootstrap only for Bootstrapping and
# Replaying SSPs); past this many times the buffer limit it is re-bootstrapped anyway, so one
# SSP that heartbeats but never takes events cannot grow the scheduler's memory without end.
LAGGING_HARD_LIMIT_FACTOR = 10


class SchedulerBusy(Exception):
    """The scheduler cannot take this now (state cloning): a 503 with ``message``."""


@dataclass
class Reply:
    """An HTTP answer decided by the core: status and JSON body, or raw bytes relayed."""

    status: int
    body: Any = None
    raw: bytes | None = None
    content_type: str = "application/json"


@dataclass(eq=False, slots=True)
class Outbound:
    """One event on its way to the SSPs (``seq`` its WAL sequence number), shared by every
    SSP's queue: packed in the typed encoding on first use, once for all of them."""

    seq: int
    event: dict[str, Any]
    packed: bytes | None = None

    def wire(self) -> bytes:
        """The event's typed bytes (``ipc.wire.encode_event``; TypeError when a value has
        no typed form, which the WAL's own encoding would have refused first)."""
        if self.packed is None:
            self.packed = wire.encode_event(self.event, self.seq)
        return self.packed


@dataclass(eq=False)
class SspEntry:
    """One registered SSP."""

    ssp_id: str
    url: str
    snapshot_seq: int
    registered_at: float = field(default_factory=time.monotonic)
    state: SspState = SspState.BOOTSTRAPPING
    holds_freeze: bool = True
    last_heartbeat: float | None = None  # monotonic; None until Replaying
    queue: deque[Outbound] = field(default_factory=deque)
    flagged: tuple[str, bool] | None = None  # (reason, clean)
    metrics: dict[str, Any] = field(default_factory=dict)
    sent_seq: int = 0
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    sender: asyncio.Task[None] | None = None
    send_failures: int = 0
    # False once the SSP refused the typed encoding (an older release): JSON from then on.
    typed: bool = True
    # Extra seconds before the reaper removes it: an SSP flagged while it bootstraps sends its
    # first heartbeat only when its bootstrap ends, and that heartbeat must still find the
    # entry to get its 409 (not a 404, which skips the clean wipe).
    reap_grace: float = 0.0
    # What the scheduler sends this SSP: its own derived credential (`ipc.peerauth`), never
    # the shared secret.
    auth: dict[str, str] = field(default_factory=dict, repr=False)
    # Registered with a valid SSP credential (False only without SVC_AUTH_SECRET).
    verified: bool = False
    # When the SSP's URL first answered anything (a health poll); None: not yet.
    answered_at: float | None = None
    # Ready at least once since it registered.
    was_ready: bool = False
    # A warm start (`SspPool.register_ssp`): the SSP holds the rows up to this seq and reads
    # the events after it, up to `snapshot_seq`, from `/ssp/catchup`; None: a cold bootstrap.
    warm_from: int | None = None

    def cpu(self) -> float:
        v = self.metrics.get("cpu_usage")
        return float(v) if isinstance(v, (int, float)) else 0.0

    def mem(self) -> float:
        v = self.metrics.get("memory_usage")
        return float(v) if isinstance(v, (int, float)) else 0.0

    def mem_limit(self) -> float | None:
        """The SSP's reported SVC_SSP_MEMORY_LIMIT_MB (None: an older SSP did not send it)."""
        v = self.metrics.get("memory_limit_mb")
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 \
            else None


def _query_record(event_id: Any) -> RecordID | None:
    """The deleted ``_00_query`` record of an event (``_00_query:abc``), None when unreadable."""
    try:
        return event_id if isinstance(event_id, RecordID) else parse_record_id(str(event_id))
    except ValueError:
        return None
