"""Ingest admission (`POST /ingest`): is the SSP ready, is there room (publication slots, the
publisher's pending work), is the body a row change (`ipc.routebodies.RowChange`), can its
record be stored (types restored for JSON, checked for the typed encoding of `ipc.typed`).
Only an admitted event reaches the sequencer; a refusal applies nothing."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol

from dbclient.commitcheck import applies_to
from dbclient.eventrecord import FIELD, typed_record
from dbclient.fieldtypes import restore_types
from engine.values import canonical_bytes, parse_record_id, record_id_text
from engine.wire import check_record, ext_hook
from ipc.messages import ErrorCode, error_reply, not_ready, reply, request_expired
from ipc.routebodies import BodyError, RowChange
from ipc.typed import decode as decode_typed
from ssp.naming import QUERY_TABLE, view_id_of
from timetext.timestamps import parse_timestamp

if TYPE_CHECKING:
    from ssp.hub.sequencer import Event, Sequencer
    from ssp.hub.state import HubState

PUBLICATION_SLOTS = 256


class RequestRows(Protocol):
    """Where a client's `_00_query` request row goes (`ssp.hub.rowrequests.RowRequests`)."""

    def seen(self, view_id: str, row: Any, posted: bool = False) -> None: ...


class Admission:
    """Admits ingest requests into the sequencer (see the module docstring)."""

    def __init__(self, state: HubState, sequencer: Sequencer) -> None:
        self.state = state
        self.sequencer = sequencer
        # Standalone over transport http: client request rows the database posts (the
        # changefeed tail has its own); set by the hub
        self.row_requests: RequestRows | None = None
        self.slots = 0  # ingest requests being applied now
        self._batch_lock = asyncio.Lock()

    def _refused(self) -> dict[str, Any] | None:
        """The 503 of an ingest that cannot be taken now (None: admitted)."""
        state = self.state
        if state.status != "ready":
            return not_ready(f"SSP is {state.status}")
        if state.stalled():
            return not_ready("database calls are timing out")
        if self.slots >= PUBLICATION_SLOTS:
            state.publisher.overload_rejections += 1
            return not_ready("all 256 publication slots are in use")
        if state.publisher.overloaded():
            state.publisher.overload_rejections += 1
            return not_ready("too many edge operations are pending publication")
        return None

    async def ingest(self, req: dict[str, Any]) -> dict[str, Any]:
        """`POST /ingest`: one event (an object) or a batch (an array, the scheduler's)."""
        refused = self._refused()
        if refused is not None:
            return refused
        if request_expired(req):
            return not_ready("request expired before the hub reached it")
        self.slots += 1  # reserved before any side effect
        try:
            body: Any = req.get("body")
            is_typed = isinstance(body, bytes)  # the typed encoding, as the client sent it
            if is_typed:
                try:
                    body = decode_typed(body, ext_hook)
                except ValueError as e:
                    return error_reply(400, ErrorCode.INVALID, f"request body: {e}")
            if isinstance(body, list):
                return await self._batch(body, typed=is_typed)
            if isinstance(body, dict) and body.get("table") == QUERY_TABLE:
                return self.query_row(body)
            try:
                event, data = self.event(body, typed=is_typed)
            except ValueError as e:
                return error_reply(400, ErrorCode.INVALID, str(e))
            await self.sequencer.submit([event], defer=self.state.cfg.ingest_transport == "http",
                                        encoded=[data])
            commits = self.state.commits
            if (commits is not None and FIELD in body
                    and applies_to(event[0], event[3])):
                # a database event's row, from inside its transaction (dbclient.commitcheck)
                commits.note(event[0], event[1], event[3], data)
            return reply(200, {"status": "ok", "seq": self.state.seq})
        finally:
            self.slots -= 1

    async def _batch(self, body: list[Any], *, typed: bool = False) -> dict[str, Any]:
        """A batched ingest (the scheduler's delivery). One admission unit: the whole batch
        holds one publication slot (a batch is one request, and the scheduler sends one batch
        at a time per SSP); the publisher's pending-work threshold still gates it as a whole.
        Every event is checked before any is applied (400 names the index, nothing applied).
        Events with `seq <= last_seq` were applied before (a redelivery) and are skipped;
        events without `seq` are always applied. `typed`: decoded from `ipc.typed` (values
        as stored, not typed again from the field definitions)."""
        state = self.state
        async with self._batch_lock:
            events = []
            encoded = []
            top = state.last_seq
            for i, ev in enumerate(body):
                seq: Any = ev.get("seq") if isinstance(ev, dict) else None
                has_seq = isinstance(seq, int) and not isinstance(seq, bool)
                if has_seq and seq <= top:
                    continue
                try:
                    event, data = self.event(ev, typed=typed)
                except BodyError as e:
                    where = f"[{i}].{e.field}" if e.field else f"[{i}]"
                    return error_reply(400, ErrorCode.INVALID, f"{where}: {e.expectation}")
                except ValueError as e:
                    return error_reply(400, ErrorCode.INVALID, f"[{i}]: {e}")
                events.append(event)
                encoded.append(data)
                if has_seq:
                    top = seq
            if events:
                await self.sequencer.submit(events, defer=state.cfg.ingest_transport == "http",
                                            encoded=encoded)
            state.last_seq = top
            return reply(200, {"accepted": len(events)})

    async def catch_up(self, data: bytes) -> dict[str, Any]:
        """A warm start's events from the scheduler (`ssp.link`): a typed batch applied as
        `/ingest` applies one, while the SSP is still bootstrapping (no gate: nothing else
        ingests then)."""
        try:
            body = decode_typed(data, ext_hook)
        except ValueError as e:
            return error_reply(400, ErrorCode.INVALID, f"catch-up batch: {e}")
        if not isinstance(body, list):
            return error_reply(400, ErrorCode.INVALID, "catch-up batch: not an array")
        return await self._batch(body, typed=True)

    def query_row(self, body: dict[str, Any]) -> dict[str, Any]:
        """A `_00_query` row a database event posted (transport http, standalone): a client's
        request to register a view, handed to the row requests as the changefeed tail hands
        the rows it reads; never a row of the engine's."""
        requests = self.row_requests
        if requests is None:
            return error_reply(400, ErrorCode.INVALID,
                               "table: _00_query rows are read from the changefeed here")
        try:
            change = RowChange.from_body(body)
            row = typed_record(body) or change.record
            view_id = view_id_of(parse_record_id(change.id))
        except ValueError as e:
            return error_reply(400, ErrorCode.INVALID, str(e))
        if change.op != "DELETE":
            requests.seen(view_id, row, posted=True)
        return reply(200, {"status": "ok", "seq": self.state.seq})

    def event(self, body: Any, *, typed: bool = False) -> tuple[Event, bytes]:
        """The sequencer's event of one ingest body, with its row's canonical bytes (made to
        check that the row can be stored; the sequencer stores them as they are);
        ValueError (BodyError naming the field, or `record: ...`) when it cannot be
        applied."""
        change = RowChange.from_body(body)
        try:
            record = change.record
            if not typed:  # a database event's post carries its row typed as well
                cbor_row = typed_record(body)
                if cbor_row is not None:
                    record, typed = cbor_row, True
            record = self.restore_types(change.table, change.id, record, typed=typed)
            data = canonical_bytes(record)  # refuse what cannot be stored, before sequencing
        except (ValueError, TypeError, OverflowError, RecursionError) as e:
            # A record nested deeper than Python recurses is bad input too, not a 500.
            why = "nested too deeply" if isinstance(e, RecursionError) else str(e)
            raise ValueError(f"record: {why}") from None
        return (change.table, change.op, record_id_text(record["id"]), record), data

    def restore_types(self, table: str, rid: str, record: dict[str, Any], *,
                      typed: bool = False) -> dict[str, Any]:
        """A JSON ingest record with its record links and datetimes typed again from the
        table's field definitions; a `typed` one (`ipc.typed`) as it came, its id checked."""
        if typed:
            return check_record(table, rid, record)
        return restore_types(table, rid, record, self.state.field_types.get(table, {}),
                             parse_datetime=parse_timestamp)
