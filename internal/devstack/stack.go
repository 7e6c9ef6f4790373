// Package devstack runs the shared integration stack of the SDK and CLI
// tests on one machine, with nothing faked that the clients can observe: a
// real kube-apiserver and etcd (internal/testenv), the controller manager
// with the Sandbox and extension controllers, the real garbage collector,
// the sandbox-router serving on loopback, and one real sandboxd process per
// sandbox Pod, on a loopback address of its own that is reported as the Pod
// IP. An API front in front of the apiserver serves pods/portforward (which
// envtest cannot: it has no kubelet), so port-forward tunnels, kubectl
// port-forward included, reach the router and sandboxd processes too.
//
// What differs from a cluster: no container isolation (sandboxd runs as
// this user, confined only to its workspace directory), no scheduler (Pods
// are bound to one fake node), and the router and API front trust
// loopback. It is a test fixture; never expose it.
//
// hack/devstack wraps Start as a command for the Python SDK and CLI tests.
package devstack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/controller/claim"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions"
	"sigs.k8s.io/agent-sandbox/internal/controller/sandbox"
	sblabels "sigs.k8s.io/agent-sandbox/internal/labels"
	"sigs.k8s.io/agent-sandbox/internal/latebind"
	"sigs.k8s.io/agent-sandbox/internal/manager"
	"sigs.k8s.io/agent-sandbox/internal/router"
	"sigs.k8s.io/agent-sandbox/internal/testenv"
	"sigs.k8s.io/agent-sandbox/internal/testenv/freeport"
)

// Ports sandboxd serves on, on each sandbox's own address: the legacy
// runtime API, the REST API and the gRPC process API (the defaults of the
// SDKs and of the router's always-reachable ports).
const (
	LegacyPort = 8888
	RESTPort   = 8080
	GRPCPort   = 9090
)

// Options configure Start. The zero value is the stack the SDK and CLI
// tests expect.
type Options struct {
	// Namespace of the template and warm pool (default "default").
	Namespace string
	// WarmPoolReplicas is the size of the warm pool (default 2).
	WarmPoolReplicas int32
	// NoWarmPool skips the template and warm pool.
	NoWarmPool bool
	// RouterNamespaces are the namespaces where sandbox-router-svc is
	// published for port-forward tunnels (default: Namespace and
	// agent-sandbox-system, where the Python SDK looks).
	RouterNamespaces []string
	// SandboxdBinary is a built cmd/sandboxd. Default: $AGENT_SANDBOX_SANDBOXD,
	// else it is built from this repository into WorkDir.
	SandboxdBinary string
	// WorkDir holds the kubeconfig, the sandboxd binary, pod workspaces and
	// logs (default: a new temp directory, removed by Stop).
	WorkDir string
	// Log receives the components' logs; nil discards them.
	Log io.Writer
	// ReadyTimeout bounds waiting for the warm pool (default 2m).
	ReadyTimeout time.Duration
	// LateBinding gives the controller a fresh delivery key and the
	// template's container the matching public key, so claims with env
	// stay on the warm path (internal/latebind).
	LateBinding bool
}

// Stack is a running integration stack.
type Stack struct {
	// Env is the test apiserver.
	Env *testenv.Env
	// Config talks to the API front with admin rights; unlike Env.Config
	// it supports pods/portforward.
	Config *rest.Config
	// Client is a controller-runtime client on Config with every API
	// group of the project.
	Client client.Client
	// Kubeconfig is a kubeconfig file for Config.
	Kubeconfig string
	// RouterURL is the router's plain HTTP (and h2c) listener.
	RouterURL string
	// Namespace, WarmPool and Template name what Start applied.
	Namespace, WarmPool, Template string
	// Kubelet runs the sandbox Pods.
	Kubelet *testenv.ProcessKubelet
	// WorkDir is the stack's scratch directory.
	WorkDir string
	// Signer is the controller's late-binding key (nil without
	// Options.LateBinding).
	Signer *latebind.Signer

	log      logr.Logger
	ownsDir  bool
	front    *apiFront
	gc       *testenv.GarbageCollector
	stopMgr  context.CancelFunc
	mgrDone  chan error
	stopRtr  context.CancelFunc
	rtrDone  chan error
	stopOnce sync.Once
	stopErr  error
}

// Start brings the stack up and returns once the warm pool is Ready. On
// error everything already started is stopped. The stack outlives ctx;
// stop it with Stop.
//
// Start sets controller-runtime's global logger (to Options.Log).
func Start(ctx context.Context, opts Options) (st *Stack, err error) {
	if opts.Namespace == "" {
		opts.Namespace = "default"
	}
	if opts.WarmPoolReplicas == 0 {
		opts.WarmPoolReplicas = 2
	}
	if len(opts.RouterNamespaces) == 0 {
		opts.RouterNamespaces = []string{opts.Namespace}
		if opts.Namespace != "agent-sandbox-system" {
			opts.RouterNamespaces = append(opts.RouterNamespaces, "agent-sandbox-system")
		}
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = 2 * time.Minute
	}
	logOut := opts.Log
	if logOut == nil {
		logOut = io.Discard
	}
	var logMu sync.Mutex
	log := funcr.New(func(prefix, args string) {
		logMu.Lock()
		defer logMu.Unlock()
		_, _ = fmt.Fprintf(logOut, "%s %s %s\n", time.Now().Format("15:04:05.000"), prefix, args)
	}, funcr.Options{})
	ctrllog.SetLogger(log.WithName("controller"))

	s := &Stack{
		Namespace: opts.Namespace, WarmPool: WarmPoolName, Template: TemplateName,
		WorkDir: opts.WorkDir, log: log,
	}
	if s.WorkDir == "" {
		if s.WorkDir, err = os.MkdirTemp("", "agent-sandbox-devstack-*"); err != nil {
			return nil, fmt.Errorf("creating work dir: %w", err)
		}
		s.ownsDir = true
	}
	defer func() {
		if err != nil {
			_ = s.Stop()
		}
	}()

	// Build sandboxd while the apiserver starts: both take seconds.
	type built struct {
		path string
		err  error
	}
	binc := make(chan built, 1)
	go func() {
		p, err := sandboxdBinary(ctx, opts.SandboxdBinary, s.WorkDir)
		binc <- built{p, err}
	}()

	if s.Env, err = testenv.Start(); err != nil {
		<-binc
		return nil, err
	}
	if s.gc, err = s.Env.StartGarbageCollector(); err != nil {
		<-binc
		return nil, err
	}
	bin := <-binc
	if bin.err != nil {
		return nil, bin.err
	}

	admin := rest.CopyConfig(s.Env.Config)
	admin.QPS, admin.Burst = -1, 1000
	if s.front, err = startAPIFront(admin); err != nil {
		return nil, err
	}
	s.Config = &rest.Config{Host: s.front.URL(), QPS: -1, Burst: 1000}
	if s.Client, err = client.New(s.Config, client.Options{Scheme: s.Env.Scheme}); err != nil {
		return nil, fmt.Errorf("creating client: %w", err)
	}
	if s.Kubeconfig, err = writeKubeconfig(s.WorkDir, s.front.URL()); err != nil {
		return nil, err
	}

	if err := s.startRouter(ctx, admin); err != nil {
		return nil, err
	}
	routerAddr := s.RouterURL[len("http://"):]
	for _, ns := range opts.RouterNamespaces {
		pod, err := publishRouter(ctx, s.Env.Client, ns)
		if err != nil {
			return nil, err
		}
		s.front.override(ns, pod.Name, RouterPort, routerAddr)
	}

	if s.Kubelet, err = testenv.StartProcessKubelet(admin, &testenv.ProcessKubelet{
		Command: func(pod *corev1.Pod, ip netip.Addr, dir string) *exec.Cmd {
			return sandboxdCommand(bin.path, pod, ip, dir)
		},
		Probe:   probeSandboxd,
		Select:  runsPod,
		Ports:   []int{LegacyPort, RESTPort, GRPCPort},
		FirstIP: randomLoopbackBlock(),
		WorkDir: filepath.Join(s.WorkDir, "pods"),
		Logf:    func(format string, args ...any) { log.WithName("kubelet").Info(fmt.Sprintf(format, args...)) },
	}); err != nil {
		return nil, err
	}

	if opts.LateBinding {
		if s.Signer, err = latebind.GenerateSigner(); err != nil {
			return nil, err
		}
	}
	if err := s.startManager(admin); err != nil {
		return nil, err
	}

	if !opts.NoWarmPool {
		if err := s.applyWarmPool(ctx, opts.WarmPoolReplicas, opts.ReadyTimeout); err != nil {
			return nil, err
		}
	}
	log.Info("devstack ready", "kubeconfig", s.Kubeconfig, "router", s.RouterURL)
	return s, nil
}

// UnpullableRegistry names a registry the stack's kubelet cannot pull
// from: Pods with an image under it are left unbound and Pending, never
// run, as a real kubelet would leave a Pod whose image is missing. Tests
// report the kubelet's status for them (ErrImagePull, ...) by hand.
const UnpullableRegistry = "unpullable.devstack.invalid/"

// runsPod selects the Pods the stack's kubelet runs: sandbox Pods (with
// the sandbox-name-hash label) whose images can be "pulled".
func runsPod(p *corev1.Pod) bool {
	if _, ok := p.Labels[sblabels.SandboxNameHash]; !ok {
		return false
	}
	for _, c := range append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...) {
		if strings.HasPrefix(c.Image, UnpullableRegistry) {
			return false
		}
	}
	return true
}

// startRouter runs internal/router in this process on a free loopback
// port, with loopback pod IPs allowed (sandboxd processes live on 127/8),
// and waits until it serves.
func (s *Stack) startRouter(ctx context.Context, admin *rest.Config) error {
	var lastErr error
	// The port is picked by binding :0 and releasing it; another program
	// can grab it in between, so retry on a fresh one.
	for range 3 {
		port, err := freePort()
		if err != nil {
			return err
		}
		rcfg, err := router.ParseConfig([]string{
			"--http-bind-address=127.0.0.1:" + strconv.Itoa(port),
			"--metrics-bind-address=",
			"--health-probe-bind-address=",
			"--allow-loopback-pod-ip",
			"--kubeconfig=" + s.Env.Kubeconfig,
			"--shutdown-timeout=2s",
		}, func(string) string { return "" }, nil)
		if err != nil {
			return fmt.Errorf("router config: %w", err)
		}
		rctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- router.Run(rctx, rcfg, s.log.WithName("router"), router.BuildInfo{GitVersion: "devstack"})
		}()
		url := "http://127.0.0.1:" + strconv.Itoa(port)
		if err := waitHTTP(ctx, url+"/healthz", done, 90*time.Second); err != nil {
			cancel()
			if !errors.Is(err, errExited) {
				// waitHTTP did not read the router's result (when it did,
				// a second read would block forever): wait for it to stop
				// before the next attempt.
				err = errors.Join(err, <-done)
			}
			lastErr = err
			continue
		}
		s.RouterURL, s.stopRtr, s.rtrDone = url, cancel, done
		return nil
	}
	return fmt.Errorf("starting router: %w", lastErr)
}

// startManager runs the controller manager as the controller binary with
// --extensions would.
func (s *Stack) startManager(admin *rest.Config) error {
	mgr, err := manager.New(admin, manager.Options{MetricsBindAddress: "0", HealthProbeBindAddress: "0"})
	if err != nil {
		return err
	}
	if err := sandbox.SetupWithManager(mgr, sandbox.Options{StatusCoalesceWindow: time.Second}); err != nil {
		return fmt.Errorf("setting up sandbox controller: %w", err)
	}
	if err := extensions.Setup(mgr, extensions.Options{EnableWarmPoolEviction: true,
		LateBinding: claim.LateBinding{Signer: s.Signer, Port: RESTPort}}); err != nil {
		return fmt.Errorf("setting up extension controllers: %w", err)
	}
	mctx, cancel := context.WithCancel(context.Background())
	s.stopMgr, s.mgrDone = cancel, make(chan error, 1)
	go func() { s.mgrDone <- mgr.Start(mctx) }()
	if !mgr.GetCache().WaitForCacheSync(mctx) {
		return errors.New("controller manager cache did not sync")
	}
	return nil
}

// applyWarmPool creates the template and warm pool and waits until every
// replica is Ready.
func (s *Stack) applyWarmPool(ctx context.Context, replicas int32, timeout time.Duration) error {
	c := s.Env.Client
	tmpl := template(s.Namespace)
	if s.Signer != nil {
		tmpl.Spec.EnvVarsInjectionPolicy = extv1beta1.EnvVarsInjectionPolicyAllowed
		ctr := &tmpl.Spec.PodTemplate.Spec.Containers[0]
		ctr.Env = append(ctr.Env, corev1.EnvVar{Name: latebind.KeyEnv, Value: s.Signer.PublicKey()})
	}
	if err := c.Create(ctx, tmpl); err != nil {
		return fmt.Errorf("creating SandboxTemplate: %w", err)
	}
	if err := c.Create(ctx, warmPool(s.Namespace, replicas)); err != nil {
		return fmt.Errorf("creating SandboxWarmPool: %w", err)
	}
	return s.WaitWarmPoolReady(ctx, timeout)
}

// WaitWarmPoolReady waits until the warm pool reports all its replicas
// Ready, e.g. after a test claimed from it and wants a full pool again.
func (s *Stack) WaitWarmPoolReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	key := types.NamespacedName{Namespace: s.Namespace, Name: s.WarmPool}
	var pool extv1beta1.SandboxWarmPool
	for {
		if err := s.Env.Client.Get(ctx, key, &pool); err == nil &&
			pool.Status.ReadyReplicas >= pool.DesiredReplicas() && pool.Status.Replicas == pool.DesiredReplicas() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("warm pool %s: %d/%d replicas ready: %w", key, pool.Status.ReadyReplicas, pool.DesiredReplicas(), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop stops every component and process and removes the work directory
// if Start created it. It is safe to call more than once.
func (s *Stack) Stop() error {
	s.stopOnce.Do(func() {
		var errs []error
		if s.stopMgr != nil {
			s.stopMgr()
			if err := <-s.mgrDone; err != nil && !errors.Is(err, context.Canceled) {
				errs = append(errs, fmt.Errorf("controller manager: %w", err))
			}
		}
		if s.Kubelet != nil {
			s.Kubelet.Stop()
		}
		if s.stopRtr != nil {
			s.stopRtr()
			if err := <-s.rtrDone; err != nil && !errors.Is(err, context.Canceled) {
				errs = append(errs, fmt.Errorf("router: %w", err))
			}
		}
		if s.front != nil {
			if err := s.front.close(); err != nil {
				errs = append(errs, fmt.Errorf("api front: %w", err))
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

// sandboxdBinary returns a sandboxd executable: the given one, the one
// named by $AGENT_SANDBOX_SANDBOXD, or a fresh build of cmd/sandboxd.
func sandboxdBinary(ctx context.Context, given, workDir string) (string, error) {
	return testenv.RepoBinary(ctx, given, "AGENT_SANDBOX_SANDBOXD", "sandboxd", workDir)
}

// sandboxdCommand runs sandboxd for pod on ip, with its workspace and log
// in dir. The environment is minimal plus the literal env values of the
// pod's first container, as a container would see them.
func sandboxdCommand(bin string, pod *corev1.Pod, ip netip.Addr, dir string) *exec.Cmd {
	ws := filepath.Join(dir, "workspace")
	cmd := exec.Command(bin,
		"--listen-host="+ip.String(),
		"--legacy-port="+strconv.Itoa(LegacyPort),
		"--rest-port="+strconv.Itoa(RESTPort),
		"--grpc-port="+strconv.Itoa(GRPCPort),
		"--root-dir="+ws,
		"--shutdown-timeout=2s",
		"--log-format=text",
	)
	cmd.Dir = dir
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + ws,
		"LANG=C.UTF-8",
		"HOSTNAME=" + pod.Name,
		// Reported by /v1/metadata: the readiness probe checks it, so a
		// sandboxd of another devstack on the same address never passes
		// for this pod's.
		podUIDEnv + "=" + string(pod.UID),
	}
	if len(pod.Spec.Containers) > 0 {
		for _, e := range pod.Spec.Containers[0].Env {
			if e.ValueFrom == nil {
				cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
			}
		}
	}
	if f, err := os.OpenFile(filepath.Join(dir, "sandboxd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
		cmd.Stdout, cmd.Stderr = f, f
	}
	return cmd
}

var probeClient = &http.Client{
	Timeout:   time.Second,
	Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil},
}

// podUIDEnv carries the Pod UID into its sandboxd's /v1/metadata.
const podUIDEnv = "SANDBOX_DEVSTACK_POD_UID"

// probeSandboxd is the readiness probe: the REST API answers with this
// pod's identity in its metadata, and the legacy API answers too.
func probeSandboxd(ctx context.Context, pod *corev1.Pod, ip netip.Addr) bool {
	get := func(u string) ([]byte, bool) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, false
		}
		resp, err := probeClient.Do(req)
		if err != nil {
			return nil, false
		}
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return b, err == nil && resp.StatusCode == http.StatusOK
	}
	b, ok := get("http://" + net.JoinHostPort(ip.String(), strconv.Itoa(RESTPort)) + "/v1/metadata")
	if !ok {
		return false
	}
	var md struct {
		Env map[string]string `json:"env"`
	}
	if json.Unmarshal(b, &md) != nil || md.Env[podUIDEnv] != string(pod.UID) {
		return false
	}
	_, ok = get("http://" + net.JoinHostPort(ip.String(), strconv.Itoa(LegacyPort)) + "/")
	return ok
}

// randomLoopbackBlock returns 127.A.B.1 with random A (1-254) and B, so
// that devstacks running side by side (parallel test binaries, several
// developers) hand out different pod addresses.
func randomLoopbackBlock() netip.Addr {
	return netip.AddrFrom4([4]byte{127, byte(1 + rand.IntN(254)), byte(rand.IntN(256)), 1})
}

// waitHTTP polls url until it answers 200, the component exits (done), or
// timeout passes. Start-up only.
// errExited: the process waitHTTP watched ended (and its result was read
// from done) before it served.
var errExited = errors.New("exited before serving")

func waitHTTP(ctx context.Context, url string, done <-chan error, timeout time.Duration) error {
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
		select {
		case err := <-done:
			return fmt.Errorf("%w: %w", errExited, err)
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", url, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func freePort() (int, error) {
	for {
		port, err := freeport.Get()
		if err != nil {
			return 0, err
		}
		// The router refuses to dial its own ports, and sandboxd uses
		// these on other addresses; keep them distinct to avoid confusion.
		if port != LegacyPort && port != RESTPort && port != GRPCPort {
			return port, nil
		}
	}
}

// writeKubeconfig writes a kubeconfig for the API front.
func writeKubeconfig(dir, server string) (string, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["devstack"] = &clientcmdapi.Cluster{Server: server}
	cfg.AuthInfos["devstack"] = &clientcmdapi.AuthInfo{}
	cfg.Contexts["devstack"] = &clientcmdapi.Context{Cluster: "devstack", AuthInfo: "devstack", Namespace: "default"}
	cfg.CurrentContext = "devstack"
	path := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("writing kubeconfig: %w", err)
	}
	return path, nil
}
