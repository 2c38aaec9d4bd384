"""svc-db, the database host: the real SurrealDB 3.x engine (surrealdb-embedded) in-process,
served over SurrealDB's own RPC protocol so the official SDK connects unchanged.

Run: ``svc-db --bind 127.0.0.1:8000 --path /var/lib/svc-db`` (or ``--memory``), with
``SVC_DB_USER``/``SVC_DB_PASS`` set.

Routes
    ``GET /rpc``      WebSocket, subprotocol ``cbor``, one CBOR request map per binary frame:
                      ``AsyncSurreal("ws://HOST:PORT/rpc")``.
    ``POST /rpc``     one CBOR request per call on a temporary session built from the headers
                      ``Authorization: Bearer <token>`` (or Basic), ``Surreal-NS``,
                      ``Surreal-DB``: ``AsyncSurreal("http://HOST:PORT")``. No live queries.
    ``GET /health``   200 ``{"status": "ok", "engine", "storage", "connections",
                      "live_queries"}`` while the engine answers, else 503.
    ``GET /version``  ``{"version": "surrealdb-3.x.y", "service": "svc-db"}``.

Behaviour
    * Credentials: the root user (``ROLES OWNER``) is created from ``SVC_DB_USER`` and
      ``SVC_DB_PASS`` on first start (``DEFINE USER IF NOT EXISTS``: an existing user keeps its
      password). Without both set the host refuses to start (exit 2), unless
      ``--insecure-default-root`` is given, which uses root/root and logs a warning (local
      development only).
    * Sessions: each WebSocket connection gets its own engine session (``attach`` on open,
      ``detach`` on close); client-made sessions (``attach`` with a session id, the SDK's
      ``new_session``) map to further engine sessions of that connection. Replies carry no
      host session id. The engine's owner session is used by the host alone.
    * LIVE: ``live``/``kill`` methods and ``LIVE SELECT [DIFF | fields] FROM table
      [WHERE ...]``/``KILL`` statements, served by tailing the table's changefeed (the host
      adds ``CHANGEFEED 1h INCLUDE ORIGINAL`` with ``ALTER TABLE``, which keeps the rest of
      the definition; a missing table is defined schemaless). Each change is checked in the
      subscriber's own session: the table's select permission for record users, and the
      WHERE clause, against the row after the change (before it, for a DELETE).
      Notifications: ``{result: {id, action, record, result}}``; in DIFF mode ``result`` is a
      JSON Patch (CREATE: replace ``/`` with the row; DELETE: remove ``/``).
    * Bad frames: parse error -32700, not a map / no method / too large -32600, unknown
      method -32601; the connection stays usable. Frames above ``--max-frame-bytes``
      (``SVC_DB_MAX_FRAME_BYTES``, default 16 MiB) get an error; above 4x that the socket is
      closed (1009) so a client cannot make the host buffer without bound.
    * ``--path``: a ``svc-db.lock`` flock in the directory; a second host exits 3 at once
      naming the directory. SIGTERM/SIGINT close clients and the engine and exit 0.
    * ``--memory``: the engine's surrealkv in a scratch directory (``svc-db-memory-*`` in the
      system temp dir, nothing fsynced) removed when the host stops, or by the next host after
      a kill -9; not the engine's ``mem://``, which keeps every version of every key and
      ~1 KB per write transaction forever (``dbhost.scratch``).
    * Admission (``dbhost.admission``): at most ``--max-inflight`` (``SVC_DB_MAX_INFLIGHT``,
      default 8, 0 = no limit) ordinary requests inside the engine at once; the rest wait
      in the host in arrival order. A connection that ran ``let _00_lane = 'service'`` (the
      scheduler's and the SSPs', ``dbclient.DbConfig.lane``) and the host's own LIVE feed
      reads go in at once and take no slot, so the view service's flushes and feed reads
      do not queue behind an application's hundred in-flight writes. ``GET /debug/memory``
      shows the counters (``admission``).
    * The embedded engine never collects changefeed entries past their retention (the
      server's background task that does is not in the embedded build): they stay on disk
      (or, with ``mem://``, in memory) for the life of the data.

Engine builds
    ``--engine embedded`` (default): ``surrealdb-embedded`` in this process. ``--engine node``
    (``SVC_DB_ENGINE``): SurrealDB's Node build in a child process (``dbhost.nodeengine``),
    the build with ``http::*`` functions, for the ``http`` ingest transport; they may reach
    only ``--allow-net`` targets (``SVC_DB_ALLOW_NET``). Sessions, LIVE and limits stay here;
    a session that has not signed in may only sign in, as with the embedded build.

Limits
    * The embedded engine refuses the ``begin``/``commit``/``cancel`` RPC methods; use
      ``BEGIN; ...; COMMIT;`` inside one query.
    * A query mixing LIVE/KILL with other statements is run as separate engine queries
      around the LIVE/KILL statements (a transaction spanning a LIVE statement is split).
    * Field-level ``PERMISSIONS`` are not applied to live notifications (table level are).
"""
