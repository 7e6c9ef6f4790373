package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/cli/remote"
)

// modeOptions are the flags of suspend and resume.
type modeOptions struct {
	wait    bool
	timeout time.Duration
	quiet   bool
}

func (o *modeOptions) addFlags(cmd *cobra.Command, waitFor string) {
	cmd.Flags().BoolVarP(&o.wait, "wait", "w", false, "wait until the sandbox is "+waitFor)
	cmd.Flags().DurationVar(&o.timeout, "timeout", 2*time.Minute, "how long --wait waits")
	cmd.Flags().BoolVarP(&o.quiet, "quiet", "q", false, "no progress lines on stderr")
}

func newSuspendCommand(prog string, flags *clusterFlags) *cobra.Command {
	o := &modeOptions{}
	cmd := &cobra.Command{
		Use:   "suspend NAME...",
		Short: "Suspend sandboxes: delete their Pods, keep their identity and volumes",
		Long: "Set spec.operatingMode=Suspended on each sandbox's Sandbox: the controller deletes\n" +
			"the Pod (freeing its CPU and memory) and keeps the Sandbox, its Service and its\n" +
			"volumes. `" + prog + " resume` brings it back; so does the sandbox-router on the next\n" +
			"request, when auto-resume is on. Files outside persistent volumes are lost.",
		Example:           "  " + prog + " suspend my-sandbox --wait",
		Args:              minArgs(1, "at least one sandbox NAME"),
		ValidArgsFunction: completeSandboxNames(flags, 0),
		RunE: func(cmd *cobra.Command, args []string) error {
			return setMode(cmd, prog, flags, o, args, sandboxv1beta1.OperatingModeSuspended)
		},
	}
	o.addFlags(cmd, "Suspended (its Pod gone)")
	return cmd
}

// setMode patches spec.operatingMode of each named sandbox and, with
// --wait, waits for the result.
func setMode(cmd *cobra.Command, prog string, flags *clusterFlags, o *modeOptions, names []string, mode sandboxv1beta1.OperatingMode) error {
	ctx := cmd.Context()
	s, err := flags.connect(ctx)
	if err != nil {
		return err
	}
	rep := newReporter(cmd.ErrOrStderr(), o.quiet)
	verb := map[sandboxv1beta1.OperatingMode]string{
		sandboxv1beta1.OperatingModeSuspended: "suspend",
		sandboxv1beta1.OperatingModeRunning:   "resume",
	}[mode]
	for _, name := range names {
		t, err := remote.Resolve(ctx, s.kube(), s.namespace, name)
		if err != nil {
			return err
		}
		sbName := t.SandboxName()
		if sbName == "" {
			return withFix(fmt.Errorf("cannot %s %s/%s: its claim is not bound to a Sandbox yet", verb, t.Namespace, name),
				fmt.Sprintf("wait for it with `%s ls` and try again", prog))
		}
		if err := remote.SetOperatingMode(ctx, s.kube(), t.Namespace, sbName, mode); err != nil {
			return err
		}
		rep.step("%s: operatingMode set to %s", name, mode)
		if !o.wait {
			continue
		}
		if err := waitMode(ctx, rep, s, t, sbName, mode, o.timeout, prog); err != nil {
			return err
		}
	}
	return nil
}

func waitMode(ctx context.Context, rep *reporter, s *session, t *remote.Target, sbName string, mode sandboxv1beta1.OperatingMode, timeout time.Duration, prog string) error {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var err error
	if mode == sandboxv1beta1.OperatingModeSuspended {
		done := rep.wait("waiting for %s to suspend", t.Name())
		err = remote.WaitSuspended(wctx, s.kube(), t.Namespace, sbName)
		done()
	} else {
		done := rep.wait("waiting for %s to become Ready", t.Name())
		_, err = remote.WaitSandboxReady(wctx, s.kube(), t.Namespace, sbName)
		done()
	}
	if err != nil {
		if ctx.Err() == nil && wctx.Err() != nil {
			return withFix(fmt.Errorf("sandbox %s/%s did not reach %s within %s", t.Namespace, t.Name(), mode, timeout),
				fmt.Sprintf("check it with `%s ls -o wide`, or wait longer with --timeout", prog))
		}
		return err
	}
	state := remote.StateSuspended
	if mode == sandboxv1beta1.OperatingModeRunning {
		state = remote.StateRunning
	}
	rep.step("%s is %s", t.Name(), state)
	return nil
}
