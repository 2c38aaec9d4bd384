"""The Docker executor's pieces that need no daemon: its settings, the host-root image's
content, the mounts that run the platform's Python in it, and what a container app's
variables leave out. The daemon itself is tested in
tests/integration/test_cloud_docker.py."""

from __future__ import annotations

import base64
import io
import os
import sys
import tarfile

import pytest

from cloud.config import CloudConfig, ConfigError
from cloud.containerapp import container_env
from cloud.crypto import KeyRing
from cloud.docker_executor import DockerSettings, host_mounts, hostroot_tarball


def _env(**kw: str) -> dict[str, str]:
    return {"SVC_CLOUD_DB_URL": "ws://127.0.0.1:1", "SVC_CLOUD_KEYRING":
            KeyRing.generate_entry("k1"),
            "SVC_CLOUD_FINGERPRINT_KEY": base64.b64encode(os.urandom(32)).decode(), **kw}


def test_docker_settings_from_the_environment() -> None:
    cfg = CloudConfig.from_env(_env(SVC_CLOUD_EXECUTOR="Docker",
                                    SVC_CLOUD_DOCKER_HOST="unix:///run/d.sock",
                                    SVC_CLOUD_DOCKER_MEMORY_MB="512",
                                    SVC_CLOUD_DOCKER_CPUS="0.5"))
    assert cfg.executor == "docker"
    assert cfg.docker == DockerSettings(host="unix:///run/d.sock", memory_mb=512, cpus=0.5)
    assert DockerSettings.from_env({"DOCKER_HOST": "tcp://x:1"}).host == "tcp://x:1"


@pytest.mark.parametrize("name,value", [("SVC_CLOUD_EXECUTOR", "kubernetes"),
                                        ("SVC_CLOUD_DOCKER_MEMORY_MB", "lots"),
                                        ("SVC_CLOUD_DOCKER_MEMORY_MB", "1"),
                                        ("SVC_CLOUD_DOCKER_CPUS", "0")])
def test_bad_docker_settings_are_refused(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=name):
        CloudConfig.from_env(_env(**{name: value}))


def test_the_hostroot_image_holds_no_file_and_mirrors_the_host_symlinks() -> None:
    with tarfile.open(fileobj=io.BytesIO(hostroot_tarball())) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert not any(m.isfile() for m in members.values())
    assert members["sbin"].isdir()  # the daemon's init goes there
    for name in ("bin", "lib"):
        if os.path.islink(f"/{name}"):
            assert members[name].issym() and members[name].linkname == os.readlink(f"/{name}")
        else:
            assert members[name].isdir()


def test_host_mounts_are_read_only_and_not_nested() -> None:
    mounts = host_mounts()
    assert mounts and all(m.endswith(":ro") for m in mounts)
    srcs = [m.split(":")[0] for m in mounts]
    assert not any(a != b and a.startswith(b.rstrip("/") + "/") for a in srcs for b in srcs)
    # the interpreter that runs the platform is reachable inside
    exe = os.path.realpath(sys.executable)
    assert any(exe.startswith(s.rstrip("/") + "/") for s in srcs)
    assert "/sbin" not in srcs


def test_a_container_app_gets_its_own_variables_not_the_hosts() -> None:
    got = container_env({"PATH": "/x", "HOME": "/root", "LD_PRELOAD": "y", "PYTHONPATH": "z",
                         "DOCKER_HOST": "unix:///s", "PORT": "7880", "GREETING": "hi"})
    assert got == {"PORT": "7880", "GREETING": "hi"}


def test_a_container_app_runs_the_platform_module_it_names() -> None:
    """apps names the runner instead of importing the platform (no package cycle): the name
    must stay a module that runs."""
    import importlib
    import importlib.util

    from apps.container import RUNNER, container_argv

    argv = container_argv("web", "img:1", [], [], None, None, None)
    assert argv[1:3] == ("-m", RUNNER) and importlib.util.find_spec(RUNNER) is not None
    assert callable(importlib.import_module(RUNNER).main)
