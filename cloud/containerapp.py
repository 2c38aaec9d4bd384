"""A `project.yml` container app (`type: container` with its `image`) as one supervised
process: ``python -m cloud.containerapp '<json>'`` (the argv ``apps.container.container_argv``
builds) runs the image through the platform's Docker executor and stays in the foreground
while the container runs, its output on this process's stdout and stderr, its exit code as
this process's. SIGTERM or SIGINT stops and removes the container. So ``svc dev`` supervises,
logs and health-checks a container app exactly like a command, and `apps` never imports the
platform (it names this module, as the launcher names the processes it starts).

The container joins the host network (the daemon may run without a bridge): the app listens
on its port directly, so a published port must be the same on both sides (`7880`, not
`8080:80`; refused when planned). Its variables are the app's own (the host's `PATH`,
`HOME`, Python and loader variables stay out: they would break the image's). Labels:
``svc.platform=svc-dev``, ``svc.role`` (the app), ``svc.run`` (the supervisor's run).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cloud.docker_executor import DockerExecutor, DockerSettings
from cloud.executor import ExecutorError, Handle, Role

__all__ = ["container_env", "main"]

#: the host's own variables, never passed into an image
_HOST_ONLY = ("PATH", "HOME", "HOSTNAME", "PWD", "OLDPWD", "SHLVL", "TERM", "_", "TMPDIR",
              "VIRTUAL_ENV", "DOCKER_HOST", "SVC_CLOUD_DOCKER_HOST")
_HOST_PREFIXES = ("LD_", "PYTHON")


def container_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items()
            if k not in _HOST_ONLY and not k.startswith(_HOST_PREFIXES)}


async def _run(spec: dict[str, Any]) -> int:
    ex = DockerExecutor(DockerSettings.from_env(os.environ), platform="svc-dev")
    labels = {"svc.run": os.environ.get("SVC_APPS_RUN", "")}
    role = Role(name=spec["name"], kind="app", argv=tuple(spec.get("args") or ()),
                env=container_env(os.environ), cwd=spec.get("workdir"), labels=labels,
                image=spec["image"], volumes=tuple(spec.get("volumes") or ()),
                memory_mb=spec.get("memory_mb"), cpus=spec.get("cpus"))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    def sink(stream: str, text: str) -> None:
        print(text, file=sys.stdout if stream == "stdout" else sys.stderr, flush=True)

    async def record(_: Handle) -> None:
        return None

    try:
        handle = await ex.start(role, sink, record)
    except ExecutorError as e:
        print(f"svc dev: {e}", file=sys.stderr, flush=True)
        return 125
    try:
        while not stop.is_set() and await ex.alive(handle):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)
    finally:
        code = await asyncio.shield(ex.stop(handle, timeout=5.0))
    return 0 if stop.is_set() else (code if code is not None else 1)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m cloud.containerapp '<json spec>'", file=sys.stderr)
        return 2
    spec = json.loads(args[0])
    for v in spec.get("volumes") or []:
        src = v.split(":", 1)[0]
        if src.startswith("/") and not Path(src).exists():
            print(f"svc dev: volume source {src} does not exist", file=sys.stderr)
            return 2
    return asyncio.run(_run(spec))


if __name__ == "__main__":
    sys.exit(main())
