package extensions_test

import (
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }
