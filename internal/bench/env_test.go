package bench

import (
	"reflect"
	"testing"

	"sigs.k8s.io/agent-sandbox/clients/go/sandbox"
)

func TestParseEnv(t *testing.T) {
	got, err := ParseEnv([]string{"A=1", "B=x=y", "C="})
	if err != nil || !reflect.DeepEqual(got, []sandbox.EnvVar{{Name: "A", Value: "1"}, {Name: "B", Value: "x=y"}, {Name: "C"}}) {
		t.Fatalf("ParseEnv = %v, %v", got, err)
	}
	for _, bad := range []string{"A", "=1"} {
		if _, err := ParseEnv([]string{bad}); err == nil {
			t.Errorf("ParseEnv(%q) accepted", bad)
		}
	}
}
