package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"

	"sigs.k8s.io/agent-sandbox/clients/go/sandbox"
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
	rt, upgrader, err := spdy.RoundTripperFor(t.h.RestConfig)
	if err != nil {
		return nil, fmt.Errorf("port-forward transport: %w", err)
	}
	u := t.h.CoreClient.CoreV1().RESTClient().Post().
		Resource("pods").Namespace(t.namespace).Name(pod).SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
	stop, ready, ended := make(chan struct{}), make(chan struct{}), make(chan struct{})
	stderr := &firstBytes{max: 256}
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"},
		[]string{strconv.Itoa(int(t.port)) + ":" + strconv.Itoa(routerPort)}, stop, ready, io.Discard, stderr)
	if err != nil {
		return nil, fmt.Errorf("port-forward to the sandbox-router %s/%s: %w", t.namespace, pod, err)
	}
	var ferr error
	go func() {
		ferr = fw.ForwardPorts()
		close(ended)
	}()
	select {
	case <-ready:
	case <-ended:
		return nil, fmt.Errorf("port-forward to the sandbox-router %s/%s: %w %s", t.namespace, pod, ferr, stderr)
	case <-ctx.Done():
		close(stop)
		<-ended
		return nil, fmt.Errorf("port-forward to the sandbox-router %s/%s: %w", t.namespace, pod, ctx.Err())
	}
	if t.port == 0 {
		ports, err := fw.GetPorts()
		if err != nil || len(ports) != 1 {
			close(stop)
			<-ended
			return nil, errors.Join(errors.New("port-forward: reading the local port"), err)
		}
		t.port = ports[0].Local
	}
	go func() {
		select {
		case <-t.stop:
			close(stop)
		case <-ended:
		}
	}()
	return ended, nil
}

// firstBytes keeps the first max bytes written to it.
type firstBytes struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (b *firstBytes) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

func (b *firstBytes) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(bytes.TrimSpace(b.buf.Bytes()))
}
