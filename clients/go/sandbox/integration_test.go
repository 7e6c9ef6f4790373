package sandbox

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/devstack"
)

// End-to-end tests against the devstack: real apiserver, controllers,
// warm pool, router and one sandboxd process per sandbox Pod. Every
// connection strategy is exercised; see each test for the path requests
// take.

func stackOptions(st *devstack.Stack) Options {
	return Options{
		RestConfig: st.Config, Namespace: st.Namespace, WarmPoolName: st.WarmPool, Quiet: true,
		SandboxReadyTimeout: 2 * time.Minute, PortForwardReadyTimeout: time.Minute,
	}
}

// openFromPool opens a handle and arranges for it to be closed.
func openFromPool(t *testing.T, o Options) *Sandbox {
	t.Helper()
	s, err := New(testCtx(t), o)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Open(testCtx(t)); err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// closeAndCheckGone closes s and checks that the claim, the Sandbox and
// the sandboxd process of its Pod are gone.
func closeAndCheckGone(t *testing.T, st *devstack.Stack, s *Sandbox) {
	t.Helper()
	claim, name, pod := s.ClaimName(), s.SandboxName(), s.PodName()
	if err := s.Close(testCtx(t)); err != nil {
		t.Fatalf("Close: %v", err)
	}
	eventually(t, "claim, sandbox and process gone", func() bool {
		cerr := st.Client.Get(context.Background(), types.NamespacedName{Namespace: st.Namespace, Name: claim}, &extv1beta1.SandboxClaim{})
		serr := st.Client.Get(context.Background(), types.NamespacedName{Namespace: st.Namespace, Name: name}, &sandboxv1beta1.Sandbox{})
		_, running := st.Kubelet.PodIP(st.Namespace, pod)
		return cerr != nil && serr != nil && !running
	})
}

// exerciseLegacy runs the legacy-runtime operations every strategy must
// support.
func exerciseLegacy(t *testing.T, s *Sandbox) {
	t.Helper()
	ctx := testCtx(t)
	res, err := s.Run(ctx, "echo 'Hello from SDK'")
	if err != nil || res.Stdout != "Hello from SDK\n" || res.Stderr != "" || res.ExitCode != 0 {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	res, err = s.Commands().Run(ctx, `sh -c 'echo oops >&2; exit 3'`)
	if err != nil || res.ExitCode != 3 || res.Stderr != "oops\n" {
		t.Errorf("Run(exit 3) = %+v, %v", res, err)
	}
	content := []byte("line 1\nbinary \x00\xff\n")
	if err := s.Files().Write(ctx, "test file.txt", content); err != nil {
		t.Fatalf("Write: %v", err)
	}
	got, err := s.Read(ctx, "test file.txt")
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("Read = %q, %v", got, err)
	}
	entries, err := s.List(ctx, ".")
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	i := slices.IndexFunc(entries, func(e FileEntry) bool { return e.Name == "test file.txt" })
	if i < 0 || entries[i].Size != int64(len(content)) || entries[i].Type != FileTypeFile || entries[i].ModTime.IsZero() {
		t.Errorf("List = %+v", entries)
	}
	for path, want := range map[string]bool{"test file.txt": true, "nope.txt": false} {
		if ok, err := s.Exists(ctx, path); err != nil || ok != want {
			t.Errorf("Exists(%q) = %v, %v", path, ok, err)
		}
	}
	if _, err := s.Read(ctx, "nope.txt"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Read(missing) = %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, "test file.txt", false); !errors.Is(err, ErrUnsupportedByRuntime) {
		t.Errorf("legacy Delete = %v", err)
	}
}

// exerciseSandboxd runs the sandboxd-runtime operations.
func exerciseSandboxd(t *testing.T, s *Sandbox) {
	t.Helper()
	ctx := testCtx(t)
	if err := s.Write(ctx, "dir/sub/data.bin", []byte{1, 2, 3}); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if got, err := s.Read(ctx, "dir/sub/data.bin"); err != nil || !bytes.Equal(got, []byte{1, 2, 3}) {
		t.Fatalf("Read = %v, %v", got, err)
	}
	entries, err := s.List(ctx, "dir/sub")
	if err != nil || len(entries) != 1 || entries[0].Name != "data.bin" || entries[0].Mode != "0644" || entries[0].ModTime.IsZero() {
		t.Fatalf("List = %+v, %v", entries, err)
	}
	res, err := s.Run(ctx, "cat dir/sub/data.bin | wc -c; echo err >&2; exit 5")
	if err != nil || strings.TrimSpace(res.Stdout) != "3" || res.Stderr != "err\n" || res.ExitCode != 5 {
		t.Errorf("Run = %+v, %v", res, err)
	}
	var he *HTTPError
	if err := s.Delete(ctx, "dir", false); !errors.As(err, &he) || he.Code != "CONFLICT" {
		t.Errorf("Delete(non-empty dir) = %v, want CONFLICT", err)
	}
	if err := s.Files().Delete(ctx, "dir", true); err != nil {
		t.Fatalf("Delete recursive: %v", err)
	}
	if ok, err := s.Exists(ctx, "dir"); err != nil || ok {
		t.Errorf("Exists after delete = %v, %v", ok, err)
	}
	if _, err := s.Read(ctx, "../etc/passwd"); !errors.As(err, &he) || he.StatusCode != http.StatusForbidden {
		t.Errorf("read outside the workspace = %v, want 403", err)
	}
}

// exerciseProcess streams a process: stdin in, stdout out, a signal.
func exerciseProcess(t *testing.T, s *Sandbox) {
	t.Helper()
	var out, errOut syncBuffer
	p, err := s.Start(testCtx(t), []string{"sh", "-c", "tr a-z A-Z; echo done >&2"},
		&ProcessOptions{Stdout: &out, Stderr: &errOut, Env: map[string]string{"X": "1"}})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if _, err := p.Stdin().Write([]byte("hello, stream\n")); err != nil {
		t.Fatalf("stdin: %v", err)
	}
	if err := p.Stdin().Close(); err != nil {
		t.Fatalf("stdin close: %v", err)
	}
	code, err := p.Wait()
	if err != nil || code != 0 || out.String() != "HELLO, STREAM\n" || errOut.String() != "done\n" {
		t.Fatalf("process: code %d err %v stdout %q stderr %q", code, err, out.String(), errOut.String())
	}

	sleeper, err := s.Start(testCtx(t), []string{"sleep", "300"}, nil)
	if err != nil {
		t.Fatalf("Start sleep: %v", err)
	}
	if err := sleeper.Signal(SignalTerminate); err != nil {
		t.Fatalf("Signal: %v", err)
	}
	if code, err := sleeper.Wait(); err != nil || code == 0 {
		t.Errorf("signalled process: code %d, err %v", code, err)
	}
}

// TestIntegrationRouterURL: Options.APIURL = the router's URL (what a
// user gets from their own port-forward or an in-cluster Service URL):
// HTTP with routing headers, gRPC over h2c with routing metadata.
func TestIntegrationRouterURL(t *testing.T) {
	st := sharedStack(t)
	o := stackOptions(st)
	o.APIURL = st.RouterURL
	s := openFromPool(t, o)
	if !strings.HasPrefix(s.PodIP(), "127.") || s.PodName() == "" {
		t.Errorf("pod %q ip %q", s.PodName(), s.PodIP())
	}
	exerciseLegacy(t, s)
	exerciseProcess(t, s)
	closeAndCheckGone(t, st, s)
}

// TestIntegrationSandboxdThroughRouter: the sandboxd runtime through the
// router (an extension: the router reaches sandboxd's 8080 and 9090).
func TestIntegrationSandboxdThroughRouter(t *testing.T) {
	st := sharedStack(t)
	o := stackOptions(st)
	o.APIURL, o.Runtime = st.RouterURL, RuntimeSandboxd
	s := openFromPool(t, o)
	exerciseSandboxd(t, s)
	closeAndCheckGone(t, st, s)
}

// TestIntegrationInCluster: straight to the Pod IP (sandboxd's own
// loopback address here), no router.
func TestIntegrationInCluster(t *testing.T) {
	st := sharedStack(t)
	for _, rt := range []Runtime{RuntimeLegacyPython, RuntimeSandboxd} {
		t.Run(string(rt), func(t *testing.T) {
			o := stackOptions(st)
			o.Connectivity, o.Runtime = ConnectivityInCluster, rt
			s := openFromPool(t, o)
			if rt == RuntimeSandboxd {
				exerciseSandboxd(t, s)
			} else {
				exerciseLegacy(t, s)
			}
			exerciseProcess(t, s)
			closeAndCheckGone(t, st, s)
		})
	}
}

// TestIntegrationRouterTunnel: the default strategy. The SDK finds the
// router Pod through the EndpointSlices of sandbox-router-svc and
// port-forwards to it through the API server (the devstack's API front
// serves pods/portforward, as a kubelet would).
func TestIntegrationRouterTunnel(t *testing.T) {
	st := sharedStack(t)
	cl, err := NewClient(testCtx(t), stackOptions(st))
	if err != nil {
		t.Fatal(err)
	}
	s, err := cl.CreateSandbox(testCtx(t), st.WarmPool, st.Namespace)
	if err != nil {
		t.Fatalf("CreateSandbox: %v", err)
	}
	t.Cleanup(func() { _ = cl.DeleteAll(context.Background()) })
	exerciseLegacy(t, s)
	exerciseProcess(t, s)

	// The tunnel dies: the handle stops being ready, operations say why,
	// and Open reconnects to the same sandbox.
	s.mu.Lock()
	tun := s.conn.strategy.(*routerTunnelStrategy).t
	s.mu.Unlock()
	tun.Close()
	eventually(t, "tunnel death noticed", func() bool { return !s.IsReady() })
	if _, err := s.Run(testCtx(t), "true"); !errors.Is(err, ErrNotReady) || !errors.Is(err, ErrPortForwardDied) {
		t.Errorf("Run on a dead tunnel = %v, want ErrNotReady wrapping ErrPortForwardDied", err)
	}
	claim := s.ClaimName()
	if err := s.Open(testCtx(t)); err != nil {
		t.Fatalf("reconnect: %v", err)
	}
	if s.ClaimName() != claim {
		t.Errorf("reconnect changed the claim")
	}
	if res, err := s.Run(testCtx(t), "echo again"); err != nil || res.Stdout != "again\n" {
		t.Errorf("Run after reconnect = %+v, %v", res, err)
	}

	// A second client finds the claim and attaches to the same sandbox.
	other, err := NewClient(testCtx(t), stackOptions(st))
	if err != nil {
		t.Fatal(err)
	}
	s2, err := other.GetSandbox(testCtx(t), claim, st.Namespace)
	if err != nil || s2.SandboxName() != s.SandboxName() {
		t.Fatalf("GetSandbox = %v, %v", s2, err)
	}
	if got, err := s2.Read(testCtx(t), "test file.txt"); err != nil || len(got) == 0 {
		t.Errorf("Read through the second handle = %q, %v", got, err)
	}
	_ = s2.Disconnect(testCtx(t))
	closeAndCheckGone(t, st, s)
}

// TestIntegrationPodTunnel: Runtime sandboxd without APIURL port-forwards
// to the sandbox Pod's 8080 and 9090 (the published SDK's sandboxd path).
func TestIntegrationPodTunnel(t *testing.T) {
	st := sharedStack(t)
	o := stackOptions(st)
	o.Runtime = RuntimeSandboxd
	s := openFromPool(t, o)
	exerciseSandboxd(t, s)
	exerciseProcess(t, s)
	closeAndCheckGone(t, st, s)
}

// TestIntegrationGateway: Gateway mode. A Gateway object (its CRD
// installed here) advertises 127.0.0.1; since the router cannot listen on
// port 80 here, the test's HTTPTransport maps 127.0.0.1:80 to the router,
// the way a real Gateway forwards to the router Service. gRPC has no such
// hook, so only HTTP operations are exercised.
func TestIntegrationGateway(t *testing.T) {
	st := sharedStack(t)
	installStackGatewayCRD(t, st)
	gw := &unstructured.Unstructured{}
	gw.SetGroupVersionKind(schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "Gateway"})
	gw.SetNamespace(st.Namespace)
	gw.SetName("sandbox-gateway")
	gw.Object["spec"] = map[string]any{"gatewayClassName": "devstack"}
	gw.Object["status"] = map[string]any{"addresses": []any{map[string]any{"type": "IPAddress", "value": "127.0.0.1"}}}
	if err := st.Client.Create(testCtx(t), gw); err != nil {
		t.Fatal(err)
	}
	routerAddr := strings.TrimPrefix(st.RouterURL, "http://")
	var d net.Dialer
	o := stackOptions(st)
	o.GatewayName, o.GatewayNamespace = "sandbox-gateway", st.Namespace
	o.HTTPTransport = &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr == "127.0.0.1:80" {
			addr = routerAddr
		}
		return d.DialContext(ctx, network, addr)
	}}
	s := openFromPool(t, o)
	exerciseLegacy(t, s)
	closeAndCheckGone(t, st, s)
}

func installStackGatewayCRD(t *testing.T, st *devstack.Stack) {
	t.Helper()
	if err := st.Client.Create(testCtx(t), gatewayCRD()); err != nil {
		t.Fatalf("creating Gateway CRD: %v", err)
	}
	eventually(t, "Gateway CRD served", func() bool {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "GatewayList"})
		return st.Client.List(context.Background(), l) == nil
	})
}
