// Command mkimages builds the runtime images (sandboxd, python-runtime) as
// reproducible image archives under
// ${AGENT_SANDBOX_CACHE:-$HOME/.cache/agent-sandbox}/images/, ready for
// `ctr -n k8s.io images import`; with -examples also the images of
// examples/jupyterlab and examples/chrome. Archives whose inputs did not
// change are left alone. Run from the repository root:
//
//	go run ./hack/mkimages [-repo localhost/agent-sandbox] [-tag dev] [-examples] [image...]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/agent-sandbox/agent-sandbox/internal/images"
	"github.com/agent-sandbox/agent-sandbox/internal/images/catalog"
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
	repo := fs.String("repo", "localhost/agent-sandbox", "image name prefix")
	tag := fs.String("tag", "dev", "image tag")
	module := fs.String("module", ".", "root of the agent-sandbox Go module")
	verbose := fs.Bool("v", false, "show debootstrap, apt-get and pip output")
	examples := fs.Bool("examples", false, fmt.Sprintf("also build the example images %v", catalog.Examples))
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: mkimages [flags] [image...]\nimages: %v (default: %v)\n", catalog.All, catalog.Names)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	names := fs.Args()
	if *examples {
		if len(names) == 0 {
			names = append(names, catalog.Names...)
		}
		for _, n := range catalog.Examples {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	moduleDir, err := filepath.Abs(*module)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(moduleDir, "go.mod")); err != nil {
		return fmt.Errorf("%s is not the module root (no go.mod); pass -module", moduleDir)
	}
	log := io.Discard
	if *verbose {
		log = stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	built, err := catalog.Build(ctx, catalog.Options{ModuleDir: moduleDir, CacheDir: *cache, Repo: *repo, Tag: *tag, Log: log}, names...)
	for _, b := range built {
		fmt.Fprintf(stdout, "%s\t%s\t%s\t%s\n", b.Name, b.Ref, b.Digest, b.Path)
	}
	return err
}
