package cli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sigs.k8s.io/agent-sandbox/internal/cli/remote"
)

func newDescribeCommand(prog string, flags *clusterFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "describe NAME",
		Short: "Show a sandbox in detail: its claim, Sandbox, Pod, conditions and events",
		Long: "Show everything about one sandbox that helps to see why it is (not) working: what\n" +
			"ls shows, the conditions of its claim and Sandbox (with their messages), and the\n" +
			"events of the claim, the Sandbox and its Pod, oldest first.",
		Example:           "  " + prog + " describe my-sandbox",
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
			return describeTarget(ctx, cmd.OutOrStdout(), s.kube(), t, time.Now())
		},
	}
}

func describeTarget(ctx context.Context, w io.Writer, c client.Client, t *remote.Target, now time.Time) error {
	v := newView(t.Claim, t.Sandbox)
	tw := tabwriter.NewWriter(w, 0, 8, 1, ' ', 0)
	field := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	field("Name", v.Name)
	field("Namespace", v.Namespace)
	field("Claim", none(v.Claim))
	field("Sandbox", none(v.Sandbox))
	field("Pool", none(v.Pool))
	field("Template", none(v.Template))
	field("Origin", v.Origin)
	state := v.State
	if v.Reason != "" {
		state += " (" + v.Reason + ")"
	}
	field("State", state)
	if v.Problem != "" {
		field("Problem", v.Problem)
	}
	field("Created", fmt.Sprintf("%s (%s ago)", v.CreationTimestamp.UTC().Format(time.RFC3339), age(v.CreationTimestamp, now)))
	if v.ExpiresAt != nil {
		field("Expires", fmt.Sprintf("%s (in %s)", v.ExpiresAt.UTC().Format(time.RFC3339), expires(v.ExpiresAt, now)))
	} else {
		field("Expires", "never")
	}
	field("Pod", none(v.Pod))
	field("Pod IP", none(v.PodIP))
	field("Node", none(v.Node))
	field("Runtime class", none(v.RuntimeClassName))
	keys := make([]string, 0, len(v.Labels))
	for k, val := range v.Labels {
		keys = append(keys, k+"="+val)
	}
	slices.Sort(keys)
	field("Labels", none(strings.Join(keys, ",")))
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(w, "\nConditions:")
	ctw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(ctw, "  OBJECT\tTYPE\tSTATUS\tREASON\tAGE\tMESSAGE")
	conds := func(kind string, cs []metav1.Condition) {
		for _, cd := range cs {
			fmt.Fprintf(ctw, "  %s\t%s\t%s\t%s\t%s\t%s\n", kind, cd.Type, cd.Status, cd.Reason, age(cd.LastTransitionTime, now), oneLine(cd.Message))
		}
	}
	if t.Claim != nil {
		conds("SandboxClaim", t.Claim.Status.Conditions)
	}
	if t.Sandbox != nil {
		conds("Sandbox", t.Sandbox.Status.Conditions)
	}
	if err := ctw.Flush(); err != nil {
		return err
	}

	evs, err := targetEvents(ctx, c, t)
	fmt.Fprintln(w, "\nEvents:")
	if err != nil {
		fmt.Fprintf(w, "  (cannot list events: %s)\n", oneLine(err.Error()))
		return nil
	}
	if len(evs) == 0 {
		fmt.Fprintln(w, "  <none>")
		return nil
	}
	etw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(etw, "  TYPE\tREASON\tAGE\tOBJECT\tFROM\tMESSAGE")
	for _, e := range evs {
		from := cmp.Or(e.ReportingController, e.DeprecatedSource.Component)
		fmt.Fprintf(etw, "  %s\t%s\t%s\t%s\t%s\t%s\n", e.Type, e.Reason, age(metav1.Time{Time: eventTime(e)}, now),
			e.Regarding.Kind+"/"+e.Regarding.Name, none(from), oneLine(e.Note))
	}
	return etw.Flush()
}

// targetEvents lists the events (events.k8s.io, which also serves those
// recorded through core/v1) about the claim, the Sandbox and its Pod,
// matched by UID so that an older object of the same name does not
// lend its history.
func targetEvents(ctx context.Context, c client.Client, t *remote.Target) ([]eventsv1.Event, error) {
	uids := map[types.UID]bool{}
	if t.Claim != nil {
		uids[t.Claim.UID] = true
	}
	if t.Sandbox != nil {
		uids[t.Sandbox.UID] = true
		var pod corev1.Pod
		if err := c.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: t.PodName()}, &pod); err == nil {
			uids[pod.UID] = true
		}
	}
	var list eventsv1.EventList
	if err := c.List(ctx, &list, client.InNamespace(t.Namespace)); err != nil {
		return nil, fmt.Errorf("listing events in %s: %w", t.Namespace, err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if uids[e.Regarding.UID] {
			out = append(out, e)
		}
	}
	slices.SortStableFunc(out, func(a, b eventsv1.Event) int { return eventTime(a).Compare(eventTime(b)) })
	return out, nil
}

// eventTime is when an event last happened.
func eventTime(e eventsv1.Event) time.Time {
	switch {
	case e.Series != nil:
		return e.Series.LastObservedTime.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.DeprecatedLastTimestamp.IsZero():
		return e.DeprecatedLastTimestamp.Time
	}
	return e.CreationTimestamp.Time
}
