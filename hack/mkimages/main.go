// Command mkimages builds the project's images as reproducible image
// archives under ${AGENT_SANDBOX_CACHE:-$HOME/.cache/agent-sandbox}/images/,
// ready for `agent-sandbox up` or `ctr -n k8s.io images import`: the
// runtime images (sandboxd, python-runtime), the control plane's
// (controller, router) and, with -examples, those of examples/jupyterlab
// and examples/chrome. Archives whose inputs did not change are left alone.
// Run from the repository root:
//
//	go run ./hack/mkimages [-repo localhost/agent-sandbox] [-tag dev] [-examples] [image...]
//
// It prints one line per image: name, reference, digest, archive path.
//
// With -push <host[:port]/prefix> it pushes the images instead, as OCI
// image indexes named like the reference project's releases
// (<prefix>/agent-sandbox-controller, sandbox-router-go, sandboxd,
// python-runtime-sandbox): the Go-only images (controller, router) for
// linux/amd64 and linux/arm64, the others for the host's architecture
// (their root file systems come from the host's debootstrap and busybox).
// The archives of a push go to <cache>/push, so the local cluster's
// archives in <cache>/images keep their names. It prints one line per
// image: name, pushed reference, index digest, platforms.
//
//	go run ./hack/mkimages -push registry.example.com/agents -tag v0.1.0 [-insecure-registry]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"

	"github.com/google/go-containerregistry/pkg/name"

	"sigs.k8s.io/agent-sandbox/internal/images"
	"sigs.k8s.io/agent-sandbox/internal/images/catalog"
	"sigs.k8s.io/agent-sandbox/internal/images/platform"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "mkimages:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mkimages", flag.ContinueOnError)
	fs.SetOutput(stderr)
	defCache, err := images.CacheDir()
	if err != nil {
		return err
	}
	cache := fs.String("cache", defCache, "cache directory (bin/, rootfs/, images/)")
	out := fs.String("out", "", "output directory of the archives (default <cache>/images)")
	repo := fs.String("repo", "localhost/agent-sandbox", "image name prefix")
	tag := fs.String("tag", "dev", "image tag")
	version := fs.String("version", "", "version stamped into the controller and router (default: the tag)")
	commit := fs.String("commit", "", "commit stamped into the controller and router (default: git rev-parse HEAD)")
	module := fs.String("module", ".", "root of the agent-sandbox Go module")
	verbose := fs.Bool("v", false, "show debootstrap, apt-get and pip output")
	push := fs.String("push", "", "push to this registry prefix (host[:port]/path) instead of only writing archives")
	insecure := fs.Bool("insecure-registry", false, "with -push: the registry speaks plain HTTP")
	multiArch := fs.Bool("multi-arch", true, "with -push: also build the Go-only images (controller, router) for the other of amd64/arm64")
	examples := fs.Bool("examples", false, fmt.Sprintf("also build the example images %v", catalog.Examples))
	defaults := append(slices.Clone(catalog.Names), platform.Names...)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: mkimages [flags] [image...]\nimages: %v (default: %v)\n", append(slices.Clone(catalog.All), platform.Names...), defaults)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	names := fs.Args()
	if len(names) == 0 {
		names = defaults
	}
	if *examples {
		for _, n := range catalog.Examples {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	var runtimeNames, platformNames []string
	for _, n := range names {
		switch {
		case slices.Contains(catalog.All, n):
			runtimeNames = append(runtimeNames, n)
		case slices.Contains(platform.Names, n):
			platformNames = append(platformNames, n)
		default:
			return fmt.Errorf("unknown image %q; known: %v", n, append(slices.Clone(catalog.All), platform.Names...))
		}
	}
	moduleDir, err := filepath.Abs(*module)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(moduleDir, "go.mod")); err != nil {
		return fmt.Errorf("%s is not the module root (no go.mod); pass -module", moduleDir)
	}
	if *push != "" {
		if err := checkPushPrefix(*push); err != nil {
			return err
		}
		if *out == "" {
			// Not <cache>/images: those archives name the local cluster's
			// images and must keep their refs.
			*out = filepath.Join(*cache, "push")
		}
	}
	log := io.Discard
	if *verbose {
		log = stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	print := func(name, ref, digest, path string) { fmt.Fprintf(stdout, "%s\t%s\t%s\t%s\n", name, ref, digest, path) }
	// archives collects, for -push, each image's archive per architecture.
	archives := map[string][]archive{}
	if *push != "" {
		print = func(name, _, _, path string) {
			archives[name] = append(archives[name], archive{path: path, arch: runtime.GOARCH})
		}
	}
	if len(runtimeNames) > 0 {
		built, err := catalog.Build(ctx, catalog.Options{ModuleDir: moduleDir, CacheDir: *cache, OutDir: *out, Repo: *repo, Tag: *tag, Log: log}, runtimeNames...)
		for _, b := range built {
			print(b.Name, b.Ref, b.Digest.String(), b.Path)
		}
		if err != nil {
			return err
		}
	}
	if len(platformNames) > 0 {
		built, err := platform.Build(ctx, platform.Options{
			ModuleDir: moduleDir, CacheDir: *cache, OutDir: *out,
			Repo: *repo, Tag: *tag, Version: *version, Commit: *commit,
		}, platformNames...)
		for _, b := range built {
			print(b.Name, b.Ref, b.Digest.String(), b.Path)
		}
		if err != nil {
			return err
		}
		if *push != "" && *multiArch {
			other := "arm64"
			if runtime.GOARCH == "arm64" {
				other = "amd64"
			}
			built, err := platform.Build(ctx, platform.Options{
				ModuleDir: moduleDir, CacheDir: *cache, OutDir: *out, Arch: other,
				Repo: *repo, Tag: *tag, Version: *version, Commit: *commit,
			}, platformNames...)
			if err != nil {
				return err
			}
			for _, b := range built {
				archives[b.Name] = append(archives[b.Name], archive{path: b.Path, arch: other})
			}
		}
	}
	if *push == "" {
		return nil
	}
	for _, n := range names {
		ref := strings.TrimSuffix(*push, "/") + "/" + RemoteName(n) + ":" + *tag
		digest, err := pushIndex(ctx, ref, archives[n], *insecure)
		if err != nil {
			return fmt.Errorf("image %s: %w", n, err)
		}
		var archs []string
		for _, a := range archives[n] {
			archs = append(archs, "linux/"+a.arch)
		}
		fmt.Fprintf(stdout, "%s\t%s\t%s\t%s\n", n, ref, digest, strings.Join(archs, ","))
	}
	return nil
}

// checkPushPrefix rejects a -push value that cannot prefix an image name,
// before anything is built.
func checkPushPrefix(p string) error {
	p = strings.TrimSuffix(p, "/")
	if p == "" || strings.ContainsAny(p, " @") || strings.Contains(p, "://") {
		return fmt.Errorf("-push %q: want host[:port]/path, e.g. registry.example.com/agents", p)
	}
	if _, err := name.NewRepository(p+"/x", name.StrictValidation); err != nil {
		return fmt.Errorf("-push %q: %w", p, err)
	}
	return nil
}
