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
}

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
		if c := meta.FindStatusCondition(claim.Status.Conditions, sandboxv1beta1.SandboxConditionReady); c != nil && c.Status != metav1.ConditionTrue {
			v.Message = c.Message
		}
	}
	if sb != nil {
		if claim == nil {
			v.Name, v.Namespace = sb.Name, sb.Namespace
			v.Labels = sb.Labels
			v.CreationTimestamp = sb.CreationTimestamp
			if kind, owner := remote.Owner(sb); remote.IsWarmPoolKind(kind) {
				v.Pool = owner
			}
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
}

func newLsCommand(prog string, flags *clusterFlags) *cobra.Command {
	o := &lsOptions{}
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List sandboxes: claims, and sandboxes created without one",
		Long: "List the sandboxes of a namespace: every SandboxClaim with the Sandbox bound to it,\n" +
			"and Sandboxes that no claim owns. Idle warm-pool members are left out unless --warm.\n\n" +
			"STATE is Running, Pending, Suspending, Suspended, Terminating, Expired, Finished or\n" +
			"Failed; -o wide adds the Sandbox, its Pod IP, template, the Ready reason and\n" +
			"what keeps a sandbox from starting (a missing image, a crash, no node fits).",
		Example: "  " + prog + " ls\n  " + prog + " ls -A -o wide\n  " + prog + " ls -l team=research -o json",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch o.output {
			case "", "wide", "json", "yaml", "name":
			default:
				return usagef("unknown output format %q: use wide, json, yaml or name", o.output)
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
			views, err := listViews(cmd.Context(), s.kube(), ns, sel, o.warm)
			if err != nil {
				return err
			}
			return printViews(cmd.OutOrStdout(), views, o.output, o.allNamespaces, time.Now())
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.output, "output", "o", "", "output format: wide, json, yaml or name")
	f.StringVarP(&o.selector, "selector", "l", "", "label selector on the claims (and on Sandboxes without a claim), e.g. team=research")
	f.BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "list sandboxes in every namespace")
	f.BoolVar(&o.warm, "warm", false, "also list idle warm-pool members")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"wide", "json", "yaml", "name"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
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
	wide := output == "wide"
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	header := []string{"NAME", "POOL", "STATE", "AGE", "NODE", "RUNTIME CLASS"}
	if wide {
		header = append(header, "SANDBOX", "IP", "TEMPLATE", "REASON", "MESSAGE")
	}
	if withNamespace {
		header = append([]string{"NAMESPACE"}, header...)
	}
	writeRow(tw, header)
	for _, v := range views {
		row := []string{v.Name, none(v.Pool), v.State, age(v.CreationTimestamp, now), none(v.Node), none(v.RuntimeClassName)}
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
