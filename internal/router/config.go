package router

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Authorization modes (--authz-mode).
const (
	AuthzAllowAll    = "allow-all"
	AuthzTokenReview = "tokenreview"
	AuthzScopedToken = "scoped-token"
)

// EnvConfigFile names the config file when --config is not given.
const EnvConfigFile = "SANDBOX_ROUTER_CONFIG"

// Config is the router's configuration. Precedence: command-line flag >
// config file > environment variable > default.
type Config struct {
	HTTPAddr        string
	HTTPSAddr       string
	MetricsAddr     string
	ProbeAddr       string
	TLSCertFile     string
	TLSKeyFile      string
	TLSClientCAFile string
	MTLSMode        string
	ClusterDomain   string

	ProxyTimeout          time.Duration
	ResponseHeaderTimeout time.Duration
	ShutdownTimeout       time.Duration
	MaxRequestBodyBytes   int64
	AllowLoopbackPodIP    bool

	UpstreamMaxRetries        int
	UpstreamRetryInitialDelay time.Duration
	UpstreamRetryMaxDelay     time.Duration

	EnableTracing     bool
	EnableOTelMetrics bool

	AuthzMode                    string
	AuthzTokenReviewTTL          time.Duration
	AuthzTokenReviewCacheSize    int
	AuthzTokenReviewRequireToken bool
	AuthzTokenReviewAudiences    []string
	AuthzScopedTokenSecretFile   string
	// SubjectAccessReview authorization on top of TokenReview (beyond the
	// reference, which only authenticates).
	AuthzAccessReview            bool
	AuthzAccessReviewVerb        string
	AuthzAccessReviewTTL         time.Duration
	AuthzAccessReviewNegativeTTL time.Duration
	AuthzAccessReviewCacheSize   int

	// CacheEnabled false (or missing list/watch rights) runs the reduced
	// mode: header/DNS routing without cache verification.
	CacheEnabled   bool
	CacheNamespace string
	// RequireCache makes missing list/watch rights fatal instead of
	// degrading to the reduced mode.
	RequireCache bool
	Kubeconfig   string

	// Beyond upstream.
	DefaultSandboxPorts []uint16
	AutoResume          bool
	ReadyTimeout        time.Duration
	IdleSuspendAfter    time.Duration

	AccessLog   bool
	ShowVersion bool
	ConfigFile  string
}

// ConfigError is a usage error; the command exits with status 2.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

func usageErr(format string, a ...any) error { return &ConfigError{Err: fmt.Errorf(format, a...)} }

// portList is a flag.Value for comma-separated ports.
type portList struct{ p *[]uint16 }

func (l portList) String() string {
	if l.p == nil {
		return ""
	}
	s := make([]string, len(*l.p))
	for i, v := range *l.p {
		s[i] = strconv.Itoa(int(v))
	}
	return strings.Join(s, ",")
}

func (l portList) Set(v string) error {
	var out []uint16
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, ok := parsePort(f)
		if !ok {
			return fmt.Errorf("invalid port %q", f)
		}
		out = append(out, p)
	}
	*l.p = out
	return nil
}

// csvList is a flag.Value for comma-separated strings (trimmed, empties
// skipped).
type csvList struct{ p *[]string }

func (l csvList) String() string {
	if l.p == nil {
		return ""
	}
	return strings.Join(*l.p, ",")
}

func (l csvList) Set(v string) error {
	*l.p = splitCSV(v)
	return nil
}

func splitCSV(v string) []string {
	var out []string
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// BindFlags registers every flag on fs with its default.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.HTTPAddr, "http-bind-address", ":8080", "Plain HTTP proxy listener (HTTP/1.1 and prior-knowledge h2c); empty disables.")
	fs.StringVar(&c.HTTPSAddr, "https-bind-address", "", "TLS proxy listener; empty disables.")
	fs.StringVar(&c.MetricsAddr, "metrics-bind-address", ":9090", "Prometheus /metrics listener; empty disables.")
	fs.StringVar(&c.ProbeAddr, "health-probe-bind-address", ":8081", "/healthz and /readyz listener; empty disables.")
	fs.StringVar(&c.TLSCertFile, "tls-cert-file", "", "Serving certificate (PEM), reloaded on change.")
	fs.StringVar(&c.TLSKeyFile, "tls-key-file", "", "Serving key (PEM), reloaded on change.")
	fs.StringVar(&c.TLSClientCAFile, "tls-client-ca-file", "", "PEM bundle of client CAs for mTLS.")
	fs.StringVar(&c.MTLSMode, "mtls-mode", MTLSOff, "Client certificates: off, optional or required.")
	fs.StringVar(&c.ClusterDomain, "cluster-domain", "cluster.local", "Cluster DNS domain (accepted for compatibility; targets always come from the cache).")
	fs.DurationVar(&c.ProxyTimeout, "proxy-timeout", 180*time.Second, "Bound on one proxied request (upgrades and gRPC streams are exempt).")
	fs.DurationVar(&c.ResponseHeaderTimeout, "response-header-timeout", 30*time.Second, "Bound on waiting for upstream response headers (HTTP/1.1).")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 30*time.Second, "Budget for draining in-flight requests on SIGTERM.")
	fs.Int64Var(&c.MaxRequestBodyBytes, "max-request-body-bytes", 0, "Request body limit; 0 = unlimited.")
	fs.BoolVar(&c.AllowLoopbackPodIP, "allow-loopback-pod-ip", false, "Allow loopback targets (sidecar mode and tests only).")
	fs.IntVar(&c.UpstreamMaxRetries, "upstream-max-retries", 3, "Dial retries per request.")
	fs.DurationVar(&c.UpstreamRetryInitialDelay, "upstream-retry-initial-delay", defaultRetryInitialDelay, "First dial retry delay (doubles each retry).")
	fs.DurationVar(&c.UpstreamRetryMaxDelay, "upstream-retry-max-delay", defaultRetryMaxDelay, "Cap of the dial retry delay.")
	fs.BoolVar(&c.EnableTracing, "enable-tracing", false, "Export OTLP/gRPC traces (auto-enabled by OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT).")
	fs.BoolVar(&c.EnableOTelMetrics, "enable-otel-metrics", false, "Push metrics over OTLP/gRPC (auto-enabled by OTEL_EXPORTER_OTLP_[METRICS_]ENDPOINT).")
	fs.StringVar(&c.AuthzMode, "authz-mode", AuthzAllowAll, "allow-all, tokenreview or scoped-token.")
	fs.DurationVar(&c.AuthzTokenReviewTTL, "authz-tokenreview-ttl", 30*time.Second, "TokenReview result cache TTL.")
	fs.IntVar(&c.AuthzTokenReviewCacheSize, "authz-tokenreview-cache-size", 2048, "TokenReview result cache entries.")
	fs.BoolVar(&c.AuthzTokenReviewRequireToken, "authz-tokenreview-require-token", false, "Answer 401 to requests without a bearer token.")
	fs.Var(csvList{&c.AuthzTokenReviewAudiences}, "authz-tokenreview-audiences", "Comma-separated TokenReview audiences.")
	fs.StringVar(&c.AuthzScopedTokenSecretFile, "authz-scoped-token-secret-file", "", "HMAC secret (>= 32 bytes) for scoped tokens.")
	fs.BoolVar(&c.AuthzAccessReview, "authz-access-review", true, "With --authz-mode=tokenreview, also require a SubjectAccessReview: the caller must be allowed --authz-access-review-verb on the sandbox (agents.x-k8s.io sandboxes, by name, in its namespace). false = authenticate only, as the reference does.")
	fs.StringVar(&c.AuthzAccessReviewVerb, "authz-access-review-verb", DefaultAccessVerb, "RBAC verb on sandboxes that lets a caller reach a sandbox.")
	fs.DurationVar(&c.AuthzAccessReviewTTL, "authz-access-review-ttl", 10*time.Second, "Cache TTL of an allowed SubjectAccessReview.")
	fs.DurationVar(&c.AuthzAccessReviewNegativeTTL, "authz-access-review-negative-ttl", 2*time.Second, "Cache TTL of a denied or failed SubjectAccessReview.")
	fs.IntVar(&c.AuthzAccessReviewCacheSize, "authz-access-review-cache-size", 4096, "SubjectAccessReview result cache entries (one per caller and sandbox).")
	fs.BoolVar(&c.CacheEnabled, "cache-enabled", true, "Resolve targets from the Sandbox/Pod informer cache and verify every address against it. false = reduced mode (X-Sandbox-Pod-IP or <id>.<namespace>.svc DNS, address-class checks only), also entered when the router lacks list/watch rights.")
	fs.StringVar(&c.CacheNamespace, "cache-namespace", "", "Watch one namespace only; empty = cluster-wide.")
	fs.BoolVar(&c.RequireCache, "require-cache", false, "Exit instead of entering the reduced mode when list/watch rights on sandboxes and pods are missing.")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "Kubeconfig file; empty = in-cluster, then default loading rules.")
	c.DefaultSandboxPorts = []uint16{8888, 8080, 9090}
	fs.Var(portList{&c.DefaultSandboxPorts}, "default-sandbox-ports", "Ports reachable on every sandbox besides the container ports its pod template declares (legacy runtime 8888, sandboxd 8080/9090); empty = declared ports only.")
	fs.BoolVar(&c.AutoResume, "auto-resume", true, "Resume a Suspended sandbox when a request for it arrives.")
	fs.DurationVar(&c.ReadyTimeout, "ready-timeout", 60*time.Second, "How long a request is held for a resuming or starting sandbox before 503.")
	fs.DurationVar(&c.IdleSuspendAfter, "idle-suspend-after", 0, "Suspend sandboxes that received no traffic for this long; 0 = never.")
	fs.BoolVar(&c.AccessLog, "access-log", true, "Log one line per proxied request.")
	fs.BoolVar(&c.ShowVersion, "version", false, "Print the version and exit.")
	fs.StringVar(&c.ConfigFile, "config", "", "YAML file of flag-name: value pairs (env "+EnvConfigFile+").")
}

// ParseConfig parses args over a fresh flag set (extra lets the caller add
// flags such as logging options), applies the config file and environment,
// and validates. Errors are *ConfigError.
func ParseConfig(args []string, getenv func(string) string, extra func(*flag.FlagSet)) (*Config, error) {
	c := &Config{}
	fs := flag.NewFlagSet("sandbox-router", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	c.BindFlags(fs)
	if extra != nil {
		extra(fs)
	}
	if err := fs.Parse(args); err != nil {
		return nil, &ConfigError{Err: err}
	}
	cli := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { cli[f.Name] = true })

	path := c.ConfigFile
	if !cli["config"] {
		path = getenv(EnvConfigFile)
	}
	fromFile := map[string]bool{}
	if path != "" {
		if err := applyConfigFile(fs, path, cli, fromFile); err != nil {
			return nil, err
		}
	}
	set := func(name string) bool { return cli[name] || fromFile[name] }
	if v := getenv("CLUSTER_DOMAIN"); v != "" && !set("cluster-domain") {
		c.ClusterDomain = v
	}
	if v := getenv("PROXY_TIMEOUT_SECONDS"); v != "" && !set("proxy-timeout") {
		if f, err := strconv.ParseFloat(v, 64); err == nil && f > 0 && f < 1e9 {
			c.ProxyTimeout = time.Duration(f * float64(time.Second))
		}
	}
	if v := getenv("KUBECONFIG"); v != "" && !set("kubeconfig") {
		c.Kubeconfig = v
	}
	// OTLP exporters switch on when their endpoint is configured, unless a
	// flag says otherwise.
	all := getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
	if !set("enable-tracing") {
		c.EnableTracing = all || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	}
	if !set("enable-otel-metrics") {
		c.EnableOTelMetrics = all || getenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") != ""
	}
	if c.ShowVersion {
		return c, nil
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// applyConfigFile sets every key of the YAML file that the command line did
// not set. Keys are flag names; values must be scalars.
func applyConfigFile(fs *flag.FlagSet, path string, cli, fromFile map[string]bool) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return usageErr("reading config file: %w", err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		return usageErr("parsing config file %s: %w", path, err)
	}
	for k, v := range m {
		if k == "config" || fs.Lookup(k) == nil {
			return usageErr("config file %s: unknown key %q", path, k)
		}
		var s string
		switch tv := v.(type) {
		case string:
			s = tv
		case bool:
			s = strconv.FormatBool(tv)
		case float64:
			s = strconv.FormatFloat(tv, 'f', -1, 64)
		case nil:
			s = ""
		default:
			return usageErr("config file %s: key %q must be a scalar", path, k)
		}
		if cli[k] {
			continue
		}
		if err := fs.Set(k, s); err != nil {
			return usageErr("config file %s: key %q: %w", path, k, err)
		}
		fromFile[k] = true
	}
	return nil
}

// Validate checks the configuration (the upstream matrix plus ours).
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.HTTPAddr == "" && c.HTTPSAddr == "" {
		bad("at least one of --http-bind-address and --https-bind-address is required")
	}
	if !slices.Contains([]string{MTLSOff, MTLSOptional, MTLSRequired}, c.MTLSMode) {
		bad("invalid --mtls-mode %q", c.MTLSMode)
	}
	if c.HTTPSAddr != "" && (c.TLSCertFile == "" || c.TLSKeyFile == "") {
		bad("--https-bind-address needs --tls-cert-file and --tls-key-file")
	}
	if c.MTLSMode != MTLSOff && c.MTLSMode != "" {
		if c.HTTPSAddr == "" {
			bad("--mtls-mode=%s needs --https-bind-address", c.MTLSMode)
		}
		if c.TLSClientCAFile == "" {
			bad("--mtls-mode=%s needs --tls-client-ca-file", c.MTLSMode)
		}
	}
	if c.ProxyTimeout <= 0 {
		bad("--proxy-timeout must be positive")
	}
	if c.ResponseHeaderTimeout <= 0 {
		bad("--response-header-timeout must be positive")
	}
	if c.ShutdownTimeout < 0 {
		bad("--shutdown-timeout must not be negative")
	}
	if c.MaxRequestBodyBytes < 0 {
		bad("--max-request-body-bytes must not be negative")
	}
	if c.UpstreamMaxRetries < 0 {
		bad("--upstream-max-retries must not be negative")
	}
	if c.UpstreamRetryInitialDelay < 0 || c.UpstreamRetryMaxDelay < 0 {
		bad("upstream retry delays must not be negative")
	}
	if c.ClusterDomain == "" {
		bad("--cluster-domain must not be empty")
	}
	switch c.AuthzMode {
	case AuthzAllowAll:
	case AuthzTokenReview:
		if c.AuthzTokenReviewTTL <= 0 {
			bad("--authz-tokenreview-ttl must be positive")
		}
		if c.AuthzTokenReviewCacheSize <= 0 {
			bad("--authz-tokenreview-cache-size must be positive")
		}
		if c.AuthzAccessReview {
			if c.AuthzAccessReviewVerb == "" {
				bad("--authz-access-review-verb must not be empty")
			}
			if c.AuthzAccessReviewTTL <= 0 || c.AuthzAccessReviewNegativeTTL <= 0 {
				bad("--authz-access-review-ttl and --authz-access-review-negative-ttl must be positive")
			}
			if c.AuthzAccessReviewCacheSize <= 0 {
				bad("--authz-access-review-cache-size must be positive")
			}
		}
	case AuthzScopedToken:
		if c.AuthzScopedTokenSecretFile == "" {
			bad("--authz-mode=scoped-token needs --authz-scoped-token-secret-file")
		}
	default:
		bad("invalid --authz-mode %q", c.AuthzMode)
	}
	if !c.CacheEnabled && c.RequireCache {
		bad("--cache-enabled=false contradicts --require-cache")
	}
	if !c.CacheEnabled && c.IdleSuspendAfter > 0 {
		bad("--idle-suspend-after needs the cache (--cache-enabled=true)")
	}
	if c.ReadyTimeout <= 0 {
		bad("--ready-timeout must be positive")
	}
	if c.IdleSuspendAfter < 0 {
		bad("--idle-suspend-after must not be negative")
	}
	if c.IdleSuspendAfter > 0 && c.IdleSuspendAfter < time.Second {
		bad("--idle-suspend-after must be 0 (off) or at least 1s")
	}
	if len(errs) > 0 {
		return &ConfigError{Err: errors.Join(errs...)}
	}
	return nil
}
