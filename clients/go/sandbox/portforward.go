package sandbox

import (
	"context"
	"errors"
	"fmt"

	"sigs.k8s.io/agent-sandbox/internal/portforward"
)

// tunnel is a running port-forward to one Pod, through the API server
// (internal/portforward, shared with the CLI), with the SDK's errors.
type tunnel struct {
	*portforward.Tunnel
	local []uint16 // local ports, in the order of the remote ports
}

// openTunnel forwards 127.0.0.1:<random> to each of remotePorts of the Pod
// namespace/pod and returns once the listeners are up. ctx bounds only the
// setup.
func openTunnel(ctx context.Context, h *K8sHelper, namespace, pod string, remotePorts []int) (*tunnel, error) {
	ports := make([]portforward.Port, len(remotePorts))
	for i, p := range remotePorts {
		ports[i] = portforward.Port{Remote: p}
	}
	pt, err := portforward.Open(ctx, h.RestConfig, h.CoreClient.CoreV1().RESTClient(), namespace, pod, ports)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return nil, timeoutErr(ctx, fmt.Sprintf("establishing port-forward to pod %s/%s", namespace, pod), "")
		}
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	return &tunnel{Tunnel: pt, local: pt.Local()}, nil
}

// Err says why the tunnel ended (after Done), as ErrPortForwardDied with
// the port-forward's stderr.
func (t *tunnel) Err() error {
	suffix := ""
	if s := t.Stderr(); s != "" {
		suffix = " (" + s + ")"
	}
	if err := t.Tunnel.Err(); err != nil {
		return fmt.Errorf("%w: %w%s", ErrPortForwardDied, err, suffix)
	}
	return fmt.Errorf("%w%s", ErrPortForwardDied, suffix)
}
