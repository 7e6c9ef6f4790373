package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"sigs.k8s.io/agent-sandbox/internal/localcluster"
)

// statusReport is `status -o json`.
type statusReport struct {
	Local  localStatus `json:"local"`
	Server serverInfo  `json:"server"`
}

type localStatus struct {
	Running    bool                           `json:"running"`
	Kubeconfig string                         `json:"kubeconfig,omitempty"`
	Components []localcluster.ComponentStatus `json:"components"`
	// GVisorPlatform is the gVisor platform `up` chose, and why.
	GVisorPlatform *localcluster.PlatformChoice `json:"gvisorPlatform,omitempty"`
}

func newStatusCommand(flags *clusterFlags) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the local cluster's components and the health of agent-sandbox in the cluster",
		Long: "Show the local cluster's components (state, pid, memory), then the cluster's side:\n" +
			"the Kubernetes version and whether the controller and router Pods are Ready.\n" +
			"The cluster is the one of --kubeconfig / $KUBECONFIG, else the local cluster's.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch output {
			case "", "json":
			default:
				return usagef("unknown output format %q: use json", output)
			}
			st, err := localcluster.New(localcluster.DefaultConfig(), nil).Status()
			if err != nil {
				return err
			}
			if st.Running() && flags.loading.ExplicitPath == "" && os.Getenv("KUBECONFIG") == "" {
				flags.loading.ExplicitPath = st.Kubeconfig
			}
			server := fetchServerInfo(cmd.Context(), flags)
			if output == "json" {
				b, err := json.MarshalIndent(statusReport{
					Local:  localStatus{Running: st.Running(), Kubeconfig: st.Kubeconfig, Components: st.Components, GVisorPlatform: st.GVisorPlatform},
					Server: server,
				}, "", "  ")
				if err != nil {
					return fmt.Errorf("encoding the status: %w", err)
				}
				_, err = fmt.Fprintln(cmd.OutOrStdout(), string(b))
				return err
			}
			printStatus(cmd.OutOrStdout(), st)
			fmt.Fprintln(cmd.OutOrStdout())
			printServerInfo(cmd.OutOrStdout(), server)
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json")
	return cmd
}

func printStatus(w io.Writer, st localcluster.Status) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "COMPONENT\tSTATE\tPID\tRSS\tUPTIME")
	var total int64
	for _, c := range st.Components {
		pid, rss, up := "-", "-", "-"
		if c.PID > 0 {
			pid = fmt.Sprint(c.PID)
		}
		if c.State == localcluster.StateRunning {
			rss = mib(c.RSS)
			up = c.Uptime.Round(time.Second).String()
			total += c.RSS
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.Name, c.State, pid, rss, up)
	}
	fmt.Fprintf(tw, "pods+shims\t%d procs\t\t%s\t\n", st.RuntimeProcesses, mib(st.RuntimeRSS))
	fmt.Fprintf(tw, "total\t\t\t%s\t\n", mib(total+st.RuntimeRSS))
	_ = tw.Flush()
	if pc := st.GVisorPlatform; pc != nil {
		fmt.Fprintf(w, "\ngVisor platform: %s (%s)\n", pc.Platform, pc.Reason)
	}
	switch {
	case st.Running():
		fmt.Fprintf(w, "\nkubeconfig: %s\n", st.Kubeconfig)
	case anyState(st, localcluster.StateDead):
		fmt.Fprintln(w, "\nsome components are dead: run `agent-sandbox up` to restart them")
	default:
		fmt.Fprintln(w, "\nthe cluster is not running: start it with `agent-sandbox up`")
	}
}

func anyState(st localcluster.Status, state string) bool {
	for _, c := range st.Components {
		if c.State == state {
			return true
		}
	}
	return false
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
