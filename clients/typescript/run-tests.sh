#!/usr/bin/env bash
# The TypeScript SDK's checks, as `make test` and `make verify` run them:
#   clients/typescript/run-tests.sh lint         eslint + prettier + tsc (make verify)
#   clients/typescript/run-tests.sh unit         unit tests on loopback servers
#   clients/typescript/run-tests.sh integration  against the devstack (real apiserver, controllers, router, sandboxd)
#   clients/typescript/run-tests.sh pack         npm pack, then install the tarball into a fresh project and import it
#   clients/typescript/run-tests.sh              all three
# Dependencies come from the npm registry (package-lock.json, `npm ci`) and
# are reinstalled only when the lock file changes.
set -euo pipefail
cd "$(dirname "$0")"

command -v node >/dev/null || { echo "typescript: node is not on PATH: install Node.js >= 20 (and npm)" >&2; exit 1; }
major="$(node -p 'process.versions.node.split(".")[0]')"
[ "$major" -ge 20 ] || { echo "typescript: Node.js $(node --version) is too old: the SDK needs Node.js >= 20" >&2; exit 1; }

sum="$(sha256sum package-lock.json | cut -c1-16)"
if [ "$(cat node_modules/.lock-sum 2>/dev/null)" != "$sum" ]; then
  npm ci --no-audit --no-fund --loglevel=error
  echo "$sum" > node_modules/.lock-sum
fi

what="${1:-all}"
case "$what" in
  lint|all)
    npx tsc -p tsconfig.json --noEmit
    npx eslint .
    npx prettier --check . >/dev/null || { npx prettier --check .; echo "typescript: run 'npm run format' in clients/typescript" >&2; exit 1; }
    # The package ships a copy of the process API; it must match api/proto.
    cmp -s proto/process/v1/process.proto ../../api/proto/process/v1/process.proto \
      || { echo "typescript: proto/process/v1/process.proto differs from api/proto: copy it over" >&2; exit 1; }
    ;;&
  unit|all)
    npm run -s build:test
    node --test --test-reporter=spec build/test/*.test.js
    ;;&
  integration|all)
    npm run -s build:test
    node --test --test-reporter=spec --test-concurrency=1 build/test/integration/*.test.js
    ;;&
  pack|all)
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    tarball="$(npm pack --silent --pack-destination "$tmp" | tail -1)"
    mkdir "$tmp/fresh"
    (cd "$tmp/fresh" && npm init -y >/dev/null && npm pkg set type=module >/dev/null \
      && npm install --no-audit --no-fund --loglevel=error "$tmp/$tarball" >/dev/null \
      && node -e 'import("@agent-sandbox/sdk").then((m) => { for (const n of ["SandboxClient", "Sandbox", "SandboxError", "SandboxRequestError", "buildClaimManifest"]) if (typeof m[n] !== "function") throw new Error("missing export " + n); const c = m.buildClaimManifest("sandbox-claim-00000000", { warmpool: "p" }); if (c.metadata.labels["agents.x-k8s.io/created-by"] !== "typescript-client") throw new Error("bad manifest"); console.log("pack: " + process.argv[1] + " installs and imports"); })' "$tarball") \
      || { echo "typescript: the packed tarball does not install or import in a fresh project" >&2; exit 1; }
    test -f "$tmp/fresh/node_modules/@agent-sandbox/sdk/dist/index.d.ts" || { echo "typescript: the tarball has no type declarations" >&2; exit 1; }
    test -f "$tmp/fresh/node_modules/@agent-sandbox/sdk/proto/process/v1/process.proto" || { echo "typescript: the tarball lacks the process API proto" >&2; exit 1; }
    ;;
  lint|unit|integration) ;;
  *) echo "usage: $0 [lint|unit|integration|pack]" >&2; exit 2 ;;
esac
