#!/usr/bin/env bash
# Runs the fast tier (`make test-unit`): `go test -short` on the packages
# hack/unit-packages.sh prints, in two steps:
#
#  1. `go test -c` writes each test binary under bin/unit-tests/. The go
#     command relinks a binary only when it is stale (its build ID no longer
#     matches the inputs), so a run after editing one package relinks only
#     that package's test binary and those of the packages importing it.
#     `go test` itself relinks every binary on every run (golang/go#77349),
#     and on this 2-core machine linking ~40 binaries that carry client-go
#     is about 75 s of CPU, most of the tier. Vet still runs (go test -c runs
#     the same vet subset as go test; its results are cached the same way).
#  2. Every binary runs fresh (-test.count=1: nothing is read from the test
#     result cache) in its package directory, as go test runs it, with up to
#     UNIT_JOBS at once. Most of the tier's test time is waiting (timeouts,
#     servers, subprocesses), not CPU, so the default is twice the cores.
#
# Extra arguments go to every test binary, e.g.
#   hack/test-unit.sh -test.run 'TestSSRF' -test.v
# A build error fails the run before any test runs (no stale binary is run).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root="$PWD"
go="${GO:-go}"
out="${UNIT_BIN_DIR:-$root/bin/unit-tests}"
jobs="${UNIT_JOBS:-$(($(nproc) * 2))}"
ldflags="${UNIT_LDFLAGS:--s -w}"

# Command substitutions, not <(...): set -e sees their failures (a package
# that does not compile must fail the run, not drop out of it).
pkgs_out="$(hack/unit-packages.sh)"
mapfile -t pkgs <<<"$pkgs_out"
# One go list both compiles every package (-export; without linking the
# main packages among them, which go build would do) and says which have
# test files: only those get a binary, the rest are only compiled, as
# go test does for them ([no test files]).
listed_out="$("$go" list -export -f '{{.ImportPath}}{{"\t"}}{{.Dir}}{{"\t"}}{{if or .TestGoFiles .XTestGoFiles}}1{{end}}' "${pkgs[@]}")"
mapfile -t listed <<<"$listed_out"

# go test -c -o DIR/ names a binary after the last element of the import
# path and refuses two packages with the same one, so the k-th package of a
# given name goes to batch k (in practice 2 batches).
declare -A seen=()
declare -a batch_pkgs=() rows=()
for row in "${listed[@]}"; do
  IFS=$'\t' read -r ip dir tests <<<"$row"
  [[ -n "$tests" ]] || continue
  base="${ip##*/}"
  k="${seen[$base]:-0}"
  seen[$base]=$((k + 1))
  batch_pkgs[k]+="$ip "
  rows+=("$ip"$'\t'"$dir"$'\t'"$out/$k/$base.test")
done

# The batches share nothing but the build cache (safe for concurrent go
# commands), so they build side by side.
declare -a builders=()
for k in "${!batch_pkgs[@]}"; do
  mkdir -p "$out/$k"
  # shellcheck disable=SC2086 # the list is space-separated import paths
  "$go" test -c -ldflags="$ldflags" -o "$out/$k/" ${batch_pkgs[k]} &
  builders+=($!)
done
built=0
for b in "${builders[@]}"; do
  wait "$b" || built=$?
done
if ((built)); then
  echo "test-unit: build failed; no test ran" >&2
  exit "$built"
fi

logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT

run_one() {
  local i="$1" ip dir bin start rc=0
  shift
  IFS=$'\t' read -r ip dir bin <<<"${rows[i]}"
  start="$EPOCHREALTIME"
  (cd "$dir" && exec "$bin" -test.short -test.count=1 -test.timeout=10m -test.paniconexit0 "$@") >"$logs/$i.log" 2>&1 || rc=$?
  printf '%s %s\n' "$rc" "$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN{print b-a}')" >"$logs/$i.rc"
}
export -f run_one
export logs
# Bash cannot export arrays; hand the rows over through a file.
printf '%s\n' "${rows[@]}" >"$logs/rows"
export UNIT_ROWS="$logs/rows"

# Longest first (by the last run's times), so the slowest package does not
# start last and stretch the run.
order() {
  local i ip
  declare -A last=()
  if [[ -f "$out/durations" ]]; then
    while read -r secs ip; do last[$ip]="$secs"; done <"$out/durations"
  fi
  for i in "${!rows[@]}"; do
    ip="${rows[i]%%$'\t'*}"
    printf '%s %s\n' "${last[$ip]:-0}" "$i"
  done | sort -rn | cut -d' ' -f2
}
order | xargs -P "$jobs" -I{} bash -c 'mapfile -t rows <"$UNIT_ROWS"; run_one "$@"' _ {} "$@"

failed=0
: >"$logs/durations"
for i in "${!rows[@]}"; do
  IFS=$'\t' read -r ip _ _ <<<"${rows[i]}"
  read -r rc secs <"$logs/$i.rc"
  printf '%s %s\n' "$secs" "$ip" >>"$logs/durations"
  if [[ "$rc" == 0 ]]; then
    if grep -q -- '-test.v' <<<"$*"; then cat "$logs/$i.log"; fi
    printf 'ok  \t%s\t%.3fs\n' "$ip" "$secs"
  else
    failed=1
    cat "$logs/$i.log"
    printf 'FAIL\t%s\t%.3fs\n' "$ip" "$secs"
  fi
done
# A filtered run (extra arguments) says nothing about full-run times.
if (($# == 0)); then mv "$logs/durations" "$out/durations"; fi
exit "$failed"
