package cli

import (
	"sigs.k8s.io/agent-sandbox/internal/scheme"
)

// cliScheme knows the core types and both agent-sandbox API groups.
var cliScheme = scheme.Must()
