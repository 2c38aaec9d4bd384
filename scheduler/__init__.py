"""The coordinator (scheduler): typed configuration, the write-ahead log and the snapshot replica.

Foundations only, each usable on its own:

* :mod:`scheduler.config` -- :class:`SchedulerConfig`, the YAML file plus env overrides read once.
* :mod:`scheduler.wal` -- :class:`Wal`, the fsync'ed, segmented, checksummed event log, and
  :class:`GroupCommitter`, which batches concurrent async appends into one fsync.
* :mod:`scheduler.replica` -- :class:`Replica`, the persistent SQLite snapshot of the database
  with incremental per-table counts and hashes, keyset paging and cloning.
"""

from scheduler.config import ConfigError, SchedulerConfig
from scheduler.replica import CloneInProgress, Replica, ReplicaFrozen
from scheduler.wal import GroupCommitter, Wal, WalCorrupt

__all__ = [
    "CloneInProgress",
    "ConfigError",
    "GroupCommitter",
    "Replica",
    "ReplicaFrozen",
    "SchedulerConfig",
    "Wal",
    "WalCorrupt",
]
