package main

import (
	"strings"
	"testing"
)

// Bad flags stop the agent at start with a message naming the flag (`up`
// reports an agent that exits at once); --check stops after the checks.
func TestFlags(t *testing.T) {
	ok := []string{"--node-name=n", "--pods=agent-sandbox-system/agent-sandbox-controller", "--check"}
	if err := run(ok); err != nil {
		t.Fatalf("run(%v) = %v", ok, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--node-name=n", "--check"}, "--pods"},
		{[]string{"--node-name=n", "--pods=nonamespace", "--check"}, "NAMESPACE/SERVICEACCOUNT"},
		{[]string{"--node-name=n", "--pods=Bad/sa", "--check"}, "namespace"},
		{[]string{"--node-name=n", "--pods=a/b", "--runtime=200ms", "--period=100ms", "--check"}, "runtime <= period"},
		{[]string{"--node-name=n", "--pods=a/b", "--runtime=0s", "--check"}, "runtime"},
		{[]string{"--pods=a/b", "--check"}, "--node-name"},
	} {
		t.Setenv("NODE_NAME", "")
		err := run(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run(%v) = %v, want an error naming %q", tc.args, err, tc.want)
		}
	}
}
