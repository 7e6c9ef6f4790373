package sandboxd

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	processv1 "sigs.k8s.io/agent-sandbox/api/proto/process/v1"
	"sigs.k8s.io/agent-sandbox/internal/sandboxd"
	"sigs.k8s.io/agent-sandbox/internal/sandboxd/legacy"
)

type daemon struct {
	rest, legacy string
	grpc         processv1.ProcessServiceClient
	root         string
}

// startDaemon serves a full sandboxd on loopback listeners in-process.
func startDaemon(b *testing.B) *daemon {
	b.Helper()
	root := filepath.Join(b.TempDir(), "workspace")
	d, err := sandboxd.New(sandboxd.Config{
		ListenHost: "127.0.0.1", RESTPort: 8080, GRPCPort: 9090, LegacyPort: 8888,
		RootDir: root, ShutdownTimeout: 5 * time.Second, HTTPIdleTimeout: time.Minute,
		ExecTimeout: legacy.ExecTimeout{D: time.Minute, Text: "60.0"}, ExecDrainGrace: time.Second,
		MaxOutputBytes: 16 << 20,
	})
	if err != nil {
		b.Fatal(err)
	}
	listen := func() net.Listener {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		return l
	}
	ls := sandboxd.Listeners{REST: listen(), GRPC: listen(), Legacy: listen()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.ServeListeners(ctx, ls) }()
	b.Cleanup(func() {
		cancel()
		<-done //nolint:errcheck // shutdown; its result is not under test
		_ = d.Close()
	})
	conn, err := grpc.NewClient(ls.GRPC.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	return &daemon{
		rest: "http://" + ls.REST.Addr().String(), legacy: "http://" + ls.Legacy.Addr().String(),
		grpc: processv1.NewProcessServiceClient(conn), root: root,
	}
}

// reportLatency adds p50/p99 (microseconds) of the samples to the result.
func reportLatency(b *testing.B, samples []time.Duration) {
	b.Helper()
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	q := func(p float64) float64 {
		return float64(samples[min(len(samples)-1, int(p*float64(len(samples))))].Microseconds())
	}
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
}

// BenchmarkLegacyExecuteTrue measures POST /execute {"command":"true"} on
// a keep-alive loopback connection: JSON, shlex, fork/exec in a new
// session, wait, JSON back.
func BenchmarkLegacyExecuteTrue(b *testing.B) {
	d := startDaemon(b)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	body := []byte(`{"command":"true"}`)
	samples := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		r, err := client.Post(d.legacy+"/execute", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		out, _ := io.ReadAll(r.Body)
		r.Body.Close()
		samples = append(samples, time.Since(start))
		if string(out) != `{"stdout":"","stderr":"","exit_code":0}` {
			b.Fatalf("response %s", out)
		}
	}
	reportLatency(b, samples)
}

// BenchmarkGRPCExecuteTrue is the same round trip through the process API.
func BenchmarkGRPCExecuteTrue(b *testing.B) {
	d := startDaemon(b)
	req := &processv1.ExecuteRequest{Config: &processv1.ProcessConfig{Command: []string{"true"}}}
	samples := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		res, err := d.grpc.Execute(context.Background(), req)
		samples = append(samples, time.Since(start))
		if err != nil || res.GetExitCode() != 0 {
			b.Fatalf("%v %v", res, err)
		}
	}
	reportLatency(b, samples)
}

var sizes = []struct {
	name string
	n    int
}{{"1MiB", 1 << 20}, {"100MiB", 100 << 20}}

// BenchmarkFilePut measures PUT /v1/files (atomic write with fsync).
func BenchmarkFilePut(b *testing.B) {
	for _, sz := range sizes {
		b.Run(sz.name, func(b *testing.B) {
			d := startDaemon(b)
			payload := bytes.Repeat([]byte("0123456789abcdef"), sz.n/16)
			b.SetBytes(int64(sz.n))
			b.ResetTimer()
			for b.Loop() {
				req, _ := http.NewRequest("PUT", d.rest+"/v1/files/blob.bin", bytes.NewReader(payload))
				r, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, r.Body)
				r.Body.Close()
				if r.StatusCode != http.StatusNoContent {
					b.Fatalf("PUT status %d", r.StatusCode)
				}
			}
		})
	}
}

// BenchmarkFileGet measures GET /v1/files of a file in the page cache.
func BenchmarkFileGet(b *testing.B) {
	for _, sz := range sizes {
		b.Run(sz.name, func(b *testing.B) {
			d := startDaemon(b)
			if err := os.WriteFile(filepath.Join(d.root, "blob.bin"), bytes.Repeat([]byte("x"), sz.n), 0o644); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(sz.n))
			b.ResetTimer()
			for b.Loop() {
				r, err := http.Get(d.rest + "/v1/files/blob.bin")
				if err != nil {
					b.Fatal(err)
				}
				n, _ := io.Copy(io.Discard, r.Body)
				r.Body.Close()
				if n != int64(sz.n) {
					b.Fatalf("read %d bytes", n)
				}
			}
		})
	}
}

// BenchmarkLegacyUploadDownload measures the legacy API's multipart upload
// and download of the same sizes.
func BenchmarkLegacyUploadDownload(b *testing.B) {
	for _, sz := range sizes {
		b.Run("upload-"+sz.name, func(b *testing.B) {
			d := startDaemon(b)
			payload := bytes.Repeat([]byte("x"), sz.n)
			const boundary = "benchboundary"
			head := "--" + boundary + "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"blob.bin\"\r\n\r\n"
			tail := "\r\n--" + boundary + "--\r\n"
			b.SetBytes(int64(sz.n))
			b.ResetTimer()
			for b.Loop() {
				body := io.MultiReader(strings.NewReader(head), bytes.NewReader(payload), strings.NewReader(tail))
				r, err := http.Post(d.legacy+"/upload", "multipart/form-data; boundary="+boundary, body)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, r.Body)
				r.Body.Close()
				if r.StatusCode != 200 {
					b.Fatalf("upload status %d", r.StatusCode)
				}
			}
		})
		b.Run("download-"+sz.name, func(b *testing.B) {
			d := startDaemon(b)
			if err := os.WriteFile(filepath.Join(d.root, "blob.bin"), bytes.Repeat([]byte("x"), sz.n), 0o644); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(sz.n))
			b.ResetTimer()
			for b.Loop() {
				r, err := http.Get(d.legacy + "/download/blob.bin")
				if err != nil {
					b.Fatal(err)
				}
				n, _ := io.Copy(io.Discard, r.Body)
				r.Body.Close()
				if n != int64(sz.n) {
					b.Fatalf("read %d bytes", n)
				}
			}
		})
	}
}

// BenchmarkIdleRSS starts the real static binary, waits until it is
// healthy and idle, and reports its resident set size. The loop only
// repeats the measurement; the metric is the last one.
func BenchmarkIdleRSS(b *testing.B) {
	bin := filepath.Join(b.TempDir(), "sandboxd")
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "sigs.k8s.io/agent-sandbox/cmd/sandboxd")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	var rssKiB int
	b.ResetTimer()
	for b.Loop() {
		rssKiB = idleRSS(b, bin)
	}
	b.ReportMetric(float64(rssKiB), "RSS-KiB")
}

func idleRSS(b *testing.B, bin string) int {
	b.Helper()
	ports := make([]int, 3)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
	}
	cmd := exec.Command(bin, "--listen-host=127.0.0.1", "--root-dir="+filepath.Join(b.TempDir(), "ws"),
		"--rest-port="+strconv.Itoa(ports[0]), "--grpc-port="+strconv.Itoa(ports[1]), "--legacy-port="+strconv.Itoa(ports[2]))
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	health := fmt.Sprintf("http://127.0.0.1:%d/v1/health", ports[0])
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := http.Get(health)
		if err == nil {
			r.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			b.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(time.Second)
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kib, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				b.Fatal(err)
			}
			return kib
		}
	}
	b.Fatal("no VmRSS")
	return 0
}
