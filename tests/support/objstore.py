"""A real S3 server for tests: ``rclone serve s3`` (``backup.localserver``) on a free loopback
port over a directory of the test's tmp dir, always stopped."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from backup.localserver import serve_argv, serve_env
from tests.support.procs import ManagedProcess, base_env, free_port

ACCESS_KEY = "test-access-key"
SECRET_KEY = "test-secret-key-not-logged"
BUCKET = "svc-test-backups"


@dataclass
class S3Server:
    """A running local S3 server."""

    process: ManagedProcess
    port: int
    root: Path

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self, bucket: str = BUCKET) -> dict[str, str]:
        """The ``OBJSTORE_*`` variables of a process using this server."""
        return {"OBJSTORE_ENDPOINT": self.endpoint, "OBJSTORE_ACCESS_KEY": ACCESS_KEY,
                "OBJSTORE_SECRET_KEY": SECRET_KEY, "OBJSTORE_BUCKET": bucket}

    def files(self, bucket: str = BUCKET) -> list[Path]:
        base = self.root / bucket
        return sorted(p for p in base.rglob("*") if p.is_file()) if base.exists() else []

    def stop(self) -> None:
        self.process.stop()

    def kill9(self) -> None:
        self.process.kill9()


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def start_s3(tmp: Path, *, port: int | None = None, root: Path | None = None) -> S3Server:
    """Start ``rclone serve s3`` and wait until it accepts connections."""
    port = port or free_port()
    root = root or (tmp / "s3")
    root.mkdir(parents=True, exist_ok=True)
    argv = serve_argv(root, f"127.0.0.1:{port}")
    mp = ManagedProcess("rclone-s3", argv, base_env(**serve_env(ACCESS_KEY, SECRET_KEY)),
                        tmp / f"rclone-s3-{port}.log").start()
    deadline = time.monotonic() + 30
    while not _listening(port):
        if not mp.alive() or time.monotonic() > deadline:
            mp.stop()
            raise RuntimeError("the S3 server did not start:\n" + mp.log_text()[-2000:])
        time.sleep(0.05)
    return S3Server(mp, port, root)


@contextlib.contextmanager
def running_s3(tmp: Path) -> Iterator[S3Server]:
    """A local S3 server for the block (a module fixture's body)."""
    server = start_s3(tmp)
    try:
        yield server
    finally:
        server.stop()
