package e2e

import (
	"bytes"
	"strings"
	"testing"

	"sigs.k8s.io/agent-sandbox/internal/cli"
)

// TestStatusListsNodeAddons runs `agent-sandbox status` (the real command,
// in process) and expects every node add-on listed as running with a pid.
func TestStatusListsNodeAddons(t *testing.T) {
	cmd := cli.NewRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"status"})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("status: %v\n%s", err, out.String())
	}
	for _, name := range []string{"coredns", "kube-proxy", "kube-router", "local-path-provisioner", "sandbox-hibernate-agent", "sandbox-cpu-agent"} {
		found := false
		for _, line := range strings.Split(out.String(), "\n") {
			f := strings.Fields(line)
			if len(f) >= 3 && f[0] == name {
				found = true
				if f[1] != "running" || f[2] == "-" {
					t.Errorf("status line for %s: %q", name, line)
				}
			}
		}
		if !found {
			t.Errorf("status does not list %s:\n%s", name, out.String())
		}
	}
}
