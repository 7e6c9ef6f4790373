// Command sdk uses the Go SDK the way a reference user would: NewClient with
// Options, EnableAutoCleanup, CreateSandbox from a warm pool, the handle's
// names, Run, Write, Read and List, GetSandbox by claim name, DeleteAll.
//
//	sdk -pool python-sandbox-warmpool -namespace default -api-url http://<router>:8080
//
// The kubeconfig comes from KUBECONFIG (or in-cluster config). It prints
// "key=value" lines and exits non-zero on the first failure.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"sigs.k8s.io/agent-sandbox/clients/go/sandbox"
)

func main() {
	pool := flag.String("pool", "", "SandboxWarmPool to claim from")
	namespace := flag.String("namespace", "default", "namespace of the pool and the claim")
	apiURL := flag.String("api-url", "", "router URL (Direct mode); empty uses a port-forward to sandbox-router-svc")
	flag.Parse()
	if err := run(*pool, *namespace, *apiURL); err != nil {
		fmt.Fprintln(os.Stderr, "sdk:", err)
		os.Exit(1)
	}
}

func run(pool, namespace, apiURL string) error {
	if pool == "" {
		return fmt.Errorf("-pool is required")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	client, err := sandbox.NewClient(ctx, sandbox.Options{Namespace: namespace, APIURL: apiURL, Quiet: true})
	if err != nil {
		return fmt.Errorf("NewClient: %w", err)
	}
	stop := client.EnableAutoCleanup()
	defer stop()
	defer func() {
		if err := client.DeleteAll(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "sdk: DeleteAll:", err)
		}
	}()

	sb, err := client.CreateSandbox(ctx, pool, namespace)
	if err != nil {
		return fmt.Errorf("CreateSandbox: %w", err)
	}
	fmt.Printf("claim=%s\nsandbox=%s\npod=%s\n", sb.ClaimName(), sb.SandboxName(), sb.PodName())

	res, err := sb.Run(ctx, `python3 -c "print(6*7)"`)
	if err != nil {
		return fmt.Errorf("Run: %w", err)
	}
	if strings.TrimSpace(res.Stdout) != "42" || res.ExitCode != 0 {
		return fmt.Errorf("Run: stdout %q, exit code %d", res.Stdout, res.ExitCode)
	}
	fmt.Printf("run=%s\n", strings.TrimSpace(res.Stdout))

	content := []byte("written by the reference SDK surface\n")
	if err := sb.Write(ctx, "refsdk.txt", content); err != nil {
		return fmt.Errorf("Write: %w", err)
	}
	got, err := sb.Read(ctx, "refsdk.txt")
	if err != nil {
		return fmt.Errorf("Read: %w", err)
	}
	if !bytes.Equal(got, content) {
		return fmt.Errorf("Read returned %q, wrote %q", got, content)
	}
	entries, err := sb.List(ctx, ".")
	if err != nil {
		return fmt.Errorf("List: %w", err)
	}
	found := false
	for _, e := range entries {
		found = found || e.Name == "refsdk.txt"
	}
	if !found {
		return fmt.Errorf("List(.) = %v lacks refsdk.txt", entries)
	}
	fmt.Printf("files=ok\n")

	again, err := client.GetSandbox(ctx, sb.ClaimName(), namespace)
	if err != nil {
		return fmt.Errorf("GetSandbox: %w", err)
	}
	if again.SandboxName() != sb.SandboxName() {
		return fmt.Errorf("GetSandbox(%s) gave sandbox %s, want %s", sb.ClaimName(), again.SandboxName(), sb.SandboxName())
	}
	fmt.Printf("get=ok\n")
	return nil
}
