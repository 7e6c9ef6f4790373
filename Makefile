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
deps: deps-test

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

## test: all tests (unit + integration on a real apiserver).
.PHONY: test
test: deps-test verify
	$(GO) test -count=1 ./...

## run: the main job (see README).
.PHONY: run
run: deps-test
	$(GO) run ./hack/demo
