package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Cluster manages the local cluster described by a Config.
type Cluster struct {
	cfg      Config
	bins     binaries
	progress func(step string)
	mu       sync.Mutex // serialises progress output from parallel steps
	// kubeletStarted is set when Up (re)starts the kubelet: the node's Ready
	// condition in etcd may be a stale one from before, so Up then waits
	// for a heartbeat newer than this.
	kubeletStarted time.Time
	// platform is the gVisor platform Up chose (platform.go).
	platform PlatformChoice
	// realtime is set when the control plane's CPU group got its real-time
	// budget: only then do etcd and the apiserver run in the real-time
	// class (cpuagent.go). Without group budgets nothing would bound them.
	realtime bool
}

// New returns a Cluster for cfg. progress, if not nil, receives one line per
// step of Up and Down (the CLI prefixes elapsed time).
func New(cfg Config, progress func(step string)) *Cluster {
	return &Cluster{cfg: cfg, progress: progress}
}

// Config returns the cluster's configuration.
func (c *Cluster) Config() Config { return c.cfg }

// KubeconfigPath is the admin kubeconfig.
func (c *Cluster) KubeconfigPath() string { return c.cfg.KubeconfigPath() }

// KubectlPath is the kubectl built for this Kubernetes version.
func (c *Cluster) KubectlPath() string { return filepath.Join(c.cfg.kubeBinDir(), "kubectl") }

// RESTConfig authenticates as cluster admin.
func (c *Cluster) RESTConfig() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.cfg.KubeconfigPath())
	if err != nil {
		return nil, userError(err, "run `agent-sandbox up`", "no usable kubeconfig at %s", c.cfg.KubeconfigPath())
	}
	return cfg, nil
}

func (c *Cluster) step(format string, args ...any) {
	if c.progress == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.progress(fmt.Sprintf(format, args...))
}

func requireRoot(what string) error {
	if os.Geteuid() != 0 {
		return userError(nil, "run it as root, e.g. with sudo",
			"`%s` needs root: containerd and the kubelet manage mounts, cgroups and network namespaces", what)
	}
	return nil
}

// lock serialises Up and Down across processes (parallel test packages may
// all call Up): the second caller waits, then finds the cluster running.
func (c *Cluster) lock() (unlock func(), err error) {
	if err := os.MkdirAll(c.cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", c.cfg.StateDir, err)
	}
	f, err := os.OpenFile(filepath.Join(c.cfg.StateDir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		c.step("waiting for another agent-sandbox up/down to finish")
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
		}
	}
	return func() { _ = f.Close() }, nil // closing releases the lock
}

// Running reports whether every component is alive (not whether it is healthy).
func (c *Cluster) Running() bool {
	for _, name := range Components {
		rec, err := c.cfg.readRecord(name)
		if err != nil || !rec.alive() {
			return false
		}
	}
	return true
}

// Up brings the cluster up, reusing healthy components and (re)starting the
// rest, and returns once the node is Ready and the post-up steps are done.
// It is safe to call again at any time.
func (c *Cluster) Up(ctx context.Context) error {
	if err := requireRoot("up"); err != nil {
		return err
	}
	unlock, err := c.lock()
	if err != nil {
		return err
	}
	defer unlock()
	bins, err := c.cfg.locateBinaries()
	if err != nil {
		return err
	}
	c.bins = bins
	if err := checkKernel(); err != nil {
		return err
	}
	// StateDir holds keys (0700); RunDir only sockets and pid files, which
	// `status` may read without root.
	for d, perm := range map[string]os.FileMode{c.cfg.StateDir: 0o700, c.cfg.RunDir: 0o755, c.cfg.configDir(): 0o755, c.cfg.etcdDataDir(): 0o700} {
		if err := os.MkdirAll(d, perm); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	if err := c.cfg.recordSysctls(); err != nil {
		return fmt.Errorf("record sysctls: %w", err)
	}
	if err := c.cfg.ensurePKI(); err != nil {
		return fmt.Errorf("generate PKI: %w", err)
	}
	if c.platform, err = c.choosePlatform(ctx); err != nil {
		return err
	}
	c.step("gVisor platform: %s (%s)", c.platform.Platform, c.platform.Reason)
	if err := c.writeConfigs(); err != nil {
		return fmt.Errorf("write configs: %w", err)
	}
	if err := c.ensureNetwork(); err != nil {
		return err
	}
	if err := ensureCgroupRoot(); err != nil {
		return err
	}
	if err := ensureCPUGroups(); err != nil {
		// Precedence is tuning: a host without a usable cpu controller
		// still runs the cluster, just without it.
		c.step("cpu precedence off: %v", err)
	} else if err := ensureControlPlaneBudget(); err != nil {
		c.step("real-time class off: %v", err)
	} else {
		c.realtime = true
		c.step("real-time class: etcd and kube-apiserver (%v per %v), the controller's Pod through %s (%v)", rtControlPlane, rtPeriod, compCPUAgent, rtPod)
	}
	c.step("node network ready: bridge %s, node IP %s, pods %s; PKI and configs written", c.cfg.Bridge, c.cfg.NodeIP, c.cfg.PodCIDR)

	// Decide per component: reuse, or (re)start. Ports are checked up front
	// so a conflict is reported before anything is started.
	plan := map[string]*procRecord{}
	for _, name := range Components {
		rec, err := c.cfg.readRecord(name)
		if err != nil {
			return err
		}
		if rec.alive() && rec.Hash == c.spec(name).hash() {
			plan[name] = rec
			continue
		}
		// A component stopped just now may hold its ports for a moment
		// after its PID is gone (seen with the kubelet's 10250), so those
		// get a short grace; any other holder is reported at once.
		grace := time.Duration(0)
		if rec.alive() {
			c.step("%s: configuration or binary changed, restarting", name)
			stopProcess(rec, 15*time.Second)
			grace = 10 * time.Second
		}
		if err := c.waitPortsFree(name, grace); err != nil {
			return err
		}
	}

	// etcd and containerd have no dependencies; the control plane needs
	// etcd; the node agents need the apiserver and the pause image.
	g, gctx := errgroup.WithContext(ctx)
	etcdUp := make(chan struct{})
	g.Go(func() error {
		// etcd replays its write-ahead log before it answers; on a data
		// directory that has seen a few test suites that took 30 s here.
		if err := c.ensureComponent(gctx, compEtcd, plan[compEtcd], 3*time.Minute); err != nil {
			return err
		}
		close(etcdUp)
		return nil
	})
	g.Go(func() error {
		if err := c.ensureComponent(gctx, compContainerd, plan[compContainerd], 30*time.Second); err != nil {
			return err
		}
		return c.importImages(gctx)
	})
	g.Go(func() error {
		// The apiserver gives up (and exits) when etcd does not answer
		// within its storage-factory deadline, so it starts once etcd is
		// healthy: about a second later on a fresh data directory, and no
		// failed up on one that takes long to replay.
		select {
		case <-etcdUp:
		case <-gctx.Done():
			return gctx.Err()
		}
		return c.ensureComponent(gctx, compAPIServer, plan[compAPIServer], 90*time.Second)
	})
	if err := g.Wait(); err != nil {
		return err
	}
	restCfg, err := c.RESTConfig()
	if err != nil {
		return err
	}
	// Everything else starts at once. The add-ons' RBAC goes in first so
	// none of them starts without its permissions; kube-router also needs
	// the Node object; the node only counts as up once policies are
	// enforced (kube-router ready), so no pod runs unfiltered.
	g, gctx = errgroup.WithContext(ctx)
	for _, name := range []string{compControllerManager, compScheduler, compKubelet, compKubeProxy} {
		g.Go(func() error { return c.ensureComponent(gctx, name, plan[name], 60*time.Second) })
	}
	g.Go(func() error {
		if err := ApplyYAML(gctx, restCfg, []byte(c.addonManifests())); err != nil {
			return fmt.Errorf("apply node add-on manifests: %w", err)
		}
		ag, actx := errgroup.WithContext(gctx)
		for _, name := range []string{compCoreDNS, compLocalPath, compHibernateAgent, compCPUAgent} {
			ag.Go(func() error { return c.ensureComponent(actx, name, plan[name], 60*time.Second) })
		}
		ag.Go(func() error {
			if err := c.waitNodeObject(actx, restCfg); err != nil {
				return err
			}
			return c.ensureComponent(actx, compKubeRouter, plan[compKubeRouter], 60*time.Second)
		})
		return ag.Wait()
	})
	if err := g.Wait(); err != nil {
		return err
	}
	if err := c.waitNodeReady(ctx, restCfg); err != nil {
		return err
	}
	if err := ApplyYAML(ctx, restCfg, []byte(runtimeClasses)); err != nil {
		return fmt.Errorf("create RuntimeClasses: %w", err)
	}
	if err := c.waitDefaultServiceAccount(ctx, restCfg); err != nil {
		return err
	}
	c.step("RuntimeClasses gvisor (runsc) and runc ready")
	if len(c.cfg.ManifestPaths) > 0 {
		if err := ApplyManifests(ctx, restCfg, c.cfg.ManifestPaths...); err != nil {
			return fmt.Errorf("apply manifests: %w", err)
		}
		c.step("applied %s", strings.Join(c.cfg.ManifestPaths, ", "))
	}
	for _, h := range c.cfg.PostUp {
		start := time.Now()
		if err := h.Run(ctx, c, restCfg); err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
		c.step("%s (%.1fs)", h.Name, time.Since(start).Seconds())
	}
	return nil
}

// ensureComponent reuses a healthy running component or starts it.
func (c *Cluster) ensureComponent(ctx context.Context, name string, rec *procRecord, timeout time.Duration) error {
	start := time.Now()
	if rec != nil {
		// Alive with the same definition: it only has to answer, unless it
		// was stopping and ends first; then it is started again below.
		ended, err := waitReused(ctx, rec, func(r *running) error { return c.waitHealthy(ctx, name, r, timeout) })
		if err != nil {
			return err
		}
		if !ended {
			if g := c.spec(name).cpuGroup; g != "" && !strings.HasSuffix(cpuGroupOf(rec.PID), "/"+g) {
				_ = joinCPUGroup(g, rec.PID) // started before precedence existed
			}
			if err := setSchedClass(c.spec(name), rec.PID); err != nil {
				c.step("%s: %v", name, err)
			}
			c.step("%s: running (pid %d)", name, rec.PID)
			return nil
		}
		c.step("%s: pid %d ended before it answered (it was stopping); starting it again", name, rec.PID)
		// The ended process may hold its ports for a moment, as in Up's plan.
		if err := c.waitPortsFree(name, 10*time.Second); err != nil {
			return err
		}
	}
	if name == compKubelet {
		if err := os.MkdirAll(c.cfg.kubeletDir(), 0o750); err != nil {
			return fmt.Errorf("create kubelet dir: %w", err)
		}
	}
	if name == compKubelet {
		c.kubeletStarted = time.Now()
	}
	r, err := c.cfg.startDetached(c.spec(name))
	if err != nil {
		return err
	}
	if err := c.waitHealthy(ctx, name, r, timeout); err != nil {
		return err
	}
	c.step("%s: started (pid %d, healthy in %.1fs)", name, r.rec.PID, time.Since(start).Seconds())
	return nil
}

func (c *Cluster) importImages(ctx context.Context) error {
	pause, err := c.pauseTarball()
	if err != nil {
		return fmt.Errorf("build pause image: %w", err)
	}
	start := time.Now()
	helper, err := c.localPathHelperTarball()
	if err != nil {
		return fmt.Errorf("build local-path helper image: %w", err)
	}
	if err := c.ImportImages(ctx, append([]string{pause, helper}, c.cfg.Images...)...); err != nil {
		return err
	}
	c.step("images imported into containerd (%d, %.1fs)", 2+len(c.cfg.Images), time.Since(start).Seconds())
	return nil
}

func (c *Cluster) waitNodeReady(ctx context.Context, cfg *rest.Config) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	start := time.Now()
	var last string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 120*time.Second, true, func(ctx context.Context) (bool, error) {
		node, err := cs.CoreV1().Nodes().Get(ctx, c.cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil //nolint:nilerr // not registered yet: poll on (last is reported on timeout)
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				last = cond.Message
				// Heartbeats have second resolution.
				fresh := cond.LastHeartbeatTime.Add(time.Second).After(c.kubeletStarted)
				return cond.Status == corev1.ConditionTrue && fresh, nil
			}
		}
		return false, nil
	})
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return err
		}
		return userError(nil, "see "+c.cfg.logFile(compKubelet)+" and "+c.cfg.logFile(compContainerd),
			"node %s did not become Ready in 120s (%s)", c.cfg.NodeName, last)
	}
	c.step("node %s Ready (%.1fs)", c.cfg.NodeName, time.Since(start).Seconds())
	return nil
}

// waitDefaultServiceAccount waits for the controller-manager to create the
// default ServiceAccount: until then every Pod create in `default` fails.
func (c *Cluster) waitDefaultServiceAccount(ctx context.Context, cfg *rest.Config) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return userError(err, "see "+c.cfg.logFile(compControllerManager), "the default ServiceAccount was not created")
	}
	return nil
}

// checkKernel verifies the kernel features the node needs and names the fix.
func checkKernel() error {
	fsys, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return fmt.Errorf("read /proc/filesystems: %w", err)
	}
	if !strings.Contains(string(fsys), "\toverlay\n") {
		_, _ = run("modprobe", "overlay")
		fsys, _ = os.ReadFile("/proc/filesystems")
		if !strings.Contains(string(fsys), "\toverlay\n") {
			return userError(nil, "load it with `modprobe overlay` or use a kernel with CONFIG_OVERLAY_FS",
				"the kernel lacks overlayfs, which containerd needs for container filesystems")
		}
	}
	if _, err := os.Stat("/proc/self/ns/net"); err != nil {
		return userError(nil, "use a kernel with CONFIG_NET_NS", "the kernel lacks network namespaces")
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err != nil && !isCgroupV2() {
		return userError(nil, "mount the cgroup v1 memory controller or boot with cgroup v2",
			"no memory cgroup controller is mounted")
	}
	return nil
}

// Down stops every component and removes what Up made on the host. With
// purge it also deletes the state directory (etcd data, images, PKI); the
// build cache is always kept.
func (c *Cluster) Down(ctx context.Context, purge bool) error {
	if err := requireRoot("down"); err != nil {
		return err
	}
	if _, err := os.Stat(c.cfg.StateDir); err == nil { // never up: nothing to lock, and no dir to create
		unlock, err := c.lock()
		if err != nil {
			return err
		}
		defer unlock()
	}
	var errs []error
	recs := map[string]*procRecord{}
	for _, name := range Components {
		rec, err := c.cfg.readRecord(name)
		if err != nil {
			errs = append(errs, err)
		}
		recs[name] = rec
	}

	// The control plane stops in parallel with the node teardown.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var cp sync.WaitGroup
		for _, name := range []string{compScheduler, compControllerManager, compCoreDNS, compLocalPath} {
			cp.Add(1)
			go func() { defer cp.Done(); c.stopComponent(name, recs[name], 10*time.Second) }()
		}
		cp.Wait()
		c.stopComponent(compAPIServer, recs[compAPIServer], 15*time.Second)
		c.stopComponent(compEtcd, recs[compEtcd], 15*time.Second)
	}()

	// Node: no kubelet first (it would restart pods), then every pod through
	// CRI, so the CNI plugin releases addresses and removes the veths, then
	// containerd.
	var ag sync.WaitGroup
	for _, name := range []string{compKubeRouter, compKubeProxy, compHibernateAgent, compCPUAgent} {
		ag.Add(1)
		go func() { defer ag.Done(); c.stopComponent(name, recs[name], 10*time.Second) }()
	}
	ag.Wait()
	c.stopComponent(compKubelet, recs[compKubelet], 15*time.Second)
	if err := c.removeAllPods(ctx, recs[compContainerd]); err != nil {
		c.step("pods: %v (cleaning up directly)", err)
	}
	c.stopComponent(compContainerd, recs[compContainerd], 15*time.Second)
	c.StopRegistry() // registry.go; started only on demand
	c.killLeftovers()
	wg.Wait()

	if err := unmountUnder(c.cfg.StateDir, c.cfg.RunDir); err != nil {
		errs = append(errs, err)
	}
	if c.bins.KubeProxy == "" {
		c.bins, _ = c.cfg.locateBinaries() // for kube-proxy --cleanup; a missing binary only skips that
	}
	if err := c.cleanupAddonNetwork(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := c.teardownNetwork(); err != nil {
		errs = append(errs, err)
	}
	if err := removeCgroupRoot(); err != nil {
		errs = append(errs, err)
	}
	if err := removeCPUGroups(); err != nil {
		errs = append(errs, err)
	}
	if err := c.cfg.restoreSysctls(); err != nil {
		errs = append(errs, err)
	}
	if err := c.removeContainerLogLinks(); err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(c.cfg.RunDir); err != nil {
		errs = append(errs, fmt.Errorf("remove %s: %w", c.cfg.RunDir, err))
	}
	// containerd's shims keep their sockets in the fixed /run/containerd/s;
	// remove those directories only if nobody else left anything there.
	for _, d := range []string{"/run/containerd/s", "/run/containerd/fifo", "/run/containerd"} {
		_ = syscall.Rmdir(d)
	}
	c.step("host cleaned: mounts, network namespaces, interfaces, iptables chains, cgroups, sysctls")
	if purge {
		if ms, _ := mountsUnder(c.cfg.StateDir); len(ms) > 0 {
			errs = append(errs, fmt.Errorf("not purging %s: %s is still mounted", c.cfg.StateDir, ms[0].mountPoint))
		} else if err := os.RemoveAll(c.cfg.StateDir); err != nil {
			errs = append(errs, fmt.Errorf("purge %s: %w", c.cfg.StateDir, err))
		} else {
			c.step("purged %s", c.cfg.StateDir)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return &Error{Cause: "cleanup was incomplete", Fix: "run `agent-sandbox down` again; if it persists, report the error", Err: err}
	}
	return nil
}

func (c *Cluster) stopComponent(name string, rec *procRecord, grace time.Duration) {
	if rec.alive() {
		start := time.Now()
		stopProcess(rec, grace)
		c.step("%s: stopped (pid %d, %.1fs)", name, rec.PID, time.Since(start).Seconds())
	}
	_ = os.Remove(c.cfg.pidFile(name))
}
