package mcp

import (
	"strings"
	"testing"
)

func TestSessionfulVersions(t *testing.T) {
	vs := sessionfulVersions()
	if len(vs) == 0 {
		t.Fatal("no protocol versions left")
	}
	for _, v := range vs {
		if v >= "2026-07-28" {
			t.Errorf("version %s has no sessions over HTTP", v)
		}
	}
}

func TestCheckTimeout(t *testing.T) {
	for _, ok := range []float64{0.001, 1, 60, 600} {
		if _, err := checkTimeout("timeout", ok); err != nil {
			t.Errorf("checkTimeout(%v) = %v", ok, err)
		}
	}
	for _, bad := range []float64{0, -1, 600.5, 1e9} {
		if _, err := checkTimeout("timeout", bad); err == nil || !strings.Contains(err.Error(), "greater than 0 and at most 600") {
			t.Errorf("checkTimeout(%v) = %v", bad, err)
		}
	}
}

func TestOutputBufferTruncates(t *testing.T) {
	o := newOutputBuffer(5, &progress{}, "stdout")
	_, _ = o.Write([]byte("abc"))
	_, _ = o.Write([]byte("defg"))
	if got := o.String(); got != "abcde\n[output truncated at 5 bytes]" {
		t.Errorf("String() = %q", got)
	}
	o = newOutputBuffer(5, &progress{}, "stdout")
	_, _ = o.Write([]byte("abcde"))
	if got := o.String(); got != "abcde" {
		t.Errorf("exactly max: %q", got)
	}
}

func TestInputSchemasHaveDefaults(t *testing.T) {
	s := inputSchema[listIn](map[string]any{"timeout": defaultTimeout, "max_entries": defaultMaxEntries})
	if string(s.Properties["max_entries"].Default) != "1000" || string(s.Properties["timeout"].Default) != "60" {
		t.Errorf("defaults: %s, %s", s.Properties["max_entries"].Default, s.Properties["timeout"].Default)
	}
	if want := []string{"sandbox_claim_name", "path"}; strings.Join(s.Required, ",") != strings.Join(want, ",") {
		t.Errorf("required = %v, want %v", s.Required, want)
	}
}
