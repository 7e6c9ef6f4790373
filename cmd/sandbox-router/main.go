// Command sandbox-router is the header-routed HTTP entry point to agent
// sandboxes. All logic lives in internal/router; this file only parses
// flags, sets up logging and signals, and maps errors to exit codes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"sigs.k8s.io/agent-sandbox/internal/router"
)

// Set by -ldflags "-X main.gitVersion=... -X main.gitCommit=... -X main.buildDate=...".
var (
	gitVersion = "dev"
	gitCommit  = "unknown"
	buildDate  = "unknown"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "sandbox-router: %v\n", err)
		var ce *router.ConfigError
		if errors.As(err, &ce) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

func run(args []string) error {
	zopts := zap.Options{Development: false}
	cfg, err := router.ParseConfig(args, os.Getenv, func(fs *flag.FlagSet) { zopts.BindFlags(fs) })
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if cfg.ShowVersion {
		fmt.Printf("sandbox-router %s (commit %s, built %s, %s)\n", gitVersion, gitCommit, buildDate, runtime.Version())
		return nil
	}
	log := zap.New(zap.UseFlagOptions(&zopts)).WithName("sandbox-router")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return router.Run(ctx, cfg, log, router.BuildInfo{GitVersion: gitVersion, GitCommit: gitCommit, BuildDate: buildDate})
}
