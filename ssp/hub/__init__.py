"""The SSP hub: one process that holds every row and view of this SSP and answers every
route of the gateway <-> hub contract (`ipc.messages`). `Hub` (`root.py`) composes it.

Follow one ingest from the gateway to an edge row, by module:

1. `gateway.ssp_app` validates the HTTP request and forwards it over ZeroMQ (`ipc.rpc`);
2. `routes` finds the route's handler (`errors` answers any failure that escapes it);
3. `admission` decides whether the event is taken (ready, slots, pending work, the body a
   `RowChange`, the record storable) and submits it;
4. `sequencer` batches it, stores its row in the arena (`state.rows`), and sends the batch
   to every shard through `shardpool`; the replies carry each view's delta;
5. `sequencer.deliver` updates the view's members and marks them for publication (over http
   once `visibility` sees the commit);
6. `ssp.publisher` writes the edge rows in one transaction per flush, into the table
   `edgetables` defined for the view's user.

The rest: `registry` (register, with its refusals decided before anything changes; identity
rules in `identity`), `views` (a view's lifecycle: new, restored, result, unregistered),
`loading` (bootstrap, table loads, reload and reset), `snapshot` (`snapshot.json`), `tail`
(the standalone changefeed), `backups` (the standalone maintenance plane: backups and
restores), `loops` (TTL sweep, schema poll, database watch), `introspection` (`/info`, `/logs`, `/debug/*`), `state` (what they all share: the registry,
the arena, the shards, the publisher, and the exclusive section that orders them).
"""

from ssp.hub.admission import PUBLICATION_SLOTS
from ssp.hub.identity import check_params, claimed_auth
from ssp.hub.logring import LogRing
from ssp.hub.root import Hub
from ssp.hub.shardpool import LOAD_CHUNK
from ssp.hub.state import ViewState
from ssp.naming import EDGE_PREFIX

__all__ = ["EDGE_PREFIX", "LOAD_CHUNK", "PUBLICATION_SLOTS", "Hub", "LogRing", "ViewState",
           "check_params", "claimed_auth"]
