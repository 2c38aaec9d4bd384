"""`ssp.crdt` without a database: body validation, `@crdt` detection, the LRU, and that a
refused Loro input is a 400 while an interrupt still propagates."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from loro import LoroDoc

from ssp.config import ConfigError, SspConfig
from ssp.crdt import Apply, CrdtFields, Refused, _Entry, _loro_call, detect

GOOD = base64.b64encode(b"\x01\x02").decode()
DB_ENV = {"SVC_DB_URL": "ws://127.0.0.1:1/rpc", "SVC_DB_USER": "root", "SVC_DB_PASS": "pw"}


def test_body_validation() -> None:
    a = Apply.from_body({"id": "doc:1", "field": "body", "update": GOOD.rstrip("="),
                         "table": "doc"})
    assert (a.rid, a.table, a.field, a.update, a.version) == ("doc:1", "doc", "body",
                                                              b"\x01\x02", None)
    url_safe = base64.urlsafe_b64encode(b"\xfb\xff").decode()
    assert Apply.from_body({"id": "d:⟨a b⟩", "field": "f", "update": url_safe}).update == \
        b"\xfb\xff"
    bad: list[Any] = [
        [], {"field": "body", "update": GOOD}, {"id": "doc", "field": "body", "update": GOOD},
        {"id": "a-b:1", "field": "body", "update": GOOD},
        {"id": "doc:1", "field": "body.x", "update": GOOD},
        {"id": "doc:1", "field": "body", "update": "@@"},
        {"id": "doc:1", "field": "body", "update": ""},
        {"id": "doc:1", "field": "body", "update": 5},
        {"id": "doc:1", "field": "body", "update": GOOD, "table": "other"},
        {"id": "doc:1", "field": "body", "update": GOOD, "version": 3},
    ]
    for body in bad:
        with pytest.raises(Refused) as e:
            Apply.from_body(body)
        assert e.value.status == 400


def test_detection_reads_field_comments() -> None:
    structure = {"fields": [{"name": "body", "comment": "shared text @crdt"},
                            {"name": "title", "comment": "plain"}, {"name": "n"},
                            {"name": "a.b", "comment": "@crdt"}]}
    assert detect(structure) == ["body"]
    assert detect({}) == []


async def test_override_wins_for_the_tables_it_names() -> None:
    fields = CrdtFields(None, {"card": ["notes"], "off": []}, 10)  # type: ignore[arg-type]
    assert await fields.fields_of("card") == ["notes"]
    assert await fields.fields_of("off") == []


def test_config_checks_svc_crdt_fields() -> None:
    cfg = SspConfig.from_env({**DB_ENV, "SVC_CRDT_FIELDS": '{"doc": ["body"]}',
                              "SVC_CRDT_CACHE_SIZE": "5"})
    assert cfg.crdt_fields == {"doc": ["body"]} and cfg.crdt_cache_size == 5
    assert SspConfig.from_env(DB_ENV).crdt_cache_size == 10000
    for raw in ('{"doc": "body"}', '["doc"]', '{"doc": ["a b"]}', '{"doc": [1]}'):
        with pytest.raises(ConfigError):
            SspConfig.from_env({**DB_ENV, "SVC_CRDT_FIELDS": raw})


def test_lru_keeps_the_most_recent_documents() -> None:
    fields = CrdtFields(None, {}, 2)  # type: ignore[arg-type]
    for k in ("a", "b"):
        fields._remember((k, "f"), _Entry(LoroDoc(), 1))
    fields._remember(("a", "f"), _Entry(LoroDoc(), 2))  # touched: b is now the oldest
    fields._remember(("c", "f"), _Entry(LoroDoc(), 1))
    assert list(fields.cache) == [("a", "f"), ("c", "f")]
    none = CrdtFields(None, {}, 0)  # type: ignore[arg-type]
    none._remember(("a", "f"), _Entry(LoroDoc(), 1))
    assert not none.cache


def test_loro_refusal_is_400_but_interrupts_propagate() -> None:
    doc = LoroDoc()
    with pytest.raises(Refused) as e:
        _loro_call("update", lambda: doc.import_(b"garbage"))
    assert e.value.status == 400 and "update" in e.value.message

    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _loro_call("update", interrupted)
