"""Imported first by the entry modules of processes that never use `requests` or `aiohttp`
(a shard worker, the `svc` command): the `surrealdb` SDK imports both for transports we do
not use (`ipc.lazyimport`)."""

from ipc.lazyimport import defer

defer("requests", "aiohttp")
