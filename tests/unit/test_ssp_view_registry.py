"""The hub's view registry keeps each sharing group beside the views (ssp.hub.state), so a
registration finds its group without scanning every held view: every way of adding,
replacing or removing a view must keep the groups equal to a scan."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

from surrealdb import RecordID

from ssp.hub.sharing import peers, share_key, subscribers
from ssp.hub.state import ViewRegistry, ViewState


def _view(vid: str, share: str, client: str = "c") -> ViewState:
    return ViewState(view_id=vid, record=RecordID("_00_query", vid), edge_table="_00_list_ref",
                     auth=None, members=set(), generation=0, client_ids={client},
                     client_id=client, share=share)


def _scan(reg: ViewRegistry) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for vid, v in reg.items():
        out.setdefault(v.share, set()).add(vid)
    return out


def _groups(reg: ViewRegistry) -> dict[str, set[str]]:
    return {k: set(g) for k, g in reg.groups.items()}


def test_groups_follow_every_mutation() -> None:
    reg = ViewRegistry()
    reg["a"] = _view("a", "k1")
    reg["b"] = _view("b", "k1")
    reg["c"] = _view("c", "k2")
    assert _groups(reg) == {"k1": {"a", "b"}, "k2": {"c"}}
    reg["b"] = _view("b", "k2")  # the same id registered again with another query
    assert _groups(reg) == {"k1": {"a"}, "k2": {"b", "c"}}
    assert reg.pop("a").view_id == "a"
    assert reg.pop("a", None) is None
    assert _groups(reg) == {"k2": {"b", "c"}}  # an empty group is dropped
    del reg["c"]
    reg.setdefault("d", _view("d", "k3"))
    reg.setdefault("d", _view("d", "other"))  # held: unchanged
    reg.update({"e": _view("e", "k3")})
    assert _groups(reg) == {"k2": {"b"}, "k3": {"d", "e"}}
    vid, _ = reg.popitem()
    assert vid not in {m for g in reg.groups.values() for m in g}
    reg.clear()
    assert reg.groups == {} and not reg


def test_random_mutations_keep_groups_equal_to_a_scan() -> None:
    r = random.Random(5)
    reg = ViewRegistry()
    for _ in range(3000):
        vid = f"v{r.randrange(60)}"
        op = r.random()
        if op < 0.5:
            reg[vid] = _view(vid, f"k{r.randrange(8)}")
        elif op < 0.8:
            reg.pop(vid, None)
        elif op < 0.9 and vid in reg:
            del reg[vid]
        elif op < 0.95:
            reg.setdefault(vid, _view(vid, f"k{r.randrange(8)}"))
        elif reg and r.random() < 0.5:
            reg.popitem()
        assert _groups(reg) == _scan(reg)


def test_peers_and_subscribers_read_the_group() -> None:
    reg = ViewRegistry()
    key = share_key(RecordID("user", 1), "SELECT * FROM post", {"x": 1})
    other = share_key(RecordID("user", 2), "SELECT * FROM post", {"x": 1})
    for vid, share, client in (("q2", key, "c1"), ("q1", key, "c2"), ("q3", other, "c1"),
                               ("q4", key, "c1")):
        reg[vid] = _view(vid, share, client)
    state: Any = SimpleNamespace(views=reg)
    assert [v.view_id for v in peers(state, key)] == ["q1", "q2", "q4"]
    assert [v.view_id for v in peers(state, key, exclude="q2")] == ["q1", "q4"]
    assert peers(state, "nobody") == []
    assert subscribers(state, reg["q1"]) == 2  # c1 and c2
    assert subscribers(state, reg["q3"]) == 1
    # a view not held yet (a registration in progress) counts with its group
    assert subscribers(state, _view("q9", key, "c3")) == 3
