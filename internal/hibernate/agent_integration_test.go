package hibernate

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// A Pod re-queued while its checkpoint ran comes back from the agent's
// cache without the result the agent has just written. The agent must not
// checkpoint it a second time: the sandbox is gone by then, and the error
// would overwrite the good result (seen in the 1 GiB benchmark: the
// controller then suspended with volumes only). Real apiserver.
func TestAgentDoesNotRedoAnsweredCheckpointFromStaleCache(t *testing.T) {
	testenv.SkipShort(t)
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	yes := true
	ok := CheckpointResult{OK: true, SizeBytes: 1 << 30, Digest: "sha256:00"}.Encode()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sb", Namespace: metav1.NamespaceDefault,
			Annotations:     map[string]string{AnnotationCheckpointRequested: "2026-01-01T00:00:00Z", AnnotationCheckpointResult: ok},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "agents.x-k8s.io/v1beta1", Kind: "Sandbox", Name: "sb", UID: "sb-uid", Controller: &yes}}},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "app", Image: "x"}}},
	}
	live, err := cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	ran := filepath.Join(root, "runsc-ran")
	runsc := filepath.Join(root, "runsc")
	if err := os.WriteFile(runsc, []byte("#!/bin/sh\ntouch "+ran+"\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	a := &Agent{Client: cs, NodeName: "node-1", Checkpointer: Checkpointer{
		Store: Store{Root: filepath.Join(root, "store")}, Runsc: runsc, RunscRoot: root, TaskDir: filepath.Join(root, "tasks")}}

	stale := live.DeepCopy()
	delete(stale.Annotations, AnnotationCheckpointResult)
	if _, err := a.sync(ctx, stale); err != nil {
		t.Fatalf("sync: %v", err)
	}
	got, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Annotations[AnnotationCheckpointResult] != ok {
		t.Fatalf("the answered checkpoint was redone: result now %q", got.Annotations[AnnotationCheckpointResult])
	}
	if _, err := os.Stat(ran); err == nil {
		t.Fatal("runsc was run again for an answered checkpoint")
	}
}

// By the time the restore's outcome reaches the Pod (where the controller
// reads it), the consumed snapshot is gone from the node: a reader of the
// result never finds it still there (e2e TestDeepHibernationThroughController
// once did, the agent removing it just after the report). The check runs
// inside the agent's own PATCH request, before it reaches the apiserver.
// Real apiserver.
func TestAgentRemovesConsumedSnapshotBeforeReporting(t *testing.T) {
	testenv.SkipShort(t)
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	root := t.TempDir()
	st := Store{Root: filepath.Join(root, "store")}
	const snap = "sb-uid"
	dir, err := st.SnapshotDir(metav1.NamespaceDefault, snap)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var reports []bool // for each restore-result PATCH: was the snapshot still there?
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodPatch && req.Body != nil {
				b, _ := io.ReadAll(req.Body)
				req.Body = io.NopCloser(bytes.NewReader(b))
				if bytes.Contains(b, []byte(AnnotationRestoreResult)) {
					_, statErr := os.Stat(dir)
					mu.Lock()
					reports = append(reports, statErr == nil)
					mu.Unlock()
				}
			}
			return rt.RoundTrip(req)
		})
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sb", Namespace: metav1.NamespaceDefault,
			Annotations: map[string]string{AnnotationRestoreSnapshot: snap}},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "app", Image: "x"}}},
	}
	live, err := cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// What the shim leaves: the snapshot it restored, and its decision.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pages.img"), []byte("pages"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(st.Root, "results"), 0o700); err != nil {
		t.Fatal(err)
	}
	res := Result{Snapshot: snap, State: StateRestored}
	if err := os.WriteFile(filepath.Join(st.Root, "results", string(live.UID)+".json"), []byte(res.Encode()), 0o600); err != nil {
		t.Fatal(err)
	}

	a := &Agent{Client: cs, NodeName: "node-1", Checkpointer: Checkpointer{Store: st}}
	if _, err := a.sync(ctx, live); err != nil {
		t.Fatalf("sync: %v", err)
	}
	got, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := DecodeResult(got.Annotations[AnnotationRestoreResult]); err != nil || r.State != StateRestored {
		t.Fatalf("reported %q (%v), want Restored", got.Annotations[AnnotationRestoreResult], err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reports) != 1 {
		t.Fatalf("%d restore-result patches, want 1", len(reports))
	}
	if reports[0] {
		t.Fatal("the restore was reported while the consumed snapshot was still in the node store")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("consumed snapshot left behind: %v", err)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
