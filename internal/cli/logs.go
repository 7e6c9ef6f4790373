package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"

	"sigs.k8s.io/agent-sandbox/internal/cli/remote"
)

type logsOptions struct {
	container  string
	follow     bool
	previous   bool
	timestamps bool
	tail       int64
	since      time.Duration
}

func newLogsCommand(prog string, flags *clusterFlags) *cobra.Command {
	o := &logsOptions{}
	cmd := &cobra.Command{
		Use:   "logs NAME",
		Short: "Print the logs of a sandbox's Pod",
		Long: "Print the logs of the sandbox's Pod (its first container unless -c), as\n" +
			"kubectl logs does, through the Kubernetes API.",
		Example:           "  " + prog + " logs my-sandbox -f --tail 20",
		Args:              exactArgs(1, "a sandbox NAME"),
		ValidArgsFunction: completeSandboxNames(flags, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			s, err := flags.connect(ctx)
			if err != nil {
				return err
			}
			t, err := remote.Resolve(ctx, s.kube(), s.namespace, args[0])
			if err != nil {
				return err
			}
			switch {
			case t.Sandbox == nil:
				return withFix(fmt.Errorf("sandbox %s/%s has no Pod yet: its claim is not bound", t.Namespace, t.Name()),
					fmt.Sprintf("wait for it with `%s ls`", prog))
			case t.Sandbox.IsSuspended():
				return withFix(fmt.Errorf("sandbox %s/%s is suspended and has no Pod", t.Namespace, t.Name()),
					fmt.Sprintf("resume it with `%s resume %s`", prog, t.Name()))
			}
			opts := &corev1.PodLogOptions{Container: o.container, Follow: o.follow, Previous: o.previous, Timestamps: o.timestamps}
			if o.tail >= 0 {
				opts.TailLines = &o.tail
			}
			if o.since > 0 {
				secs := int64(o.since.Seconds())
				opts.SinceSeconds = &secs
			}
			pod := t.PodName()
			rc, err := s.helper.CoreClient.CoreV1().Pods(t.Namespace).GetLogs(pod, opts).Stream(ctx)
			if err != nil {
				return withFix(fmt.Errorf("reading the logs of pod %s/%s: %w", t.Namespace, pod, err),
					"check the pod with `kubectl describe pod -n "+t.Namespace+" "+pod+"`")
			}
			defer func() { _ = rc.Close() }()
			if _, err := io.Copy(cmd.OutOrStdout(), rc); err != nil && ctx.Err() == nil {
				return fmt.Errorf("reading the logs of pod %s/%s: %w", t.Namespace, pod, err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.container, "container", "c", "", "container (default: the Pod's first)")
	f.BoolVarP(&o.follow, "follow", "f", false, "stream new log lines until interrupted")
	f.BoolVarP(&o.previous, "previous", "p", false, "logs of the previous instance of the container")
	f.BoolVar(&o.timestamps, "timestamps", false, "prefix each line with its timestamp")
	f.Int64Var(&o.tail, "tail", -1, "only the last N lines (-1: all)")
	f.DurationVar(&o.since, "since", 0, "only lines newer than this (e.g. 5m)")
	return cmd
}
