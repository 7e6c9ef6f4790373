package cli

import (
	"bytes"
	"testing"
)

// A missing or unknown phase is a usage error, before any cluster access.
func TestMigratePhaseValidation(t *testing.T) {
	for _, args := range [][]string{{"migrate"}, {"migrate", "--phase=upgrade"}} {
		root := newRootCommand(programName)
		root.SetArgs(append(args, "--kubeconfig=/nonexistent"))
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		err := root.Execute()
		if err == nil || !isUsageError(err) {
			t.Errorf("%v: err = %v, want a usage error", args, err)
		}
	}
}
