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
  "$VENV/bin/python" -m pip install --quiet --upgrade pip >&2
fi
want="$(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1)-$EXTRAS"
stamp="$VENV/.installed"
have="$(cat "$stamp" 2>/dev/null || true)"
# An install with the test extra also serves ops/run (no extra): do not reinstall for it.
if [ "$have" = "$want" ] || { [ -z "$EXTRAS" ] && [ "$have" = "${want}test" ]; }; then
  :
else
  echo "ops: installing the project${EXTRAS:+ with [$EXTRAS]} into $VENV" >&2
  spec="$ROOT"
  [ -n "$EXTRAS" ] && spec="$ROOT[$EXTRAS]"
  # pip's notes about this machine's local wheel folders are noise: keep real errors only.
  "$VENV/bin/python" -m pip install --quiet -e "$spec" 2>&1 \
    | grep -v -e "^WARNING: Location" -e "BuildBackendWarning" -e "return '" >&2 || true
  "$VENV/bin/python" -c "import surrealdb_embedded, falcon, zmq, numpy, xxhash" \
    || { echo "ops: installing the project failed" >&2; exit 1; }
  echo "$want" > "$stamp"
fi
# The compiled engine (engine.native): mypyc builds the hot engine modules into the venv,
# about 35 s, again only after the engine's sources changed.
"$VENV/bin/python" -m engine build \
  || { echo "ops: building the compiled engine failed" >&2; exit 1; }
