"""State files replaced whole: the scheduler's incident and operation histories, its token
registry and changefeed cursor, the backup registry. A crash leaves the old file or the new
one, never a torn one. Read back with `read_state`."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any


def replace_file(path: Path, data: bytes, *, mode: int = 0o666, sync_dir: bool = False) -> None:
    """Write ``data`` to ``path`` through a temporary file beside it (``<name>.tmp``), fsync'ed,
    then renamed over ``path``; the parent directory is created when missing. ``mode`` is the
    temporary file's permission bits (before the umask: 0o600 keeps a file to its owner);
    ``sync_dir`` also fsyncs the directory, so the rename itself survives a power cut.
    Raises OSError."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    if sync_dir:
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def read_state(path: Path, what: str, log: logging.Logger) -> Any:
    """The JSON document a state file holds, or None when there is none yet. A file that
    cannot be read or parsed (an operator's edit, a disk error: a crash cannot tear it) is
    logged as an error naming ``what`` and reads as None, so the store starts empty and the
    next write replaces it."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        log.error("%s %s unreadable (%s); starting empty", what, path, e)
        return None
