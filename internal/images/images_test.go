package images

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// rootfs makes a small directory tree with the kinds of entries a real
// root file system has.
func rootfs(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "usr", "bin"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "usr", "bin", "tool"), []byte("#!/bin/sh\necho tool\n"), 0o755))
	must(os.Link(filepath.Join(dir, "usr", "bin", "tool"), filepath.Join(dir, "usr", "bin", "tool-alias")))
	must(os.Symlink("usr/bin", filepath.Join(dir, "bin")))
	must(os.WriteFile(filepath.Join(dir, "usr", "bin", "suid"), []byte("x"), 0o755))
	// chown clears setuid, so it goes first.
	must(os.Chown(filepath.Join(dir, "usr", "bin", "suid"), 0, 42))
	must(os.Chmod(filepath.Join(dir, "usr", "bin", "suid"), os.ModeSetuid|0o755))
	must(os.MkdirAll(filepath.Join(dir, "dev"), 0o755))
	must(syscall.Mkfifo(filepath.Join(dir, "dev", "fifo"), 0o600))
	return dir
}

func testSpec(t *testing.T) Spec {
	t.Helper()
	src := filepath.Join(t.TempDir(), "payload")
	if err := os.WriteFile(src, []byte("payload from a host file"), 0o600); err != nil {
		t.Fatal(err)
	}
	return Spec{
		Ref:        "localhost/test/image:v1",
		BaseRootfs: rootfs(t),
		Dirs:       []Dir{{Path: "/work", Mode: 0o750, UID: 1000, GID: 1000}, {Path: "/tmp", Mode: 0o777 | os.ModeSticky}},
		Files: []File{
			{Path: "/opt/app/bin/app", Mode: 0o755, Source: src},
			{Path: "/etc/motd", Content: []byte("hello\n")},
		},
		Symlinks:     []Symlink{{Path: "/usr/local/bin/app", Target: "/opt/app/bin/app"}},
		Entrypoint:   []string{"/opt/app/bin/app"},
		Cmd:          []string{"--flag"},
		Env:          []string{"PATH=/bin", "A=b"},
		WorkingDir:   "/work",
		User:         "1000:1000",
		ExposedPorts: []string{"8080/tcp", "9090/tcp"},
		Labels:       map[string]string{"org.example": "yes"},
		Architecture: "amd64",
	}
}

func fileSHA(t *testing.T, p string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

func TestWriteTarballConfigAndReproducibility(t *testing.T) {
	spec := testSpec(t)
	out := t.TempDir()
	a, b := filepath.Join(out, "a.tar"), filepath.Join(out, "b.tar")
	d1, err := WriteTarball(spec, a)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := WriteTarball(spec, b)
	if err != nil {
		t.Fatal(err)
	}
	if d1 != d2 || fileSHA(t, a) != fileSHA(t, b) {
		t.Fatalf("rebuild differs: %v vs %v", d1, d2)
	}
	// The name is archive metadata, not part of the image.
	spec2 := spec
	spec2.Ref = "other:tag"
	if d3, err := WriteTarball(spec2, filepath.Join(out, "c.tar")); err != nil || d3 != d1 {
		t.Fatalf("renamed image digest %v, %v; want %v", d3, err, d1)
	}
	// Content does change it.
	spec2.Files = slices.Clone(spec.Files)
	spec2.Files[1] = File{Path: "/etc/motd", Content: []byte("changed\n")}
	if d4, err := WriteTarball(spec2, filepath.Join(out, "d.tar")); err != nil || d4 == d1 {
		t.Fatalf("changed content kept digest %v (%v)", d4, err)
	}
	entries, _ := os.ReadDir(out)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("temporary file left: %s", e.Name())
		}
	}
	if fi, _ := os.Stat(a); fi.Mode().Perm() != 0o644 {
		t.Errorf("archive mode %v", fi.Mode())
	}

	info, err := Inspect(a)
	if err != nil {
		t.Fatal(err)
	}
	if info.Ref != "localhost/test/image:v1" || info.Digest != d1 {
		t.Errorf("ref %q digest %v", info.Ref, info.Digest)
	}
	c := info.Config
	if !slices.Equal(c.Config.Entrypoint, spec.Entrypoint) || !slices.Equal(c.Config.Cmd, spec.Cmd) ||
		!slices.Equal(c.Config.Env, spec.Env) || c.Config.WorkingDir != "/work" || c.Config.User != "1000:1000" ||
		len(c.Config.ExposedPorts) != 2 || c.Config.Labels["org.example"] != "yes" ||
		c.OS != "linux" || c.Architecture != "amd64" || !c.Created.Equal(Epoch) {
		t.Errorf("config = %+v", c)
	}
	if _, ok := c.Config.ExposedPorts["9090/tcp"]; !ok {
		t.Errorf("ports = %v", c.Config.ExposedPorts)
	}
	if len(info.Manifest.Layers) != 2 || len(c.RootFS.DiffIDs) != 2 || info.Manifest.MediaType != "application/vnd.oci.image.manifest.v1+json" {
		t.Errorf("manifest = %+v", info.Manifest)
	}
}

// The docker-save half of the archive reads back with go-containerregistry,
// and the layers hold exactly the planned entries.
func TestArchiveContents(t *testing.T) {
	spec := testSpec(t)
	path := filepath.Join(t.TempDir(), "img.tar")
	if _, err := WriteTarball(spec, path); err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil || cf.Config.User != "1000:1000" {
		t.Fatalf("config via ggcr: %v %v", cf, err)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 2 {
		t.Fatalf("layers: %d %v", len(layers), err)
	}
	base := layerEntries(t, layers[0])
	top := layerEntries(t, layers[1])

	if h := base["usr/bin/tool-alias"]; h == nil || h.Typeflag != tar.TypeLink || h.Linkname != "usr/bin/tool" {
		t.Errorf("hard link = %+v", h)
	}
	if h := base["bin"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "usr/bin" {
		t.Errorf("symlink = %+v", h)
	}
	if h := base["usr/bin/suid"]; h == nil || h.Mode != 0o4755 || h.Gid != 42 {
		t.Errorf("setuid file = %+v", h)
	}
	if _, ok := base["dev/fifo"]; ok {
		t.Error("FIFO packed")
	}
	for name, h := range base {
		if h.Uname != "" || h.Gname != "" || !h.AccessTime.IsZero() {
			t.Errorf("%s carries host metadata: %+v", name, h)
		}
	}
	wantTop := []string{"etc/", "etc/motd", "opt/", "opt/app/", "opt/app/bin/", "opt/app/bin/app", "tmp/", "usr/", "usr/local/", "usr/local/bin/", "usr/local/bin/app", "work/"}
	var names []string
	for n := range top {
		names = append(names, n)
	}
	slices.Sort(names)
	if !slices.Equal(names, wantTop) {
		t.Fatalf("top layer = %v\nwant %v", names, wantTop)
	}
	for _, n := range names {
		if !top[n].ModTime.Equal(Epoch) {
			t.Errorf("%s mtime %v", n, top[n].ModTime)
		}
	}
	if h := top["work/"]; h.Mode != 0o750 || h.Uid != 1000 || h.Gid != 1000 {
		t.Errorf("work dir = %+v", h)
	}
	if h := top["tmp/"]; h.Mode != 0o1777 {
		t.Errorf("tmp mode = %o", h.Mode)
	}
	if h := top["opt/app/bin/app"]; h.Mode != 0o755 || h.Size != int64(len("payload from a host file")) {
		t.Errorf("app = %+v", h)
	}
	if h := top["usr/local/bin/app"]; h.Typeflag != tar.TypeSymlink || h.Linkname != "/opt/app/bin/app" {
		t.Errorf("app link = %+v", h)
	}
}

func layerEntries(t *testing.T, l v1.Layer) map[string]*tar.Header {
	t.Helper()
	rc, err := l.Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	gz, err := gzip.NewReader(rc)
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

func TestWriteTarballErrors(t *testing.T) {
	out := filepath.Join(t.TempDir(), "x.tar")
	for name, spec := range map[string]Spec{
		"no ref":           {Files: []File{{Path: "/a"}}},
		"relative path":    {Ref: "a:b", Files: []File{{Path: "a"}}},
		"duplicate":        {Ref: "a:b", Files: []File{{Path: "/a"}, {Path: "/a"}}},
		"file as parent":   {Ref: "a:b", Files: []File{{Path: "/a"}, {Path: "/a/b"}}},
		"root path":        {Ref: "a:b", Dirs: []Dir{{Path: "/"}}},
		"missing source":   {Ref: "a:b", Files: []File{{Path: "/a", Source: "/does/not/exist"}}},
		"empty link":       {Ref: "a:b", Symlinks: []Symlink{{Path: "/a"}}},
		"rootfs not a dir": {Ref: "a:b", BaseRootfs: "/etc/hostname"},
	} {
		if _, err := WriteTarball(spec, out); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("failed builds left an archive")
	}
}

func TestNormalizeRef(t *testing.T) {
	for in, want := range map[string]string{
		"busybox":                       "docker.io/library/busybox:latest",
		"busybox:1.36":                  "docker.io/library/busybox:1.36",
		"agent-sandbox/sandboxd:dev":    "docker.io/agent-sandbox/sandboxd:dev",
		"localhost/agent-sandbox/x:dev": "localhost/agent-sandbox/x:dev",
		"localhost:5000/x":              "localhost:5000/x:latest",
		"registry.k8s.io/pause:3.10":    "registry.k8s.io/pause:3.10",
		"example.com/a/b@sha256:abcd":   "example.com/a/b@sha256:abcd",
		"registry.example.com:5000/a/b": "registry.example.com:5000/a/b:latest",
	} {
		got, err := NormalizeRef(in)
		if err != nil || got != want {
			t.Errorf("NormalizeRef(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "a b", "/a", "a/"} {
		if _, err := NormalizeRef(bad); err == nil {
			t.Errorf("NormalizeRef(%q) accepted", bad)
		}
	}
}

func TestCacheDir(t *testing.T) {
	t.Setenv("AGENT_SANDBOX_CACHE", "/x/y")
	if d, err := CacheDir(); err != nil || d != "/x/y" {
		t.Fatalf("CacheDir = %q %v", d, err)
	}
	t.Setenv("AGENT_SANDBOX_CACHE", "")
	t.Setenv("HOME", "/home/u")
	if d, err := CacheDir(); err != nil || d != "/home/u/.cache/agent-sandbox" {
		t.Fatalf("CacheDir = %q %v", d, err)
	}
}

func TestDebootstrapName(t *testing.T) {
	d := Debootstrap{Suite: "bookworm", Variant: "minbase", Include: []string{"python3"}}
	if d.Name() != "debian-bookworm-minbase-python3" {
		t.Fatal(d.Name())
	}
}

// A base root file system given through a symlink is packed like the
// directory itself (WalkDir alone would stop at the link).
func TestBaseRootfsThroughSymlink(t *testing.T) {
	spec := testSpec(t)
	link := filepath.Join(t.TempDir(), "rootfs-link")
	if err := os.Symlink(spec.BaseRootfs, link); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	direct, err := WriteTarball(spec, filepath.Join(out, "direct.tar"))
	if err != nil {
		t.Fatal(err)
	}
	spec.BaseRootfs = link
	linked, err := WriteTarball(spec, filepath.Join(out, "linked.tar"))
	if err != nil || linked != direct {
		t.Fatalf("through symlink: %v %v, direct %v", linked, err, direct)
	}
}
