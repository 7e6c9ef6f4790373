package sandbox

import (
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/hibernate"
)

// denyStatusLabel marks a Sandbox whose status writes the apiserver refuses
// (denyStatusWrites), so a test can make the controller's write fail.
const denyStatusLabel = "test/deny-status-write"

// denyStatusWrites installs an admission policy that refuses every write of
// sandboxes/status for a Sandbox carrying denyStatusLabel: a real failed
// write, from the real apiserver, for as long as the label stays.
func denyStatusWrites(t *testing.T, ns string) {
	t.Helper()
	fail := admissionv1.Fail
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "deny-status-" + ns},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
				ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Update},
					Rule: admissionv1.Rule{APIGroups: []string{sandboxv1beta1.GroupVersion.Group}, APIVersions: []string{"*"},
						Resources: []string{"sandboxes/status"}},
				}}},
			},
			Validations: []admissionv1.Validation{{
				Expression: `!has(object.metadata.labels) || !('` + denyStatusLabel + `' in object.metadata.labels)`,
				Message:    "status writes are denied by the test",
			}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policy.Name,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
		},
	}
	for _, o := range []client.Object{policy, binding} {
		if err := k8s.Create(ctxT(t), o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(ctxT(t), o) })
	}
}

func setLabel(t *testing.T, ns, name, key string, value *string) {
	t.Helper()
	v := "null"
	if value != nil {
		v = `"` + *value + `"`
	}
	sb := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	patch := []byte(`{"metadata":{"labels":{"` + key + `":` + v + `}}}`)
	if err := k8s.Patch(ctxT(t), sb, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatalf("labelling sandbox: %v", err)
	}
}

// failedPasses counts the passes of a Sandbox that started after t0 and
// returned an error.
func failedPasses(key types.NamespacedName, t0 time.Time) int {
	n := 0
	for _, p := range passesOf(key) {
		if p.failed && p.start.After(t0) {
			n++
		}
	}
	return n
}

// An event explaining a status change goes out after the status write that
// records the change: while the write fails, the passes that retry it must
// not announce the restore again and again; once it succeeds, the event
// appears exactly once.
func TestStatusEventAfterFailedWriteAppearsOnce(t *testing.T) {
	ns := newNamespace(t)
	sb := gvisorSandbox(t, ns, "hib-evt")
	key := types.NamespacedName{Namespace: ns, Name: sb.Name}
	waitCondition(t, ns, sb.Name, "Ready", metav1.ConditionTrue, sandboxv1beta1.ReasonDependenciesReady)
	setMode(t, ns, sb.Name, sandboxv1beta1.OperatingModeSuspended)
	pod := waitPodAnnotation(t, ns, sb.Name, hibernate.AnnotationCheckpointRequested)
	annotatePod(t, pod, hibernate.AnnotationCheckpointResult, hibernate.CheckpointResult{OK: true, SizeBytes: 70 << 20, DurationMS: 420}.Encode())
	snap := waitCondition(t, ns, sb.Name, sandboxv1beta1.SandboxConditionMemorySnapshot, metav1.ConditionTrue, sandboxv1beta1.ReasonMemorySnapshotSaved)
	waitCondition(t, ns, sb.Name, "Suspended", metav1.ConditionTrue, sandboxv1beta1.ReasonPodTerminated)

	denyStatusWrites(t, ns)
	on := "1"
	setLabel(t, ns, sb.Name, denyStatusLabel, &on)
	// Resuming changes status, so a refused pass here proves the policy
	// is in force before the restore is reported.
	t0 := time.Now()
	setMode(t, ns, sb.Name, sandboxv1beta1.OperatingModeRunning)
	restored := waitPodAnnotation(t, ns, sb.Name, hibernate.AnnotationRestoreSnapshot)
	eventually(t, 20*time.Second, "a pass whose status write is refused", func() (bool, error) {
		return failedPasses(key, t0) > 0, nil
	})
	t1 := time.Now()
	annotatePod(t, restored, hibernate.AnnotationRestoreResult, hibernate.Result{Snapshot: string(snap.UID), State: hibernate.StateRestored}.Encode())
	// Passes that see the restore result and fail to record it.
	eventually(t, 20*time.Second, "two refused passes after the restore result", func() (bool, error) {
		return failedPasses(key, t1) >= 2, nil
	})
	setLabel(t, ns, sb.Name, denyStatusLabel, nil)
	waitCondition(t, ns, sb.Name, sandboxv1beta1.SandboxConditionMemorySnapshot, metav1.ConditionFalse, sandboxv1beta1.ReasonRestoredFromSnapshot)

	restoredEvents := func() int {
		n := 0
		for _, e := range eventsFor(t, ns, sb.Name) {
			if e.Reason == sandboxv1beta1.ReasonRestoredFromSnapshot {
				n++
				if e.Series != nil {
					n += int(e.Series.Count) - 1
				}
			}
		}
		return n
	}
	eventually(t, 10*time.Second, "the RestoredFromSnapshot event", func() (bool, error) { return restoredEvents() > 0, nil })
	waitSettled(t, ns, sb.Name)
	if n := restoredEvents(); n != 1 {
		t.Fatalf("RestoredFromSnapshot recorded %d times, want once (after the write that succeeded)", n)
	}
}
