// Package kwokstack runs the integration stack at scale: a real
// kube-apiserver and etcd (internal/testenv), the real kube-scheduler and
// garbage collector, N simulated nodes driven by kwok (sigs.k8s.io/kwok,
// built by hack/kwok/build.sh), and the agent-sandbox controller as its own
// process (so its CPU seconds and RSS are its own, and it can be killed and
// restarted). Pods are scheduled by the real scheduler onto kwok nodes and
// turn Running/Ready without any container, so a warm pool of thousands
// costs only API objects.
//
// It is a benchmark fixture: nothing runs inside the pods, so there is no
// router or sandboxd traffic here (internal/devstack has those).
package kwokstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
	"sigs.k8s.io/agent-sandbox/internal/testenv/freeport"
)

// NodeAnnotation marks the nodes kwok manages (and only those).
const NodeAnnotation = "kwok.x-k8s.io/node"

// Options configure Start.
type Options struct {
	// Nodes is the number of simulated nodes (default 100, as the
	// reference's scalability gate).
	Nodes int
	// ControllerArgs are extra flags of agent-sandbox-controller; the
	// defaults are the gate's settings (see GateControllerArgs).
	ControllerArgs []string
	// KwokBinary is a built kwok (default: hack/kwok/build.sh, which builds
	// it once into the cache).
	KwokBinary string
	// ControllerBinary is a built cmd/agent-sandbox-controller (default:
	// built from this repository into WorkDir).
	ControllerBinary string
	// WorkDir holds configs, binaries and logs (default: a temp directory
	// removed by Stop).
	WorkDir string
	// GCQPS is the garbage collector's client QPS (kube-controller-manager
	// --kube-api-qps; its default, 20, when 0). Mass deletions cascade
	// through the GC, so this bounds how fast they finish.
	GCQPS int
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

// GateControllerArgs are the controller settings of the reference's KWOK
// scalability presubmit (spec §6.1): client QPS 1000/burst 2000, 50
// sandbox and claim workers, one pool and template worker, batches of 300.
var GateControllerArgs = []string{
	"--kube-api-qps=1000", "--kube-api-burst=2000",
	"--sandbox-concurrent-workers=50", "--sandbox-claim-concurrent-workers=50",
	"--sandbox-warm-pool-concurrent-workers=1", "--sandbox-template-concurrent-workers=1",
	"--sandbox-warm-pool-max-batch-size=300",
}

// Stack is a running kwok stack.
type Stack struct {
	// Env is the test apiserver.
	Env *testenv.Env
	// Config is an admin config on the apiserver, unthrottled.
	Config *rest.Config
	// Client is a controller-runtime client on Config.
	Client client.Client
	// Kubeconfig is an admin kubeconfig file.
	Kubeconfig string
	// Nodes are the names of the simulated nodes.
	Nodes []string
	// WorkDir is the stack's scratch directory.
	WorkDir string

	opts       Options
	ownsDir    bool
	logf       func(format string, args ...any)
	gc         *testenv.GarbageCollector
	scheduler  *process
	kwok       *process
	mu         sync.Mutex
	controller *process
	metricsURL string
	ctrlBin    string
	stopOnce   sync.Once
	stopErr    error
}

// Start brings the stack up: apiserver, garbage collector, scheduler,
// kwok, Opts.Nodes Ready nodes and the controller. On error everything
// already started is stopped.
func Start(ctx context.Context, opts Options) (s *Stack, err error) {
	if opts.Nodes <= 0 {
		opts.Nodes = 100
	}
	if opts.ControllerArgs == nil {
		opts.ControllerArgs = GateControllerArgs
	}
	logOut := opts.Log
	if logOut == nil {
		logOut = io.Discard
	}
	var logMu sync.Mutex
	s = &Stack{opts: opts, WorkDir: opts.WorkDir, logf: func(format string, args ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		_, _ = fmt.Fprintf(logOut, "%s kwokstack: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}}
	if s.WorkDir == "" {
		if s.WorkDir, err = os.MkdirTemp("", "agent-sandbox-kwokstack-*"); err != nil {
			return nil, fmt.Errorf("creating work dir: %w", err)
		}
		s.ownsDir = true
	}
	// The error returns below set the named result s to nil, so the cleanup
	// keeps its own reference to what was started.
	started := s
	defer func() {
		if err != nil {
			_ = started.Stop()
		}
	}()

	// Binaries build while the apiserver starts.
	type built struct {
		kwok, ctrl string
		err        error
	}
	binc := make(chan built, 1)
	go func() {
		var b built
		b.kwok, b.err = kwokBinary(ctx, opts.KwokBinary)
		if b.err == nil {
			b.ctrl, b.err = controllerBinary(ctx, opts.ControllerBinary, s.WorkDir)
		}
		binc <- b
	}()
	if s.Env, err = testenv.Start(); err != nil {
		<-binc
		return nil, err
	}
	s.Kubeconfig = s.Env.Kubeconfig
	s.Config = rest.CopyConfig(s.Env.Config)
	s.Config.QPS, s.Config.Burst = -1, 1000
	if s.Client, err = client.New(s.Config, client.Options{Scheme: s.Env.Scheme}); err != nil {
		<-binc
		return nil, fmt.Errorf("creating client: %w", err)
	}
	var gcArgs []string
	if opts.GCQPS > 0 {
		gcArgs = []string{"--kube-api-qps=" + strconv.Itoa(opts.GCQPS), "--kube-api-burst=" + strconv.Itoa(2*opts.GCQPS)}
	}
	if s.gc, err = s.Env.StartGarbageCollector(gcArgs...); err != nil {
		<-binc
		return nil, err
	}
	b := <-binc
	if b.err != nil {
		return nil, b.err
	}
	s.ctrlBin = b.ctrl

	if err := s.startScheduler(); err != nil {
		return nil, err
	}
	if err := s.startKwok(b.kwok); err != nil {
		return nil, err
	}
	if err := s.createNodes(ctx); err != nil {
		return nil, err
	}
	if err := s.StartController(ctx); err != nil {
		return nil, err
	}
	s.logf("ready: %d kwok nodes, controller metrics %s", len(s.Nodes), s.ControllerMetricsURL())
	return s, nil
}

// startScheduler runs the real kube-scheduler with the client limits the
// benchmarks need (the default 50 QPS would cap pod binding at 50/s).
func (s *Stack) startScheduler() error {
	bin := filepath.Join(s.Env.AssetsDir, "kube-scheduler")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("kube-scheduler missing in %s: run `make deps-test`: %w", s.Env.AssetsDir, err)
	}
	cfg := filepath.Join(s.WorkDir, "scheduler.yaml")
	body := "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n" +
		"clientConnection:\n  kubeconfig: " + strconv.Quote(s.Kubeconfig) + "\n  qps: 2000\n  burst: 4000\n" +
		"leaderElection:\n  leaderElect: false\n"
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		return fmt.Errorf("writing scheduler config: %w", err)
	}
	p, err := startProcess(s.WorkDir, "kube-scheduler", bin, "--config="+cfg, "--secure-port=0")
	if err != nil {
		return err
	}
	s.scheduler = p
	return nil
}

// startKwok runs kwok on the nodes carrying NodeAnnotation, with the
// stages built next to its binary, and a pod CIDR large enough for 60k pods.
func (s *Stack) startKwok(bin string) error {
	stages := filepath.Join(filepath.Dir(bin), "stages.yaml")
	if _, err := os.Stat(stages); err != nil {
		return fmt.Errorf("kwok stages missing (run hack/kwok/build.sh): %w", err)
	}
	p, err := startProcess(s.WorkDir, "kwok", bin,
		"--kubeconfig="+s.Kubeconfig,
		"--config="+stages,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector="+NodeAnnotation+"=fake",
		"--cidr=10.0.0.1/16",
		"--node-ip=10.255.0.1",
		"--server-address=",
	)
	if err != nil {
		return err
	}
	s.kwok = p
	return nil
}

// createNodes creates the simulated nodes and waits until every one is
// Ready (kwok reports it).
func (s *Stack) createNodes(ctx context.Context) error {
	for i := range s.opts.Nodes {
		name := fmt.Sprintf("kwok-node-%03d", i)
		n := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name:        name,
				Annotations: map[string]string{NodeAnnotation: "fake"},
				Labels:      map[string]string{"type": "kwok", corev1.LabelHostname: name, corev1.LabelOSStable: "linux"},
			},
			Status: corev1.NodeStatus{
				Capacity: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("1000"), corev1.ResourceMemory: resource.MustParse("4Ti"),
					corev1.ResourcePods: resource.MustParse("1000"),
				},
				Allocatable: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("1000"), corev1.ResourceMemory: resource.MustParse("4Ti"),
					corev1.ResourcePods: resource.MustParse("1000"),
				},
			},
		}
		if err := s.Client.Create(ctx, n); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating node %s: %w", name, err)
		}
		s.Nodes = append(s.Nodes, name)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var nodes corev1.NodeList
		if err := s.Client.List(ctx, &nodes); err != nil {
			return fmt.Errorf("listing nodes: %w", err)
		}
		ready := 0
		for _, n := range nodes.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		if ready >= s.opts.Nodes {
			return s.untaintNodes(ctx, nodes.Items)
		}
		if err := s.kwok.exited(); err != nil {
			return fmt.Errorf("kwok exited: %w\n%s", err, s.kwok.tail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d kwok nodes Ready after 2m\n%s", ready, s.opts.Nodes, s.kwok.tail())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// untaintNodes removes the not-ready taint the apiserver's admission puts
// on every new node: on a cluster the node lifecycle controller lifts it
// once the node reports Ready; here nothing runs that controller, and no
// pod would ever schedule.
func (s *Stack) untaintNodes(ctx context.Context, nodes []corev1.Node) error {
	for i := range nodes {
		n := &nodes[i]
		if len(n.Spec.Taints) == 0 {
			continue
		}
		// A patch, not an Update: kwok writes node status concurrently,
		// and an Update from the list would fail on a stale
		// resourceVersion.
		if err := s.Client.Patch(ctx, n, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"taints":null}}`))); err != nil {
			return fmt.Errorf("untainting node %s: %w", n.Name, err)
		}
	}
	return nil
}

// ControllerMetricsURL is the running controller's /metrics ("" when it
// is stopped).
func (s *Stack) ControllerMetricsURL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.metricsURL
}

// ControllerPID is the running controller's process ID (0 when it is
// stopped). Benchmarks read its RSS from /proc rather than scraping
// /metrics, which would cost the controller CPU in proportion to the
// Sandboxes its collectors count.
func (s *Stack) ControllerPID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.controller == nil || s.controller.cmd.Process == nil {
		return 0
	}
	return s.controller.cmd.Process.Pid
}

// StartController starts the controller process (--extensions, no leader
// election) and waits until its metrics endpoint serves (the manager is
// up; its caches may still be syncing).
func (s *Stack) StartController(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.controller != nil {
		return errors.New("controller already running")
	}
	// The metrics port is free when picked, but another program can take
	// it before the controller binds it, and the controller exits. Retry
	// on a fresh port then.
	var lastErr error
	for range 3 {
		p, url, err := s.startController(ctx)
		if err == nil {
			s.controller, s.metricsURL = p, url
			return nil
		}
		if !errors.Is(err, errExitedBeforeServing) {
			return err
		}
		lastErr = err
	}
	return lastErr
}

// startController starts one controller process on a fresh metrics port
// and waits until it serves there.
func (s *Stack) startController(ctx context.Context) (*process, string, error) {
	port, err := freeport.Get()
	if err != nil {
		return nil, "", err
	}
	args := append([]string{
		"--extensions", "--leader-elect=false",
		// The stack speaks v1beta1 only and has no webhook Service or
		// namespace for the certificates; the gate measures claims.
		"--enable-webhook=false",
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(port),
		"--health-probe-bind-address=0",
		"--zap-log-level=error",
	}, s.opts.ControllerArgs...)
	p, err := startProcessEnv(s.WorkDir, "controller", []string{"KUBECONFIG=" + s.Kubeconfig}, s.ctrlBin, args...)
	if err != nil {
		return nil, "", err
	}
	url := "http://127.0.0.1:" + strconv.Itoa(port) + "/metrics"
	if err := waitHTTP(ctx, url, p, 2*time.Minute); err != nil {
		p.kill()
		return nil, "", fmt.Errorf("controller: %w\n%s", err, p.tail())
	}
	return p, url, nil
}

// StopController kills the controller (SIGKILL: a crash, as the restart
// scenario wants; nothing of its state survives but what is in the API).
func (s *Stack) StopController() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.controller != nil {
		s.controller.kill()
		s.controller, s.metricsURL = nil, ""
	}
}

// Stop stops every process and removes the work directory if Start
// created it. Safe to call more than once.
func (s *Stack) Stop() error {
	s.stopOnce.Do(func() {
		var errs []error
		s.StopController()
		for _, p := range []*process{s.kwok, s.scheduler} {
			if p != nil {
				p.kill()
			}
		}
		if s.gc != nil {
			s.gc.Stop()
		}
		if s.Env != nil {
			if err := s.Env.Stop(); err != nil {
				errs = append(errs, fmt.Errorf("apiserver: %w", err))
			}
		}
		if s.ownsDir {
			if err := os.RemoveAll(s.WorkDir); err != nil {
				errs = append(errs, err)
			}
		}
		s.stopErr = errors.Join(errs...)
	})
	return s.stopErr
}

// process is a child process with its log in the work dir.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error
}

func startProcess(dir, name, bin string, args ...string) (*process, error) {
	return startProcessEnv(dir, name, nil, bin, args...)
}

// startProcessEnv starts bin with this process's environment plus env.
func startProcessEnv(dir, name string, env []string, bin string, args ...string) (*process, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	// Its own process group, so a kill reaches nothing else, and dying
	// with this process when the benchmark is interrupted.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = f.Close()
		close(p.done)
	}()
	return p, nil
}

// exited returns the exit error once the process has exited, else nil.
func (p *process) exited() error {
	select {
	case <-p.done:
		if p.err == nil {
			return errors.New("exited with status 0")
		}
		return p.err
	default:
		return nil
	}
}

func (p *process) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// tail returns the end of the process's log, for error messages.
func (p *process) tail() string {
	b, _ := os.ReadFile(p.logPath)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// kwokBinary returns the given kwok, else builds (or finds) the pinned one.
func kwokBinary(ctx context.Context, given string) (string, error) {
	if given == "" {
		given = os.Getenv("AGENT_SANDBOX_KWOK")
	}
	if given != "" {
		if _, err := os.Stat(given); err != nil {
			return "", fmt.Errorf("kwok binary: %w", err)
		}
		return given, nil
	}
	cmd := exec.CommandContext(ctx, filepath.Join(testenv.RepoRoot(), "hack", "kwok", "build.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("building kwok (hack/kwok/build.sh): %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// controllerBinary returns the given controller, else builds this
// repository's into workDir.
func controllerBinary(ctx context.Context, given, workDir string) (string, error) {
	return testenv.RepoBinary(ctx, given, "AGENT_SANDBOX_CONTROLLER", "agent-sandbox-controller", workDir)
}

var probeClient = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}

// errExitedBeforeServing: the process ended before its endpoint answered.
var errExitedBeforeServing = errors.New("exited before serving")

// waitHTTP polls url until it answers 200 or p exits.
func waitHTTP(ctx context.Context, url string, p *process, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := probeClient.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if err := p.exited(); err != nil {
			return fmt.Errorf("%w: %w", errExitedBeforeServing, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", url, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
