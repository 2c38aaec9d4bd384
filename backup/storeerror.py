"""The object store's one error, apart from its client: the SSP and the scheduler catch it in
every process, while boto3 (a third of a second of CPU to import) loads only in a process that
talks to the store (`backup.objstore`)."""

from __future__ import annotations


class StorageError(Exception):
    """The object store refused or could not be reached (the message says which, no keys)."""
