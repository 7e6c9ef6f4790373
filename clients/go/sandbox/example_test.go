package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"sigs.k8s.io/agent-sandbox/clients/go/sandbox"
)

// Claim a sandbox from a warm pool, run a command, move a file, release it.
// The connection defaults to a port-forward to the sandbox-router through
// the API server of the current kubeconfig.
func Example() {
	ctx := context.Background()
	sb, err := sandbox.New(ctx, sandbox.Options{WarmPoolName: "python-sandbox-pool", Namespace: "default"})
	if err != nil {
		log.Fatal(err)
	}
	if err := sb.Open(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = sb.Close(context.Background()) }()

	res, err := sb.Run(ctx, "echo 'Hello from SDK'")
	if err != nil {
		log.Print(err) // not log.Fatal: it would skip the deferred cleanup
		return
	}
	fmt.Print(res.Stdout)

	if err := sb.Write(ctx, "notes.txt", []byte("remember the milk")); err != nil {
		log.Print(err)
		return
	}
	data, err := sb.Read(ctx, "notes.txt")
	if err != nil {
		log.Print(err)
		return
	}
	fmt.Println(string(data))
}

// A Client tracks many sandboxes and can delete them all on exit.
func ExampleClient() {
	ctx := context.Background()
	c, err := sandbox.NewClient(ctx, sandbox.Options{Quiet: true})
	if err != nil {
		log.Fatal(err)
	}
	stop := c.EnableAutoCleanup() // delete everything on SIGINT/SIGTERM
	defer stop()
	defer func() { _ = c.DeleteAll(context.Background()) }()

	sb, err := c.CreateSandbox(ctx, "python-sandbox-pool", "default")
	if err != nil {
		log.Print(err) // not log.Fatal: it would skip the deferred cleanup
		return
	}
	fmt.Println("claimed", sb.ClaimName(), "sandbox", sb.SandboxName())

	// Another process (or a restart) can attach to the same sandbox by
	// its claim name.
	same, err := c.GetSandbox(ctx, sb.ClaimName(), "default")
	if err != nil {
		log.Print(err)
		return
	}
	fmt.Println(same == sb)
}

// Go through a router URL you already reach (an in-cluster Service, a
// port-forward of your own), or straight to the Pod from inside the
// cluster.
func ExampleOptions_connections() {
	viaRouter := sandbox.Options{
		WarmPoolName: "python-sandbox-pool",
		APIURL:       "http://sandbox-router-svc.default.svc.cluster.local:8080",
	}
	inCluster := sandbox.Options{
		WarmPoolName: "python-sandbox-pool",
		Connectivity: sandbox.ConnectivityInCluster,
		Runtime:      sandbox.RuntimeSandboxd, // REST :8080 and gRPC :9090 on the Pod IP
	}
	viaGateway := sandbox.Options{
		WarmPoolName:     "python-sandbox-pool",
		GatewayName:      "sandbox-gateway",
		GatewayNamespace: "gateways",
		GatewayScheme:    "https",
	}
	_, _, _ = viaRouter, inCluster, viaGateway
}

// Start streams a process: stdin in, output out as it is produced, and
// signals.
func ExampleSandbox_Start() {
	ctx := context.Background()
	sb, err := sandbox.New(ctx, sandbox.Options{WarmPoolName: "python-sandbox-pool"})
	if err != nil {
		log.Fatal(err)
	}
	if err := sb.Open(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = sb.Close(context.Background()) }()

	p, err := sb.Start(ctx, []string{"python3", "-u", "-c", "import sys; [print(l.upper(), end='') for l in sys.stdin]"},
		&sandbox.ProcessOptions{Stdout: os.Stdout, Stderr: os.Stderr})
	if err != nil {
		log.Print(err) // not log.Fatal: it would skip the deferred cleanup
		return
	}
	_, _ = p.Stdin().Write([]byte("streamed line\n"))
	_ = p.Stdin().Close()
	code, err := p.Wait()
	fmt.Println("exit", code, err)

	long, err := sb.Start(ctx, []string{"sleep", "600"}, nil)
	if err != nil {
		log.Print(err)
		return
	}
	_ = long.Signal(sandbox.SignalTerminate)
	_, _ = long.Wait()
}

// Errors are typed: match the sentinel, or unwrap *HTTPError for the
// sandbox's own detail.
func ExampleHTTPError() {
	ctx := context.Background()
	sb, err := sandbox.New(ctx, sandbox.Options{WarmPoolName: "python-sandbox-pool"})
	if err != nil {
		log.Fatal(err)
	}
	if err := sb.Open(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = sb.Close(context.Background()) }()

	_, err = sb.Read(ctx, "missing.txt", sandbox.WithTimeout(10*time.Second), sandbox.WithMaxAttempts(2))
	var he *sandbox.HTTPError
	switch {
	case errors.Is(err, sandbox.ErrNotFound):
		fmt.Println("no such file")
	case errors.Is(err, sandbox.ErrTimeout):
		fmt.Println("took too long")
	case errors.Is(err, sandbox.ErrNotReady):
		fmt.Println("reconnect with Open")
	case errors.As(err, &he):
		fmt.Println("sandbox said", he.StatusCode, he.Detail)
	}
}
