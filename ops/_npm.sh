# Shared by ops/test and ops/run: install the repository's Node packages from their lock files
# with `npm ci`, again only when a package-lock.json changed (a stamp file per package):
#   clients/ts    the TypeScript client (its tests: tests/integration/test_ts_client.py)
#   dbhost/node   the database host's Node engine (`svc-db --engine node`, transport http)
# NPM_PACKAGES (space-separated) limits it to some of them (ops/run needs only dbhost/node).
# Nothing else is downloaded at run time.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if ! command -v npm >/dev/null 2>&1; then
  echo "ops: npm is missing: the TypeScript client and the database host's Node engine" \
       "(transport http) need Node 20 and npm" >&2
else
  for pkg in ${NPM_PACKAGES:-clients/ts dbhost/node}; do
    dir="$ROOT/$pkg"
    want="$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)"
    stamp="$dir/node_modules/.svc-installed"
    if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
      echo "ops: npm ci ($pkg)" >&2
      (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2)
      echo "$want" > "$stamp"
    fi
  done
fi
