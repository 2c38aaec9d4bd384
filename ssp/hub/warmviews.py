"""A linked SSP's views across an operator restart (ours): `views.json` beside `snapshot.json`.

At a graceful stop whose edges all reached the database (`Publisher.drain`), the SSP writes
every held view (its registration and the members its edges name) with the scheduler
position of the snapshot's rows. The next start that the scheduler lets start warm reads the
file (and deletes it at once: only the stop that wrote it knows the edges match it), builds
each view the scheduler still assigns to this SSP on the snapshot's rows, and only then
catches up from the WAL: the events it missed reach the views as ordinary deltas, so only
the edges they change are written. The scheduler's re-sending of the same views after Ready
is then a refresh (`ssp.hub.registry`), not a rebuild: no `_00_query` row goes back to
`materializing` and no edge is rewritten.

Why only at a graceful stop: a periodic checkpoint's members can be older than the edges
published after it, and a member that came and went since would keep its edge for ever.
Those starts (and a `clean` restart, which deletes both files) leave the views to the
scheduler's re-sending, which builds them cold."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dbclient import DbError
from dbclient.clock import now_ms
from engine.errors import QueryRejected
from engine.jsonvalues import json_default
from engine.parser import parse_cached
from engine.values import parse_record_id, record_id_text
from ssp.hub.identity import effective_query
from ssp.hub.sharing import share_key
from ssp.permissions import PermissionRefused, PermissionsUnavailable
from ssp.shards import ShardDown, ShardError, ShardTimeout

if TYPE_CHECKING:
    from ssp.hub.shardpool import ShardPool
    from ssp.hub.state import HubState, ViewState
    from ssp.hub.views import ViewLifecycle

log = logging.getLogger("ssp.hub")

VIEWS_FILE = "views.json"
VERSION = 1


def views_path(snapshot_dir: Path | None) -> Path | None:
    """The views file (None: no snapshot dir configured)."""
    return snapshot_dir / VIEWS_FILE if snapshot_dir is not None else None


def _entry(view: ViewState) -> dict[str, Any]:
    return {"id": view.view_id, "surql": view.surql, "params": view.params,
            "auth": record_id_text(view.auth) if view.auth is not None else None,
            "client_id": view.client_id, "client_ids": sorted(view.client_ids),
            "ttl": view.ttl, "ttl_ms": view.ttl_ms, "last_active_ms": view.last_active_ms,
            "format": view.format, "row_count": view.row_count,
            "members": sorted(view.members)}


def write_views(path: Path, position: dict[str, Any], views: list[ViewState]) -> bool:
    """Write the views file for the rows at `position` ({epoch, seq}); False on failure."""
    data = {"version": VERSION, "scheduler": position, "written_at_ms": now_ms(),
            "views": [_entry(v) for v in views]}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp-views")
        tmp.write_text(json.dumps(data, default=json_default))
        os.replace(tmp, path)
        return True
    except (OSError, TypeError, ValueError) as e:
        log.warning("views file not written (%s): the next start builds views cold", e)
        return False


def drop_views(path: Path | None) -> None:
    """Delete the views file (a checkpoint, a clean wipe, a restore, a start reading it)."""
    if path is None:
        return
    try:
        path.unlink(missing_ok=True)
    except OSError as e:
        log.error("could not delete %s: %s", path, e)


def take_views(path: Path | None, epoch: str, seq: int) -> tuple[list[dict[str, Any]], str]:
    """The views written with the rows at `(epoch, seq)`, and the file gone; ([], why not)
    when there is none or it belongs to other rows."""
    if path is None or not path.exists():
        return [], "no views file (the last stop was not graceful, or not drained)"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        drop_views(path)
        return [], f"views file unreadable ({e})"
    drop_views(path)
    if not isinstance(data, dict):
        return [], "views file of an unknown form"
    pos, views = data.get("scheduler"), data.get("views")
    if data.get("version") != VERSION or not isinstance(pos, dict) or not isinstance(views, list):
        return [], "views file of an unknown form"
    if pos.get("epoch") != epoch or pos.get("seq") != seq:
        return [], "views file of other rows than the snapshot's"
    return [v for v in views if isinstance(v, dict)], ""


class WarmViews:
    """Builds a warm start's views on the snapshot's rows (see the module docstring)."""

    def __init__(self, state: HubState, pool: ShardPool, lifecycle: ViewLifecycle) -> None:
        self.state = state
        self.pool = pool
        self.lifecycle = lifecycle

    async def restore(self, entries: list[dict[str, Any]], assigned: set[str]) -> int:
        """Register the entries the scheduler assigns to this SSP (`assigned`) on their
        shards, all requests in flight at once (`ShardPool.register_all`); returns how many.
        A view whose members differ from the file's (the engine decided otherwise on the
        same rows) gets the difference published. One that cannot be built is left out:
        the scheduler sends it again after Ready, cold."""
        state = self.state
        ready: list[tuple[ViewState, set[str]]] = []
        # a sharing group's shard (`ssp.hub.sharing`): its views are not held until all are
        # built, so the first one's shard is kept here for the others
        groups: dict[str, int] = {}
        for item in entries:
            vid = str(item.get("id") or "")
            if vid not in assigned or vid in state.views:
                continue
            try:
                view, published = await self._prepare(vid, item, groups)
            except (KeyError, ValueError, TypeError, QueryRejected, DbError,
                    PermissionRefused, PermissionsUnavailable) as e:
                log.warning("warm start: view %s not restored (%s); the scheduler's "
                            "re-sending builds it", vid, e)
                continue
            groups.setdefault(view.share, view.shard)
            ready.append((view, published))
        if not ready:
            return 0
        restored = 0
        async with state.exclusive():
            built = await self.pool.register_all([v for v, _ in ready])
            for (view, published), got in zip(ready, built, strict=True):
                if isinstance(got, BaseException):
                    if not isinstance(got, (ShardError, ShardDown)):
                        raise got
                    log.warning("warm start: view %s not restored (%s); the scheduler's "
                                "re-sending builds it", view.view_id, got)
                    if isinstance(got, ShardTimeout) or (isinstance(got, ShardError)
                                                         and got.code != "rejected"):
                        self.pool.restart(view.shard, got)  # it may hold half of the view
                    continue
                view.members = got
                state.views[view.view_id] = view
                changed = published ^ got
                if changed:  # the database holds `published`: bring those edges up to date
                    state.publisher.mark(view.view_id, changed)
                restored += 1
        return restored

    async def _prepare(self, vid: str, item: dict[str, Any], groups: dict[str, int]
                       ) -> tuple[ViewState, set[str]]:
        """The view of one entry, not registered yet, and the members its edges name."""
        state = self.state
        surql = str(item["surql"])
        raw_params = item.get("params")
        params = raw_params if isinstance(raw_params, dict) else None
        auth = parse_record_id(item["auth"]) if item.get("auth") is not None else None
        published = {str(m) for m in item.get("members") or ()}
        view = self.lifecycle.new(vid, surql, params, auth, str(item.get("client_id") or ""),
                                  str(item.get("ttl") or "10m"), int(item["ttl_ms"]),
                                  int(item["last_active_ms"]),
                                  item.get("format") if isinstance(item.get("format"), str)
                                  else None,
                                  shard=groups.get(share_key(auth, surql, params)))
        view.client_ids = {str(c) for c in item.get("client_ids") or ()} or view.client_ids
        rc = item.get("row_count")
        view.row_count = rc if isinstance(rc, int) and not isinstance(rc, bool) else None
        eff = await effective_query(state, surql, parse_cached(surql), auth, params)
        view.engine_surql, view.auth_fields = eff.surql, eff.auth_fields
        return view, published
