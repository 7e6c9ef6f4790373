package platform

import (
	"archive/tar"
	"context"
	"debug/elf"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"sigs.k8s.io/agent-sandbox/internal/images"
)

// entries lists the files of every layer of an image archive by path.
func entries(t *testing.T, archive string) map[string]*tar.Header {
	t.Helper()
	img, err := tarball.ImageFromPath(archive, nil)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*tar.Header{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			out[strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")] = h
		}
		_ = rc.Close()
	}
	return out
}

// TestImageSpec checks the image layout around a stand-in binary: non-root
// user, entrypoint, no shell, and only the few files a static binary needs.
func TestImageSpec(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.WriteFile(bin, []byte("not really a binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range Names {
		t.Run(name, func(t *testing.T) {
			spec, err := ImageSpec(name, Options{Repo: "localhost/agent-sandbox", Tag: "dev", Commit: "abc"}, bin)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, name+".tar")
			if _, err := images.WriteTarball(spec, path); err != nil {
				t.Fatal(err)
			}
			info, err := images.Inspect(path)
			if err != nil {
				t.Fatal(err)
			}
			if want := "localhost/agent-sandbox/" + name + ":dev"; info.Ref != want {
				t.Errorf("ref = %q, want %q", info.Ref, want)
			}
			cfg := info.Config.Config
			if cfg.User != "65532:65532" {
				t.Errorf("user = %q, want 65532:65532", cfg.User)
			}
			if len(cfg.Entrypoint) != 1 || !strings.HasPrefix(cfg.Entrypoint[0], "/usr/local/bin/") {
				t.Errorf("entrypoint = %v", cfg.Entrypoint)
			}
			if cfg.Labels["org.opencontainers.image.revision"] != "abc" || cfg.Labels["org.opencontainers.image.version"] != "dev" {
				t.Errorf("labels = %v", cfg.Labels)
			}
			files := entries(t, path)
			var names []string
			for n, h := range files {
				names = append(names, n)
				if h.Typeflag == tar.TypeReg && h.Mode&0o022 != 0 {
					t.Errorf("%s is group/world writable (%o)", n, h.Mode)
				}
			}
			for _, shell := range []string{"bin/sh", "bin/bash", "bin/busybox", "usr/bin/env"} {
				if files[shell] != nil {
					t.Errorf("image has %s; it must have no shell", shell)
				}
			}
			ep := strings.TrimPrefix(cfg.Entrypoint[0], "/")
			if h := files[ep]; h == nil || h.Mode&0o111 == 0 || h.Uid != 0 {
				t.Errorf("entrypoint %s missing, not executable or not root-owned: %+v", ep, h)
			}
			if h := files["tmp"]; h == nil || h.Mode&0o1000 == 0 {
				t.Errorf("/tmp missing or not sticky: %+v", h)
			}
			if files["etc/ssl/certs/ca-certificates.crt"] == nil || files["etc/passwd"] == nil {
				t.Errorf("CA bundle or /etc/passwd missing; files: %v", names)
			}
		})
	}
	if _, err := ImageSpec("sandboxd", Options{}, bin); err == nil {
		t.Error("ImageSpec accepted an unknown image")
	}
	if _, err := ImageSpec("router", Options{CABundle: filepath.Join(dir, "missing.crt")}, bin); err == nil {
		t.Error("ImageSpec accepted a missing CA bundle")
	}
}

// TestBuild compiles the real controller and router, checks that the
// binaries are static and stamped with the version, and that a rebuild gives
// byte-identical archives.
func TestBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the controller and router images twice (minutes): skipped under -short, run by `make test-integration`")
	}
	moduleDir, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cache := t.TempDir()
	o := Options{ModuleDir: moduleDir, CacheDir: cache, Tag: "v0.0.0-test", Commit: "0123abc"}
	first, err := Build(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != len(Names) {
		t.Fatalf("built %d images, want %d", len(first), len(Names))
	}
	for _, b := range first {
		bin := filepath.Join(cache, "bin", binaries[b.Name].file)
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s is dynamically linked; the image has no libc", bin)
			}
		}
		_ = f.Close()
		out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "v0.0.0-test") {
			t.Errorf("%s --version: %v\n%s", bin, err, out)
		}
		if want := "localhost/agent-sandbox/" + b.Name + ":v0.0.0-test"; b.Ref != want {
			t.Errorf("ref %q, want %q", b.Ref, want)
		}
	}
	o.OutDir = t.TempDir()
	again, err := Build(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	for i := range first {
		if first[i].Digest != again[i].Digest {
			t.Errorf("rebuild of %s: digest %s, then %s", first[i].Name, first[i].Digest, again[i].Digest)
		}
	}
}
