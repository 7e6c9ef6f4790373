package sandbox

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestRoutingHeaders(t *testing.T) {
	rec, srv := newRecorder(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, 200, `{"stdout":"ok","stderr":"","exit_code":0}`)
	})
	s := directSandbox(t, srv, func(o *Options) { o.Namespace = "team-a"; o.ServerPort = 8899 })
	ctx, cancel := context.WithTimeout(testCtx(t), 30*time.Second)
	defer cancel()
	if _, err := s.Run(ctx, "echo hi"); err != nil {
		t.Fatalf("Run: %v", err)
	}
	r, body := rec.req(0)
	want := map[string]string{
		HeaderSandboxID:        "sb-1",
		HeaderSandboxNamespace: "team-a",
		HeaderSandboxPort:      "8899",
		HeaderSandboxPodIP:     "10.1.2.3",
		"Content-Type":         "application/json",
	}
	for k, v := range want {
		if got := r.Header.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	if r.Method != http.MethodPost || r.URL.Path != "/execute" {
		t.Errorf("request = %s %s, want POST /execute", r.Method, r.URL.Path)
	}
	if string(body) != `{"command":"echo hi"}` {
		t.Errorf("body = %s", body)
	}
	if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(r.Header.Get(HeaderRequestID)) {
		t.Errorf("X-Request-ID = %q, want 16 hex chars", r.Header.Get(HeaderRequestID))
	}
	to, err := strconv.ParseFloat(r.Header.Get(HeaderSandboxTimeout), 64)
	if err != nil {
		t.Fatalf("X-Sandbox-Timeout %q: %v", r.Header.Get(HeaderSandboxTimeout), err)
	}
	// Bounded by the caller's 30 s deadline, below the 60 s per-attempt
	// default.
	if to <= 0 || to > 30 {
		t.Errorf("X-Sandbox-Timeout = %v, want in (0, 30]", to)
	}
}

func TestTimeoutHeaderBoundedByPerAttempt(t *testing.T) {
	rec, srv := newRecorder(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, 200, `{"exists":true}`)
	})
	s := directSandbox(t, srv, func(o *Options) { o.PerAttemptTimeout = 5 * time.Second })
	if _, err := s.Exists(testCtx(t), "f"); err != nil {
		t.Fatal(err)
	}
	r, _ := rec.req(0)
	to, err := strconv.ParseFloat(r.Header.Get(HeaderSandboxTimeout), 64)
	if err != nil || to <= 0 || to > 5 {
		t.Errorf("X-Sandbox-Timeout = %q, want in (0, 5]", r.Header.Get(HeaderSandboxTimeout))
	}
	if got := formatTimeout(4999981 * time.Microsecond); got != "4.999981" {
		t.Errorf("formatTimeout = %q", got)
	}
	if got := formatTimeout(3 * time.Second); got != "3" {
		t.Errorf("formatTimeout = %q", got)
	}
}

func TestPodIPHeaderOmittedWhenUnknown(t *testing.T) {
	rec, srv := newRecorder(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, 200, `{"exists":false}`)
	})
	s := connectedSandbox(t, Options{APIURL: srv.URL}, sandboxState{podName: "p"})
	if _, err := s.Exists(testCtx(t), "f"); err != nil {
		t.Fatal(err)
	}
	r, _ := rec.req(0)
	if _, ok := r.Header[http.CanonicalHeaderKey(HeaderSandboxPodIP)]; ok {
		t.Errorf("X-Sandbox-Pod-IP sent without a known pod IP: %q", r.Header.Get(HeaderSandboxPodIP))
	}
	if r.Header.Get(HeaderSandboxID) != "sb-1" {
		t.Errorf("X-Sandbox-ID = %q", r.Header.Get(HeaderSandboxID))
	}
}

func TestRetriesKeepRequestIDAndStopOnSuccess(t *testing.T) {
	for _, code := range []int{500, 502, 503, 504} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			rec, srv := newRecorder(t, func(n int, w http.ResponseWriter, _ *http.Request) {
				if n < 2 {
					writeJSON(w, code, `{"detail":"busy"}`)
					return
				}
				_, _ = w.Write([]byte("content"))
			})
			s := directSandbox(t, srv, nil)
			got, err := s.Read(testCtx(t), "a.txt")
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			if string(got) != "content" || rec.count() != 3 {
				t.Fatalf("got %q after %d requests, want content after 3", got, rec.count())
			}
			first, _ := rec.req(0)
			for i := 1; i < 3; i++ {
				r, _ := rec.req(i)
				if r.Header.Get(HeaderRequestID) != first.Header.Get(HeaderRequestID) {
					t.Errorf("attempt %d request id %q != %q", i, r.Header.Get(HeaderRequestID), first.Header.Get(HeaderRequestID))
				}
			}
		})
	}
}

func TestNonRetryableStatus(t *testing.T) {
	for _, code := range []int{400, 401, 403, 404, 409, 501} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			rec, srv := newRecorder(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
				writeJSON(w, code, `{"detail":"nope"}`)
			})
			s := directSandbox(t, srv, nil)
			_, err := s.Read(testCtx(t), "a.txt")
			var he *HTTPError
			if !errors.As(err, &he) || he.StatusCode != code || he.Detail != "nope" || he.Operation != "read" {
				t.Fatalf("err = %v, want *HTTPError %d with detail", err, code)
			}
			if errors.Is(err, ErrRetriesExhausted) || rec.count() != 1 {
				t.Fatalf("retried a %d (%d requests)", code, rec.count())
			}
			if errors.Is(err, ErrNotFound) != (code == 404) {
				t.Errorf("errors.Is(ErrNotFound) = %v for %d", code != 404, code)
			}
		})
	}
}

func TestRetryExhaustion(t *testing.T) {
	rec, srv := newRecorder(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, 503, `{"detail":"Sandbox default/sb-1 is not available."}`)
	})
	s := directSandbox(t, srv, nil)
	_, err := s.List(testCtx(t), ".", WithMaxAttempts(3))
	if !errors.Is(err, ErrRetriesExhausted) {
		t.Fatalf("err = %v, want ErrRetriesExhausted", err)
	}
	var he *HTTPError
	if !errors.As(err, &he) || he.StatusCode != 503 || !strings.Contains(he.Detail, "not available") {
		t.Fatalf("err = %v, want wrapped *HTTPError 503 with the router's detail", err)
	}
	if rec.count() != 3 {
		t.Errorf("%d attempts, want 3", rec.count())
	}
}

func TestRunSingleAttemptByDefault(t *testing.T) {
	rec, srv := newRecorder(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n == 0 {
			writeJSON(w, 502, `{"detail":"Could not connect to the backend sandbox: sb-1"}`)
			return
		}
		writeJSON(w, 200, `{"stdout":"x","stderr":"","exit_code":0}`)
	})
	s := directSandbox(t, srv, nil)
	_, err := s.Run(testCtx(t), "true")
	var he *HTTPError
	if !errors.As(err, &he) || he.StatusCode != 502 || errors.Is(err, ErrRetriesExhausted) {
		t.Fatalf("err = %v, want a plain 502 *HTTPError", err)
	}
	if rec.count() != 1 {
		t.Fatalf("%d attempts, want 1", rec.count())
	}
	res, err := s.Run(testCtx(t), "true", WithMaxAttempts(2))
	if err != nil || res.Stdout != "x" {
		t.Fatalf("Run with 2 attempts = %+v, %v", res, err)
	}
	// n=1 succeeded directly, so one more request only.
	if rec.count() != 2 {
		t.Fatalf("%d requests, want 2", rec.count())
	}
}

func TestConnectionErrorsRetried(t *testing.T) {
	var fail atomic.Int32
	fail.Store(2)
	rec, srv := newRecorder(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		if fail.Add(-1) >= 0 {
			// Drop the connection without an answer.
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = conn.Close()
			}
			return
		}
		_, _ = w.Write([]byte("data"))
	})
	s := directSandbox(t, srv, nil)
	got, err := s.Read(testCtx(t), "f")
	if err != nil || string(got) != "data" {
		t.Fatalf("Read = %q, %v", got, err)
	}
	if rec.count() != 3 {
		t.Errorf("%d requests, want 3", rec.count())
	}
	// An unreachable server exhausts the attempts with the dial error.
	srv.Close()
	_, err = s.Read(testCtx(t), "f", WithMaxAttempts(2))
	if !errors.Is(err, ErrRetriesExhausted) {
		t.Fatalf("err = %v, want ErrRetriesExhausted", err)
	}
}

func TestRedirectsNotFollowed(t *testing.T) {
	var followed atomic.Bool
	rec, srv := newRecorder(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/elsewhere" {
			followed.Store(true)
		}
		http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
	})
	s := directSandbox(t, srv, nil)
	_, err := s.Read(testCtx(t), "f")
	var he *HTTPError
	if !errors.As(err, &he) || he.StatusCode != http.StatusTemporaryRedirect {
		t.Fatalf("err = %v, want *HTTPError 307", err)
	}
	if followed.Load() || rec.count() != 1 {
		t.Fatalf("redirect followed (%d requests)", rec.count())
	}
}

// nonSeeker hides Seek from a reader.
type nonSeeker struct{ io.Reader }

// badSeeker fails every Seek.
type badSeeker struct{ io.Reader }

func (badSeeker) Seek(int64, int) (int64, error) { return 0, errors.New("seek broke") }

func TestBodyReplay(t *testing.T) {
	rec, srv := newRecorder(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, 503, `{}`)
	})
	s := directSandbox(t, srv, nil)
	conn, release, err := s.acquire("test")
	if err != nil {
		t.Fatal(err)
	}
	defer release()

	// A seekable body is replayed whole on every attempt.
	_, err = conn.http.do(testCtx(t), request{op: "put", method: http.MethodPut, path: "x",
		body: bytes.NewReader([]byte("payload")), length: 7, attempts: 3})
	if !errors.Is(err, ErrRetriesExhausted) || rec.count() != 3 {
		t.Fatalf("seekable: err = %v after %d requests", err, rec.count())
	}
	for i := range 3 {
		if _, b := rec.req(i); string(b) != "payload" {
			t.Errorf("attempt %d body = %q", i, b)
		}
	}

	// A stream cannot be replayed: one attempt only.
	_, err = conn.http.do(testCtx(t), request{op: "put", method: http.MethodPut, path: "x",
		body: nonSeeker{strings.NewReader("stream")}, length: -1, attempts: 3})
	var he *HTTPError
	if !errors.As(err, &he) || errors.Is(err, ErrRetriesExhausted) || rec.count() != 4 {
		t.Fatalf("stream: err = %v after %d requests, want one plain 503", err, rec.count())
	}
	if _, b := rec.req(3); string(b) != "stream" {
		t.Errorf("stream body = %q", b)
	}

	// A failing Seek is reported, not silently sent as an empty body.
	_, err = conn.http.do(testCtx(t), request{op: "put", method: http.MethodPut, path: "x",
		body: badSeeker{strings.NewReader("z")}, length: 1, attempts: 3})
	if err == nil || !strings.Contains(err.Error(), "seek broke") || rec.count() != 4 {
		t.Fatalf("bad seeker: err = %v after %d requests", err, rec.count())
	}
}

func TestPerAttemptTimeout(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	rec, srv := newRecorder(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 0 {
			// No headers until the client gives up on this attempt.
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		// Headers at once, then a body slower than the per-attempt
		// timeout: it must still be read completely.
		w.WriteHeader(200)
		_, _ = w.Write([]byte("part1-"))
		http.NewResponseController(w).Flush()
		time.Sleep(300 * time.Millisecond)
		_, _ = w.Write([]byte("part2"))
	})
	s := directSandbox(t, srv, func(o *Options) { o.PerAttemptTimeout = 150 * time.Millisecond })
	got, err := s.Read(testCtx(t), "slow")
	if err != nil || string(got) != "part1-part2" {
		t.Fatalf("Read = %q, %v", got, err)
	}
	// The first attempt never gets headers; on a loaded machine a later
	// one may time out too, so only "retried" is asserted.
	if rec.count() < 2 {
		t.Errorf("%d attempts, want a retry", rec.count())
	}
}

func TestCallDeadlines(t *testing.T) {
	rec, srv := newRecorder(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, 200, `{"exists":true}`)
	})
	s := directSandbox(t, srv, func(o *Options) { o.RequestTimeout = time.Hour; o.PerAttemptTimeout = time.Hour })
	header := func(i int) float64 {
		r, _ := rec.req(i)
		v, err := strconv.ParseFloat(r.Header.Get(HeaderSandboxTimeout), 64)
		if err != nil {
			t.Fatalf("X-Sandbox-Timeout %q: %v", r.Header.Get(HeaderSandboxTimeout), err)
		}
		return v
	}
	// RequestTimeout applies when the caller has no deadline.
	if _, err := s.Exists(context.Background(), "f"); err != nil {
		t.Fatal(err)
	}
	if v := header(0); v <= 60 || v > 3600 {
		t.Errorf("default: timeout header %v, want RequestTimeout-bound", v)
	}
	// WithTimeout overrides it.
	if _, err := s.Exists(context.Background(), "f", WithTimeout(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if v := header(1); v <= 0 || v > 10 {
		t.Errorf("WithTimeout: header %v, want <= 10", v)
	}
	// An earlier caller deadline wins over WithTimeout.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.Exists(ctx, "f", WithTimeout(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if v := header(2); v <= 0 || v > 5 {
		t.Errorf("caller deadline: header %v, want <= 5", v)
	}
}

func TestDeadlineIsTimeoutError(t *testing.T) {
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	_, srv := newRecorder(t, func(_ int, _ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-block:
		}
	})
	s := directSandbox(t, srv, nil)
	_, err := s.Read(testCtx(t), "f", WithTimeout(100*time.Millisecond))
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want ErrTimeout and DeadlineExceeded", err)
	}
	ctx, cancel := context.WithCancel(testCtx(t))
	cancel()
	_, err = s.Read(ctx, "f")
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want Canceled", err)
	}
}

func TestErrorDetailMapping(t *testing.T) {
	cases := []struct {
		body               string
		wantBody, wantCode string
		wantDetail         string
	}{
		{`{"detail":"X-Sandbox-ID header is required."}`, `{"detail":"X-Sandbox-ID header is required."}`, "", "X-Sandbox-ID header is required."},
		{`{"message":"File not found"}`, `{"message":"File not found"}`, "", "File not found"},
		{`{"code":"NOT_FOUND","message":"path does not exist within the sandbox"}`, "NOT_FOUND: path does not exist within the sandbox", "NOT_FOUND", "path does not exist within the sandbox"},
		{`plain text`, `plain text`, "", ""},
	}
	for _, tc := range cases {
		_, srv := newRecorder(t, func(_ int, w http.ResponseWriter, _ *http.Request) { writeJSON(w, 404, tc.body) })
		s := directSandbox(t, srv, nil)
		_, err := s.Read(testCtx(t), "f")
		var he *HTTPError
		if !errors.As(err, &he) {
			t.Fatalf("err = %v", err)
		}
		if he.Body != tc.wantBody || he.Code != tc.wantCode || he.Detail != tc.wantDetail {
			t.Errorf("body %s: got %+v", tc.body, he)
		}
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("404 does not match ErrNotFound")
		}
	}
	long := &HTTPError{StatusCode: 500, Body: strings.Repeat("x", 400), Operation: "read"}
	if len(long.Error()) > 256+60 || !strings.Contains(long.Error(), "[truncated]") {
		t.Errorf("Error() not truncated: %d chars", len(long.Error()))
	}
}

func TestOperationsAfterDisconnectAreNotReady(t *testing.T) {
	_, srv := newRecorder(t, func(_ int, w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, `{}`) })
	s := directSandbox(t, srv, nil)
	if !s.IsReady() {
		t.Fatal("not ready after connect")
	}
	if err := s.Disconnect(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if s.IsReady() {
		t.Fatal("ready after Disconnect")
	}
	for name, op := range map[string]func() error{
		"run":    func() error { _, err := s.Run(testCtx(t), "true"); return err },
		"read":   func() error { _, err := s.Read(testCtx(t), "f"); return err },
		"write":  func() error { return s.Write(testCtx(t), "f", nil) },
		"list":   func() error { _, err := s.List(testCtx(t), "."); return err },
		"exists": func() error { _, err := s.Exists(testCtx(t), "f"); return err },
		"start":  func() error { _, err := s.Start(testCtx(t), []string{"true"}, nil); return err },
	} {
		if err := op(); !errors.Is(err, ErrNotReady) {
			t.Errorf("%s after Disconnect: %v, want ErrNotReady", name, err)
		}
	}
}

func TestBackoffSchedule(t *testing.T) {
	base := 500 * time.Millisecond
	if d := backoff(base, 0); d != 0 {
		t.Errorf("backoff(0) = %v, want 0", d)
	}
	for k, want := range map[int]time.Duration{1: 500 * time.Millisecond, 2: time.Second, 3: 2 * time.Second, 4: 4 * time.Second, 5: 8 * time.Second, 9: 8 * time.Second} {
		for range 20 {
			d := backoff(base, k)
			if d < want*3/4 || d > want*5/4 {
				t.Errorf("backoff(%d) = %v, want %v ±25%%", k, d, want)
			}
		}
	}
}
