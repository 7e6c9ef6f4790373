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
	hack/helm/build.sh

## deps: everything the local cluster needs (apt packages and Go-built binaries).
.PHONY: deps
deps:
	hack/deps.sh

## generate: deepcopy code, typed clients (clients/k8s), CRDs and RBAC from the Go types and markers.
.PHONY: generate
generate:
	$(CONTROLLER_GEN) object paths=./api/...
	hack/gen-clients.sh
	$(CONTROLLER_GEN) crd:crdVersions=v1,maxDescLen=0 paths=./api/... output:crd:dir=k8s/crd
	# v1alpha1 is served too: the CRDs convert through the controller's webhook.
	$(GO) run ./hack/crdconversion k8s/crd/*.yaml
	$(CONTROLLER_GEN) rbac:roleName=agent-sandbox-controller paths=./internal/controller/sandbox/... paths=./internal/manager/... paths=./internal/webhook/... output:rbac:dir=k8s/rbac/core
	$(CONTROLLER_GEN) rbac:roleName=agent-sandbox-controller-extensions paths=./internal/controller/claim/... paths=./internal/controller/warmpool/... paths=./internal/controller/template/... output:rbac:dir=k8s/rbac/extensions
	cp k8s/crd/*.yaml charts/agent-sandbox/crds/
	cp k8s/rbac/core/role.yaml charts/agent-sandbox/files/rbac/core-role.yaml
	cp k8s/rbac/extensions/role.yaml charts/agent-sandbox/files/rbac/extensions-role.yaml
	mkdir -p charts/agent-sandbox/files/admission && cp k8s/admission/policy.yaml charts/agent-sandbox/files/admission/policy.yaml && cp k8s/admission/hibernation-policy.yaml charts/agent-sandbox/files/admission/hibernation-policy.yaml
	@# The local cluster installs this copy: it names the images mkimages
	@# imports (localhost/agent-sandbox/...:dev), not a registry's.
	@tmp=$$(mktemp -d) && OUT_DIR=$$tmp IMAGE_REPO=localhost/agent-sandbox IMAGE_TAG=dev hack/release-manifests.sh >/dev/null && \
		cp $$tmp/sandbox-with-extensions.yaml internal/platform/manifests/ && rm -rf $$tmp
	{ cat k8s/admission/hibernation-policy.yaml; echo ---; cat k8s/admission/hibernation-binding.yaml; } \
		> internal/platform/manifests/hibernation.yaml
	{ cat examples/python-runtime/sandboxtemplate.yaml; echo ---; cat examples/python-runtime/sandboxwarmpool.yaml; } \
		> internal/platform/manifests/default-pool.yaml

## verify: generated files (CRDs, RBAC, clients, protos) are fresh and
## committed, every go.mod is tidy, gofmt and go vet are clean, `make lint`
## (golangci-lint with the Kubernetes API linter, ruff, mypy --strict) and
## the TypeScript SDK's linters pass.
.PHONY: verify
verify: generate proto tidy
	@git diff --exit-code -- api/proto || { echo "generated protos are stale: run 'make proto' and commit"; exit 1; }
	@git diff --exit-code -- api clients/k8s k8s/crd k8s/rbac charts/agent-sandbox/crds charts/agent-sandbox/files internal/platform/manifests || { echo "generated files are stale: run 'make generate' and commit"; exit 1; }
	@out="$$(git status --porcelain --untracked-files=all -- clients/k8s k8s/crd k8s/rbac charts/agent-sandbox/crds internal/platform/manifests)"; if [ -n "$$out" ]; then echo "generated files not committed:"; echo "$$out"; exit 1; fi
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@# After generation, so the generated code is linted as committed.
	$(MAKE) --no-print-directory lint
	clients/typescript/run-tests.sh lint
	@out="$$(git status --porcelain --untracked-files=all)"; if [ -n "$$out" ]; then echo "the tree is not clean after generation (commit or ignore these):"; echo "$$out"; exit 1; fi

## tidy: `go mod tidy -diff` for every go.mod in the repository (the product
## module and each pinned tool module under hack/ and test/).
.PHONY: tidy
tidy:
	@rc=0; for mod in $$(git ls-files '*go.mod'); do dir=$$(dirname $$mod); \
		( cd $$dir && GOFLAGS=-mod=mod $(GO) mod tidy -diff ) || { echo "$$mod is not tidy: run 'go mod tidy' in $$dir"; rc=1; }; \
	done; exit $$rc

GOLANGCI_LINT = $(shell hack/golangci/build.sh --print)

## lint: golangci-lint (.golangci.yml, with kube-api-linter on api/) and the
## Python SDK's ruff and mypy --strict. Builds golangci-lint once (pinned in
## hack/golangci/go.mod, cached under ~/.cache/agent-sandbox/bin).
.PHONY: lint
lint: lint-go lint-python

.PHONY: lint-go
lint-go:
	hack/golangci/build.sh >/dev/null
	$(GOLANGCI_LINT) run ./...

.PHONY: lint-python
lint-python:
	clients/python/run-tests.sh --lint

.PHONY: build
build:
	$(GO) build ./...

## test: all tests: unit + integration on a real apiserver, then e2e on the
## local cluster (real kubelet, containerd, gVisor; needs root).
.PHONY: test
test: deps verify test-integration test-python test-typescript test-conformance test-e2e

## test-unit: the fast tier: every test that needs no apiserver, kubelet or
## image build (`go test -short`; the rest skip naming the target that runs
## them). No deps: it works on a fresh checkout.
# Linking ~40 test binaries (most carry client-go) is most of its cost, so:
# packages whose tests all need the stack (TestMain calls
# testenv.ExitIfShort) are not built (hack/unit-packages.sh); the binaries
# carry no DWARF or symbol table (-s -w: about half the link CPU; stack
# traces keep file:line); and hack/test-unit.sh keeps them in
# bin/unit-tests, relinking only the stale ones (go test relinks all of
# them on every run), then runs every one fresh with -short.
.PHONY: test-unit
test-unit:
	GO=$(GO) hack/test-unit.sh

## test-integration: every Go test outside test/e2e and test/conformance,
## without -short: real kube-apiserver + etcd, devstack, image builds.
.PHONY: test-integration
test-integration: deps-test
	$(GO) test -count=1 $$($(GO) list ./... | grep -v -e /test/e2e -e /test/conformance)

## test-typescript: the TypeScript SDK's unit tests and its integration run on the devstack.
.PHONY: test-typescript
test-typescript: deps-test
	clients/typescript/run-tests.sh unit
	clients/typescript/run-tests.sh integration
	clients/typescript/run-tests.sh pack

## test-conformance: one scenario through the Go, Python and TypeScript SDKs on one devstack; results and claims must agree.
.PHONY: test-conformance
test-conformance: deps-test
	$(GO) test -count=1 -v -run TestSDKsAgree ./test/conformance/

## test-python: the Python SDK's pytest suite (unit + integration on the devstack).
.PHONY: test-python
test-python: deps-test
	clients/python/run-tests.sh -q

# The e2e package runs alone: one of its tests takes the cluster down and up.
# CI takes the cluster down at the end; locally it stays up for fast reruns.
.PHONY: test-e2e
test-e2e: deps images
	AGENT_SANDBOX_E2E_DOWN=$(if $(CI),1,0) $(GO) test -count=1 -p 1 -timeout 45m ./test/e2e/

## images: every image as an OCI tarball in ~/.cache/agent-sandbox/images:
## sandbox runtimes (sandboxd, python-runtime), the examples' (jupyterlab,
## chrome) and the platform (controller, router). Unchanged ones are skipped.
.PHONY: images
images:
	$(GO) run ./hack/mkimages -examples

# Where `make push` puts the images and what `make release-manifests`
# names: <REGISTRY>/agent-sandbox-controller:<TAG>, <REGISTRY>/sandbox-router-go:<TAG>
# (and sandboxd, python-runtime-sandbox). The default is the reference
# project's release path.
REGISTRY ?= registry.k8s.io/agent-sandbox
TAG ?= dev
PULL_POLICY ?= IfNotPresent

## push: build and push controller, router, sandboxd and python-runtime as
## image indexes (controller and router also for arm64) to REGISTRY with TAG;
## EXAMPLES=1 adds the example images, INSECURE=1 for a plain-HTTP registry.
.PHONY: push
push:
	$(GO) run ./hack/mkimages -push $(REGISTRY) -tag $(TAG) $(if $(INSECURE),-insecure-registry) $(if $(EXAMPLES),-examples)

## release-manifests: dist/sandbox.yaml, dist/extensions.yaml, dist/sandbox-with-extensions.yaml naming REGISTRY and TAG.
.PHONY: release-manifests
release-manifests:
	REGISTRY=$(REGISTRY) TAG=$(TAG) IMAGE_PULL_POLICY=$(PULL_POLICY) hack/release-manifests.sh

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

## install-kubectl-plugin: agent-sandbox as `kubectl sandbox` (BINDIR, default /usr/local/bin).
.PHONY: install-kubectl-plugin
install-kubectl-plugin:
	hack/install-kubectl-plugin.sh $(BINDIR)

## up / down: the local single-node cluster with gVisor.
.PHONY: up
up: deps
	$(GO) run ./cmd/agent-sandbox up

.PHONY: down
down:
	$(GO) run ./cmd/agent-sandbox down

## run: the main job: local cluster + agent-sandbox, claim a sandbox, run Python in it.
.PHONY: run
run:
	hack/run.sh
