package remote

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/agent-sandbox/clients/go/sandbox"
	"sigs.k8s.io/agent-sandbox/internal/portforward"
)

// DefaultRouterNamespace is where the release manifests and `agent-sandbox
// up` install the sandbox-router (and where the Python SDK looks for it).
const DefaultRouterNamespace = "agent-sandbox-system"

// routerPort is the router's HTTP (and h2c) port in its Pod.
const routerPort = 8080

// RouterPod returns a Pod behind a ready endpoint of sandbox-router-svc in
// namespace, or "" when there is none.
func RouterPod(ctx context.Context, h *sandbox.K8sHelper, namespace string) (string, error) {
	slices, err := h.CoreClient.DiscoveryV1().EndpointSlices(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + sandbox.RouterServiceName,
	})
	if err != nil {
		return "", fmt.Errorf("looking for the sandbox-router in namespace %s: %w", namespace, err)
	}
	for _, sl := range slices.Items {
		for _, ep := range sl.Endpoints {
			ready := ep.Conditions.Ready == nil || *ep.Conditions.Ready
			if ready && ep.TargetRef != nil && ep.TargetRef.Kind == "Pod" && ep.TargetRef.Name != "" {
				return ep.TargetRef.Name, nil
			}
		}
	}
	return "", nil
}

// RouterTunnel is a port-forward from 127.0.0.1 to the sandbox-router of
// another namespace than the sandboxes' (the SDK's own tunnel only looks
// in the sandbox's namespace). It keeps its local port: when the
// port-forward ends (the router Pod went away, the API server closed the
// stream), it is opened again, to a ready router Pod, on the same port.
// Hand URL to the SDK as Options.APIURL.
type RouterTunnel struct {
	h         *sandbox.K8sHelper
	namespace string
	port      uint16

	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

// OpenRouterTunnel forwards a local port to a ready sandbox-router Pod in
// namespace and keeps it forwarded until Close. ctx bounds the first
// connection only.
func OpenRouterTunnel(ctx context.Context, h *sandbox.K8sHelper, namespace string) (*RouterTunnel, error) {
	t := &RouterTunnel{h: h, namespace: namespace, stop: make(chan struct{}), done: make(chan struct{})}
	ended, err := t.forward(ctx)
	if err != nil {
		return nil, err
	}
	go t.keep(ended)
	return t, nil
}

// URL is the router's address through the tunnel.
func (t *RouterTunnel) URL() string { return "http://127.0.0.1:" + strconv.Itoa(int(t.port)) }

// Close stops forwarding.
func (t *RouterTunnel) Close() {
	t.stopOnce.Do(func() { close(t.stop) })
	<-t.done
}

// keep re-opens the port-forward whenever it ends, until Close.
func (t *RouterTunnel) keep(ended <-chan struct{}) {
	defer close(t.done)
	backoff := 100 * time.Millisecond
	for {
		select {
		case <-t.stop:
			<-ended
			return
		case <-ended:
		}
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			next, err := t.forward(ctx)
			cancel()
			if err == nil {
				ended, backoff = next, 100*time.Millisecond
				break
			}
			select {
			case <-t.stop:
				return
			case <-time.After(backoff):
				backoff = min(2*backoff, 5*time.Second)
			}
		}
	}
}

// forward opens one port-forward and returns a channel closed when it
// ends.
func (t *RouterTunnel) forward(ctx context.Context) (<-chan struct{}, error) {
	pod, err := RouterPod(ctx, t.h, t.namespace)
	if err != nil {
		return nil, err
	}
	if pod == "" {
		return nil, fmt.Errorf("no ready %s endpoint in namespace %s: %w", sandbox.RouterServiceName, t.namespace, sandbox.ErrNotReady)
	}
	pt, err := portforward.Open(ctx, t.h.RestConfig, t.h.CoreClient.CoreV1().RESTClient(), t.namespace, pod,
		[]portforward.Port{{Local: int(t.port), Remote: routerPort}})
	if err != nil {
		return nil, fmt.Errorf("sandbox-router: %w", err)
	}
	// Later forwards keep the first one's local port: the URL handed out
	// stays valid across reconnects.
	t.port = pt.Local()[0]
	go func() {
		select {
		case <-t.stop:
			pt.Close()
		case <-pt.Done():
		}
	}()
	return pt.Done(), nil
}
