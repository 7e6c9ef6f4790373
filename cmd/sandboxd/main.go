// Command sandboxd is the runtime daemon inside every sandbox image: it
// serves the legacy runtime API (:8888), the REST files API (:8080) and the
// gRPC process API (:9090), confined to its workspace root.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"sigs.k8s.io/agent-sandbox/internal/sandboxd"
	"sigs.k8s.io/agent-sandbox/internal/sandboxd/lateenv"
	"sigs.k8s.io/agent-sandbox/internal/sandboxd/legacy"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(exitCode(run(os.Args[1:], os.Stdout, os.Stderr), os.Stderr))
}

// usageError is a command line that could not be parsed.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

// exitCode maps the outcome of run to the process exit status the usual
// way: 0 for success and for --help, 2 for a bad command line, 1 for any
// other failure. It reports failures on stderr.
func exitCode(err error, stderr io.Writer) int {
	var usage usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &usage):
		fmt.Fprintf(stderr, "sandboxd: %v\nRun 'sandboxd --help' for usage.\n", err)
		return 2
	default:
		fmt.Fprintln(stderr, "sandboxd:", err)
		return 1
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sandboxd", flag.ContinueOnError)
	// Parse errors are reported by exitCode, with a pointer to --help
	// rather than the whole flag list.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	var (
		cfg         sandboxd.Config
		showVersion bool
		logLevel    string
		logFormat   string
	)
	fs.StringVar(&cfg.ListenHost, "listen-host", "0.0.0.0", "address the servers bind to")
	fs.IntVar(&cfg.RESTPort, "rest-port", 8080, "port of the REST API (/v1/files, /v1/health, /v1/metadata)")
	fs.IntVar(&cfg.GRPCPort, "grpc-port", 9090, "port of the gRPC process API")
	fs.IntVar(&cfg.LegacyPort, "legacy-port", 8888, "port of the legacy python-runtime API (0 disables it)")
	fs.StringVar(&cfg.RootDir, "root-dir", "/workspace", "workspace root of the REST and gRPC APIs (created 0755 if missing)")
	legacyBase := fs.String("legacy-base-dir", "", "workspace of the legacy API; default $SANDBOX_BASE_DIR, else --root-dir")
	fs.StringVar(&cfg.MetadataEnvPrefix, "metadata-env-prefix", "SANDBOX_", "prefix of the environment variables /v1/metadata reports")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", 10*time.Second, "bound of the graceful shutdown")
	fs.DurationVar(&cfg.HTTPIdleTimeout, "http-idle-timeout", 60*time.Second, "idle keep-alive timeout of the HTTP servers")
	fs.IntVar(&cfg.StreamChunkSize, "stream-chunk-size", 0, "largest output chunk of a Start stream in bytes (0 means 4096)")
	fs.IntVar(&cfg.MaxOutputBytes, "max-output-bytes", 16<<20, "cap of each buffered stdout/stderr of /execute and Execute (0 means none)")
	fs.DurationVar(&cfg.ExecDrainGrace, "exec-drain-grace", 2*time.Second, "how long /execute reads output held open by background children after the command exited")
	fs.BoolVar(&showVersion, "version", false, "print the version and exit")
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&logFormat, "log-format", "json", "json or text")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fmt.Fprintf(stdout, "Usage: sandboxd [flags]\n\n"+
				"sandboxd is the runtime daemon inside a sandbox: the legacy runtime API,\n"+
				"the REST files API and the gRPC process API, confined to its workspace.\n\nFlags:\n")
			fs.PrintDefaults()
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments: %q", fs.Args())}
	}
	if showVersion {
		_, err := fmt.Fprintln(stdout, "sandboxd", version)
		return err
	}
	if cfg.StreamChunkSize < 0 || cfg.MaxOutputBytes < 0 {
		return usageError{fmt.Errorf("--stream-chunk-size and --max-output-bytes must not be negative")}
	}
	if err := cfg.Validate(); err != nil {
		return usageError{err}
	}

	var level slog.Level
	if err := level.UnmarshalText([]byte(logLevel)); err != nil {
		return usageError{fmt.Errorf("--log-level: %w", err)}
	}
	opts := &slog.HandlerOptions{Level: level}
	switch logFormat {
	case "json":
		cfg.Logger = slog.New(slog.NewJSONHandler(stderr, opts))
	case "text":
		cfg.Logger = slog.New(slog.NewTextHandler(stderr, opts))
	default:
		return usageError{fmt.Errorf("--log-format must be json or text, got %q", logFormat)}
	}
	log := cfg.Logger

	// The python runtime read its base directory and command timeout from
	// the environment; images and manifests written for it still set them.
	cfg.LegacyBaseDir = *legacyBase
	if cfg.LegacyBaseDir == "" {
		cfg.LegacyBaseDir = strings.TrimSpace(os.Getenv("SANDBOX_BASE_DIR"))
	}
	timeout, warn := legacy.ParseExecTimeout(os.Getenv("SANDBOX_EXEC_TIMEOUT_SECONDS"))
	if warn != nil {
		log.Warn(warn.Error())
	}
	cfg.ExecTimeout = timeout

	// The claim controller's public key, when the template sets it,
	// enables late-bound env (internal/latebind).
	late, err := lateenv.FromEnviron(log.With("api", "late-binding"))
	if err != nil {
		return usageError{err}
	}
	cfg.LateEnv = late
	d, err := sandboxd.New(cfg)
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log.Info("sandboxd starting", "version", version, "root_dir", cfg.RootDir, "legacy_base_dir", cfg.LegacyBaseDir)
	return d.Run(ctx)
}
