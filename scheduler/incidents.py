"""The incident store: every incident the scheduler records, in memory and in one history file.

Records have the spec's shape ("Incident record"): ``id, component, kind, severity
(warning|info), state (open|recovered|interrupted|failed|recorded), started_at, ended_at,
max_buffered_events, event_count, events`` (each ``{at, component, kind, state, summary,
operation_id, version}``), times in epoch milliseconds, and optionally ``publication``,
``max_publication_operations``, ``max_publication_bytes``, ``max_publication_age_ms``.

Writers:

* the backend monitor (``maintenance.backends.BackendMonitor``, ``backend_down``) and the drift checker
  (``schema_change``) hand whole changes to :meth:`IncidentStore.record`, which merges them
  by id (a later change of an id appends its events and moves its state);
* the lifecycle watcher (:mod:`scheduler.admin.lifecycle`) and operator actions use
  :meth:`open`, :meth:`event`, :meth:`end` and :meth:`note`.

States: ``open`` until the scheduler observes recovery (``recovered``) or gives up
(``failed``); one-off records are ``recorded`` at once. An incident still open when the process
stops is ``interrupted`` by the next process that loads the file (the scheduler restarted
first).

Persistence: ``incidents.json`` in the scheduler's data dir, rewritten whole (temporary file,
fsync, rename) at most once per second after a change, and at shutdown. Limits (spec): 30 days
(by the last event; open incidents are kept), 2,000 incidents, 64 events per incident (the
first and the 63 newest; ``event_count`` keeps counting), 8 MiB of file (oldest closed ones
dropped first). A failed write sets ``storage_error`` (shown by the API) and is retried at the
next change. A file written by an older version (fields missing) loads with defaults; the old
append-only ``incidents.jsonl`` of this directory is imported once, then renamed
``incidents.jsonl.imported``.

Summaries are sanitised on the way in (:func:`sanitize`): no SQL, no bindings, no credentials.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from dbclient.clock import now_ms
from ipc.statefile import replace_file

log = logging.getLogger("scheduler.incidents")

__all__ = ["IncidentStore", "sanitize"]

FILE = "incidents.json"
LEGACY_FILE = "incidents.jsonl"
RETENTION_DAYS = 30
MAX_INCIDENTS = 2000
MAX_EVENTS = 64
MAX_FILE_BYTES = 8 * 1024 * 1024
FLUSH_INTERVAL_SECS = 1.0
SUMMARY_MAX = 300
STATES = ("open", "recovered", "interrupted", "failed", "recorded")
SEVERITIES = ("warning", "info")

_SQL = re.compile(
    r"\b(SELECT|CREATE|UPDATE|UPSERT|DELETE|INSERT|RELATE|DEFINE|REMOVE|ALTER|LET|BEGIN|"
    r"COMMIT|CANCEL|RETURN|LIVE|KILL|INFO\s+FOR|SHOW\s+CHANGES|USE\s+NS|FOR\s+\$)\b.*",
    re.DOTALL)
_USERINFO = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s@]+@")
_KEYVAL = re.compile(r"(?i)\b(password|passwd|pass|pwd|secret|token|api[_-]?key|"
                     r"authorization|auth|credentials?|key)(\s*[=:]\s*)(\S+)")
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+\S+")
_BINDING = re.compile(r"\$[A-Za-z_][A-Za-z0-9_]*\s*=\s*\S+")
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"|`[^`]*`|⟨[^⟩]*⟩")
_BRACED = re.compile(r"\{[^{}]*\}")
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")


def sanitize(text: Any, secrets: Iterable[str] = ()) -> str:
    """A summary safe to store and show: known secrets, URL credentials, ``key=value``
    credentials, bearer tokens and JWTs masked; SQL statements, ``$bindings``, quoted values
    and ``{...}`` maps removed; at most 300 characters."""
    s = str(text)
    for secret in secrets:
        if secret and len(secret) >= 4:
            s = s.replace(secret, "***")
    s = _JWT.sub("***", s)
    s = _USERINFO.sub(r"\1***@", s)
    s = _BEARER.sub(lambda m: f"{m.group(1)} ***", s)
    s = _KEYVAL.sub(lambda m: f"{m.group(1)}{m.group(2)}***", s)
    s = _SQL.sub("[query removed]", s)
    s = _BINDING.sub("[binding removed]", s)
    s = _QUOTED.sub("'…'", s)
    prev = None
    while prev != s:  # nested maps: innermost first
        prev, s = s, _BRACED.sub("{…}", s)
    s = " ".join(s.split())
    return s if len(s) <= SUMMARY_MAX else s[: SUMMARY_MAX - 1] + "…"



def _int(v: Any, default: int | None) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else default


def _normalise(raw: Mapping[str, Any], now: int) -> dict[str, Any] | None:
    """A stored record with every field present (older files omit optional ones); None
    when it has no id. A record without any time is taken as seen ``now``."""
    iid = raw.get("id")
    if not isinstance(iid, str) or not iid:
        return None
    got = raw.get("events")
    events: list[Any] = got if isinstance(got, list) else []
    started = _int(raw.get("started_at"), None)
    if started is None:
        started = _int(events[0].get("at"), now) if events and isinstance(events[0], dict) \
            else now
    state = raw.get("state") if raw.get("state") in STATES else "recorded"
    out: dict[str, Any] = {
        "id": iid,
        "component": str(raw.get("component") or "unknown"),
        "kind": str(raw.get("kind") or "unknown"),
        "severity": raw.get("severity") if raw.get("severity") in SEVERITIES else "warning",
        "state": state,
        "started_at": started,
        "ended_at": _int(raw.get("ended_at"), None),
        "max_buffered_events": _int(raw.get("max_buffered_events"), 0),
        "event_count": _int(raw.get("event_count"), len(events)),
        "events": [],
    }
    for k in ("publication", "max_publication_operations", "max_publication_bytes",
              "max_publication_age_ms", "source"):
        if raw.get(k) is not None:
            out[k] = raw[k]
    for ev in events:
        if isinstance(ev, dict):
            out["events"].append(_event(ev, out))
    out["event_count"] = max(out["event_count"], len(out["events"]))
    return out


def _event(ev: Mapping[str, Any], inc: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "at": _int(ev.get("at"), inc["started_at"]),
        "component": str(ev.get("component") or inc["component"]),
        "kind": str(ev.get("kind") or inc["kind"]),
        "state": ev.get("state") if ev.get("state") in STATES else inc["state"],
        "summary": str(ev.get("summary") or ""),
        "operation_id": ev.get("operation_id") if isinstance(ev.get("operation_id"), str)
        else None,
        "version": ev.get("version") if isinstance(ev.get("version"), str) else None,
    }


class IncidentStore:
    """See the module docstring. ``directory`` None keeps everything in memory only."""

    def __init__(self, directory: Path | None, *, secrets: Iterable[str] = (),
                 source: str = "scheduler", clock: Any = now_ms,
                 retention_days: int = RETENTION_DAYS, max_incidents: int = MAX_INCIDENTS,
                 max_events: int = MAX_EVENTS, max_bytes: int = MAX_FILE_BYTES,
                 flush_interval: float = FLUSH_INTERVAL_SECS) -> None:
        self.path = directory / FILE if directory is not None else None
        self.secrets = tuple(s for s in secrets if s)
        self.source = source
        self.clock = clock
        self.retention_days = retention_days
        self.max_incidents = max_incidents
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.flush_interval = flush_interval
        self.items: dict[str, dict[str, Any]] = {}  # insertion order = start order
        self.storage_error: str | None = None
        self.listeners: list[Any] = []  # callables run after each change (SSE, tests)
        self._dirty = False
        self._timer: asyncio.TimerHandle | None = None
        self._last_flush = 0.0
        self._load()
        self._interrupt_open()

    # ------------------------------------------------------------------ loading
    def _load(self) -> None:
        if self.path is None:
            return
        try:
            doc = json.loads(self.path.read_text(encoding="utf-8"))
            raw = doc.get("incidents", []) if isinstance(doc, dict) else doc
        except FileNotFoundError:
            raw = []
        except (OSError, ValueError) as e:
            # Keep the damaged file for inspection; the store starts empty.
            log.error("incident history %s unreadable (%s); starting empty", self.path, e)
            self.storage_error = f"history unreadable: {type(e).__name__}"
            try:
                self.path.replace(self.path.with_suffix(".json.damaged"))
            except OSError:
                pass
            raw = []
        for item in raw if isinstance(raw, list) else []:
            if isinstance(item, dict):
                inc = _normalise(item, self.clock())
                if inc is not None:
                    self.items[inc["id"]] = inc
        legacy = self.path.parent / LEGACY_FILE
        if legacy.exists():
            try:
                for line in legacy.read_text(encoding="utf-8").splitlines():
                    try:
                        change = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(change, dict):
                        self.record(change, persist=False)
                legacy.replace(legacy.with_name(LEGACY_FILE + ".imported"))
                self._dirty = True
            except OSError as e:
                log.warning("could not import %s: %s", legacy, e)
        self._sort()
        self._prune()

    def _interrupt_open(self) -> None:
        """A new process: what the previous one left open is `interrupted`."""
        now = self.clock()
        for inc in self.items.values():
            if inc["state"] == "open":
                self._append(inc, {"at": now, "state": "interrupted",
                                   "summary": "the scheduler restarted while this was open"})
                inc["state"] = "interrupted"
                inc["ended_at"] = now
                self._dirty = True
        if self._dirty:
            self._changed()

    def _sort(self) -> None:
        self.items = dict(sorted(self.items.items(), key=lambda kv: kv[1]["started_at"]))

    # ------------------------------------------------------------------ writers
    def record(self, change: Mapping[str, Any], *, persist: bool = True) -> dict[str, Any] | None:
        """Merge one change (an incident record with its new events) by id."""
        inc = _normalise(change, self.clock())
        if inc is None:
            return None
        for ev in inc["events"]:
            ev["summary"] = sanitize(ev["summary"], self.secrets)
        have = self.items.get(inc["id"])
        if have is None:
            events, inc["events"] = inc["events"], []
            inc["event_count"] = 0
            self.items[inc["id"]] = inc
            for ev in events:
                self._append(inc, ev)
            have = inc
        else:
            for ev in inc["events"]:
                self._append(have, ev)
            have["state"] = inc["state"]
            have["ended_at"] = inc["ended_at"]
            have["max_buffered_events"] = max(have["max_buffered_events"],
                                              inc["max_buffered_events"])
        if persist:
            self._changed()
        return have

    def open(self, component: str, kind: str, summary: str, *, severity: str = "warning",
             operation_id: str | None = None, version: str | None = None) -> str:
        """Open an incident; its id."""
        iid = self._new(component, kind, summary, severity, "open", operation_id, version)
        log.warning("incident %s opened (%s %s): %s", iid, kind, component,
                    self.items[iid]["events"][-1]["summary"])
        self._changed()
        return iid

    def _new(self, component: str, kind: str, summary: str, severity: str, state: str,
             operation_id: str | None, version: str | None) -> str:
        now = self.clock()
        iid = f"inc-{uuid.uuid4().hex[:12]}"
        inc = {"id": iid, "component": component, "kind": kind, "severity": severity,
               "state": state, "started_at": now, "ended_at": None if state == "open" else now,
               "max_buffered_events": 0, "event_count": 0, "events": [], "source": self.source}
        self.items[iid] = inc
        self._append(inc, {"at": now, "state": state, "summary": sanitize(summary, self.secrets),
                           "operation_id": operation_id, "version": version})
        return iid

    def event(self, incident_id: str, summary: str, *, state: str | None = None,
              operation_id: str | None = None, version: str | None = None,
              buffered: int | None = None, publication: Mapping[str, Any] | None = None) -> bool:
        """Append an event (and move the state when ``state`` is given); False when unknown."""
        inc = self.items.get(incident_id)
        if inc is None:
            return False
        now = self.clock()
        new_state = state if state in STATES else inc["state"]
        self._append(inc, {"at": now, "state": new_state,
                           "summary": sanitize(summary, self.secrets),
                           "operation_id": operation_id, "version": version})
        if new_state != inc["state"]:
            inc["state"] = new_state
            inc["ended_at"] = None if new_state == "open" else now
            log.info("incident %s %s: %s", incident_id, new_state, inc["events"][-1]["summary"])
        if buffered is not None:
            self.observe(incident_id, buffered=buffered, publication=publication, persist=False)
        self._changed()
        return True

    def end(self, incident_id: str, state: str, summary: str, **kw: Any) -> bool:
        """End an open incident (``recovered``, ``failed``, ``recorded``)."""
        return self.event(incident_id, summary, state=state, **kw)

    def note(self, component: str, kind: str, summary: str, *, severity: str = "info",
             operation_id: str | None = None, version: str | None = None) -> str:
        """A one-off incident, ``recorded`` at once."""
        iid = self._new(component, kind, summary, severity, "recorded", operation_id, version)
        self._changed()
        return iid

    def observe(self, incident_id: str, *, buffered: int | None = None,
                publication: Mapping[str, Any] | None = None, persist: bool = True) -> None:
        """Keep the episode's maxima: buffered events and the heartbeat publication figures
        (the last non-empty snapshot, worst views cut to eight)."""
        inc = self.items.get(incident_id)
        if inc is None:
            return
        if buffered is not None and buffered > inc["max_buffered_events"]:
            inc["max_buffered_events"] = buffered
        if publication and any(publication.get(k) for k in ("pending_operations",
                                                            "pending_batches")):
            pub = dict(publication)
            if isinstance(pub.get("worst_views"), list):
                pub["worst_views"] = pub["worst_views"][:8]
            inc["publication"] = pub
            for key, field in (("max_publication_operations", "pending_operations"),
                               ("max_publication_bytes", "pending_bytes"),
                               ("max_publication_age_ms", "oldest_age_ms")):
                v = pub.get(field)
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    inc[key] = max(inc.get(key) or 0, v)
        if persist:
            self._changed()

    def _append(self, inc: dict[str, Any], ev: Mapping[str, Any]) -> None:
        inc["events"].append(_event(ev, inc))
        inc["event_count"] += 1
        if len(inc["events"]) > self.max_events:
            # the first event (how it began) and the newest ones
            del inc["events"][1:len(inc["events"]) - self.max_events + 1]

    # ------------------------------------------------------------------ readers
    def get(self, incident_id: str) -> dict[str, Any] | None:
        return self.items.get(incident_id)

    def find_open(self, component: str, kind: str) -> str | None:
        for inc in reversed(self.items.values()):
            if inc["state"] == "open" and inc["component"] == component and inc["kind"] == kind:
                return str(inc["id"])
        return None

    def query(self, *, component: str | None = None, state: str | None = None,
              severity: str | None = None, since: int | None = None, before: int | None = None,
              offset: int = 0, limit: int = 50) -> tuple[list[dict[str, Any]], int]:
        """Newest first, filtered (``since``/``before`` on ``started_at``); (page, total)."""
        self._prune()
        hits = [i for i in reversed(self.items.values())
                if (component is None or i["component"] == component)
                and (state is None or i["state"] == state)
                and (severity is None or i["severity"] == severity)
                and (since is None or i["started_at"] >= since)
                and (before is None or i["started_at"] < before)]
        return hits[offset:offset + limit], len(hits)

    def summary(self) -> dict[str, Any]:
        """The ``incidents`` object of the overview."""
        return {"open": sum(1 for i in self.items.values() if i["state"] == "open"),
                "total": len(self.items), "retention_days": self.retention_days,
                "storage_error": self.storage_error}

    # ------------------------------------------------------------------ limits and flush
    def _prune(self) -> None:
        cutoff = self.clock() - self.retention_days * 86_400_000
        for iid in [i for i, inc in self.items.items() if inc["state"] != "open"
                    and (inc["events"][-1]["at"] if inc["events"] else inc["started_at"])
                    < cutoff]:
            del self.items[iid]
            self._dirty = True
        excess = len(self.items) - self.max_incidents
        if excess > 0:
            for iid in [i for i, inc in self.items.items() if inc["state"] != "open"][:excess]:
                del self.items[iid]
            self._dirty = True

    def _changed(self) -> None:
        self._dirty = True
        for fn in list(self.listeners):
            try:
                fn()
            except Exception:  # noqa: BLE001 - a listener must not break a writer; logged
                log.exception("incident listener failed")
        if self.path is None or self._timer is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        wait = max(0.0, self._last_flush + self.flush_interval - time.monotonic())
        self._timer = loop.call_later(wait, self._timed_flush)

    def _timed_flush(self) -> None:
        self._timer = None
        self.flush()

    def encode(self) -> bytes:
        """The file's bytes, within ``max_bytes`` (oldest closed incidents dropped first)."""
        self._prune()
        parts = [json.dumps(i, separators=(",", ":"), default=str).encode()
                 for i in self.items.values()]
        total = sum(len(p) + 1 for p in parts) + 64
        if total > self.max_bytes:
            keep = list(self.items)
            sizes = dict(zip(keep, (len(p) + 1 for p in parts), strict=True))
            for iid in [i for i in keep if self.items[i]["state"] != "open"]:
                if total <= self.max_bytes:
                    break
                total -= sizes[iid]
                del self.items[iid]
            parts = [json.dumps(i, separators=(",", ":"), default=str).encode()
                     for i in self.items.values()]
        return b'{"version":1,"incidents":[' + b",".join(parts) + b"]}"

    def flush(self) -> bool:
        """Write the file now when something changed; False (and ``storage_error``) when the
        write failed."""
        if self.path is None or not self._dirty:
            return True
        self._last_flush = time.monotonic()
        data = self.encode()
        try:
            replace_file(self.path, data)
        except OSError as e:
            msg = f"cannot write {self.path.name}: {e.strerror or type(e).__name__}"
            if self.storage_error != msg:
                log.error("incident history not written: %s", msg)
            self.storage_error = msg
            return False
        self._dirty = False
        self.storage_error = None
        return True

    def shutdown(self) -> None:
        """Flush what is pending (the process is stopping)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.flush()
