"""A quarantined schedule's incident: opened when a schedule is quarantined (or found still
quarantined after a restart), ended when an operator releases it. The incident store is the
admin plane's, handed in by the scheduler (None: no incidents are kept)."""

from __future__ import annotations

import logging
from typing import Any

from scheduler.workflows.state import Sched

log = logging.getLogger("scheduler.workflows")

__all__ = ["Quarantines"]

KIND = "schedule_quarantined"


def _component(name: str, q: dict[str, Any]) -> str:
    return f"schedule:{name}/{q.get('key')}"


class Quarantines:
    def __init__(self, incidents: Any) -> None:
        self.incidents = incidents

    def opened(self, s: Sched, *, restarted: bool = False) -> None:
        """`s` is quarantined: one open incident for it (none when one is open already)."""
        if self.incidents is None or s.quarantined is None:
            return
        component = _component(s.name, s.quarantined)
        if self.incidents.find_open(component, KIND) is not None:
            return
        why = ("still quarantined after a scheduler restart" if restarted else
               f"quarantined after {s.quarantined.get('failures')} failed fires in a row "
               f"({s.quarantined.get('key')}); it fires again once released")
        iid = self.incidents.open(component, KIND, why)
        s.quarantined["incident"] = iid
        log.warning("schedule %s %s", s.name, why)

    def released(self, name: str, q: dict[str, Any], who: str) -> None:
        """The quarantine `q` of schedule `name` was lifted by `who`: its incident ends."""
        if self.incidents is None:
            return
        iid = self.incidents.find_open(_component(name, q), KIND)
        if iid is not None:
            self.incidents.end(iid, "recovered", f"released by {who}")
