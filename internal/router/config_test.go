package router

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestConfigDefaultsAndEnv(t *testing.T) {
	c, err := ParseConfig(nil, envOf(nil), nil)
	if err != nil {
		t.Fatalf("defaults must be valid: %v", err)
	}
	if c.HTTPAddr != ":8080" || c.MetricsAddr != ":9090" || c.ProbeAddr != ":8081" || c.ProxyTimeout != 180*time.Second ||
		c.ResponseHeaderTimeout != 30*time.Second || c.UpstreamMaxRetries != 3 || c.AuthzMode != AuthzAllowAll ||
		c.ClusterDomain != "cluster.local" || !c.AccessLog || !c.AutoResume || c.IdleSuspendAfter != 0 ||
		len(c.DefaultSandboxPorts) != 3 {
		t.Fatalf("defaults: %+v", c)
	}
	c, _ = ParseConfig(nil, envOf(map[string]string{"CLUSTER_DOMAIN": "corp.local", "PROXY_TIMEOUT_SECONDS": "2.5", "KUBECONFIG": "/k"}), nil)
	if c.ClusterDomain != "corp.local" || c.ProxyTimeout != 2500*time.Millisecond || c.Kubeconfig != "/k" {
		t.Fatalf("env: %+v", c)
	}
	for _, bad := range []string{"abc", "-1", "0", "NaN", "Inf"} {
		c, _ = ParseConfig(nil, envOf(map[string]string{"PROXY_TIMEOUT_SECONDS": bad}), nil)
		if c.ProxyTimeout != 180*time.Second {
			t.Errorf("PROXY_TIMEOUT_SECONDS=%q changed the timeout to %s", bad, c.ProxyTimeout)
		}
	}
	c, _ = ParseConfig([]string{"--cluster-domain=flag.local", "--proxy-timeout=7s"},
		envOf(map[string]string{"CLUSTER_DOMAIN": "env.local", "PROXY_TIMEOUT_SECONDS": "3"}), nil)
	if c.ClusterDomain != "flag.local" || c.ProxyTimeout != 7*time.Second {
		t.Fatalf("flags must beat env: %+v", c)
	}
	c, _ = ParseConfig([]string{"--authz-tokenreview-audiences= a, ,b ", "--default-sandbox-ports=8888, 3000"}, envOf(nil), nil)
	if strings.Join(c.AuthzTokenReviewAudiences, "|") != "a|b" || len(c.DefaultSandboxPorts) != 2 || c.DefaultSandboxPorts[1] != 3000 {
		t.Fatalf("lists: %v %v", c.AuthzTokenReviewAudiences, c.DefaultSandboxPorts)
	}
}

func TestConfigOTelAutoEnable(t *testing.T) {
	for _, c := range []struct {
		env           map[string]string
		args          []string
		trace, metric bool
	}{
		{nil, nil, false, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, nil, true, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4317"}, nil, true, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://c:4317"}, nil, false, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, []string{"--enable-tracing=false"}, false, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, []string{"--enable-otel-metrics=false"}, true, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ""}, nil, false, false},
		{nil, []string{"--enable-tracing"}, true, false},
	} {
		cfg, err := ParseConfig(c.args, envOf(c.env), nil)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.EnableTracing != c.trace || cfg.EnableOTelMetrics != c.metric {
			t.Errorf("env %v args %v: tracing=%v metrics=%v", c.env, c.args, cfg.EnableTracing, cfg.EnableOTelMetrics)
		}
	}
}

func TestConfigValidateMatrix(t *testing.T) {
	for _, args := range [][]string{
		{"--http-bind-address="},
		{"--mtls-mode=sometimes"},
		{"--https-bind-address=:8443"},
		{"--https-bind-address=:8443", "--tls-cert-file=c", "--tls-key-file=k", "--mtls-mode=required"},
		{"--mtls-mode=optional", "--tls-client-ca-file=ca"},
		{"--proxy-timeout=0"},
		{"--response-header-timeout=-1s"},
		{"--shutdown-timeout=-1s"},
		{"--max-request-body-bytes=-1"},
		{"--upstream-max-retries=-1"},
		{"--upstream-retry-initial-delay=-1ms"},
		{"--upstream-retry-max-delay=-1ms"},
		{"--cluster-domain="},
		{"--authz-mode=open-sesame"},
		{"--authz-mode=tokenreview", "--authz-tokenreview-ttl=0"},
		{"--authz-mode=tokenreview", "--authz-tokenreview-cache-size=0"},
		{"--authz-mode=scoped-token"},
		{"--cache-enabled=false", "--require-cache"},
		{"--cache-enabled=false", "--idle-suspend-after=15m"},
		{"--authz-mode=tokenreview", "--authz-access-review-verb="},
		{"--authz-mode=tokenreview", "--authz-access-review-ttl=0"},
		{"--authz-mode=tokenreview", "--authz-access-review-negative-ttl=-1s"},
		{"--authz-mode=tokenreview", "--authz-access-review-cache-size=0"},
		{"--ready-timeout=0"},
		{"--idle-suspend-after=-1s"},
		{"--idle-suspend-after=500ms"},
		{"--default-sandbox-ports=70000"},
	} {
		_, err := ParseConfig(args, envOf(nil), nil)
		var ce *ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("%v: want a ConfigError, got %v", args, err)
		}
	}
	ok := [][]string{
		{"--https-bind-address=:8443", "--tls-cert-file=c", "--tls-key-file=k", "--mtls-mode=required", "--tls-client-ca-file=ca"},
		{"--authz-mode=scoped-token", "--authz-scoped-token-secret-file=/s"},
		{"--idle-suspend-after=15m"},
		{"--cache-enabled=false"},
		{"--authz-mode=tokenreview", "--authz-access-review=false", "--authz-access-review-ttl=0"},
	}
	for _, args := range ok {
		if _, err := ParseConfig(args, envOf(nil), nil); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
}

func TestConfigFile(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "router.yaml")
	write := func(s string) {
		if err := os.WriteFile(f, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("proxy-timeout: 42s\nupstream-max-retries: 5\naccess-log: false\ncluster-domain: file.local\n")
	c, err := ParseConfig([]string{"--config", f}, envOf(map[string]string{"CLUSTER_DOMAIN": "env.local"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.ProxyTimeout != 42*time.Second || c.UpstreamMaxRetries != 5 || c.AccessLog || c.ClusterDomain != "file.local" {
		t.Fatalf("file values (file beats env): %+v", c)
	}
	c, _ = ParseConfig([]string{"-config=" + f, "--proxy-timeout=1s"}, envOf(nil), nil)
	if c.ProxyTimeout != time.Second {
		t.Fatal("CLI must override the file")
	}
	c, _ = ParseConfig(nil, envOf(map[string]string{EnvConfigFile: f}), nil)
	if c.ProxyTimeout != 42*time.Second {
		t.Fatal("config path from env")
	}
	other := filepath.Join(dir, "other.yaml")
	_ = os.WriteFile(other, []byte("proxy-timeout: 9s\n"), 0o600)
	c, _ = ParseConfig([]string{"--config=" + other}, envOf(map[string]string{EnvConfigFile: f}), nil)
	if c.ProxyTimeout != 9*time.Second {
		t.Fatal("CLI config path must win over env")
	}
	for _, bad := range []string{"no-such-flag: 1\n", "proxy-timeout: [1, 2]\n", "proxy-timeout: {a: 1}\n", "::: not yaml", "proxy-timeout: banana\n"} {
		write(bad)
		_, err := ParseConfig([]string{"--config", f}, envOf(nil), nil)
		var ce *ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("%q: want ConfigError, got %v", bad, err)
		}
	}
	_, err = ParseConfig([]string{"--config", filepath.Join(dir, "missing.yaml")}, envOf(nil), nil)
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Errorf("missing file: %v", err)
	}
}
