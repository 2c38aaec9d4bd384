"""The SSP's run directory: where the hub's and the shards' ZeroMQ ipc sockets live.

Anyone who can connect to those sockets talks to the hub without the gateway's bearer check,
so the directory must be this user's alone: `secure_dir` makes it (mode 0700) or, when it
exists, accepts it only if it is a real directory (not a symlink) owned by this user, and
takes group and other permissions away from it. A directory someone else made first (another
local user guessing a predictable path under /tmp) refuses the start instead of being used.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["RunDirError", "secure_dir"]


class RunDirError(OSError):
    """The run directory cannot be made private to this user."""


def secure_dir(path: Path) -> None:
    """Make `path` a directory only this user can use (see the module docstring)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise RunDirError(f"{path} is not a directory (a symlink or a file): refusing to "
                          "put the SSP's sockets there")
    if st.st_uid != os.getuid():
        raise RunDirError(f"{path} belongs to another user (uid {st.st_uid}): refusing to put "
                          "the SSP's sockets there (choose another SVC_SSP_RUN_DIR)")
    if stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(path, 0o700)
