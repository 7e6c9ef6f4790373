// Command devstack runs the shared integration stack (internal/devstack):
// a real kube-apiserver and etcd, the controllers, the sandbox-router and
// one sandboxd process per sandbox Pod, with the SandboxTemplate
// python-runtime-template and the SandboxWarmPool python-sandbox-pool
// applied. Once the warm pool is Ready it prints one line of JSON to stdout,
//
//	{"kubeconfig": "...", "router_url": "http://127.0.0.1:N", "namespace": "default", "warmpool": "python-sandbox-pool", ...}
//
// and runs until SIGTERM or SIGINT, or until its stdin is closed when stdin
// is a pipe, then stops every process it started. Closing stdin is the
// reliable way for a test harness to stop it: `go run` does not forward
// SIGTERM to the program, so either build it (`go build -o devstack
// ./hack/devstack`) or keep a pipe to its stdin. Logs go to stderr (or
// --log-file); stdout carries only the JSON line.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"sigs.k8s.io/agent-sandbox/internal/devstack"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "devstack:", err)
		os.Exit(1)
	}
}

// ready is the line printed once the stack serves.
type ready struct {
	Kubeconfig string `json:"kubeconfig"`
	RouterURL  string `json:"router_url"`
	Namespace  string `json:"namespace"`
	WarmPool   string `json:"warmpool"`
	Template   string `json:"template"`
	Server     string `json:"server"`
	WorkDir    string `json:"workdir"`
}

func run(args []string) error {
	fs := flag.NewFlagSet("devstack", flag.ContinueOnError)
	var (
		opts        devstack.Options
		replicas    int
		logFile     string
		quiet       bool
		stdinCloses bool
		timeout     time.Duration
	)
	fs.StringVar(&opts.Namespace, "namespace", "default", "namespace of the template and warm pool")
	fs.IntVar(&replicas, "replicas", 2, "warm pool replicas")
	fs.StringVar(&opts.WorkDir, "workdir", "", "scratch directory (default: a temp directory removed on exit)")
	fs.StringVar(&opts.SandboxdBinary, "sandboxd", "", "prebuilt sandboxd binary (default: $AGENT_SANDBOX_SANDBOXD, else built)")
	fs.StringVar(&logFile, "log-file", "", "write component logs here instead of stderr")
	fs.BoolVar(&quiet, "quiet", false, "discard component logs")
	fs.BoolVar(&stdinCloses, "exit-on-stdin-close", true, "stop when stdin, if it is a pipe or socket, reaches EOF")
	fs.BoolVar(&opts.LateBinding, "late-binding", false, "give the controller a delivery key and the template the public key, so claims with env stay warm")
	fs.DurationVar(&timeout, "start-timeout", 3*time.Minute, "bound on bringing the stack up")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if replicas < 1 || replicas > 1000 {
		return fmt.Errorf("--replicas must be in 1..1000, got %d", replicas)
	}
	opts.WarmPoolReplicas = int32(replicas)
	switch {
	case quiet:
		opts.Log = io.Discard
	case logFile != "":
		f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("opening log file: %w", err)
		}
		defer func() { _ = f.Close() }()
		opts.Log = f
	default:
		opts.Log = os.Stderr
	}

	sigCtx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	startCtx, cancel := context.WithTimeout(sigCtx, timeout)
	defer cancel()
	opts.ReadyTimeout = timeout
	st, err := devstack.Start(startCtx, opts)
	if err != nil {
		return err
	}
	defer func() {
		if err := st.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "devstack: stopping:", err)
		}
	}()

	line, err := json.Marshal(ready{
		Kubeconfig: st.Kubeconfig, RouterURL: st.RouterURL, Namespace: st.Namespace,
		WarmPool: st.WarmPool, Template: st.Template, Server: st.Config.Host, WorkDir: st.WorkDir,
	})
	if err != nil {
		return fmt.Errorf("encoding ready line: %w", err)
	}
	if _, err := fmt.Fprintf(os.Stdout, "%s\n", line); err != nil {
		return fmt.Errorf("writing ready line: %w", err)
	}

	stdinEOF := make(chan struct{})
	if stdinCloses && stdinIsPipe() {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			close(stdinEOF)
		}()
	}
	select {
	case <-sigCtx.Done():
	case <-stdinEOF:
	}
	return nil
}

// stdinIsPipe reports whether stdin is a pipe or socket: what a harness
// holds open. A terminal is left alone (a background job reading it would
// be stopped by SIGTTIN), and so is /dev/null (always at EOF).
func stdinIsPipe() bool {
	fi, err := os.Stdin.Stat()
	if err != nil {
		return false
	}
	return fi.Mode()&(os.ModeNamedPipe|os.ModeSocket) != 0
}
