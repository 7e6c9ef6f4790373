package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"

	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// tunnel is a running port-forward to one Pod, through the API server.
type tunnel struct {
	local  []uint16 // local ports, in the order of the remote ports
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
	stderr *tailBuffer
	err    error // why ForwardPorts returned; read after done
}

// openTunnel forwards 127.0.0.1:<random> to each of remotePorts of the Pod
// namespace/pod, natively over SPDY (no kubectl), and returns once the
// listeners are up. ctx bounds only the setup.
func openTunnel(ctx context.Context, h *K8sHelper, namespace, pod string, remotePorts []int) (*tunnel, error) {
	rt, upgrader, err := spdy.RoundTripperFor(h.RestConfig)
	if err != nil {
		return nil, fmt.Errorf("sandbox: port-forward transport: %w", err)
	}
	u := h.CoreClient.CoreV1().RESTClient().Post().
		Resource("pods").Namespace(namespace).Name(pod).SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
	specs := make([]string, len(remotePorts))
	for i, p := range remotePorts {
		specs[i] = "0:" + strconv.Itoa(p)
	}
	t := &tunnel{stop: make(chan struct{}), done: make(chan struct{}), stderr: &tailBuffer{max: 256}}
	ready := make(chan struct{})
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, specs, t.stop, ready, io.Discard, t.stderr)
	if err != nil {
		return nil, fmt.Errorf("sandbox: port-forward to pod %s/%s: %w", namespace, pod, err)
	}
	go func() {
		t.err = fw.ForwardPorts()
		close(t.done)
	}()
	select {
	case <-ready:
	case <-t.done:
		return nil, fmt.Errorf("sandbox: port-forward to pod %s/%s: %w%s", namespace, pod, t.err, t.stderrSuffix())
	case <-ctx.Done():
		t.Close()
		return nil, timeoutErr(ctx, fmt.Sprintf("establishing port-forward to pod %s/%s", namespace, pod), "")
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) != len(remotePorts) {
		t.Close()
		return nil, fmt.Errorf("sandbox: port-forward to pod %s/%s: reading local ports: %w", namespace, pod, err)
	}
	for _, p := range ports {
		t.local = append(t.local, p.Local)
	}
	return t, nil
}

// Done is closed when the tunnel ended, by Close or by failure.
func (t *tunnel) Done() <-chan struct{} { return t.done }

// Err says why the tunnel ended (after Done), as ErrPortForwardDied with
// the port-forward's stderr.
func (t *tunnel) Err() error {
	if t.err != nil {
		return fmt.Errorf("%w: %w%s", ErrPortForwardDied, t.err, t.stderrSuffix())
	}
	return fmt.Errorf("%w%s", ErrPortForwardDied, t.stderrSuffix())
}

// Close stops the tunnel and waits for it.
func (t *tunnel) Close() {
	t.once.Do(func() { close(t.stop) })
	<-t.done
}

func (t *tunnel) stderrSuffix() string {
	if s := t.stderr.String(); s != "" {
		return " (" + s + ")"
	}
	return ""
}

// tailBuffer keeps the first max bytes written (the port-forward's first
// error lines say what went wrong; later ones repeat it).
type tailBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(bytes.TrimSpace(b.buf.Bytes()))
}
