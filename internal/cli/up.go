package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"sigs.k8s.io/agent-sandbox/internal/localcluster"
	"sigs.k8s.io/agent-sandbox/internal/platform"
)

// postUpHooks are extra steps run at the end of `up` (after the node is
// Ready and the --manifests are applied), e.g. waiting for the controller.
func postUpHooks() []localcluster.Hook { return nil }

func newUpCommand() *cobra.Command {
	var manifests, images []string
	var gvisorPlatform string
	installPlatform := true
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start the local Kubernetes cluster (idempotent)",
		Long: "Start a single-node Kubernetes cluster on this machine, or finish starting it:\n" +
			"healthy components are reused, dead ones restarted. Pods run under gVisor\n" +
			"(RuntimeClass gvisor) or runc. Then install agent-sandbox into it (controller,\n" +
			"router) and a python-sandbox-pool warm pool, unless --platform=false.\n" +
			"Binaries come from `make deps`, images from `make images`. Needs root.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			p := newProgress(out)
			cfg := localcluster.DefaultConfig()
			cfg.Images = images
			cfg.ManifestPaths = manifests
			cfg.PostUp = postUpHooks()
			cfg.GVisorPlatform = gvisorPlatform
			if installPlatform {
				tars, err := platform.ImageTarballs(cfg.CacheDir)
				if err != nil {
					return err
				}
				cfg.Images = append(tars, cfg.Images...)
				cfg.PostUp = append(platform.Hooks(), cfg.PostUp...)
			}
			c := localcluster.New(cfg, p.step)
			if err := c.Up(cmd.Context()); err != nil {
				return err
			}
			p.step("cluster ready")
			fmt.Fprintf(out, "\n  kubeconfig: %s\n", c.KubeconfigPath())
			fmt.Fprintf(out, "  try:        export KUBECONFIG=%s\n", c.KubeconfigPath())
			fmt.Fprintf(out, "              %s get nodes\n", c.KubectlPath())
			if installPlatform {
				fmt.Fprintf(out, "              %s get sandboxwarmpools,sandboxes\n", c.KubectlPath())
				fmt.Fprintf(out, "  claim:      %s create -f examples/python-runtime/sandboxclaim.yaml\n", c.KubectlPath())
			}
			fmt.Fprintf(out, "  status:     agent-sandbox status\n")
			fmt.Fprintf(out, "  stop:       agent-sandbox down   (--purge also deletes the cluster's state)\n")
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&manifests, "manifests", nil, "YAML file or directory to server-side apply after the node is Ready (repeatable)")
	cmd.Flags().StringArrayVar(&images, "image", nil, "image tarball to import into containerd before starting (repeatable)")
	cmd.Flags().BoolVar(&installPlatform, "platform", true,
		"install agent-sandbox (controller with extensions, router, images built by 'make images') and the python-sandbox-pool warm pool")
	cmd.Flags().StringVar(&gvisorPlatform, "gvisor-platform", "",
		"gVisor platform of the node: auto (kvm if a kvm smoke run passes, else systrap), kvm or systrap (default $"+localcluster.EnvGVisorPlatform+", else auto)")
	return cmd
}
