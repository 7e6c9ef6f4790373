package localcluster

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// registryCluster is a Cluster whose registry listens on a loopback address
// of its own, with every directory in a temporary one; the binary comes from
// hack/registry/build.sh (built on demand, cached).
func registryCluster(t *testing.T) *Cluster {
	t.Helper()
	// Building the registry and running it is the integration tier's job
	// (the message matches testenv.SkipShortNeeds; importing testenv would
	// link controller-runtime into this package's unit binary).
	if testing.Short() {
		t.Skip("needs the registry binary built by hack/registry/build.sh: skipped under -short, run by `make test-integration`")
	}
	out, err := exec.Command("../../hack/registry/build.sh").Output()
	if err != nil {
		t.Fatalf("hack/registry/build.sh: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.CacheDir = filepath.Join(dir, "cache")
	cfg.StateDir, cfg.RunDir = filepath.Join(dir, "state"), filepath.Join(dir, "run")
	cfg.NodeIP = netip.MustParseAddr("127.0.0.213")
	if err := os.MkdirAll(filepath.Dir(cfg.registryBinary()), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(lines[len(lines)-1], "registry"), cfg.registryBinary()); err != nil {
		t.Fatal(err)
	}
	c := New(cfg, func(s string) { t.Log(s) })
	t.Cleanup(c.StopRegistry)
	return c
}

// TestRegistryStartPushStop runs the real registry, pushes an image to it
// over plain HTTP, reads it back, checks containerd's hosts.toml for it,
// and stops it (no process left behind).
func TestRegistryStartPushStop(t *testing.T) {
	c := registryCluster(t)
	ctx := context.Background()
	if err := c.StartRegistry(ctx); err != nil {
		t.Fatal(err)
	}
	rec, err := c.cfg.readRecord(compRegistry)
	if err != nil || !rec.alive() {
		t.Fatalf("registry record %+v (%v): not running", rec, err)
	}
	// A second start with the same definition keeps the process.
	if err := c.StartRegistry(ctx); err != nil {
		t.Fatal(err)
	}
	if again, _ := c.cfg.readRecord(compRegistry); again.PID != rec.PID {
		t.Errorf("second StartRegistry restarted it: pid %d -> %d", rec.PID, again.PID)
	}

	img, err := random.Image(1024, 2)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(c.cfg.RegistryAddr()+"/agents/test:v1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
		t.Fatalf("push to the registry: %v", err)
	}
	want, _ := img.Digest()
	desc, err := remote.Get(ref, remote.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if desc.Digest != want {
		t.Errorf("registry serves %s, pushed %s", desc.Digest, want)
	}

	hosts, err := os.ReadFile(filepath.Join(c.cfg.configDir(), "certs.d", "127.0.0.213:5000", "hosts.toml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{`server = "http://127.0.0.213:5000"`, `[host."http://127.0.0.213:5000"]`, `capabilities = ["pull", "resolve"]`} {
		if !strings.Contains(string(hosts), w) {
			t.Errorf("hosts.toml lacks %s:\n%s", w, hosts)
		}
	}
	if !strings.Contains(c.containerdConfig(), "config_path = "+`"`+c.cfg.registryHostsDir()+`"`) {
		t.Errorf("containerd config does not point config_path at %s", c.cfg.registryHostsDir())
	}

	c.StopRegistry()
	if rec.alive() {
		t.Errorf("registry pid %d still alive after StopRegistry", rec.PID)
	}
	if _, err := os.Stat(c.cfg.pidFile(compRegistry)); !os.IsNotExist(err) {
		t.Errorf("pid file left behind: %v", err)
	}
}

// TestRegistryMissingBinary: a clear error that names the fix.
func TestRegistryMissingBinary(t *testing.T) {
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.CacheDir, cfg.StateDir, cfg.RunDir = dir, dir, dir
	err := New(cfg, nil).StartRegistry(context.Background())
	if err == nil || !strings.Contains(err.Error(), "hack/registry/build.sh") {
		t.Fatalf("StartRegistry without the binary: %v", err)
	}
}
