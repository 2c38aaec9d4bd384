"""Delivery of WAL events to the SSPs: the in-order hand-off to every entry's queue (with the
buffer limits), one sender per SSP posting typed batches with capped backoff, and the
`_00_query` delete rule (see `scheduler.core`)."""

from __future__ import annotations

import json
import logging
from typing import Any

import aiohttp

from dbclient import DbError
from dbclient.viewrows import (
    REFUSAL_SQL,
    Placing,
    committed_row,
    identity_of,
    is_request,
    refusal,
    registration_body,
    too_many,
)
from engine.jsonvalues import json_default
from engine.values import RecordID
from ipc import typed
from ipc.backoff import Backoff
from ipc.messages import ErrorCode, error_body
from ipc.routebodies import BodyError, ViewRegistration
from scheduler.config import IngestTransport
from scheduler.entries import (
    _BACKOFF_MAX,
    _BACKOFF_MIN,
    BATCH_MAX,
    LAGGING_HARD_LIMIT_FACTOR,
    Outbound,
    Reply,
    SspEntry,
    SspState,
    _query_record,
)
from scheduler.placement import Placement
from scheduler.roster import Roster
from scheduler.state import CoordinatorState

log = logging.getLogger("scheduler")


class Delivery:
    """Hands events to the SSP queues and posts them."""

    def __init__(self, s: CoordinatorState, roster: Roster, placement: Placement) -> None:
        self.s = s
        self.roster = roster
        self.placement = placement
        self._row_requests: set[str] = set()  # view keys being registered from their rows
        self._placing = Placing()

    def publish(self, seq: int, event: dict[str, Any]) -> None:
        st = self.s
        st.ingested += 1
        pending = st.pending
        pending[seq] = event
        while st.next_pub in pending:
            s = st.next_pub
            self._deliver(s, pending.pop(s))
            st.next_pub += 1

    def _deliver(self, seq: int, event: dict[str, Any]) -> None:
        out = Outbound(seq, event)
        limit = self.s.cfg.max_buffer_per_ssp
        for e in list(self.s.entries.values()):
            if e.flagged is not None or seq <= e.snapshot_seq:
                continue
            e.queue.append(out)
            if len(e.queue) > limit:
                if e.state is SspState.BOOTSTRAPPING or e.state is SspState.REPLAYING:
                    self.roster.flag_ssp(e.ssp_id, f"buffer overflow: more than {limit} events "
                                  "queued", True)
                    continue
                if e.state is SspState.READY:
                    e.state = SspState.LAGGING
                    log.warning("SSP %s lagging: more than %d events wait to be sent",
                                e.ssp_id, limit)
                if len(e.queue) > limit * LAGGING_HARD_LIMIT_FACTOR:
                    self.roster.flag_ssp(e.ssp_id, f"lagging: more than "
                                  f"{limit * LAGGING_HARD_LIMIT_FACTOR} events queued", True)
                    continue
            if e.state is not SspState.BOOTSTRAPPING:
                e.wake.set()
        if event["table"] == "_00_query" and event["op"] == "DELETE":
            record = _query_record(event["id"])
            if record is not None:
                self.s.spawn(self._unregister_if_gone(record), f"query-delete-query:{record.id!s}")
        elif event["table"] == "_00_query" and is_request(event.get("record")):
            record = _query_record(event["id"])
            if record is not None and str(record.id) not in self._row_requests:
                self._row_requests.add(str(record.id))
                # over http the event is posted before its write commits (`committed_row`)
                posted = (event.get("record")
                          if self.s.cfg.ingest_transport is IngestTransport.HTTP else None)
                self.s.spawn(self._register_row(record, posted),
                             f"query-row-query:{record.id!s}")

    async def _register_row(self, record: RecordID, posted: Any = None) -> None:
        """A `_00_query` row a record user created (`dbclient.viewrows`): registered as `POST
        /view/register` would; a refusal (4xx) written back onto the row; a 5xx (no SSP
        ready) leaves it a request, registered again on the row's next change."""
        view_id = f"query:{record.id!s}"
        try:
            # The row as it is now: the feed may be behind (registered, refused or deleted);
            # a posted row once its write committed.
            row = await committed_row(lambda: self.s.db.query_one(
                "SELECT * FROM ONLY $q", {"q": record}), posted)
            if not is_request(row):
                return
            body = registration_body(view_id, row)
            who = identity_of(body)
            limit = self.s.cfg.row_views_per_user
            try:
                ViewRegistration.from_body(body)
            except BodyError as e:
                reply = Reply(400, error_body(ErrorCode.INVALID, str(e)))
            else:
                held = 0
                if who is not None and self.s.tracker.get(view_id) is None:
                    held = len([1 for _vid, entry in self.s.tracker.items()
                                if identity_of(entry["body"]) == who])
                    held += self._placing.others(who, view_id)
                if held >= limit:
                    await self.s.db.query(REFUSAL_SQL, {"q": record, "e": too_many(limit)})
                    return
                self._placing.start(who, view_id)
                try:
                    reply = await self.placement.register_view(view_id, body)
                finally:
                    self._placing.done(who, view_id)
            if reply.status == 200:
                return
            if reply.status >= 500:
                log.info("view %s from its row: %d, left for its next change", view_id,
                         reply.status)
                return
            answer: Any = reply.body
            if reply.raw is not None:
                try:
                    answer = json.loads(reply.raw)
                except ValueError:
                    answer = reply.raw[:500].decode(errors="replace")
            await self.s.db.query(REFUSAL_SQL, {"q": record, "e": refusal(reply.status, answer)})
        except DbError as e:
            log.warning("view %s from its row: database call failed (%s)", view_id, e)
        finally:
            self._row_requests.discard(str(record.id))

    async def _unregister_if_gone(self, record: RecordID) -> None:
        """The unregister rule for a `_00_query` DELETE from the feed: the view goes, unless
        its row exists again. The feed delivers the delete after its commit, possibly seconds
        later; a client that re-registered the same id meanwhile has a row again (its SSP
        writes it at registration), and that registration must not be undone."""
        view_id = f"query:{record.id!s}"
        try:
            back = await self.s.db.query("SELECT VALUE id FROM $q", {"q": record})
            if back and back[0]:
                log.info("view %s was registered again after its row's delete; kept", view_id)
                return
        except DbError as e:
            log.info("cannot tell whether %s was registered again (%s); unregistering",
                     view_id, e)
        self.placement.unregister_view(view_id)

    # ------------------------------------------------------------------ sending
    async def send_loop(self, e: SspEntry) -> None:
        backoff = Backoff(_BACKOFF_MIN, cap=_BACKOFF_MAX)
        limit = min(self.s.cfg.bootstrap_chunk_size, BATCH_MAX)
        chunk = limit
        while True:
            await e.wake.wait()
            e.wake.clear()
            while e.queue and e.state is not SspState.BOOTSTRAPPING and e.flagged is None:
                batch = [e.queue[i] for i in range(min(chunk, len(e.queue)))]
                status = await self._post_batch(e, batch)
                if status == 413 and len(batch) > 1:
                    # Over the SSP's body limit: halve the batch until it fits (and grow
                    # back to the configured size once batches pass again).
                    chunk = max(1, len(batch) // 2)
                    continue
                if status == 413:
                    status = 400  # one event the SSP can never take: as malformed
                if status == 200:
                    chunk = min(limit, chunk * 2)
                if status == 200 or status == 400:
                    for _ in batch:
                        e.queue.popleft()
                    e.sent_seq = batch[-1].seq
                    e.send_failures = 0
                    backoff.reset()
                    if status == 400:
                        # Sending it again gets the same answer, and skipping it would leave
                        # the SSP's views silently wrong: it re-bootstraps from the replica,
                        # which holds these events.
                        self.s.dropped_batches += 1
                        self.roster.flag_ssp(e.ssp_id, f"an ingest batch (seq {batch[0].seq}-"
                                      f"{batch[-1].seq}) was refused as malformed", True)
                        break
                    if e.state is SspState.LAGGING and not e.queue:
                        e.state = SspState.READY
                        log.info("SSP %s caught up (sent through seq %d)", e.ssp_id,
                                 e.sent_seq)
                else:
                    e.send_failures += 1
                    await backoff.sleep()
            if e.state is SspState.REPLAYING and not e.queue and e.flagged is None:
                e.state = SspState.READY
                e.was_ready = True
                log.info("SSP %s ready (sent through seq %d)", e.ssp_id, e.sent_seq)
                self.s.spawn(self.placement.resend_views(e), f"views-{e.ssp_id}")

    async def _post_batch(self, e: SspEntry, batch: list[Outbound]) -> int:
        assert self.s.session is not None
        try:
            if e.typed:
                data = typed.encode_batch([o.wire() for o in batch])
            else:
                data = json.dumps([{**o.event, "seq": o.seq} for o in batch],
                                  default=json_default, separators=(",", ":")).encode()
        except (TypeError, ValueError) as err:  # a value with no such form: it never will
            log.error("a batch for SSP %s (seq %d-%d) cannot be encoded, dropped: %s",
                      e.ssp_id, batch[0].seq, batch[-1].seq, err)
            return 400
        ctype = typed.CONTENT_TYPE if e.typed else "application/json"
        try:
            async with self.s.session.post(f"{e.url}/ingest", data=data,
                                          headers={**e.auth, "Content-Type": ctype}) as r:
                status, text = r.status, await r.text()
        except (aiohttp.ClientError, TimeoutError) as err:
            log.info("SSP %s unreachable for ingest (%s); retrying", e.ssp_id,
                     type(err).__name__)
            return 0
        if e.typed and status in (400, 415) and "Content-Type must be" in text:
            # An SSP of an older release: it still gets every event, as JSON (a schemaless
            # link or datetime then reaches it as text, as before).
            log.warning("SSP %s does not take %s (%d: %.200s); sending it JSON", e.ssp_id,
                        typed.CONTENT_TYPE, status, text)
            e.typed = False
            return await self._post_batch(e, batch)
        if status == 400:
            log.error("SSP %s refused a batch of %d events (seq %d-%d) as malformed, "
                      "dropped: %.300s", e.ssp_id, len(batch), batch[0].seq, batch[-1].seq,
                      text)
        elif status != 200:
            log.info("SSP %s answered %d to a batch; retrying", e.ssp_id, status)
        return status
