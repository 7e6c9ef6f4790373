package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/agent-sandbox/agent-sandbox/internal/localcluster"
)

// postUpHooks are extra steps run at the end of `up` (after the node is
// Ready and the --manifests are applied), e.g. waiting for the controller.
func postUpHooks() []localcluster.Hook { return nil }

func newUpCommand() *cobra.Command {
	var manifests, images []string
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start the local Kubernetes cluster (idempotent)",
		Long: "Start a single-node Kubernetes cluster on this machine, or finish starting it:\n" +
			"healthy components are reused, dead ones restarted. Pods run under gVisor\n" +
			"(RuntimeClass gvisor) or runc. Binaries come from `make deps`. Needs root.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			p := newProgress(out)
			cfg := localcluster.DefaultConfig()
			cfg.Images = images
			cfg.ManifestPaths = manifests
			cfg.PostUp = postUpHooks()
			c := localcluster.New(cfg, p.step)
			if err := c.Up(cmd.Context()); err != nil {
				return err
			}
			p.step("cluster ready")
			fmt.Fprintf(out, "\n  kubeconfig: %s\n", c.KubeconfigPath())
			fmt.Fprintf(out, "  try:        export KUBECONFIG=%s\n", c.KubeconfigPath())
			fmt.Fprintf(out, "              %s get nodes\n", c.KubectlPath())
			fmt.Fprintf(out, "  status:     agent-sandbox status\n")
			fmt.Fprintf(out, "  stop:       agent-sandbox down   (--purge also deletes the cluster's state)\n")
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&manifests, "manifests", nil, "YAML file or directory to server-side apply after the node is Ready (repeatable)")
	cmd.Flags().StringArrayVar(&images, "image", nil, "image tarball to import into containerd before starting (repeatable)")
	return cmd
}
