// Package platform defines the control-plane images, "controller"
// (agent-sandbox-controller) and "router" (sandbox-router), and builds them
// with package images. Both are distroless-style: one static Go binary, the
// CA bundle, /etc/passwd and /etc/group naming the non-root user 65532, an
// empty /tmp, and nothing else: no shell, no package manager, no libc. They
// run as 65532:65532 and write nothing, so they work with
// readOnlyRootFilesystem: true. Archives are written to
// <cache>/images/<name>.tar for import into containerd (`agent-sandbox up
// --image`), `docker load`, or a push with any OCI tool.
package platform

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"sigs.k8s.io/agent-sandbox/internal/images"
)

// Names lists the images this package builds, in build order. The
// deep-hibernation node agent's image is for the chart's DaemonSet
// (hibernationAgent); the local cluster runs the agent as a host process.
var Names = []string{"controller", "router", "sandbox-hibernate-agent"}

// NonRootUID is the uid and gid both images run as (distroless "nonroot").
const NonRootUID = 65532

// DefaultCABundle is the host file copied into the images as
// /etc/ssl/certs/ca-certificates.crt (Debian's ca-certificates package), for
// TLS to endpoints outside the cluster such as an OTLP collector.
const DefaultCABundle = "/etc/ssl/certs/ca-certificates.crt"

// binary describes the Go command an image wraps.
type binary struct {
	pkg         string   // main package, relative to the module root
	file        string   // file name in /usr/local/bin and in <cache>/bin
	description string   // org.opencontainers.image.description
	ports       []string // exposed ports
	// ldflags returns the -X flags that stamp version and commit.
	ldflags func(version, commit string) []string
}

var binaries = map[string]binary{
	"controller": {
		pkg:         "./cmd/agent-sandbox-controller",
		file:        "agent-sandbox-controller",
		description: "agent-sandbox controller: Sandbox, SandboxTemplate, SandboxWarmPool and SandboxClaim controllers",
		ports:       []string{"8080/tcp", "8081/tcp"}, // metrics, probes
		ldflags: func(version, commit string) []string {
			return []string{"-X main.version=" + version, "-X main.gitCommit=" + commit}
		},
	},
	"sandbox-hibernate-agent": {
		pkg:         "./cmd/sandbox-hibernate-agent",
		file:        "sandbox-hibernate-agent",
		description: "agent-sandbox deep-hibernation node agent: gVisor checkpoints for the controller",
		ldflags: func(version, _ string) []string {
			return []string{"-X main.version=" + version}
		},
	},
	"router": {
		pkg:         "./cmd/sandbox-router",
		file:        "sandbox-router",
		description: "agent-sandbox router: header-routed reverse proxy to sandboxes",
		ports:       []string{"8080/tcp", "8081/tcp", "9090/tcp"}, // proxy, probes, metrics
		ldflags: func(version, commit string) []string {
			return []string{"-X main.gitVersion=" + version, "-X main.gitCommit=" + commit}
		},
	},
}

// Options locate the sources and the output.
type Options struct {
	// ModuleDir is the root of this Go module (where go.mod is).
	ModuleDir string
	// CacheDir holds bin/ and images/; see images.CacheDir.
	CacheDir string
	// OutDir receives the archives; <CacheDir>/images by default.
	OutDir string
	// Repo prefixes image names; "localhost/agent-sandbox" by default.
	Repo string
	// Tag is the image tag; "dev" by default.
	Tag string
	// Version is stamped into the binaries (--version, build_info metric);
	// Tag by default.
	Version string
	// Commit is stamped into the binaries; `git rev-parse HEAD` of
	// ModuleDir by default, "unknown" outside a git checkout.
	Commit string
	// Arch is the GOARCH to build for; the host's by default. Archives of
	// another architecture are named <image>-<arch>.tar.
	Arch string
	// CABundle is the host CA bundle to copy; DefaultCABundle when empty.
	// A missing file is an error: without it TLS to outside endpoints fails.
	CABundle string
}

// Built is one written image archive.
type Built struct {
	Name   string
	Ref    string
	Path   string
	Digest v1.Hash
}

func (o *Options) defaults(ctx context.Context) {
	if o.Repo == "" {
		o.Repo = "localhost/agent-sandbox"
	}
	if o.Tag == "" {
		o.Tag = "dev"
	}
	if o.Version == "" {
		o.Version = o.Tag
	}
	if o.Commit == "" {
		o.Commit = gitCommit(ctx, o.ModuleDir)
	}
	if o.CABundle == "" {
		o.CABundle = DefaultCABundle
	}
	if o.Arch == "" {
		o.Arch = runtime.GOARCH
	}
	if o.OutDir == "" {
		o.OutDir = filepath.Join(o.CacheDir, "images")
	}
}

func gitCommit(ctx context.Context, dir string) string {
	cmd := exec.CommandContext(ctx, "git", "rev-parse", "HEAD")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// Ref returns the image reference of the named image for repo and tag, e.g.
// "localhost/agent-sandbox/controller:dev".
func Ref(repo, name, tag string) string { return repo + "/" + name + ":" + tag }

// Build compiles and packs the named images (all of Names when none are
// given) and returns them in the order asked.
func Build(ctx context.Context, o Options, names ...string) ([]Built, error) {
	o.defaults(ctx)
	if len(names) == 0 {
		names = Names
	}
	for _, n := range names {
		if !slices.Contains(Names, n) {
			return nil, fmt.Errorf("unknown image %q (known: %s)", n, strings.Join(Names, ", "))
		}
	}
	var out []Built
	for _, n := range names {
		b := binaries[n]
		bin, path := filepath.Join(o.CacheDir, "bin", b.file), filepath.Join(o.OutDir, n+".tar")
		if o.Arch != runtime.GOARCH {
			bin, path = bin+"-"+o.Arch, filepath.Join(o.OutDir, n+"-"+o.Arch+".tar")
		}
		if err := images.GoBinaryArch(ctx, o.ModuleDir, b.pkg, bin, o.Arch, b.ldflags(o.Version, o.Commit)...); err != nil {
			return out, fmt.Errorf("image %s: %w", n, err)
		}
		spec, err := ImageSpec(n, o, bin)
		if err != nil {
			return out, err
		}
		spec.Architecture = o.Arch
		digest, err := images.WriteTarball(spec, path)
		if err != nil {
			return out, fmt.Errorf("image %s: %w", n, err)
		}
		ref, _ := images.NormalizeRef(spec.Ref)
		out = append(out, Built{Name: n, Ref: ref, Path: path, Digest: digest})
	}
	return out, nil
}

// ImageSpec returns the image of the named command around the static binary
// bin. o supplies Repo, Tag, Version, Commit and CABundle (empty fields take
// the defaults of Build, except Commit, which stays empty).
func ImageSpec(name string, o Options, bin string) (images.Spec, error) {
	b, ok := binaries[name]
	if !ok {
		return images.Spec{}, fmt.Errorf("unknown image %q (known: %s)", name, strings.Join(Names, ", "))
	}
	if o.Repo == "" {
		o.Repo = "localhost/agent-sandbox"
	}
	if o.Tag == "" {
		o.Tag = "dev"
	}
	if o.Version == "" {
		o.Version = o.Tag
	}
	if o.CABundle == "" {
		o.CABundle = DefaultCABundle
	}
	if _, err := os.Stat(o.CABundle); err != nil {
		return images.Spec{}, fmt.Errorf("CA bundle for image %s: %w (install Debian's ca-certificates)", name, err)
	}
	path := "/usr/local/bin/" + b.file
	uid := fmt.Sprint(NonRootUID)
	labels := map[string]string{
		"org.opencontainers.image.title":       b.file,
		"org.opencontainers.image.description": b.description,
		"org.opencontainers.image.version":     o.Version,
	}
	if o.Commit != "" {
		labels["org.opencontainers.image.revision"] = o.Commit
	}
	return images.Spec{
		Ref: Ref(o.Repo, name, o.Tag),
		Dirs: []images.Dir{
			{Path: "/tmp", Mode: 0o777 | os.ModeSticky},
			{Path: "/home/nonroot", Mode: 0o700, UID: NonRootUID, GID: NonRootUID},
		},
		Files: []images.File{
			{Path: path, Mode: 0o755, Source: bin},
			{Path: "/etc/ssl/certs/ca-certificates.crt", Source: o.CABundle},
			{Path: "/etc/passwd", Content: []byte("root:x:0:0:root:/root:/sbin/nologin\n" +
				"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
				"nonroot:x:" + uid + ":" + uid + ":nonroot:/home/nonroot:/sbin/nologin\n")},
			{Path: "/etc/group", Content: []byte("root:x:0:\nnogroup:x:65534:\nnonroot:x:" + uid + ":\n")},
			{Path: "/etc/nsswitch.conf", Content: []byte("hosts: files dns\n")},
		},
		Entrypoint:   []string{path},
		Env:          []string{"PATH=/usr/local/bin", "HOME=/home/nonroot", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"},
		WorkingDir:   "/",
		User:         uid + ":" + uid,
		ExposedPorts: b.ports,
		Labels:       labels,
	}, nil
}
