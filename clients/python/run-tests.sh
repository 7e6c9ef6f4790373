#!/usr/bin/env bash
# Runs the Python SDK test suite in a fresh-enough virtualenv:
#   clients/python/run-tests.sh [pytest args...]
# Installs the package with its async, grpc and test extras from PyPI, then
# runs unit tests and the integration tests (which start `go run
# ./hack/devstack`, so Go and the kube test binaries must be available).
# pytest's "no tests collected" (exit 5) is treated as a failure.
#   VENV=<dir>  virtualenv location (default: clients/python/.venv)
#   PYTHON=...  interpreter used to create it (default: python3)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${VENV:-$here/.venv}"
python="${PYTHON:-python3}"

if [[ ! -x "$venv/bin/python" ]]; then
  "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$here[async,grpc,test]"

# --lint: ruff and mypy --strict on the package instead of the tests. The
# linters are pinned here (not in the package's extras: users never need them).
if [[ "${1:-}" == "--lint" ]]; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check ruff==0.17.6 mypy==2.4.1
  cd "$here"
  rc=0
  "$venv/bin/ruff" check k8s_agent_sandbox || rc=1
  "$venv/bin/mypy" --strict k8s_agent_sandbox || rc=1
  # The README's example must type-check as users write it (against this
  # source tree: MYPYPATH comes before the installed copy).
  example="$(mktemp -d)/readme_example.py"
  "$venv/bin/python" - README.md "$example" <<'PY'
import re
import sys

blocks = re.findall(r"```python\n(.*?)```", open(sys.argv[1]).read(), re.S)
assert blocks, "README.md has no python example"
open(sys.argv[2], "w").write("\n".join(blocks))
PY
  MYPYPATH="$here" "$venv/bin/mypy" --strict "$example" || rc=1
  rm -rf "$(dirname "$example")"
  exit $rc
fi

# The installed distribution (not just the source tree) must import.
(cd / && "$venv/bin/python" -c 'import k8s_agent_sandbox as m, sys; assert "site-packages" in m.__file__, m.__file__; print("installed:", m.__file__)')

cd "$here"
# The local tunnel tests run `kubectl` from PATH; keep the venv first. Without
# a kubectl installed, use the one hack/kube builds for the test binaries.
export PATH="$venv/bin:$PATH"
if ! command -v kubectl >/dev/null 2>&1; then
  kube_dir="${KUBEBUILDER_ASSETS:-$("$here/../../hack/kube/build.sh" --print-dir 2>/dev/null || true)}"
  if [[ -n "$kube_dir" && -x "$kube_dir/kubectl" ]]; then
    export PATH="$PATH:$kube_dir"
  fi
fi
set +e
"$venv/bin/python" -m pytest -p no:cacheprovider "$@"
rc=$?
set -e
if [[ $rc -eq 5 ]]; then
  echo "run-tests.sh: pytest collected no tests; failing" >&2
  exit 1
fi
exit $rc
