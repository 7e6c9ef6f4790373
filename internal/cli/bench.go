package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"sigs.k8s.io/agent-sandbox/clients/go/sandbox"
	"sigs.k8s.io/agent-sandbox/internal/bench"
	"sigs.k8s.io/agent-sandbox/internal/platform"
)

// localKubeconfig is where `agent-sandbox up` writes the admin kubeconfig.
const localKubeconfig = "/var/lib/agent-sandbox/kubeconfig"

func newBenchCommand() *cobra.Command {
	var (
		cfg        bench.Config
		count      int
		output     string
		routerURL  string
		kubeconfig string
		tti        bool
		pace       bool
		viaTunnel  bool
		envPairs   []string
		scale      scaleFlags
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure claim latency by milestone and apiserver writes per claim",
		Long: "Create claims against a warm pool and report, per milestone (created, bound,\n" +
			"Ready, runtime answering, first command output), p50/p90/p99/max from the\n" +
			"client's point of view, the apiserver writes per claim (from the apiserver's\n" +
			"own request counters) and, with --controller-metrics-url, controller CPU and\n" +
			"peak RSS. The pool is sized and pre-warmed before the timed window, and every\n" +
			"claim is deleted afterwards. Scenarios: sustained (Poisson arrivals at --rate\n" +
			"for --duration), burst (--count at once), cold (--count against an empty pool),\n" +
			"sdk (--count claims one after another through the Go SDK: claim, Ready,\n" +
			"connection, first command output through the router, close; --pace waits\n" +
			"for a full Ready pool before each claim).\n" +
			"Scale scenarios (scale-gate, scale-growth, scale-restart, scale-delete) bring up\n" +
			"their own kwok stack (--kwok-nodes simulated nodes; needs `make deps-test` and a\n" +
			"source checkout) and report claim latency, the controller histogram, writes,\n" +
			"controller CPU and RSS, apiserver CPU and etcd size as the object count grows.\n" +
			"--tti also runs a command in each sandbox through the router.",
		Example: "  agent-sandbox bench --scenario burst --count 300 --pool-size 300\n" +
			"  agent-sandbox bench --scenario sustained --rate 100 --duration 30s --pool-size 400\n" +
			"  agent-sandbox bench --scenario burst --count 50 --pool-size 50 --tti\n" +
			"  agent-sandbox bench --scenario sdk --count 50 --pool-size 3 --pace\n" +
			"  agent-sandbox bench --scenario scale-gate --kwok-nodes 100\n" +
			"  agent-sandbox bench --scenario scale-growth --scale-sizes 1000,5000,10000 --plot growth.png",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if isScaleScenario(cfg.Scenario) {
				return runScale(cmd.Context(), cmd, cfg.Scenario, output, scale)
			}
			rc, err := loadRESTConfig(kubeconfig)
			if err != nil {
				return err
			}
			cfg.RestConfig = rc
			cfg.Count = count
			if cfg.Scenario == bench.SDK {
				tti = false
				if !cmd.Flags().Changed("pool-size") {
					cfg.PoolSize = 0 // keep the pool's size
				}
				if routerURL == "" && !viaTunnel {
					if routerURL, err = findRouter(cmd.Context(), rc); err != nil {
						return err
					}
				}
			}
			if tti {
				if routerURL == "" {
					routerURL, err = findRouter(cmd.Context(), rc)
					if err != nil {
						return err
					}
				}
				cfg.Interact = InteractThroughRouter(routerURL)
			}
			out := cmd.OutOrStdout()
			switch cfg.Scenario {
			case bench.SDK:
				via := "router " + routerURL
				if viaTunnel {
					via = "port-forward tunnel to the router"
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "bench: %d claims through the Go SDK against %s/%s (%s)...\n",
					count, cfg.Namespace, cfg.WarmPool, via)
			default:
				fmt.Fprintf(cmd.ErrOrStderr(), "bench: %s scenario against %s/%s (pool pre-warmed to %d)...\n",
					cfg.Scenario, cfg.Namespace, cfg.WarmPool, cfg.PoolSize)
			}
			var res *bench.Result
			if cfg.Scenario == bench.SDK {
				opts := sandbox.Options{APIURL: routerURL}
				if opts.Env, err = bench.ParseEnv(envPairs); err != nil {
					return err
				}
				if viaTunnel {
					opts.APIURL = ""
				}
				res, err = bench.RunSDK(cmd.Context(), bench.SDKConfig{
					RestConfig: rc, Namespace: cfg.Namespace, WarmPool: cfg.WarmPool,
					Count: count, PoolSize: cfg.PoolSize, Pace: pace, Timeout: cfg.Timeout,
					Options: opts,
				})
			} else {
				res, err = bench.Run(cmd.Context(), cfg)
			}
			if err != nil {
				return fmt.Errorf("benchmark failed: %w", err)
			}
			switch output {
			case "json":
				return bench.WriteJSON(out, res)
			case "csv":
				return bench.WriteCSV(out, res)
			case "table", "":
				return bench.WriteTable(out, res)
			default:
				return fmt.Errorf("unknown output %q (fix: use -o table, json or csv)", output)
			}
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "bench-kubeconfig", "", "kubeconfig (default: $KUBECONFIG, the local cluster's, then ~/.kube/config)")
	f.StringVar(&cfg.Namespace, "pool-namespace", "default", "namespace of the warm pool and the claims")
	f.StringVar(&cfg.WarmPool, "pool", platform.DefaultPool, "warm pool to claim from")
	f.StringVar(&cfg.Scenario, "scenario", bench.Burst, "sustained, burst, cold, sdk, scale-gate, scale-growth, scale-restart or scale-delete")
	f.Float64Var(&cfg.Rate, "rate", 10, "claims per second (sustained)")
	f.DurationVar(&cfg.Duration, "duration", 30*time.Second, "how long to create claims (sustained)")
	f.IntVar(&count, "count", 100, "claims to create (burst, cold)")
	f.Int32Var(&cfg.PoolSize, "pool-size", 100, "warm pool size to set and wait for before the timed window")
	f.DurationVar(&cfg.Timeout, "timeout", 3*time.Minute, "how long to wait for every claim to be Ready")
	f.StringVar(&cfg.ControllerMetricsURL, "controller-metrics-url", "", "controller /metrics URL, for CPU seconds and peak RSS")
	f.BoolVar(&tti, "tti", false, "measure time to interactive: run a command in each sandbox through the router")
	f.StringVar(&routerURL, "router-url", "", "router URL for --tti and the sdk scenario (default: the router pod's address)")
	f.BoolVar(&pace, "pace", false, "sdk scenario: wait for the pool to be full and Ready before each claim")
	f.StringArrayVar(&envPairs, "env", nil, "sdk scenario: NAME=VALUE set on every claim's spec.env (repeatable; late-bound on warm sandboxes)")
	f.BoolVar(&viaTunnel, "port-forward", false, "sdk scenario: reach the router through the SDK's port-forward tunnel (its default) instead of its address")
	f.Int64Var(&cfg.Seed, "seed", 1, "seed of the Poisson arrivals")
	f.DurationVar(&cfg.Dwell, "dwell", 0, "delete each claim this long after it is Ready (0 keeps all claims until the end)")
	f.StringVarP(&output, "output", "o", "table", "table, json or csv")
	scale.register(cmd)
	return cmd
}

// loadRESTConfig finds a kubeconfig: the flag, $KUBECONFIG, the local
// cluster's, then the default loading rules.
func loadRESTConfig(path string) (*rest.Config, error) {
	if path == "" && os.Getenv("KUBECONFIG") == "" {
		if _, err := os.Stat(localKubeconfig); err == nil {
			path = localKubeconfig
		}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		rules.ExplicitPath = path
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("no usable kubeconfig: %w (fix: pass --bench-kubeconfig, set KUBECONFIG, or run `agent-sandbox up`)", err)
	}
	return cfg, nil
}

// findRouter returns the URL of a running router pod; pod IPs are
// reachable from the node of the local cluster.
func findRouter(ctx context.Context, rc *rest.Config) (string, error) {
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return "", err
	}
	pods, err := cs.CoreV1().Pods(platform.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=sandbox-router"})
	if err != nil {
		return "", fmt.Errorf("finding the router: %w", err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
			return "http://" + p.Status.PodIP + ":8080", nil
		}
	}
	return "", fmt.Errorf("no running router pod in %s (fix: pass --router-url)", platform.Namespace)
}

// InteractThroughRouter reaches the runtime-answering milestone with the
// runtime's health endpoint and first-output with a command, both through
// the router with the headers the SDKs send.
func InteractThroughRouter(router string) func(context.Context, string, string, *bench.ClaimTrace) error {
	hc := &http.Client{Timeout: 60 * time.Second}
	do := func(ctx context.Context, method, path, ns, sandbox string, body []byte) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, method, router+path, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("X-Sandbox-ID", sandbox)
		req.Header.Set("X-Sandbox-Namespace", ns)
		req.Header.Set("X-Sandbox-Port", "8888")
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, data)
		}
		return data, nil
	}
	return func(ctx context.Context, ns, sandbox string, t *bench.ClaimTrace) error {
		if _, err := do(ctx, http.MethodGet, "/", ns, sandbox, nil); err != nil {
			return err
		}
		t.Mark(bench.RuntimeAnswering, time.Now())
		body, _ := json.Marshal(map[string]string{"command": "echo ready"})
		data, err := do(ctx, http.MethodPost, "/execute", ns, sandbox, body)
		if err != nil {
			return err
		}
		var res struct {
			Stdout string `json:"stdout"`
		}
		if err := json.Unmarshal(data, &res); err != nil || res.Stdout != "ready\n" {
			return fmt.Errorf("unexpected command output %q", data)
		}
		t.Mark(bench.FirstOutput, time.Now())
		return nil
	}
}
