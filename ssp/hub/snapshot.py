"""`snapshot.json` in `SVC_SSP_SNAPSHOT_DIR`: every row (canonical bytes, base64, with its
record id and `_00_rv` in lists beside them) and the feed cursors, written at each
checkpoint and at shutdown, read by a standalone changefeed SSP's warm start
(`ssp.hub.loading`). A standalone SSP over http never reads it: it cannot replay what it
missed from a position of its own. A linked SSP records the scheduler's position of those
rows (`scheduler: {epoch, seq}`, only while it is ready: a half-loaded set has no position)
and offers it when it registers (`ssp.link`): the scheduler's WAL replays from there. At a
graceful, drained stop its views go beside it (`views.json`, `ssp.hub.warmviews`)."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dbclient.clock import now_ms
from ssp.hub.warmviews import drop_views, views_path, write_views

if TYPE_CHECKING:
    from ssp.hub.state import HubState

log = logging.getLogger("ssp.hub")


def _version(rv: Any) -> int | None:
    """A row's `_00_rv` as the snapshot keeps it (the field is an int; anything else, which
    only a foreign write could leave, is kept as unknown)."""
    return rv if isinstance(rv, int) and not isinstance(rv, bool) else None


class Snapshot:
    """Writes and reads the snapshot file."""

    def __init__(self, state: HubState) -> None:
        self.state = state

    @property
    def path(self) -> Path | None:
        """The snapshot file (None: no snapshot dir configured)."""
        d = self.state.cfg.snapshot_dir
        return d / "snapshot.json" if d else None

    async def checkpoints(self) -> None:
        """Write the snapshot every `checkpoint_interval_secs`."""
        while True:
            await asyncio.sleep(self.state.cfg.checkpoint_interval_secs)
            self.write()

    @property
    def views_path(self) -> Path | None:
        """The views file beside it (`ssp.hub.warmviews`)."""
        return views_path(self.state.cfg.snapshot_dir)

    def write(self, *, views: bool = False) -> bool:
        """Write `snapshot.json` (rows, feed cursors); False when there is no usable dir.
        `views` (a graceful stop whose edges all reached the database): a linked SSP also
        writes its views beside it (`ssp.hub.warmviews`); any other write deletes them."""
        path = self.path
        if path is None:
            return False
        state = self.state
        if state.status != "ready":
            # Only a ready SSP's rows are the database's at its cursors: a bootstrap in
            # progress holds part of a table, a failed one whatever the error left, and a
            # restore that failed after the database was replaced holds rows of a database
            # that is gone (its hold deleted the file). Any file already there stays as it is.
            log.warning("snapshot not written: the SSP is %s, not ready", state.status)
            return False
        rows = state.rows
        encoded: dict[str, list[str]] = {}
        ids: dict[str, list[str]] = {}
        for t in rows.tables():
            ids[t], encoded[t] = [], []
            for rid, b in rows.entries(t):
                ids[t].append(rid)
                encoded[t].append(base64.b64encode(b).decode())
        # `ids` and `rv` stand beside `rows`, index for index, so a warm start stores each
        # row without decoding it (a snapshot without them is read the slow way).
        rv = state.rv
        data: dict[str, Any] = {
            "version": 1, "ssp_id": state.cfg.ssp_id, "written_at_ms": now_ms(),
            "cursors": state.cursor.cursors, "rows": encoded, "ids": ids,
            "rv": {t: [_version(rv.get(rid)) for rid in tids] for t, tids in ids.items()},
        }
        link = state.link
        if link is not None and link.epoch and state.status == "ready":
            # Read with the rows, no await in between: `last_seq` moves only after a batch's
            # rows are in the arena, so the rows hold at least every event up to it (events
            # after it that are in already are applied again on the way back, in order,
            # which leaves each row as the last of them made it).
            data["scheduler"] = {"epoch": link.epoch, "seq": state.last_seq}
        vpath = self.views_path
        if views and vpath is not None and "scheduler" in data:
            write_views(vpath, data["scheduler"], list(state.views.values()))
        else:
            drop_views(vpath)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(data))
            os.replace(tmp, path)
            log.info("snapshot written: %d tables", len(rows.tables()))
            return True
        except OSError as e:
            log.warning("snapshot not written (%s): running memory-only", e)
            return False

    def read_linked(self) -> tuple[dict[str, Any] | None, str]:
        """A linked SSP's snapshot with a scheduler position, or None and why not."""
        path = self.path
        if path is None:
            return None, "no snapshot dir (SVC_SSP_SNAPSHOT_DIR)"
        if not path.exists():
            return None, "no snapshot.json"
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            return None, f"snapshot unreadable ({e})"
        pos = data.get("scheduler") if isinstance(data, dict) else None
        if data.get("version") != 1 or not isinstance(pos, dict):
            return None, "the snapshot holds no scheduler position"
        epoch, seq = pos.get("epoch"), pos.get("seq")
        if not isinstance(epoch, str) or not isinstance(seq, int) or isinstance(seq, bool):
            return None, "the snapshot's scheduler position is unreadable"
        return data, ""

    def read(self) -> dict[str, Any] | None:
        """The snapshot to warm-start from (None: start cold)."""
        path = self.path
        cfg = self.state.cfg
        if (path is None or not path.exists() or cfg.ingest_transport != "changefeed"
                or self.state.link is not None):  # a linked SSP bootstraps from the scheduler
            # Over http the SSP cannot replay what it missed while down: bootstrap cold.
            return None
        try:
            data = json.loads(path.read_text())
            if data.get("version") != 1:
                return None
            return data
        except (OSError, ValueError) as e:
            log.warning("snapshot unreadable (%s): cold bootstrap", e)
            return None
