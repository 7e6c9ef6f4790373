package bench

import (
	"fmt"
	"strings"

	"sigs.k8s.io/agent-sandbox/clients/go/sandbox"
)

// ParseEnv reads NAME=VALUE pairs (the bench's --env flag) into the env
// every claim of the sdk scenario sets: with a late-binding template the
// claims stay warm and the env is delivered after adoption, so comparing a
// run with and without it measures what late binding costs.
func ParseEnv(pairs []string) ([]sandbox.EnvVar, error) {
	out := make([]sandbox.EnvVar, 0, len(pairs))
	for _, p := range pairs {
		name, value, ok := strings.Cut(p, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("--env %q: want NAME=VALUE", p)
		}
		out = append(out, sandbox.EnvVar{Name: name, Value: value})
	}
	return out, nil
}
