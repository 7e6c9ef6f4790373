package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sigs.k8s.io/agent-sandbox/clients/go/sandbox"
	"sigs.k8s.io/agent-sandbox/internal/cli/remote"
)

// clusterFlags are the kubectl-style kubeconfig flags (--kubeconfig,
// --context, -n, ...) and the flags choosing how sandboxes are reached.
// They are persistent flags of the root command, so they work before and
// after the subcommand (`kubectl sandbox -n team ls`).
type clusterFlags struct {
	loading   *clientcmd.ClientConfigLoadingRules
	overrides clientcmd.ConfigOverrides

	routerURL        string
	routerNamespace  string
	gateway          string
	gatewayNamespace string
	gatewayScheme    string
	verbose          bool

	clientConfig clientcmd.ClientConfig
}

func newClusterFlags() *clusterFlags {
	return &clusterFlags{loading: clientcmd.NewDefaultClientConfigLoadingRules()}
}

func (f *clusterFlags) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.loading.ExplicitPath, "kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
	names := clientcmd.RecommendedConfigOverrideFlags("")
	// Basic auth is long gone from Kubernetes; do not offer it.
	names.AuthOverrideFlags.Username = clientcmd.FlagInfo{}
	names.AuthOverrideFlags.Password = clientcmd.FlagInfo{}
	clientcmd.BindOverrideFlags(&f.overrides, fs, names)
	fs.StringVar(&f.routerURL, "router-url", "",
		"reach sandboxes through the sandbox-router at this URL (e.g. an ingress or in-cluster Service) instead of a port-forward")
	fs.StringVar(&f.routerNamespace, "router-namespace", "",
		"namespace of the sandbox-router to port-forward to (default: the sandboxes' namespace, else "+remote.DefaultRouterNamespace+")")
	fs.StringVar(&f.gateway, "gateway", "", "reach sandboxes through this Gateway (gateway.networking.k8s.io) in front of the sandbox-router")
	fs.StringVar(&f.gatewayNamespace, "gateway-namespace", "default", "namespace of --gateway")
	fs.StringVar(&f.gatewayScheme, "gateway-scheme", "http", "scheme of --gateway: http or https")
	fs.BoolVarP(&f.verbose, "verbose", "v", false, "log what the client does (port-forwards, retries) to stderr")
}

// config returns the client configuration the flags describe.
func (f *clusterFlags) config() clientcmd.ClientConfig {
	if f.clientConfig == nil {
		f.clientConfig = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(f.loading, &f.overrides)
	}
	return f.clientConfig
}

// namespace is -n, else the kubeconfig context's namespace, else
// "default".
func (f *clusterFlags) namespace() (string, error) {
	ns, _, err := f.config().Namespace()
	if err != nil {
		return "", kubeconfigError(err)
	}
	return ns, nil
}

func (f *clusterFlags) restConfig() (*rest.Config, error) {
	cfg, err := f.config().ClientConfig()
	if err != nil {
		return nil, kubeconfigError(err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 50, 100
	cfg.UserAgent = "agent-sandbox-cli/" + versionString()
	return cfg, nil
}

// kubeconfigError adds the fix to a configuration loading error.
func kubeconfigError(err error) error {
	fix := "pass --kubeconfig or set KUBECONFIG (the local cluster's is /var/lib/agent-sandbox/kubeconfig after `agent-sandbox up`)"
	if clientcmd.IsEmptyConfig(err) {
		return withFix(fmt.Errorf("no Kubernetes configuration found"), fix)
	}
	return withFix(fmt.Errorf("loading the Kubernetes configuration: %w", err), fix)
}

// logger is the SDK's logger: stderr with -v, silent otherwise. It also
// silences client-go's own logging (port-forward errors are reported as
// errors by the SDK), unless -v.
func (f *clusterFlags) logger(stderr io.Writer) logr.Logger {
	if !f.verbose {
		klog.SetLogger(logr.Discard())
		return logr.Discard()
	}
	l := funcr.New(func(prefix, args string) {
		fmt.Fprintf(stderr, "%s %s %s\n", time.Now().Format("15:04:05.000"), prefix, args)
	}, funcr.Options{Verbosity: 1})
	klog.SetLogger(l.WithName("client-go"))
	return l
}

// session is what the sandbox commands work with: the namespace, the
// Kubernetes clients and, once a command needs to reach into a sandbox,
// the SDK client. Commands defer close.
type session struct {
	namespace string
	helper    *sandbox.K8sHelper
	flags     *clusterFlags
	log       logr.Logger

	sdk    *sandbox.Client
	opts   sandbox.Options
	tunnel *remote.RouterTunnel
}

// kube is the controller-runtime client (with watch) for every API group
// of the project.
func (s *session) kube() client.WithWatch { return s.helper.AgentsClient }

// connect builds the session of a command.
func (f *clusterFlags) connect(context.Context) (*session, error) {
	ns, err := f.namespace()
	if err != nil {
		return nil, err
	}
	cfg, err := f.restConfig()
	if err != nil {
		return nil, err
	}
	log := f.logger(os.Stderr)
	h, err := sandbox.NewK8sHelper(cfg, log)
	if err != nil {
		return nil, err
	}
	return &session{namespace: ns, helper: h, flags: f, log: log}, nil
}

// sdkOptions returns the SDK options that reach the session's sandboxes:
// --router-url (Direct) or --gateway if given; else the SDK's own
// port-forward to the router in the sandboxes' namespace when one runs
// there; else a port-forward of ours to the router in --router-namespace
// (default agent-sandbox-system, where the manifests install it), handed
// to the SDK as its router URL.
func (s *session) sdkOptions(ctx context.Context) (sandbox.Options, error) {
	if s.sdk != nil {
		return s.opts, nil
	}
	f := s.flags
	opts := sandbox.Options{
		Namespace:        s.namespace,
		K8sHelper:        s.helper,
		Logger:           s.log,
		Quiet:            !f.verbose,
		APIURL:           f.routerURL,
		GatewayName:      f.gateway,
		GatewayNamespace: f.gatewayNamespace,
		GatewayScheme:    f.gatewayScheme,
		TraceServiceName: "agent-sandbox-cli",
	}
	if opts.APIURL == "" && opts.GatewayName == "" {
		routerNS := f.routerNamespace
		if routerNS == "" {
			pod, err := remote.RouterPod(ctx, s.helper, s.namespace)
			if err != nil {
				return opts, err
			}
			if pod == "" {
				routerNS = remote.DefaultRouterNamespace
			}
		}
		if routerNS != "" && routerNS != s.namespace {
			t, err := remote.OpenRouterTunnel(ctx, s.helper, routerNS)
			switch {
			case err != nil && f.routerNamespace != "":
				// The user named the namespace: that is the likely mistake.
				return opts, withFix(fmt.Errorf("no sandbox-router to port-forward to in --router-namespace %s: %w", routerNS, err),
					fmt.Sprintf("pass the namespace the sandbox-router runs in (find it with `kubectl get services -A --field-selector metadata.name=%s`), "+
						"or leave --router-namespace out", sandbox.RouterServiceName))
			case err != nil:
				return opts, withFix(fmt.Errorf("reaching the sandbox-router: %w", err),
					fmt.Sprintf("deploy the sandbox-router (in %s or %s), or pass --router-namespace or --router-url", s.namespace, remote.DefaultRouterNamespace))
			}
			s.tunnel = t
			opts.APIURL = t.URL()
			s.log.V(1).Info("port-forward to the sandbox-router", "namespace", routerNS, "url", opts.APIURL)
		}
	}
	cl, err := sandbox.NewClient(ctx, opts)
	if err != nil {
		s.close()
		return opts, withFix(fmt.Errorf("configuring the sandbox client: %w", err), "check --router-url and --gateway")
	}
	s.sdk, s.opts = cl, opts
	return opts, nil
}

// client returns the SDK client (see sdkOptions).
func (s *session) client(ctx context.Context) (*sandbox.Client, error) {
	if _, err := s.sdkOptions(ctx); err != nil {
		return nil, err
	}
	return s.sdk, nil
}

// close releases what the session opened.
func (s *session) close() {
	if s.tunnel != nil {
		s.tunnel.Close()
		s.tunnel = nil
	}
}
