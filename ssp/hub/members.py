"""Which views hold each member: what a DELETE event needs to put back the edges the database
took along.

SurrealDB deletes every edge pointing at a record inside the transaction that deletes it. A
view may hold that record as a member after the batch all the same: it was deleted and created
again within the batch (the engine nets the pair to "no change"), or it is a member by
reference (a record link the view follows, an id inside another row's data) that its own
deletion does not remove. No delta names it then, so `Sequencer.deliver` marks it, in every
view this index lists for it, after the batch's deltas are applied: the publisher writes the
edge again when it is still a member (and does nothing more when it is not).

The index follows `view.members` through the three ways they change: the registry (a view
added, replaced or removed: `ssp.hub.state.ViewRegistry`), a delta (`Sequencer.deliver`) and a
registration on a shard (`ShardPool.register`). A member held by one view (the usual case)
costs a dict entry pointing at the view id; a set only when several views hold it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator


class MemberIndex:
    """member (record id text) -> the ids of the views holding it."""

    def __init__(self) -> None:
        self._views: dict[str, str | set[str]] = {}

    def __len__(self) -> int:
        return len(self._views)

    def add(self, view_id: str, members: Iterable[str]) -> None:
        """`view_id` holds `members` (from now on)."""
        index = self._views
        get = index.get
        for m in members:
            cur = get(m)
            if cur is None:
                index[m] = view_id
            elif cur.__class__ is str:
                if cur != view_id:
                    index[m] = {cur, view_id}
            else:
                cur.add(view_id)  # type: ignore[union-attr]

    def remove(self, view_id: str, members: Iterable[str]) -> None:
        """`view_id` no longer holds `members`."""
        index = self._views
        for m in members:
            cur = index.get(m)
            if cur is None:
                continue
            if isinstance(cur, str):
                if cur == view_id:
                    del index[m]
                continue
            cur.discard(view_id)
            if len(cur) == 1:
                index[m] = next(iter(cur))

    def views_of(self, member: str) -> Iterator[str]:
        """The ids of the views holding `member`."""
        cur = self._views.get(member)
        if cur is None:
            return iter(())
        return iter((cur,)) if isinstance(cur, str) else iter(tuple(cur))

    def clear(self) -> None:
        self._views.clear()
