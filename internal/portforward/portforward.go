// Package portforward is the one SPDY port-forward of the tree: 127.0.0.1
// ports forwarded to a Pod's ports through the API server's portforward
// subresource, natively (no kubectl). The Go SDK uses it to reach a
// sandbox or the router; the CLI to keep a tunnel to the router open.
package portforward

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"

	"sigs.k8s.io/agent-sandbox/internal/capbuf"
)

// stderrMax bounds the port-forward's error output kept for messages: its
// first lines say what went wrong; later ones repeat it.
const stderrMax = 256

// Port is one forwarded port: Local 0 picks a free port.
type Port struct {
	Local, Remote int
}

// Tunnel is a running port-forward to one Pod.
type Tunnel struct {
	local  []uint16 // local ports, in the order of the requested ones
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
	stderr *capbuf.Buffer
	err    error // why ForwardPorts returned; read after done
}

// Open forwards 127.0.0.1 to ports of the Pod namespace/pod and returns
// once the listeners are up. core is a REST client of the core API group
// (it builds the subresource URL); ctx bounds only the setup, and its
// error is returned wrapped when it ends the setup.
func Open(ctx context.Context, cfg *rest.Config, core rest.Interface, namespace, pod string, ports []Port) (*Tunnel, error) {
	rt, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("port-forward transport: %w", err)
	}
	u := core.Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
	specs := make([]string, len(ports))
	for i, p := range ports {
		specs[i] = strconv.Itoa(p.Local) + ":" + strconv.Itoa(p.Remote)
	}
	t := &Tunnel{stop: make(chan struct{}), done: make(chan struct{}), stderr: capbuf.New(stderrMax)}
	ready := make(chan struct{})
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, specs, t.stop, ready, io.Discard, t.stderr)
	if err != nil {
		return nil, fmt.Errorf("port-forward to pod %s/%s: %w", namespace, pod, err)
	}
	go func() {
		t.err = fw.ForwardPorts()
		close(t.done)
	}()
	select {
	case <-ready:
	case <-t.done:
		return nil, fmt.Errorf("port-forward to pod %s/%s: %w%s", namespace, pod, t.err, t.stderrSuffix())
	case <-ctx.Done():
		t.Close()
		return nil, fmt.Errorf("establishing port-forward to pod %s/%s: %w", namespace, pod, ctx.Err())
	}
	got, err := fw.GetPorts()
	if err == nil && len(got) != len(ports) {
		err = fmt.Errorf("%d ports for %d requested", len(got), len(ports))
	}
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("port-forward to pod %s/%s: reading local ports: %w", namespace, pod, err)
	}
	for _, p := range got {
		t.local = append(t.local, p.Local)
	}
	return t, nil
}

// Local returns the local ports, in the order of the requested ones.
func (t *Tunnel) Local() []uint16 { return t.local }

// Done is closed when the tunnel ended, by Close or by failure.
func (t *Tunnel) Done() <-chan struct{} { return t.done }

// Err says why the tunnel ended, after Done: the port-forward's error (nil
// when it was closed) with its stderr; use Stderr for the output alone.
func (t *Tunnel) Err() error { return t.err }

// Stderr is the start of the port-forward's error output, trimmed.
func (t *Tunnel) Stderr() string { return strings.TrimSpace(t.stderr.String()) }

// Close stops the tunnel and waits for it.
func (t *Tunnel) Close() {
	t.once.Do(func() { close(t.stop) })
	<-t.done
}

func (t *Tunnel) stderrSuffix() string {
	if s := t.Stderr(); s != "" {
		return " (" + s + ")"
	}
	return ""
}

// Stub returns a Tunnel that forwards nothing, claims the given local
// ports and ends when closed, like a real one: for tests of code that
// shares, watches or replaces tunnels without an API server.
func Stub(local ...uint16) *Tunnel {
	t := &Tunnel{local: local, stop: make(chan struct{}), done: make(chan struct{}), stderr: capbuf.New(stderrMax)}
	go func() {
		<-t.stop
		close(t.done)
	}()
	return t
}
