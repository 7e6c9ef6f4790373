package sandbox

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/hibernate"
	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// These tests play the node agent's side of the Pod-annotation protocol
// (internal/hibernate/protocol.go) against the real controller and
// apiserver; the agent's own checkpoint is proven on real gVisor pods by
// test/e2e TestDeepHibernationPodRestore.

func gvisorSandbox(t *testing.T, ns, name string) *sandboxv1beta1.Sandbox {
	t.Helper()
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runsc"}
	if err := k8s.Create(ctxT(t), rc); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	b := makeSandbox(ns, name)
	gv := "gvisor"
	b.sb.Spec.PodTemplate.Spec.RuntimeClassName = &gv
	return b.create(t)
}

func annotatePod(t *testing.T, pod *corev1.Pod, k, v string) {
	t.Helper()
	data, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{k: v}}})
	if err := k8s.Patch(ctxT(t), pod, client.RawPatch(types.MergePatchType, data)); err != nil {
		t.Fatalf("annotating pod: %v", err)
	}
}

func waitPodAnnotation(t *testing.T, ns, name, key string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	eventually(t, 20*time.Second, "pod annotation "+key, func() (bool, error) {
		p, err := getPod(ns, name)
		if err != nil {
			return false, err
		}
		pod = p
		_, ok := p.Annotations[key]
		return ok, nil
	})
	return pod
}

func TestDeepHibernationCheckpointThenRestore(t *testing.T) {
	ns := newNamespace(t)
	sb := gvisorSandbox(t, ns, "hib")
	waitCondition(t, ns, sb.Name, "Ready", metav1.ConditionTrue, sandboxv1beta1.ReasonDependenciesReady)

	setMode(t, ns, sb.Name, sandboxv1beta1.OperatingModeSuspended)
	pod := waitPodAnnotation(t, ns, sb.Name, hibernate.AnnotationCheckpointRequested)
	// The controller must wait for the agent, not delete the Pod.
	consistently(t, 300*time.Millisecond, "pod kept until checkpointed", func() (bool, error) {
		p, err := getPod(ns, sb.Name)
		return err == nil && p.UID == pod.UID && p.DeletionTimestamp == nil, err
	})
	annotatePod(t, pod, hibernate.AnnotationCheckpointResult, hibernate.CheckpointResult{OK: true, SizeBytes: 70 << 20, DurationMS: 420}.Encode())
	got := waitCondition(t, ns, sb.Name, sandboxv1beta1.SandboxConditionMemorySnapshot, metav1.ConditionTrue, sandboxv1beta1.ReasonMemorySnapshotSaved)
	snap := got.Status.MemorySnapshot
	if snap == nil || snap.ID != string(got.UID) || snap.NodeName != testenv.FakeNodeName || snap.SizeBytes != 70<<20 {
		t.Fatalf("status.memorySnapshot = %+v", snap)
	}
	eventually(t, 20*time.Second, "pod deleted after checkpoint", gone(pod))
	waitCondition(t, ns, sb.Name, "Suspended", metav1.ConditionTrue, sandboxv1beta1.ReasonPodTerminated)

	setMode(t, ns, sb.Name, sandboxv1beta1.OperatingModeRunning)
	restored := waitPodAnnotation(t, ns, sb.Name, hibernate.AnnotationRestoreSnapshot)
	if restored.Annotations[hibernate.AnnotationRestoreSnapshot] != string(got.UID) || restored.Spec.NodeName != testenv.FakeNodeName {
		t.Fatalf("resumed pod: annotation %q node %q", restored.Annotations[hibernate.AnnotationRestoreSnapshot], restored.Spec.NodeName)
	}
	annotatePod(t, restored, hibernate.AnnotationRestoreResult, hibernate.Result{Snapshot: string(got.UID), State: hibernate.StateRestored}.Encode())
	got = waitCondition(t, ns, sb.Name, sandboxv1beta1.SandboxConditionMemorySnapshot, metav1.ConditionFalse, sandboxv1beta1.ReasonRestoredFromSnapshot)
	if got.Status.MemorySnapshot != nil {
		t.Fatalf("snapshot must be consumed by the restore: %+v", got.Status.MemorySnapshot)
	}
	waitCondition(t, ns, sb.Name, "Ready", metav1.ConditionTrue, sandboxv1beta1.ReasonDependenciesReady)
}

// A node agent that never answers (killed mid-checkpoint, not installed)
// must not hold the suspend: after the timeout the Pod goes, the condition
// says why, and resume starts clean.
func TestDeepHibernationAgentTimeoutSuspendsWithVolumesOnly(t *testing.T) {
	ns := newNamespace(t)
	sb := gvisorSandbox(t, ns, "hib-timeout")
	waitCondition(t, ns, sb.Name, "Ready", metav1.ConditionTrue, sandboxv1beta1.ReasonDependenciesReady)
	setMode(t, ns, sb.Name, sandboxv1beta1.OperatingModeSuspended)
	pod := waitPodAnnotation(t, ns, sb.Name, hibernate.AnnotationCheckpointRequested)
	got := waitCondition(t, ns, sb.Name, sandboxv1beta1.SandboxConditionMemorySnapshot, metav1.ConditionFalse, sandboxv1beta1.ReasonCheckpointFailed)
	if got.Status.MemorySnapshot != nil {
		t.Fatalf("no snapshot expected: %+v", got.Status.MemorySnapshot)
	}
	eventually(t, 20*time.Second, "pod deleted after timeout", gone(pod))
	setMode(t, ns, sb.Name, sandboxv1beta1.OperatingModeRunning)
	waitCondition(t, ns, sb.Name, "Ready", metav1.ConditionTrue, sandboxv1beta1.ReasonDependenciesReady)
	p, err := getPod(ns, sb.Name)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Annotations[hibernate.AnnotationRestoreSnapshot]; ok {
		t.Fatalf("clean start expected, pod has %v", p.Annotations)
	}
}

// A failed checkpoint (full disk) and a snapshot the shim refuses
// (truncated) both end in a clean, usable Sandbox with a condition.
func TestDeepHibernationFailuresFallBackClean(t *testing.T) {
	ns := newNamespace(t)
	sb := gvisorSandbox(t, ns, "hib-fail")
	waitCondition(t, ns, sb.Name, "Ready", metav1.ConditionTrue, sandboxv1beta1.ReasonDependenciesReady)

	setMode(t, ns, sb.Name, sandboxv1beta1.OperatingModeSuspended)
	pod := waitPodAnnotation(t, ns, sb.Name, hibernate.AnnotationCheckpointRequested)
	annotatePod(t, pod, hibernate.AnnotationCheckpointResult, hibernate.CheckpointResult{Error: "writing pages: no space left on device"}.Encode())
	got := waitCondition(t, ns, sb.Name, sandboxv1beta1.SandboxConditionMemorySnapshot, metav1.ConditionFalse, sandboxv1beta1.ReasonCheckpointFailed)
	if c := condition(got, sandboxv1beta1.SandboxConditionMemorySnapshot); got.Status.MemorySnapshot != nil || !strings.Contains(c.Message, "no space left") {
		t.Fatalf("full disk: %+v %+v", got.Status.MemorySnapshot, c)
	}
	eventually(t, 20*time.Second, "pod deleted", gone(pod))

	// Second round: checkpoint works, the restore falls back.
	setMode(t, ns, sb.Name, sandboxv1beta1.OperatingModeRunning)
	waitCondition(t, ns, sb.Name, "Ready", metav1.ConditionTrue, sandboxv1beta1.ReasonDependenciesReady)
	setMode(t, ns, sb.Name, sandboxv1beta1.OperatingModeSuspended)
	pod = waitPodAnnotation(t, ns, sb.Name, hibernate.AnnotationCheckpointRequested)
	annotatePod(t, pod, hibernate.AnnotationCheckpointResult, hibernate.CheckpointResult{OK: true, SizeBytes: 1 << 20}.Encode())
	waitCondition(t, ns, sb.Name, sandboxv1beta1.SandboxConditionMemorySnapshot, metav1.ConditionTrue, sandboxv1beta1.ReasonMemorySnapshotSaved)
	eventually(t, 20*time.Second, "pod deleted", gone(pod))
	setMode(t, ns, sb.Name, sandboxv1beta1.OperatingModeRunning)
	restored := waitPodAnnotation(t, ns, sb.Name, hibernate.AnnotationRestoreSnapshot)
	annotatePod(t, restored, hibernate.AnnotationRestoreResult, hibernate.Result{State: hibernate.StateFallback, Reason: "pages.img is 4096 bytes, expected 67108864 (truncated?)"}.Encode())
	got = waitCondition(t, ns, sb.Name, sandboxv1beta1.SandboxConditionMemorySnapshot, metav1.ConditionFalse, sandboxv1beta1.ReasonSnapshotRestoreFailed)
	if got.Status.MemorySnapshot != nil || !strings.Contains(condition(got, sandboxv1beta1.SandboxConditionMemorySnapshot).Message, "truncated") {
		t.Fatalf("fallback: %+v", got.Status)
	}
	waitCondition(t, ns, sb.Name, "Ready", metav1.ConditionTrue, sandboxv1beta1.ReasonDependenciesReady)
}

// A tenant's pod template cannot name a snapshot: agents.x-k8s.io/ keys
// never reach the Pod, so the resumed Pod restores only from the snapshot
// recorded in this Sandbox's own status (never another's).
func TestDeepHibernationTemplateCannotNameSnapshot(t *testing.T) {
	ns := newNamespace(t)
	victim := gvisorSandbox(t, ns, "victim")
	b := makeSandbox(ns, "attacker").podAnnotations(hibernate.AnnotationRestoreSnapshot, string(victim.UID))
	gv := "gvisor"
	b.sb.Spec.PodTemplate.Spec.RuntimeClassName = &gv
	att := b.create(t)
	waitCondition(t, ns, att.Name, "Ready", metav1.ConditionTrue, sandboxv1beta1.ReasonDependenciesReady)
	p, err := getPod(ns, att.Name)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := p.Annotations[hibernate.AnnotationRestoreSnapshot]; ok {
		t.Fatalf("tenant template put %s=%q on the Pod", hibernate.AnnotationRestoreSnapshot, v)
	}
}

// A resumed Pod whose restore nobody reports (no node agent on the node, or
// it is down) must not keep the snapshot referenced for ever: after the
// restore timeout status.memorySnapshot is cleared, the condition says the
// outcome is unknown, and a Pod recreated later starts clean (no restore
// annotation), instead of restoring the same memory a second time.
func TestDeepHibernationRestoreWithoutAgentIsNotKeptForever(t *testing.T) {
	ns := newNamespace(t)
	sb := gvisorSandbox(t, ns, "hib-noagent")
	waitCondition(t, ns, sb.Name, "Ready", metav1.ConditionTrue, sandboxv1beta1.ReasonDependenciesReady)
	setMode(t, ns, sb.Name, sandboxv1beta1.OperatingModeSuspended)
	pod := waitPodAnnotation(t, ns, sb.Name, hibernate.AnnotationCheckpointRequested)
	annotatePod(t, pod, hibernate.AnnotationCheckpointResult, hibernate.CheckpointResult{OK: true, SizeBytes: 1 << 20}.Encode())
	waitCondition(t, ns, sb.Name, sandboxv1beta1.SandboxConditionMemorySnapshot, metav1.ConditionTrue, sandboxv1beta1.ReasonMemorySnapshotSaved)
	eventually(t, 20*time.Second, "pod deleted", gone(pod))

	setMode(t, ns, sb.Name, sandboxv1beta1.OperatingModeRunning)
	restored := waitPodAnnotation(t, ns, sb.Name, hibernate.AnnotationRestoreSnapshot)
	// Nobody answers for the restored Pod.
	got := waitCondition(t, ns, sb.Name, sandboxv1beta1.SandboxConditionMemorySnapshot, metav1.ConditionFalse, sandboxv1beta1.ReasonSnapshotRestoreUnknown)
	if got.Status.MemorySnapshot != nil {
		t.Fatalf("memorySnapshot kept without a restore result: %+v", got.Status.MemorySnapshot)
	}
	if c := condition(got, sandboxv1beta1.SandboxConditionMemorySnapshot); !strings.Contains(c.Message, "did not report") {
		t.Fatalf("condition message %q", c.Message)
	}
	// The Pod that did start is kept (it may well be the restored one).
	if p, err := getPod(ns, sb.Name); err != nil || p.UID != restored.UID {
		t.Fatalf("the started Pod was replaced: %v", err)
	}
	// A later Pod of this Sandbox starts clean.
	if err := k8s.Delete(ctxT(t), restored); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "a new pod", func() (bool, error) {
		p, err := getPod(ns, sb.Name)
		if err != nil {
			return false, client.IgnoreNotFound(err)
		}
		if p.UID == restored.UID {
			return false, nil
		}
		if v, ok := p.Annotations[hibernate.AnnotationRestoreSnapshot]; ok {
			return false, fmt.Errorf("the recreated Pod restores %q again", v)
		}
		return true, nil
	})
}

// A snapshot the agent saved on the Sandbox's volume is recorded with its
// volume, location and digest; the resumed Pod carries all three in its
// restore reference (the shim checks the digest); that it is not pinned to
// the node is TestRestoreIntoPodPinsOnlyNodeStoreSnapshots (the test
// harness binds every Pod to its node). A volume result without a digest is refused: the
// snapshot could not be told apart from one written by the tenant.
func TestDeepHibernationVolumeSnapshot(t *testing.T) {
	ns := newNamespace(t)
	sb := gvisorSandbox(t, ns, "hib-pvc")
	waitCondition(t, ns, sb.Name, "Ready", metav1.ConditionTrue, sandboxv1beta1.ReasonDependenciesReady)

	setMode(t, ns, sb.Name, sandboxv1beta1.OperatingModeSuspended)
	pod := waitPodAnnotation(t, ns, sb.Name, hibernate.AnnotationCheckpointRequested)
	annotatePod(t, pod, hibernate.AnnotationCheckpointResult, hibernate.CheckpointResult{OK: true, SizeBytes: 1 << 20,
		Volume: "data", VolumePath: "/var/lib/kubelet/pods/{pod-uid}/volumes/kubernetes.io~csi/pv-1/mount"}.Encode())
	got := waitCondition(t, ns, sb.Name, sandboxv1beta1.SandboxConditionMemorySnapshot, metav1.ConditionFalse, sandboxv1beta1.ReasonCheckpointFailed)
	if c := condition(got, sandboxv1beta1.SandboxConditionMemorySnapshot); got.Status.MemorySnapshot != nil || !strings.Contains(c.Message, "without a digest") {
		t.Fatalf("volume result without digest: %+v %+v", got.Status.MemorySnapshot, c)
	}
	eventually(t, 20*time.Second, "pod deleted", gone(pod))

	setMode(t, ns, sb.Name, sandboxv1beta1.OperatingModeRunning)
	waitCondition(t, ns, sb.Name, "Ready", metav1.ConditionTrue, sandboxv1beta1.ReasonDependenciesReady)
	setMode(t, ns, sb.Name, sandboxv1beta1.OperatingModeSuspended)
	pod = waitPodAnnotation(t, ns, sb.Name, hibernate.AnnotationCheckpointRequested)
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	const path = "/var/lib/agent-sandbox/local-path/pvc-1_default_data-hib-pvc"
	annotatePod(t, pod, hibernate.AnnotationCheckpointResult, hibernate.CheckpointResult{OK: true, SizeBytes: 70 << 20,
		Volume: "data", VolumePath: path, Digest: digest}.Encode())
	got = waitCondition(t, ns, sb.Name, sandboxv1beta1.SandboxConditionMemorySnapshot, metav1.ConditionTrue, sandboxv1beta1.ReasonMemorySnapshotSaved)
	snap := got.Status.MemorySnapshot
	if snap == nil || snap.ID != string(got.UID) || snap.Volume != "data" || snap.VolumePath != path || snap.Digest != digest {
		t.Fatalf("status.memorySnapshot = %+v", snap)
	}
	if c := condition(got, sandboxv1beta1.SandboxConditionMemorySnapshot); !strings.Contains(c.Message, `on volume "data"`) {
		t.Fatalf("condition %q", c.Message)
	}
	eventually(t, 20*time.Second, "pod deleted", gone(pod))

	setMode(t, ns, sb.Name, sandboxv1beta1.OperatingModeRunning)
	restored := waitPodAnnotation(t, ns, sb.Name, hibernate.AnnotationRestoreSnapshot)
	ref, err := hibernate.ParseRestoreRef(restored.Annotations[hibernate.AnnotationRestoreSnapshot])
	if err != nil || ref != (hibernate.RestoreRef{ID: string(got.UID), Digest: digest, VolumePath: path}) {
		t.Fatalf("restore reference %q: %+v %v", restored.Annotations[hibernate.AnnotationRestoreSnapshot], ref, err)
	}
	annotatePod(t, restored, hibernate.AnnotationRestoreResult, hibernate.Result{Snapshot: string(got.UID), State: hibernate.StateFallback,
		Reason: "snapshot default/x does not match the digest the node agent recorded"}.Encode())
	got = waitCondition(t, ns, sb.Name, sandboxv1beta1.SandboxConditionMemorySnapshot, metav1.ConditionFalse, sandboxv1beta1.ReasonSnapshotRestoreFailed)
	if got.Status.MemorySnapshot != nil {
		t.Fatalf("refused snapshot still referenced: %+v", got.Status.MemorySnapshot)
	}
}

// runsc's error for a full disk comes with goroutine stacks; however long
// the agent's error, the CheckpointFailed event (whose note the apiserver
// limits to 1 kB) is recorded, and the suspend completes.
func TestDeepHibernationLongCheckpointErrorIsReported(t *testing.T) {
	ns := newNamespace(t)
	sb := gvisorSandbox(t, ns, "hib-long")
	waitCondition(t, ns, sb.Name, "Ready", metav1.ConditionTrue, sandboxv1beta1.ReasonDependenciesReady)
	setMode(t, ns, sb.Name, sandboxv1beta1.OperatingModeSuspended)
	pod := waitPodAnnotation(t, ns, sb.Name, hibernate.AnnotationCheckpointRequested)
	long := "error serializing object: no space left on device: " + strings.Repeat("goroutine 1 [running]: ", 200)
	annotatePod(t, pod, hibernate.AnnotationCheckpointResult, hibernate.CheckpointResult{Error: long}.Encode())
	waitCondition(t, ns, sb.Name, sandboxv1beta1.SandboxConditionMemorySnapshot, metav1.ConditionFalse, sandboxv1beta1.ReasonCheckpointFailed)
	eventually(t, 20*time.Second, "pod deleted", gone(pod))
	eventually(t, 20*time.Second, "CheckpointFailed event", func() (bool, error) {
		for _, e := range eventsFor(t, ns, sb.Name) {
			if e.Reason == sandboxv1beta1.ReasonCheckpointFailed && strings.Contains(e.Note, "no space left") {
				return true, nil
			}
		}
		return false, nil
	})
}
