package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/cli/remote"
)

type rmOptions struct {
	wait           bool
	timeout        time.Duration
	ignoreNotFound bool
	quiet          bool
}

func newRmCommand(prog string, flags *clusterFlags) *cobra.Command {
	o := &rmOptions{}
	cmd := &cobra.Command{
		Use:     "rm NAME...",
		Aliases: []string{"delete"},
		Short:   "Delete sandboxes (their claim, Sandbox, Pod and volumes)",
		Long: "Delete each named sandbox: its SandboxClaim, which takes the Sandbox, Pod, Service\n" +
			"and volumes with it, or the Sandbox when it has no claim. With --wait, return once\n" +
			"they are gone.",
		Example:           "  " + prog + " rm my-sandbox\n  " + prog + " rm $(" + prog + " ls -o name -l team=research) --wait",
		Args:              minArgs(1, "at least one sandbox NAME"),
		ValidArgsFunction: completeSandboxNames(flags, 0),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			s, err := flags.connect(ctx)
			if err != nil {
				return err
			}
			rep := newReporter(cmd.ErrOrStderr(), o.quiet)
			var targets []*remote.Target
			for _, name := range args {
				t, err := remote.Resolve(ctx, s.kube(), s.namespace, name)
				if errors.Is(err, remote.ErrNotFound) && o.ignoreNotFound {
					continue
				}
				if err != nil {
					return err
				}
				if err := remote.Delete(ctx, s.kube(), t); err != nil {
					return err
				}
				rep.step("%s deleted", t.Name())
				targets = append(targets, t)
			}
			if !o.wait {
				return nil
			}
			wctx, cancel := context.WithTimeout(ctx, o.timeout)
			defer cancel()
			for _, t := range targets {
				if err := waitDeleted(wctx, rep, s, t); err != nil {
					if ctx.Err() == nil && wctx.Err() != nil {
						return withFix(fmt.Errorf("sandbox %s/%s is still being deleted after %s", t.Namespace, t.Name(), o.timeout),
							"wait longer with --timeout; check finalizers with `kubectl get sandbox -o yaml`")
					}
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&o.wait, "wait", "w", false, "wait until the claim and Sandbox are gone")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 2*time.Minute, "how long --wait waits")
	cmd.Flags().BoolVar(&o.ignoreNotFound, "ignore-not-found", false, "do not fail on names that do not exist")
	cmd.Flags().BoolVarP(&o.quiet, "quiet", "q", false, "no progress lines on stderr")
	return cmd
}

func waitDeleted(ctx context.Context, rep *reporter, s *session, t *remote.Target) error {
	done := rep.wait("waiting for %s to be gone", t.Name())
	defer done()
	if t.Claim != nil {
		if err := remote.WaitGone(ctx, s.kube(), func() client.ObjectList { return &extv1beta1.SandboxClaimList{} }, t.Namespace, t.Claim.Name); err != nil {
			return err
		}
	}
	if n := t.SandboxName(); n != "" {
		if err := remote.WaitGone(ctx, s.kube(), func() client.ObjectList { return &sandboxv1beta1.SandboxList{} }, t.Namespace, n); err != nil {
			return err
		}
	}
	done()
	rep.step("%s is gone", t.Name())
	return nil
}
