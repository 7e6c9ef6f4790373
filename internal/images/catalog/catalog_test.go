package catalog

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/agent-sandbox/internal/images"
	"sigs.k8s.io/agent-sandbox/internal/testenv/freeport"
)

// moduleDir is the repository root, two levels up from this package.
func moduleDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d, "go.mod")); err != nil {
		t.Fatalf("no go.mod in %s", d)
	}
	return d
}

func sum(t *testing.T, p string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// buildTwice builds one image twice into separate output directories and
// checks that the archives are byte-identical.
func buildTwice(t *testing.T, o Options, name string) (Built, *images.Info) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var first Built
	for i := range 2 {
		o.OutDir = t.TempDir()
		built, err := Build(ctx, o, name)
		if err != nil {
			t.Fatal(err)
		}
		b := built[0]
		if _, err := os.Stat(b.Path); err != nil {
			t.Fatalf("archive missing: %v", err)
		}
		if i == 0 {
			first = b
			continue
		}
		if b.Digest != first.Digest || sum(t, b.Path) != sum(t, first.Path) {
			t.Fatalf("rebuild of %s differs: %v vs %v", name, b.Digest, first.Digest)
		}
	}
	info, err := images.Inspect(first.Path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Digest != first.Digest || info.Ref != first.Ref {
		t.Fatalf("inspect: %v %q, built %v %q", info.Digest, info.Ref, first.Digest, first.Ref)
	}
	return first, info
}

func checkRuntimeConfig(t *testing.T, info *images.Info, workdir string) {
	t.Helper()
	c := info.Config.Config
	if !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/sandboxd"}) || !slices.Equal(c.Cmd, []string{"--root-dir=" + workdir}) {
		t.Errorf("entrypoint %q cmd %q", c.Entrypoint, c.Cmd)
	}
	if c.User != "1000:1000" || c.WorkingDir != workdir {
		t.Errorf("user %q workdir %q", c.User, c.WorkingDir)
	}
	for _, p := range []string{"8080/tcp", "8888/tcp", "9090/tcp"} {
		if _, ok := c.ExposedPorts[p]; !ok {
			t.Errorf("port %s not exposed: %v", p, c.ExposedPorts)
		}
	}
	if !slices.Contains(c.Env, "SANDBOX_BASE_DIR="+workdir) {
		t.Errorf("env %q", c.Env)
	}
}

// extract unpacks all layers of an archive into dir (no whiteouts: the
// images here never delete anything).
func extract(t *testing.T, archive, dir string) {
	t.Helper()
	info, err := images.Inspect(archive)
	if err != nil {
		t.Fatal(err)
	}
	blobs := map[string]bool{}
	for _, l := range info.Manifest.Layers {
		blobs["blobs/sha256/"+l.Digest.Hex] = true
	}
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	layers := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if blobs[h.Name] {
			if layers[h.Name], err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, l := range info.Manifest.Layers {
		cmd := exec.Command("tar", "-xzf", "-", "-C", dir, "--same-owner", "-p")
		cmd.Stdin = strings.NewReader(string(layers["blobs/sha256/"+l.Digest.Hex]))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("extract layer: %v\n%s", err, out)
		}
	}
}

// layerHeaders lists the entries of the archive's last layer.
func layerHeaders(t *testing.T, archive string) map[string]*tar.Header {
	t.Helper()
	dir := t.TempDir()
	info, err := images.Inspect(archive)
	if err != nil {
		t.Fatal(err)
	}
	last := info.Manifest.Layers[len(info.Manifest.Layers)-1].Digest.Hex
	cmd := exec.Command("tar", "-xf", archive, "-C", dir, "blobs/sha256/"+last)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	f, err := os.Open(filepath.Join(dir, "blobs", "sha256", last))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*tar.Header{}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = h
	}
}

// skipShortBuild skips an image build (a go build or a Debian root file
// system: tens of seconds to minutes) in the fast tier.
func skipShortBuild(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds an image: skipped under -short, run by `make test-integration`")
	}
}

func TestSandboxdImage(t *testing.T) {
	skipShortBuild(t)
	o := Options{ModuleDir: moduleDir(t), CacheDir: t.TempDir()}
	b, info := buildTwice(t, o, "sandboxd")
	if b.Ref != "localhost/agent-sandbox/sandboxd:dev" {
		t.Errorf("ref %q", b.Ref)
	}
	checkRuntimeConfig(t, info, "/workspace")
	if len(info.Manifest.Layers) != 1 {
		t.Errorf("%d layers, want 1", len(info.Manifest.Layers))
	}
	hdrs := layerHeaders(t, b.Path)
	if h := hdrs["usr/local/bin/sandboxd"]; h == nil || h.Mode != 0o755 || h.Size < 1<<20 {
		t.Errorf("sandboxd entry %+v", h)
	}
	if h := hdrs["bin/sh"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "busybox" {
		t.Errorf("/bin/sh entry %+v", h)
	}
	if h := hdrs["workspace/"]; h == nil || h.Uid != 1000 || h.Gid != 1000 {
		t.Errorf("/workspace entry %+v", h)
	}
	if h := hdrs["tmp/"]; h == nil || h.Mode != 0o1777 {
		t.Errorf("/tmp entry %+v", h)
	}
	// The daemon in the image is the static binary.
	f, err := elf.Open(filepath.Join(o.CacheDir, "bin", "sandboxd"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatal("sandboxd is dynamically linked")
		}
	}
}

// TestPythonRuntimeImage builds the python-runtime image on the cached
// debootstrap root file system (building that first takes about a minute
// and needs root plus the Debian mirror), checks it, and then runs the
// image's own sandboxd in a chroot as uid 1000 to execute python3 through
// the legacy API.
func TestPythonRuntimeImage(t *testing.T) {
	skipShortBuild(t)
	if os.Geteuid() != 0 {
		t.Skip("debootstrap and chroot need root")
	}
	cache, err := images.CacheDir()
	if err != nil {
		t.Fatal(err)
	}
	// Binaries and archives go to a scratch cache; the root file system
	// comes from (or is added to) the shared one so it is built once.
	scratch := t.TempDir()
	if _, err := images.EnsureRootfs(context.Background(), cache, PythonRootfs, io.Discard); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(scratch, "rootfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{PythonRootfs.Name(), PythonRootfs.Name() + ".ok"} {
		if err := os.Symlink(filepath.Join(cache, "rootfs", n), filepath.Join(scratch, "rootfs", n)); err != nil {
			t.Fatal(err)
		}
	}
	o := Options{ModuleDir: moduleDir(t), CacheDir: scratch}
	b, info := buildTwice(t, o, "python-runtime")
	checkRuntimeConfig(t, info, "/app")
	if len(info.Manifest.Layers) != 2 {
		t.Fatalf("%d layers, want rootfs + files", len(info.Manifest.Layers))
	}

	root := t.TempDir()
	extract(t, b.Path, root)
	if _, err := os.Stat(filepath.Join(root, "usr", "bin", "python3")); err != nil {
		t.Fatalf("python3 missing: %v", err)
	}
	passwd, _ := os.ReadFile(filepath.Join(root, "etc", "passwd"))
	if !strings.Contains(string(passwd), "sandbox:x:1000:1000:") || !strings.HasPrefix(string(passwd), "root:") {
		t.Fatalf("passwd = %s", passwd)
	}
	// A container runtime provides /dev; a bare chroot needs /dev/null for
	// the commands' stdin.
	if err := syscall.Mknod(filepath.Join(root, "dev", "null"), syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(root, "dev", "null"), 0o666); err != nil {
		t.Fatal(err)
	}
	rest, grpcPort, legacy := freeport.T(t), freeport.T(t), freeport.T(t)
	cmd := exec.Command("chroot", "--userspec=1000:1000", root, "/usr/local/bin/sandboxd", "--root-dir=/app",
		"--listen-host=127.0.0.1", fmt.Sprintf("--rest-port=%d", rest), fmt.Sprintf("--grpc-port=%d", grpcPort), fmt.Sprintf("--legacy-port=%d", legacy))
	cmd.Env = append(slices.Clone(info.Config.Config.Env), "SANDBOX_BASE_DIR=/app")
	var logs strings.Builder
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	url := fmt.Sprintf("http://127.0.0.1:%d", legacy)
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := http.Get(url + "/")
		if err == nil {
			r.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandboxd did not start: %v\n%s", err, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	r, err := http.Post(url+"/execute", "application/json",
		strings.NewReader(`{"command":"python3 -c \"import os; print(6*7, os.getuid(), os.getcwd())\""}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if string(body) != `{"stdout":"42 1000 /app\n","stderr":"","exit_code":0}` {
		t.Fatalf("python3 in the image: %s\n%s", body, logs.String())
	}
}
