"""The compiled engine: the modules on the ingest path built with mypyc.

The engine is plain, fully typed Python. Its hot modules (:data:`MODULES`: the store, the
circuits, projections, deltas and the flush) compile as they are with mypyc (which ships
with mypy) into C extensions, which run the mix of ``loadtests/bench_engine.py`` about 1.4x
as fast: attribute reads, calls between those modules and type tests become C, while the
values and dicts stay the same Python objects.

- ``python -m engine build`` compiles them into ``<venv>/engine-native`` (the ops
  scripts run it after installing); it does nothing when that build is current.
- ``import engine`` uses the build only when its stamp names exactly these sources (a hash of
  every ``engine/*.py`` and the interpreter's version). After an edit the engine runs as pure
  Python until the next build: a stale extension never runs.
- ``python -m engine status`` says which one an import gets.

The pure-Python engine is the same code and gives the same answers (a test compares the two
over the benchmark mix); the build only changes how fast it runs. What mypyc asks of the code:
types are checked when a compiled function is called (``NOLINKS`` is therefore a ``Cx``), and
methods of compiled classes cannot be replaced on an instance.
"""

from __future__ import annotations

# The standard library only: ops/_venv.sh loads this file on its own (not through the engine
# package, whose import costs most of an up-to-date check).
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODULES = ("circuit", "columns", "core", "cx", "delta", "deps", "flush", "join", "lazy", "matindex",
           "membership", "plan", "proj", "store",
           "value_ops", "value_order", "value_text", "values", "window", "write",
           "aggregate", "functions")
GROUP = "engine_native"
_SRC = Path(__file__).resolve().parent

# Run in a child interpreter from the project root: setuptools' build_ext over mypycify.
_SETUP = """
import sys
from setuptools import setup
from mypyc.build import mypycify
out, tmp, group = sys.argv[1], sys.argv[2], sys.argv[3]
paths = [f"engine/{m}.py" for m in sys.argv[4:]]
setup(name=group, packages=[], py_modules=[],
      ext_modules=mypycify(paths, group_name=group, target_dir=tmp + "/c"),
      script_args=["-q", "build_ext", "--build-lib", out, "--build-temp", tmp + "/o",
                   "--parallel", "2"])
"""


def home() -> Path:
    """Where the build lives: inside the interpreter's (virtual) environment."""
    return Path(sys.prefix) / "engine-native"


def fingerprint() -> str:
    """The sources a build must come from: every engine module and the interpreter."""
    h = hashlib.sha256(sys.version.encode())
    for p in sorted(_SRC.glob("*.py")):
        h.update(p.name.encode())
        h.update(b"\0")
        h.update(p.read_bytes())
    return h.hexdigest()


def _current(d: Path, fp: str | None = None) -> bool:
    try:
        return (d / "stamp").read_text().strip() == (fp or fingerprint())
    except OSError:
        return False


def activate(path: list[str]) -> bool:
    """Put a current build in front of the ``engine`` package's ``path`` (its compiled
    modules then import instead of the sources); False when there is none."""
    d = home()
    if not _current(d):
        return False
    path.insert(0, str(d / "engine"))
    if str(d) not in sys.path:
        sys.path.append(str(d))  # the group's shared library, a top-level module
    return True


def compiled() -> list[str]:
    """The engine modules imported so far from the build."""
    return sorted(name for name, mod in list(sys.modules.items())
                  if name.startswith("engine.")
                  and str(getattr(mod, "__file__", "") or "").endswith((".so", ".pyd")))


def build(force: bool = False) -> bool:
    """Compile :data:`MODULES` into :func:`home` unless a current build is there; True when
    it built. Raises RuntimeError with the compiler's output when the build fails."""
    d = home()
    fp = fingerprint()
    if not force and _current(d, fp):
        return False
    d.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="engine-native-", dir=d.parent) as tmp:
        out = Path(tmp) / "out"
        proc = subprocess.run(
            [sys.executable, "-c", _SETUP, str(out), tmp, GROUP, *MODULES],
            cwd=_SRC.parent, capture_output=True, text=True,
            env={**os.environ, "MYPY_CACHE_DIR": str(Path(tmp) / "mypy-cache")})
        if proc.returncode != 0:
            raise RuntimeError("building the compiled engine failed:\n"
                               + (proc.stdout + proc.stderr)[-4000:])
        (out / "stamp").write_text(fp + "\n")
        if d.exists():
            old = Path(tmp) / "old"
            d.rename(old)  # removed with the temporary directory
        out.rename(d)
    return True


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    cmd = args[0] if args else "status"
    if cmd == "build":
        start = time.monotonic()
        if "--force" in args or not _current(home(), fingerprint()):
            # Said before the wait: on a first run this is minutes of silence otherwise.
            print(f"engine: compiling {len(MODULES)} modules with mypyc (1 to 3 minutes, once "
                  "per change of the engine's sources)", file=sys.stderr, flush=True)
        try:
            built = build(force="--force" in args)
        except RuntimeError as exc:
            print(exc, file=sys.stderr)
            return 1
        if built:
            print(f"engine: compiled {len(MODULES)} modules with mypyc into {home()} "
                  f"({time.monotonic() - start:.0f} s)", file=sys.stderr)
        return 0
    if cmd == "clean":
        shutil.rmtree(home(), ignore_errors=True)
        return 0
    if cmd == "status":
        import engine.core  # noqa: F401  (what an import of the engine gets)

        got = compiled()
        print(f"compiled ({', '.join(got)})" if got else
              f"pure Python (no current build in {home()})")
        return 0
    print("usage: python -m engine [build [--force] | status | clean]", file=sys.stderr)
    return 2
