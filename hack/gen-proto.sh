#!/usr/bin/env bash
# Regenerates the Go code for the protobuf APIs under api/proto.
#
# protoc comes from Debian's protobuf-compiler package (installed on demand
# when missing, as root); the Go plugins are pinned as `go tool` entries in
# go.mod so every machine generates byte-identical files.
set -euo pipefail

cd "$(dirname "$0")/.."

if ! command -v protoc >/dev/null 2>&1; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "protoc not found; install Debian's protobuf-compiler" >&2
		exit 1
	fi
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq protobuf-compiler >/dev/null
fi

bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/protoc-gen-go" google.golang.org/protobuf/cmd/protoc-gen-go
go build -o "$bin/protoc-gen-go-grpc" google.golang.org/grpc/cmd/protoc-gen-go-grpc

# Debian installs the well-known types (google/protobuf/*.proto) here.
include=/usr/include
for proto in $(find api/proto -name '*.proto' | sort); do
	PATH="$bin:$PATH" protoc \
		-I api/proto -I "$include" \
		--go_out=api/proto --go_opt=paths=source_relative \
		--go-grpc_out=api/proto --go-grpc_opt=paths=source_relative \
		"$proto"
done
echo "generated Go code for $(find api/proto -name '*.proto' | wc -l) proto file(s)"
