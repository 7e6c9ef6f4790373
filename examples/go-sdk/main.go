// Command go-sdk is a runnable tour of the Go SDK (clients/go/sandbox):
// it claims a sandbox from a warm pool, runs a command, moves a file in and
// out, lists the workspace, streams a process with stdin and a signal, and
// releases the sandbox. It prints how long the claim took to produce its
// first command output (time to interactive).
//
// Against the local integration stack:
//
//	go build -o /tmp/devstack ./hack/devstack
//	/tmp/devstack --quiet > /tmp/devstack.json &      # prints one JSON line when ready
//	go run ./examples/go-sdk --kubeconfig "$(jq -r .kubeconfig /tmp/devstack.json)"
//
// Against a cluster installed with `agent-sandbox up` or the manifests,
// the defaults (current kubeconfig, warm pool python-sandbox-pool in
// default, port-forward to sandbox-router-svc) work as they are.
//
// --connect picks the connection: tunnel (default: port-forward to the
// router through the API server), router=<url> (a router URL you reach
// already), gateway=<name> (a Gateway in --namespace), in-cluster (the
// Pod IP; run inside the cluster). --runtime sandboxd speaks sandboxd's
// /v1/files and gRPC APIs instead of the legacy runtime API.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"sigs.k8s.io/agent-sandbox/clients/go/sandbox"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "go-sdk example:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		kubeconfig = flag.String("kubeconfig", "", "kubeconfig file (default: in-cluster, then $KUBECONFIG or ~/.kube/config)")
		namespace  = flag.String("namespace", "default", "namespace of the warm pool")
		warmPool   = flag.String("warmpool", "python-sandbox-pool", "SandboxWarmPool to claim from")
		connect    = flag.String("connect", "tunnel", "tunnel | router=<url> | gateway=<name> | in-cluster")
		runtime    = flag.String("runtime", string(sandbox.RuntimeLegacyPython), "legacy-python | sandboxd")
		verbose    = flag.Bool("v", false, "log the SDK's progress to stderr")
	)
	flag.Parse()

	opts := sandbox.Options{
		WarmPoolName: *warmPool,
		Namespace:    *namespace,
		Runtime:      sandbox.Runtime(*runtime),
		Quiet:        !*verbose,
	}
	if *kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
		if err != nil {
			return fmt.Errorf("loading kubeconfig: %w", err)
		}
		opts.RestConfig = cfg
	}
	switch kind, arg, _ := strings.Cut(*connect, "="); kind {
	case "tunnel":
	case "router":
		opts.APIURL = arg
	case "gateway":
		opts.GatewayName, opts.GatewayNamespace = arg, *namespace
	case "in-cluster":
		opts.Connectivity = sandbox.ConnectivityInCluster
	default:
		return fmt.Errorf("unknown --connect %q", *connect)
	}

	// Ctrl-C cancels what is in flight; Close below still releases the
	// sandbox, because its cleanup does not depend on this context.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	sb, err := sandbox.New(ctx, opts)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := sb.Open(ctx); err != nil {
		return fmt.Errorf("claiming a sandbox: %w", err)
	}
	defer func() {
		if err := sb.Close(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "releasing the sandbox:", err)
		}
	}()
	ready := time.Since(start)

	res, err := sb.Run(ctx, "echo 'Hello from the Go SDK'")
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	fmt.Printf("claim %s -> sandbox %s (pod %s, %s)\n", sb.ClaimName(), sb.SandboxName(), sb.PodName(), sb.PodIP())
	fmt.Printf("ready after %s, first output after %s: %q (exit %d)\n",
		ready.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), res.Stdout, res.ExitCode)

	if err := sb.Write(ctx, "hello.txt", []byte("written by the Go SDK\n")); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	data, err := sb.Read(ctx, "hello.txt")
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	fmt.Printf("read back: %q\n", data)
	entries, err := sb.List(ctx, ".")
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	for _, e := range entries {
		fmt.Printf("  %-9s %8d  %s  %s\n", e.Type, e.Size, e.ModTime.Format(time.RFC3339), e.Name)
	}
	if _, err := sb.Read(ctx, "no-such-file"); errors.Is(err, sandbox.ErrNotFound) {
		fmt.Println("missing files are reported as ErrNotFound")
	}

	// Stream a process: what we write to stdin comes back upper-cased.
	p, err := sb.Start(ctx, []string{"tr", "a-z", "A-Z"}, &sandbox.ProcessOptions{Stdout: os.Stdout})
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	if _, err := p.Stdin().Write([]byte("streamed through the process api\n")); err != nil {
		return fmt.Errorf("stdin: %w", err)
	}
	if err := p.Stdin().Close(); err != nil {
		return fmt.Errorf("stdin: %w", err)
	}
	if code, err := p.Wait(); err != nil || code != 0 {
		return fmt.Errorf("streamed process: exit %d: %w", code, err)
	}

	// And stop one that would run for ten minutes.
	long, err := sb.Start(ctx, []string{"sleep", "600"}, nil)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	if err := long.Signal(sandbox.SignalTerminate); err != nil {
		return fmt.Errorf("signal: %w", err)
	}
	code, _ := long.Wait()
	fmt.Printf("sleep 600 ended by SIGTERM with exit code %d\n", code)
	return nil
}
