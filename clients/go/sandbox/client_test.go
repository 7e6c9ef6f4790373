package sandbox

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func TestClientRegistry(t *testing.T) {
	c := watchClient(t)
	ns := newNamespace(t, c)
	startBinder(t, c, ns, true, false)
	_, url := okServer(t)
	o := lifecycleOptions(t, ns, url)
	o.WarmPoolName = ""
	cl, err := NewClient(testCtx(t), o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateSandbox(testCtx(t), "", ns); err == nil {
		t.Error("empty warm pool accepted")
	}
	if _, err := cl.CreateSandbox(testCtx(t), "Bad_Pool", ns); err == nil {
		t.Error("invalid warm pool accepted")
	}
	a, err := cl.CreateSandbox(testCtx(t), "pool", "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := cl.CreateSandbox(testCtx(t), "pool", ns)
	if err != nil {
		t.Fatal(err)
	}
	keys := cl.ListActiveSandboxes()
	if len(keys) != 2 {
		t.Fatalf("active = %v", keys)
	}
	all, err := cl.ListAllSandboxes(testCtx(t), ns)
	if err != nil || len(all) != 2 {
		t.Fatalf("all = %v, %v", all, err)
	}

	// Cached: the same handle.
	got, err := cl.GetSandbox(testCtx(t), a.ClaimName(), ns)
	if err != nil || got != a {
		t.Fatalf("GetSandbox = %p, %v; want the tracked %p", got, err, a)
	}
	// A not-ready tracked handle is pruned from the active list and
	// re-attached by GetSandbox.
	if err := b.Disconnect(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if keys := cl.ListActiveSandboxes(); len(keys) != 1 || keys[0].ClaimName != a.ClaimName() {
		t.Errorf("active after disconnect = %v", keys)
	}
	b2, err := cl.GetSandbox(testCtx(t), b.ClaimName(), ns)
	if err != nil || b2 == b || !b2.IsReady() || b2.SandboxName() != b.SandboxName() {
		t.Fatalf("re-attach = %v, %v", b2, err)
	}
	if _, err := cl.GetSandbox(testCtx(t), "no-such-claim", ns); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetSandbox(missing) = %v, want ErrNotFound", err)
	}

	// A second client racing on the same claim: every caller gets one
	// shared handle and the claim survives.
	other, err := NewClient(testCtx(t), o)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	handles := make([]*Sandbox, 4)
	for i := range handles {
		wg.Go(func() {
			h, err := other.GetSandbox(testCtx(t), a.ClaimName(), ns)
			if err != nil {
				t.Errorf("racing GetSandbox: %v", err)
			}
			handles[i] = h
		})
	}
	wg.Wait()
	for _, h := range handles[1:] {
		if h != handles[0] {
			t.Errorf("racing GetSandbox returned different handles")
		}
	}
	if !claimExists(t, c, ns, a.ClaimName()) || !a.IsReady() {
		t.Fatal("race lost the shared claim")
	}

	bClaim := b2.ClaimName()
	if err := cl.DeleteSandbox(testCtx(t), bClaim, ns); err != nil {
		t.Fatal(err)
	}
	if claimExists(t, c, ns, bClaim) {
		t.Error("DeleteSandbox left the claim")
	}
	if err := cl.DeleteSandbox(testCtx(t), "already-gone", ns); err != nil {
		t.Errorf("DeleteSandbox(missing) = %v", err)
	}
	if err := cl.DeleteAll(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if n := len(listClaims(t, c, ns)); n != 0 {
		t.Errorf("%d claims after DeleteAll", n)
	}

	stop := cl.EnableAutoCleanup()
	if again := cl.EnableAutoCleanup(); again == nil {
		t.Error("second EnableAutoCleanup returned nil")
	}
	stop()
	stop()
	cl.EnableAutoCleanup()()
}

func TestRouterPodFromEndpointSlices(t *testing.T) {
	c := watchClient(t)
	ns := newNamespace(t, c)
	h, err := NewK8sHelper(sharedEnv(t).Config, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := findRouterPod(testCtx(t), h, ns); !errors.Is(err, ErrNotReady) {
		t.Errorf("no router = %v, want ErrNotReady", err)
	}
	slice := func(name string, eps ...discoveryv1.Endpoint) {
		s := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: RouterServiceName}},
			AddressType: discoveryv1.AddressTypeIPv4, Endpoints: eps,
		}
		if err := c.Create(testCtx(t), s); err != nil {
			t.Fatal(err)
		}
	}
	ep := func(ip, pod string, ready bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod}}
	}
	slice("a", ep("10.0.0.1", "router-starting", false))
	if _, err := findRouterPod(testCtx(t), h, ns); !errors.Is(err, ErrNotReady) {
		t.Errorf("only unready endpoints = %v", err)
	}
	slice("b", ep("10.0.0.2", "router-ready", true))
	if pod, err := findRouterPod(testCtx(t), h, ns); err != nil || pod != "router-ready" {
		t.Errorf("findRouterPod = %q, %v", pod, err)
	}
}

// installGatewayCRD installs a minimal gateway.networking.k8s.io/v1
// Gateway CRD (schema-less) into the test apiserver once.
var gatewayCRDOnce sync.Once

func installGatewayCRD(t *testing.T) {
	t.Helper()
	e := sharedEnv(t)
	gatewayCRDOnce.Do(func() {
		crd := gatewayCRD()
		if err := e.Client.Create(context.Background(), crd); err != nil {
			t.Fatalf("creating Gateway CRD: %v", err)
		}
		c := watchClient(t)
		eventually(t, "Gateway CRD served", func() bool {
			l := &unstructured.UnstructuredList{}
			l.SetGroupVersionKind(schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "GatewayList"})
			return c.List(context.Background(), l) == nil
		})
	})
}

func setGatewayAddress(t *testing.T, c client.Client, ns, name, addr string) {
	t.Helper()
	gw := &unstructured.Unstructured{}
	gw.SetGroupVersionKind(schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "Gateway"})
	err := c.Get(testCtx(t), client.ObjectKey{Namespace: ns, Name: name}, gw)
	if err != nil {
		gw.SetNamespace(ns)
		gw.SetName(name)
		gw.Object["spec"] = map[string]any{"gatewayClassName": "test"}
		if addr != "" {
			gw.Object["status"] = map[string]any{"addresses": []any{map[string]any{"type": "IPAddress", "value": addr}}}
		}
		if err := c.Create(testCtx(t), gw); err != nil {
			t.Fatal(err)
		}
		return
	}
	gw.Object["status"] = map[string]any{"addresses": []any{map[string]any{"type": "IPAddress", "value": addr}}}
	if err := c.Update(testCtx(t), gw); err != nil {
		t.Fatal(err)
	}
}

func TestGatewayDiscovery(t *testing.T) {
	installGatewayCRD(t)
	c := watchClient(t)
	ns := newNamespace(t, c)
	h, err := NewK8sHelper(sharedEnv(t).Config, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	newGW := func(name string, timeout time.Duration) *gatewayStrategy {
		return &gatewayStrategy{h: h, name: name, namespace: ns, scheme: "http", timeout: timeout, log: discardLogger()}
	}

	// The gateway appears without an address, then with a rejected one,
	// then with a good one: discovery waits through all of it.
	setGatewayAddress(t, c, ns, "gw", "")
	got := make(chan string, 1)
	errc := make(chan error, 1)
	go func() {
		u, err := newGW("gw", time.Minute).Connect(testCtx(t))
		got <- u
		errc <- err
	}()
	setGatewayAddress(t, c, ns, "gw", "evil.example/path")
	setGatewayAddress(t, c, ns, "gw", "2001:db8::7")
	if u, err := <-got, <-errc; err != nil || u != "http://[2001:db8::7]" {
		t.Fatalf("Connect = %q, %v", u, err)
	}

	// Listed first: an address already present is found without a watch
	// event.
	setGatewayAddress(t, c, ns, "gw2", "10.0.0.9")
	if u, err := newGW("gw2", time.Minute).Connect(testCtx(t)); err != nil || u != "http://10.0.0.9" {
		t.Fatalf("Connect(gw2) = %q, %v", u, err)
	}

	// Deleted while waiting. The deletion is made after discovery listed
	// the gateway, so the watch (from the list's resourceVersion) must
	// report it.
	setGatewayAddress(t, c, ns, "gw3", "")
	listed := make(chan struct{})
	var once sync.Once
	cfg := rest.CopyConfig(sharedEnv(t).Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/gateways") && r.URL.Query().Get("watch") == "" {
				once.Do(func() { close(listed) })
			}
			return resp, err
		})
	}
	lh, err := NewK8sHelper(cfg, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		g := newGW("gw3", time.Minute)
		g.h = lh
		_, err := g.Connect(testCtx(t))
		errc <- err
	}()
	<-listed
	gw := &unstructured.Unstructured{}
	gw.SetGroupVersionKind(schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "Gateway"})
	gw.SetNamespace(ns)
	gw.SetName("gw3")
	if err := c.Delete(testCtx(t), gw); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ErrGatewayDeleted) {
		t.Fatalf("Connect(deleted) = %v, want ErrGatewayDeleted", err)
	}

	// Timeout, and the claim of a handle waiting for it is cleaned up.
	startBinder(t, c, ns, true, false)
	o := lifecycleOptions(t, ns, "")
	o.APIURL, o.GatewayName, o.GatewayNamespace, o.GatewayReadyTimeout = "", "never", ns, time.Second
	s, err := New(testCtx(t), o)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Open(testCtx(t)); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Open via a gateway without address = %v, want ErrTimeout", err)
	}
	if n := len(listClaims(t, c, ns)); n != 0 {
		t.Errorf("%d claims left after the gateway timeout", n)
	}

	// A transport failure on reconnect keeps the claim: Open again later.
	setGatewayAddress(t, c, ns, "gwr", "10.0.0.10")
	o.GatewayName = "gwr"
	s, err = New(testCtx(t), o)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Open(testCtx(t)); err != nil {
		t.Fatalf("Open via gateway: %v", err)
	}
	claim := s.ClaimName()
	if err := s.Disconnect(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	setGatewayAddress(t, c, ns, "gwr", "bad/address")
	if err := s.Open(testCtx(t)); !errors.Is(err, ErrTimeout) {
		t.Fatalf("reconnect without a usable gateway address = %v, want ErrTimeout", err)
	}
	if s.ClaimName() != claim || !claimExists(t, c, ns, claim) {
		t.Fatal("failed reconnect dropped the claim")
	}
	setGatewayAddress(t, c, ns, "gwr", "10.0.0.11")
	if err := s.Open(testCtx(t)); err != nil {
		t.Fatalf("reconnect: %v", err)
	}
	if err := s.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}

func TestTracing(t *testing.T) {
	c := watchClient(t)
	ns := newNamespace(t, c)
	startBinder(t, c, ns, true, false)
	_, srv := newRecorder(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/execute" {
			writeJSON(w, 200, `{"stdout":"","stderr":"","exit_code":4}`)
			return
		}
		writeJSON(w, 404, `{"message":"File not found"}`)
	})
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	o := lifecycleOptions(t, ns, srv.URL)
	o.TracerProvider = tp
	o.TraceServiceName = "my-agent"
	s, _ := New(testCtx(t), o)
	if err := s.Open(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(testCtx(t), "ls -l /"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(testCtx(t), "missing.txt"); err == nil {
		t.Fatal("Read of a missing file succeeded")
	}
	if err := s.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, sp := range sr.Ended() {
		spans[sp.Name()] = sp
	}
	life, ok := spans["my-agent.lifecycle"]
	if !ok {
		t.Fatalf("no lifecycle span in %v", keys(spans))
	}
	for _, name := range []string{"my-agent.create_claim", "my-agent.resolve_sandbox_name", "my-agent.wait_for_sandbox_ready", "my-agent.connect", "my-agent.run", "my-agent.read"} {
		sp, ok := spans[name]
		if !ok {
			t.Errorf("no span %s in %v", name, keys(spans))
			continue
		}
		if sp.Parent().SpanID() != life.SpanContext().SpanID() {
			t.Errorf("%s is not a child of the lifecycle span", name)
		}
	}
	attrs := func(sp sdktrace.ReadOnlySpan) map[string]string {
		m := map[string]string{}
		for _, kv := range sp.Attributes() {
			m[string(kv.Key)] = kv.Value.String()
		}
		return m
	}
	if a := attrs(spans["my-agent.run"]); a["sandbox.command.executable"] != "ls" || a["sandbox.exit_code"] != "4" || len(a["sandbox.request_id"]) != 16 {
		t.Errorf("run attributes = %v", a)
	}
	read := spans["my-agent.read"]
	if a := attrs(read); a["sandbox.file.path"] != "missing.txt" || read.Status().Code.String() != "Error" || len(read.Events()) == 0 {
		t.Errorf("read span: attrs %v status %v events %d", a, read.Status(), len(read.Events()))
	}
	if tp.Tracer("x") == nil || scopeName(life) != "my_agent" {
		t.Errorf("tracer scope = %q", scopeName(life))
	}

	// Without a provider nothing breaks (global no-op).
	o.TracerProvider = nil
	s2, _ := New(testCtx(t), o)
	if err := s2.Open(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	_ = s2.Close(testCtx(t))
}

func keys(m map[string]sdktrace.ReadOnlySpan) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func scopeName(sp sdktrace.ReadOnlySpan) string { return sp.InstrumentationScope().Name }

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// gatewayCRD is a minimal, schema-less gateway.networking.k8s.io/v1
// Gateway CRD: enough for discovery tests.
func gatewayCRD() *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{
			Name: "gateways.gateway.networking.k8s.io",
			// Required for *.k8s.io groups; this test CRD only
			// mimics the real one's shape.
			Annotations: map[string]string{"api-approved.kubernetes.io": "unapproved, test-only stand-in"},
		},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "gateway.networking.k8s.io",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "gateways", Singular: "gateway", Kind: "Gateway", ListKind: "GatewayList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true),
				}},
			}},
		},
	}
}
