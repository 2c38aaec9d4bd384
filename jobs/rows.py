"""The SurrealQL of a job row, written once for every runner (see the package docstring).

Each function answers a statement and its parameters (`Statement`), run by the caller with
`Database.query_one` (or put in a transaction: workflows). A row's life:

    pending --claim--> processing --complete-----------------> completed
                                  --fail---------------------> failed
                                  --retry_later--------------> pending (after a backoff: pools)
                                  --hand_back, recover_expired-> pending
    completed, failed --reset_terminal--> pending

Every write after the claim is conditional on `assignee` = the runner and status
`processing` (`owned`): a runner that lost its lease never overwrites the new owner's
outcome.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

Statement = tuple[str, dict[str, Any]]

# One `errors` entry, always the same keys: a Python None travels as NONE, which would drop
# `status` from the object, so a missing status is written as NULL (`$e`: policy.error_entry).
ERROR_ENTRY = ("{ at: $e.at, attempt: $e.attempt, kind: $e.kind, status: $e.status ?? NULL, "
               "error: $e.error }")
# The entry of a job the scheduler fails itself before any attempt (`$kind`, `$text`).
SCHEDULER_ERROR_ENTRY = ("{ at: time::now(), attempt: 0, kind: $kind, status: NULL, "
                         "error: $text }")
# A pending row may wait for its retry's backoff (`not_before`, written by the pools).
_RUNNABLE = "(not_before = NONE OR not_before <= time::now())"
_COMPLETED = ("status = 'completed', result = $r, attempts = $n, "
              "finished_at = time::now(), lease_until = NONE")
_FAILED = (f"status = 'failed', errors += {ERROR_ENTRY}, attempts = $n, "
           "finished_at = time::now(), lease_until = NONE")


def _lease(lease_secs: float) -> str:
    return f"time::now() + {int(lease_secs * 1000)}ms"


# ---------------------------------------------------------------------------- claim


def oldest_pending(table: str, limit: int, *, runnable: bool = False) -> str:
    """The ids of a table's oldest pending rows (`runnable`: whose backoff has passed)."""
    where = f"status = 'pending' AND {_RUNNABLE}" if runnable else "status = 'pending'"
    return f"SELECT id, created_at FROM {table} WHERE {where} ORDER BY created_at, id LIMIT {limit}"


def count_runnable(table: str) -> str:
    """How many pending rows of a table may run now (`[{n}]`, empty when none)."""
    return (f"SELECT count() AS n FROM {table} WHERE status = 'pending' AND {_RUNNABLE} "
            "GROUP ALL")


def claim(ids: Any, me: str, lease_secs: float, *, clear_backoff: bool = False) -> Statement:
    """Claim the rows of `ids` still pending for `me` (RETURN AFTER: the rows won)."""
    backoff = ", not_before = NONE" if clear_backoff else ""
    return ("UPDATE $ids SET status = 'processing', assignee = $me, "
            f"lease_until = {_lease(lease_secs)}, "
            f"started_at = time::now(), attempts = attempts OR 0{backoff} "
            "WHERE status = 'pending' RETURN AFTER", {"ids": ids, "me": me})


def renew(ids: Any, me: str, lease_secs: float) -> Statement:
    """Renew the lease of `me`'s processing rows among `ids` (a record or a list): the rows
    still `me`'s, with their `kill_requested`."""
    return (f"UPDATE $ids SET lease_until = {_lease(lease_secs)} "
            "WHERE status = 'processing' AND assignee = $me RETURN id, kill_requested",
            {"ids": ids, "me": me})


# ---------------------------------------------------------------------------- outcome


def owned(rid: Any, me: str, sets: str, params: Mapping[str, Any]) -> Statement:
    """`SET sets` on `me`'s processing row (RETURN id: empty when no longer `me`'s)."""
    return (f"UPDATE $id SET {sets} WHERE status = 'processing' AND assignee = $me RETURN id",
            {"id": rid, "me": me, **params})


def complete(rid: Any, me: str, result: Any, attempts: int) -> Statement:
    return owned(rid, me, _COMPLETED, {"r": result, "n": attempts})


def fail(rid: Any, me: str, error: dict[str, Any], attempts: int) -> Statement:
    return owned(rid, me, _FAILED, {"e": error, "n": attempts})


def note_error(rid: Any, me: str, error: dict[str, Any], attempts: int) -> Statement:
    """A failed attempt the runner retries itself (the row stays `me`'s)."""
    return owned(rid, me, f"errors += {ERROR_ENTRY}, attempts = $n", {"e": error, "n": attempts})


def retry_later(rid: Any, me: str, error: dict[str, Any], attempts: int, wait_secs: float
                ) -> Statement:
    """A failed attempt retried by whoever claims the row after `wait_secs` (pools)."""
    return owned(rid, me, f"status = 'pending', errors += {ERROR_ENTRY}, attempts = $n, "
                 "assignee = NONE, lease_until = NONE, "
                 f"not_before = time::now() + {int(wait_secs * 1000)}ms",
                 {"e": error, "n": attempts})


# ---------------------------------------------------------------------------- hand back


def hand_back(rid: Any, me: str, *, recovered: bool = True) -> Statement:
    """`me`'s processing row back to pending (`recovered`: stamp `recovered_at`)."""
    stamp = ", recovered_at = time::now()" if recovered else ""
    return ("UPDATE $id SET status = 'pending', assignee = NONE, lease_until = NONE"
            f"{stamp} WHERE status = 'processing' AND assignee = $me RETURN id",
            {"id": rid, "me": me})


def hand_back_all(table: str, me: str) -> Statement:
    """Every processing row of `table` held by `me` back to pending."""
    return (f"UPDATE {table} SET status = 'pending', assignee = NONE, lease_until = NONE, "
            "recovered_at = time::now() WHERE status = 'processing' AND assignee = $me "
            "RETURN id", {"me": me})


def recover_expired(table: str) -> str:
    """Processing rows of `table` whose lease expired (their runner died or hung) back to
    pending."""
    return (f"UPDATE {table} SET status = 'pending', assignee = NONE, lease_until = NONE, "
            "recovered_at = time::now() WHERE status = 'processing' AND "
            "lease_until < time::now() RETURN id")


# ---------------------------------------------------------------------------- operations


def read(rid: Any, *fields: str) -> Statement:
    """Some fields of one row (None when there is no such row)."""
    return (f"SELECT {', '.join(fields)} FROM ONLY $id", {"id": rid})


def status(rid: Any) -> Statement:
    return read(rid, "status")


def flag_kill(rid: Any) -> Statement:
    """Flag a live row (pending or processing): whoever claims it fails it at once, its
    owner cancels at the next lease renewal (RETURN status)."""
    return ("UPDATE $id SET kill_requested = true WHERE status IN ['pending', 'processing'] "
            "RETURN status", {"id": rid})


def fail_pending_killed(rid: Any, error: dict[str, Any]) -> Statement:
    """A pending row failed by a kill (nobody runs it; RETURN id)."""
    return (f"UPDATE $id SET status = 'failed', errors += {ERROR_ENTRY}, "
            "finished_at = time::now(), kill_requested = true WHERE status = 'pending' "
            "RETURN id", {"id": rid, "e": error})


def flag_processing_kill(rid: Any) -> Statement:
    """Flag a processing row: its owner cancels at the next lease renewal (RETURN status,
    assignee)."""
    return ("UPDATE $id SET kill_requested = true WHERE status = 'processing' "
            "RETURN status, assignee", {"id": rid})


def fail_pending(returning: str) -> str:
    """The scheduler fails the pending row `$j` itself (a kill, a job never claimed), with
    an entry of `$kind` and `$text` (SCHEDULER_ERROR_ENTRY); flagged killed so a runner
    that read it pending never runs it."""
    return ("UPDATE $j SET status = 'failed', kill_requested = true, "
            f"finished_at = time::now(), errors += {SCHEDULER_ERROR_ENTRY} WHERE status = "
            f"'pending' RETURN {returning}")


#: Flag the processing row `$j` killed (its owner cancels at the next lease renewal).
FLAG_PROCESSING_KILL = ("UPDATE $j SET kill_requested = true WHERE status = 'processing' "
                        "RETURN NONE")


def reset_terminal(rid: Any, *, clear_backoff: bool = False) -> Statement:
    """A completed or failed row back to pending for a retry (errors kept, attempts reset;
    RETURN id: empty when the row is not terminal)."""
    backoff = "not_before = NONE, " if clear_backoff else ""
    return ("UPDATE $id SET status = 'pending', assignee = NONE, lease_until = NONE, "
            "kill_requested = NONE, attempts = 0, result = NONE, finished_at = NONE, "
            f"{backoff}retried_at = time::now() "
            "WHERE status IN ['completed', 'failed'] RETURN id", {"id": rid})


def new_row(spec: Mapping[str, Any], created_at: datetime, **links: Any) -> dict[str, Any]:
    """The content of a new pending row for a job spec (`path`, `payload`, `retries`,
    `timeout`: a workflow step's or a schedule's), with the links given (None ones left
    out)."""
    c: dict[str, Any] = {"status": "pending", "path": spec.get("path") or "/",
                         "payload": spec.get("payload") or {},
                         "max_retries": int(spec.get("retries", 3)), "created_at": created_at}
    if spec.get("timeout"):
        c["timeout_secs"] = float(spec["timeout"])
    c.update({k: v for k, v in links.items() if v is not None})
    return c
