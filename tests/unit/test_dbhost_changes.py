"""Reading SHOW CHANGES output (shapes as the engine, core 3.2.4, produces them)."""

from __future__ import annotations

from surrealdb.data.types.record_id import RecordID

from dbhost.live import loses_original, parse_changes, split_by_table

R1 = RecordID("t", 1)
FEED = [
    {"versionstamp": 10, "changes": [{"define_table": {
        "name": "t", "changefeed": {"original": True}}}]},
    {"versionstamp": 11, "changes": [{"update": {"a": 1, "id": R1}}]},
    {"versionstamp": 12, "changes": [{"current": {"a": 2, "id": R1},
                                      "update": [{"op": "replace", "path": "/a", "value": 1}]}]},
    {"versionstamp": 13, "changes": [{"delete": {"id": R1, "original": {"a": 2, "id": R1}}}]},
]


def test_changes_in_commit_order_with_rows_before_and_after() -> None:
    changes = parse_changes(FEED)
    assert [(c.vs, c.action, c.record) for c in changes] == [
        (11, "CREATE", R1), (12, "UPDATE", R1), (13, "DELETE", R1)]
    create, update, delete = changes
    assert create.after == {"a": 1, "id": R1} and create.before() is None
    assert update.after == {"a": 2, "id": R1}
    assert update.before() == {"a": 1, "id": R1}
    assert delete.after is None and delete.before() == {"a": 2, "id": R1}


def test_delete_without_original_keeps_only_the_id() -> None:
    [c] = parse_changes([{"versionstamp": 1, "changes": [{"delete": {"id": R1}}]}])
    assert c.original == {"id": R1}


def test_redefinition_without_original_is_noticed() -> None:
    assert not loses_original(FEED)
    assert loses_original([{"versionstamp": 1, "changes": [{"define_table": {
        "name": "t", "changefeed": {"original": False}}}]}])
    assert loses_original([{"versionstamp": 1, "changes": [{"define_table": {"name": "t"}}]}])


def test_a_database_wide_set_is_split_into_its_tables_entries() -> None:
    r2 = RecordID("u", 2)
    changes = [{"update": {"id": R1}}, {"current": {"id": R1}, "update": []},
               {"delete": {"id": r2}}, {"define_table": {"name": "v"}}, {"odd": {}}]
    assert split_by_table(changes) == {"t": changes[:2], "u": [changes[2]], "v": [changes[3]],
                                       "": [changes[4]]}


def test_a_shallow_decoded_set_splits_like_the_built_one() -> None:
    from dbclient.cbor import decode_shallow, encode, materialize

    r2 = RecordID("u", [RecordID("t", 1), "k"])
    changes = [{"update": {"id": R1}}, {"current": {"id": R1}, "update": []},
               {"delete": {"id": r2, "original": {"id": r2}}}, {"define_table": {"name": "v"}},
               {"odd": {}}]
    shallow = decode_shallow(encode(changes))
    split = split_by_table(shallow, shallow=True)
    assert list(split) == ["t", "u", "v", ""]
    assert {t: materialize(c) for t, c in split.items()} == split_by_table(changes)
