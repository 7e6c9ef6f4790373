package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"sigs.k8s.io/agent-sandbox/internal/cli"
	"sigs.k8s.io/agent-sandbox/internal/localcluster"
)

// TestGVisorPlatformIsTheOneRunning: the platform `up` chose (kvm when its
// smoke run passes, else systrap) is in runsc.toml, is what a new gVisor
// pod's sandbox really runs on (its runsc-sandbox process, found by the
// pod's UID), and is what `agent-sandbox status` reports.
func TestGVisorPlatformIsTheOneRunning(t *testing.T) {
	chosen, err := cluster.Config().ReadPlatformChoice()
	if err != nil {
		t.Fatal(err)
	}
	if chosen == nil {
		t.Fatal("up recorded no gVisor platform choice")
	}
	t.Logf("up chose %s: %s", chosen.Platform, chosen.Reason)
	if chosen.Platform != localcluster.PlatformKVM && chosen.Platform != localcluster.PlatformSystrap {
		t.Fatalf("chosen platform %q", chosen.Platform)
	}
	toml, err := os.ReadFile(cluster.RunscConfigPath())
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("platform = %q\n", chosen.Platform); !strings.Contains(string(toml), want) {
		t.Fatalf("runsc.toml does not say %q:\n%s", want, toml)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := "e2e-platform"
	deletePod(t, name)
	if _, err := clientset.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, webPod(name, "gvisor"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deletePod(t, name) })
	pod := waitPodReady(ctx, t, name)
	args, err := sandboxProcessArgs(pod.UID)
	if err != nil {
		t.Fatal(err)
	}
	if want := "--platform=" + chosen.Platform; !containsArg(args, want) {
		t.Fatalf("pod %s's sandbox runs without %s: %q", name, want, args)
	}
	// The sandbox answers, so it really runs on that platform.
	if out := execInPod(ctx, t, name, "echo", "alive"); strings.TrimSpace(out) != "alive" {
		t.Fatalf("exec in the sandbox: %q", out)
	}

	cmd := cli.NewRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"status"})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("status: %v\n%s", err, out.String())
	}
	if want := fmt.Sprintf("gVisor platform: %s (%s)", chosen.Platform, chosen.Reason); !strings.Contains(out.String(), want) {
		t.Fatalf("status does not say %q:\n%s", want, out.String())
	}
}

// TestGVisorPlatformFallback runs the decision of `up` with the real runsc
// and records of its own (the running cluster's are left alone, and none
// is there to reuse, so the real probe runs): a KVM device
// that cannot be opened must give systrap, and so must a kvm that hangs; an
// explicit kvm request that cannot be met is an error, never a silent
// systrap. With the real /dev/kvm the decision must match the cluster's.
func TestGVisorPlatformFallback(t *testing.T) {
	decide := func(t *testing.T, mutate func(*localcluster.Config)) (localcluster.PlatformChoice, error) {
		t.Helper()
		cfg := localcluster.DefaultConfig()
		cfg.RunDir = t.TempDir()
		cfg.StateDir = t.TempDir() // nor the choice the cluster keeps across `down`
		cfg.GVisorPlatform = localcluster.PlatformAuto
		mutate(&cfg)
		start := time.Now()
		pc, err := localcluster.New(cfg, nil).ChooseGVisorPlatform(context.Background())
		t.Logf("decided in %.1fs: %+v, err %v", time.Since(start).Seconds(), pc, err)
		return pc, err
	}
	missing := func(cfg *localcluster.Config) { cfg.KVMDevice = filepath.Join(t.TempDir(), "no-kvm") }

	t.Run("unusable device falls back to systrap", func(t *testing.T) {
		pc, err := decide(t, missing)
		if err != nil {
			t.Fatal(err)
		}
		if pc.Platform != localcluster.PlatformSystrap || !strings.Contains(pc.Reason, "fallback: KVM unusable") {
			t.Fatalf("got %+v, want the systrap fallback", pc)
		}
	})
	t.Run("explicit kvm without a device is an error", func(t *testing.T) {
		_, err := decide(t, func(cfg *localcluster.Config) { missing(cfg); cfg.GVisorPlatform = localcluster.PlatformKVM })
		if err == nil || !strings.Contains(err.Error(), "kvm requested") {
			t.Fatalf("want an error naming the kvm request, got %v", err)
		}
	})
	t.Run("real device matches the cluster's choice", func(t *testing.T) {
		live, err := cluster.Config().ReadPlatformChoice()
		if err != nil || live == nil {
			t.Fatalf("no live choice: %v", err)
		}
		// Same timeout as up's, so a slow-but-working kvm is judged alike.
		start := time.Now()
		pc, err := decide(t, func(*localcluster.Config) {})
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > 30*time.Second {
			t.Fatalf("the decision took %s: a hung probe must be cut at its timeout", took)
		}
		if pc.Platform != live.Platform {
			t.Fatalf("decided %s (%s), but the cluster runs %s (%s)", pc.Platform, pc.Reason, live.Platform, live.Reason)
		}
		if pc.Platform == localcluster.PlatformSystrap && !strings.Contains(pc.Reason, "fallback") {
			t.Fatalf("systrap without a fallback reason: %+v", pc)
		}
		if n := kvmProbeLeftovers(t); n > 0 {
			t.Fatalf("%d probe processes left behind", n)
		}
	})
}

// sandboxProcessArgs is the command line of the runsc sandbox ("runsc-sandbox
// ... boot") of the pod with this UID: the shim names the pod's log dir,
// <namespace>_<name>_<uid>, on it.
func sandboxProcessArgs(uid types.UID) ([]string, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(data) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
		if args[0] != "runsc-sandbox" || !containsArg(args, "boot") || !strings.Contains(string(data), "_"+string(uid)+"/") {
			continue
		}
		return args, nil
	}
	return nil, fmt.Errorf("no runsc-sandbox process for pod UID %s", uid)
}

func containsArg(args []string, want string) bool {
	for _, a := range args {
		if a == want {
			return true
		}
	}
	return false
}

// kvmProbeLeftovers counts processes still running from a probe's root.
func kvmProbeLeftovers(t *testing.T) int {
	t.Helper()
	n := 0
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(data, []byte("agent-sandbox-platform-probe-")) {
			n++
		}
	}
	return n
}
