// Package refsdk holds programs written against the reference project's
// public Go surface; see cmd/sdk and cmd/clientset. test/e2e builds and runs
// them against the local cluster.
package refsdk
