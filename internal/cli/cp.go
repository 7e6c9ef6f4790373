package cli

import (
	"strings"
	"time"

	"github.com/spf13/cobra"

	"sigs.k8s.io/agent-sandbox/internal/cli/remote"
)

type cpOptions struct {
	timeout time.Duration
	quiet   bool
}

func newCpCommand(prog string, flags *clusterFlags) *cobra.Command {
	o := &cpOptions{}
	cmd := &cobra.Command{
		Use:   "cp SRC DEST",
		Short: "Copy files and directories into or out of a sandbox",
		Long: "Copy a file or a directory tree between this machine and a sandbox. One side is\n" +
			"NAME:PATH (PATH relative to the sandbox's workspace unless absolute; NAME: alone is\n" +
			"the workspace). Like cp -r: when DEST is an existing directory (or ends in /) the\n" +
			"copy goes inside it, else it becomes DEST. Directories travel as a tar stream\n" +
			"through the sandbox's process API, so the sandbox needs tar, as for kubectl cp.\n" +
			"Entries that would land outside DEST are refused. DEST - writes one file to\n" +
			"stdout; SRC - reads stdin into one file.",
		Example: "  " + prog + " cp ./src my-sandbox:src\n" +
			"  " + prog + " cp my-sandbox:results ./results\n" +
			"  " + prog + " cp data.csv my-sandbox:\n" +
			"  " + prog + " cp my-sandbox:out/report.json - | jq .\n" +
			"  echo 'print(1)' | " + prog + " cp - my-sandbox:main.py",
		Args: exactArgs(2, "SRC and DEST, one of them NAME:PATH"),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, dest := args[0], args[1]
			sName, sPath, sRemote := splitRemote(src)
			dName, dPath, dRemote := splitRemote(dest)
			switch {
			case sRemote && dRemote:
				return usagef("copying between two sandboxes is not supported: copy to this machine first")
			case !sRemote && !dRemote:
				return usagef("one of SRC and DEST must be a sandbox path NAME:PATH")
			case src == "-" && (dPath == "." || strings.HasSuffix(dPath, "/")):
				return usagef("copying stdin needs a file name: NAME:PATH/FILE")
			}
			name := dName
			if sRemote {
				name = sName
			}
			ctx := cmd.Context()
			s, err := flags.connect(ctx)
			if err != nil {
				return err
			}
			defer s.close()
			rep := newReporter(cmd.ErrOrStderr(), o.quiet)
			sb, _, err := attachReady(ctx, s, rep, prog, name, o.timeout)
			if err != nil {
				return err
			}
			defer disconnect(sb)
			done := rep.wait("copying %s to %s", src, dest)
			switch {
			case sRemote && dest == "-":
				// One file's bytes streamed to stdout, as `cat` would.
				err = remote.Cat(ctx, sb, sPath, cmd.OutOrStdout())
			case sRemote:
				err = remote.Download(ctx, sb, sPath, dest)
			case src == "-":
				err = remote.WriteStream(ctx, sb, dPath, cmd.InOrStdin())
			default:
				err = remote.Upload(ctx, sb, src, dPath)
			}
			done()
			if rerr := reachError(err, flags, name, prog); rerr != nil {
				return rerr
			}
			if err != nil {
				return err
			}
			rep.step("copied %s to %s", src, dest)
			return nil
		},
	}
	cmd.Flags().DurationVar(&o.timeout, "timeout", defaultReadyTimeout, "how long to wait for a sandbox that is still starting")
	cmd.Flags().BoolVarP(&o.quiet, "quiet", "q", false, "no progress lines on stderr")
	return cmd
}

// splitRemote splits NAME:PATH. A colon after a slash (./a:b) or a
// leading colon does not make a sandbox path; NAME: alone is the
// workspace.
func splitRemote(arg string) (name, path string, ok bool) {
	i := strings.IndexByte(arg, ':')
	if i <= 0 || strings.ContainsRune(arg[:i], '/') {
		return "", "", false
	}
	path = arg[i+1:]
	if path == "" {
		path = "."
	}
	return arg[:i], path, true
}
