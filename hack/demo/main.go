// Command demo starts a real kube-apiserver with the project's CRDs, applies
// the examples and prints them as kubectl shows them. It is the README's
// first command until `agent-sandbox up` brings a full local cluster.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	env, err := testenv.Start()
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	kubectl := func(args ...string) error {
		cmd := exec.Command(filepath.Join(env.AssetsDir, "kubectl"), append([]string{"--kubeconfig", env.Kubeconfig}, args...)...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		fmt.Printf("$ kubectl %v\n", args)
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("kubectl %v: %w", args, err)
		}
		return nil
	}
	steps := [][]string{
		{"get", "crd"},
		{"apply", "--server-side", "-f", filepath.Join(testenv.RepoRoot(), "examples", "hello-world")},
		{"apply", "--server-side", "-f", filepath.Join(testenv.RepoRoot(), "examples", "python-runtime")},
		{"get", "sandboxes,sandboxtemplates,sandboxwarmpools,sandboxclaims"},
	}
	for _, s := range steps {
		if err := kubectl(s...); err != nil {
			return err
		}
	}
	return nil
}
