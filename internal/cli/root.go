// Package cli implements the agent-sandbox command line. Each subcommand
// lives in its own file (up.go, down.go, status.go, create.go, ls.go,
// exec.go, ...) and registers itself in newRootCommand; commands return
// errors and never exit or print stack traces themselves: Execute turns
// errors into one line naming the cause and the fix, and into the exit
// code (0 ok, 1 failed, 2 usage error; exec: the remote command's code).
//
// The same binary is a kubectl plugin: installed (or symlinked) as
// kubectl-sandbox, it presents itself as `kubectl sandbox`.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"sigs.k8s.io/agent-sandbox/internal/localcluster"
)

// Program names: the CLI's own, and how kubectl shows its plugin.
const (
	programName  = "agent-sandbox"
	pluginBinary = "kubectl-sandbox"
	pluginName   = "kubectl sandbox"
)

// NewRootCommand builds the command tree of agent-sandbox.
func NewRootCommand() *cobra.Command { return newRootCommand(programName) }

// newRootCommand builds the command tree, presented as prog ("agent-sandbox"
// or "kubectl sandbox").
func newRootCommand(prog string) *cobra.Command {
	flags := newClusterFlags()
	root := &cobra.Command{
		Use:   prog,
		Short: "Isolated, stateful sandboxes for AI agents on Kubernetes",
		Long: prog + " runs sandboxes for AI agents on Kubernetes.\n\n" +
			"Work with sandboxes on any cluster with create, ls, describe, exec, cp, suspend,\n" +
			"resume, rm and logs, and serve them to agent frameworks with `mcp`. Commands and files\n" +
			"reach a sandbox through the sandbox-router: by default over a port-forward\n" +
			"through the Kubernetes API server, or at --router-url / --gateway.\n\n" +
			"`" + programName + " up` starts a real single-node Kubernetes cluster on this machine\n" +
			"(etcd, apiserver, controller-manager, scheduler, containerd, kubelet) with\n" +
			"gVisor-isolated pods; `" + programName + " down` removes it again.\n\n" +
			"Exit codes: 0 success, 1 failure, 2 usage error; exec exits with the remote\n" +
			"command's code (137 if it was killed by a signal, 130 after Ctrl-C).",
		SilenceUsage:  true, // a failed command is not a usage error
		SilenceErrors: true, // Execute prints errors itself, once
	}
	if prog == pluginName {
		// cobra's way for kubectl plugins: the command is named after the
		// binary (so completion works) and displayed as kubectl shows it.
		root.Use = pluginBinary
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: pluginName}
	}
	flags.addFlags(root.PersistentFlags())
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{msg: err.Error()} })
	root.AddCommand(newUpCommand(), newDownCommand(), newStatusCommand(flags), newBenchCommand())
	root.AddCommand(
		newCreateCommand(prog, flags),
		newLsCommand(prog, flags),
		newDescribeCommand(prog, flags),
		newExecCommand(prog, flags),
		newCpCommand(prog, flags),
		newPortForwardCommand(prog, flags),
		newSuspendCommand(prog, flags),
		newResumeCommand(prog, flags),
		newRmCommand(prog, flags),
		newLogsCommand(prog, flags),
		newMCPCommand(prog, flags),
		newMigrateCommand(prog, flags),
		newVersionCommand(prog, flags),
	)
	return root
}

// programFor names the program after how it was invoked: as
// kubectl-sandbox (a kubectl plugin) it is "kubectl sandbox".
func programFor(argv0 string) string {
	if strings.TrimSuffix(filepath.Base(argv0), ".exe") == pluginBinary {
		return pluginName
	}
	return programName
}

// Execute runs the CLI with os.Args and returns the process exit code.
func Execute() (code int) {
	prog := programFor(os.Args[0])
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(os.Stderr, "%s: internal error: %v (please report this)\n", prog, r)
			code = exitError
		}
	}()
	// controller-runtime's clients (install, migrate) log through a global
	// logger and print a goroutine stack when nobody set one; the CLI
	// reports errors itself, and -v turns on client-go's logs.
	ctrllog.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRootCommand(prog)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	var ec *exitCodeError
	if errors.As(err, &ec) {
		return ec.code
	}
	name := "" // the root command
	if cmd != nil && cmd.HasParent() {
		name = cmd.Name()
	}
	printError(os.Stderr, prog, name, err, ctx.Err() != nil)
	if isUsageError(err) {
		return exitUsage
	}
	return exitError
}

// isUsageError reports whether err is about the command line itself.
func isUsageError(err error) bool {
	var ue *usageError
	if errors.As(err, &ue) {
		return true
	}
	// cobra's own argument and command errors.
	msg := err.Error()
	return strings.HasPrefix(msg, "unknown command") || strings.HasPrefix(msg, "unknown flag") ||
		strings.HasPrefix(msg, "accepts ") || strings.HasPrefix(msg, "requires at least")
}

// printError prints err as one line: the cause, and the fix when known.
func printError(w io.Writer, prog, command string, err error, interrupted bool) {
	var ue *localcluster.Error
	switch {
	case errors.As(err, &ue):
		fmt.Fprintf(w, "%s: %s\n", prog, ue.Error())
		return
	case (interrupted || errors.Is(err, context.Canceled)) && (command == "up" || command == "down"):
		fmt.Fprintf(w, "%s: interrupted; components already started keep running (fix: run `%s up` to finish or `%s down` to remove them)\n",
			prog, programName, programName)
		return
	case interrupted || errors.Is(err, context.Canceled):
		var fe *fixError
		if !errors.As(err, &fe) {
			fmt.Fprintf(w, "%s: interrupted\n", prog)
			return
		}
	case isUsageError(err):
		help := prog + " --help"
		if command != "" {
			help = prog + " " + command + " --help"
		}
		fmt.Fprintf(w, "%s: %s (fix: see `%s`)\n", prog, oneLine(err.Error()), help)
		return
	}
	msg, fix := describe(err, prog)
	if fix != "" {
		fmt.Fprintf(w, "%s: %s (fix: %s)\n", prog, msg, fix)
		return
	}
	fmt.Fprintf(w, "%s: %s\n", prog, msg)
}

// noArgs is cobra.NoArgs as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("%s takes no arguments, got %q", cmd.Name(), args)
	}
	return nil
}

// exactArgs is cobra.ExactArgs as a usage error naming the arguments.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("%s needs %s, got %d argument(s)", cmd.Name(), names, len(args))
		}
		return nil
	}
}

// minArgs is cobra.MinimumNArgs as a usage error naming the arguments.
func minArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < n {
			return usagef("%s needs %s", cmd.Name(), names)
		}
		return nil
	}
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
