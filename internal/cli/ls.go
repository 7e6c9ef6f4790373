package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/cli/remote"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

// sandboxView is one sandbox as ls (and create -o json|yaml) reports it:
// a claim with the Sandbox bound to it, or a Sandbox without a claim.
type sandboxView struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Claim     string `json:"claim,omitempty"`
	Sandbox   string `json:"sandbox,omitempty"`
	Pool      string `json:"pool,omitempty"`
	Template  string `json:"template,omitempty"`
	State     string `json:"state"`
	Reason    string `json:"reason,omitempty"`
	// Message is the Ready condition's message while not Ready; Problem
	// its part naming what keeps the Pod from starting, if any.
	Message           string            `json:"message,omitempty"`
	Problem           string            `json:"problem,omitempty"`
	Node              string            `json:"node,omitempty"`
	RuntimeClassName  string            `json:"runtimeClassName,omitempty"`
	Pod               string            `json:"pod,omitempty"`
	PodIP             string            `json:"podIP,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	CreationTimestamp metav1.Time       `json:"creationTimestamp"`
	// ExpiresAt is when the sandbox is shut down (claim lifecycle or
	// Sandbox shutdownTime); nil for never.
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`
	// Origin tells how the sandbox came to be: claimed/warm (a claim
	// took it from the warm pool), claimed/cold (a claim had it started),
	// idle (a warm-pool member nobody claimed yet), direct (a Sandbox
	// made without a claim, from a template or with kubectl).
	Origin string `json:"origin"`
}

// Origins of a sandbox (sandboxView.Origin).
const (
	originClaimedWarm = "claimed/warm"
	originClaimedCold = "claimed/cold"
	originClaimed     = "claimed"
	originIdle        = "idle"
	originDirect      = "direct"
)

// viewList is the -o json|yaml document of ls.
type viewList struct {
	Items []sandboxView `json:"items"`
}

// newView describes a claim and/or its Sandbox (one may be nil).
func newView(claim *extv1beta1.SandboxClaim, sb *sandboxv1beta1.Sandbox) sandboxView {
	v := sandboxView{}
	v.State, v.Reason = remote.State(claim, sb)
	if claim != nil {
		v.Name, v.Namespace, v.Claim = claim.Name, claim.Namespace, claim.Name
		v.Pool = claim.Spec.WarmPoolRef.Name
		v.Labels = claim.Labels
		v.CreationTimestamp = claim.CreationTimestamp
		v.Sandbox = claim.Status.SandboxStatus.Name
		v.Origin = originClaimed
		if lc := claim.Spec.Lifecycle; lc != nil && lc.ShutdownTime != nil {
			v.ExpiresAt = lc.ShutdownTime.DeepCopy()
		}
		if c := meta.FindStatusCondition(claim.Status.Conditions, sandboxv1beta1.SandboxConditionReady); c != nil && c.Status != metav1.ConditionTrue {
			v.Message = c.Message
		}
	}
	if sb != nil {
		if claim == nil {
			v.Name, v.Namespace = sb.Name, sb.Namespace
			v.Labels = sb.Labels
			v.CreationTimestamp = sb.CreationTimestamp
			v.Origin = originDirect
			if kind, owner := remote.Owner(sb); remote.IsWarmPoolKind(kind) {
				v.Pool, v.Origin = owner, originIdle
			}
		} else {
			switch sb.Labels[labels.LaunchType] {
			case labels.LaunchTypeWarm:
				v.Origin = originClaimedWarm
			case labels.LaunchTypeCold:
				v.Origin = originClaimedCold
			}
		}
		if sb.Spec.ShutdownTime != nil && (v.ExpiresAt == nil || sb.Spec.ShutdownTime.Before(v.ExpiresAt)) {
			v.ExpiresAt = sb.Spec.ShutdownTime.DeepCopy()
		}
		v.Sandbox = sb.Name
		v.Message, v.Problem = remote.ReadyMessage(sb), remote.Problem(sb)
		v.Template = sb.Annotations[labels.SandboxTemplateRef]
		v.Node = sb.Status.NodeName
		if rc := sb.Spec.PodTemplate.Spec.RuntimeClassName; rc != nil {
			v.RuntimeClassName = *rc
		}
		if !sb.IsSuspended() {
			v.Pod = remote.PodName(sb)
		}
		if len(sb.Status.PodIPs) > 0 {
			v.PodIP = sb.Status.PodIPs[0]
		}
	}
	return v
}

type lsOptions struct {
	output        string
	selector      string
	allNamespaces bool
	warm          bool
	watch         bool
}

func newLsCommand(prog string, flags *clusterFlags) *cobra.Command {
	o := &lsOptions{}
	cmd := &cobra.Command{
		Use:     "ls [NAME...]",
		Aliases: []string{"list", "get"},
		Short:   "List sandboxes: claims, and sandboxes created without one",
		Long: "List the sandboxes of a namespace (or only those NAMEd): every SandboxClaim with the\n" +
			"Sandbox bound to it, and Sandboxes that no claim owns. Idle warm-pool members are\n" +
			"left out unless --warm (or named).\n\n" +
			"ORIGIN is claimed/warm (a claim took it from the warm pool), claimed/cold (a claim\n" +
			"had it started), idle (a warm-pool member nobody claimed yet) or direct (made\n" +
			"without a claim). EXPIRES is the time left before it is shut down, or never.\n" +
			"STATE is Running, Pending, Suspending, Suspended, Terminating, Expired, Finished or\n" +
			"Failed; -o wide adds the Sandbox, its Pod IP, template, the Ready reason and\n" +
			"what keeps a sandbox from starting (a missing image, a crash, no node fits).\n" +
			"--watch prints the table, then a row each time a sandbox changes, until Ctrl-C.",
		Example: "  " + prog + " ls\n  " + prog + " ls my-sandbox\n  " + prog + " ls -A -o wide\n" +
			"  " + prog + " ls -l team=research -o json\n  " + prog + " ls --watch",
		ValidArgsFunction: completeSandboxNames(flags, 0),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch o.output {
			case "", "wide", "json", "yaml", "name":
			default:
				return usagef("unknown output format %q: use wide, json, yaml or name", o.output)
			}
			if o.watch && o.output != "" && o.output != "wide" {
				return usagef("--watch prints tables: use it without -o, or with -o wide")
			}
			sel, err := k8slabels.Parse(o.selector)
			if err != nil {
				return usagef("invalid --selector %q: %v", o.selector, err)
			}
			s, err := flags.connect(cmd.Context())
			if err != nil {
				return err
			}
			ns := s.namespace
			if o.allNamespaces {
				ns = ""
			}
			list := func(ctx context.Context) ([]sandboxView, error) {
				views, err := listViews(ctx, s.kube(), ns, sel, o.warm || len(args) > 0)
				if err != nil {
					return nil, err
				}
				return pickNamed(views, args), nil
			}
			if o.watch {
				return watchViews(cmd.Context(), cmd.OutOrStdout(), s.kube(), ns, list, o.output, o.allNamespaces)
			}
			views, err := list(cmd.Context())
			if err != nil {
				return err
			}
			if len(args) > 0 && len(views) == 0 {
				return &remote.NotFoundError{Namespace: s.namespace, Name: args[0]}
			}
			if err := printViews(cmd.OutOrStdout(), views, o.output, o.allNamespaces, time.Now()); err != nil {
				return err
			}
			return missingNamed(views, args, s.namespace)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.output, "output", "o", "", "output format: wide, json, yaml or name")
	f.StringVarP(&o.selector, "selector", "l", "", "label selector on the claims (and on Sandboxes without a claim), e.g. team=research")
	f.BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "list sandboxes in every namespace")
	f.BoolVar(&o.warm, "warm", false, "also list idle warm-pool members")
	f.BoolVarP(&o.watch, "watch", "w", false, "after the table, print a row each time a sandbox changes (until interrupted)")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"wide", "json", "yaml", "name"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// pickNamed keeps the views named in names (all of them when none).
func pickNamed(views []sandboxView, names []string) []sandboxView {
	if len(names) == 0 {
		return views
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var out []sandboxView
	for _, v := range views {
		if want[v.Name] || want[v.Sandbox] {
			out = append(out, v)
		}
	}
	return out
}

// missingNamed is a *remote.NotFoundError for the first name no view has.
func missingNamed(views []sandboxView, names []string, namespace string) error {
	for _, n := range names {
		found := false
		for _, v := range views {
			found = found || v.Name == n || v.Sandbox == n
		}
		if !found {
			return &remote.NotFoundError{Namespace: namespace, Name: n}
		}
	}
	return nil
}

// watchViews prints the table, then, on every change of a claim or
// Sandbox, the rows that changed (a removed sandbox as STATE Deleted),
// until ctx ends. Watches that end (apiserver timeouts) are restarted.
func watchViews(ctx context.Context, w io.Writer, c client.WithWatch, namespace string,
	list func(context.Context) ([]sandboxView, error), output string, withNamespace bool) error {
	views, err := list(ctx)
	if err != nil {
		return err
	}
	// Rows are compared without AGE and EXPIRES, which change by
	// themselves.
	key := func(v sandboxView) string { return v.Namespace + "/" + v.Name }
	sig := func(v sandboxView) string {
		v.CreationTimestamp, v.ExpiresAt = metav1.Time{}, nil
		b, _ := json.Marshal(v)
		return string(b)
	}
	seen := map[string]sandboxView{}
	for _, v := range views {
		seen[key(v)] = v
	}
	if err := printViews(w, views, output, withNamespace, time.Now()); err != nil {
		return err
	}
	for ctx.Err() == nil {
		wc, err := c.Watch(ctx, &extv1beta1.SandboxClaimList{}, client.InNamespace(namespace))
		if err != nil {
			return watchEnd(ctx, fmt.Errorf("watching SandboxClaims: %w", err))
		}
		ws, err := c.Watch(ctx, &sandboxv1beta1.SandboxList{}, client.InNamespace(namespace))
		if err != nil {
			wc.Stop()
			return watchEnd(ctx, fmt.Errorf("watching Sandboxes: %w", err))
		}
		err = func() error {
			defer wc.Stop()
			defer ws.Stop()
			for {
				select {
				case <-ctx.Done():
					return nil
				case _, ok := <-wc.ResultChan():
					if !ok {
						return nil
					}
				case _, ok := <-ws.ResultChan():
					if !ok {
						return nil
					}
				}
				views, err := list(ctx)
				if err != nil {
					return err
				}
				var changed []sandboxView
				now := map[string]bool{}
				for _, v := range views {
					now[key(v)] = true
					if old, ok := seen[key(v)]; !ok || sig(old) != sig(v) {
						changed = append(changed, v)
						seen[key(v)] = v
					}
				}
				for k, v := range seen {
					if !now[k] {
						v.State, v.Reason = "Deleted", ""
						changed = append(changed, v)
						delete(seen, k)
					}
				}
				if len(changed) > 0 {
					slices.SortFunc(changed, func(a, b sandboxView) int { return cmp.Compare(key(a), key(b)) })
					if err := printRows(w, changed, output, withNamespace, time.Now()); err != nil {
						return err
					}
				}
			}
		}()
		if err != nil {
			return watchEnd(ctx, err)
		}
	}
	return nil
}

// watchEnd: an interrupted watch is a normal end.
func watchEnd(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil //nolint:nilerr // the interrupt is the user's way to stop watching, not a failure
	}
	return err
}

// listViews lists the sandboxes of namespace ("" = all).
func listViews(ctx context.Context, c client.Client, namespace string, sel k8slabels.Selector, warm bool) ([]sandboxView, error) {
	var claims extv1beta1.SandboxClaimList
	if err := c.List(ctx, &claims, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing SandboxClaims: %w", err)
	}
	var sbs sandboxv1beta1.SandboxList
	if err := c.List(ctx, &sbs, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing Sandboxes: %w", err)
	}
	byName := make(map[string]*sandboxv1beta1.Sandbox, len(sbs.Items))
	for i := range sbs.Items {
		sb := &sbs.Items[i]
		byName[sb.Namespace+"/"+sb.Name] = sb
	}
	var views []sandboxView
	claimed := map[string]bool{}
	for i := range claims.Items {
		cl := &claims.Items[i]
		var sb *sandboxv1beta1.Sandbox
		if n := cl.Status.SandboxStatus.Name; n != "" {
			sb = byName[cl.Namespace+"/"+n]
			claimed[cl.Namespace+"/"+n] = true
		}
		if sel.Matches(k8slabels.Set(cl.Labels)) {
			views = append(views, newView(cl, sb))
		}
	}
	for i := range sbs.Items {
		sb := &sbs.Items[i]
		if claimed[sb.Namespace+"/"+sb.Name] {
			continue
		}
		kind, _ := remote.Owner(sb)
		switch {
		case remote.IsClaimKind(kind):
			// Its claim is listed (or just went away).
			continue
		case remote.IsWarmPoolKind(kind) && !warm:
			continue
		}
		if sel.Matches(k8slabels.Set(sb.Labels)) {
			views = append(views, newView(nil, sb))
		}
	}
	slices.SortFunc(views, func(a, b sandboxView) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return views, nil
}

// printViews writes views in the output format; now dates the AGE column.
func printViews(w io.Writer, views []sandboxView, output string, withNamespace bool, now time.Time) error {
	switch output {
	case "json":
		b, err := json.MarshalIndent(viewList{Items: nonNil(views)}, "", "  ")
		if err != nil {
			return fmt.Errorf("encoding: %w", err)
		}
		_, err = fmt.Fprintln(w, string(b))
		return err
	case "yaml":
		b, err := yaml.Marshal(viewList{Items: nonNil(views)})
		if err != nil {
			return fmt.Errorf("encoding: %w", err)
		}
		_, err = w.Write(b)
		return err
	case "name":
		for _, v := range views {
			fmt.Fprintln(w, v.Name)
		}
		return nil
	}
	if len(views) == 0 {
		_, err := fmt.Fprintln(w, "No sandboxes found.")
		return err
	}
	return writeTable(w, views, output, withNamespace, now, true)
}

// printRows prints rows of the table without its header (--watch).
func printRows(w io.Writer, views []sandboxView, output string, withNamespace bool, now time.Time) error {
	return writeTable(w, views, output, withNamespace, now, false)
}

func writeTable(w io.Writer, views []sandboxView, output string, withNamespace bool, now time.Time, withHeader bool) error {
	wide := output == "wide"
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	header := []string{"NAME", "POOL", "ORIGIN", "STATE", "AGE", "EXPIRES", "NODE", "RUNTIME CLASS"}
	if wide {
		header = append(header, "SANDBOX", "IP", "TEMPLATE", "REASON", "MESSAGE")
	}
	if withNamespace {
		header = append([]string{"NAMESPACE"}, header...)
	}
	if withHeader {
		writeRow(tw, header)
	}
	for _, v := range views {
		row := []string{v.Name, none(v.Pool), v.Origin, v.State, age(v.CreationTimestamp, now), expires(v.ExpiresAt, now), none(v.Node), none(v.RuntimeClassName)}
		if wide {
			row = append(row, none(v.Sandbox), none(v.PodIP), none(v.Template), none(v.Reason), none(cmp.Or(v.Problem, v.Message)))
		}
		if withNamespace {
			row = append([]string{v.Namespace}, row...)
		}
		writeRow(tw, row)
	}
	return tw.Flush()
}

func writeRow(w io.Writer, cols []string) {
	for i, c := range cols {
		if i > 0 {
			_, _ = io.WriteString(w, "\t")
		}
		_, _ = io.WriteString(w, c)
	}
	_, _ = io.WriteString(w, "\n")
}

func nonNil(v []sandboxView) []sandboxView {
	if v == nil {
		return []sandboxView{}
	}
	return v
}

func none(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// age formats like kubectl's AGE column.
func age(t metav1.Time, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

// expires formats the time left before shutdown like an age ("never"
// without one, "expired" once past).
func expires(t *metav1.Time, now time.Time) string {
	switch {
	case t == nil:
		return "never"
	case !t.After(now):
		return "expired"
	}
	return duration.HumanDuration(t.Sub(now))
}
