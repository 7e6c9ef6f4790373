package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	sblabels "sigs.k8s.io/agent-sandbox/internal/labels"
)

// ProcessKubelet stands in for a kubelet that really runs something: for
// every selected Pod it binds the Pod to FakeNodeName, starts a local
// process (typically sandboxd) listening on an address of its own in
// 127.0.0.0/8, and reports that address as the Pod IP once Probe says the
// process answers, as a readiness probe would. Deleting the Pod stops the
// process and removes its working directory. Unlike Kubelet, the Pod IP is
// reachable, so clients can really talk to "the pod".
//
// Loopback addresses other than 127.0.0.1 need no configuration on Linux:
// the whole 127/8 block is routed to lo.
type ProcessKubelet struct {
	// Command returns the process to run for pod, listening on ip, with
	// workDir as its private scratch directory (already created). Required.
	Command func(pod *corev1.Pod, ip netip.Addr, workDir string) *exec.Cmd
	// Probe reports whether the process started for pod on ip is ready to
	// serve. It is called repeatedly until it returns true or the process
	// exits. It should check that the answer comes from that very process
	// (e.g. an id passed in its environment): another program on this
	// machine may be serving the same address. Required.
	Probe func(ctx context.Context, pod *corev1.Pod, ip netip.Addr) bool
	// Ports are the TCP ports the process listens on. An address where
	// one of them is already taken (by some other program) is skipped.
	Ports []int
	// Select chooses the Pods this kubelet runs. Nil selects sandbox Pods
	// (those carrying the sandbox-name-hash label); other Pods are left
	// alone, so the caller can manage them itself.
	Select func(*corev1.Pod) bool
	// FirstIP is the first address handed out (default 127.0.1.1). Use a
	// random block when several kubelets may share the machine.
	// Addresses are never reused within one run, so a late packet or a
	// client holding a stale Pod IP cannot reach another pod's process.
	FirstIP netip.Addr
	// WorkDir holds one directory per Pod (default: a new temp directory,
	// removed by Stop).
	WorkDir string
	// StartAttempts bounds how often a process that exits before becoming
	// ready is retried on a fresh address (default 3), e.g. when some other
	// program already listens on the port of that address.
	StartAttempts int
	// Logf, when set, receives one line per notable event.
	Logf func(format string, args ...any)

	cs      kubernetes.Interface
	lister  corelisters.PodLister
	queue   workqueue.TypedRateLimitingInterface[string]
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	ownsDir bool

	mu     sync.Mutex
	nextIP netip.Addr
	procs  map[string]*podProcess // namespace/name -> process
}

// podProcess is the running process of one Pod.
type podProcess struct {
	uid     string
	ip      netip.Addr
	dir     string
	cmd     *exec.Cmd
	ready   chan struct{} // closed once Probe succeeded
	exited  chan struct{} // closed once the process was reaped
	failed  bool          // gave up starting (guarded by ProcessKubelet.mu)
	stopped bool          // Stop was requested (guarded by ProcessKubelet.mu)
}

// StartProcessKubelet starts k against cfg. Stop it with Stop.
func StartProcessKubelet(cfg *rest.Config, k *ProcessKubelet) (*ProcessKubelet, error) {
	if k == nil || k.Command == nil || k.Probe == nil {
		return nil, errors.New("process kubelet: Command and Probe are required")
	}
	if k.Select == nil {
		k.Select = func(p *corev1.Pod) bool { _, ok := p.Labels[sblabels.SandboxNameHash]; return ok }
	}
	if !k.FirstIP.IsValid() {
		k.FirstIP = netip.MustParseAddr("127.0.1.1")
	}
	if !k.FirstIP.Is4() || !k.FirstIP.IsLoopback() {
		return nil, fmt.Errorf("process kubelet: FirstIP %s is not an IPv4 loopback address", k.FirstIP)
	}
	if k.StartAttempts <= 0 {
		k.StartAttempts = 3
	}
	if k.Logf == nil {
		k.Logf = func(string, ...any) {}
	}
	if k.WorkDir == "" {
		d, err := os.MkdirTemp("", "process-kubelet-*")
		if err != nil {
			return nil, fmt.Errorf("process kubelet: work dir: %w", err)
		}
		k.WorkDir, k.ownsDir = d, true
	}
	k.nextIP = k.FirstIP
	k.procs = map[string]*podProcess{}

	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, 1000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("process kubelet client: %w", err)
	}
	k.cs = cs
	k.ctx, k.cancel = context.WithCancel(context.Background())
	k.queue = workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](50*time.Millisecond, 2*time.Second))

	factory := informers.NewSharedInformerFactory(cs, 0)
	inf := factory.Core().V1().Pods()
	k.lister = inf.Lister()
	enqueue := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok && !k.Select(p) {
			return
		}
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			k.queue.Add(key)
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, n any) { enqueue(n) },
		// Tombstones carry no Pod to select on; a key without a process
		// is a no-op in sync, so enqueue them all.
		DeleteFunc: func(obj any) {
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				k.queue.Add(key)
			}
		},
	}); err != nil {
		k.cancel()
		return nil, fmt.Errorf("process kubelet informer: %w", err)
	}
	factory.Start(k.ctx.Done())
	if !cache.WaitForCacheSync(k.ctx.Done(), inf.Informer().HasSynced) {
		k.cancel()
		return nil, errors.New("process kubelet informer did not sync")
	}
	for range 4 {
		k.wg.Go(k.worker)
	}
	k.wg.Go(func() {
		<-k.ctx.Done()
		k.queue.ShutDown()
		factory.Shutdown()
	})
	return k, nil
}

// Stop stops every process, waits for them, and removes the work directory
// if the kubelet created it. Pods are left as they are.
func (k *ProcessKubelet) Stop() {
	k.cancel()
	k.wg.Wait()
	k.mu.Lock()
	procs := make([]*podProcess, 0, len(k.procs))
	for key, p := range k.procs {
		procs = append(procs, p)
		delete(k.procs, key)
	}
	k.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Go(func() { k.kill(p, 2*time.Second) })
	}
	wg.Wait()
	if k.ownsDir {
		_ = os.RemoveAll(k.WorkDir)
	}
}

// PodIP returns the address of the process serving the Pod namespace/name,
// whether or not it is ready yet.
func (k *ProcessKubelet) PodIP(namespace, name string) (netip.Addr, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	p, ok := k.procs[namespace+"/"+name]
	if !ok {
		return netip.Addr{}, false
	}
	return p.ip, true
}

// Running returns the number of processes currently managed.
func (k *ProcessKubelet) Running() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.procs)
}

func (k *ProcessKubelet) worker() {
	for {
		key, shutdown := k.queue.Get()
		if shutdown {
			return
		}
		if err := k.sync(key); err != nil && k.ctx.Err() == nil {
			k.Logf("process kubelet: %s: %v (retrying)", key, err)
			k.queue.AddRateLimited(key)
		} else {
			k.queue.Forget(key)
		}
		k.queue.Done(key)
	}
}

// sync drives one Pod towards its desired state: bound, process running,
// status reflecting the process; or, once deleted, process gone.
func (k *ProcessKubelet) sync(key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil //nolint:nilerr // a malformed key never becomes valid: drop it rather than requeue it forever
	}
	pod, err := k.lister.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		k.stopProcess(key, "")
		return nil
	}
	if err != nil {
		return err
	}
	if !k.Select(pod) {
		return nil
	}
	ctx := k.ctx
	if pod.DeletionTimestamp != nil {
		grace := 5 * time.Second
		if pod.DeletionGracePeriodSeconds != nil {
			grace = min(grace, time.Duration(*pod.DeletionGracePeriodSeconds)*time.Second)
		}
		k.stopProcessGrace(key, string(pod.UID), grace)
		if len(pod.Finalizers) > 0 {
			return nil // whoever set the finalizer removes it; we come back then
		}
		zero := int64(0)
		uid := pod.UID
		err := k.cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{
			GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &uid},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("finishing deletion: %w", err)
		}
		return nil
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		k.stopProcess(key, string(pod.UID))
		return nil // a finished pod is never restarted
	}
	if pod.Spec.NodeName == "" {
		err := k.cs.CoreV1().Pods(ns).Bind(ctx, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: pod.UID},
			Target:     corev1.ObjectReference{Kind: "Node", Name: FakeNodeName},
		}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("binding: %w", err)
		}
		return nil // the bound pod comes back as an update
	}

	proc := k.ensureProcess(key, pod)
	if proc == nil {
		return nil // gave up starting; the pod stays Pending
	}
	ready, exited := k.state(proc)
	ready = ready && !exited
	ip := ""
	if ready {
		k.mu.Lock()
		ip = proc.ip.String()
		k.mu.Unlock()
	}
	if isReady(pod) == ready && (!ready || pod.Status.PodIP == ip) && pod.Status.Phase != "" {
		return nil
	}
	up := pod.DeepCopy()
	up.Status = podStatus(pod, ip, ready)
	// Container statuses, so kubectl's READY column and anything reading
	// them see what a kubelet would report.
	for _, c := range pod.Spec.Containers {
		cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, Ready: ready, Started: &ready}
		if ready {
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.Now()}
		} else {
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
		}
		up.Status.ContainerStatuses = append(up.Status.ContainerStatuses, cs)
	}
	if _, err := k.cs.CoreV1().Pods(ns).UpdateStatus(ctx, up, metav1.UpdateOptions{}); err != nil &&
		!apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("updating status: %w", err)
	}
	return nil
}

// ensureProcess returns the Pod's process, starting it if there is none.
// A process left over from an earlier Pod of the same name is replaced.
func (k *ProcessKubelet) ensureProcess(key string, pod *corev1.Pod) *podProcess {
	k.mu.Lock()
	p, ok := k.procs[key]
	if ok && p.uid == string(pod.UID) {
		failed := p.failed
		k.mu.Unlock()
		if failed {
			return nil
		}
		return p
	}
	k.mu.Unlock()
	if ok {
		k.stopProcess(key, "")
	}
	p = &podProcess{
		uid:   string(pod.UID),
		dir:   filepath.Join(k.WorkDir, pod.Namespace+"_"+pod.Name+"_"+string(pod.UID)),
		ready: make(chan struct{}),
	}
	if err := os.MkdirAll(p.dir, 0o755); err != nil {
		k.Logf("process kubelet: %s: creating pod dir: %v", key, err)
		return nil
	}
	k.mu.Lock()
	k.procs[key] = p
	k.mu.Unlock()
	if err := k.launch(pod, p, k.allocIP()); err != nil {
		k.Logf("process kubelet: %s: %v", key, err)
		k.mu.Lock()
		p.failed = true
		k.mu.Unlock()
		return nil
	}
	k.wg.Go(func() { k.supervise(key, pod.DeepCopy(), p) })
	return p
}

// state returns whether p is ready and whether its current process exited.
func (k *ProcessKubelet) state(p *podProcess) (ready, exited bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	select {
	case <-p.ready:
		ready = true
	default:
	}
	select {
	case <-p.exited:
		exited = true
	default:
	}
	return ready, exited
}

// allocIP hands out the next unused loopback address, skipping .0 and .255
// host parts (no address looks like a network or broadcast address) and
// addresses where one of Ports is taken.
func (k *ProcessKubelet) allocIP() netip.Addr {
	for {
		k.mu.Lock()
		ip := k.nextIP
		k.nextIP = k.nextIP.Next()
		if !k.nextIP.IsLoopback() {
			k.nextIP = netip.MustParseAddr("127.0.1.1") // wrapped around 127/8
		}
		k.mu.Unlock()
		if b := ip.As4(); b[3] == 0 || b[3] == 255 || ip == netip.MustParseAddr("127.0.0.1") {
			continue
		}
		if k.portsFree(ip) {
			return ip
		}
		k.Logf("process kubelet: %s is in use by another program; skipping it", ip)
	}
}

// portsFree reports whether every port of Ports can be bound on ip.
func (k *ProcessKubelet) portsFree(ip netip.Addr) bool {
	for _, port := range k.Ports {
		ln, err := net.Listen("tcp", netip.AddrPortFrom(ip, uint16(port)).String())
		if err != nil {
			return false
		}
		_ = ln.Close()
	}
	return true
}

// launch starts the process for p on ip.
func (k *ProcessKubelet) launch(pod *corev1.Pod, p *podProcess, ip netip.Addr) error {
	cmd := k.Command(pod, ip, p.dir)
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	// Own process group, so a stop reaches whatever the process spawned;
	// and die with us, so a crashed test run leaves nothing behind.
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", cmd.Path, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	k.mu.Lock()
	p.ip, p.cmd, p.exited = ip, cmd, exited
	stopped := p.stopped
	k.mu.Unlock()
	if stopped {
		// Stopped while we were starting: do not leak the new process.
		k.kill(p, 0)
	}
	k.Logf("process kubelet: %s/%s: started pid %d on %s", pod.Namespace, pod.Name, cmd.Process.Pid, ip)
	return nil
}

// supervise probes the process until it is ready, retrying on a fresh
// address when it dies first, and reports readiness changes by requeueing
// the Pod. A process that dies after becoming ready is restarted on the same
// address, as a kubelet restarts a crashed container (restartPolicy Always).
func (k *ProcessKubelet) supervise(key string, pod *corev1.Pod, p *podProcess) {
	attempts := 1
	for {
		k.mu.Lock()
		ip, exited := p.ip, p.exited
		k.mu.Unlock()
		if !k.awaitReady(pod, p, ip, exited) {
			if k.isStopped(p) || k.ctx.Err() != nil {
				return
			}
			if attempts >= k.StartAttempts {
				k.Logf("process kubelet: %s: process exited before becoming ready %d times; giving up", key, attempts)
				k.mu.Lock()
				p.failed = true
				k.mu.Unlock()
				return
			}
			attempts++
			k.Logf("process kubelet: %s: process on %s exited before becoming ready; retrying on a new address", key, ip)
			if err := k.launch(pod, p, k.allocIP()); err != nil {
				k.Logf("process kubelet: %s: %v", key, err)
				return
			}
			continue
		}
		k.queue.Add(key)
		select {
		case <-k.ctx.Done():
			return
		case <-exited:
		}
		if k.isStopped(p) {
			return
		}
		// Crashed after becoming ready: report not ready, then restart on
		// the same address after a pause (a crash loop must not spin).
		k.Logf("process kubelet: %s: process on %s exited; restarting", key, ip)
		k.mu.Lock()
		p.ready = make(chan struct{})
		k.mu.Unlock()
		k.queue.Add(key)
		select {
		case <-k.ctx.Done():
			return
		case <-time.After(time.Second):
		}
		if err := k.launch(pod, p, ip); err != nil {
			k.Logf("process kubelet: %s: restarting: %v", key, err)
			return
		}
		attempts = 1
	}
}

// awaitReady probes ip until the process answers (true) or exits (false).
func (k *ProcessKubelet) awaitReady(pod *corev1.Pod, p *podProcess, ip netip.Addr, exited <-chan struct{}) bool {
	for {
		if k.Probe(k.ctx, pod, ip) {
			k.mu.Lock()
			close(p.ready)
			k.mu.Unlock()
			return true
		}
		select {
		case <-k.ctx.Done():
			return false
		case <-exited:
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (k *ProcessKubelet) isStopped(p *podProcess) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return p.stopped
}

func (k *ProcessKubelet) stopProcess(key, uid string) { k.stopProcessGrace(key, uid, 2*time.Second) }

// stopProcessGrace stops the process of key (only if it belongs to uid,
// when uid is set) and forgets it.
func (k *ProcessKubelet) stopProcessGrace(key, uid string, grace time.Duration) {
	k.mu.Lock()
	p, ok := k.procs[key]
	if !ok || (uid != "" && p.uid != uid) {
		k.mu.Unlock()
		return
	}
	delete(k.procs, key)
	k.mu.Unlock()
	k.kill(p, grace)
	k.Logf("process kubelet: %s: stopped process on %s", key, p.ip)
}

// kill sends SIGTERM to the process group, SIGKILL after grace, waits for
// the process and removes its directory.
func (k *ProcessKubelet) kill(p *podProcess, grace time.Duration) {
	k.mu.Lock()
	p.stopped = true
	cmd, exited := p.cmd, p.exited
	k.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		pgid := cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(grace):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-exited
		}
		// Children that ignored SIGTERM and outlived the leader.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	_ = os.RemoveAll(p.dir)
}
