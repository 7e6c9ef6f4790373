package cli

import (
	"github.com/spf13/cobra"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

func newResumeCommand(prog string, flags *clusterFlags) *cobra.Command {
	o := &modeOptions{}
	cmd := &cobra.Command{
		Use:   "resume NAME...",
		Short: "Resume suspended sandboxes: start their Pods again",
		Long: "Set spec.operatingMode=Running on each sandbox's Sandbox: the controller creates\n" +
			"its Pod again, with the same Service and volumes. With --wait, return once the\n" +
			"sandbox is Ready.",
		Example:           "  " + prog + " resume my-sandbox --wait && " + prog + " exec my-sandbox -- ls",
		Args:              minArgs(1, "at least one sandbox NAME"),
		ValidArgsFunction: completeSandboxNames(flags, 0),
		RunE: func(cmd *cobra.Command, args []string) error {
			return setMode(cmd, prog, flags, o, args, sandboxv1beta1.OperatingModeRunning)
		},
	}
	o.addFlags(cmd, "Ready")
	return cmd
}
