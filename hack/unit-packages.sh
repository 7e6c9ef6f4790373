#!/usr/bin/env bash
# Prints the packages `make test-unit` runs: every package outside test/
# except those whose tests all need the stack. Such a package says so by
# calling testenv.ExitIfShort in its TestMain; under -short its binary would
# only print a skip line, and linking it (a 60-80 MB binary with client-go
# and controller-runtime) is most of what the fast tier would spend on it.
# `make test-integration` and `make test` still run them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
go="${GO:-go}"

# Directories holding a _test.go that calls ExitIfShort (the testenv
# package itself defines it and is not one of them). One go list for the
# whole tree, matched by directory: every go command here loads the package
# graph, a few seconds on a loaded 2-core machine.
declare -A skip=()
while read -r dir; do
  skip["$PWD/${dir#./}"]=1
done < <(grep -rlE --include='*_test.go' 'testenv\.ExitIfShort\(' . | xargs -r -n1 dirname | sort -u)
"$go" list -f '{{.ImportPath}}{{"\t"}}{{.Dir}}' ./... | while IFS=$'\t' read -r ip dir; do
  [[ "$ip" == */test/* || -n "${skip[$dir]:-}" ]] || echo "$ip"
done
