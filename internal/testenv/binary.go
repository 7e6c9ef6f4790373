package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// RepoBinary returns an executable for one of this repository's commands:
// given when set, else the path in the environment variable envVar, else a
// fresh CGO_ENABLED=0 build of ./cmd/<name> into workDir/bin. Shared by the
// integration stacks (devstack, kwokstack) that run our binaries as
// processes.
func RepoBinary(ctx context.Context, given, envVar, name, workDir string) (string, error) {
	if given == "" {
		given = os.Getenv(envVar)
	}
	if given != "" {
		if _, err := os.Stat(given); err != nil {
			return "", fmt.Errorf("%s binary: %w", name, err)
		}
		return given, nil
	}
	out := filepath.Join(workDir, "bin", name)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/"+name)
	cmd.Dir = RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %w\n%s", name, err, b)
	}
	return out, nil
}
