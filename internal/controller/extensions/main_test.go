package extensions_test

import (
	"os"
	"testing"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

var env *testenv.Env

// Every test here runs the controllers on the apiserver: under -short the
// binary exits before starting one, and `make test-unit` does not build it.
func TestMain(m *testing.M) {
	testenv.ExitIfShort("a kube-apiserver and etcd", testenv.IntegrationTarget)
	// EXT_TEST_LOG=<file> writes the controllers' debug logs there.
	if path := os.Getenv("EXT_TEST_LOG"); path != "" {
		if f, err := os.Create(path); err == nil {
			ctrl.SetLogger(zap.New(zap.WriteTo(f), zap.Level(zapLevel(1))))
		}
	}
	testenv.Main(m, &env)
}
