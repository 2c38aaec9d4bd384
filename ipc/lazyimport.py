"""Defer the import of libraries a process never touches.

The official `surrealdb` SDK imports every transport it ships when it is first imported: its
blocking HTTP connection imports `requests` (with `urllib3`), its async HTTP connection
`aiohttp`. A shard worker and the `svc` command use the SDK's data types and CBOR codec only, so
those imports are about 0.6 s of CPU per process start spent on nothing, paid again by every
shard of every SSP (and hundreds of times by the test suite).

`defer(name)` puts a stand-in for the package in `sys.modules`: `import name` binds it at no
cost, and the first attribute read from it (`requests.post`, `aiohttp.web` via `__path__`)
imports the real package, which from then on replaces the stand-in. It must run before anything
imports the package: an entry module imports `ipc.lazysdk` first (its own import block, kept
apart from the sorted ones by `# isort: split`), which defers the two for that process.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any


def defer(*names: str) -> None:
    """Stand-ins for the top-level packages `names`; a package already imported, or not
    installed, is left alone."""
    for name in names:
        if name in sys.modules or "." in name:
            continue
        spec = importlib.util.find_spec(name)
        if spec is None:
            continue
        stub = types.ModuleType(name, f"{name} (imported on first use)")
        stub.__spec__ = spec
        stub.__getattr__ = _loader(name, stub)  # type: ignore[method-assign]
        sys.modules[name] = stub


def _loader(name: str, stub: types.ModuleType) -> Any:
    def load(attr: str) -> Any:
        real = sys.modules.get(name)
        if real is stub or real is None:
            del sys.modules[name]
            real = importlib.import_module(name)
        # later reads of the stand-in (bound by an earlier `import name`) find it all at once
        stub.__dict__.update({k: v for k, v in real.__dict__.items() if k != "__getattr__"})
        return getattr(real, attr)
    return load
