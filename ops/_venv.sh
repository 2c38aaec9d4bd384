# Shared by ops/run and ops/test: create or refresh the project-local virtual environment.
# Re-installs only when pyproject.toml changed since the last install (stamp file).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PY="${PYTHON:-python3}"
EXTRAS="${1:-}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "ops: creating virtual environment in $VENV" >&2
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip >"$VENV/pip-upgrade.log" 2>&1 \
    || { cat "$VENV/pip-upgrade.log" >&2; exit 1; }
fi
want="$(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1)-$EXTRAS"
stamp="$VENV/.installed"
have="$(cat "$stamp" 2>/dev/null || true)"
# An install with the test extra also serves ops/run (no extra): do not reinstall for it.
if [ "$have" = "$want" ] || { [ -z "$EXTRAS" ] && [ "$have" = "${want}test" ]; }; then
  :
else
  echo "ops: installing the project${EXTRAS:+ with [$EXTRAS]} into $VENV" \
       "(1 to 3 minutes on a first run; pip's output goes to .venv/pip-install.log)" >&2
  spec="$ROOT"
  [ -n "$EXTRAS" ] && spec="$ROOT[$EXTRAS]"
  # pip and setuptools print pages of notes about this machine's wheel folders and the build:
  # kept in a log, shown only when the install fails.
  started=$SECONDS
  if ! "$VENV/bin/python" -m pip install --quiet -e "$spec" >"$VENV/pip-install.log" 2>&1; then
    tail -n 40 "$VENV/pip-install.log" >&2
    echo "ops: installing the project failed (whole output: .venv/pip-install.log)" >&2
    exit 1
  fi
  "$VENV/bin/python" -c "import surrealdb_embedded, falcon, zmq, numpy, xxhash" \
    || { echo "ops: installing the project failed" >&2; exit 1; }
  echo "ops: installed in $((SECONDS - started)) s" >&2
  echo "$want" > "$stamp"
fi
# The compiled engine (engine.native): mypyc builds the hot engine modules into the venv,
# 1 to 3 minutes (it says so first), again only after the engine's sources changed.
# engine/native.py is loaded on its own, not as engine.native: importing the engine package
# imports the SurrealDB SDK, ~0.8 s of CPU that every ops/run paid for an up-to-date check.
engine_build() {
  "$VENV/bin/python" -c "import importlib.util as u, sys
spec = u.spec_from_file_location('engine_native_build', sys.argv[1])
mod = u.module_from_spec(spec)
spec.loader.exec_module(mod)
sys.exit(mod.main(['build']))" "$ROOT/engine/native.py"
}
# OPS_DEFER_ENGINE_BUILD=1: the caller runs engine_build (ops/test, beside its other set-up).
if [ -z "${OPS_DEFER_ENGINE_BUILD:-}" ]; then
  engine_build || { echo "ops: building the compiled engine failed" >&2; exit 1; }
fi
