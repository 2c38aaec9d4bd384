"""The outbox job retry policy and texts (`ssp.jobs`, `scheduler.pools`): which answers are retried and after
how long (`backoff_ms` x 2^(n-1), capped at 30 s, or the backend's Retry-After), the URL of a
call, error entries and results as written to the row, secrets kept out of every text."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import unquote, urlsplit

from ipc.backoff import delay
from jobs.tables import JobTable
from maintenance.backends import MASK  # one mask text for every secret the SSP outputs

DEFAULT_MAX_RETRIES = 3
ERROR_TEXT_MAX = 500
RESULT_TEXT_MAX = 65_536
RETRIED_4XX = frozenset({408, 425, 429})  # request timeout, too early, too many requests
RETRY_AFTER_MAX_SECS = 300.0


def backoff_secs(base_ms: int, attempt: int) -> float:
    """Wait before retry number `attempt` (1, 2, ...): base, 2x, 4x... capped at 30 s."""
    return delay(attempt, base_ms / 1000, cap=30.0)


def retried(status: int) -> bool:
    """Whether a non-2xx answer is worth another attempt: 5xx, 408, 425, 429 (see above)."""
    return status >= 500 or status in RETRIED_4XX


def retry_after_secs(value: str | None, now: datetime | None = None) -> float | None:
    """A `Retry-After` header (delta-seconds or an HTTP date) in seconds, capped; None when
    absent or unreadable."""
    text = (value or "").strip()
    if not text:
        return None
    try:
        secs = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        secs = (when - (now or datetime.now(UTC))).total_seconds()
    if math.isnan(secs):
        return None
    return min(max(secs, 0.0), RETRY_AFTER_MAX_SECS)


def secrets_of(spec: JobTable) -> tuple[str, ...]:
    """What error texts must never show: the token and a password in `base_url`."""
    out = [spec.auth_token] if spec.auth_token else []
    password = urlsplit(spec.base_url).password
    if password:
        out += [password, unquote(password)]
    return tuple(sorted({x for x in out if x}, key=len, reverse=True))


def redact(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        text = text.replace(secret, MASK)
    return text


class JobPathError(ValueError):
    """A row's `path` would leave the backend's base path (the job fails, never retried)."""


def job_url(base_url: str, path: Any) -> str:
    """`base_url` + the row's `path` (one slash between them).

    The backend's bearer goes with every call, so the path must stay under the base path:
    JobPathError for a `.` or `..` segment (also percent-encoded, or with a backslash, which
    some servers read as a slash), a `//` that an HTTP client may take for a new authority,
    or a control character."""
    p = str(path or "")
    if not p:
        return base_url
    rel = p.lstrip("/")
    head = rel.split("?", 1)[0].split("#", 1)[0]
    if any(ord(c) < 0x20 or c == "\x7f" for c in p):
        raise JobPathError("the job path holds a control character")
    decoded = unquote(unquote(head)).replace("\\", "/")
    if any(seg in (".", "..") for seg in decoded.split("/")) or "//" in decoded:
        raise JobPathError(f"the job path {p[:120]!r} leaves the backend's base path "
                           "(a . or .. segment, or //): refused")
    return base_url.rstrip("/") + "/" + rel


def row_timeout(v: Any) -> float | None:
    """A row's own `timeout_secs` (a workflow step's `timeout`), when it is a positive number:
    it replaces the table's `timeout_secs` for that job's calls."""
    if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 86_400:
        return float(v)
    return None


def row_max_retries(v: Any) -> int:
    """A row's own `max_retries` when it is a non-negative integer, else the default (3)."""
    if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
        return v
    return DEFAULT_MAX_RETRIES


def error_entry(kind: str, message: str, *, attempt: int, status: int | None = None
           ) -> dict[str, Any]:
    """One `errors` entry; written with `jobs.rows.ERROR_ENTRY`, which stores a missing status
    as null."""
    return {"at": datetime.now(UTC), "attempt": attempt, "kind": kind, "status": status,
            "error": message}


def parse_result(text: str) -> Any:
    """A 2xx answer's text as the row's `result`: its JSON, `{}` when empty, else
    `{"text": ...}` (capped)."""
    if not text.strip():
        return {}
    try:
        return json.loads(text)
    except ValueError:
        return {"text": text[:RESULT_TEXT_MAX]}
