package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// RegisterRestartsInPlace registers agent_sandbox_controller_restarts_in_place
// with the number of times this container's controller process has started
// again in place after losing its leader lease. The kubelet's restartCount,
// which alerts usually watch, does not see those restarts; this gauge does.
func RegisterRestartsInPlace(n int) error {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "agent_sandbox_controller_restarts_in_place",
		Help: "Times this container's controller started again in place (exec) after losing its leader lease, since the container started; the kubelet's restartCount does not count them.",
	})
	g.Set(float64(n))
	return ctrlmetrics.Registry.Register(g)
}
