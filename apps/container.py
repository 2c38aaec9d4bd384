"""The command line of a `project.yml` container app (`type: container` with its `image`):
one supervised process, ``python -m cloud.containerapp '<json>'``, that runs the image through
the platform's Docker executor in the foreground (see that module). Named, not imported: the
apps package never imports the platform.
"""

from __future__ import annotations

import json
import sys

__all__ = ["container_argv"]

#: the module that runs one container app in the foreground
RUNNER = "cloud.containerapp"


def container_argv(name: str, image: str, args: list[str], volumes: list[str],
                   workdir: str | None, memory_mb: int | None, cpus: float | None
                   ) -> tuple[str, ...]:
    spec = {"name": name, "image": image, "args": args, "volumes": volumes,
            "workdir": workdir, "memory_mb": memory_mb, "cpus": cpus}
    return (sys.executable, "-m", RUNNER, json.dumps(spec))
