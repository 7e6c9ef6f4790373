// Package exttest holds test helpers of the extension controllers that do
// not depend on them (so the controllers' own tests can use them): the
// kubelet stand-in, apiserver write counting, object builders and polling.
// Package harness (below) starts the controllers themselves. Both are
// imported only by tests and benchmarks.
package exttest

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// StartKubelet starts the kubelet stand-in; ready (nil = always) decides
// whether a pod is reported Ready. Writes, when set, counts its writes.
func StartKubelet(t testing.TB, env *testenv.Env, ready func(*corev1.Pod) bool, writes *WriteCounter) *testenv.Kubelet {
	t.Helper()
	testenv.SkipShort(t)
	cfg := env.Config
	if writes != nil {
		cfg = writes.Wrap(cfg)
	}
	k, err := testenv.StartKubelet(cfg, &testenv.Kubelet{Ready: ready})
	if err != nil {
		t.Fatalf("starting kubelet: %v", err)
	}
	t.Cleanup(k.Stop)
	return k
}

// Namespace creates a fresh namespace for one test.
func Namespace(t testing.TB, c client.Client, prefix string) string {
	t.Helper()
	testenv.SkipShort(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	// envtest has no namespace controller, so nothing in the namespace
	// goes away with the test. Deleting the pools at least keeps later
	// tests' managers from refilling them.
	t.Cleanup(func() {
		_ = c.DeleteAllOf(context.Background(), &extv1beta1.SandboxWarmPool{}, client.InNamespace(ns.Name))
	})
	return ns.Name
}

// Eventually polls cond every 20 ms until it returns nil or timeout passes,
// then fails the test with the last error. Timeouts are generous: they
// bound a hang, they do not assert speed.
func Eventually(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for {
		if err = cond(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met after %s: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Consistently checks that cond holds for the whole window.
func Consistently(t testing.TB, window time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(window)
	for time.Now().Before(deadline) {
		if err := cond(); err != nil {
			t.Fatalf("condition broken: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
