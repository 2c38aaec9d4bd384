"""The release the processes report is the one pyproject.toml installs."""

from __future__ import annotations

import tomllib
from pathlib import Path

from ipc.version import VERSION

ROOT = Path(__file__).resolve().parents[2]


def test_reported_version_is_the_project_version() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert VERSION == project["version"]
