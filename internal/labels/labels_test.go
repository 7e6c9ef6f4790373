package labels

import (
	"fmt"
	"hash/fnv"
	"maps"
	"testing"
)

func TestNameHashKnownValues(t *testing.T) {
	// Published FNV-1a 32-bit test vectors.
	cases := map[string]string{
		"":       "811c9dc5",
		"a":      "e40c292c",
		"foobar": "bf9cf968",
	}
	for in, want := range cases {
		if got := NameHash(in); got != want {
			t.Errorf("NameHash(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNameHashMatchesStdlib(t *testing.T) {
	for _, in := range []string{"my-sandbox", "python-sandbox-pool", "x", "ünïcødé", "a-very-long-name-0123456789-0123456789-0123456789"} {
		h := fnv.New32a()
		h.Write([]byte(in))
		want := fmt.Sprintf("%08x", h.Sum32())
		if got := NameHash(in); got != want {
			t.Errorf("NameHash(%q) = %q, want %q", in, got, want)
		}
		if len(NameHash(in)) != 8 {
			t.Errorf("NameHash(%q) is not 8 characters", in)
		}
	}
}

func TestIsSystemKey(t *testing.T) {
	cases := []struct {
		key  string
		want bool
	}{
		{SandboxNameHash, true},
		{"extensions.agents.x-k8s.io/anything", true},
		{TraceContext, true},
		{"app", false},
		{"sandbox.users.io/team", false},
		{"x-agents.x-k8s.io/foo", false},
		{SafeToEvict, false},
	}
	for _, c := range cases {
		if got := IsSystemKey(c.key); got != c.want {
			t.Errorf("IsSystemKey(%q) = %v, want %v", c.key, got, c.want)
		}
	}
}

func TestUserKeys(t *testing.T) {
	cases := []struct {
		name string
		in   map[string]string
		want map[string]string
	}{
		{"nil", nil, map[string]string{}},
		{"empty", map[string]string{}, map[string]string{}},
		{"user keys kept", map[string]string{"app": "web", SafeToEvict: "false"}, map[string]string{"app": "web", SafeToEvict: "false"}},
		{"system keys dropped", map[string]string{
			SandboxNameHash: "spoofed", "extensions.agents.x-k8s.io/x": "1", TraceContext: "t", "team": "a", "x-agents.x-k8s.io/y": "2",
		}, map[string]string{"team": "a", "x-agents.x-k8s.io/y": "2"}},
		{"only system keys", map[string]string{ClaimUID: "u", PodName: "p"}, map[string]string{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := UserKeys(c.in)
			if got == nil {
				t.Fatalf("UserKeys(%v) = nil, want a map the caller may write to", c.in)
			}
			if !maps.Equal(got, c.want) {
				t.Errorf("UserKeys(%v) = %v, want %v", c.in, got, c.want)
			}
			// The result is the caller's: writing to it leaves the input alone.
			got["added"] = "x"
			if _, ok := c.in["added"]; ok {
				t.Errorf("UserKeys returned its input map")
			}
		})
	}
}

func TestNormalizeCreatedBy(t *testing.T) {
	for in, want := range map[string]string{
		"go-client": "go-client", "python-client": "python-client", "controller": "controller",
		"typescript-client": "typescript-client",
		"":                  "unknown", "kubectl": "unknown",
	} {
		if got := NormalizeCreatedBy(in); got != want {
			t.Errorf("NormalizeCreatedBy(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestJoinSplitKeys(t *testing.T) {
	if got := JoinKeys([]string{"b", "a", "c"}); got != "a,b,c" {
		t.Errorf("JoinKeys = %q", got)
	}
	if got := SplitKeys(""); got != nil {
		t.Errorf("SplitKeys(\"\") = %v", got)
	}
	if got := SplitKeys("a,b"); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Errorf("SplitKeys = %v", got)
	}
}

func BenchmarkNameHash(b *testing.B) {
	for i := 0; i < b.N; i++ {
		_ = NameHash("python-sandbox-pool-abcde")
	}
}
