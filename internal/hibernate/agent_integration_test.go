package hibernate

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

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
