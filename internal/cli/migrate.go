package cli

import (
	"fmt"

	"github.com/spf13/cobra"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sigs.k8s.io/agent-sandbox/internal/migrate"
	"sigs.k8s.io/agent-sandbox/internal/scheme"
)

// newMigrateCommand is `migrate --phase=bootstrap|migrate`: the v1alpha1 to
// v1beta1 upgrade steps of the reference's migrate.sh.
func newMigrateCommand(prog string, flags *clusterFlags) *cobra.Command {
	var (
		phase         string
		dryRun        bool
		allNamespaces bool
	)
	cmd := &cobra.Command{
		Use:   "migrate --phase=bootstrap|migrate",
		Short: "Move objects from the v1alpha1 API to v1beta1 (before and after upgrading)",
		Long: "Upgrade from a v1alpha1 install in two phases; both are idempotent.\n\n" +
			"  --phase=bootstrap  before upgrading: create a shadow-pool-<template> SandboxWarmPool\n" +
			"                     (replicas 0) for every template used by a cold-start v1alpha1\n" +
			"                     claim, because a v1beta1 claim names a pool, not a template.\n" +
			"  --phase=migrate    after upgrading: rewrite every Sandbox, SandboxTemplate,\n" +
			"                     SandboxWarmPool and SandboxClaim once (annotation\n" +
			"                     agents.x-k8s.io/storage-migrated-at) so etcd holds v1beta1 only,\n" +
			"                     then set the CRDs' status.storedVersions to [v1beta1].\n\n" +
			"All namespaces by default; -n limits bootstrap and the rewrite to one (storedVersions\n" +
			"are then left alone). --dry-run sends every write with dryRun=All.",
		Example: "  " + prog + " migrate --phase=bootstrap --dry-run\n" +
			"  " + prog + " migrate --phase=bootstrap\n" +
			"  # upgrade the CRDs and the controller, then:\n" +
			"  " + prog + " migrate --phase=migrate",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if phase != "bootstrap" && phase != "migrate" {
				return usagef("--phase must be bootstrap or migrate, got %q", phase)
			}
			ns := ""
			if cmd.Flags().Changed("namespace") && !allNamespaces {
				var err error
				if ns, err = flags.namespace(); err != nil {
					return err
				}
			}
			cfg, err := flags.restConfig()
			if err != nil {
				return err
			}
			c, err := client.New(cfg, client.Options{Scheme: migrateScheme})
			if err != nil {
				return fmt.Errorf("connecting to the cluster: %w", err)
			}
			o := migrate.Options{Namespace: ns, DryRun: dryRun, Out: cmd.OutOrStdout()}
			if phase == "bootstrap" {
				pools, err := migrate.Bootstrap(cmd.Context(), c, o)
				if err != nil {
					return withFix(err, "fix the cause and run the bootstrap again (it is idempotent)")
				}
				fmt.Fprintf(cmd.OutOrStdout(), "bootstrap: %d shadow pool(s) %s\n", len(pools), map[bool]string{true: "would be created", false: "created"}[dryRun])
				return nil
			}
			res, err := migrate.Migrate(cmd.Context(), c, o)
			fmt.Fprintf(cmd.OutOrStdout(), "migrate: %d rewritten, %d already migrated, storedVersions pruned on %d CRD(s)\n",
				res.Rewritten, res.AlreadyMigrated, len(res.StoredVersionsPruned))
			if err != nil {
				return withFix(err, "fix the cause and run the migrate phase again (migrated objects are skipped)")
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&phase, "phase", "", "bootstrap (before the upgrade) or migrate (after it)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "report what would change and change nothing")
	cmd.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "every namespace (the default unless -n is given)")
	return cmd
}

// migrateScheme adds what the migration reads besides unstructured
// objects: CRDs (storedVersions).
var migrateScheme = scheme.Must(apiextensionsv1.AddToScheme)
