package claim

import "sigs.k8s.io/agent-sandbox/internal/testenv"

// SharedEnv gives the external tests the shared apiserver.
func SharedEnv() *testenv.Env { return env }
