# The two things a contributor must remember: `make verify` and `make test`.
SHELL := /usr/bin/env bash
GO ?= go
CONTROLLER_GEN := $(GO) tool controller-gen
export KUBEBUILDER_ASSETS ?= $(shell hack/kube/build.sh --print-dir)

.PHONY: all
all: build

## deps-test: build kube-apiserver, etcd and kubectl from source (cached).
.PHONY: deps-test
deps-test:
	hack/kube/build.sh

## deps: everything the local cluster needs (apt packages and Go-built binaries).
.PHONY: deps
deps:
	hack/deps.sh

## generate: deepcopy code, CRDs and RBAC from the Go types and markers.
.PHONY: generate
generate:
	$(CONTROLLER_GEN) object paths=./api/...
	$(CONTROLLER_GEN) crd:crdVersions=v1,maxDescLen=0 paths=./api/... output:crd:dir=k8s/crd
	$(CONTROLLER_GEN) rbac:roleName=agent-sandbox-controller paths=./internal/controller/sandbox/... paths=./internal/manager/... output:rbac:dir=k8s/rbac/core

## verify: generated files are fresh, gofmt and go vet are clean.
.PHONY: verify
verify: generate
	@git diff --exit-code -- api k8s/crd k8s/rbac || { echo "generated files are stale: run 'make generate' and commit"; exit 1; }
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

.PHONY: build
build:
	$(GO) build ./...

## test: all tests: unit + integration on a real apiserver, then e2e on the
## local cluster (real kubelet, containerd, gVisor; needs root).
.PHONY: test
test: deps verify test-integration test-e2e

.PHONY: test-integration
test-integration: deps-test
	$(GO) test -count=1 $$($(GO) list ./... | grep -v /test/e2e)

# The e2e package runs alone: one of its tests takes the cluster down and up.
# CI takes the cluster down at the end; locally it stays up for fast reruns.
.PHONY: test-e2e
test-e2e: deps
	AGENT_SANDBOX_E2E_DOWN=$(if $(CI),1,0) $(GO) test -count=1 -p 1 -timeout 30m ./test/e2e/

## images: sandbox runtime images (sandboxd, python-runtime) as OCI tarballs.
.PHONY: images
images:
	$(GO) run ./hack/mkimages

## proto: regenerate the process API from api/proto.
.PHONY: proto
proto:
	hack/gen-proto.sh

## fuzz: run every sandboxd fuzz target (FUZZTIME each, default 60s).
.PHONY: fuzz
fuzz:
	hack/fuzz-sandboxd.sh

## bench: benchmarks (numbers, never assertions).
.PHONY: bench
bench: deps-test
	$(GO) test -run '^$$' -bench . -benchtime 1x ./test/bench/sandbox/
	$(GO) test -run '^$$' -bench . -benchtime 3s ./test/bench/sandboxd/

## up / down: the local single-node cluster with gVisor.
.PHONY: up
up: deps
	$(GO) run ./cmd/agent-sandbox up

.PHONY: down
down:
	$(GO) run ./cmd/agent-sandbox down

## run: the main job (see README).
.PHONY: run
run: deps-test
	$(GO) run ./hack/demo
