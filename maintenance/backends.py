"""Backend health list (`SVC_BACKENDS`, `PUT /backends`): periodic checks, aggregate, incidents.

Used by the standalone SSP and by the scheduler (same shapes, spec "Standalone maintenance
plane"). One element: `{name, url, env, run_on}`:

- `name`: non-empty string, unique in the list;
- `url`: the health-check URL (http or https; ours: the spec names no field for it). Without
  one the backend is `unchecked` and left out of the aggregate;
- `env` (also read as `environment`): a map of strings. Its values are never shown: every
  output masks them as `"***"`; nothing here logs them;
- `run_on`: optional `{pool: <name>}`.

A check is a GET of `url` bounded by the interval (at most 10 s): 2xx is healthy, anything
else unhealthy. Aggregate (`summary()["status"]`): `healthy` when every backend is healthy,
`unavailable` when none is healthy and at least one failed, else `degraded` (some unknown
or some failing); `unchecked` backends (no URL) do not count.

Incidents: a backend failing for more than `down_after_secs` (one minute) opens a
`backend_down` incident (component = the backend name); its first healthy check after that
records it `recovered`. Each change is handed to `sink` when one is given (the scheduler:
its incident store, `scheduler.incidents`); otherwise it is one JSON line appended to
`incidents.jsonl` in the given directory (the standalone SSP's snapshot dir, else its run
dir): the last line of an id is its current state. Without either they are only kept in
memory (`incidents`).

Probe history: the outcomes of about the last 30 minutes of checks per backend
(`history(name)`: `{at, ok, latency_ms, error}`), for the admin plane's backend page.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from dbclient.clock import now_ms
from ipc.http import client_session

log = logging.getLogger("maintenance.backends")

MASK = "***"
INCIDENTS_FILE = "incidents.jsonl"
CHECK_TIMEOUT_MAX_SECS = 10.0
HISTORY_SECS = 30 * 60
HISTORY_MAX = 2000
_KNOWN_KEYS = ("name", "url", "env", "environment", "run_on")


class BackendListError(ValueError):
    """The list does not have the documented shape; the message names the element and field
    (never a value from an env map)."""


@dataclass(frozen=True)
class Backend:
    """One element of the list (env values never in repr)."""

    name: str
    url: str | None
    env: dict[str, str] = field(repr=False)
    run_on: dict[str, str] | None = None


def parse_backends(doc: Any) -> list[Backend]:
    """Validate a decoded `SVC_BACKENDS` / `PUT /backends` document."""
    if not isinstance(doc, list):
        raise BackendListError("the backend list must be a JSON array of objects")
    out: list[Backend] = []
    seen: set[str] = set()
    for i, item in enumerate(doc):
        where = f"backends[{i}]"
        if not isinstance(item, dict):
            raise BackendListError(f"{where} must be an object")
        unknown = sorted(k for k in item if k not in _KNOWN_KEYS)
        if unknown:
            raise BackendListError(f"{where} has unknown fields: {', '.join(unknown)[:200]}")
        name = item.get("name")
        if not isinstance(name, str) or not name.strip():
            raise BackendListError(f"{where}.name must be a non-empty string")
        if name in seen:
            raise BackendListError(f"{where}.name {name[:80]!r} appears twice")
        seen.add(name)
        url = item.get("url")
        if url is not None and (not isinstance(url, str)
                                or urlsplit(url).scheme not in ("http", "https")
                                or not urlsplit(url).netloc):
            raise BackendListError(f"{where}.url must be an http(s) URL")
        env = item.get("env", item.get("environment")) or {}
        if not isinstance(env, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise BackendListError(f"{where}.env must be an object of strings")
        run_on = item.get("run_on")
        if run_on is not None and (not isinstance(run_on, dict) or set(run_on) != {"pool"}
                                   or not isinstance(run_on["pool"], str)):
            raise BackendListError(f"{where}.run_on must be {{\"pool\": <name>}}")
        out.append(Backend(name, url, dict(env), dict(run_on) if run_on else None))
    return out


def shown_url(url: str | None) -> str | None:
    """The URL without user info (a password in a health URL is a secret too)."""
    if url is None:
        return None
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, ""))


@dataclass
class _State:
    status: str = "unknown"
    last_checked_ms: int | None = None
    last_ok_ms: int | None = None
    last_error: str | None = None
    failing_since_ms: int | None = None
    consecutive_failures: int = 0
    incident_id: str | None = None



class BackendMonitor:
    """Holds the list, checks it every `interval_secs`, answers `summary()`."""

    def __init__(self, backends: list[Backend], *, interval_secs: float = 15.0,
                 down_after_secs: float = 60.0, incidents_dir: Path | None = None,
                 component: str = "ssp", clock: Callable[[], int] = now_ms,
                 sink: Callable[[dict[str, Any]], Any] | None = None) -> None:
        self.backends = backends
        self.interval_secs = interval_secs
        self.down_after_ms = int(down_after_secs * 1000)
        self.incidents_dir = incidents_dir
        self.component = component
        self.clock = clock
        self.states: dict[str, _State] = {b.name: _State() for b in backends}
        self.incidents: list[dict[str, Any]] = []
        self.sink = sink
        self._history: dict[str, deque[dict[str, Any]]] = {}
        self._session: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    @property
    def configured(self) -> bool:
        return bool(self.backends)

    async def start(self) -> None:
        self._session = client_session()
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="backend-health")

    async def stop(self) -> None:
        if self._task is not None:
            # the loop's wake wait runs under wait_for, which on Python 3.11 can lose a cancel
            # that lands as the wait completes: cancel until it has ended (the same as
            # dbclient.tasks.cancel_and_wait, which this package may not import)
            task = self._task
            while not task.done():
                task.cancel()
                await asyncio.wait([task], timeout=0.5)
            if not task.cancelled():
                task.exception()  # retrieved: the loop logs its own errors
            self._task = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    def replace(self, backends: list[Backend]) -> None:
        """`PUT /backends`: the new list; states of names kept are kept; checked at once."""
        for name in [n for n in self.states if n not in {b.name for b in backends}]:
            st = self.states.pop(name)
            self._history.pop(name, None)
            if st.incident_id is not None:
                self._record(name, st, "recorded", "backend removed from the list while down")
        for b in backends:
            self.states.setdefault(b.name, _State())
        self.backends = backends
        self._wake.set()
        log.info("backend list replaced: %d backends (%s)", len(backends),
                 ", ".join(b.name for b in backends)[:300])

    async def _loop(self) -> None:
        while True:
            try:
                await self.check_all()
            except Exception:
                log.exception("backend health round failed")
            try:
                await asyncio.wait_for(self._wake.wait(), self.interval_secs)
            except TimeoutError:
                pass
            self._wake.clear()

    async def check_all(self) -> None:
        """One round: every backend checked concurrently."""
        await asyncio.gather(*(self._check(b) for b in list(self.backends)))

    async def _check(self, b: Backend) -> None:
        self.states.setdefault(b.name, _State())
        if b.url is None or self._session is None:
            return
        timeout = min(CHECK_TIMEOUT_MAX_SECS, max(0.5, self.interval_secs))
        started = time.monotonic()
        try:
            async with self._session.get(b.url, timeout=aiohttp.ClientTimeout(total=timeout),
                                         allow_redirects=False) as resp:
                ok = 200 <= resp.status < 300
                error = None if ok else f"health check answered HTTP {resp.status}"
        except TimeoutError:
            ok, error = False, f"health check timed out after {timeout:g}s"
        except aiohttp.ClientError as e:
            ok, error = False, f"health check failed: {type(e).__name__}"
        self.observe(b.name, ok, error, latency_ms=(time.monotonic() - started) * 1000)

    def observe(self, name: str, ok: bool, error: str | None,
                latency_ms: float | None = None) -> None:
        """Record one check outcome (and open or close the incident)."""
        st = self.states.setdefault(name, _State())
        now = self.clock()
        st.last_checked_ms = now
        hist = self._history.get(name)
        if hist is None:
            keep = min(HISTORY_MAX, int(HISTORY_SECS / max(self.interval_secs, 0.1)) + 1)
            hist = self._history[name] = deque(maxlen=keep)
        hist.append({"at": now, "ok": ok, "error": error,
                     "latency_ms": None if latency_ms is None else round(latency_ms, 1)})
        if ok:
            if st.incident_id is not None:
                self._record(name, st, "recovered", f"backend {name} answers its health check")
            st.status, st.last_ok_ms, st.last_error = "healthy", now, None
            st.failing_since_ms, st.consecutive_failures = None, 0
            return
        if st.status != "unhealthy":
            log.warning("backend %s unhealthy: %s", name, error)
        st.status, st.last_error = "unhealthy", error
        st.consecutive_failures += 1
        if st.failing_since_ms is None:
            st.failing_since_ms = now
        if st.incident_id is None and now - st.failing_since_ms > self.down_after_ms:
            st.incident_id = f"inc-{uuid.uuid4().hex[:12]}"
            self._record(name, st, "open", f"backend {name} failing health checks for "
                         f"{(now - st.failing_since_ms) // 1000}s: {error}")

    def _record(self, name: str, st: _State, state: str, summary: str) -> None:
        now = self.clock()
        assert st.incident_id is not None and st.failing_since_ms is not None
        inc = incident_record(st.incident_id, name, "backend_down", "warning", state, summary,
                              started_at=st.failing_since_ms, at=now,
                              ended_at=None if state == "open" else now,
                              source=self.component)
        if state == "open":
            log.warning("incident %s opened: %s", st.incident_id, summary)
        else:
            log.info("incident %s %s: %s", st.incident_id, state, summary)
            st.incident_id = None
        self.incidents.append(inc)
        del self.incidents[:-200]
        if self.sink is not None:
            self.sink(inc)
        elif self.incidents_dir is not None:
            append_incident(self.incidents_dir, inc)

    def history(self, name: str) -> list[dict[str, Any]]:
        """The probes of the last 30 minutes of `name`, oldest first."""
        cutoff = self.clock() - HISTORY_SECS * 1000
        return [h for h in self._history.get(name, ()) if h["at"] >= cutoff]


    def entry(self, b: Backend) -> dict[str, Any]:
        """One backend as shown: env values masked, URL without user info."""
        st = self.states.get(b.name, _State())
        return {
            "name": b.name, "url": shown_url(b.url), "env": {k: MASK for k in b.env},
            "run_on": b.run_on, "status": "unchecked" if b.url is None else st.status,
            "last_checked_ms": st.last_checked_ms,
            "last_ok_ms": st.last_ok_ms, "last_error": st.last_error,
            "failing_since_ms": st.failing_since_ms,
            "consecutive_failures": st.consecutive_failures,
            "incident_open": st.incident_id is not None,
        }

    def summary(self) -> dict[str, Any]:
        """`{status, counts: {healthy, unhealthy, unknown, unchecked}, list}` for
        `GET /health`. A backend without a check URL is `unchecked` and left out of the
        aggregate (nothing will ever be known about it; it must not keep it degraded)."""
        entries = [self.entry(b) for b in self.backends]
        counts = {"healthy": 0, "unhealthy": 0, "unknown": 0, "unchecked": 0}
        for e in entries:
            counts[e["status"]] += 1
        if counts["healthy"] == len(entries) - counts["unchecked"]:
            status = "healthy"
        elif counts["healthy"] == 0 and counts["unhealthy"] > 0:
            status = "unavailable"
        else:
            status = "degraded"
        return {"status": status, "counts": counts, "list": entries}





def incident_record(incident_id: str, component: str, kind: str, severity: str, state: str,
                    summary: str, *, started_at: int, at: int, ended_at: int | None,
                    source: str) -> dict[str, Any]:
    """The spec's incident record (times in epoch ms) with one event; `source` names the
    process that recorded it."""
    return {
        "id": incident_id, "component": component, "kind": kind, "severity": severity,
        "state": state, "started_at": started_at, "ended_at": ended_at,
        "max_buffered_events": 0, "event_count": 1,
        "events": [{"at": at, "component": component, "kind": kind, "state": state,
                    "summary": summary, "operation_id": None, "version": None}],
        "source": source,
    }


def append_incident(directory: Path, inc: dict[str, Any]) -> None:
    """Append one incident record as a JSON line to `incidents.jsonl` in `directory` (where
    the incident store reads them; the last line of an id is its current state)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with open(directory / INCIDENTS_FILE, "a", encoding="utf-8") as f:
            f.write(json.dumps(inc, separators=(",", ":"), default=str) + "\n")
    except OSError as e:
        log.warning("incident %s not written to %s: %s", inc.get("id"), directory, e)


__all__ = ["MASK", "Backend", "BackendListError", "BackendMonitor", "append_incident",
           "incident_record", "parse_backends", "shown_url"]
