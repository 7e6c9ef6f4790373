// Package integration runs sandbox-router against a real kube-apiserver
// (envtest, binaries built by hack/kube/build.sh): the informer-backed
// resolution, transparent resume of suspended sandboxes and idle
// suspension, with a test helper standing in for the Sandbox controller and
// the kubelet. It contains tests only.
package integration
