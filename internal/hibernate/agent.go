package hibernate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// Agent is the node agent: it watches the Pods bound to its node and acts on
// the controller's annotations (protocol.go). It only ever checkpoints the
// Pod that carries the request, identified by UID, into the snapshot named
// after the Pod's controlling Sandbox's UID.
type Agent struct {
	Client       kubernetes.Interface
	NodeName     string
	Checkpointer Checkpointer
	// ResultPoll is how often a restoring Pod's shim result is looked for.
	ResultPoll time.Duration
	// SandboxUID looks Sandboxes up for the snapshot garbage collection
	// (Store.Collect); nil turns it off.
	SandboxUID SandboxUIDFunc
	// CollectEvery is the collection period (default 1 minute).
	CollectEvery time.Duration
}

// staleCheckpoint: a partial snapshot this old is from a killed agent (a
// checkpoint is bounded by the controller's timeout, 60 s by default).
const staleCheckpoint = 10 * time.Minute

// Run processes Pods until ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	if a.ResultPoll <= 0 {
		a.ResultPoll = 200 * time.Millisecond
	}
	f := informers.NewSharedInformerFactoryWithOptions(a.Client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", a.NodeName).String()
	}))
	pods := f.Core().V1().Pods()
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName]())
	defer q.ShutDown()
	enqueue := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok && wants(p) {
			q.Add(types.NamespacedName{Namespace: p.Namespace, Name: p.Name})
		}
	}
	if _, err := pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, n any) { enqueue(n) },
	}); err != nil {
		return fmt.Errorf("watching pods: %w", err)
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), pods.Informer().HasSynced) {
		return fmt.Errorf("pod cache did not sync")
	}
	go func() { <-ctx.Done(); q.ShutDown() }()
	if a.SandboxUID != nil {
		go a.collectLoop(ctx)
	}
	for {
		key, quit := q.Get()
		if quit {
			return nil
		}
		pod, err := pods.Lister().Pods(key.Namespace).Get(key.Name)
		if err == nil {
			var again time.Duration
			again, err = a.sync(ctx, pod.DeepCopy())
			if err == nil && again > 0 {
				q.AddAfter(key, again)
			}
		}
		if err != nil {
			klog.ErrorS(err, "hibernation", "pod", key)
			q.AddRateLimited(key)
		} else {
			q.Forget(key)
		}
		q.Done(key)
	}
}

// wants: a checkpoint request or a restore without an answer yet.
func wants(p *corev1.Pod) bool {
	_, req := p.Annotations[AnnotationCheckpointRequested]
	_, done := p.Annotations[AnnotationCheckpointResult]
	_, restore := p.Annotations[AnnotationRestoreSnapshot]
	_, reported := p.Annotations[AnnotationRestoreResult]
	return (req && !done) || (restore && !reported)
}

// sandboxOwner returns the UID of the Sandbox controlling the Pod.
func sandboxOwner(p *corev1.Pod) (types.UID, bool) {
	ref := metav1.GetControllerOf(p)
	if ref == nil || ref.Kind != "Sandbox" || ref.APIVersion != "agents.x-k8s.io/v1beta1" && ref.APIVersion != "agents.x-k8s.io/v1alpha1" {
		return "", false
	}
	return ref.UID, true
}

func (a *Agent) sync(ctx context.Context, p *corev1.Pod) (time.Duration, error) {
	if p.Spec.NodeName != a.NodeName {
		return 0, nil
	}
	if _, req := p.Annotations[AnnotationCheckpointRequested]; req {
		if _, done := p.Annotations[AnnotationCheckpointResult]; !done {
			return 0, a.checkpoint(ctx, p)
		}
	}
	if snap, ok := p.Annotations[AnnotationRestoreSnapshot]; ok {
		if _, reported := p.Annotations[AnnotationRestoreResult]; !reported {
			return a.reportRestore(ctx, p, snap)
		}
	}
	return 0, nil
}

func (a *Agent) checkpoint(ctx context.Context, p *corev1.Pod) error {
	// The lister can lag behind our own result patch: a Pod re-queued
	// while its (long) checkpoint ran comes back without the result, and a
	// second attempt would find the sandbox gone and overwrite the good
	// result with an error. Ask the apiserver before doing anything.
	live, err := a.Client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("getting pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	if live.UID != p.UID {
		return nil // another Pod by that name now; its own events bring it
	}
	if _, done := live.Annotations[AnnotationCheckpointResult]; done {
		return nil
	}
	owner, ok := sandboxOwner(p)
	var res CheckpointResult
	if !ok {
		res.Error = "the Pod is not controlled by a Sandbox"
	} else if vol, err := a.volumeOf(p); err != nil {
		res.Error = err.Error()
	} else {
		start := time.Now()
		m, err := a.Checkpointer.Checkpoint(ctx, Request{PodUID: string(p.UID), Namespace: p.Namespace,
			SandboxName: metav1.GetControllerOf(p).Name, SandboxUID: string(owner), SnapshotID: string(owner), Volume: vol})
		if err != nil {
			res.Error = err.Error()
		} else {
			res = CheckpointResult{OK: true, SizeBytes: m.Size(), DurationMS: time.Since(start).Milliseconds(), Digest: m.Digest}
			if vol != nil {
				res.Volume, res.VolumePath = vol.Name, vol.Ref
			}
		}
	}
	return a.annotate(ctx, p, AnnotationCheckpointResult, res.Encode())
}

// volumeOf finds the Pod's claim volume on this node, if it has one.
func (a *Agent) volumeOf(p *corev1.Pod) (*Volume, error) {
	if !hasClaim(p) {
		return nil, nil
	}
	id, err := a.Checkpointer.FindPodSandbox(string(p.UID))
	if err != nil {
		return nil, err
	}
	v, err := a.Checkpointer.FindVolume(p, id)
	if err != nil {
		// E.g. an agent in a container that does not mount the volume's
		// host path: the node store still keeps the memory (status says
		// where), rather than losing it.
		klog.ErrorS(err, "the Pod's volume is not reachable; keeping the snapshot in the node store", "pod", klog.KObj(p))
		return nil, nil
	}
	return v, nil
}

func hasClaim(p *corev1.Pod) bool {
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			return true
		}
	}
	return false
}

func (a *Agent) reportRestore(ctx context.Context, p *corev1.Pod, value string) (time.Duration, error) {
	ref, perr := ParseRestoreRef(value)
	snap := ref.ID
	r, err := a.Checkpointer.Store.ReadResult(string(p.UID))
	if IsNotExist(err) || err == nil && r.State == StateRestoring {
		return a.ResultPoll, nil
	}
	if err != nil {
		r = Result{Snapshot: snap, State: StateFallback, Reason: err.Error()}
	}
	// Consumed (restored) or unusable (fallback): either way it is done,
	// and gone before the controller hears of the outcome, so whoever
	// reads the result (the controller, an operator) never finds a
	// consumed snapshot still on the node. A volume snapshot was moved off
	// the volume by the shim into the Pod's restore directory (the shim
	// removes what it refused). A failed removal does not hold the report
	// back; it is returned, and the retry removes it (idempotent).
	var cleanup error
	if perr == nil && ref.VolumePath != "" {
		cleanup = a.Checkpointer.Store.DeleteRestoreDir(string(p.UID))
	} else {
		cleanup = a.Checkpointer.Store.DeleteSnapshot(p.Namespace, snap)
	}
	if err := a.annotate(ctx, p, AnnotationRestoreResult, r.Encode()); err != nil {
		return 0, errors.Join(err, cleanup)
	}
	return 0, cleanup
}

func (a *Agent) annotate(ctx context.Context, p *corev1.Pod, k, v string) error {
	data, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{k: v}, "uid": p.UID, // precondition: same Pod
	}})
	if _, err := a.Client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, data, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("annotating pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return nil
}

// collectLoop removes the snapshots of deleted Sandboxes, at start and then
// every CollectEvery.
func (a *Agent) collectLoop(ctx context.Context) {
	every := a.CollectEvery
	if every <= 0 {
		every = time.Minute
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		deleted, err := a.Checkpointer.Store.Collect(ctx, a.SandboxUID, staleCheckpoint, time.Now())
		if err != nil {
			klog.ErrorS(err, "collecting snapshots")
		}
		for _, d := range deleted {
			klog.InfoS("deleted the snapshot of a Sandbox that no longer exists", "snapshot", d)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
