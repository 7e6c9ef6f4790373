package cli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"sigs.k8s.io/agent-sandbox/clients/go/sandbox"
)

type execOptions struct {
	stdin, tty bool
	workdir    string
	env        []string
	timeout    time.Duration
	quiet      bool
}

func newExecCommand(prog string, flags *clusterFlags) *cobra.Command {
	o := &execOptions{}
	cmd := &cobra.Command{
		Use:   "exec NAME [flags] -- COMMAND [ARG...]",
		Short: "Run a command in a sandbox, streaming its output; exits with its exit code",
		Long: "Run COMMAND (no shell: wrap pipelines in sh -c) in the sandbox NAME through its\n" +
			"process API, streaming stdout and stderr as they are written. The exit code of\n" +
			"the command becomes the exit code of " + prog + " (137 if it was killed by a signal).\n\n" +
			"-i forwards stdin; -t runs the command on a pseudo-terminal in the sandbox, with\n" +
			"your terminal in raw mode and window size changes forwarded (use -it for shells).\n" +
			"Without -t, Ctrl-C is forwarded as SIGINT (twice: the process is killed).\n" +
			"Relative paths and the working directory default to the sandbox's workspace.",
		Example: "  " + prog + " exec my-sandbox -- python3 -c 'print(6*7)'\n" +
			"  " + prog + " exec -it my-sandbox -- bash\n" +
			"  tar c src | " + prog + " exec -i my-sandbox -- tar x",
		Args:              minArgs(1, "a sandbox NAME and a COMMAND"),
		ValidArgsFunction: completeSandboxNames(flags, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, argv := args[0], args[1:]
			if dash := cmd.ArgsLenAtDash(); dash > 1 {
				return usagef("exec takes one sandbox NAME before --, got %q", args[:dash])
			}
			if len(argv) == 0 {
				if !o.tty {
					return usagef("exec needs a COMMAND after the sandbox name (e.g. `%s exec %s -- ls`)", prog, name)
				}
				argv = []string{"/bin/sh"}
			}
			return runExec(cmd, prog, flags, o, name, argv)
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&o.stdin, "stdin", "i", false, "forward stdin to the command")
	f.BoolVarP(&o.tty, "tty", "t", false, "run the command on a pseudo-terminal (needs a terminal on stdin)")
	f.StringVarP(&o.workdir, "workdir", "w", "", "working directory, relative to the sandbox's workspace")
	f.StringArrayVarP(&o.env, "env", "e", nil, "environment variable NAME=VALUE (repeatable)")
	f.DurationVar(&o.timeout, "timeout", defaultReadyTimeout, "how long to wait for a sandbox that is still starting")
	f.BoolVarP(&o.quiet, "quiet", "q", false, "no progress lines on stderr")
	return cmd
}

func runExec(cmd *cobra.Command, prog string, flags *clusterFlags, o *execOptions, name string, argv []string) error {
	env, err := parsePairs("--env", o.env)
	if err != nil {
		return err
	}
	stdin, stdout, stderr := cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr()
	stdinFile, _ := stdin.(*os.File)
	tty := o.tty
	if tty && (stdinFile == nil || !term.IsTerminal(int(stdinFile.Fd()))) {
		fmt.Fprintf(stderr, "%s: stdin is not a terminal; running without a TTY\n", prog)
		tty = false
	}

	ctx := cmd.Context()
	s, err := flags.connect(ctx)
	if err != nil {
		return err
	}
	defer s.close()
	rep := newReporter(stderr, o.quiet)
	sb, _, err := attachReady(ctx, s, rep, prog, name, o.timeout)
	if err != nil {
		return err
	}
	defer disconnect(sb)

	popts := &sandbox.ProcessOptions{Env: env, Cwd: o.workdir, Stdout: stdout, Stderr: stderr}
	if tty {
		cols, rows := termSize(int(stdinFile.Fd()))
		popts.TTY = &sandbox.TTYSize{Cols: cols, Rows: rows}
		if _, set := env["TERM"]; !set {
			if popts.Env == nil {
				popts.Env = map[string]string{}
			}
			popts.Env["TERM"] = cmp.Or(os.Getenv("TERM"), "xterm")
		}
	}

	// The process lives as long as this context: not the command's, which
	// Ctrl-C cancels; Ctrl-C is forwarded to the process instead.
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	p, err := sb.Start(pctx, argv, popts)
	if err != nil {
		return startError(ctx, sb, err, flags, name, prog, argv, o.workdir)
	}
	restore := func() {}
	if tty {
		// Raw mode: keystrokes (Ctrl-C included) go to the remote terminal,
		// which does the echoing and line editing.
		fd := int(stdinFile.Fd())
		old, err := term.MakeRaw(fd)
		if err != nil {
			p.Kill()
			return fmt.Errorf("putting the terminal in raw mode: %w", err)
		}
		restore = func() { _ = term.Restore(fd, old) }
		defer restore()
	}

	if o.stdin || tty {
		go func() {
			_, _ = io.Copy(p.Stdin(), stdin)
			if !tty {
				_ = p.Stdin().Close()
			}
		}()
	} else {
		_ = p.Stdin().Close()
	}

	var interrupted atomic.Bool
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGWINCH)
	defer signal.Stop(sigs)
	go func() {
		forwarded := 0
		for {
			select {
			case <-p.Done():
				return
			case sig := <-sigs:
				switch sig {
				case syscall.SIGWINCH:
					if tty {
						cols, rows := termSize(int(stdinFile.Fd()))
						_ = p.Resize(sandbox.TTYSize{Cols: cols, Rows: rows})
					}
					continue
				case syscall.SIGINT:
					interrupted.Store(true)
					_ = p.Signal(sandbox.SignalInterrupt)
				default:
					_ = p.Signal(sandbox.SignalTerminate)
				}
				if forwarded++; forwarded > 1 {
					p.Kill()
				}
			}
		}
	}()

	code, err := p.Wait()
	restore()
	if err != nil {
		return withFix(fmt.Errorf("lost the connection to %q in sandbox %s: %w", strings.Join(argv, " "), name, err),
			"run it again; pass -v to see the connection's logs")
	}
	switch {
	case code == 0:
		return nil
	case code < 0 && interrupted.Load():
		code = exitInterrupted
	case code < 0 || code > 255:
		code = exitSignaled
	}
	return &exitCodeError{code: code}
}

// termSize returns the terminal's size, 80x24 when unknown.
func termSize(fd int) (cols, rows uint32) {
	w, h, err := term.GetSize(fd)
	if err != nil || w <= 0 || h <= 0 {
		return 80, 24
	}
	return uint32(w), uint32(h)
}
