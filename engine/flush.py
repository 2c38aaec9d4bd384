"""The flush: what an ingest call's writes left pending becomes the views' deltas.

A write (:mod:`engine.write`) only notes what it reached in :class:`Pending`: implicit
circuits with changed rows, explicit materialisations whose window moved, projection groups
with rows to re-examine. When the call ends, :func:`settle` turns that into deltas once per
call (so ``ingest_batch`` yields the net change), in named steps:

1. :func:`_classify`: each changed row of an implicit circuit once for all its
   materialisations (shown before and after, left, entered);
2. :func:`_reproject`: projection groups re-project, project or drop their rows once;
3. :func:`_row_events` and :func:`_changed_projections`: the row events per circuit, with
   the rows whose projection changed while their membership did not;
4. :func:`_emit_events` (one event: :func:`_emit`, a delta per class of materialisations)
   and :func:`_window_entries`: the entries per materialisation; :func:`_regroup` moves
   grouped rows between their groups;
5. :func:`_deltas`: one delta per materialisation (shared when the members are clean);
6. :func:`_finish`: the pending state is cleared for the next call.

``out`` collects (view ids, delta) parts, each materialisation (so each view) in one part at
most: a materialisation belongs to one circuit, an implicit circuit's single row event
reaches its materialisations through :func:`_emit` (in one class each), and every other
materialisation through one ``acc`` entry.
"""

from __future__ import annotations

from collections.abc import Collection
from itertools import chain
from operator import attrgetter
from typing import Any

from engine import join
from engine.circuit import Circuit, Mat, WMat
from engine.delta import MANY, ViewDelta, apply_counts, counted_delta, merge_clean, owner_delta
from engine.membership import count_members
from engine.proj import Proj
from engine.store import Store

_VT = attrgetter("vt")
_chain = chain.from_iterable
_VCACHE_MAX = 1024  # lists of materialisations whose views are kept (see _emit)
_UNSEEN = object()  # no delta computed yet for these entries (see _deltas)
_NOT_CLEAN = object()  # entries whose delta depends on the materialisation

Parts = list[tuple[Collection[str], ViewDelta]]
Move = tuple[Circuit, str, list[Mat], list[Mat], list[Mat]]
Events = dict[Circuit, list[tuple[str, list[Mat], list[Mat], list[Mat]]]]


class Pending:
    """What the writes of one ingest call reached, for the flush at its end."""

    def __init__(self) -> None:
        self.circuits: set[Circuit] = set()
        self.mats: set[WMat] = set()
        self.projs: set[Proj] = set()
        # the views of a list of materialisations (a row event reaches the same prefix of a
        # range index again and again): tuple of mats -> view ids; cleared whenever a view
        # registers or unregisters, so it never names a stale view
        self.vcache: dict[tuple[Mat, ...], dict[str, None]] = {}

    def any(self) -> bool:
        """Whether a flush has something to settle."""
        return bool(self.circuits or self.mats or self.projs)

    def mark(self, proj: Any, rid: str, token: Any) -> None:
        """A projected row read ``token``, which changed: re-examine it at the flush. The
        reader may be a join window cached with what its rows read (engine.join.Win): it
        notes the row ``rid`` of it that read the token (or is detached) and marks its own
        parents."""
        if type(proj) is not Proj:
            proj.stale(self.mark, rid)
            return
        p: Proj = proj  # typed: the compiled engine calls Proj.mark natively
        p.mark(rid, token)
        self.projs.add(p)

    def clear(self) -> None:
        self.circuits = set()
        self.mats = set()
        self.projs = set()
        self.vcache = {}


def settle(pending: Pending, store: Store, grouped: bool, out: Parts) -> None:
    """Turn what ``pending`` holds into (view ids, delta) parts appended to ``out``."""
    # containers are replaced only when used: a flush runs once per ingest call
    circuits = pending.circuits
    if circuits:
        pending.circuits = set()
    wmats = pending.mats
    if wmats:
        pending.mats = set()
    projs = pending.projs
    if projs:
        pending.projs = set()
    else:
        projs = set()
    try:
        moves = _classify(circuits, projs)
        _reproject(projs)
    finally:
        # the windows' edits reached their parents; a flush that failed half way must not
        # leave its log to the next one (a parent would take an old edit for a new one)
        if join.EDITS:
            join.EDITS.clear()
    events = _row_events(moves)
    acc: dict[Mat, Any] = {}
    _changed_projections(projs, events, acc)
    _emit_events(pending, store, events, acc, out)
    _window_entries(wmats, acc)
    if grouped:
        _regroup(events, acc)
    used = _deltas(store, acc, projs, out) if acc else projs
    _finish(circuits, used, wmats)


def _classify(circuits: set[Circuit], projs: set[Proj]) -> list[Move]:
    """Step 1: classify each changed row of an implicit circuit once for all its
    materialisations; the groups projecting a moved row are marked (added to ``projs``)."""
    moves: list[Move] = []
    for c in circuits:
        rows = c.rows
        held_now = c.held_now
        cprojs = c.projs.values()
        for rid, r0 in c.changed.items():
            st, le, en = c.classify(r0, rows.get(rid))
            if st or le or en:
                held_now[rid] = bool(st or en)
                moves.append((c, rid, st, le, en))
                for proj in cprojs:
                    proj.mark_row(rid, r0)
                    projs.add(proj)
    return moves


def _reproject(projs: set[Proj]) -> None:
    """Step 2: re-project, project or drop the groups' marked rows once (`held` notes the
    materialisations showing each row in the circuit's `matched`, read by step 3)."""
    for proj in projs:
        matched = proj.circuit.matched
        if matched:
            matched.clear()
    for proj in projs:
        if proj.dirty:
            proj.process(proj.circuit.held)


def _row_events(moves: list[Move]) -> Events:
    """Step 3: the row events of implicit circuits, per circuit in order: (row, shown before
    and after, left, entered)."""
    events: Events = {}
    for c, rid, st, le, en in moves:
        evs = events.get(c)
        if evs is None:
            events[c] = [(rid, st, le, en)]
        else:
            evs.append((rid, st, le, en))
    return events


def _changed_projections(projs: set[Proj], events: Events, acc: dict[Mat, Any]) -> None:
    """Step 3, continued: rows whose projection changed while their membership did not (a
    row they read was written): an event shown before and after for an implicit circuit's
    materialisations, an entry for an explicit one's."""
    touch = _touch
    for proj in projs:
        recs = proj.recs
        if not recs:
            continue
        c = proj.circuit
        explicit = c.explicit
        changed = c.changed
        for rid, rec in recs.items():
            if (not explicit and rid in changed) or not rec.changed():
                continue
            row = c.rows.get(rid)
            if row is None:
                continue
            if explicit:
                for m in c.candidates(row):
                    if m.proj is proj and rid in m.visible and rid not in m.vis0:
                        touch(acc, m, rid, True, True)
            else:
                ms = c.matched.get(rid)
                if ms is None:
                    ms = c.matching(row)
                if len(c.projs) > 1:
                    ms = [m for m in ms if m.proj is proj]
                evs = events.get(c)
                if evs is None:
                    events[c] = [(rid, ms, [], [])]
                else:
                    evs.append((rid, ms, [], []))


def _emit_events(pending: Pending, store: Store, events: Events, acc: dict[Mat, Any],
                 out: Parts) -> None:
    """Step 4: a circuit's single row event straight to deltas (:func:`_emit`); several (a
    batch) to entries per materialisation, in event order."""
    acc_get = acc.get
    for c, evs in events.items():
        if len(evs) == 1:
            # one row event: every materialisation gets at most one entry
            _emit(pending, store, c, *evs[0], out)
            continue
        # a change reaches every materialisation of a range prefix, so this loop is the
        # batch's hottest (inline, the row's change tested once when one group serves)
        only = next(iter(c.projs.values())) if len(c.projs) == 1 else None
        for rid, st, le, en in evs:
            if st:
                if only is not None:
                    held = only.recs.get(rid)
                    if held is None or not held.changed():
                        st = []
                else:
                    st = [m for m in st if (h := m.proj.recs.get(rid)) is not None
                          and h.changed()]
            for ms, ent in ((st, (rid, True, True)), (le, (rid, True, False)),
                            (en, (rid, False, True))):
                for m in ms:
                    cur = acc_get(m)
                    if cur is None:
                        acc[m] = ent
                    elif type(cur) is tuple:
                        acc[m] = [cur, ent]
                    else:
                        cur.append(ent)


def _window_entries(wmats: set[WMat], acc: dict[Mat, Any]) -> None:
    """Step 4, explicit materialisations: the rows whose visibility moved in their window."""
    touch = _touch
    for m in wmats:
        vis = m.visible
        for rid, was in m.vis0.items():
            now = rid in vis
            if was or now:
                touch(acc, m, rid, was, now)


def _deltas(store: Store, acc: dict[Mat, Any], projs: set[Proj], out: Parts) -> set[Proj]:
    """Step 5: one delta per materialisation with entries (a shared object when every member
    involved is clean); returns the projection groups used, to finish."""
    used = set(projs)
    # materialisations with the same entries share the delta when every row's members are
    # clean (it depends on the rows alone): in a batch, those of one range prefix all have
    # the same entries
    merged: dict[tuple[Proj, tuple[Any, ...]], Any] = {}
    # per group, entry -> (row's members clean, its delta): a batch's entry reaches many
    # materialisations
    parts: dict[Proj, dict[tuple[str, bool, bool], Any]] = {}
    for m, e in acc.items():
        proj = m.proj
        used.add(proj)
        if type(e) is tuple:
            rec = proj.rec(e[0])
            if rec.clean:
                d = rec.delta(e[1], e[2])
                if m.cnt is not None:
                    apply_counts([e], proj.rec, m.cnt)
            else:
                d = _counted(store, m, [e])
        else:
            key = (proj, tuple(e))
            got = merged.get(key, _UNSEEN)
            if got is _UNSEEN:
                part = parts.get(proj)
                if part is None:
                    part = parts[proj] = {}
                ds = []
                for ent in e:
                    p = part.get(ent)
                    if p is None:
                        r = proj.rec(ent[0])
                        p = part[ent] = (r.clean, r.delta(ent[1], ent[2]))
                    if not p[0]:
                        break
                    if p[1] is not None:
                        ds.append(p[1])
                else:
                    got = merge_clean(ds)
                if got is _UNSEEN:
                    got = _NOT_CLEAN
                merged[key] = got
            if got is _NOT_CLEAN:
                d = _counted(store, m, e)
            else:
                d = got
                if m.cnt is not None:
                    apply_counts(e, proj.rec, m.cnt)
        if d is not None:
            out.append((m.vt, d))
    return used


def _finish(circuits: set[Circuit], used: set[Proj], wmats: set[WMat]) -> None:
    """Step 6: clear what the flush read, for the next call."""
    for c in circuits:
        c.changed.clear()
        c.held_now.clear()
    for proj in used:
        proj.finish()
        matched = proj.circuit.matched
        if matched:
            # valid for this flush only: `held` trusts it (an unregistration asks it next)
            matched.clear()
    for m in wmats:
        m.vis0.clear()


def _emit(pending: Pending, store: Store, c: Circuit, rid: str, st: list[Mat],
          le: list[Mat], en: list[Mat], out: Parts) -> None:
    """Deltas of one row event of an implicit circuit: each class of materialisations
    (shown before and after, left, entered) shares one delta when the row's members
    are clean."""
    single = len(c.projs) == 1
    rec = None
    if single:
        rec = next(iter(c.projs.values())).recs.get(rid)
        if rec is None:
            return
    for ms, was, now in ((st, True, True), (le, True, False), (en, False, True)):
        if not ms:
            continue
        if rec is not None and rec.clean:
            d = rec.delta(was, now)
            if c.counted:
                for m in ms:
                    if m.cnt is not None:
                        apply_counts([(rid, was, now)], m.proj.rec, m.cnt)
            if d is not None:
                if len(ms) == 1:
                    out.append((ms[0].vt, d))
                else:
                    # a change can reach hundreds of materialisations: their views are
                    # gathered once per list and reused while no view (un)registers
                    key = tuple(ms)
                    vcache = pending.vcache
                    views = vcache.get(key)
                    if views is None:
                        if len(vcache) >= _VCACHE_MAX:
                            vcache.clear()
                        views = vcache[key] = dict.fromkeys(_chain(map(_VT, ms)))
                    out.append((views, d))
            continue
        for m in ms:
            proj = m.proj
            r = proj.recs.get(rid)
            if r is None or (was and now and not r.changed()):
                continue
            if r.clean:
                d = r.delta(was, now)
                if m.cnt is not None:
                    apply_counts([(rid, was, now)], proj.rec, m.cnt)
            else:
                d = _counted(store, m, [(rid, was, now)])
            if d is not None:
                out.append((m.vt, d))


def _counted(store: Store, m: Mat, entries: list[tuple[str, bool, bool]]) -> ViewDelta | None:
    """The delta of a materialisation whose entries hold members other rows may hold too:
    from the rows holding each member when they are few, else through its member counts
    (engine.delta.counted_delta), counted now if it has none yet."""
    cnt = m.cnt
    fresh = cnt is None
    proj = m.proj
    if cnt is None:
        # few rows hold each member (a comment moving to another thread): ask them
        d = owner_delta(entries, proj.rec, proj.owners, m.holds_start, m.holds_now)
        if d is not MANY:
            return d
        cnt = count_members(store, m)
    return counted_delta(entries, proj.rec, cnt, fresh, m.holds_start, m.holds_now)


def _regroup(events: Events, acc: dict[Mat, Any]) -> None:
    """Move the flush's rows between the groups of grouped materialisations: each entry
    (row, shown before, shown now) takes its old contribution out and puts the new one in
    (engine.aggregate)."""
    for c, evs in events.items():
        if c.agg is None:
            continue
        for rid, st, le, en in evs:
            for ms, was, now in ((st, True, True), (le, True, False), (en, False, True)):
                for m in ms:
                    _regroup_row(m, rid, was, now)
    for m, e in acc.items():
        if m.agg is None or not isinstance(m, WMat):
            continue  # implicit materialisations came through their events
        for ent in ([e] if type(e) is tuple else e):
            _regroup_row(m, ent[0], ent[1], ent[2])


def _regroup_row(m: Mat, rid: str, was: bool, now: bool) -> None:
    rec = m.proj.rec(rid)
    old = rec.t0.get(rid) if was else None
    new = rec.t1.get(rid) if now else None
    if old is new:
        return
    state = m.agg
    assert state is not None
    state.move(rid, old, new)


def _touch(acc: dict[Mat, Any], m: Mat, rid: str, was: bool, now: bool) -> None:
    cur = acc.get(m)
    if cur is None:
        acc[m] = (rid, was, now)
    elif type(cur) is tuple:
        acc[m] = [cur, (rid, was, now)]
    else:
        cur.append((rid, was, now))


def gather(parts: Parts) -> dict[str, ViewDelta]:
    """The deltas by view id from (view ids, delta) parts (a view is in one part at most, see
    :func:`settle`): one dict built in place instead of merging one temporary dict per part."""
    if not parts:
        return {}
    views, d = parts[0]
    out = dict.fromkeys(views, d)
    for views, d in parts[1:]:
        for v in views:
            out[v] = d
    return out
