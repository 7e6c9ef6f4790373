// Package catalog defines the project's runtime images and builds them
// with package images: "sandboxd" (the static daemon plus a static busybox
// shell, workspace /workspace) and "python-runtime" (a Debian bookworm
// root file system with python3 and sandboxd as entrypoint, working dir
// /app like the upstream python-runtime example), and on request the
// images of the examples, "jupyterlab" and "chrome" (examples.go). Archives
// are written to <cache>/images/<name>.tar for import into containerd.
package catalog

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"sigs.k8s.io/agent-sandbox/internal/images"
)

// Names lists the runtime images this package builds by default, in build
// order: the ones the platform and its default warm pool run.
var Names = []string{"sandboxd", "python-runtime"}

// Examples lists the images of the examples (examples/jupyterlab,
// examples/chrome). They are built on request (by name, or with All);
// a cold build downloads a few hundred MB from Debian and PyPI.
var Examples = []string{"jupyterlab", "chrome"}

// All is every image Build knows.
var All = append(slices.Clone(Names), Examples...)

// PythonRootfs is the base of the python-runtime image.
var PythonRootfs = images.Debootstrap{
	Suite: "bookworm", Variant: "minbase", Include: []string{"python3"},
	Mirror: "http://deb.debian.org/debian",
}

const (
	sandboxdPath = "/usr/local/bin/sandboxd"
	// uid/gid of the unprivileged user both images run as (upstream: 1000).
	sandboxUID = 1000
)

// ports of the three sandboxd APIs: REST, gRPC, legacy.
var ports = []string{"8080/tcp", "8888/tcp", "9090/tcp"}

// Options locate the sources and the output.
type Options struct {
	// ModuleDir is the root of this Go module (where go.mod is).
	ModuleDir string
	// CacheDir holds bin/, rootfs/ and images/; see images.CacheDir.
	CacheDir string
	// OutDir receives the archives; <CacheDir>/images by default.
	OutDir string
	// Repo prefixes image names; "localhost/agent-sandbox" by default.
	Repo string
	// Tag is the image tag; "dev" by default.
	Tag string
	// Log receives the output of debootstrap and apt-get; nil discards.
	Log io.Writer
}

// Built is one written image archive.
type Built struct {
	Name   string
	Ref    string
	Path   string
	Digest v1.Hash
}

func (o *Options) defaults() {
	if o.Repo == "" {
		o.Repo = "localhost/agent-sandbox"
	}
	if o.Tag == "" {
		o.Tag = "dev"
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.OutDir == "" {
		o.OutDir = filepath.Join(o.CacheDir, "images")
	}
}

// Build builds the named images (all of Names when none are given). The
// sandboxd binary is compiled once for all of them. Root file systems are
// cached (see images.EnsureRootfs and EnsureCustomized), and an archive is
// only rewritten when its inputs changed (see writeArchive).
func Build(ctx context.Context, o Options, names ...string) ([]Built, error) {
	o.defaults()
	if len(names) == 0 {
		names = Names
	}
	for _, n := range names {
		if !slices.Contains(All, n) {
			return nil, fmt.Errorf("unknown image %q (known: %s)", n, strings.Join(All, ", "))
		}
	}
	bin := filepath.Join(o.CacheDir, "bin", "sandboxd")
	if err := images.GoBinary(ctx, o.ModuleDir, "./cmd/sandboxd", bin); err != nil {
		return nil, err
	}
	var out []Built
	for _, n := range names {
		var spec images.Spec
		var err error
		switch n {
		case "sandboxd":
			spec, err = sandboxdSpec(ctx, o, bin)
		case "python-runtime":
			spec, err = pythonRuntimeSpec(ctx, o, bin)
		case "jupyterlab":
			spec, err = jupyterLabSpec(ctx, o)
		case "chrome":
			spec, err = chromeSpec(ctx, o)
		}
		if err != nil {
			return out, fmt.Errorf("image %s: %w", n, err)
		}
		path := filepath.Join(o.OutDir, n+".tar")
		digest, err := writeArchive(spec, path)
		if err != nil {
			return out, err
		}
		ref, _ := images.NormalizeRef(spec.Ref)
		out = append(out, Built{Name: n, Ref: ref, Path: path, Digest: digest})
	}
	return out, nil
}

// sandboxdSpec is the minimal image: the daemon, a busybox shell with its
// applets in /bin, and just enough /etc for a named non-root user.
func sandboxdSpec(ctx context.Context, o Options, bin string) (images.Spec, error) {
	busybox, err := images.Busybox(ctx, o.Log)
	if err != nil {
		return images.Spec{}, err
	}
	applets, err := busyboxApplets(ctx, busybox)
	if err != nil {
		return images.Spec{}, err
	}
	spec := images.Spec{
		Ref: o.Repo + "/sandboxd:" + o.Tag,
		Dirs: []images.Dir{
			{Path: "/tmp", Mode: 0o777 | os.ModeSticky},
			{Path: "/workspace", Mode: 0o755, UID: sandboxUID, GID: sandboxUID},
			{Path: "/proc"}, {Path: "/sys"}, {Path: "/dev"},
		},
		Files: []images.File{
			{Path: sandboxdPath, Mode: 0o755, Source: bin},
			{Path: "/bin/busybox", Mode: 0o755, Source: busybox},
			{Path: "/etc/passwd", Content: []byte("root:x:0:0:root:/root:/bin/sh\nsandbox:x:1000:1000:sandbox:/workspace:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")},
			{Path: "/etc/group", Content: []byte("root:x:0:\nsandbox:x:1000:\nnogroup:x:65534:\n")},
		},
		Entrypoint:   []string{sandboxdPath},
		Cmd:          []string{"--root-dir=/workspace"},
		Env:          []string{"PATH=/usr/local/bin:/bin", "HOME=/workspace", "SANDBOX_BASE_DIR=/workspace"},
		WorkingDir:   "/workspace",
		User:         fmt.Sprintf("%d:%d", sandboxUID, sandboxUID),
		ExposedPorts: ports,
	}
	for _, a := range applets {
		spec.Symlinks = append(spec.Symlinks, images.Symlink{Path: "/bin/" + a, Target: "busybox"})
	}
	return spec, nil
}

// busyboxApplets lists the applet names busybox provides, sorted.
func busyboxApplets(ctx context.Context, busybox string) ([]string, error) {
	out, err := exec.CommandContext(ctx, busybox, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list: %w", busybox, err)
	}
	var applets []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		a := strings.TrimSpace(sc.Text())
		if a != "" && a != "busybox" && !strings.ContainsAny(a, "/ ") {
			applets = append(applets, a)
		}
	}
	slices.Sort(applets)
	return slices.Compact(applets), nil
}

// pythonRuntimeSpec is the Debian image with python3, run as uid 1000 in
// /app (the upstream python-runtime's WORKDIR and SANDBOX_BASE_DIR).
func pythonRuntimeSpec(ctx context.Context, o Options, bin string) (images.Spec, error) {
	rootfs, err := images.EnsureRootfs(ctx, o.CacheDir, PythonRootfs, o.Log)
	if err != nil {
		return images.Spec{}, err
	}
	passwd, err := withEntry(filepath.Join(rootfs, "etc", "passwd"), "sandbox:x:1000:1000:sandbox:/app:/bin/sh")
	if err != nil {
		return images.Spec{}, err
	}
	group, err := withEntry(filepath.Join(rootfs, "etc", "group"), "sandbox:x:1000:")
	if err != nil {
		return images.Spec{}, err
	}
	return images.Spec{
		Ref:        o.Repo + "/python-runtime:" + o.Tag,
		BaseRootfs: rootfs,
		Dirs:       []images.Dir{{Path: "/app", Mode: 0o755, UID: sandboxUID, GID: sandboxUID}},
		Files: []images.File{
			{Path: sandboxdPath, Mode: 0o755, Source: bin},
			{Path: "/etc/passwd", Content: passwd},
			{Path: "/etc/group", Content: group},
		},
		Entrypoint: []string{sandboxdPath},
		Cmd:        []string{"--root-dir=/app"},
		Env: []string{
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"LANG=C.UTF-8", "HOME=/app", "SANDBOX_BASE_DIR=/app", "PYTHONUNBUFFERED=1",
		},
		WorkingDir:   "/app",
		User:         fmt.Sprintf("%d:%d", sandboxUID, sandboxUID),
		ExposedPorts: ports,
	}, nil
}

// withEntry returns the lines of an /etc/passwd-style file plus line,
// unless an entry of that name already exists.
func withEntry(path, line string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	name := line[:strings.IndexByte(line, ':')+1]
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, name) {
			return b, nil
		}
	}
	if len(b) > 0 && !bytes.HasSuffix(b, []byte("\n")) {
		b = append(b, '\n')
	}
	return append(b, line+"\n"...), nil
}
