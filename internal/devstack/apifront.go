package devstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiproxy "k8s.io/apiserver/pkg/util/proxy"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/streaming/pkg/httpstream/wsstream"
)

// portForwardPath matches the pods/portforward subresource.
var portForwardPath = regexp.MustCompile(`^/api/v1/namespaces/([^/]+)/pods/([^/]+)/portforward$`)

// apiFront is the address clients of the stack use as "the apiserver". It
// forwards every request to the real kube-apiserver with admin credentials,
// except pods/portforward, which a real apiserver relays to the kubelet of
// the Pod's node. envtest has no kubelet, so the front serves port-forward
// itself and dials the Pod's IP (the process kubelet makes Pod IPs real
// loopback addresses), or an override address for Pods that stand in for
// components running in this process (the router).
//
// The front speaks plain HTTP on loopback and asks for no credentials: it
// is a test fixture, reachable only from this machine.
type apiFront struct {
	srv      *http.Server
	ln       net.Listener
	upstream *httputil.ReverseProxy
	cs       kubernetes.Interface

	mu        sync.Mutex
	overrides map[string]map[int32]string // namespace/pod -> port -> address
}

// startAPIFront listens on 127.0.0.1 and serves until close.
func startAPIFront(admin *rest.Config) (*apiFront, error) {
	target, err := url.Parse(admin.Host)
	if err != nil {
		return nil, fmt.Errorf("parsing apiserver address: %w", err)
	}
	rt, err := rest.TransportFor(admin)
	if err != nil {
		return nil, fmt.Errorf("apiserver transport: %w", err)
	}
	cs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return nil, fmt.Errorf("apiserver client: %w", err)
	}
	f := &apiFront{cs: cs, overrides: map[string]map[int32]string{}}
	f.upstream = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = ""
		},
		Transport: rt,
		// Watches are long-lived streams of events; flush each one.
		FlushInterval: -1,
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening: %w", err)
	}
	f.ln = ln
	f.srv = &http.Server{Handler: f, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = f.srv.Serve(ln) }()
	return f, nil
}

// URL is the front's base URL.
func (f *apiFront) URL() string { return "http://" + f.ln.Addr().String() }

// close stops serving; hijacked port-forward connections end with their
// clients.
func (f *apiFront) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := f.srv.Shutdown(ctx); err != nil {
		return f.srv.Close()
	}
	return nil
}

// override makes port-forwards to pod port reach addr instead of the Pod IP.
func (f *apiFront) override(namespace, pod string, port int32, addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := namespace + "/" + pod
	if f.overrides[key] == nil {
		f.overrides[key] = map[int32]string{}
	}
	f.overrides[key][port] = addr
}

func (f *apiFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m := portForwardPath.FindStringSubmatch(r.URL.Path)
	if m == nil {
		f.upstream.ServeHTTP(w, r)
		return
	}
	f.servePortForward(w, r, m[1], m[2])
}

// servePortForward answers a pods/portforward request the way a kubelet
// does, over SPDY, or over SPDY tunnelled through a WebSocket (what current
// kubectl and client-go try first), like the apiserver's own translation.
func (f *apiFront) servePortForward(w http.ResponseWriter, r *http.Request, namespace, name string) {
	pod, err := f.cs.CoreV1().Pods(namespace).Get(r.Context(), name, metav1.GetOptions{})
	if err != nil {
		http.Error(w, fmt.Sprintf("pod %s/%s: %v", namespace, name, err), http.StatusNotFound)
		return
	}
	if pod.Status.Phase != corev1.PodRunning {
		http.Error(w, fmt.Sprintf("pod %s/%s is not running", namespace, name), http.StatusBadRequest)
		return
	}
	fw := &podForwarder{front: f, pod: pod}
	spdy := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		portforward.ServePortForward(w, r, fw, pod.Name, string(pod.UID), nil,
			4*time.Hour, 30*time.Second, portforward.SupportedProtocols)
	})
	if wsstream.IsWebSocketRequestWithTunnelingProtocol(r) {
		apiproxy.NewTunnelingHandler(spdy).ServeHTTP(w, r)
		return
	}
	spdy.ServeHTTP(w, r)
}

// podForwarder connects port-forward streams to one Pod.
type podForwarder struct {
	front *apiFront
	pod   *corev1.Pod
}

// PortForward copies between stream and the Pod's port until either side
// closes.
func (p *podForwarder) PortForward(ctx context.Context, _ string, _ string, port int32, stream io.ReadWriteCloser) error {
	defer func() { _ = stream.Close() }()
	addr := p.address(port)
	if addr == "" {
		return fmt.Errorf("pod %s/%s has no IP", p.pod.Namespace, p.pod.Name)
	}
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	conn, err := d.DialContext(dctx, "tcp", addr)
	cancel()
	if err != nil {
		return fmt.Errorf("dialing %s for pod %s/%s port %d: %w", addr, p.pod.Namespace, p.pod.Name, port, err)
	}
	defer func() { _ = conn.Close() }()
	up := make(chan error, 1)   // client -> pod
	down := make(chan error, 1) // pod -> client
	go func() {
		_, err := io.Copy(conn, stream)
		// Half-close: the pod sees the end of the request while its
		// response still streams back.
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		up <- err
	}()
	go func() {
		_, err := io.Copy(stream, conn)
		down <- err
	}()
	select {
	case err = <-down:
		// The pod closed the connection: nothing more can be said.
	case err = <-up:
		if err == nil {
			select {
			case err = <-down:
			case <-ctx.Done():
			}
		}
	case <-ctx.Done():
		return nil
	}
	if err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.EOF) {
		return fmt.Errorf("forwarding to %s: %w", addr, err)
	}
	return nil
}

func (p *podForwarder) address(port int32) string {
	p.front.mu.Lock()
	addr := p.front.overrides[p.pod.Namespace+"/"+p.pod.Name][port]
	p.front.mu.Unlock()
	if addr != "" {
		return addr
	}
	if p.pod.Status.PodIP == "" {
		return ""
	}
	return net.JoinHostPort(p.pod.Status.PodIP, strconv.Itoa(int(port)))
}
