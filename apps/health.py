"""One attempt of a readiness check (apps.model.HealthCheck): True, or the reason it failed."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path

from apps.model import HealthCheck

__all__ = ["attempt"]


async def _http(check: HealthCheck) -> str | None:
    reader, writer = await asyncio.open_connection("127.0.0.1", check.port)
    try:
        writer.write(f"GET {check.path} HTTP/1.0\r\nHost: 127.0.0.1:{check.port}\r\n"
                     "Connection: close\r\n\r\n".encode("latin-1"))
        await writer.drain()
        status_line = await reader.readline()
    finally:
        writer.close()
    parts = status_line.decode("latin-1", "replace").split()
    if len(parts) < 2 or not parts[0].startswith("HTTP/"):
        return "the answer is not HTTP"
    return None if parts[1] == "200" else f"HTTP {parts[1]}"


async def _tcp(check: HealthCheck) -> str | None:
    _, writer = await asyncio.open_connection("127.0.0.1", check.port)
    writer.close()
    return None


async def _command(check: HealthCheck, cwd: Path, env: Mapping[str, str]) -> str | None:
    assert check.command is not None
    proc = await asyncio.create_subprocess_exec(
        "sh", "-c", check.command, cwd=cwd, env=dict(env), stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True)
    try:
        rc = await proc.wait()
    except asyncio.CancelledError:
        proc.kill()
        await proc.wait()
        raise
    return None if rc == 0 else f"the health command exited with {rc}"


async def attempt(check: HealthCheck, cwd: Path, env: Mapping[str, str]) -> str | None:
    """Run one attempt within `check.timeout`: None when ready, else why not."""
    try:
        if check.kind == "http":
            return await asyncio.wait_for(_http(check), check.timeout)
        if check.kind == "tcp":
            return await asyncio.wait_for(_tcp(check), check.timeout)
        if check.kind == "command":
            return await asyncio.wait_for(_command(check, cwd, env), check.timeout)
    except TimeoutError:
        return f"no answer within {check.timeout:g}s"
    except ConnectionRefusedError:
        return "connection refused"
    except OSError as e:
        return e.strerror or type(e).__name__
    raise ValueError(f"attempt() does not run {check.kind} checks")
