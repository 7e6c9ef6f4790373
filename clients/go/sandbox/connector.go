package sandbox

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Routing headers understood by the sandbox-router, and the request id.
const (
	HeaderSandboxID        = "X-Sandbox-ID"
	HeaderSandboxNamespace = "X-Sandbox-Namespace"
	HeaderSandboxPort      = "X-Sandbox-Port"
	HeaderSandboxPodIP     = "X-Sandbox-Pod-IP"
	HeaderSandboxTimeout   = "X-Sandbox-Timeout"
	HeaderRequestID        = "X-Request-ID"
)

// Body limits of responses that are decoded in memory.
const (
	maxRunResponse   = 16 << 20
	maxJSONResponse  = 8 << 20
	maxErrorBody     = 512
	maxDrainOnRetry  = 4 << 10
	maxRetryBackoff  = 8 * time.Second
	defaultFileTries = 6
	defaultRunTries  = 1
)

// retryableStatus reports the statuses that mean "the sandbox or the path
// to it is momentarily unavailable": worth another attempt.
func retryableStatus(code int) bool {
	switch code {
	case http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// identity is what the routing headers say about the sandbox.
type identity struct {
	sandboxName string
	namespace   string
	podIP       string
}

// connector sends one SDK call's HTTP requests: URL building, headers,
// per-attempt timeouts, retries and error mapping.
type connector struct {
	client        *http.Client
	baseURL       string
	routerHeaders bool
	port          int // X-Sandbox-Port
	ident         identity
	perAttempt    time.Duration
	log           logr.Logger
	// backoffBase is the first non-zero retry delay (500 ms); tests
	// shorten it.
	backoffBase time.Duration
}

// newHTTPClient returns the client of sandbox requests: the caller's
// transport or a default one bounded by perAttempt, never following
// redirects (a redirect could send the request, and its body, to another
// host).
func newHTTPClient(rt http.RoundTripper, perAttempt time.Duration) *http.Client {
	if rt == nil {
		rt = newTransport(perAttempt)
	}
	return &http.Client{
		Transport: rt,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// newTransport is the default transport of sandbox requests, bounded by
// perAttempt.
func newTransport(perAttempt time.Duration) *http.Transport {
	return &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   perAttempt,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		ResponseHeaderTimeout: perAttempt,
	}
}

// request is one logical SDK call.
type request struct {
	op          string // SDK operation, for errors
	method      string
	path        string // relative to the base URL, already escaped
	query       url.Values
	body        io.Reader // nil, or retried only if an io.ReadSeeker
	length      int64     // body length, -1 if unknown
	contentType string
	attempts    int
	// pass lets non-2xx statuses through to the caller (HEAD 404).
	pass func(status int) bool
}

// newRequestID returns 16 hex characters, the id of one call across all
// its attempts, so server logs can tie retries together.
func newRequestID() string {
	var b [8]byte
	if _, err := crand.Read(b[:]); err != nil {
		// crypto/rand does not fail on supported platforms; keep a
		// usable id anyway.
		return fmt.Sprintf("%016x", time.Now().UnixNano())
	}
	return hex.EncodeToString(b[:])
}

// backoff is the pause before retry k+1 after attempt k (0-based) failed:
// none after the first failure (a retry on a fresh connection often just
// works), then base·2^(k-1) capped at 8 s, jittered by ±25 %.
func backoff(base time.Duration, k int) time.Duration {
	if k <= 0 {
		return 0
	}
	d := base
	for i := 1; i < k && d < maxRetryBackoff; i++ {
		d *= 2
	}
	d = min(d, maxRetryBackoff)
	jitter := (rand.Float64()*0.5 - 0.25) * float64(d)
	return d + time.Duration(jitter)
}

// formatTimeout renders d in seconds as a plain decimal with microsecond
// precision and no trailing zeros, e.g. "4.999981".
func formatTimeout(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	return strconv.FormatFloat(d.Truncate(time.Microsecond).Seconds(), 'f', -1, 64)
}

// do sends r, retrying transport errors and retryable statuses, and
// returns the response of the first attempt that succeeded (2xx, or a
// status r.pass accepts). The caller must close its body.
func (c *connector) do(ctx context.Context, r request) (*http.Response, error) {
	attempts := max(r.attempts, 1)
	var seeker io.ReadSeeker
	var start int64
	if r.body != nil {
		if rs, ok := r.body.(io.ReadSeeker); ok {
			off, err := rs.Seek(0, io.SeekCurrent)
			if err != nil {
				return nil, fmt.Errorf("sandbox: %s: request body is not seekable, cannot retry: %w", r.op, err)
			}
			seeker, start = rs, off
		} else {
			attempts = 1 // a consumed stream cannot be replayed
		}
	}
	reqID := newRequestID()
	trace.SpanFromContext(ctx).SetAttributes(attribute.String(attrRequestID, reqID))
	var lastErr error
	var prevBody *attemptBody
	for k := range attempts {
		if k > 0 {
			if err := sleepCtx(ctx, backoff(c.backoffBase, k-1)); err != nil {
				return nil, ctxError(ctx, r.op, lastErr)
			}
			if prevBody != nil {
				// The transport may still read the previous attempt's
				// body; rewinding under it would corrupt both.
				if err := prevBody.waitReleased(ctx); err != nil {
					return nil, ctxError(ctx, r.op, lastErr)
				}
			}
			if seeker != nil {
				if _, err := seeker.Seek(start, io.SeekStart); err != nil {
					return nil, fmt.Errorf("sandbox: %s: rewinding request body for attempt %d: %w", r.op, k+1, err)
				}
			}
		}
		var body *attemptBody
		if r.body != nil {
			body = newAttemptBody(r.body)
			prevBody = body
		}
		resp, err := c.attempt(ctx, r, reqID, body)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctxError(ctx, r.op, err)
			}
			c.log.V(1).Info("sandbox request failed", "op", r.op, "attempt", k+1, "request_id", reqID, "error", err.Error())
			lastErr = fmt.Errorf("sandbox: %s: %w", r.op, err)
			continue
		}
		if resp.StatusCode/100 == 2 || (r.pass != nil && r.pass(resp.StatusCode)) {
			return resp, nil
		}
		if retryableStatus(resp.StatusCode) && k < attempts-1 {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrainOnRetry))
			_ = resp.Body.Close()
			c.log.V(1).Info("sandbox request got a retryable status", "op", r.op, "attempt", k+1, "request_id", reqID, "status", resp.StatusCode)
			lastErr = &HTTPError{StatusCode: resp.StatusCode, Operation: r.op}
			continue
		}
		herr := readHTTPError(resp, r.op)
		if retryableStatus(resp.StatusCode) && attempts > 1 {
			return nil, fmt.Errorf("sandbox: %s: %w after %d attempts: %w", r.op, ErrRetriesExhausted, attempts, herr)
		}
		return nil, herr
	}
	if attempts > 1 {
		return nil, fmt.Errorf("sandbox: %s: %w after %d attempts: %w", r.op, ErrRetriesExhausted, attempts, lastErr)
	}
	return nil, lastErr
}

// attempt sends one HTTP request. The per-attempt timer cancels it if no
// response headers arrive in time; once they arrive the timer stops, so a
// large body streams under the call's deadline only.
func (c *connector) attempt(ctx context.Context, r request, reqID string, body *attemptBody) (*http.Response, error) {
	u := strings.TrimSuffix(c.baseURL, "/") + "/" + r.path
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	actx, cancel := context.WithCancel(ctx)
	var timedOut atomic.Bool
	timer := time.AfterFunc(c.perAttempt, func() {
		timedOut.Store(true)
		cancel()
	})
	var rb io.Reader
	if body != nil {
		rb = body
	}
	req, err := http.NewRequestWithContext(actx, r.method, u, rb)
	if err != nil {
		timer.Stop()
		cancel()
		if body != nil {
			_ = body.Close()
		}
		return nil, fmt.Errorf("building request: %w", err)
	}
	if body != nil {
		req.ContentLength = r.length
		if r.length < 0 {
			req.ContentLength = 0
			req.TransferEncoding = []string{"chunked"}
		}
	}
	c.setHeaders(actx, req, r, reqID)
	resp, err := c.client.Do(req)
	if !timer.Stop() || timedOut.Load() {
		if resp != nil {
			_ = resp.Body.Close()
		}
		cancel()
		return nil, fmt.Errorf("no response headers within %s: %w", c.perAttempt, ErrTimeout)
	}
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

func (c *connector) setHeaders(ctx context.Context, req *http.Request, r request, reqID string) {
	h := req.Header
	h.Set(HeaderRequestID, reqID)
	if r.contentType != "" {
		h.Set("Content-Type", r.contentType)
	}
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(h))
	if !c.routerHeaders {
		return
	}
	h.Set(HeaderSandboxID, c.ident.sandboxName)
	h.Set(HeaderSandboxNamespace, c.ident.namespace)
	h.Set(HeaderSandboxPort, strconv.Itoa(c.port))
	if a, err := netip.ParseAddr(c.ident.podIP); err == nil {
		h.Set(HeaderSandboxPodIP, a.String())
	}
	if dl, ok := ctx.Deadline(); ok {
		h.Set(HeaderSandboxTimeout, formatTimeout(min(time.Until(dl), c.perAttempt)))
	}
}

// attemptBody is one attempt's view of the request body. The transport
// closes it when done with it, possibly after RoundTrip returned; the next
// attempt waits for that before rewinding the shared reader.
type attemptBody struct {
	r        io.Reader
	mu       sync.Mutex
	closed   bool
	released chan struct{}
}

func newAttemptBody(r io.Reader) *attemptBody {
	return &attemptBody{r: r, released: make(chan struct{})}
}

func (b *attemptBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, io.ErrClosedPipe
	}
	return b.r.Read(p)
}

// Close never closes the caller's reader: it may be retried, and it is
// the caller's.
func (b *attemptBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.closed = true
		close(b.released)
	}
	return nil
}

func (b *attemptBody) waitReleased(ctx context.Context) error {
	select {
	case <-b.released:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// cancelOnClose ends the attempt's context when the body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// readHTTPError turns a non-2xx response into *HTTPError, extracting the
// sandbox's own detail: the router's and FastAPI's {"detail"}, the legacy
// runtime's {"message"}, sandboxd's {"code","message"}.
func readHTTPError(resp *http.Response, op string) *HTTPError {
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	he := &HTTPError{StatusCode: resp.StatusCode, Body: string(b), Operation: op}
	var m struct {
		Detail  any    `json:"detail"`
		Message string `json:"message"`
		Code    string `json:"code"`
	}
	if json.Unmarshal(b, &m) == nil {
		switch {
		case m.Code != "":
			he.Code, he.Detail = m.Code, m.Message
			he.Body = m.Code + ": " + m.Message
		case m.Detail != nil:
			if s, ok := m.Detail.(string); ok {
				he.Detail = s
			} else if d, err := json.Marshal(m.Detail); err == nil {
				he.Detail = string(d)
			}
		case m.Message != "":
			he.Detail = m.Message
		}
	}
	return he
}

// ctxError reports a call ended by its context: ErrTimeout (and
// context.DeadlineExceeded) for a deadline, the cancellation otherwise,
// with the last attempt's error for context.
func ctxError(ctx context.Context, op string, last error) error {
	err := ctx.Err()
	if err == nil {
		err = context.Canceled
	}
	if errors.Is(err, context.DeadlineExceeded) {
		if last != nil {
			//nolint:errorlint // the last attempt's error is context for people, not a cause for errors.Is: ErrTimeout and ctx's error are.
			return fmt.Errorf("sandbox: %s: %w: %w (last error: %v)", op, ErrTimeout, err, last)
		}
		return fmt.Errorf("sandbox: %s: %w: %w", op, ErrTimeout, err)
	}
	return fmt.Errorf("sandbox: %s: %w", op, err)
}

// readLimited reads all of r, failing with ErrResponseTooLarge beyond limit.
func readLimited(r io.Reader, limit int64, op string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("sandbox: %s: reading response: %w", op, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("sandbox: %s: %w (limit %d bytes)", op, ErrResponseTooLarge, limit)
	}
	return b, nil
}

// callContext applies the call's timeout: WithTimeout's, else
// RequestTimeout when the caller set no deadline. An earlier caller
// deadline always wins.
func callContext(ctx context.Context, def time.Duration, co callOptions) (context.Context, context.CancelFunc) {
	if co.timeout > 0 {
		return context.WithTimeout(ctx, co.timeout)
	}
	if _, ok := ctx.Deadline(); !ok {
		return context.WithTimeout(ctx, def)
	}
	return context.WithCancel(ctx)
}

func applyCallOptions(defAttempts int, opts []CallOption) callOptions {
	co := callOptions{maxAttempts: defAttempts}
	for _, o := range opts {
		if o != nil {
			o(&co)
		}
	}
	return co
}
