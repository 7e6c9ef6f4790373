package sandbox

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
)

// Defaults of Options.
const (
	DefaultNamespace               = "default"
	DefaultServerPort              = 8888
	DefaultSandboxdRESTPort        = 8080
	DefaultSandboxdGRPCPort        = 9090
	DefaultSandboxReadyTimeout     = 180 * time.Second
	DefaultGatewayReadyTimeout     = 180 * time.Second
	DefaultPortForwardReadyTimeout = 30 * time.Second
	DefaultCleanupTimeout          = 30 * time.Second
	DefaultRequestTimeout          = 180 * time.Second
	DefaultPerAttemptTimeout       = 60 * time.Second
	DefaultMaxDownloadSize         = 256 << 20
	DefaultMaxUploadSize           = 256 << 20
	DefaultTraceServiceName        = "sandbox-client"
	// DefaultRouterNamespace is where the sandbox-router is installed
	// (and where the Python SDK looks for it).
	DefaultRouterNamespace = "agent-sandbox-system"
)

// Connectivity selects how the sandbox Pod is reached when neither APIURL
// nor GatewayName is set. Extension over the published SDK of the snapshot
// the spec describes (later upstream releases added the same option).
type Connectivity string

const (
	// ConnectivityPortForward reaches the sandbox through a port-forward
	// brokered by the Kubernetes API server: to the sandbox-router for the
	// legacy runtime, to the sandbox Pod for sandboxd. Works wherever a
	// kubeconfig does. Default.
	ConnectivityPortForward Connectivity = "port-forward"
	// ConnectivityInCluster dials the sandbox Pod's IP directly (ServerPort
	// for the legacy runtime; SandboxdRESTPort and SandboxdGRPCPort for
	// sandboxd), taking the API server and the router off the data path.
	// This process must be able to route to Pod IPs, i.e. run in the
	// cluster. Cannot be combined with APIURL or GatewayName.
	ConnectivityInCluster Connectivity = "in-cluster"
)

// EnvVar is one environment variable of a claim.
type EnvVar struct {
	Name, Value string
}

// Options configure a Sandbox (and, as defaults, a Client). Zero values
// take the defaults listed per field.
type Options struct {
	// WarmPoolName is the SandboxWarmPool to claim from. Required by Open
	// (a Client passes it per CreateSandbox). A DNS subdomain.
	WarmPoolName string
	// Env goes into the claim's spec.env (in order), for the template's
	// first container, as far as its envVarsInjectionPolicy allows. With a
	// late-binding template it stays on the warm path. Extension over the
	// published SDK.
	Env []EnvVar
	// Runtime is the in-sandbox API (default RuntimeLegacyPython).
	Runtime Runtime
	// Connectivity: see Connectivity (default ConnectivityPortForward).
	Connectivity Connectivity
	// SandboxdRESTPort is sandboxd's REST port (default 8080).
	SandboxdRESTPort int
	// SandboxdGRPCPort is sandboxd's gRPC process API port (default 9090).
	SandboxdGRPCPort int
	// Namespace of the claim (default "default"). A DNS label.
	Namespace string
	// RouterNamespace is the namespace of sandbox-router-svc for the
	// default port-forward tunnel. Empty: the sandbox's namespace (where
	// the published SDK looks), then DefaultRouterNamespace (where this
	// project installs the router). Extension over the published SDK.
	RouterNamespace string
	// GatewayName selects Gateway mode: requests go to the address of this
	// gateway.networking.k8s.io/v1 Gateway, which fronts the router.
	GatewayName string
	// GatewayNamespace is the Gateway's namespace (default "default").
	GatewayNamespace string
	// GatewayScheme is "http" (default) or "https".
	GatewayScheme string
	// APIURL selects Direct mode: requests go to this http(s) URL (the
	// router, or a sandboxd REST endpoint). Beats GatewayName.
	APIURL string
	// ServerPort is the legacy runtime's port in the sandbox (default 8888).
	ServerPort int
	// SandboxReadyTimeout bounds Open's wait for the claim to be bound and
	// the Sandbox to be Ready (default 180s).
	SandboxReadyTimeout time.Duration
	// GatewayReadyTimeout bounds waiting for a Gateway address (180s).
	GatewayReadyTimeout time.Duration
	// PortForwardReadyTimeout bounds establishing a port-forward (30s).
	PortForwardReadyTimeout time.Duration
	// CleanupTimeout bounds claim deletion in Close and in Open's rollback;
	// it runs on a context detached from the caller's (30s).
	CleanupTimeout time.Duration
	// RequestTimeout bounds one call, retries included, when the caller's
	// context has no deadline (180s).
	RequestTimeout time.Duration
	// PerAttemptTimeout bounds dialing and waiting for response headers in
	// one attempt; the body then streams under the call's deadline (60s).
	PerAttemptTimeout time.Duration
	// MaxDownloadSize caps Read (256 MiB).
	MaxDownloadSize int64
	// MaxUploadSize caps Write (256 MiB); checked before any I/O.
	MaxUploadSize int64
	// Logger receives the SDK's logs (default: stderr with timestamps).
	Logger logr.Logger
	// Quiet discards logs when Logger is not set.
	Quiet bool
	// K8sHelper shares Kubernetes clients between handles; built from
	// RestConfig when nil.
	K8sHelper *K8sHelper
	// RestConfig is the Kubernetes client config; when nil, in-cluster
	// config, then the default kubeconfig loading rules.
	RestConfig *rest.Config
	// HTTPTransport replaces the transport of sandbox requests (custom
	// TLS, proxies, tests). Redirects are still never followed.
	HTTPTransport http.RoundTripper
	// TraceServiceName names the tracer (default "sandbox-client").
	TraceServiceName string
	// TracerProvider creates spans; nil uses the global provider (a no-op
	// unless the program installed one).
	TracerProvider trace.TracerProvider
}

// withDefaults returns a copy of o with defaults applied.
func (o Options) withDefaults() Options {
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	defD := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	if o.Runtime == "" {
		o.Runtime = RuntimeLegacyPython
	}
	if o.Connectivity == "" {
		o.Connectivity = ConnectivityPortForward
	}
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.GatewayNamespace == "" {
		o.GatewayNamespace = DefaultNamespace
	}
	if o.GatewayScheme == "" {
		o.GatewayScheme = "http"
	}
	def(&o.ServerPort, DefaultServerPort)
	def(&o.SandboxdRESTPort, DefaultSandboxdRESTPort)
	def(&o.SandboxdGRPCPort, DefaultSandboxdGRPCPort)
	defD(&o.SandboxReadyTimeout, DefaultSandboxReadyTimeout)
	defD(&o.GatewayReadyTimeout, DefaultGatewayReadyTimeout)
	defD(&o.PortForwardReadyTimeout, DefaultPortForwardReadyTimeout)
	defD(&o.CleanupTimeout, DefaultCleanupTimeout)
	defD(&o.RequestTimeout, DefaultRequestTimeout)
	defD(&o.PerAttemptTimeout, DefaultPerAttemptTimeout)
	if o.MaxDownloadSize == 0 {
		o.MaxDownloadSize = DefaultMaxDownloadSize
	}
	if o.MaxUploadSize == 0 {
		o.MaxUploadSize = DefaultMaxUploadSize
	}
	if o.TraceServiceName == "" {
		o.TraceServiceName = DefaultTraceServiceName
	}
	if o.Logger.GetSink() == nil {
		if o.Quiet {
			o.Logger = logr.Discard()
		} else {
			o.Logger = funcr.New(func(prefix, args string) {
				if prefix != "" {
					fmt.Fprintf(os.Stderr, "%s: %s\n", prefix, args)
				} else {
					fmt.Fprintln(os.Stderr, args)
				}
			}, funcr.Options{LogTimestamp: true})
		}
	}
	return o
}

// validate checks o (after withDefaults). The warm pool name is checked
// by Open, since a Client's options need none.
func (o *Options) validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("sandbox: "+format, a...)) }
	if o.WarmPoolName != "" {
		if err := validateWarmPoolName(o.WarmPoolName); err != nil {
			errs = append(errs, err)
		}
	}
	for _, e := range o.Env {
		if e.Name == "" || strings.ContainsAny(e.Name, "=\x00") || strings.ContainsRune(e.Value, 0) {
			bad("Env %q is not a valid environment variable", e.Name)
		}
	}
	if o.APIURL != "" {
		u, err := url.Parse(o.APIURL)
		switch {
		case err != nil:
			bad("APIURL %q is not a valid URL: %v", o.APIURL, err)
		case u.Scheme != "http" && u.Scheme != "https":
			bad("APIURL must use http or https, got %q", o.APIURL)
		case u.Host == "":
			bad("APIURL %q has no host", o.APIURL)
		}
	}
	if len(validation.IsDNS1123Label(o.Namespace)) > 0 {
		bad("Namespace %q is not a valid namespace name (DNS label)", o.Namespace)
	}
	if o.RouterNamespace != "" && len(validation.IsDNS1123Label(o.RouterNamespace)) > 0 {
		bad("RouterNamespace %q is not a valid namespace name (DNS label)", o.RouterNamespace)
	}
	if len(validation.IsDNS1123Label(o.GatewayNamespace)) > 0 {
		bad("GatewayNamespace %q is not a valid namespace name (DNS label)", o.GatewayNamespace)
	}
	if o.GatewayName != "" && len(validation.IsDNS1123Subdomain(o.GatewayName)) > 0 {
		bad("GatewayName %q is not a valid object name (DNS subdomain)", o.GatewayName)
	}
	if o.GatewayScheme != "http" && o.GatewayScheme != "https" {
		bad("GatewayScheme must be http or https, got %q", o.GatewayScheme)
	}
	for name, p := range map[string]int{"ServerPort": o.ServerPort, "SandboxdRESTPort": o.SandboxdRESTPort, "SandboxdGRPCPort": o.SandboxdGRPCPort} {
		if p < 1 || p > 65535 {
			bad("%s must be in 1..65535, got %d", name, p)
		}
	}
	switch o.Runtime {
	case RuntimeLegacyPython:
	case RuntimeSandboxd:
		if o.GatewayName != "" {
			bad("RuntimeSandboxd cannot be combined with GatewayName")
		}
		if o.SandboxdRESTPort == o.SandboxdGRPCPort {
			bad("SandboxdRESTPort and SandboxdGRPCPort must differ (both %d)", o.SandboxdRESTPort)
		}
	default:
		bad("Runtime must be %q or %q, got %q", RuntimeLegacyPython, RuntimeSandboxd, o.Runtime)
	}
	switch o.Connectivity {
	case ConnectivityPortForward:
	case ConnectivityInCluster:
		if o.APIURL != "" || o.GatewayName != "" {
			bad("ConnectivityInCluster cannot be combined with APIURL or GatewayName")
		}
	default:
		bad("Connectivity must be %q or %q, got %q", ConnectivityPortForward, ConnectivityInCluster, o.Connectivity)
	}
	for name, d := range map[string]time.Duration{
		"SandboxReadyTimeout": o.SandboxReadyTimeout, "GatewayReadyTimeout": o.GatewayReadyTimeout,
		"PortForwardReadyTimeout": o.PortForwardReadyTimeout, "CleanupTimeout": o.CleanupTimeout,
		"RequestTimeout": o.RequestTimeout, "PerAttemptTimeout": o.PerAttemptTimeout,
	} {
		if d <= 0 {
			bad("%s must be positive, got %s", name, d)
		}
	}
	if o.MaxDownloadSize <= 0 {
		bad("MaxDownloadSize must be positive")
	}
	if o.MaxUploadSize <= 0 {
		bad("MaxUploadSize must be positive")
	}
	return errors.Join(errs...)
}

func validateWarmPoolName(name string) error {
	if name == "" {
		return errors.New("sandbox: WarmPoolName is required")
	}
	if len(validation.IsDNS1123Subdomain(name)) > 0 {
		return fmt.Errorf("sandbox: WarmPoolName %q is not a valid object name (DNS subdomain)", name)
	}
	return nil
}

// mode is the connection mode chosen from the options.
type mode int

const (
	modeRouterTunnel mode = iota
	modeDirect
	modeGateway
	modePodTunnel
	modeInCluster
)

func (m mode) String() string {
	return [...]string{"router-tunnel", "direct", "gateway", "pod-tunnel", "in-cluster"}[m]
}

// selectMode applies the documented precedence.
func (o *Options) selectMode() mode {
	switch {
	case o.APIURL != "":
		return modeDirect
	case o.Connectivity == ConnectivityInCluster:
		return modeInCluster
	case o.Runtime == RuntimeSandboxd:
		return modePodTunnel
	case o.GatewayName != "":
		return modeGateway
	}
	return modeRouterTunnel
}
