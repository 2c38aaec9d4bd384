"""The clients' members read (`viewclient.query.members_query`, the same text as the
TypeScript client's `membersQuery`) answers in SurrealDB's own order on both builds the
database host runs: 3.2.4 (embedded) and 3.0.2 (the Node build, transport http).

The judge is SurrealDB itself: the view's query run on the table, limited to the members by a
WHERE (`id INSIDE $m`, START/LIMIT dropped as the members read drops them), against the members
read over `$__members`. The SELECT VALUE forms are the case this module was written for: their
rows are no objects an outer ORDER BY could order, and the members read once left their ORDER
BY inside `SELECT VALUE ... FROM $array`, which 3.0.2 ignores (and 3.2.4 too when the ORDER BY
names a field the VALUE is not)."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from surrealdb import RecordID

from tests.support.procs import DbHost, start_db_host
from tests.support.ssp_stack import root_db
from viewclient.query import MEMBERS_PARAM, members_query

# (build, projection, ORDER BY). 3.0.2 accepts a VALUE's ORDER BY only on the VALUE itself
# ("Missing order idiom" otherwise).
QUERIES = [
    *((build, "VALUE n", "n") for build in ("embedded", "node")),
    *((build, "VALUE n", "n DESC") for build in ("embedded", "node")),
    *((build, "VALUE title", "title DESC") for build in ("embedded", "node")),
    ("embedded", "VALUE id", "n DESC, title, id"),
    ("embedded", "VALUE [n, title]", "title, n DESC, id"),
    ("embedded", "VALUE tag.label", "n, id"),
    *((build, "id, n, title", "n DESC, title, id") for build in ("embedded", "node")),
]


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, DbHost]]:
    started: dict[str, DbHost] = {}
    try:
        started["embedded"] = start_db_host(tmp_path_factory.mktemp("order-embedded"))
        started["node"] = start_db_host(tmp_path_factory.mktemp("order-node"), engine="node",
                                        extra_args=["--allow-net", "127.0.0.1"])
        yield started
    finally:
        for h in started.values():
            h.process.stop()


@pytest.mark.parametrize("build,projection,order", QUERIES)
async def test_the_members_read_is_in_surrealdbs_order(
        hosts: dict[str, DbHost], build: str, projection: str, order: str) -> None:
    h = hosts[build]
    name = "o" + uuid.uuid4().hex[:8]
    root = await root_db(h, name, name)
    try:
        rng = random.Random(projection + order + build)
        stmts = ["DEFINE TABLE post SCHEMALESS", "DEFINE TABLE tag SCHEMALESS",
                 "CREATE tag:a SET label = 'alpha'", "CREATE tag:b SET label = 'beta'"]
        for i in range(16):
            stmts.append(f"CREATE post:{i} SET title = 't{rng.randrange(4)}', "
                         f"n = {rng.randrange(5)}, tag = {rng.choice(['tag:a', 'tag:b', 'NONE'])}")
        await root.query("; ".join(stmts))
        # members as the client reads them: sorted by id
        members = [RecordID("post", i) for i in sorted(rng.sample(range(16), 11))]
        surql = f"SELECT {projection} FROM post WHERE n >= 1 ORDER BY {order} LIMIT 4"
        [want] = await root.query(surql.replace(" LIMIT 4", "").replace(
            "WHERE n >= 1", "WHERE n >= 1 AND id INSIDE $m"), {"m": members})
        [got] = await root.query(members_query(surql), {MEMBERS_PARAM: members})
        assert len(want) >= 2, want  # an order to check
        assert _plain(got) == _plain(want), members_query(surql)
    finally:
        await root.close()


def _plain(rows: Any) -> str:
    return repr(rows)
