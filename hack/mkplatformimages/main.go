// Command mkplatformimages builds the control-plane images, controller
// (agent-sandbox-controller) and router (sandbox-router), as reproducible
// image archives under ${AGENT_SANDBOX_CACHE:-$HOME/.cache/agent-sandbox}/images/,
// ready for `agent-sandbox up --image` or `ctr -n k8s.io images import`.
// Run from the repository root:
//
//	go run ./hack/mkplatformimages [-repo localhost/agent-sandbox] [-tag dev] [controller|router...]
//
// It prints one line per image: name, reference, digest, archive path.
// The runtime images (sandboxd, python-runtime) are built by hack/mkimages.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/agent-sandbox/agent-sandbox/internal/images"
	"github.com/agent-sandbox/agent-sandbox/internal/images/platform"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "mkplatformimages:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mkplatformimages", flag.ContinueOnError)
	fs.SetOutput(stderr)
	defCache, err := images.CacheDir()
	if err != nil {
		return err
	}
	cache := fs.String("cache", defCache, "cache directory (bin/, images/)")
	out := fs.String("out", "", "output directory of the archives (default <cache>/images)")
	repo := fs.String("repo", "localhost/agent-sandbox", "image name prefix")
	tag := fs.String("tag", "dev", "image tag")
	version := fs.String("version", "", "version stamped into the binaries (default: the tag)")
	commit := fs.String("commit", "", "commit stamped into the binaries (default: git rev-parse HEAD)")
	module := fs.String("module", ".", "root of the agent-sandbox Go module")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: mkplatformimages [flags] [image...]\nimages: %v (default: all)\n", platform.Names)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	moduleDir, err := filepath.Abs(*module)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(moduleDir, "go.mod")); err != nil {
		return fmt.Errorf("%s is not the module root (no go.mod); pass -module", moduleDir)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	built, err := platform.Build(ctx, platform.Options{
		ModuleDir: moduleDir, CacheDir: *cache, OutDir: *out,
		Repo: *repo, Tag: *tag, Version: *version, Commit: *commit,
	}, fs.Args()...)
	for _, b := range built {
		fmt.Fprintf(stdout, "%s\t%s\t%s\t%s\n", b.Name, b.Ref, b.Digest, b.Path)
	}
	return err
}
