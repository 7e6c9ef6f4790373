package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/images/catalog"
)

// The smoke tests of examples/: each applies the example's manifests with
// kubectl, as its README does, into a namespace of its own, and talks to the
// workload on its gVisor pod.

// exampleImage makes sure the image of an example is in containerd: built
// now when `make images` has not built it yet (root file system cached, a
// few minutes the first time), imported when its archive changed.
func exampleImage(t *testing.T, name string) {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cacheDir := cluster.Config().CacheDir
	path := filepath.Join(cacheDir, "images", name+".tar")
	if _, err := os.Stat(path); err != nil {
		t.Logf("image %s is not built; building it (`make images` does this ahead of time)", name)
		if _, err := catalog.Build(ctx, catalog.Options{ModuleDir: repoRoot(), CacheDir: cacheDir}, name); err != nil {
			t.Fatalf("building image %s: %v", name, err)
		}
	}
	if err := cluster.ImportImages(ctx, path); err != nil {
		t.Fatalf("importing image %s: %v", name, err)
	}
	t.Logf("image %s ready in containerd (%.1fs)", name, time.Since(start).Seconds())
}

// exampleNamespace creates a namespace for one test and deletes it, with
// everything in it, at the end.
func exampleNamespace(t *testing.T, c client.Client, name string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	// A namespace left terminating by an interrupted run must go first.
	waitGone(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := c.Delete(context.Background(), ns); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting namespace %s: %v", name, err)
		}
	})
	return name
}

// kubectlApply applies the YAML files of an example directory.
func kubectlApply(t *testing.T, ns, dir string) {
	t.Helper()
	cmd := exec.Command(cluster.KubectlPath(), "apply", "-n", ns, "-f", filepath.Join(repoRoot(), dir))
	cmd.Env = append(os.Environ(), "KUBECONFIG="+cluster.KubeconfigPath())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl apply -f %s: %v\n%s", dir, err, out)
	}
	t.Logf("kubectl apply -f %s:\n%s", dir, strings.TrimSpace(string(out)))
}

// waitExampleSandbox waits until the Sandbox is Ready, checks that its pod
// runs under gVisor, and deletes both at the end of the test.
func waitExampleSandbox(t *testing.T, c client.Client, ns, name string, timeout time.Duration) string {
	t.Helper()
	key := types.NamespacedName{Namespace: ns, Name: name}
	t.Cleanup(func() {
		sb := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if err := c.Delete(context.Background(), sb); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting sandbox %s: %v", key, err)
		}
		waitGone(t, c, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
	})
	start := time.Now()
	var sb sandboxv1beta1.Sandbox
	for {
		if err := c.Get(context.Background(), key, &sb); err == nil &&
			meta.IsStatusConditionTrue(sb.Status.Conditions, sandboxv1beta1.SandboxConditionReady) && len(sb.Status.PodIPs) > 0 {
			break
		}
		if time.Since(start) > timeout {
			var pod corev1.Pod
			_ = c.Get(context.Background(), key, &pod)
			t.Fatalf("sandbox %s not Ready after %s; conditions %+v; pod status %+v", key, timeout, sb.Status.Conditions, pod.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("sandbox %s Ready %.1fs after apply", key, time.Since(start).Seconds())
	var pod corev1.Pod
	if err := c.Get(context.Background(), key, &pod); err != nil {
		t.Fatal(err)
	}
	if rc := pod.Spec.RuntimeClassName; rc == nil || *rc != "gvisor" {
		t.Errorf("pod %s runs under RuntimeClass %v, want gvisor", key, rc)
	}
	return sb.Status.PodIPs[0]
}

// getJSON fetches url (with optional headers) and decodes a 200 response.
func getJSON(t *testing.T, method, url string, header http.Header, out any) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if header != nil {
		req.Header = header.Clone()
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %s: %s", method, url, resp.Status, body)
	}
	if err := json.Unmarshal(body, out); err != nil {
		t.Fatalf("%s %s: %v: %s", method, url, err, body)
	}
}

// --- Chrome ----------------------------------------------------------------

// cdpConn is a minimal Chrome DevTools Protocol client: numbered commands
// over one WebSocket, events skipped.
type cdpConn struct {
	ws *websocket.Conn
	id int
}

func (c *cdpConn) call(method string, params any) (json.RawMessage, error) {
	c.id++
	id := c.id
	if err := c.ws.WriteJSON(map[string]any{"id": id, "method": method, "params": params}); err != nil {
		return nil, err
	}
	_ = c.ws.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		var msg struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := c.ws.ReadJSON(&msg); err != nil {
			return nil, fmt.Errorf("%s: %w", method, err)
		}
		if msg.ID != id {
			continue
		}
		if msg.Error != nil {
			return nil, fmt.Errorf("%s: %s", method, msg.Error.Message)
		}
		return msg.Result, nil
	}
}

// The chrome example: headless Chromium on gVisor answers the DevTools
// HTTP endpoint and drives a page over the protocol's WebSocket.
func TestExampleChrome(t *testing.T) {
	c := ensureController(t)
	exampleImage(t, "chrome")
	ns := exampleNamespace(t, c, "example-chrome")
	kubectlApply(t, ns, "examples/chrome")
	ip := waitExampleSandbox(t, c, ns, "chrome", 2*time.Minute)
	base := "http://" + ip + ":9222"

	var version struct {
		Browser              string
		WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
	}
	getJSON(t, http.MethodGet, base+"/json/version", nil, &version)
	t.Logf("GET /json/version: Browser %q", version.Browser)
	if !strings.HasPrefix(version.Browser, "HeadlessChrome/") {
		t.Errorf("Browser = %q, want HeadlessChrome/...", version.Browser)
	}
	if !strings.HasPrefix(version.WebSocketDebuggerURL, "ws://"+ip+":9222/devtools/browser/") {
		t.Errorf("webSocketDebuggerUrl = %q, want one on the pod IP and port 9222", version.WebSocketDebuggerURL)
	}

	// A new tab, then navigate it to a data: URL and read the title back.
	start := time.Now()
	var page struct {
		ID                   string `json:"id"`
		WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
	}
	getJSON(t, http.MethodPut, base+"/json/new?about:blank", nil, &page)
	ws, _, err := websocket.DefaultDialer.Dial(page.WebSocketDebuggerURL, nil)
	if err != nil {
		t.Fatalf("dial %s: %v", page.WebSocketDebuggerURL, err)
	}
	defer ws.Close()
	cdp := &cdpConn{ws: ws}
	const title = "Hello from gVisor"
	if _, err := cdp.call("Page.navigate", map[string]string{"url": "data:text/html,<title>" + url.PathEscape(title) + "</title><p>hi</p>"}); err != nil {
		t.Fatal(err)
	}
	var got string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		res, err := cdp.call("Runtime.evaluate", map[string]any{"expression": "document.title", "returnByValue": true})
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Result struct {
				Value string `json:"value"`
			} `json:"result"`
		}
		if err := json.Unmarshal(res, &r); err != nil {
			t.Fatal(err)
		}
		if got = r.Result.Value; got == title {
			break
		}
	}
	if got != title {
		t.Fatalf("document.title = %q, want %q", got, title)
	}
	t.Logf("CDP: Page.navigate + Runtime.evaluate returned title %q (%.2fs)", got, time.Since(start).Seconds())
	if _, err := cdp.call("Page.close", nil); err != nil {
		t.Logf("Page.close: %v", err)
	}
}

// --- JupyterLab --------------------------------------------------------------

// jupyterExecute runs code in a kernel over the Jupyter Server's kernel
// WebSocket (the JSON message format of the Jupyter messaging protocol) and
// returns what it printed to stdout.
func jupyterExecute(t *testing.T, wsURL string, header http.Header, code string) string {
	t.Helper()
	ws, _, err := websocket.DefaultDialer.Dial(wsURL, header)
	if err != nil {
		t.Fatalf("dial %s: %v", wsURL, err)
	}
	defer ws.Close()
	msgID := fmt.Sprintf("e2e-%d", time.Now().UnixNano())
	req := map[string]any{
		"header": map[string]string{
			"msg_id": msgID, "msg_type": "execute_request", "username": "e2e", "session": "e2e-session", "version": "5.3",
		},
		"parent_header": map[string]any{},
		"metadata":      map[string]any{},
		"content": map[string]any{
			"code": code, "silent": false, "store_history": false, "user_expressions": map[string]any{},
			"allow_stdin": false, "stop_on_error": true,
		},
		"channel": "shell",
		"buffers": []any{},
	}
	if err := ws.WriteJSON(req); err != nil {
		t.Fatal(err)
	}
	var stdout strings.Builder
	// The kernel may still be starting: wait for its reply.
	_ = ws.SetReadDeadline(time.Now().Add(90 * time.Second))
	for {
		var msg struct {
			Header struct {
				MsgType string `json:"msg_type"`
			}
			ParentHeader struct {
				MsgID string `json:"msg_id"`
			} `json:"parent_header"`
			Content json.RawMessage
		}
		if err := ws.ReadJSON(&msg); err != nil {
			t.Fatalf("reading kernel messages: %v (stdout so far %q)", err, stdout.String())
		}
		if msg.ParentHeader.MsgID != msgID {
			continue
		}
		switch msg.Header.MsgType {
		case "stream":
			var s struct{ Name, Text string }
			_ = json.Unmarshal(msg.Content, &s)
			if s.Name == "stdout" {
				stdout.WriteString(s.Text)
			}
		case "error":
			t.Fatalf("kernel error: %s", msg.Content)
		case "execute_reply":
			var r struct{ Status string }
			_ = json.Unmarshal(msg.Content, &r)
			if r.Status != "ok" {
				t.Fatalf("execute_reply status %q: %s", r.Status, msg.Content)
			}
			return stdout.String()
		}
	}
}

// The jupyterlab example: JupyterLab on gVisor serves its REST API behind
// the token from the Secret, and a Python kernel runs code inside gVisor.
func TestExampleJupyterLab(t *testing.T) {
	c := ensureController(t)
	exampleImage(t, "jupyterlab")
	ns := exampleNamespace(t, c, "example-jupyterlab")
	kubectlApply(t, ns, "examples/jupyterlab")
	ip := waitExampleSandbox(t, c, ns, "jupyterlab", 3*time.Minute)
	base := "http://" + ip + ":8888"

	var secret corev1.Secret
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "jupyterlab-token"}, &secret); err != nil {
		t.Fatal(err)
	}
	auth := http.Header{"Authorization": {"token " + string(secret.Data["token"])}}

	var version struct{ Version string }
	getJSON(t, http.MethodGet, base+"/api", nil, &version)
	var status struct {
		Started string
		Kernels int
	}
	getJSON(t, http.MethodGet, base+"/api/status", auth, &status)
	t.Logf("GET /api: Jupyter Server %s; GET /api/status: started %s", version.Version, status.Started)
	if version.Version == "" || status.Started == "" {
		t.Errorf("unexpected answers: /api %+v, /api/status %+v", version, status)
	}
	resp, err := http.Get(base + "/api/status")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("GET /api/status without the token: %s, want 403", resp.Status)
	}

	start := time.Now()
	var kernel struct{ ID string }
	getJSON(t, http.MethodPost, base+"/api/kernels", auth, &kernel)
	out := jupyterExecute(t, "ws://"+ip+":8888/api/kernels/"+kernel.ID+"/channels", auth,
		"import os\nprint(6 * 7, os.getuid())\nprint(open('/proc/version').read())")
	t.Logf("kernel %s: started and ran code in %.1fs; printed %q", kernel.ID, time.Since(start).Seconds(), out)
	if !strings.HasPrefix(out, "42 1000\n") {
		t.Errorf("kernel printed %q, want 42 and uid 1000 first", out)
	}
	if !strings.Contains(out, "gVisor") && !strings.Contains(out, "-gvisor") {
		t.Errorf("the kernel's /proc/version is not gVisor's: %q", out)
	}
	req, _ := http.NewRequest(http.MethodDelete, base+"/api/kernels/"+kernel.ID, nil)
	req.Header = auth
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
}

// --- code-interpreter agent ------------------------------------------------

// The code-interpreter-agent example: its unit tests pass, and the agent
// claims a sandbox from python-sandbox-pool with the Python SDK, runs the
// code of each scripted model turn there (stdout and stderr come back),
// answers, and leaves neither claim nor sandbox behind.
func TestExampleCodeInterpreterAgent(t *testing.T) {
	c := ensureController(t)
	dir := filepath.Join(repoRoot(), "examples", "code-interpreter-agent")
	py := pythonSDK(t)

	unit := exec.Command(py, "-B", "-m", "unittest", "discover", "-s", dir)
	unit.Dir = dir
	if out, err := unit.CombinedOutput(); err != nil {
		t.Fatalf("unit tests of the agent: %v\n%s", err, out)
	}

	start := time.Now()
	out := runPython(t, py, filepath.Join(dir, "agent.py"))
	t.Logf("agent.py (%.1fs):\n%s", time.Since(start).Seconds(), out)
	for _, want := range []string{
		"step 1: ran step_1.py, exit code 0",
		"  stdout| 25 primes below 100; sum of squares = 65796",
		"step 2: ran step_2.py, exit code 1",
		"  stderr| FileNotFoundError: [Errno 2] No such file or directory: 'primes.txt'",
		"  stdout| largest prime below 100 = 97",
		"answer: 25 primes below 100; sum of squares = 65796; largest prime below 100 = 97",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("agent output lacks %q", want)
		}
	}
	m := regexp.MustCompile(`sandbox: (\S+)/(\S+) \(claim (\S+)\)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("agent output names no sandbox")
	}
	if !strings.Contains(out, "terminated: claim "+m[3]+" deleted") {
		t.Errorf("agent did not report terminating claim %s", m[3])
	}
	waitGone(t, c, &extv1beta1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Namespace: m[1], Name: m[3]}})
	waitGone(t, c, &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: m[1], Name: m[2]}})
	t.Logf("claim %s and sandbox %s are gone", m[3], m[2])
}
