"""Shared materialisations (spec, `POST /view/register` rule 3: "a merged subscriber sharing
another registration's graph joins the existing view").

Two registrations share a graph when they have the same identity, query text and parameters
(`share_key`): the engine computes the same members for both. The second one is placed on the
first one's shard, where the engine's materialisation (`engine.circuit.Mat`) is shared: one
set of members is maintained for both view ids (each keeps its own `_00_query` row and edges,
which clients read). `subscribers` counts the distinct client ids of every registration of the
group, in each of the group's `_00_query` rows: written when a registration joins (the others'
rows updated too), when a client re-registers, and when a member of the group goes away.

The views of each group are kept beside the held views (`ssp.hub.state.ViewRegistry`): a scan
of every held view per registration made registering N views cost O(N^2) (21% of the hub's
time at 10,000 views, `loadtests/bench_ssp.py`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from surrealdb import RecordID

from engine.jsonvalues import to_json

if TYPE_CHECKING:
    from ssp.hub.state import HubState, ViewState


def share_key(auth: RecordID | None, surql: str, params: dict[str, Any] | None) -> str:
    """What two registrations must have in common to share a graph."""
    return json.dumps([to_json(auth), surql, to_json(params or {})], sort_keys=True,
                      default=str, separators=(",", ":"))


def peers(state: HubState, key: str, exclude: str | None = None) -> list[ViewState]:
    """The held views of group `key` (but `exclude`), by view id."""
    group = state.views.groups.get(key)
    if not group:
        return []
    return sorted((v for v in group.values() if v.view_id != exclude), key=lambda v: v.view_id)


def subscribers(state: HubState, view: ViewState) -> int:
    """Distinct client ids of `view`'s group (`view` included, held or not yet)."""
    ids = set(view.client_ids)
    for v in peers(state, view.share, exclude=view.view_id):
        ids |= v.client_ids
    return len(ids)


async def write_counts(state: HubState, group: list[ViewState]) -> None:
    """Set `subscribers` in the `_00_query` rows of `group` (one group) to its count."""
    if not group:
        return
    n = subscribers(state, group[0])
    await state.pub_db.query("UPDATE $qs MERGE $d RETURN NONE",
                             {"qs": [v.record for v in group], "d": {"subscribers": n}})
