"""A private Docker daemon for the tests that run containers: Debian's ``dockerd`` (package
``docker.io``, which ``ops/test`` installs as root) with its own data root, exec root, pid
file and unix socket under a temp directory, no bridge and no iptables rules (containers use
the host network), stopped and removed afterwards. Nothing touches a system daemon.

A test that needs it fails with a plain message when it cannot be started (no binary, not
root, the daemon refuses): it is never skipped.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support import lifeline


class DockerdUnavailable(AssertionError):
    """Why the daemon could not be started, in words a reader can act on."""


@dataclass
class Dockerd:
    root: Path
    proc: subprocess.Popen[bytes]
    log_path: Path

    @property
    def socket(self) -> Path:
        return self.root / "d.sock"

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def client(self) -> Any:
        import docker

        return docker.DockerClient(base_url=self.url, timeout=60)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc.poll() is None:
            # the daemon stops its containers and its containerd on SIGTERM
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        # the daemon leaves mounts of its own behind (the host network namespace under the
        # exec root, the data root's bind mount): deepest first, then the directory
        for point in mounts_under(self.root):
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)
        shutil.rmtree(self.root, ignore_errors=True)


def mounts_under(root: Path) -> list[str]:
    """Mount points at or below ``root``, deepest first."""
    prefix = str(root).rstrip("/") + "/"
    try:
        with open("/proc/self/mounts") as f:
            points = [line.split()[1] for line in f]
    except OSError:
        return []
    return sorted({p for p in points if p.startswith(prefix)}, key=len, reverse=True)


def start_dockerd(timeout: float = 60.0) -> Dockerd:
    binary = shutil.which("dockerd") or ("/usr/sbin/dockerd"
                                         if os.path.exists("/usr/sbin/dockerd") else None)
    if binary is None:
        raise DockerdUnavailable(
            "dockerd is not installed: the Docker tests need Debian's docker.io (ops/test "
            "installs it with apt when run as root; or: apt-get install docker.io)")
    if os.geteuid() != 0:
        raise DockerdUnavailable("the Docker tests start a private dockerd, which needs root")
    # a unix socket path is limited to 107 bytes: a short directory of its own
    root = Path(tempfile.mkdtemp(prefix="svcd-", dir="/tmp"))
    log_path = root / "dockerd.log"
    argv = [binary, "--data-root", str(root / "data"), "--exec-root", str(root / "exec"),
            "--pidfile", str(root / "dockerd.pid"), "--host", f"unix://{root / 'd.sock'}",
            "--bridge=none", "--iptables=false", "--ip6tables=false",
            "--ip-masq=false", "--userland-proxy=false"]
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        lifeline.adopt(proc.pid)  # dies with this run, killed or not
    d = Dockerd(root, proc, log_path)
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            text = d.log_text()[-2000:]
            d.stop()
            raise DockerdUnavailable(f"dockerd exited with {proc.returncode} at start:\n{text}")
        if d.socket.exists():
            try:
                d.client().ping()
                return d
            except Exception:  # noqa: BLE001, S110 - not answering yet
                pass
        if time.monotonic() > deadline:
            text = d.log_text()[-2000:]
            d.stop()
            raise DockerdUnavailable(f"dockerd did not answer within {timeout:.0f}s:\n{text}")
        time.sleep(0.1)
