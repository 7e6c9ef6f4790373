#!/usr/bin/env bash
# Regenerates the typed Kubernetes clients under clients/k8s/ from the API
# types: clientset, listers, informers and apply configurations, one set per
# API group, at the reference project's import paths:
#   sigs.k8s.io/agent-sandbox/clients/k8s/...             agents.x-k8s.io (Sandbox)
#   sigs.k8s.io/agent-sandbox/clients/k8s/extensions/...  extensions.agents.x-k8s.io
# The generators are k8s.io/code-generator, pinned as `go tool` entries in
# go.mod (same minor as client-go), so every machine writes identical files.
# The output directories are wiped first: a type that disappears leaves no
# stale file behind (make verify also checks for untracked files).
set -euo pipefail
cd "$(dirname "$0")/.."

MODULE=sigs.k8s.io/agent-sandbox
OUT=clients/k8s
HEADER="$(mktemp)"
trap 'rm -f "$HEADER"' EXIT
printf '// Code generated for the agent-sandbox API. DO NOT EDIT.\n\n' >"$HEADER"

# Apply configurations of other packages that the extensions' refer to: the
# blueprint types shared with agents.x-k8s.io (the generator adds meta/v1's).
EXT_EXTERNAL=""
for t in PodTemplate PodMetadata PersistentVolumeClaimTemplate SandboxBlueprint EmbeddedObjectMetadata; do
	EXT_EXTERNAL+="$MODULE/api/v1beta1.$t:$MODULE/$OUT/applyconfiguration/api/v1beta1,"
done
EXT_EXTERNAL="${EXT_EXTERNAL%,}"

# gen <output dir> <output package> <API package dir> <client-gen input-base> <client-gen input> <external apply configurations>
gen() {
	local dir=$1 pkg=$2 api=$3 base=$4 input=$5 external=$6
	rm -rf "$dir/clientset" "$dir/listers" "$dir/informers" "$dir/applyconfiguration"
	go tool applyconfiguration-gen --go-header-file "$HEADER" \
		${external:+--external-applyconfigurations "$external"} \
		--output-dir "$dir/applyconfiguration" --output-pkg "$pkg/applyconfiguration" \
		"$MODULE/$api"
	go tool client-gen --go-header-file "$HEADER" \
		--clientset-name versioned --input-base "$base" --input "$input" \
		--apply-configuration-package "$pkg/applyconfiguration" \
		--output-dir "$dir/clientset" --output-pkg "$pkg/clientset"
	go tool lister-gen --go-header-file "$HEADER" \
		--output-dir "$dir/listers" --output-pkg "$pkg/listers" \
		"$MODULE/$api"
	go tool informer-gen --go-header-file "$HEADER" \
		--versioned-clientset-package "$pkg/clientset/versioned" \
		--listers-package "$pkg/listers" \
		--output-dir "$dir/informers" --output-pkg "$pkg/informers" \
		"$MODULE/$api"
}

gen "$OUT" "$MODULE/$OUT" api/v1beta1 "$MODULE" api/v1beta1 ""
# The generators name a group's package after the directory above its
# version, so the typed extensions client is typed/extensions/v1beta1 (the
# reference's API lives in extensions/api/, giving typed/api/v1beta1); the
# clientset, informer factory and lister import paths are the reference's.
gen "$OUT/extensions" "$MODULE/$OUT/extensions" api/extensions/v1beta1 "$MODULE/api" extensions/v1beta1 "$EXT_EXTERNAL"
