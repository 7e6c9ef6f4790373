package cli

import (
	"context"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/cli/remote"
)

// Shell completion is cobra's (`completion bash|zsh|fish|powershell`);
// these functions complete sandbox, pool and template names from the
// cluster the flags point at. Failures complete nothing.

const completionTimeout = 5 * time.Second

// completeSandboxNames completes the names `ls` shows: claims and
// sandboxes no claim or pool owns. max is how many positional arguments
// take a name (0: any number).
func completeSandboxNames(flags *clusterFlags, max int) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if max > 0 && len(args) >= max {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
		defer cancel()
		c, ns, ok := completionClient(flags)
		if !ok {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var names []cobra.Completion
		var claims extv1beta1.SandboxClaimList
		if err := c.List(ctx, &claims, client.InNamespace(ns)); err == nil {
			for _, cl := range claims.Items {
				names = append(names, cl.Name)
			}
		}
		var sbs sandboxv1beta1.SandboxList
		if err := c.List(ctx, &sbs, client.InNamespace(ns)); err == nil {
			for i := range sbs.Items {
				if kind, _ := remote.Owner(&sbs.Items[i]); kind == "" {
					names = append(names, sbs.Items[i].Name)
				}
			}
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}

// completePools completes SandboxWarmPool names.
func completePools(flags *clusterFlags) cobra.CompletionFunc {
	return completeNames(flags, func() client.ObjectList { return &extv1beta1.SandboxWarmPoolList{} })
}

// completeTemplates completes SandboxTemplate names.
func completeTemplates(flags *clusterFlags) cobra.CompletionFunc {
	return completeNames(flags, func() client.ObjectList { return &extv1beta1.SandboxTemplateList{} })
}

// completeNames completes the names of the objects newList lists in the
// namespace; any failure completes nothing rather than printing an error
// into the user's shell.
func completeNames(flags *clusterFlags, newList func() client.ObjectList) cobra.CompletionFunc {
	return func(cmd *cobra.Command, _ []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
		defer cancel()
		c, ns, ok := completionClient(flags)
		if !ok {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		list := newList()
		if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		names := make([]cobra.Completion, 0, len(items))
		for _, o := range items {
			if m, err := meta.Accessor(o); err == nil {
				names = append(names, m.GetName())
			}
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}

func completionClient(flags *clusterFlags) (client.Client, string, bool) {
	ns, err := flags.namespace()
	if err != nil {
		return nil, "", false
	}
	cfg, err := flags.restConfig()
	if err != nil {
		return nil, "", false
	}
	flags.logger(os.Stderr) // silence client-go unless -v
	c, err := client.New(cfg, client.Options{Scheme: cliScheme})
	if err != nil {
		return nil, "", false
	}
	return c, ns, true
}
