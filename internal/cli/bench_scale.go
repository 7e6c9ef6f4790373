package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"sigs.k8s.io/agent-sandbox/internal/bench"
	"sigs.k8s.io/agent-sandbox/internal/kwokstack"
)

// scaleFlags are the flags of the scale scenarios.
type scaleFlags struct {
	kwokNodes int
	sizes     string
	sandboxes int
	plot      string
	window    time.Duration
}

func (f *scaleFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.IntVar(&f.kwokNodes, "kwok-nodes", 100, "scale scenarios: simulated kwok nodes of the stack they bring up")
	fl.StringVar(&f.sizes, "scale-sizes", "1000,5000,10000", "scale-growth: total Sandboxes to grow the pools to, in order")
	fl.IntVar(&f.sandboxes, "scale-sandboxes", 10000, "scale-restart and scale-delete: Sandboxes (claims) in the pools")
	fl.StringVar(&f.plot, "plot", "", "scale-growth: write a PNG of controller RSS and claim p99 against Sandboxes here")
	fl.DurationVar(&f.window, "restart-write-window", 60*time.Second, "scale-restart: count writes this long after the restart")
}

func isScaleScenario(s string) bool { return strings.HasPrefix(s, "scale-") }

// runScale brings up a kwok stack (a real apiserver, scheduler and garbage
// collector, simulated nodes, the controller as a process; it needs the
// test binaries of `make deps-test` and runs from a source checkout) and
// runs one scale scenario on it.
func runScale(ctx context.Context, cmd *cobra.Command, scenario, output string, f scaleFlags) error {
	switch scenario {
	case bench.ScaleGate, bench.ScaleGrowth, bench.ScaleRestart, bench.ScaleDelete:
	default: // before minutes of stack start-up, not after
		return fmt.Errorf("unknown scale scenario %q (want %s, %s, %s or %s)", scenario,
			bench.ScaleGate, bench.ScaleGrowth, bench.ScaleRestart, bench.ScaleDelete)
	}
	if output != "" && output != "table" && output != "json" {
		return fmt.Errorf("unknown output %q for a scale scenario (fix: use -o table or json)", output)
	}
	// The stack's in-process clients (envtest) log through controller-runtime;
	// without a logger it prints a warning with a stack trace.
	ctrllog.SetLogger(logr.Discard())
	errOut := cmd.ErrOrStderr()
	fmt.Fprintf(errOut, "bench: bringing up a kwok stack with %d nodes...\n", f.kwokNodes)
	st, err := kwokstack.Start(ctx, kwokstack.Options{Nodes: f.kwokNodes, Log: errOut})
	if err != nil {
		return fmt.Errorf("kwok stack: %w", err)
	}
	defer func() { _ = st.Stop() }()
	cfg := bench.ScaleConfig{
		RestConfig: st.Config, ControllerMetricsURL: st.ControllerMetricsURL, ControllerPID: st.ControllerPID,
		StopController: st.StopController, StartController: st.StartController,
		Timeout: 30 * time.Minute, Log: errOut,
	}
	var results []*bench.ScaleResult
	switch scenario {
	case bench.ScaleGate:
		cfg.Namespaces = 1
		r, err := bench.RunGate(ctx, cfg)
		if err != nil {
			return err
		}
		results = append(results, r)
	case bench.ScaleGrowth:
		var sizes []int
		for _, s := range strings.Split(f.sizes, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n <= 0 || (len(sizes) > 0 && n <= sizes[len(sizes)-1]) {
				return fmt.Errorf("--scale-sizes %q: want growing positive integers, e.g. 1000,5000,10000", f.sizes)
			}
			sizes = append(sizes, n)
		}
		if results, err = bench.RunGrowth(ctx, cfg, sizes); err != nil {
			return err
		}
		if f.plot != "" {
			if err := bench.PlotGrowth(results, f.plot); err != nil {
				return err
			}
			fmt.Fprintf(errOut, "bench: plot written to %s\n", f.plot)
		}
	case bench.ScaleRestart:
		r, err := bench.RunRestart(ctx, cfg, f.sandboxes, f.window)
		if err != nil {
			return err
		}
		results = append(results, r)
	case bench.ScaleDelete:
		r, err := bench.RunMassDelete(ctx, cfg, f.sandboxes)
		if err != nil {
			return err
		}
		results = append(results, r)
	default:
		return fmt.Errorf("unknown scale scenario %q (want %s, %s, %s or %s)", scenario,
			bench.ScaleGate, bench.ScaleGrowth, bench.ScaleRestart, bench.ScaleDelete)
	}
	out := cmd.OutOrStdout()
	if output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(results)
	}
	return writeScaleTable(out, results)
}

// writeScaleTable prints one column per result.
func writeScaleTable(w io.Writer, rs []*bench.ScaleResult) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	row := func(name string, f func(r *bench.ScaleResult) string) {
		fmt.Fprint(tw, name+"\t")
		for _, r := range rs {
			fmt.Fprint(tw, f(r)+"\t")
		}
		fmt.Fprintln(tw)
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d)/float64(time.Millisecond)) }
	row("scenario", func(r *bench.ScaleResult) string { return r.Scenario })
	row("sandboxes", func(r *bench.ScaleResult) string { return strconv.Itoa(r.Sandboxes) })
	row("claims (ready/errors)", func(r *bench.ScaleResult) string {
		return fmt.Sprintf("%d (%d/%d)", r.Claims, r.Ready, r.Errors)
	})
	row("client create->Ready p50/p90/p99 ms", func(r *bench.ScaleResult) string {
		return ms(r.Client.P50) + "/" + ms(r.Client.P90) + "/" + ms(r.Client.P99)
	})
	row("controller histogram p50/p90/p99 ms", func(r *bench.ScaleResult) string {
		if r.CtrlObservations == 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f/%.0f/%.0f", r.CtrlP50, r.CtrlP90, r.CtrlP99)
	})
	row("writes per claim (claim path)", func(r *bench.ScaleResult) string {
		return fmt.Sprintf("%.2f (%.2f)", r.WritesPerClaim, r.ClaimPathWrites)
	})
	row("controller CPU s (ms/claim)", func(r *bench.ScaleResult) string {
		return fmt.Sprintf("%.1f (%.1f)", r.ControllerCPU, r.CPUPerClaimMs)
	})
	// Growth measures a background window before its claims: the same
	// per claim with that rate charged out, controller / apiserver.
	row("net CPU ms/claim controller/apiserver", func(r *bench.ScaleResult) string {
		if r.BackgroundSeconds == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f/%.1f", r.NetCPUPerClaimMs, r.NetAPIServerCPUPerClaimMs)
	})
	row("controller peak RSS MiB (per 1k)", func(r *bench.ScaleResult) string {
		return fmt.Sprintf("%.0f (%.1f)", r.ControllerRSS/(1<<20), r.RSSPer1k/(1<<20))
	})
	row("apiserver CPU s", func(r *bench.ScaleResult) string { return fmt.Sprintf("%.1f", r.APIServerCPU) })
	row("etcd size MiB", func(r *bench.ScaleResult) string { return fmt.Sprintf("%.1f", r.EtcdBytes/(1<<20)) })
	keys := map[string]bool{}
	for _, r := range rs {
		for k := range r.Extra {
			keys[k] = true
		}
	}
	for _, k := range sortedKeys(keys) {
		row(k, func(r *bench.ScaleResult) string {
			v, ok := r.Extra[k]
			if !ok {
				return "-"
			}
			return strconv.FormatFloat(v, 'f', 2, 64)
		})
	}
	row("load average", func(r *bench.ScaleResult) string { return r.Load })
	return tw.Flush()
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
