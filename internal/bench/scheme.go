package bench

import (
	"k8s.io/apimachinery/pkg/runtime"

	"sigs.k8s.io/agent-sandbox/internal/scheme"
)

func newScheme() (*runtime.Scheme, error) { return scheme.New() }
