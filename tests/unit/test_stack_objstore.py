"""`ops/run --objstore`: a local S3 server child, and OBJSTORE_* for the services after it."""

from __future__ import annotations

from pathlib import Path

from backup.config import DEFAULT_ACCESS_KEY, objstore_from_env
from stack.__main__ import build_children
from stack.config import parse


def test_objstore_starts_rclone_and_points_the_scheduler_at_it(tmp_path: Path) -> None:
    cfg = parse(["--objstore", "--objstore-bind", "127.0.0.1:19670", "--data",
                 str(tmp_path / "data")], {})
    children = build_children(cfg, {}, tmp_path / "run")
    names = [c.name for c in children]
    s3 = children[names.index("objstore (rclone serve s3)")]
    assert s3.argv[1:3] == ["serve", "s3"] and "127.0.0.1:19670" in s3.argv
    assert str(tmp_path / "data" / "objstore") in s3.argv
    sched = children[names.index("svc-scheduler")]
    assert names.index("objstore (rclone serve s3)") < names.index("svc-scheduler")
    store = objstore_from_env(sched.env)
    assert store.enabled and store.effective_endpoint == "http://127.0.0.1:19670"
    assert store.effective_access_key == DEFAULT_ACCESS_KEY


def test_objstore_keeps_keys_given_in_the_environment(tmp_path: Path) -> None:
    cfg = parse(["--objstore", "--memory", "--standalone"], {})
    env = {"OBJSTORE_ACCESS_KEY": "mine", "OBJSTORE_SECRET_KEY": "my-secret"}
    children = build_children(cfg, env, tmp_path / "run")
    ssp = next(c for c in children if c.name == "svc-ssp")
    assert ssp.env["OBJSTORE_ACCESS_KEY"] == "mine"
    s3 = next(c for c in children if c.name.startswith("objstore"))
    assert s3.env["RCLONE_AUTH_KEY"] == '"mine,my-secret"'
    assert not any("my-secret" in a for a in s3.argv)  # never on the command line
    assert (tmp_path / "run" / "objstore").is_dir()


def test_without_the_flag_no_server_is_started(tmp_path: Path) -> None:
    cfg = parse(["--memory"], {})
    assert not any(c.name.startswith("objstore") for c in build_children(cfg, {}, tmp_path))
