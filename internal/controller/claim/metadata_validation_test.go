package claim

import (
	"strings"
	"testing"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

func TestValidateAdditionalPodMetadata(t *testing.T) {
	long := strings.Repeat("x", 64)
	cases := []struct {
		name    string
		labels  map[string]string
		anns    map[string]string
		allowed []string
		wantErr string // substring; "" = valid
	}{
		{name: "allowed default domain", labels: map[string]string{"sandbox.users.io/team": "a"}},
		{name: "subdomain of allowed", labels: map[string]string{"eu.sandbox.users.io/team": "a"}},
		{name: "allowed list is case-insensitive", labels: map[string]string{"corp.example/team": "a"}, allowed: []string{"Corp.Example"}},
		{name: "label without domain", labels: map[string]string{"team": "a"}, wantErr: `must have a domain prefix`},
		{name: "label in a foreign domain", labels: map[string]string{"example.com/team": "a"}, wantErr: `is not in the allowlist`},
		{name: "suffix trick is not a subdomain", labels: map[string]string{"evilsandbox.users.io/team": "a"}, wantErr: `is not in the allowlist`},
		{name: "too long value", labels: map[string]string{"sandbox.users.io/team": long}, wantErr: `invalid value`},
		{name: "invalid value pattern", labels: map[string]string{"sandbox.users.io/team": "a b"}, wantErr: `invalid value`},
		{name: "invalid key", labels: map[string]string{"sandbox.users.io/te am": "a"}, wantErr: `label key`},
		{name: "router spoofing", labels: map[string]string{"app": "sandbox-router"}, wantErr: `restricted system label value`},
		{name: "router spoofing, any case", labels: map[string]string{"app": "Sandbox-Router"}, wantErr: `restricted system label value`},
		{name: "system label even if allowed", labels: map[string]string{"agents.x-k8s.io/sandbox-name-hash": "abc"}, allowed: []string{"agents.x-k8s.io"}, wantErr: `restricted system label`},
		{name: "custom allowed domain", labels: map[string]string{"corp.example/team": "a"}, allowed: []string{"corp.example"}},
		{name: "unprefixed annotation", anns: map[string]string{"note": "x"}},
		{name: "safe-to-evict annotation accepted", anns: map[string]string{"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"}},
		{name: "kubernetes.io annotation", anns: map[string]string{"kubernetes.io/psp": "x"}, wantErr: `restricted domain "kubernetes.io"`},
		{name: "subdomain of k8s.io", anns: map[string]string{"foo.k8s.io/x": "y"}, wantErr: `restricted domain "k8s.io"`},
		{name: "other cluster-autoscaler annotation", anns: map[string]string{"cluster-autoscaler.kubernetes.io/scale-down-disabled": "true"}, wantErr: `restricted domain`},
		{name: "agents annotation", anns: map[string]string{"agents.x-k8s.io/pod-name": "victim"}, wantErr: `restricted system annotation`},
		{name: "extensions agents annotation", anns: map[string]string{"extensions.agents.x-k8s.io/x": "y"}, wantErr: `restricted`},
		{name: "invalid annotation key", anns: map[string]string{"bad key": "y"}, wantErr: `annotation key`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := validateAdditionalPodMetadata(sandboxv1beta1.PodMetadata{Labels: c.labels, Annotations: c.anns}, c.allowed)
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Fatalf("error = %v, want it to contain %q", err, c.wantErr)
			}
		})
	}
}

func TestParseAllowedLabelDomains(t *testing.T) {
	got := ParseAllowedLabelDomains(" A.example ,b.example\n\nC.Example\r\n,")
	want := []string{"a.example", "b.example", "c.example"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %v, want %v", got, want)
	}
	if d, err := ReadAllowedLabelDomains("/nonexistent/allowed"); err != nil || d != nil {
		t.Fatalf("missing file: %v, %v", d, err)
	}
}

func TestMergeNoOverride(t *testing.T) {
	out, err := mergeNoOverride("label", map[string]string{"a": "1"}, map[string]string{"a": "1", "b": "2"})
	if err != nil || out["a"] != "1" || out["b"] != "2" {
		t.Fatalf("equal values must merge: %v %v", out, err)
	}
	_, err = mergeNoOverride("annotation", map[string]string{"a": "1"}, map[string]string{"a": "2"})
	want := `metadata override conflict: annotation "a" is defined in template with value "1", but claim requests "2"`
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v", err)
	}
}
