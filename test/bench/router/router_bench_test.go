package routerbench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"sigs.k8s.io/agent-sandbox/internal/router"
)

const sandboxName = "bench"

var smallBody = []byte(`{"stdout":"hello\n","stderr":"","exit_code":0}`)

// startBackend serves a small JSON answer on /small and an endless stream
// of zeros on /stream?bytes=N; /upload discards and counts its body.
func startBackend(b *testing.B) netip.AddrPort {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	zeros := make([]byte, 256<<10)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/small":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(smallBody)
		case "/stream":
			n, _ := strconv.ParseInt(r.URL.Query().Get("bytes"), 10, 64)
			w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
			for n > 0 {
				k := min(n, int64(len(zeros)))
				if _, err := w.Write(zeros[:k]); err != nil {
					return
				}
				n -= k
			}
		case "/upload":
			n, _ := io.Copy(io.Discard, r.Body)
			fmt.Fprint(w, n)
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Close() })
	return netip.MustParseAddrPort(ln.Addr().String())
}

// startRouter runs the production handler stack in front of be.
func startRouter(b *testing.B, be netip.AddrPort) string {
	b.Helper()
	idx := router.NewIndex()
	idx.UpsertSandbox(&router.SandboxRecord{Key: router.SandboxKey{Namespace: "default", Name: sandboxName},
		UID: "u1", ResourceVersion: "1", Ready: true, PodIPs: []string{be.Addr().String()}, Ports: []uint16{be.Port()}})
	idx.UpsertPod(&router.PodRecord{Namespace: "default", Name: sandboxName, UID: "p1", OwnerUID: "u1",
		Ready: true, PodIPs: []string{be.Addr().String()}})
	metrics := router.NewMetrics(router.BuildInfo{GitVersion: "bench"})
	policy := router.NewAddrPolicy(true) // loopback backends, as in sidecar/test mode
	proxy := router.NewProxyHandler(router.ProxyOptions{
		AllowLoopback: true, Authorizer: router.AllowAll{}, Resolver: idx, Policy: policy,
		Idle: router.NewIdleTracker(), Metrics: metrics,
		ProxyTimeout: 180 * time.Second, ReadyTimeout: 10 * time.Second,
		Transport: router.TransportOptions{ResponseHeaderTimeout: 30 * time.Second, MaxRetries: 3},
		Log:       logr.Discard(),
	})
	access := zap.New(zap.WriteTo(io.Discard), zap.UseDevMode(false)).WithName("access")
	srv := router.NewServer(router.ServerOptions{
		HTTPAddr: "127.0.0.1:0", ShutdownTimeout: 5 * time.Second, Proxy: proxy, Drain: proxy.Drain,
		Wrap: func(next http.Handler) http.Handler {
			return router.Instrument(next, router.InstrumentOptions{Metrics: metrics, AccessLog: &access})
		},
		Metrics: metrics, Log: logr.Discard(),
	})
	if err := srv.Bind(); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = srv.Serve(ctx); close(done) }()
	b.Cleanup(func() { cancel(); <-done })
	return srv.Addr(router.ListenerHTTP).String()
}

func newClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxIdleConns: 256,
		DisableCompression: true}}
}

func routedRequest(url string, be netip.AddrPort) *http.Request {
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("X-Sandbox-ID", sandboxName)
	req.Header.Set("X-Sandbox-Port", strconv.Itoa(int(be.Port())))
	req.Header.Set("X-Sandbox-Pod-IP", be.Addr().String())
	return req
}

func doOnce(b *testing.B, c *http.Client, req *http.Request) {
	b.Helper()
	resp, err := c.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		b.Fatalf("status %d", resp.StatusCode)
	}
}

func percentile(d []time.Duration, p float64) time.Duration {
	slices.Sort(d)
	return d[min(len(d)-1, int(float64(len(d))*p))]
}

// BenchmarkAddedLatency alternates a direct request and a routed request to
// the same backend (so both see the same machine load) and reports p50/p99
// of each and the difference, in microseconds. One op = one pair.
func BenchmarkAddedLatency(b *testing.B) {
	be := startBackend(b)
	addr := startRouter(b, be)
	c := newClient()
	direct, _ := http.NewRequest("GET", "http://"+be.String()+"/small", nil)
	routed := routedRequest("http://"+addr+"/small", be)
	for range 200 { // warm connections and pools
		doOnce(b, c, direct)
		doOnce(b, c, routed)
	}
	var dd, rd []time.Duration
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		doOnce(b, c, direct)
		t1 := time.Now()
		doOnce(b, c, routed)
		t2 := time.Now()
		dd = append(dd, t1.Sub(t0))
		rd = append(rd, t2.Sub(t1))
	}
	b.StopTimer()
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	d50, d99 := percentile(dd, .5), percentile(dd, .99)
	r50, r99 := percentile(rd, .5), percentile(rd, .99)
	b.ReportMetric(us(d50), "direct-p50-µs")
	b.ReportMetric(us(d99), "direct-p99-µs")
	b.ReportMetric(us(r50), "router-p50-µs")
	b.ReportMetric(us(r99), "router-p99-µs")
	b.ReportMetric(us(r50-d50), "added-p50-µs")
	b.ReportMetric(us(r99-d99), "added-p99-µs")
}

// BenchmarkThroughput drives small requests from 32 concurrent clients and
// reports requests per second, through the router and directly.
func BenchmarkThroughput(b *testing.B) {
	be := startBackend(b)
	addr := startRouter(b, be)
	for _, mode := range []string{"direct", "router"} {
		b.Run(mode, func(b *testing.B) {
			c := newClient()
			mk := func() *http.Request {
				if mode == "direct" {
					r, _ := http.NewRequest("GET", "http://"+be.String()+"/small", nil)
					return r
				}
				return routedRequest("http://"+addr+"/small", be)
			}
			b.SetParallelism(16) // 16 x GOMAXPROCS(2) = 32 clients
			start, cpu0 := time.Now(), cpuTime()
			b.RunParallel(func(pb *testing.PB) {
				req := mk()
				for pb.Next() {
					doOnce(b, c, req)
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
			// CPU per request is what the shared machine's load cannot skew:
			// client, backend (and router) all run in this process, so
			// router minus direct is the router's own cost.
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/req")
		})
	}
}

// rssKiB reads a field (VmRSS, VmHWM) of /proc/self/status.
func rssKiB(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, field+":") {
			f := strings.Fields(line)
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return -1
}

// resetPeakRSS restarts VmHWM from the current RSS (Linux >= 4.0).
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// Benchmark1GiBStream streams 1 GiB through the router, download and upload,
// and reports throughput and the process's peak RSS during the transfer
// (client, router and backend all live in this process, so this is an
// upper bound for the router alone).
func Benchmark1GiBStream(b *testing.B) {
	const size = 1 << 30
	be := startBackend(b)
	addr := startRouter(b, be)
	c := newClient()
	for _, dir := range []string{"download", "upload"} {
		b.Run(dir, func(b *testing.B) {
			b.SetBytes(size)
			runtime.GC()
			before := rssKiB("VmRSS")
			resetPeakRSS()
			for b.Loop() {
				var req *http.Request
				if dir == "download" {
					req = routedRequest("http://"+addr+"/stream?bytes="+strconv.Itoa(size), be)
				} else {
					req = routedRequest("http://"+addr+"/upload", be)
					req.Method = "POST"
					req.Body = io.NopCloser(io.LimitReader(zeroReader{}, size))
					req.ContentLength = size
				}
				resp, err := c.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				n, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if dir == "download" && n != size {
					b.Fatalf("got %d bytes", n)
				}
			}
			b.ReportMetric(float64(rssKiB("VmHWM"))/1024, "peak-RSS-MiB")
			b.ReportMetric(float64(before)/1024, "RSS-before-MiB")
		})
	}
}

// cpuTime is the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
