"""With --path, committed data survives a graceful restart and kill -9; one host per directory.
With --memory, nothing is left behind: the scratch storage goes with the host, or with the next
host when the first was killed."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.support.dbhost_clients import close, root_client
from tests.support.procs import start_db_host

NS, DB = "test", "durable"


async def _write(host, rows: range) -> None:  # type: ignore[no-untyped-def]
    c = await root_client(host, NS, DB)
    try:
        for i in rows:
            await c.query("CREATE item SET n = $n", {"n": i})
    finally:
        await close(c)


async def _count(host) -> int:  # type: ignore[no-untyped-def]
    c = await root_client(host, NS, DB)
    try:
        return int(await c.query("RETURN count(SELECT * FROM item)"))
    finally:
        await close(c)


async def test_data_survives_a_graceful_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    host = start_db_host(tmp_path, memory=False, path=data)
    try:
        await _write(host, range(25))
    finally:
        assert host.process.stop() == 0  # SIGTERM: a clean exit
    assert "svc-db stopped" in host.process.log_text()
    again = start_db_host(tmp_path, memory=False, path=data)
    try:
        assert await _count(again) == 25
    finally:
        again.process.stop()


async def test_data_survives_kill_9(tmp_path: Path) -> None:
    data = tmp_path / "data"
    host = start_db_host(tmp_path, memory=False, path=data)
    try:
        await _write(host, range(30))
        host.process.kill9()
    finally:
        host.process.stop()
    again = start_db_host(tmp_path, memory=False, path=data)
    try:
        assert await _count(again) == 30
        # The root user made on the first start still signs in; writes still work.
        await _write(again, range(30, 31))
        assert await _count(again) == 31
    finally:
        again.process.stop()


async def test_second_host_on_the_same_directory_fails_at_once(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = start_db_host(tmp_path, memory=False, path=data)
    try:
        await _write(first, range(3))
        second = start_db_host(tmp_path, memory=False, path=data, wait=False)
        assert second.process.proc is not None
        code = await asyncio.to_thread(second.process.proc.wait, 60)
        assert code != 0
        log = second.process.log_text()
        assert "in use" in log and str(data) in log
        assert await _count(first) == 3  # the first host is unharmed
    finally:
        first.process.stop()


async def test_sigterm_with_open_connections_exits_zero(tmp_path: Path) -> None:
    host = start_db_host(tmp_path, memory=True)
    c = await root_client(host, NS, DB)
    try:
        await c.live("item")
        assert host.process.stop() == 0
    finally:
        await close(c)
    assert "connection close" in host.process.log_text()


async def test_a_memory_host_leaves_no_data_behind_even_when_killed(tmp_path: Path) -> None:
    temp = tmp_path / "temp"
    temp.mkdir()

    def scratch_dirs() -> list[Path]:
        return sorted(temp.glob("svc-db-memory-*"))

    first = start_db_host(tmp_path, memory=True, extra_env={"TMPDIR": str(temp)})
    try:
        await _write(first, range(5))
        [killed] = scratch_dirs()  # the data lives there while the host runs
        first.process.kill9()
    finally:
        first.process.stop()
    assert scratch_dirs() == [killed]  # a SIGKILL leaves it ...
    second = start_db_host(tmp_path, memory=True, extra_env={"TMPDIR": str(temp)})
    try:
        [mine] = scratch_dirs()  # ... and the next host removes it
        assert mine != killed
        c = await root_client(second, NS, DB)
        try:  # memory only: nothing of the first host's data, not even its table
            assert "item" not in (await c.query("INFO FOR DB"))["tables"]
        finally:
            await close(c)
    finally:
        assert second.process.stop() == 0
    assert scratch_dirs() == []  # a clean stop removes its own
