package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/router"
	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// portForwardServers runs in the sandbox's second container (same gVisor
// sandbox, same network stack): a raw TCP echo on 7000 that answers a
// half-close with its own, and an HTTP server on 7001.
const portForwardServers = `
import http.server, socket, threading
def echo(c):
    with c:
        while True:
            b = c.recv(65536)
            if not b:
                break
            c.sendall(b)
        c.shutdown(socket.SHUT_WR)
srv = socket.create_server(("", 7000))
def accept():
    while True:
        c, _ = srv.accept()
        threading.Thread(target=echo, args=(c,), daemon=True).start()
threading.Thread(target=accept, daemon=True).start()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = ("hello from the gVisor sandbox, path " + self.path + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
http.server.ThreadingHTTPServer(("", 7001), H).serve_forever()
`

// TestPortForwardGVisor (issue 20 item 5): `agent-sandbox port-forward`
// reaches an HTTP server and a raw TCP echo server inside a gVisor sandbox,
// where `kubectl port-forward` cannot (gVisor's netstack is not the pod
// network namespace's). HTTP goes the default way, through the in-cluster
// sandbox-router. Raw TCP (--tcp) goes through a router built from this
// source tree, run on the node with the cluster's kubeconfig and reached
// with --router-url, so the test covers the tunnel before the router image
// is rebuilt; it resolves, authorizes and dials exactly as in the cluster.
func TestPortForwardGVisor(t *testing.T) {
	c := ensureController(t)
	ns := exampleNamespace(t, c, "e2e-portfwd")
	bin := buildCLI(t)
	routerURL := hostRouter(t, ns)

	sb := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pf"}}
	sb.Spec.PodTemplate.Spec = corev1.PodSpec{
		RuntimeClassName:              ptr.To("gvisor"),
		TerminationGracePeriodSeconds: ptr.To[int64](1),
		Containers: []corev1.Container{{
			Name: "runtime", Image: "localhost/agent-sandbox/python-runtime:dev", ImagePullPolicy: corev1.PullIfNotPresent,
			Ports: []corev1.ContainerPort{{Name: "runtime", ContainerPort: 8888}, {Name: "api", ContainerPort: 8080}},
			ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
				HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8888)}}},
		}, {
			Name: "servers", Image: "localhost/agent-sandbox/python-runtime:dev", ImagePullPolicy: corev1.PullIfNotPresent,
			Command: []string{"/usr/bin/python3", "-c", portForwardServers},
			Ports:   []corev1.ContainerPort{{Name: "echo", ContainerPort: 7000}, {Name: "web", ContainerPort: 7001}},
			ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
				TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(7000)}}},
		}},
	}
	if err := c.Create(context.Background(), sb); err != nil {
		t.Fatalf("creating sandbox: %v", err)
	}
	waitExampleSandbox(t, c, ns, "pf", 3*time.Minute)

	// HTTP, the default mode, through the in-cluster router.
	web := startPortForward(t, bin, "-n", ns, "port-forward", "pf", "0:7001")
	body := forwardGet(t, "http://"+web+"/via-http-mode")
	if body != "hello from the gVisor sandbox, path /via-http-mode\n" {
		t.Errorf("HTTP port-forward answered %q", body)
	}

	// Raw TCP to the echo server.
	echo := startPortForward(t, bin, "-n", ns, "--router-url", routerURL, "port-forward", "--tcp", "pf", "0:7000")
	conn, err := net.DialTimeout("tcp", echo, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Minute))
	br := bufio.NewReader(conn)
	for _, line := range []string{"ping\n", "second line\n"} {
		if _, err := io.WriteString(conn, line); err != nil {
			t.Fatal(err)
		}
		got, err := br.ReadString('\n')
		if err != nil || got != line {
			t.Fatalf("echo of %q: %q %v", line, got, err)
		}
	}
	// 8 MiB both ways at once, then a half-close: the echo's own
	// shutdown must come back as EOF after the last byte.
	data := make([]byte, 8<<20)
	_, _ = rand.Read(data)
	want := sha256.Sum256(data)
	werr := make(chan error, 1)
	go func() {
		_, err := conn.Write(data)
		if err == nil {
			err = conn.(*net.TCPConn).CloseWrite()
		}
		werr <- err
	}()
	h := sha256.New()
	n, err := io.Copy(h, br)
	if err != nil {
		t.Fatalf("reading the echo after %d bytes: %v", n, err)
	}
	if err := <-werr; err != nil {
		t.Fatalf("writing: %v", err)
	}
	if n != int64(len(data)) || !bytes.Equal(h.Sum(nil), want[:]) {
		t.Fatalf("echoed %d of %d bytes, digest equal: %v", n, len(data), bytes.Equal(h.Sum(nil), want[:]))
	}

	// The HTTP server through a raw tunnel too: any protocol goes.
	webTCP := startPortForward(t, bin, "-n", ns, "--router-url", routerURL, "port-forward", "--tcp", "pf", "0:7001")
	if body := forwardGet(t, "http://"+webTCP+"/via-tcp-mode"); body != "hello from the gVisor sandbox, path /via-tcp-mode\n" {
		t.Errorf("HTTP over the TCP tunnel answered %q", body)
	}
}

// buildCLI builds agent-sandbox from this tree.
func buildCLI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "agent-sandbox")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/agent-sandbox")
	cmd.Dir = repoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the CLI: %v\n%s", err, out)
	}
	return bin
}

// hostRouter runs the sandbox-router of this tree on the node (in this
// process), caching namespace ns, and returns its URL.
func hostRouter(t *testing.T, ns string) string {
	t.Helper()
	free := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	proxy, probes := free(), free()
	cfg, err := router.ParseConfig([]string{
		"--http-bind-address=" + proxy, "--metrics-bind-address=" + free(), "--health-probe-bind-address=" + probes,
		"--kubeconfig=" + cluster.KubeconfigPath(), "--cache-namespace=" + ns, "--access-log=false", "--shutdown-timeout=2s",
	}, func(string) string { return "" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- router.Run(ctx, cfg, logr.Discard(), router.BuildInfo{GitVersion: "e2e"}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("router: %v", err)
		}
	})
	deadline := time.Now().Add(time.Minute)
	for {
		if resp, err := http.Get("http://" + probes + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return "http://" + proxy
			}
		}
		select {
		case err := <-done:
			t.Fatalf("router exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the host router never became ready")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var forwardingRE = regexp.MustCompile(`Forwarding from (127\.0\.0\.1:\d+) -> `)

// startPortForward runs the CLI until the test ends and returns the local
// address it printed.
func startPortForward(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+cluster.KubeconfigPath())
	var out, errOut testenv.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited //nolint:errcheck // killed: Wait's error only says so
		if t.Failed() {
			t.Logf("agent-sandbox %s stderr:\n%s", strings.Join(args, " "), errOut.String())
		}
	})
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if m := forwardingRE.FindStringSubmatch(out.String()); m != nil {
			return m[1]
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("agent-sandbox %s exited (%v):\n%s", strings.Join(args, " "), err, errOut.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent-sandbox %s printed no Forwarding line:\n%s", strings.Join(args, " "), errOut.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// forwardGet GETs url through a port-forward and returns the body of a 200.
func forwardGet(t *testing.T, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return httpGet(ctx, t, url)
}
