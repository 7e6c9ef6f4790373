package router

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"
)

// Defaults for the upstream dial retry loop (same as upstream).
const (
	defaultRetryInitialDelay = 200 * time.Millisecond
	defaultRetryMaxDelay     = 800 * time.Millisecond
)

// errDialForbidden is returned when the transport is asked to dial an
// address the policy refuses. Resolution never produces one; this is the
// belt to its braces, so that no future code path can bypass the policy.
var errDialForbidden = errors.New("dial to a forbidden address refused")

// retryDialer dials upstream connections, retrying failed dials with capped
// exponential backoff. Retrying at the dial layer is what makes it safe for
// non-replayable bodies: a request body is only read once a connection
// exists, so nothing has been consumed when a dial fails.
type retryDialer struct {
	dialer   net.Dialer
	attempts int
	initial  time.Duration
	max      time.Duration
	policy   *AddrPolicy
	metrics  *Metrics
}

// newRetryDialer clamps its inputs: fewer than one attempt means one, and
// non-positive delays fall back to the defaults.
func newRetryDialer(maxRetries int, initial, maxDelay time.Duration, policy *AddrPolicy, m *Metrics) *retryDialer {
	attempts := maxRetries + 1
	if attempts < 1 {
		attempts = 1
	}
	if initial <= 0 {
		initial = defaultRetryInitialDelay
	}
	if maxDelay <= 0 {
		maxDelay = defaultRetryMaxDelay
	}
	return &retryDialer{
		dialer:   net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second},
		attempts: attempts,
		initial:  initial,
		max:      maxDelay,
		policy:   policy,
		metrics:  m,
	}
}

// backoff returns the delay before retry n (0-based): initial, doubled each
// time, capped at max.
func (d *retryDialer) backoff(n int) time.Duration {
	delay := d.initial
	for i := 0; i < n && delay < d.max; i++ {
		delay *= 2
	}
	return min(delay, d.max)
}

func (d *retryDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		// Only the reduced mode dials names; each attempt resolves anew
		// (DNS errors are dial-class and retried, as upstream does).
		return d.dialName(ctx, network, addr)
	}
	if !d.policy.Permit(ap) {
		return nil, fmt.Errorf("dial %s: %w", addr, errDialForbidden)
	}
	return d.dialRetrying(ctx, network, func() ([]string, error) { return []string{addr}, nil })
}

// dialName resolves host:port and dials the addresses the policy permits,
// in the resolver's order: a name is no way around the address-class rules.
func (d *retryDialer) dialName(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, errDialForbidden)
	}
	pn, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, errDialForbidden)
	}
	return d.dialRetrying(ctx, network, func() ([]string, error) {
		ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, err
		}
		var out []string
		for _, ip := range ips {
			if ap := netip.AddrPortFrom(ip.Unmap(), uint16(pn)); d.policy.Permit(ap) {
				out = append(out, ap.String())
			}
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("dial %s: %w", addr, errDialForbidden)
		}
		return out, nil
	})
}

// dialRetrying dials the addresses from targets() up to d.attempts times
// with backoff; within one attempt the addresses are tried in order.
func (d *retryDialer) dialRetrying(ctx context.Context, network string, targets func() ([]string, error)) (net.Conn, error) {
	var lastErr error
	for n := 0; n < d.attempts; n++ {
		if n > 0 {
			if d.metrics != nil {
				d.metrics.upstreamRetries.WithLabelValues(namespaceLabel(ctx)).Inc()
			}
			t := time.NewTimer(d.backoff(n - 1))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, lastErr
			}
		}
		addrs, err := targets()
		if errors.Is(err, errDialForbidden) {
			return nil, err
		}
		if err != nil {
			lastErr = err
		}
		for _, addr := range addrs {
			c, err := d.dialer.DialContext(ctx, network, addr)
			if err == nil {
				return c, nil
			}
			lastErr = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

// TransportOptions carries the knobs of the upstream transports.
type TransportOptions struct {
	ResponseHeaderTimeout time.Duration
	MaxRetries            int
	RetryInitialDelay     time.Duration
	RetryMaxDelay         time.Duration
}

// newUpstreamTransports builds the HTTP/1.1 transport used for ordinary and
// upgrade requests and the h2c (prior-knowledge HTTP/2) transport used for
// gRPC. Both ignore HTTP_PROXY on purpose: a proxy would dial on our behalf
// to addresses the policy never saw.
func newUpstreamTransports(cfg TransportOptions, policy *AddrPolicy, m *Metrics) (h1, h2c *http.Transport) {
	d := newRetryDialer(cfg.MaxRetries, cfg.RetryInitialDelay, cfg.RetryMaxDelay, policy, m)
	h1 = &http.Transport{
		Proxy:                 nil,
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     false,
		MaxIdleConns:          512,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		ResponseHeaderTimeout: cfg.ResponseHeaderTimeout,
		// Bodies are proxied as-is; transparently decompressing would
		// change what the client receives.
		DisableCompression: true,
		WriteBufferSize:    32 << 10,
		ReadBufferSize:     32 << 10,
	}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	h2c = &http.Transport{
		Proxy:       nil,
		DialContext: d.DialContext,
		Protocols:   &p,
		// No ResponseHeaderTimeout: a gRPC server may hold response
		// headers until its first streamed message.
		IdleConnTimeout:    90 * time.Second,
		DisableCompression: true,
	}
	return h1, h2c
}

func isTLSError(err error) bool {
	var rh tls.RecordHeaderError
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var ci x509.CertificateInvalidError
	return errors.As(err, &rh) || errors.As(err, &cv) || errors.As(err, &ua) ||
		errors.As(err, &hn) || errors.As(err, &ci)
}
