#!/usr/bin/env bash
# Deep hibernation feasibility outside Kubernetes: runs a Python process
# holding MIB MiB under the cached runsc, checkpoints it, restores it and
# prints the checkpoint time, image size and restore-to-first-output time.
# Needs root and hack/gvisor/build.sh's runsc. Not part of any test target.
#   hack/hibernate/standalone.sh [MIB]
set -euo pipefail
MIB="${1:-256}"
RUNSC="${RUNSC:-$(ls -d "${AGENT_SANDBOX_CACHE:-$HOME/.cache/agent-sandbox}"/bin/gvisor-*/runsc | head -1)}"
W="$(mktemp -d)"; trap 'umount "$W/root/null-netns" 2>/dev/null; rm -rf "$W"' EXIT
RO=(--root="$W/root" --platform=systrap --network=none)
cat > "$W/counter.py" <<'PY'
import os, sys, time
buf = bytearray(int(sys.argv[1]) << 20)
for i in range(0, len(buf), 4096): buf[i] = 1
n = 0
while True:
    n += 1; print(f"pid={os.getpid()} n={n}", flush=True); time.sleep(0.2)
PY
mkdir -p "$W/bundle" "$W/root" && cd "$W/bundle"
"$RUNSC" spec -- /usr/bin/python3 "$W/counter.py" "$MIB"
python3 - "$W" <<'PY'
import json, sys
w = sys.argv[1]; s = json.load(open('config.json'))
s['root'] = {'path': '/', 'readonly': True}; s['process']['terminal'] = False
s['mounts'].append({'destination': w, 'type': 'bind', 'source': w, 'options': ['rbind', 'ro']})
json.dump(s, open('config.json', 'w'))
PY
"$RUNSC" "${RO[@]}" run hib > "$W/out1" 2>"$W/err1" &
until grep -q 'n=3' "$W/out1" 2>/dev/null; do sleep 0.1; done
s=$(date +%s%N); "$RUNSC" "${RO[@]}" checkpoint --image-path="$W/img" hib; e=$(date +%s%N)
echo "checkpoint: $(( (e - s) / 1000000 )) ms, image $(du -sm "$W/img" | cut -f1) MiB, last line before: $(tail -1 "$W/out1")"
wait || true
"$RUNSC" "${RO[@]}" delete -force hib 2>/dev/null || true
s=$(date +%s%N); "$RUNSC" "${RO[@]}" restore --image-path="$W/img" hib > "$W/out2" 2>"$W/err2" &
until tr -d '\000' < "$W/out2" | grep -q n=; do sleep 0.01; done; e=$(date +%s%N)
echo "restore to first output: $(( (e - s) / 1000000 )) ms, first line after: $(tr -d '\000' < "$W/out2" | head -1)"
"$RUNSC" "${RO[@]}" kill hib KILL 2>/dev/null || true; wait || true
"$RUNSC" "${RO[@]}" delete -force hib 2>/dev/null || true
