package claim

import "github.com/agent-sandbox/agent-sandbox/internal/testenv"

// SharedEnv gives the external tests the shared apiserver.
func SharedEnv() *testenv.Env { return env }
