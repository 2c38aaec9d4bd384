# Shared by ops/test (and anyone running the TypeScript client): install clients/ts's packages
# from its lock file with `npm ci`, again only when package-lock.json changed (stamp file).
# Nothing else is downloaded at run time.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TS="$ROOT/clients/ts"
if ! command -v npm >/dev/null 2>&1; then
  echo "ops: npm is missing: the TypeScript client's tests (tests/integration/test_ts_client.py)" \
       "fail without Node 20 and npm" >&2
else
  want="$(sha256sum "$TS/package-lock.json" | cut -d' ' -f1)"
  stamp="$TS/node_modules/.svc-installed"
  if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
    echo "ops: npm ci (clients/ts)" >&2
    (cd "$TS" && npm ci --no-audit --no-fund --loglevel=error >&2)
    echo "$want" > "$stamp"
  fi
fi
