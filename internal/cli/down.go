package cli

import (
	"github.com/spf13/cobra"

	"sigs.k8s.io/agent-sandbox/internal/localcluster"
)

func newDownCommand() *cobra.Command {
	var purge bool
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop the local cluster and remove everything it made on the host",
		Long: "Stop every component and pod, and remove the mounts, network namespaces,\n" +
			"interfaces, iptables chains and cgroups the cluster made; restore the sysctls\n" +
			"the kubelet changed. Cluster state (etcd data, images) is kept for the next\n" +
			"`up` unless --purge is given. The build cache is always kept. Needs root.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p := newProgress(cmd.OutOrStdout())
			c := localcluster.New(localcluster.DefaultConfig(), p.step)
			if err := c.Down(cmd.Context(), purge); err != nil {
				return err
			}
			p.step("cluster down")
			return nil
		},
	}
	cmd.Flags().BoolVar(&purge, "purge", false, "also delete the cluster state (etcd data, images, PKI, logs)")
	return cmd
}
