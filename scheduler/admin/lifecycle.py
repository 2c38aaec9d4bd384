"""SSP and scheduler lifecycle incidents (spec, Events 9): lag, heartbeat failures, bootstrap
failures, removal and re-registration, recovery.

Fed by the scheduler's SSP events (registered, re-registered, flagged, removed) and a 1 s poll
of the SSP entries (Lagging and Ready are states, not events). Kinds (component ``ssp:<id>``
unless said), when each opens, and how it ends:

* ``ssp_lagging`` (warning): a Ready SSP has more than ``max_buffer_per_ssp`` events waiting;
  ``recovered`` when Ready again. Keeps ``max_buffered_events`` and the heartbeat
  ``publication`` figures of the episode.
* ``ssp_heartbeat_lost`` (warning): removed for want of heartbeats; ``recovered`` when Ready.
* ``ssp_bootstrap_failed`` (warning): flagged because its bootstrap overran
  ``bootstrap_timeout_secs`` or its buffer overflowed, or it registered again while still
  bootstrapping (an integrity check that failed, a crash); ``recovered`` when Ready.
* ``ssp_resync`` (info): flagged for another reason (integrity drift, a batch it refused, a
  reclone); ``recovered`` when Ready.
* ``ssp_reregistered`` (info): it registered again with no incident open; ``recorded``.
* ``scheduler_started`` (info, component ``scheduler:<id>``): each start, with the version;
  ``recorded``.
* ``scheduler_reclone`` (info, component ``scheduler:<id>``): the replica is being re-cloned
  (not the start-up clone); ``recovered`` when the scheduler is ready again.
* ``ssp_unverified`` (info, component ``scheduler:<id>``): without ``SVC_AUTH_SECRET`` anyone
  on the private network can register an SSP, so the troubles of an SSP that registered
  without a credential and was never Ready open no incident of their own: they become events
  of this one incident (at most one open; 64 events kept, ``event_count`` counts them all),
  ``recorded`` after ``UNVERIFIED_QUIET_SECS`` without a new one. A flood of fake
  registrations therefore costs one incident, and cannot push real ones out of the store.

Operator actions (``operator_action``) are recorded by the operation log; flags an operator
action caused (reason ``operator ...``) are not recorded twice. Every event of an SSP's open
incident also notes removals and re-registrations while it is open.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from scheduler.admin.cluster import Cluster, SspInfo
from scheduler.incidents import IncidentStore

log = logging.getLogger("scheduler.admin.lifecycle")

__all__ = ["Lifecycle"]

POLL_SECS = 1.0
UNVERIFIED_QUIET_SECS = 600.0
SSP_KINDS = ("ssp_lagging", "ssp_heartbeat_lost", "ssp_bootstrap_failed", "ssp_resync")


class Lifecycle:
    """See the module docstring."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.store: IncidentStore = cluster.incidents
        self._states: dict[str, str] = {}
        self._cloning = False
        self._seen_ready = False  # the start-up clone is not a reclone
        self._trusted: set[str] = set()  # ids seen trusted (an entry gone by its event)
        self._unverified_at = 0.0  # monotonic time of the last ssp_unverified event
        self.component = f"scheduler:{cluster.scheduler_id}"
        cluster.on_ssp_event(self.on_event)

    def started(self) -> None:
        self.store.note(self.component, "scheduler_started",
                        f"scheduler {self.cluster.scheduler_id} started "
                        f"(version {self.cluster.version})", version=self.cluster.version)

    def _open_for(self, ssp_id: str) -> list[str]:
        comp = f"ssp:{ssp_id}"
        return [i for i in (self.store.find_open(comp, k) for k in SSP_KINDS) if i]

    def _open(self, ssp_id: str, kind: str, summary: str, severity: str = "warning") -> None:
        if self.store.find_open(f"ssp:{ssp_id}", kind) is None:
            self.store.open(f"ssp:{ssp_id}", kind, summary, severity=severity)

    def _untrusted(self, ssp_id: str) -> bool:
        if self.cluster.cfg.auth_secret:
            return False  # every registration proved it holds the secret
        info = self.cluster.ssp(ssp_id)
        if info is not None and info.trusted:
            self._trusted.add(ssp_id)
        return ssp_id not in self._trusted

    def _unverified(self, ssp_id: str, what: str, reason: str) -> None:
        comp = self.component
        summary = f"SSP {ssp_id} (registered without a credential, never Ready) {what}: {reason}"
        iid = self.store.find_open(comp, "ssp_unverified")
        if iid is None:
            self.store.open(comp, "ssp_unverified", summary, severity="info")
        else:
            self.store.event(iid, summary)
        self._unverified_at = time.monotonic()

    def on_event(self, ssp_id: str, what: str, reason: str) -> None:
        """The scheduler's SSP events (see ``scheduler.core``)."""
        if what in ("removed", "flagged", "reregistered") and self._untrusted(ssp_id):
            if what != "reregistered" or reason == "bootstrapping":
                self._unverified(ssp_id, what, reason)
            if what in ("removed", "reregistered"):
                self._states.pop(ssp_id, None)
            return
        if what == "removed":
            if reason.startswith("no heartbeat"):
                self._open(ssp_id, "ssp_heartbeat_lost", f"SSP {ssp_id} removed: {reason}")
            else:
                for iid in self._open_for(ssp_id):
                    self.store.event(iid, f"SSP {ssp_id} removed: {reason}")
        elif what == "flagged":
            if reason.startswith("operator"):
                return  # the operation's own incident tells it
            if reason.startswith("bootstrap not finished") or "overflow" in reason:
                self._open(ssp_id, "ssp_bootstrap_failed",
                           f"SSP {ssp_id} sent back to bootstrap: {reason}")
            else:
                self._open(ssp_id, "ssp_resync", f"SSP {ssp_id} asked to resync: {reason}",
                           severity="info")
        elif what == "reregistered":
            open_ids = self._open_for(ssp_id)
            if reason == "bootstrapping":
                self._open(ssp_id, "ssp_bootstrap_failed",
                           f"SSP {ssp_id} registered again before its bootstrap finished "
                           "(an integrity check failed or it crashed)")
            elif open_ids:
                for iid in open_ids:
                    self.store.event(iid, f"SSP {ssp_id} registered again")
            else:
                self.store.note(f"ssp:{ssp_id}", "ssp_reregistered",
                                f"SSP {ssp_id} registered again (was {reason or 'unknown'})")
        if what in ("removed", "reregistered"):
            self._states.pop(ssp_id, None)

    def poll(self) -> None:
        """Lagging and Ready transitions, and the scheduler's own clone state."""
        seen: dict[str, SspInfo] = {s.id: s for s in self.cluster.ssps()}
        self._trusted = {i for i in self._trusted if i in seen} | {
            i for i, info in seen.items() if info.trusted}
        quiet = self.store.find_open(self.component, "ssp_unverified")
        if quiet is not None and time.monotonic() - self._unverified_at > UNVERIFIED_QUIET_SECS:
            self.store.end(quiet, "recorded", "no further trouble from unverified SSPs")
        for ssp_id, info in seen.items():
            prev = self._states.get(ssp_id)
            self._states[ssp_id] = info.state
            if info.state == "lagging":
                iid = self.store.find_open(f"ssp:{ssp_id}", "ssp_lagging")
                if iid is None:
                    self.store.open(f"ssp:{ssp_id}", "ssp_lagging",
                                    f"SSP {ssp_id} lagging: {info.queued} events wait to be "
                                    "sent to it")
                    iid = self.store.find_open(f"ssp:{ssp_id}", "ssp_lagging")
                if iid is not None:
                    self.store.observe(iid, buffered=info.queued, publication=info.publication,
                                       persist=False)
            elif info.state == "ready" and info.flagged is None and prev != "ready":
                for iid in self._open_for(ssp_id):
                    self.store.end(iid, "recovered", f"SSP {ssp_id} is Ready again",
                                   version=info.version)
            elif info.publication and self.store.find_open(f"ssp:{ssp_id}", "ssp_lagging"):
                iid = self.store.find_open(f"ssp:{ssp_id}", "ssp_lagging")
                assert iid is not None
                self.store.observe(iid, buffered=info.queued, publication=info.publication,
                                   persist=False)
        for gone in [i for i in self._states if i not in seen]:
            del self._states[gone]
        state = self.cluster.state()
        cloning = state == "cloning" and self._seen_ready
        self._seen_ready = self._seen_ready or state == "ready"
        if cloning and not self._cloning:
            self.store.open(self.component, "scheduler_reclone",
                            "the scheduler is re-cloning its replica", severity="info")
        elif not cloning and self._cloning:
            iid = self.store.find_open(self.component, "scheduler_reclone")
            if iid is not None:
                self.store.end(iid, "recovered", "replica cloned; the scheduler is ready")
        self._cloning = cloning

    async def run(self) -> None:
        while True:
            try:
                self.poll()
            except Exception:  # noqa: BLE001 - the watcher must keep running; logged
                log.exception("lifecycle poll failed")
            await asyncio.sleep(POLL_SECS)

    def status(self) -> dict[str, Any]:
        return {"watched": len(self._states)}
