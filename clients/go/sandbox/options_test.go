package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

func TestDefaults(t *testing.T) {
	o := Options{}.withDefaults()
	if o.Runtime != RuntimeLegacyPython || o.Connectivity != ConnectivityPortForward || o.Namespace != "default" ||
		o.GatewayNamespace != "default" || o.GatewayScheme != "http" || o.ServerPort != 8888 ||
		o.SandboxdRESTPort != 8080 || o.SandboxdGRPCPort != 9090 || o.SandboxReadyTimeout != 180*time.Second ||
		o.GatewayReadyTimeout != 180*time.Second || o.PortForwardReadyTimeout != 30*time.Second ||
		o.CleanupTimeout != 30*time.Second || o.RequestTimeout != 180*time.Second ||
		o.PerAttemptTimeout != 60*time.Second || o.MaxDownloadSize != 256<<20 || o.MaxUploadSize != 256<<20 ||
		o.TraceServiceName != "sandbox-client" || o.Logger.GetSink() == nil {
		t.Errorf("defaults = %+v", o)
	}
	if err := o.validate(); err != nil {
		t.Errorf("defaults invalid: %v", err)
	}
}

func TestValidation(t *testing.T) {
	bad := map[string]Options{
		"sandboxd with gateway": {Runtime: RuntimeSandboxd, GatewayName: "gw"},
		"equal sandboxd ports":  {Runtime: RuntimeSandboxd, SandboxdRESTPort: 9000, SandboxdGRPCPort: 9000},
		"bad runtime":           {Runtime: "python"},
		"bad namespace":         {Namespace: "Team_A"},
		"bad gateway namespace": {GatewayNamespace: "a.b"},
		"bad gateway name":      {GatewayName: "GW!"},
		"bad scheme":            {GatewayScheme: "ftp"},
		"api url scheme":        {APIURL: "ftp://x"},
		"api url no host":       {APIURL: "http://"},
		"bad warm pool":         {WarmPoolName: "Pool_1"},
		"port range":            {ServerPort: 70000},
		"negative timeout":      {RequestTimeout: -time.Second},
		"negative size":         {MaxUploadSize: -1},
		"in-cluster with url":   {Connectivity: ConnectivityInCluster, APIURL: "http://x"},
		"bad connectivity":      {Connectivity: "carrier-pigeon"},
		"bad env name":          {Env: []EnvVar{{Name: "A=B", Value: "x"}}},
		"empty env name":        {Env: []EnvVar{{Value: "x"}}},
	}
	for name, o := range bad {
		o = o.withDefaults()
		if err := o.validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := validateWarmPoolName(""); err == nil {
		t.Error("empty warm pool name accepted")
	}
	if _, err := New(context.Background(), Options{Runtime: RuntimeSandboxd, GatewayName: "gw", K8sHelper: &K8sHelper{}}); err == nil {
		t.Error("New accepted sandboxd with a gateway")
	}
}

func TestModeSelection(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want mode
	}{
		{Options{}, modeRouterTunnel},
		{Options{APIURL: "http://r", GatewayName: "gw"}, modeDirect},
		{Options{GatewayName: "gw"}, modeGateway},
		{Options{Runtime: RuntimeSandboxd}, modePodTunnel},
		{Options{Runtime: RuntimeSandboxd, APIURL: "http://r"}, modeDirect},
		{Options{Connectivity: ConnectivityInCluster}, modeInCluster},
		{Options{Connectivity: ConnectivityInCluster, Runtime: RuntimeSandboxd}, modeInCluster},
	} {
		o := tc.o.withDefaults()
		if got := o.selectMode(); got != tc.want {
			t.Errorf("%+v: mode %s, want %s", tc.o, got, tc.want)
		}
	}
}

func TestGatewayAddressValidation(t *testing.T) {
	good := []string{"10.0.0.1", "2001:db8::1", "gw.example.com", "my-gw", "a.b-c.d1"}
	badAddrs := []string{
		"", "evil.com/path", "a?b", "a#b", "user@host", "-lead", "trail-", ".lead", "trail.",
		"a..b", "under_score", "sp ace", "fe80::1%eth0", strings.Repeat("a", 64) + ".com",
		"2130706433", "0x7f.0.0.1", "10.0.0.0x1", "1.2.3.4.5", "127.1", "host:8080",
	}
	for _, a := range good {
		if err := validateGatewayAddress(a); err != nil {
			t.Errorf("validateGatewayAddress(%q) = %v", a, err)
		}
	}
	for _, a := range badAddrs {
		if err := validateGatewayAddress(a); err == nil {
			t.Errorf("validateGatewayAddress(%q) accepted", a)
		}
	}
	if got := gatewayURL("https", "2001:db8::1"); got != "https://[2001:db8::1]" {
		t.Errorf("gatewayURL IPv6 = %q", got)
	}
	if got := gatewayURL("http", "gw.example.com"); got != "http://gw.example.com" {
		t.Errorf("gatewayURL = %q", got)
	}
}

func TestPickPodIP(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want string
	}{
		{nil, ""},
		{[]string{"fd00::1", "10.0.0.2"}, "10.0.0.2"},
		{[]string{"FD00:0:0::1"}, "fd00::1"},
		{[]string{"::ffff:10.1.1.1"}, "10.1.1.1"},
		{[]string{"junk", " 10.0.0.3 "}, "10.0.0.3"},
		{[]string{"fe80::1%eth0", "fd00::2"}, "fd00::2"},
	} {
		if got := pickPodIP(tc.in); got != tc.want {
			t.Errorf("pickPodIP(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestBuildClaim(t *testing.T) {
	now := time.Date(2026, 3, 4, 5, 6, 7, 8, time.FixedZone("x", 3600))
	c := buildClaim(context.Background(), "ns", "pool", nil, now)
	if c.GenerateName != "sandbox-claim-" || c.Namespace != "ns" || c.Spec.WarmPoolRef.Name != "pool" ||
		c.Labels["agents.x-k8s.io/created-by"] != "go-client" {
		t.Errorf("claim = %+v", c.ObjectMeta)
	}
	if got := c.Annotations["agents.x-k8s.io/client-first-requested-at"]; got != "2026-03-04T04:06:07.000000008Z" {
		t.Errorf("timestamp = %q", got)
	}
	if _, ok := c.Annotations["opentelemetry.io/trace-context"]; ok {
		t.Error("trace context without a span")
	}
	preset := buildClaim(context.Background(), "ns", "pool", map[string]string{"agents.x-k8s.io/client-first-requested-at": "earlier"}, now)
	if preset.Annotations["agents.x-k8s.io/client-first-requested-at"] != "earlier" {
		t.Error("preset timestamp overwritten")
	}

	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	ctx, span := tp.Tracer("t").Start(context.Background(), "op")
	defer span.End()
	traced := buildClaim(ctx, "ns", "pool", nil, now)
	var carrier map[string]string
	if err := json.Unmarshal([]byte(traced.Annotations["opentelemetry.io/trace-context"]), &carrier); err != nil {
		t.Fatalf("trace context annotation: %v", err)
	}
	if !strings.Contains(carrier["traceparent"], span.SpanContext().TraceID().String()) {
		t.Errorf("traceparent = %q", carrier["traceparent"])
	}
}

func TestExecutionResultDefaults(t *testing.T) {
	var r ExecutionResult
	if err := json.Unmarshal([]byte(`{"stdout":"x"}`), &r); err != nil || r.ExitCode != -1 || r.Stdout != "x" {
		t.Errorf("r = %+v, %v", r, err)
	}
	if err := json.Unmarshal([]byte(`{"exit_code":0}`), &r); err != nil || r.ExitCode != 0 {
		t.Errorf("r = %+v, %v", r, err)
	}
}

func TestNewTracerProvider(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	tp, err := NewTracerProvider(context.Background(), "svc")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = tp.Shutdown(ctx) // nothing listens there; only construction is under test
}

// EnableAutoCleanup re-raises the signal after cleaning up, so the program
// still dies of it. Checked in a child process, which the signal kills.
func TestAutoCleanupReraisesSignal(t *testing.T) {
	if os.Getenv("SANDBOX_SDK_AUTOCLEANUP_CHILD") == "1" {
		c := &Client{opts: Options{Quiet: true}.withDefaults(), sandboxes: map[Key]*Sandbox{}}
		c.EnableAutoCleanup()
		_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
		time.Sleep(time.Minute)
		os.Exit(3) // not reached: the re-raised SIGTERM kills the process
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAutoCleanupReraisesSignal$")
	cmd.Env = append(os.Environ(), "SANDBOX_SDK_AUTOCLEANUP_CHILD=1")
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("child: %v", err)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Fatalf("child ended with %v, want killed by SIGTERM", ee)
	}
}
