package cpuclass

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// Selector names Pods by identity: those running as ServiceAccount in
// Namespace. A tenant can copy any label or name, and can create a service
// account of the same name in its own namespace, but cannot run a Pod in
// another namespace; the namespace is what the apiserver's authorization
// guards.
type Selector struct {
	Namespace      string
	ServiceAccount string
}

func (s Selector) String() string { return s.Namespace + "/" + s.ServiceAccount }

// ParseSelector parses NAMESPACE/SERVICEACCOUNT.
func ParseSelector(v string) (Selector, error) {
	ns, sa, ok := strings.Cut(v, "/")
	if !ok {
		return Selector{}, fmt.Errorf("%q: want NAMESPACE/SERVICEACCOUNT", v)
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return Selector{}, fmt.Errorf("%q: namespace: %s", v, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(sa); len(errs) > 0 {
		return Selector{}, fmt.Errorf("%q: service account: %s", v, strings.Join(errs, "; "))
	}
	return Selector{Namespace: ns, ServiceAccount: sa}, nil
}

// Selects reports whether p is one of the Pods s names.
func (s Selector) Selects(p *corev1.Pod) bool {
	sa := p.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	return p.Namespace == s.Namespace && sa == s.ServiceAccount
}

// Agent gives the selected Pods on its node the real-time class and keeps
// it: a restarted container is a new cgroup and new threads, seen as a new
// container ID in the Pod's status.
type Agent struct {
	Client   kubernetes.Interface
	NodeName string
	Select   []Selector
	Cgroups  PodCgroups
	Budget   Budget // per container
	// Resync is how often every selected Pod is checked again (default 1
	// minute), for a change the Pod's status does not show.
	Resync time.Duration
}

// Run grants until ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	if a.Resync <= 0 {
		a.Resync = time.Minute
	}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName]())
	defer q.ShutDown()
	listers := map[string]cache.GenericNamespaceLister{}
	var synced []cache.InformerSynced
	for _, ns := range a.namespaces() {
		f := informers.NewSharedInformerFactoryWithOptions(a.Client, a.Resync, informers.WithNamespace(ns),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", a.NodeName).String()
			}))
		inf := f.Core().V1().Pods().Informer()
		enqueue := func(obj any) {
			if p, ok := obj.(*corev1.Pod); ok && a.selects(p) {
				q.Add(types.NamespacedName{Namespace: p.Namespace, Name: p.Name})
			}
		}
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: enqueue, UpdateFunc: func(_, n any) { enqueue(n) },
		}); err != nil {
			return fmt.Errorf("watching pods in %s: %w", ns, err)
		}
		f.Start(ctx.Done())
		synced = append(synced, inf.HasSynced)
		listers[ns] = cache.NewGenericLister(inf.GetIndexer(), corev1.Resource("pods")).ByNamespace(ns)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("pod cache did not sync")
	}
	go func() { <-ctx.Done(); q.ShutDown() }()
	for {
		key, quit := q.Get()
		if quit {
			return nil
		}
		obj, err := listers[key.Namespace].Get(key.Name)
		switch {
		case err == nil:
			err = a.sync(obj.(*corev1.Pod))
		case apierrors.IsNotFound(err):
			err = nil // deleted: its cgroups went with it
		}
		if err != nil {
			klog.ErrorS(err, "real-time class", "pod", key)
			q.AddRateLimited(key)
		} else {
			q.Forget(key)
		}
		q.Done(key)
	}
}

func (a *Agent) namespaces() []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range a.Select {
		if !seen[s.Namespace] {
			seen[s.Namespace] = true
			out = append(out, s.Namespace)
		}
	}
	return out
}

func (a *Agent) selects(p *corev1.Pod) bool {
	if p.Spec.NodeName != a.NodeName {
		return false
	}
	for _, s := range a.Select {
		if s.Selects(p) {
			return true
		}
	}
	return false
}

// sync grants the class to the Pod's running containers.
func (a *Agent) sync(p *corev1.Pod) error {
	if !a.selects(p) {
		return nil
	}
	ids := RunningContainers(p)
	n, err := a.Cgroups.Grant(p.UID, ids, a.Budget)
	if err != nil {
		return err
	}
	if n > 0 {
		klog.InfoS("real-time class granted", "pod", klog.KObj(p), "uid", p.UID, "containers", len(ids), "threadsMoved", n)
	}
	return nil
}

// RunningContainers returns the IDs of the Pod's running app containers as
// the kubelet reports them (init containers have ended by then; the sandbox
// "pause" container is not listed).
func RunningContainers(p *corev1.Pod) []string {
	var ids []string
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running != nil && cs.ContainerID != "" {
			ids = append(ids, ContainerID(cs.ContainerID))
		}
	}
	return ids
}
