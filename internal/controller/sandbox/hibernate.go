package sandbox

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/hibernate"
	"sigs.k8s.io/agent-sandbox/internal/mergepatch"
)

// Deep hibernation (Options.DeepHibernation): before a gVisor Pod is deleted
// for suspend, the node agent checkpoints it; on resume the new Pod carries
// the restore annotation and the node's shim restores it. Everything here is
// level-triggered on Pod annotations (see internal/hibernate/protocol.go)
// and never blocks a suspend or resume: a missing or failed agent ends in
// today's filesystem-only behaviour with a MemorySnapshot condition saying
// so.

// DefaultCheckpointTimeout bounds how long a suspend waits for the agent.
const DefaultCheckpointTimeout = 60 * time.Second

func (r *Reconciler) checkpointTimeout() time.Duration {
	if r.Options.CheckpointTimeout > 0 {
		return r.Options.CheckpointTimeout
	}
	return DefaultCheckpointTimeout
}

// hibernationEligible: only Pods of a gVisor RuntimeClass that have been
// running on a node can be checkpointed; runc Pods keep today's behaviour.
// The RuntimeClass is read from the template the Pod was built from, because
// the manager's Pod cache keeps only spec.nodeName; the agent checks the
// real runtime (a runsc sandbox for the Pod's UID) and fails otherwise.
func (r *Reconciler) hibernationEligible(sb *sandboxv1beta1.Sandbox, pod *corev1.Pod) bool {
	if !r.Options.DeepHibernation || pod.Spec.NodeName == "" || pod.Status.Phase != corev1.PodRunning {
		return false
	}
	rc := sb.Spec.PodTemplate.Spec.RuntimeClassName
	classes := r.Options.HibernationRuntimeClasses
	if len(classes) == 0 {
		classes = []string{"gvisor"}
	}
	return rc != nil && slices.Contains(classes, *rc)
}

// checkpointBeforeDelete drives the checkpoint of a suspending Pod. It
// returns true when the Pod may be deleted now, otherwise how long to wait.
// The outcome goes into sb.Status (written once by the caller's pass); a
// failed checkpoint is also returned as the note of the CheckpointFailed
// event, which the caller records once the Pod's deletion went through
// (that deletion is what the event explains, and it happens only once).
func (r *Reconciler) checkpointBeforeDelete(ctx context.Context, sb *sandboxv1beta1.Sandbox, pod *corev1.Pod) (ready bool, wait time.Duration, failed string, err error) {
	if !r.hibernationEligible(sb, pod) {
		return true, 0, "", nil
	}
	requested := pod.Annotations[hibernate.AnnotationCheckpointRequested]
	if requested == "" {
		now := r.now().UTC().Format(time.RFC3339)
		if err := r.patchPodAnnotations(ctx, pod, map[string]*string{hibernate.AnnotationCheckpointRequested: &now}); err != nil {
			return false, 0, "", err
		}
		r.Recorder.Eventf(sb, pod, corev1.EventTypeNormal, "Checkpointing", "Suspend", "Asking node %s to checkpoint Pod %q before deleting it", pod.Spec.NodeName, pod.Name)
		return false, r.checkpointTimeout(), "", nil
	}
	at, perr := time.Parse(time.RFC3339, requested)
	raw, answered := pod.Annotations[hibernate.AnnotationCheckpointResult]
	if !answered {
		left := r.checkpointTimeout()
		if perr == nil {
			left -= r.now().Sub(at)
		}
		if left > 0 {
			return false, left, "", nil
		}
		return true, 0, checkpointFailed(sb, fmt.Sprintf("the node agent on %s did not checkpoint Pod %q within %s", pod.Spec.NodeName, pod.Name, r.checkpointTimeout())), nil
	}
	res, err := hibernate.DecodeCheckpointResult(raw)
	switch {
	case err != nil:
		return true, 0, checkpointFailed(sb, err.Error()), nil
	case !res.OK:
		return true, 0, checkpointFailed(sb, "checkpoint failed: "+res.Error), nil
	case perr == nil && sb.Status.MemorySnapshot != nil && !sb.Status.MemorySnapshot.TakenAt.Before(&metav1.Time{Time: at}):
		// Recorded by an earlier pass (and written): the Pod may go now.
		// Recording first and deleting after means a failed status write
		// never loses a snapshot the Pod was deleted for.
		return true, 0, "", nil
	case res.Volume != "" && (res.VolumePath == "" || !strings.HasPrefix(res.Digest, "sha256:")):
		// A snapshot on tenant-writable storage without a digest could
		// never be told apart from one the tenant wrote.
		return true, 0, checkpointFailed(sb, fmt.Sprintf("the node agent saved the snapshot on volume %q without a digest or location", res.Volume)), nil
	default:
		sb.Status.MemorySnapshot = &sandboxv1beta1.MemorySnapshot{
			ID: string(sb.UID), NodeName: pod.Spec.NodeName, SizeBytes: res.SizeBytes, TakenAt: metav1.NewTime(r.now()),
			Volume: res.Volume, VolumePath: res.VolumePath, Digest: res.Digest,
		}
		where := "on node " + pod.Spec.NodeName
		if res.Volume != "" {
			where = fmt.Sprintf("on volume %q", res.Volume)
		}
		setMemoryCondition(sb, metav1.ConditionTrue, sandboxv1beta1.ReasonMemorySnapshotSaved,
			fmt.Sprintf("Memory snapshot of %d MiB saved %s in %d ms", res.SizeBytes>>20, where, res.DurationMS))
		r.eventAfterWrite(ctx, sb, pod, corev1.EventTypeNormal, sandboxv1beta1.ReasonMemorySnapshotSaved, "Suspend",
			"Checkpointed Pod %q (%d MiB) %s", pod.Name, res.SizeBytes>>20, where)
		return false, 10 * time.Millisecond, "", nil
	}
}

// checkpointFailed records a failed checkpoint in status and returns the
// note of its event.
func checkpointFailed(sb *sandboxv1beta1.Sandbox, msg string) string {
	// An event's note is limited to 1 kB (a longer one is refused and the
	// event lost); the agent's error comes from runsc and may be long.
	if len(msg) > 900 {
		msg = msg[:900] + "..."
	}
	note := msg + "; suspending with volumes only"
	sb.Status.MemorySnapshot = nil
	setMemoryCondition(sb, metav1.ConditionFalse, sandboxv1beta1.ReasonCheckpointFailed, note)
	return note
}

// restoreIntoPod adds the restore annotation and, for a snapshot in a
// node's local store, pins the Pod to that node (a snapshot on the
// Sandbox's volume goes wherever the volume can be mounted). The snapshot
// reference, digest included, comes only from the Sandbox's status, which
// tenants cannot write; template annotations under agents.x-k8s.io/ never
// reach a Pod (labels.UserKeys).
func (r *Reconciler) restoreIntoPod(sb *sandboxv1beta1.Sandbox, pod *corev1.Pod) {
	snap := sb.Status.MemorySnapshot
	if !r.Options.DeepHibernation || snap == nil {
		return
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[hibernate.AnnotationRestoreSnapshot] = restoreRef(snap).Encode()
	if pod.Spec.NodeName == "" && snap.Volume == "" {
		pod.Spec.NodeName = snap.NodeName
	}
}

func restoreRef(snap *sandboxv1beta1.MemorySnapshot) hibernate.RestoreRef {
	ref := hibernate.RestoreRef{ID: snap.ID}
	if snap.Volume != "" {
		ref.Digest, ref.VolumePath = snap.Digest, snap.VolumePath
	}
	return ref
}

// restoresFrom: the Pod carries the restore reference of snap.
func restoresFrom(pod *corev1.Pod, snap *sandboxv1beta1.MemorySnapshot) bool {
	v, ok := pod.Annotations[hibernate.AnnotationRestoreSnapshot]
	return ok && v == restoreRef(snap).Encode()
}

// observeRestore reads the node agent's restore result from the resumed
// Pod: the snapshot is then consumed, and the condition says whether the
// processes went on or the Pod started clean.
func (r *Reconciler) observeRestore(ctx context.Context, sb *sandboxv1beta1.Sandbox, pod *corev1.Pod) {
	snap := sb.Status.MemorySnapshot
	if snap == nil || pod == nil || !restoresFrom(pod, snap) {
		return
	}
	raw, ok := pod.Annotations[hibernate.AnnotationRestoreResult]
	if !ok {
		return
	}
	sb.Status.MemorySnapshot = nil
	res, err := hibernate.DecodeResult(raw)
	if err == nil && res.State == hibernate.StateRestored {
		setMemoryCondition(sb, metav1.ConditionFalse, sandboxv1beta1.ReasonRestoredFromSnapshot, "Pod "+pod.Name+" was restored from the memory snapshot")
		r.eventAfterWrite(ctx, sb, pod, corev1.EventTypeNormal, sandboxv1beta1.ReasonRestoredFromSnapshot, "Resume", "Pod %q restored from the memory snapshot", pod.Name)
		return
	}
	reason := res.Reason
	if err != nil {
		reason = err.Error()
	}
	setMemoryCondition(sb, metav1.ConditionFalse, sandboxv1beta1.ReasonSnapshotRestoreFailed, "Pod "+pod.Name+" started clean: "+reason)
	r.eventAfterWrite(ctx, sb, pod, corev1.EventTypeWarning, sandboxv1beta1.ReasonSnapshotRestoreFailed, "Resume", "Pod %q started clean: %s", pod.Name, reason)
}

// restoreTimeout bounds how long a resumed Pod may go without the node
// agent's restore result: the Pod's creation, scheduling to the pinned node,
// the restore itself and the agent's report.
func (r *Reconciler) restoreTimeout() time.Duration { return 2 * r.checkpointTimeout() }

// restoreWatchdog keeps a resume from depending on the node agent forever.
// While status.memorySnapshot is set, every new Pod is created with the
// restore annotation and pinned to the snapshot's node; without a result
// (no agent on the node, agent down, node gone) that would last for ever:
// a recreated Pod would restore the same memory a second time, and a Pod
// pinned to a node that does not start it would stay Pending. After
// restoreTimeout the snapshot reference is dropped (the condition says the
// outcome is unknown), and a Pod that never started is deleted so the next
// one starts clean on any node. It returns when to look again.
func (r *Reconciler) restoreWatchdog(ctx context.Context, sb *sandboxv1beta1.Sandbox) (time.Duration, error) {
	snap := sb.Status.MemorySnapshot
	if !r.Options.DeepHibernation || snap == nil || sb.IsSuspended() {
		return 0, nil
	}
	pod := &corev1.Pod{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: sb.Namespace, Name: sb.Name}, pod); err != nil {
		return 0, client.IgnoreNotFound(err)
	}
	if !ownedBy(pod, sb) || pod.DeletionTimestamp != nil || !restoresFrom(pod, snap) {
		return 0, nil
	}
	if _, reported := pod.Annotations[hibernate.AnnotationRestoreResult]; reported {
		return 0, nil // observeRestore consumes it
	}
	if left := r.restoreTimeout() - r.now().Sub(pod.CreationTimestamp.Time); left > 0 {
		return left, nil
	}
	sb.Status.MemorySnapshot = nil
	msg := fmt.Sprintf("the node agent on %s did not report within %s whether Pod %q was restored; the snapshot will not be used again",
		snap.NodeName, r.restoreTimeout(), pod.Name)
	if pod.Status.StartTime == nil {
		msg = fmt.Sprintf("Pod %q was not started on node %s (which holds the snapshot) within %s; recreating it without the snapshot",
			pod.Name, snap.NodeName, r.restoreTimeout())
		if snap.Volume != "" {
			msg = fmt.Sprintf("Pod %q was not started within %s; recreating it without the snapshot", pod.Name, r.restoreTimeout())
		}
		if err := r.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); client.IgnoreNotFound(err) != nil {
			return 0, fmt.Errorf("deleting pod %q that never started: %w", pod.Name, err)
		}
	}
	setMemoryCondition(sb, metav1.ConditionFalse, sandboxv1beta1.ReasonSnapshotRestoreUnknown, msg)
	r.eventAfterWrite(ctx, sb, pod, corev1.EventTypeWarning, sandboxv1beta1.ReasonSnapshotRestoreUnknown, "Resume", "%s", msg)
	return 0, nil
}

func setMemoryCondition(sb *sandboxv1beta1.Sandbox, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&sb.Status.Conditions, metav1.Condition{
		Type: sandboxv1beta1.SandboxConditionMemorySnapshot, Status: status, Reason: reason, Message: msg,
		ObservedGeneration: sb.Generation,
	})
}

func (r *Reconciler) patchPodAnnotations(ctx context.Context, pod *corev1.Pod, ann map[string]*string) error {
	patch, err := mergepatch.Patch{Meta: mergepatch.Meta{Annotations: ann}}.Client()
	if err != nil {
		return fmt.Errorf("pod %q: %w", pod.Name, err)
	}
	if err := r.Patch(ctx, pod, patch); err != nil {
		return fmt.Errorf("annotating pod %q: %w", pod.Name, err)
	}
	return nil
}
