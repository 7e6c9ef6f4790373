package integration

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/clientcmd"

	"sigs.k8s.io/agent-sandbox/internal/router"
	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// TestRouterStartedDuringAnAPIServerOutage: a router whose API server is
// away when it starts (a node restart brings both up together) waits for
// it, its liveness probe answering and its readiness not, and then picks
// its mode from a real access review. The identity here has no rights, so
// the right outcome is the reduced mode, ready at once. Without the wait
// the failed review was taken for the full mode, the initial LIST was then
// forbidden, and the router exited after a minute into the kubelet's
// backoff.
func TestRouterStartedDuringAnAPIServerOutage(t *testing.T) {
	testenv.SkipShort(t)
	kcPath := noRightsKubeconfig(t)
	kc, err := clientcmd.LoadFromFile(kcPath)
	if err != nil {
		t.Fatal(err)
	}
	front := freeAddr(t) // nothing listens there yet: the outage
	var apiHost string
	for _, c := range kc.Clusters {
		u, err := url.Parse(c.Server)
		if err != nil {
			t.Fatal(err)
		}
		apiHost = u.Host
		c.Server = u.Scheme + "://" + front
	}
	if err := clientcmd.WriteToFile(*kc, kcPath); err != nil {
		t.Fatal(err)
	}

	proxy, probes := freeAddr(t), freeAddr(t)
	cfg, err := router.ParseConfig([]string{"--http-bind-address=" + proxy, "--metrics-bind-address=",
		"--health-probe-bind-address=" + probes, "--kubeconfig=" + kcPath, "--access-log=false",
		"--shutdown-timeout=2s"}, func(string) string { return "" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- router.Run(ctx, cfg, logr.Discard(), router.BuildInfo{}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("router: %v", err)
		}
	})
	code := func(u string) int {
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(u)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	exited := func() {
		t.Helper()
		select {
		case err := <-done:
			done <- err // for the cleanup
			t.Fatalf("router exited during the outage: %v", err)
		default:
		}
	}

	eventually(t, "liveness while the API server is away", func() bool {
		exited()
		return code("http://"+probes+"/healthz") == http.StatusOK
	})
	if got := code("http://" + probes + "/readyz"); got != http.StatusServiceUnavailable {
		t.Fatalf("/readyz while the API server is away = %d, want 503", got)
	}

	l, err := net.Listen("tcp", front) // the API server comes back
	if err != nil {
		t.Fatal(err)
	}
	testenv.TCPForwarder(t, l, apiHost)
	eventually(t, "readiness after the API server's return", func() bool {
		exited()
		return code("http://"+probes+"/readyz") == http.StatusOK
	})
	resp, err := http.Get("http://" + proxy + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	if body := readBody(t, resp); !strings.Contains(body, `"mode":"reduced"`) || !strings.Contains(body, "list agents.x-k8s.io/sandboxes") {
		t.Fatalf("/healthz after the outage: %d %s, want the reduced mode for missing rights", resp.StatusCode, body)
	}
}
