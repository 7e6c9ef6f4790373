package testenv

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// FakeNodeName is the node that Kubelet binds pods to.
const FakeNodeName = "testenv-node"

// Kubelet stands in for the kubelet on an envtest apiserver, which has no
// nodes: it binds new Pods to FakeNodeName, reports them Running and Ready
// with a unique pod IP, and finishes graceful deletions. It only writes what
// a kubelet and scheduler would write, through the real apiserver.
type Kubelet struct {
	// Ready decides whether a pod is reported Ready; nil means every pod.
	// A pod that is not Ready is bound and Pending.
	Ready func(*corev1.Pod) bool
	// IPBase is the first three octets of pod IPs (default "10.244.0").
	IPBase string

	cs      kubernetes.Interface
	nextIP  atomic.Uint32
	mu      sync.Mutex
	ips     map[string]string // pod UID -> IP
	stop    context.CancelFunc
	stopped chan struct{}
}

// StartKubelet starts a Kubelet against cfg. Stop it with Stop.
func StartKubelet(cfg *rest.Config, k *Kubelet) (*Kubelet, error) {
	if k == nil {
		k = &Kubelet{}
	}
	if k.IPBase == "" {
		k.IPBase = "10.244.0"
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, 1000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubelet client: %w", err)
	}
	k.cs = cs
	k.ips = map[string]string{}
	ctx, cancel := context.WithCancel(context.Background())
	k.stop = cancel
	k.stopped = make(chan struct{})

	factory := informers.NewSharedInformerFactory(cs, 0)
	inf := factory.Core().V1().Pods().Informer()
	work := make(chan *corev1.Pod, 4096)
	handle := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			select {
			case work <- p:
			case <-ctx.Done():
			}
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    handle,
		UpdateFunc: func(_, n any) { handle(n) },
	}); err != nil {
		cancel()
		return nil, fmt.Errorf("kubelet informer: %w", err)
	}
	factory.Start(ctx.Done())
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case p := <-work:
					k.sync(ctx, p)
				}
			}
		}()
	}
	go func() {
		wg.Wait()
		factory.Shutdown()
		close(k.stopped)
	}()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		cancel()
		return nil, fmt.Errorf("kubelet informer did not sync")
	}
	return k, nil
}

// Stop stops the Kubelet.
func (k *Kubelet) Stop() {
	k.stop()
	<-k.stopped
}

func (k *Kubelet) ipFor(uid string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if ip, ok := k.ips[uid]; ok {
		return ip
	}
	n := k.nextIP.Add(1)
	ip := fmt.Sprintf("%s.%d", k.IPBase, n%250+1)
	if n >= 250 {
		// Spread across more octets once the first block is used up.
		ip = fmt.Sprintf("10.%d.%d.%d", 245+(n/62500)%10, (n/250)%250, n%250+1)
	}
	k.ips[uid] = ip
	return ip
}

func (k *Kubelet) sync(ctx context.Context, p *corev1.Pod) {
	if p.DeletionTimestamp != nil {
		if len(p.Finalizers) == 0 && p.Spec.NodeName != "" {
			zero := int64(0)
			uid := p.UID
			err := k.cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
				GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &uid},
			})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				k.retryLater(ctx, p)
			}
		}
		return
	}
	if p.Spec.NodeName == "" {
		err := k.cs.CoreV1().Pods(p.Namespace).Bind(ctx, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID},
			Target:     corev1.ObjectReference{Kind: "Node", Name: FakeNodeName},
		}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			k.retryLater(ctx, p)
		}
		return // the bound pod comes back as an update
	}
	ready := k.Ready == nil || k.Ready(p)
	want := podStatus(p, k.ipFor(string(p.UID)), ready)
	if p.Status.Phase == want.Phase && len(p.Status.PodIPs) > 0 && isReady(p) == ready {
		return
	}
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return // a finished pod is never restarted
	}
	up := p.DeepCopy()
	up.Status = want
	if _, err := k.cs.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, up, metav1.UpdateOptions{}); err != nil &&
		!apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		k.retryLater(ctx, p)
	}
}

func (k *Kubelet) retryLater(ctx context.Context, p *corev1.Pod) {
	go func() {
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return
		}
		cur, err := k.cs.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err == nil {
			k.sync(ctx, cur)
		}
	}()
}

func isReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// SetPodPhase sets a pod's phase (for example Succeeded), as a kubelet would
// when its containers exit.
func SetPodPhase(ctx context.Context, cfg *rest.Config, namespace, name string, phase corev1.PodPhase) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	p, err := cs.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("getting pod: %w", err)
	}
	p.Status.Phase = phase
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == corev1.PodReady || p.Status.Conditions[i].Type == corev1.ContainersReady {
			p.Status.Conditions[i].Status = corev1.ConditionFalse
		}
	}
	if _, err := cs.CoreV1().Pods(namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating pod status: %w", err)
	}
	return nil
}

func podStatus(p *corev1.Pod, ip string, ready bool) corev1.PodStatus {
	now := metav1.Now()
	cond := func(t corev1.PodConditionType, ok bool) corev1.PodCondition {
		s := corev1.ConditionFalse
		if ok {
			s = corev1.ConditionTrue
		}
		return corev1.PodCondition{Type: t, Status: s, LastTransitionTime: now}
	}
	st := corev1.PodStatus{
		Phase:     corev1.PodPending,
		HostIP:    "10.0.0.1",
		StartTime: &now,
		Conditions: []corev1.PodCondition{
			cond(corev1.PodScheduled, true),
			cond(corev1.PodInitialized, true),
			cond(corev1.ContainersReady, ready),
			cond(corev1.PodReady, ready),
		},
	}
	if ready {
		st.Phase = corev1.PodRunning
		st.PodIP = ip
		st.PodIPs = []corev1.PodIP{{IP: ip}}
	}
	return st
}
