"""The one mapping of the hub's failures to replies: what a route answers when the database,
the row arena or a shard fails under it. `ssp.hub.routes` applies `failure_reply` to every
route; the registration applies `shard_refusal` (a shard's verdict on one view)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from dbclient import DbError, DbQueryError, DbTimeout
from dbclient.errors import retryable
from ipc.messages import ErrorCode, error_reply, not_ready
from ssp.shards import ShardDown, ShardError, ShardTimeout

log = logging.getLogger("ssp.hub")


class RowArenaFull(Exception):
    """The hub's row arena could not grow: the events were not applied and the SSP is failed
    (answered 503 `SSP_NOT_READY`, so the sender keeps them)."""


def failure_reply(route: str, e: Exception) -> dict[str, Any] | None:
    """The reply for a failure that escaped a route (None: not ours to answer, re-raise):
    a database timeout, a lost write conflict or a full arena is 503 (retry later), another
    database error 500."""
    if isinstance(e, DbTimeout):
        return not_ready(f"database call timed out: {e}")
    if isinstance(e, RowArenaFull):
        return not_ready(str(e))
    if isinstance(e, DbQueryError) and retryable(e):
        # a write conflict rolled the call back whole: transient, the sender tries again
        return not_ready(f"the database reported a write conflict: {e}")
    if isinstance(e, DbError):
        log.warning("%s failed on the database: %s", route, e)
        return error_reply(500, ErrorCode.INTERNAL, f"database error: {e}")
    return None


def shard_refusal(e: ShardError | ShardDown, vid: str, kept: str,
                  restart: Callable[[int, BaseException], None], shard: int) -> dict[str, Any]:
    """The reply when view `vid`'s shard did not register it (`kept`: what the refusal adds
    when the id is held). A shard that failed unexpectedly or timed out may hold a
    half-applied change: it is restarted (`restart(shard, e)`) and rebuilt."""
    if isinstance(e, ShardError):
        if e.code == "rejected":
            return error_reply(400, ErrorCode.REJECTED, f"{e.message}{kept}")
        restart(shard, e)
        return error_reply(400, ErrorCode.INVALID,
                           f"the shard could not register view {vid}: {e.message}{kept}")
    if isinstance(e, ShardTimeout):
        restart(shard, e)
    return not_ready(f"the view's shard is restarting: {e}{kept}")
