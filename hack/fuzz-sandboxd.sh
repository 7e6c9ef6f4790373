#!/usr/bin/env bash
# Runs every sandboxd fuzz target for FUZZTIME each (default 60s) and prints
# the execution count of each run. A crash fails the script and leaves the
# reproducer under the package's testdata/fuzz/ for `go test` to replay.
set -euo pipefail
cd "$(dirname "$0")/.."

FUZZTIME="${FUZZTIME:-60s}"
targets=(
	"./internal/sandboxd/workspace FuzzResolve"
	"./internal/sandboxd/legacy FuzzUpload"
	"./internal/sandboxd/shlex FuzzSplit"
)

for t in "${targets[@]}"; do
	read -r pkg fn <<<"$t"
	log="$(mktemp)"
	echo "== $fn ($pkg) for $FUZZTIME"
	if ! go test -run '^$' -fuzz "^${fn}\$" -fuzztime "$FUZZTIME" "$pkg" >"$log" 2>&1; then
		cat "$log"
		rm -f "$log"
		exit 1
	fi
	# The last progress line carries the total execution count.
	grep -E '^fuzz: elapsed' "$log" | tail -n 1
	tail -n 1 "$log"
	rm -f "$log"
done
