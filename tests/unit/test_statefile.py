"""ipc.statefile: the state files of the scheduler and the backup plane, written whole and read
back by one reader."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from ipc.statefile import read_state, replace_file


def test_a_state_file_round_trips_and_a_missing_one_reads_as_none(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "state.json"
    assert read_state(path, "thing", logging.getLogger("t")) is None
    replace_file(path, b'{"a": [1, 2]}')
    assert read_state(path, "thing", logging.getLogger("t")) == {"a": [1, 2]}
    assert not path.with_name("state.json.tmp").exists()


@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe"])
def test_an_unreadable_state_file_is_logged_and_reads_as_none(
        tmp_path: Path, content: bytes, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(content)
    with caplog.at_level(logging.ERROR, logger="t"):
        assert read_state(path, "operation history", logging.getLogger("t")) is None
    assert "operation history" in caplog.text and "starting empty" in caplog.text
    assert path.read_bytes() == content  # kept for inspection until the next write
