package router

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"sigs.k8s.io/agent-sandbox/internal/testenv/freeport"
)

// failAfter bounds channel waits so a broken test fails instead of hanging;
// it is not a performance assertion.
const failAfter = 10 * time.Second

func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(failAfter):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func detailOf(t *testing.T, resp *http.Response) string {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("error content type %q", ct)
	}
	var d detailBody
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		t.Fatalf("decoding detail: %v", err)
	}
	return d.Detail
}

func TestProxyRoundTrip(t *testing.T) {
	type seen struct {
		method, uri, host, sid, auth, xff, xfh, xfp, origin string
		body                                                string
	}
	got := make(chan seen, 1)
	be := backend(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.RequestURI, r.Host, r.Header.Get("X-Sandbox-ID"), r.Header.Get("Authorization"),
			r.Header.Get("X-Forwarded-For"), r.Header.Get("X-Forwarded-Host"), r.Header.Get("X-Forwarded-Proto"),
			r.Header.Get("Origin"), string(b)}
		w.Header().Set("X-Backend", "yes")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("created"))
	}))
	h := newHarness(t, harnessOpts{})
	h.addSandbox(sandboxSpec{name: "sb", addr: be})

	req := h.request("POST", "/files/a%2Fb/%2E%2E?x=1&y=%20z", "sb", be, strings.NewReader("payload"))
	req.Header.Set("Authorization", "Bearer secret")
	req.Header.Set("X-Forwarded-For", "6.6.6.6")
	req.Header.Set("Origin", "http://evil.example")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || readAll(t, resp.Body) != "created" || resp.Header.Get("X-Backend") != "yes" {
		t.Fatalf("status %d headers %v", resp.StatusCode, resp.Header)
	}
	s := <-got
	if s.method != "POST" || s.body != "payload" || s.sid != "sb" {
		t.Fatalf("backend saw %+v", s)
	}
	// Path and query forwarded exactly as escaped by the client.
	if s.uri != "/files/a%2Fb/%2E%2E?x=1&y=%20z" {
		t.Fatalf("request URI %q", s.uri)
	}
	if s.host != be.String() {
		t.Fatalf("Host %q, want upstream %q", s.host, be)
	}
	if s.auth != "" {
		t.Fatal("Authorization reached the backend")
	}
	if s.xff != "127.0.0.1" || s.xfh != h.addr || s.xfp != "http" {
		t.Fatalf("X-Forwarded-*: %q %q %q (client XFF must not be trusted)", s.xff, s.xfh, s.xfp)
	}
	if s.origin != "http://evil.example" {
		t.Fatal("Origin must only be stripped on upgrades")
	}
}

func TestProxyMethodsAndLargeBody(t *testing.T) {
	be := backend(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hash := sha256.New()
		n, _ := io.Copy(hash, r.Body)
		fmt.Fprintf(w, "%s %d %x", r.Method, n, hash.Sum(nil))
	}))
	h := newHarness(t, harnessOpts{})
	h.addSandbox(sandboxSpec{name: "sb", addr: be})
	for _, m := range []string{"GET", "POST", "PUT", "DELETE", "PATCH"} {
		resp, err := http.DefaultClient.Do(h.request(m, "/x", "sb", be, strings.NewReader("abc")))
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(t, resp.Body)
		resp.Body.Close()
		if !strings.HasPrefix(body, m+" 3 ") {
			t.Fatalf("%s: %q", m, body)
		}
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 4<<20) // 64 MiB
	want := fmt.Sprintf("POST %d %x", len(big), sha256.Sum256(big))
	resp, err := http.DefaultClient.Do(h.request("POST", "/upload", "sb", be, bytes.NewReader(big)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if got := readAll(t, resp.Body); got != want {
		t.Fatalf("large body: %q want %q", got, want)
	}
}

// TestProxyStreamsWithoutBuffering proves both directions stream: each step
// waits for the other side to have seen the previous chunk before the next
// is produced, so any buffering in the router would deadlock (and fail).
func TestProxyStreamsWithoutBuffering(t *testing.T) {
	gotChunk := make(chan string, 4)
	release := make(chan struct{})
	be := backend(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/download":
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: first\n\n")
			http.NewResponseController(w).Flush()
			<-release
			fmt.Fprint(w, "data: second\n\n")
		case "/upload":
			buf := make([]byte, 5)
			if _, err := io.ReadFull(r.Body, buf); err == nil {
				gotChunk <- string(buf)
			}
			_, _ = io.Copy(io.Discard, r.Body)
			fmt.Fprint(w, "done")
		case "/duplex":
			_ = http.NewResponseController(w).EnableFullDuplex()
			w.WriteHeader(200)
			http.NewResponseController(w).Flush()
			br := bufio.NewReader(r.Body)
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					return
				}
				fmt.Fprint(w, "echo:"+line)
				http.NewResponseController(w).Flush()
			}
		}
	}))
	h := newHarness(t, harnessOpts{})
	h.addSandbox(sandboxSpec{name: "sb", addr: be})

	t.Run("download and SSE", func(t *testing.T) {
		resp, err := http.DefaultClient.Do(h.request("GET", "/download", "sb", be, nil))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		line, err := br.ReadString('\n')
		if err != nil || line != "data: first\n" {
			t.Fatalf("first event %q %v", line, err)
		}
		close(release) // the backend only continues after we saw event 1
		rest := readAll(t, br)
		if !strings.Contains(rest, "data: second") {
			t.Fatalf("rest %q", rest)
		}
	})
	t.Run("upload", func(t *testing.T) {
		pr, pw := io.Pipe()
		errc := make(chan error, 1)
		go func() {
			resp, err := http.DefaultClient.Do(h.request("POST", "/upload", "sb", be, pr))
			if err == nil {
				resp.Body.Close()
			}
			errc <- err
		}()
		_, _ = pw.Write([]byte("hello"))
		select {
		case c := <-gotChunk: // backend saw the chunk while the body is still open
			if c != "hello" {
				t.Fatalf("chunk %q", c)
			}
		case <-time.After(failAfter):
			t.Fatal("upload chunk never reached the backend: buffered")
		}
		pw.Close()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	})
	t.Run("full duplex", func(t *testing.T) {
		pr, pw := io.Pipe()
		req := h.request("POST", "/duplex", "sb", be, pr)
		respc := make(chan *http.Response, 1)
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				close(respc)
				return
			}
			respc <- resp
		}()
		_, _ = pw.Write([]byte("one\n"))
		resp := <-respc
		if resp == nil {
			t.FailNow()
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		for _, w := range []string{"one", "two", "three"} {
			if w != "one" {
				_, _ = pw.Write([]byte(w + "\n"))
			}
			line, err := br.ReadString('\n')
			if err != nil || line != "echo:"+w+"\n" {
				t.Fatalf("echo %q %v", line, err)
			}
		}
		pw.Close()
	})
}

// freePort is a loopback address with a port nothing listens on.
func freePort(t *testing.T) netip.AddrPort {
	t.Helper()
	return netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(freeport.T(t)))
}

func TestProxyDeadPortAndRefusalDoesNotPoison(t *testing.T) {
	be := backend(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	dead := freePort(t)
	h := newHarness(t, harnessOpts{})
	h.addSandbox(sandboxSpec{name: "sb", addr: be, extraPort: []uint16{dead.Port()}})
	resp, err := http.DefaultClient.Do(h.request("GET", "/", "sb", dead, nil))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusBadGateway || detailOf(t, resp) != "Could not connect to the backend sandbox: sb" {
		t.Fatalf("dead port: %d", resp.StatusCode)
	}
	resp.Body.Close()
	// The refusal did not invalidate anything: the right port still works.
	resp, err = http.DefaultClient.Do(h.request("GET", "/", "sb", be, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("after refusal: %d", resp.StatusCode)
	}
}

func TestProxyWarmPoolNeedsUID(t *testing.T) {
	be := backend(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	h := newHarness(t, harnessOpts{readyTimeout: 200 * time.Millisecond})
	uid := h.addSandbox(sandboxSpec{name: "pool-abcde", addr: be, warmPool: true})
	resp := mustDo(t, h.request("GET", "/", "pool-abcde", be, nil))
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unclaimed warm-pool sandbox by name: %d", resp.StatusCode)
	}
	resp.Body.Close()
	req := h.request("GET", "/", "pool-abcde", be, nil)
	req.Header.Set("X-Sandbox-UID", uid)
	resp = mustDo(t, req)
	if resp.StatusCode != 200 {
		t.Fatalf("by UID: %d", resp.StatusCode)
	}
	resp.Body.Close()
	// Adoption removes the warm-pool label: now reachable by name.
	h.addSandbox(sandboxSpec{name: "pool-abcde", uid: uid, addr: be})
	resp = mustDo(t, h.request("GET", "/", "pool-abcde", be, nil))
	if resp.StatusCode != 200 {
		t.Fatalf("claimed by name: %d", resp.StatusCode)
	}
	resp.Body.Close()
	// A UID that names another incarnation is refused.
	req = h.request("GET", "/", "pool-abcde", be, nil)
	req.Header.Set("X-Sandbox-UID", "stale-uid")
	resp = mustDo(t, req)
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("stale UID: %d", resp.StatusCode)
	}
	resp.Body.Close()
}

func TestProxyPodIPHint(t *testing.T) {
	be := backend(t, "127.0.0.3", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	h := newHarness(t, harnessOpts{})
	h.addSandbox(sandboxSpec{name: "sb", addr: be})
	for _, c := range []struct {
		hint string
		code int
	}{
		{"127.0.0.3", 200},
		{"::ffff:127.0.0.3", 200},
		{"127.0.0.4", http.StatusForbidden},
		{"10.9.9.9", http.StatusForbidden},
	} {
		req := h.request("GET", "/", "sb", be, nil)
		req.Header.Set("X-Sandbox-Pod-IP", c.hint)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.code {
			t.Errorf("hint %s: %d want %d", c.hint, resp.StatusCode, c.code)
		}
	}
	// After the pod moved, the old address is a stale hint: ignored, and the
	// request reaches the current pod.
	be2 := backend(t, "127.0.0.5", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "new") }))
	uid := h.idx.Lookup(key("sb")).UID
	h.idx.UpsertSandbox(&SandboxRecord{Key: key("sb"), UID: uid, Ready: true, PodIPs: []string{"127.0.0.5"},
		Ports: []uint16{be.Port(), be2.Port()}})
	h.idx.DeletePod("pod-" + uid)
	h.idx.UpsertPod(&PodRecord{Namespace: "default", Name: "sb", UID: "pod-new", OwnerUID: uid, Ready: true, PodIPs: []string{"127.0.0.5"}})
	req := h.request("GET", "/", "sb", be2, nil)
	req.Header.Set("X-Sandbox-Pod-IP", "127.0.0.3")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || readAll(t, resp.Body) != "new" {
		t.Fatalf("stale hint: %d", resp.StatusCode)
	}
}

func TestProxyRetries(t *testing.T) {
	t.Run("backend comes up within budget", func(t *testing.T) {
		ap := freePort(t)
		h := newHarness(t, harnessOpts{maxRetries: 50})
		h.addSandbox(sandboxSpec{name: "sb", addr: ap})
		started := make(chan struct{})
		go func() {
			// Bring the backend up only after the router has failed a dial.
			for h.retries() < 1 {
				time.Sleep(5 * time.Millisecond)
			}
			ln, err := net.Listen("tcp", ap.String())
			if err != nil {
				t.Error(err)
				return
			}
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "up") })}
			t.Cleanup(func() { srv.Close() })
			close(started)
			_ = srv.Serve(ln)
		}()
		resp, err := http.DefaultClient.Do(h.request("GET", "/", "sb", ap, nil))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		wait(t, started, "backend")
		if resp.StatusCode != 200 || h.retries() < 1 {
			t.Fatalf("status %d retries %v", resp.StatusCode, h.retries())
		}
	})
	t.Run("gives up with 502", func(t *testing.T) {
		ap := freePort(t)
		h := newHarness(t, harnessOpts{maxRetries: 2})
		h.addSandbox(sandboxSpec{name: "sb", addr: ap})
		resp, err := http.DefaultClient.Do(h.request("GET", "/", "sb", ap, nil))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 502 || h.retries() != 2 {
			t.Fatalf("status %d retries %v", resp.StatusCode, h.retries())
		}
	})
}

func (h *harness) retries() float64 {
	return counterValue(h.metrics.upstreamRetries.WithLabelValues("default"))
}

func TestRetryDialerUnit(t *testing.T) {
	p := NewAddrPolicy(true)
	d := newRetryDialer(-5, 0, 0, p, nil)
	if d.attempts != 1 || d.initial != defaultRetryInitialDelay || d.max != defaultRetryMaxDelay {
		t.Fatalf("clamping: %+v", d)
	}
	d = newRetryDialer(5, 200*time.Millisecond, 800*time.Millisecond, p, nil)
	ms := time.Millisecond
	want := []time.Duration{200 * ms, 400 * ms, 800 * ms, 800 * ms, 800 * ms}
	for i, w := range want {
		if got := d.backoff(i); got != w {
			t.Errorf("backoff(%d) = %s want %s", i, got, w)
		}
	}
	// Cancellation stops the retry loop and returns the last dial error.
	ap := freePort(t)
	d = newRetryDialer(1000, time.Hour, time.Hour, p, nil)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := d.DialContext(ctx, "tcp", ap.String()); errc <- err }()
	cancel()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("want dial error")
		}
	case <-time.After(failAfter):
		t.Fatal("retry loop ignored cancellation")
	}
	// The dialer itself refuses forbidden addresses.
	_, err := newRetryDialer(0, 0, 0, NewAddrPolicy(false), nil).DialContext(context.Background(), "tcp", "169.254.169.254:80")
	if !errors.Is(err, errDialForbidden) {
		t.Fatalf("forbidden dial: %v", err)
	}
}

func TestProxyTimeoutAndWebSocket(t *testing.T) {
	up := websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}
	origins := make(chan string, 2)
	be := backend(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ws":
			origins <- r.Header.Get("Origin")
			c, err := up.Upgrade(w, r, nil)
			if err != nil {
				return
			}
			defer c.Close()
			for {
				mt, msg, err := c.ReadMessage()
				if err != nil {
					return
				}
				_ = c.WriteMessage(mt, msg)
			}
		case "/slow":
			select {
			case <-r.Context().Done():
			case <-time.After(failAfter):
			}
		}
	}))
	proxyTimeout := 300 * time.Millisecond
	h := newHarness(t, harnessOpts{proxyTimeout: proxyTimeout})
	h.addSandbox(sandboxSpec{name: "sb", addr: be})

	resp, err := http.DefaultClient.Do(h.request("GET", "/slow", "sb", be, nil))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("non-upgrade request past the proxy timeout: %d", resp.StatusCode)
	}

	hdr := http.Header{}
	hdr.Set("X-Sandbox-ID", "sb")
	hdr.Set("X-Sandbox-Port", fmt.Sprint(be.Port()))
	hdr.Set("Origin", "http://browser.example")
	c, wsResp, err := websocket.DefaultDialer.Dial("ws://"+h.addr+"/ws", hdr)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer c.Close()
	if wsResp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d", wsResp.StatusCode)
	}
	if o := <-origins; o != "" {
		t.Fatalf("Origin reached the backend on upgrade: %q", o)
	}
	for i := 0; i < 3; i++ {
		// Outlive the proxy timeout three times over.
		time.Sleep(proxyTimeout)
		msg := fmt.Sprintf("ping-%d", i)
		if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		_, got, err := c.ReadMessage()
		if err != nil || string(got) != msg {
			t.Fatalf("echo %q %v", got, err)
		}
	}
	c.Close()
	// The upgraded session is recorded with code 101.
	deadline := time.Now().Add(failAfter)
	for counterValue(h.metrics.requests.WithLabelValues("GET", "101", "default")) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("101 not recorded")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type recordingAuthz struct {
	mu    sync.Mutex
	calls []string
	err   error
}

func (a *recordingAuthz) Authorize(_ context.Context, r *http.Request, ns, name string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, ns+"/"+name+" "+BearerToken(r))
	return a.err
}

func TestProxyAuthzMapping(t *testing.T) {
	be := backend(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	for _, c := range []struct {
		name   string
		err    error
		code   int
		detail string
	}{
		{"allow", nil, 200, ""},
		{"unauthenticated", ErrUnauthenticated, 401, "unauthenticated"},
		{"forbidden", ErrForbidden, 403, "forbidden"},
		{"wrapped forbidden", fmt.Errorf("policy: %w", ErrForbidden), 403, "policy: forbidden"},
		{"other", errors.New("tokenreview: boom"), 500, "tokenreview: boom"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := &recordingAuthz{err: c.err}
			h := newHarness(t, harnessOpts{authz: a})
			h.addSandbox(sandboxSpec{name: "sb", ns: "team-a", addr: be})
			req := h.request("GET", "/", "sb", be, nil)
			req.Header.Set("X-Sandbox-Namespace", "team-a")
			req.Header.Set("Authorization", "Bearer tok")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != c.code {
				t.Fatalf("status %d want %d", resp.StatusCode, c.code)
			}
			if c.detail != "" && detailOf(t, resp) != c.detail {
				t.Fatal("detail mismatch")
			}
			if len(a.calls) != 1 || a.calls[0] != "team-a/sb tok" {
				t.Fatalf("authorizer calls %v", a.calls)
			}
		})
	}
	t.Run("allow-all", func(t *testing.T) {
		h := newHarness(t, harnessOpts{authz: AllowAll{}})
		h.addSandbox(sandboxSpec{name: "sb", addr: be})
		resp := mustDo(t, h.request("GET", "/", "sb", be, nil))
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%d", resp.StatusCode)
		}
	})
}

func TestProxyHealthzAndErrorsAreJSON(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	resp, err := http.Get(h.url + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" ||
		strings.TrimSpace(readAll(t, resp.Body)) != `{"status":"ok"}` {
		t.Fatalf("healthz %d", resp.StatusCode)
	}
	resp.Body.Close()
	resp = mustDo(t, mustReq(t, "GET", h.url+"/anything"))
	defer resp.Body.Close()
	if resp.StatusCode != 400 || detailOf(t, resp) != msgIDRequired {
		t.Fatalf("missing id %d", resp.StatusCode)
	}
}

func TestProxyBodyLimit(t *testing.T) {
	be := backend(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, "ok")
	}))
	h := newHarness(t, harnessOpts{maxBody: 1024})
	h.addSandbox(sandboxSpec{name: "sb", addr: be})
	resp, err := http.DefaultClient.Do(h.request("POST", "/", "sb", be, bytes.NewReader(make([]byte, 4096))))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("over limit: %d", resp.StatusCode)
	}
	resp = mustDo(t, h.request("POST", "/", "sb", be, bytes.NewReader(make([]byte, 512))))
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("under limit: %d", resp.StatusCode)
	}
}

func TestProxyMetricsLabels(t *testing.T) {
	be := backend(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	h := newHarness(t, harnessOpts{readyTimeout: 100 * time.Millisecond})
	h.addSandbox(sandboxSpec{name: "sb", ns: "team-a", addr: be})
	req := h.request("GET", "/", "sb", be, nil)
	req.Header.Set("X-Sandbox-Namespace", "team-a")
	resp := mustDo(t, req)
	resp.Body.Close()
	// A namespace no sandbox lives in stays "-": clients cannot mint series.
	req = h.request("GET", "/", "sb", be, nil)
	req.Header.Set("X-Sandbox-Namespace", "made-up-ns")
	resp = mustDo(t, req)
	resp.Body.Close()
	if counterValue(h.metrics.requests.WithLabelValues("GET", "200", "team-a")) != 1 ||
		counterValue(h.metrics.requests.WithLabelValues("GET", "404", "-")) != 1 {
		t.Fatal("request metrics labels")
	}
	mresp, err := http.Get("http://" + h.srv.Addr(ListenerMetrics).String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer mresp.Body.Close()
	body := readAll(t, mresp.Body)
	for _, name := range []string{"sandbox_router_requests_total", "sandbox_router_request_duration_seconds",
		"sandbox_router_inflight_requests", "sandbox_router_authz_decisions_total", "sandbox_router_build_info"} {
		if !strings.Contains(body, name) {
			t.Errorf("metric %s missing", name)
		}
	}
}

func TestGracefulShutdownDrainsStreams(t *testing.T) {
	inHandler := make(chan struct{})
	finish := make(chan struct{})
	be := backend(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "part1;")
		http.NewResponseController(w).Flush()
		close(inHandler)
		<-finish
		fmt.Fprint(w, "part2")
	}))
	h := newHarness(t, harnessOpts{})
	h.addSandbox(sandboxSpec{name: "sb", addr: be})
	resp, err := http.DefaultClient.Do(h.request("GET", "/stream", "sb", be, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	wait(t, inHandler, "backend")
	var stopped atomic.Bool
	go func() { h.stop(); stopped.Store(true) }()
	// Readiness flips while the stream is still being served.
	deadline := time.Now().Add(failAfter)
	for h.srv.ready.Load() {
		if time.Now().After(deadline) {
			t.Fatal("readyz never flipped")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if stopped.Load() {
		t.Fatal("shutdown returned before the in-flight stream finished")
	}
	close(finish)
	if got := readAll(t, resp.Body); got != "part1;part2" {
		t.Fatalf("drained stream %q", got)
	}
}

func TestProxyUnsyncedCacheAnswers503(t *testing.T) {
	p := NewProxyHandler(ProxyOptions{Resolver: NewIndex(), Policy: NewAddrPolicy(false), Metrics: NewMetrics(BuildInfo{}),
		ProxyTimeout: time.Second, ReadyTimeout: time.Second, Unsynced: true})
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set("X-Sandbox-ID", "sb")
	p.ServeHTTP(rec, req)
	if rec.Code != 503 || !strings.Contains(rec.Body.String(), "not synced") {
		t.Fatalf("before sync: %d %s", rec.Code, rec.Body.String())
	}
	p.MarkSynced()
	rec = httptest.NewRecorder()
	p.ServeHTTP(rec, req)
	if rec.Code != 404 {
		t.Fatalf("after sync, unknown sandbox: %d", rec.Code)
	}
}
