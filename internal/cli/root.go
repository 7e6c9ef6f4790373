// Package cli implements the agent-sandbox command line. Each subcommand
// lives in its own file (up.go, down.go, status.go, ...) and registers itself
// in NewRootCommand; commands return errors and never exit or print stack
// traces themselves: Execute turns errors into one line naming the cause and
// the fix.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/agent-sandbox/agent-sandbox/internal/localcluster"
)

// NewRootCommand builds the command tree.
func NewRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "agent-sandbox",
		Short: "Isolated, stateful sandboxes for AI agents on Kubernetes",
		Long: "agent-sandbox runs sandboxes for AI agents on Kubernetes.\n\n" +
			"`agent-sandbox up` starts a real single-node Kubernetes cluster on this machine\n" +
			"(etcd, apiserver, controller-manager, scheduler, containerd, kubelet) with\n" +
			"gVisor-isolated pods; `agent-sandbox down` removes it again.",
		SilenceUsage:  true, // a failed command is not a usage error
		SilenceErrors: true, // Execute prints errors itself, once
	}
	root.AddCommand(newUpCommand(), newDownCommand(), newStatusCommand(), newBenchCommand())
	return root
}

// Execute runs the CLI with os.Args and returns the process exit code.
func Execute() (code int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(os.Stderr, "agent-sandbox: internal error: %v (please report this)\n", r)
			code = 2
		}
	}()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := NewRootCommand().ExecuteContext(ctx); err != nil {
		printError(os.Stderr, err, ctx.Err() != nil)
		return 1
	}
	return 0
}

// printError prints err as one line: the cause, and the fix when known.
func printError(w io.Writer, err error, interrupted bool) {
	if interrupted || errors.Is(err, context.Canceled) {
		fmt.Fprintln(w, "agent-sandbox: interrupted; components already started keep running (fix: run `agent-sandbox up` to finish or `agent-sandbox down` to remove them)")
		return
	}
	var ue *localcluster.Error
	if errors.As(err, &ue) {
		fmt.Fprintf(w, "agent-sandbox: %s\n", ue.Error())
		return
	}
	fmt.Fprintf(w, "agent-sandbox: %v\n", err)
}

// progress prints step lines prefixed with the time since the command began.
type progress struct {
	w     io.Writer
	start time.Time
}

func newProgress(w io.Writer) *progress { return &progress{w: w, start: time.Now()} }

func (p *progress) step(msg string) {
	fmt.Fprintf(p.w, "[%5.1fs] %s\n", time.Since(p.start).Seconds(), msg)
}
