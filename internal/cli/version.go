package cli

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

// version is the release version, set at link time:
//
//	go build -ldflags "-X sigs.k8s.io/agent-sandbox/internal/cli.version=v0.1.0" ./cmd/agent-sandbox
var version = ""

// versionInfo is what `version` reports.
type versionInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit,omitempty"`
	Modified  bool   `json:"modified,omitempty"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

func buildVersion() versionInfo {
	v := versionInfo{Version: version, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Commit = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	if v.Version == "" {
		v.Version = "dev"
	}
	return v
}

// versionString is the short version for the User-Agent.
func versionString() string { return buildVersion().Version }

// versionReport is `version -o json|yaml`: the client's build, and the
// cluster's side unless --client.
type versionReport struct {
	versionInfo
	Server *serverInfo `json:"server,omitempty"`
}

func newVersionCommand(prog string, flags *clusterFlags) *cobra.Command {
	var (
		output     string
		clientOnly bool
	)
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of " + prog + " and of agent-sandbox in the cluster",
		Long: "Print the version of " + prog + ", then the cluster's side: the Kubernetes version\n" +
			"and the images (hence versions) and readiness of the controller and router Pods.\n" +
			"Without a reachable cluster that part says so; --client skips it.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := buildVersion()
			out := cmd.OutOrStdout()
			var server *serverInfo
			if !clientOnly {
				si := fetchServerInfo(cmd.Context(), flags)
				server = &si
			}
			report := versionReport{versionInfo: v, Server: server}
			switch output {
			case "":
				commit := v.Commit
				if len(commit) > 12 {
					commit = commit[:12]
				}
				if v.Modified {
					commit += "-dirty"
				}
				if commit == "" {
					commit = "unknown"
				}
				fmt.Fprintf(out, "%s %s (commit %s, %s, %s)\n", prog, v.Version, commit, v.GoVersion, v.Platform)
				if server != nil {
					printServerInfo(out, *server)
				}
			case "json":
				b, err := json.MarshalIndent(report, "", "  ")
				if err != nil {
					return fmt.Errorf("encoding the version: %w", err)
				}
				fmt.Fprintln(out, string(b))
			case "yaml":
				b, err := yaml.Marshal(report)
				if err != nil {
					return fmt.Errorf("encoding the version: %w", err)
				}
				fmt.Fprint(out, string(b))
			default:
				return usagef("unknown output format %q: use json or yaml", output)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json or yaml")
	cmd.Flags().BoolVar(&clientOnly, "client", false, "only the client's version; do not ask the cluster")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}
