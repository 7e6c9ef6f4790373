package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"sigs.k8s.io/agent-sandbox/internal/cli/remote"
)

func TestProgramFor(t *testing.T) {
	for argv0, want := range map[string]string{
		"agent-sandbox":                  programName,
		"/usr/local/bin/agent-sandbox":   programName,
		"/usr/local/bin/kubectl-sandbox": pluginName,
		"kubectl-sandbox.exe":            pluginName,
		"./bin/something-else":           programName,
	} {
		if got := programFor(argv0); got != want {
			t.Errorf("programFor(%q) = %q, want %q", argv0, got, want)
		}
	}
}

func TestSplitRemote(t *testing.T) {
	for _, tc := range []struct {
		arg, name, path string
		ok              bool
	}{
		{"sb:dir/file", "sb", "dir/file", true},
		{"sb:", "sb", ".", true},
		{"sb:/abs", "sb", "/abs", true},
		{"./local:name", "", "", false},
		{":x", "", "", false},
		{"plain/path", "", "", false},
		{"/abs/a:b", "", "", false},
	} {
		name, path, ok := splitRemote(tc.arg)
		if name != tc.name || path != tc.path || ok != tc.ok {
			t.Errorf("splitRemote(%q) = %q, %q, %v", tc.arg, name, path, ok)
		}
	}
}

func TestPrintError(t *testing.T) {
	for _, tc := range []struct {
		prog, command string
		err           error
		interrupted   bool
		want          string
	}{
		{programName, "ls", errors.New("boom\n  with detail"), false, "agent-sandbox: boom with detail\n"},
		{programName, "exec", withFix(errors.New("x failed"), "do y"), false, "agent-sandbox: x failed (fix: do y)\n"},
		{pluginName, "exec", &remote.NotFoundError{Namespace: "ns", Name: "n"}, false,
			"kubectl sandbox: sandbox \"n\" not found in namespace \"ns\" (fix: list sandboxes with `kubectl sandbox ls -n ns`)\n"},
		{programName, "ls", usagef("bad"), false, "agent-sandbox: bad (fix: see `agent-sandbox ls --help`)\n"},
		{programName, "", usagef("bad"), false, "agent-sandbox: bad (fix: see `agent-sandbox --help`)\n"},
		{programName, "create", fmt.Errorf("waiting: %w", context.Canceled), true, "agent-sandbox: interrupted\n"},
		{programName, "create", withFix(errors.New("interrupted while waiting"), "rm it"), true, "agent-sandbox: interrupted while waiting (fix: rm it)\n"},
		{programName, "up", context.Canceled, true, "agent-sandbox: interrupted; components already started keep running"},
	} {
		var b bytes.Buffer
		printError(&b, tc.prog, tc.command, tc.err, tc.interrupted)
		if !strings.HasPrefix(b.String(), tc.want) || strings.Count(b.String(), "\n") != 1 {
			t.Errorf("printError(%v) = %q, want %q", tc.err, b.String(), tc.want)
		}
	}
}

func TestIsUsageError(t *testing.T) {
	if !isUsageError(usagef("x")) || !isUsageError(errors.New(`unknown command "x" for "agent-sandbox"`)) || isUsageError(errors.New("other")) {
		t.Error("isUsageError misclassifies")
	}
}

func TestReporterPlain(t *testing.T) {
	var b bytes.Buffer
	r := newReporter(&b, false)
	r.step("one %d", 1)
	done := r.wait("waiting for %s", "x")
	done()
	done()
	r.step("two")
	if got, want := b.String(), "one 1\nwaiting for x ...\ntwo\n"; got != want {
		t.Errorf("plain reporter wrote %q, want %q", got, want)
	}
	b.Reset()
	q := newReporter(&b, true)
	q.step("x")
	q.wait("y")()
	if b.Len() != 0 {
		t.Errorf("quiet reporter wrote %q", b.String())
	}
}

// TestFlagUsagesRenderPlainly: pflag takes a `quoted` word of a flag's
// usage as the name of its value, so `up --help` once showed
// "--platform make images". No flag of any command may have one.
func TestFlagUsagesRenderPlainly(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if strings.Contains(f.Usage, "`") {
				t.Errorf("%s --%s: usage %q has a backquote", c.CommandPath(), f.Name, f.Usage)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(NewRootCommand())
}
