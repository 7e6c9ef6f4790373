package router

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	sblabels "sigs.k8s.io/agent-sandbox/internal/labels"
	sbscheme "sigs.k8s.io/agent-sandbox/internal/scheme"
)

// LastActivityAnnotation records on a Sandbox when a router last forwarded
// traffic to it, so that every router replica's idle decision sees traffic
// served by the others.
const LastActivityAnnotation = "agents.x-k8s.io/last-activity"

// AutoResumeAnnotation set to "false" on a Sandbox stops the router from
// resuming it when traffic arrives: an operator who suspended a sandbox for
// cost or quarantine must not have any caller undo that. Any other value,
// or none, leaves auto-resume (--auto-resume) in charge.
const AutoResumeAnnotation = "agents.x-k8s.io/auto-resume"

// cacheSyncTimeout bounds the initial LIST; failing it aborts startup so
// /readyz never reports a router that cannot resolve anything.
const cacheSyncTimeout = 60 * time.Second

// InformerOptions configures StartInformers.
type InformerOptions struct {
	// Namespace restricts the watches to one namespace; empty = cluster-wide.
	Namespace string
	// ResyncPeriod of the informers (0 = controller-runtime default).
	ResyncPeriod time.Duration
	// SandboxAPIVersions are the ownerReference apiVersions that name a
	// Sandbox (what the CRD serves); empty = DefaultSandboxAPIVersions.
	SandboxAPIVersions []string
}

// StartInformers watches Sandboxes and the Pods they control and keeps idx
// current. It returns once the initial lists are in the index; the watches
// stop when ctx ends.
func StartInformers(ctx context.Context, cfg *rest.Config, idx *Index, opts InformerOptions) error {
	// The shared scheme: the cache starts informers only for what it is
	// asked (Sandboxes and Pods), so the other registered types cost nothing.
	scheme, err := sbscheme.New()
	if err != nil {
		return err
	}
	hasHash, err := labels.NewRequirement(sblabels.SandboxNameHash, selection.Exists, nil)
	if err != nil {
		return fmt.Errorf("building pod selector: %w", err)
	}
	copts := cache.Options{
		Scheme:           scheme,
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			// Only sandbox pods, and only the fields routing reads: the
			// cache then costs a few hundred bytes per pod.
			&corev1.Pod{}: {Label: labels.NewSelector().Add(*hasHash), Transform: slimPod},
		},
	}
	if opts.ResyncPeriod > 0 {
		copts.SyncPeriod = &opts.ResyncPeriod
	}
	if opts.Namespace != "" {
		copts.DefaultNamespaces = map[string]cache.Config{opts.Namespace: {}}
	}
	c, err := cache.New(cfg, copts)
	if err != nil {
		return fmt.Errorf("creating informer cache: %w", err)
	}
	sbInf, err := c.GetInformer(ctx, &sandboxv1beta1.Sandbox{})
	if err != nil {
		return fmt.Errorf("sandbox informer: %w", err)
	}
	if _, err := sbInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { upsertSandboxObj(idx, o) },
		UpdateFunc: func(_, o any) { upsertSandboxObj(idx, o) },
		DeleteFunc: func(o any) {
			if sb, ok := unwrapTombstone(o).(*sandboxv1beta1.Sandbox); ok {
				idx.DeleteSandbox(SandboxKey{Namespace: sb.Namespace, Name: sb.Name})
			}
		},
	}); err != nil {
		return fmt.Errorf("sandbox event handler: %w", err)
	}
	versions := NewSandboxVersions(DefaultSandboxAPIVersions...)
	if len(opts.SandboxAPIVersions) > 0 {
		versions = NewSandboxVersions(opts.SandboxAPIVersions...)
	}
	podInf, err := c.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return fmt.Errorf("pod informer: %w", err)
	}
	if _, err := podInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { upsertPodObj(idx, o, versions) },
		UpdateFunc: func(_, o any) { upsertPodObj(idx, o, versions) },
		DeleteFunc: func(o any) {
			if p, ok := unwrapTombstone(o).(*corev1.Pod); ok {
				idx.DeletePod(string(p.UID))
			}
		},
	}); err != nil {
		return fmt.Errorf("pod event handler: %w", err)
	}
	errc := make(chan error, 1)
	go func() { errc <- c.Start(ctx) }()
	syncCtx, cancel := context.WithTimeout(ctx, cacheSyncTimeout)
	defer cancel()
	if !c.WaitForCacheSync(syncCtx) {
		select {
		case err := <-errc:
			return fmt.Errorf("informer cache stopped: %w", err)
		default:
		}
		return fmt.Errorf("informer cache did not sync within %s (check RBAC: get/list/watch on sandboxes and pods)", cacheSyncTimeout)
	}
	return nil
}

func unwrapTombstone(o any) any {
	if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return o
}

func upsertSandboxObj(idx *Index, o any) {
	if sb, ok := o.(*sandboxv1beta1.Sandbox); ok {
		idx.UpsertSandbox(SandboxRecordFrom(sb))
	}
}

func upsertPodObj(idx *Index, o any, versions SandboxVersions) {
	if p, ok := o.(*corev1.Pod); ok {
		idx.UpsertPod(podRecordFrom(p, versions))
	}
}

// SandboxRecordFrom extracts the routing facts from a Sandbox.
func SandboxRecordFrom(sb *sandboxv1beta1.Sandbox) *SandboxRecord {
	r := &SandboxRecord{
		Key:             SandboxKey{Namespace: sb.Namespace, Name: sb.Name},
		UID:             string(sb.UID),
		ResourceVersion: sb.ResourceVersion,
		Deleting:        sb.DeletionTimestamp != nil,
		Suspended:       sb.Spec.OperatingMode == sandboxv1beta1.OperatingModeSuspended,
		PodIPs:          sb.Status.PodIPs,
		NoAutoResume:    sb.Annotations[AutoResumeAnnotation] == "false",
	}
	_, r.WarmPool = sb.Labels[sblabels.WarmPoolSandbox]
	if c := meta.FindStatusCondition(sb.Status.Conditions, sandboxv1beta1.SandboxConditionReady); c != nil {
		r.Ready = c.Status == metav1.ConditionTrue
		if r.Ready {
			r.ReadySince = c.LastTransitionTime.Time
		}
		// A reason reported for an older generation (e.g. SandboxExpired
		// before the user moved shutdownTime) is not final.
		if !r.Ready && c.ObservedGeneration >= sb.Generation {
			r.ReadyReason = c.Reason
		}
	}
	spec := &sb.Spec.PodTemplate.Spec
	addPorts := func(cs []corev1.Container) {
		for _, c := range cs {
			for _, p := range c.Ports {
				if p.Protocol != "" && p.Protocol != corev1.ProtocolTCP {
					continue
				}
				if p.ContainerPort > 0 && p.ContainerPort <= 65535 {
					r.Ports = append(r.Ports, uint16(p.ContainerPort))
				}
			}
		}
	}
	addPorts(spec.Containers)
	for _, c := range spec.InitContainers {
		// Native sidecars keep running and may serve traffic.
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			addPorts([]corev1.Container{c})
		}
	}
	if v := sb.Annotations[LastActivityAnnotation]; v != "" {
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			r.LastActivity = t
		}
	}
	return r
}

// PodRecordFrom extracts the routing facts from a Pod, accepting owner
// references in DefaultSandboxAPIVersions.
func PodRecordFrom(p *corev1.Pod) *PodRecord {
	return podRecordFrom(p, NewSandboxVersions(DefaultSandboxAPIVersions...))
}

func podRecordFrom(p *corev1.Pod, versions SandboxVersions) *PodRecord {
	r := &PodRecord{
		Namespace: p.Namespace,
		Name:      p.Name,
		UID:       string(p.UID),
		OwnerUID:  sandboxOwnerUID(p, versions),
		Deleting:  p.DeletionTimestamp != nil,
	}
	if p.Status.Phase == corev1.PodRunning {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				r.Ready = true
			}
		}
	}
	for _, ip := range p.Status.PodIPs {
		r.PodIPs = append(r.PodIPs, ip.IP)
	}
	if len(r.PodIPs) == 0 && p.Status.PodIP != "" {
		r.PodIPs = []string{p.Status.PodIP}
	}
	return r
}

// DefaultSandboxAPIVersions are the versions of agents.x-k8s.io/Sandbox this
// router is built for; StartInformers replaces them with what the cluster's
// CRD serves when discovery answers.
var DefaultSandboxAPIVersions = []string{sandboxv1beta1.GroupVersion.String()}

// SandboxVersions is the set of "group/version" strings an ownerReference
// may carry to name a Sandbox.
type SandboxVersions map[string]bool

// NewSandboxVersions builds the set from "group/version" strings.
func NewSandboxVersions(apiVersions ...string) SandboxVersions {
	v := SandboxVersions{}
	for _, s := range apiVersions {
		v[s] = true
	}
	return v
}

// sandboxOwnerUID returns the UID of the pod's controlling Sandbox, or ""
// when no Sandbox controls it. The rule is the Sandbox controller's
// (internal/controller/sandbox ownedBy: the controller reference's UID is
// authoritative, labels never are) narrowed to references that really name
// a Sandbox: Kind Sandbox in one of the served versions. An ownerReference
// is tenant-written data, so a made-up version string must not count. The
// namespace half of the rule is the index's (ownerKey).
func sandboxOwnerUID(p *corev1.Pod, versions SandboxVersions) string {
	ref := metav1.GetControllerOfNoCopy(p)
	if ref == nil || ref.Kind != "Sandbox" || !versions[ref.APIVersion] {
		return ""
	}
	return string(ref.UID)
}

// DiscoverSandboxVersions asks the apiserver which versions of
// agents.x-k8s.io serve the sandboxes resource. Discovery is readable by
// every authenticated identity, so this works in reduced mode too.
func DiscoverSandboxVersions(cfg *rest.Config) ([]string, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating discovery client: %w", err)
	}
	groups, err := dc.ServerGroups()
	if err != nil {
		return nil, fmt.Errorf("discovering API groups: %w", err)
	}
	var out []string
	for _, g := range groups.Groups {
		if g.Name != sandboxv1beta1.GroupVersion.Group {
			continue
		}
		for _, v := range g.Versions {
			rl, err := dc.ServerResourcesForGroupVersion(v.GroupVersion)
			if err != nil {
				return nil, fmt.Errorf("discovering %s: %w", v.GroupVersion, err)
			}
			for _, r := range rl.APIResources {
				if r.Name == "sandboxes" && r.Kind == "Sandbox" {
					out = append(out, v.GroupVersion)
					break
				}
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the apiserver serves no version of %s/sandboxes", sandboxv1beta1.GroupVersion.Group)
	}
	return out, nil
}

// slimPod keeps only what PodRecordFrom reads.
func slimPod(o any) (any, error) {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return o, nil
	}
	return &corev1.Pod{
		TypeMeta: p.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name:              p.Name,
			Namespace:         p.Namespace,
			UID:               p.UID,
			ResourceVersion:   p.ResourceVersion,
			Labels:            p.Labels,
			OwnerReferences:   p.OwnerReferences,
			DeletionTimestamp: p.DeletionTimestamp,
		},
		Status: corev1.PodStatus{
			Phase:      p.Status.Phase,
			Conditions: p.Status.Conditions,
			PodIP:      p.Status.PodIP,
			PodIPs:     p.Status.PodIPs,
		},
	}, nil
}
