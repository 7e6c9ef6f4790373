package claim

import (
	"testing"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// env is the apiserver shared by the internal and external tests of this
// package (one test binary, one TestMain).
var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }
