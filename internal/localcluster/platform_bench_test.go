package localcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkGVisorPlatforms compares gVisor's platforms on this machine with
// the cached runsc, outside Kubernetes (as root, in runsc roots of its own):
//
//	start:    `runsc do /bin/true`, a sandbox booted and torn down per op
//	exec:     `runsc exec <sandbox> /bin/true` into a running sandbox
//	python:   `runsc exec <sandbox> python3 -c pass`
//	syscall:  getppid() in a loop inside the sandbox; ns/syscall is measured
//	          in the guest, so the exec around it does not count
//
// A platform whose smoke run (the probe `up` uses) fails is reported as
// skipped, with the probe's error: there is nothing to measure.
//
//	sudo go test -run '^$' -bench GVisorPlatforms -benchtime 20x ./internal/localcluster/
func BenchmarkGVisorPlatforms(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Fatal("runsc needs root")
	}
	bins, err := DefaultConfig().locateBinaries()
	if err != nil {
		b.Fatal(err)
	}
	runsc := bins.Runsc
	for _, platform := range []string{PlatformSystrap, "ptrace", PlatformKVM} {
		b.Run(platform, func(b *testing.B) {
			if r := probeRunsc(context.Background(), runsc, platform, defaultKVMDevice, defaultKVMProbeTimeout); r.Err != nil {
				b.Skipf("%s does not run here: %v", platform, r.Err)
			}
			b.Run("start", func(b *testing.B) {
				for b.Loop() {
					if r := probeRunsc(context.Background(), runsc, platform, defaultKVMDevice, time.Minute); r.Err != nil {
						b.Fatal(r.Err)
					}
				}
			})
			sb := startBenchSandbox(b, runsc, platform)
			b.Run("exec", func(b *testing.B) {
				for b.Loop() {
					sb.exec(b, "/bin/true")
				}
			})
			b.Run("python", func(b *testing.B) {
				for b.Loop() {
					sb.exec(b, "/usr/bin/python3", "-c", "pass")
				}
			})
			b.Run("syscall", func(b *testing.B) {
				const n = 200000
				prog := fmt.Sprintf("import os,time\nt=time.perf_counter_ns()\nfor _ in range(%d): os.getppid()\nprint((time.perf_counter_ns()-t)/%d)", n, n)
				var sum float64
				for b.Loop() {
					out := sb.exec(b, "/usr/bin/python3", "-c", prog)
					ns, err := strconv.ParseFloat(strings.TrimSpace(out), 64)
					if err != nil {
						b.Fatalf("python printed %q: %v", out, err)
					}
					sum += ns
				}
				b.ReportMetric(sum/float64(b.N), "ns/getppid")
			})
		})
	}
}

type benchSandbox struct {
	runsc, root, platform, id string
}

// startBenchSandbox runs a detached sandbox with the host's / as its
// read-only root (overlaid in memory) and sleep as its init.
func startBenchSandbox(b *testing.B, runsc, platform string) *benchSandbox {
	b.Helper()
	dir := b.TempDir()
	bundle := filepath.Join(dir, "bundle")
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		b.Fatal(err)
	}
	spec := map[string]any{
		"ociVersion": "1.0.0",
		"process": map[string]any{
			"user": map[string]any{"uid": 0, "gid": 0},
			"args": []string{"/bin/sleep", "3600"},
			"env":  []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
			"cwd":  "/",
		},
		"root":     map[string]any{"path": "/", "readonly": true},
		"hostname": "platform-bench",
		"mounts": []map[string]any{
			{"destination": "/proc", "type": "proc", "source": "proc"},
			{"destination": "/tmp", "type": "tmpfs", "source": "tmpfs"},
		},
		"linux": map[string]any{"namespaces": []map[string]string{{"type": "pid"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}}},
	}
	data, err := json.Marshal(spec)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o644); err != nil {
		b.Fatal(err)
	}
	sb := &benchSandbox{runsc: runsc, root: filepath.Join(dir, "state"), platform: platform,
		id: fmt.Sprintf("platform-bench-%s-%d", platform, os.Getpid())}
	// The detached sandbox keeps runsc's stdio: a file, so no pipe is
	// left open for a reader to wait on.
	logf, err := os.Create(filepath.Join(dir, "run.log"))
	if err != nil {
		b.Fatal(err)
	}
	defer logf.Close()
	run := sb.cmd("run", "-detach", "-bundle", bundle, sb.id)
	run.Stdout, run.Stderr = logf, logf
	b.Cleanup(func() {
		_ = sb.cmd("delete", "-force", sb.id).Run()
		_ = unmountUnder(dir)
	})
	if err := run.Run(); err != nil {
		out, _ := os.ReadFile(logf.Name())
		b.Fatalf("runsc run: %v: %s", err, out)
	}
	return sb
}

func (s *benchSandbox) cmd(args ...string) *exec.Cmd {
	return exec.Command(s.runsc, append([]string{"--root=" + s.root, "--network=none", "--overlay2=root:memory", "--platform=" + s.platform}, args...)...)
}

func (s *benchSandbox) exec(b *testing.B, args ...string) string {
	b.Helper()
	out, err := s.cmd(append([]string{"exec", s.id}, args...)...).Output()
	if err != nil {
		b.Fatalf("runsc exec %v: %v", args, err)
	}
	return string(out)
}
