package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
)

// RouterServiceName is the Service of the sandbox-router that the default
// port-forward tunnel looks for, in the sandbox's namespace.
const RouterServiceName = "sandbox-router-svc"

// routerPodPort is the router's plain HTTP port in its Pod.
const routerPodPort = 8080

// gatewayGVR is the Gateway API resource watched in Gateway mode.
var gatewayGVR = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "gateways"}

// endpoint is where one connection's requests go, beyond the base URL a
// ConnectionStrategy returns.
type endpoint struct {
	baseURL string
	// routerHeaders: requests carry the X-Sandbox-* routing headers.
	routerHeaders bool
	// port is X-Sandbox-Port of REST/legacy requests.
	port int
	// grpcTarget is host:port of the gRPC process API ("" = none).
	grpcTarget string
	// grpcRouted: gRPC calls go through the router and carry routing
	// metadata with grpcPort.
	grpcRouted bool
	grpcPort   int
	grpcTLS    bool
}

// monitored is implemented by strategies whose connection can die on its
// own (tunnels).
type monitored interface {
	Done() <-chan struct{}
	Err() error
}

// grpcTargeter is implemented by strategies with their own gRPC target.
type grpcTargeter interface {
	GRPCTarget() string
}

// routerTunnelStrategy port-forwards to a ready router Pod found through
// the EndpointSlices of sandbox-router-svc, in the first of namespaces
// that has one.
type routerTunnelStrategy struct {
	h          *K8sHelper
	namespaces []string
	timeout    time.Duration
	log        logr.Logger
	// st is the helper's shared tunnel this strategy holds (nil before
	// Connect and after Close); t, namespace and pod are its tunnel and
	// the router it reaches.
	st             *sharedTunnel
	t              *tunnel
	namespace, pod string
}

// routerNamespaces lists where the tunnel looks for the router: the
// option, else the sandbox's namespace then DefaultRouterNamespace.
func routerNamespaces(o *Options) []string {
	if o.RouterNamespace != "" {
		return []string{o.RouterNamespace}
	}
	if o.Namespace == DefaultRouterNamespace {
		return []string{o.Namespace}
	}
	return []string{o.Namespace, DefaultRouterNamespace}
}

// Connect takes the helper's live tunnel to the router, or opens one: the
// tunnel does not depend on the sandbox, so the handles of one helper
// share it (see sharedState).
func (s *routerTunnelStrategy) Connect(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	st, err := s.h.acquireRouterTunnel(ctx, s.namespaces, s.open)
	if err != nil {
		return "", err
	}
	s.st, s.t, s.namespace, s.pod = st, st.t, st.namespace, st.pod
	return "http://127.0.0.1:" + strconv.Itoa(int(st.t.local[0])), nil
}

// open opens a tunnel to a ready router Pod in the first namespace that
// has one.
func (s *routerTunnelStrategy) open(ctx context.Context) (*tunnel, string, string, error) {
	var errs []error
	for _, ns := range s.namespaces {
		pod, err := findRouterPod(ctx, s.h, ns)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		t, err := openTunnel(ctx, s.h, ns, pod, []int{routerPodPort})
		if err != nil {
			return nil, "", "", err
		}
		s.log.V(1).Info("port-forward to sandbox-router established", "namespace", ns, "pod", pod, "local_port", t.local[0])
		return t, ns, pod, nil
	}
	return nil, "", "", errors.Join(errs...)
}

// Close releases the shared tunnel; the last user's release leaves it
// open for a while for the next handle.
func (s *routerTunnelStrategy) Close() error {
	if s.st != nil {
		s.h.releaseRouterTunnel(s.namespaces, s.st)
		s.st = nil
	}
	return nil
}

func (s *routerTunnelStrategy) Done() <-chan struct{} { return s.t.Done() }
func (s *routerTunnelStrategy) Err() error            { return s.t.Err() }

// findRouterPod returns a Pod behind a ready router endpoint.
func findRouterPod(ctx context.Context, h *K8sHelper, namespace string) (string, error) {
	slices, err := h.CoreClient.DiscoveryV1().EndpointSlices(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + RouterServiceName,
	})
	if err != nil {
		return "", fmt.Errorf("sandbox: finding the sandbox-router in namespace %s: %w", namespace, err)
	}
	for _, sl := range slices.Items {
		for _, ep := range sl.Endpoints {
			ready := ep.Conditions.Ready == nil || *ep.Conditions.Ready
			if ready && ep.TargetRef != nil && ep.TargetRef.Kind == "Pod" && ep.TargetRef.Name != "" {
				return ep.TargetRef.Name, nil
			}
		}
	}
	return "", fmt.Errorf("sandbox: no ready %s endpoint in namespace %s: %w", RouterServiceName, namespace, ErrNotReady)
}

// podTunnelStrategy port-forwards to sandboxd's REST and gRPC ports on the
// sandbox Pod itself.
type podTunnelStrategy struct {
	h         *K8sHelper
	namespace string
	pod       string
	restPort  int
	grpcPort  int
	timeout   time.Duration
	t         *tunnel
}

func (s *podTunnelStrategy) Connect(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	t, err := openTunnel(ctx, s.h, s.namespace, s.pod, []int{s.restPort, s.grpcPort})
	if err != nil {
		return "", err
	}
	s.t = t
	return "http://127.0.0.1:" + strconv.Itoa(int(t.local[0])), nil
}

func (s *podTunnelStrategy) GRPCTarget() string {
	return "127.0.0.1:" + strconv.Itoa(int(s.t.local[1]))
}

func (s *podTunnelStrategy) Close() error {
	if s.t != nil {
		s.t.Close()
	}
	return nil
}

func (s *podTunnelStrategy) Done() <-chan struct{} { return s.t.Done() }
func (s *podTunnelStrategy) Err() error            { return s.t.Err() }

// inClusterStrategy dials the sandbox Pod's IP.
type inClusterStrategy struct {
	podIP    string
	port     int
	grpcPort int // 0: no gRPC
}

func (s *inClusterStrategy) Connect(context.Context) (string, error) {
	if _, err := netip.ParseAddr(s.podIP); err != nil {
		return "", fmt.Errorf("sandbox: in-cluster connectivity needs the sandbox's pod IP, which is not known: %w", ErrNotReady)
	}
	return "http://" + net.JoinHostPort(s.podIP, strconv.Itoa(s.port)), nil
}

func (s *inClusterStrategy) GRPCTarget() string {
	if s.grpcPort == 0 {
		return ""
	}
	return net.JoinHostPort(s.podIP, strconv.Itoa(s.grpcPort))
}

func (s *inClusterStrategy) Close() error { return nil }

// gatewayStrategy discovers the address of a Gateway.
type gatewayStrategy struct {
	h         *K8sHelper
	name      string
	namespace string
	scheme    string
	timeout   time.Duration
	log       logr.Logger
}

// Connect lists the Gateway by name and then watches it until
// status.addresses[0] holds an acceptable address. Addresses that fail
// validation are logged and ignored: the Gateway controller may still
// fix them, and using one could send requests somewhere unintended.
func (s *gatewayStrategy) Connect(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	res := s.h.DynamicClient.Resource(gatewayGVR).Namespace(s.namespace)
	sel := fields.OneTermEqualSelector("metadata.name", s.name).String()
	what := fmt.Sprintf("waiting for gateway %s/%s to have an address", s.namespace, s.name)
	check := func(obj *unstructured.Unstructured) (string, bool) {
		addr, ok := gatewayAddress(obj)
		if !ok {
			return "", false
		}
		if err := validateGatewayAddress(addr); err != nil {
			s.log.Info("ignoring gateway address", "gateway", s.namespace+"/"+s.name, "address", addr, "reason", err.Error())
			return "", false
		}
		return gatewayURL(s.scheme, addr), true
	}
	for attempt := 0; ; attempt++ {
		list, err := res.List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			if ctx.Err() != nil {
				return "", timeoutErr(ctx, what, "")
			}
			if err := sleepCtx(ctx, relistBackoff(attempt)); err != nil {
				return "", timeoutErr(ctx, what, "")
			}
			continue
		}
		for i := range list.Items {
			if u, ok := check(&list.Items[i]); ok {
				return u, nil
			}
		}
		w, err := res.Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: list.GetResourceVersion()})
		if err != nil {
			if apierrors.IsNotFound(err) || ctx.Err() != nil {
				return "", timeoutErr(ctx, what, "")
			}
			if err := sleepCtx(ctx, relistBackoff(attempt)); err != nil {
				return "", timeoutErr(ctx, what, "")
			}
			continue
		}
		u, done, err := s.drain(ctx, w, check)
		w.Stop()
		if done {
			return u, err
		}
		if ctx.Err() != nil {
			return "", timeoutErr(ctx, what, "")
		}
	}
}

func (s *gatewayStrategy) drain(ctx context.Context, w watch.Interface, check func(*unstructured.Unstructured) (string, bool)) (string, bool, error) {
	for {
		select {
		case <-ctx.Done():
			return "", false, nil
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type == watch.Error {
				return "", false, nil
			}
			obj, isU := ev.Object.(*unstructured.Unstructured)
			if !isU || obj.GetName() != s.name {
				continue
			}
			switch ev.Type {
			case watch.Deleted:
				return "", true, fmt.Errorf("sandbox: gateway %s/%s: %w", s.namespace, s.name, ErrGatewayDeleted)
			case watch.Added, watch.Modified:
				if u, ok := check(obj); ok {
					return u, true, nil
				}
			}
		}
	}
}

func (s *gatewayStrategy) Close() error { return nil }

// gatewayAddress returns status.addresses[0].value.
func gatewayAddress(obj *unstructured.Unstructured) (string, bool) {
	addrs, found, err := unstructured.NestedSlice(obj.Object, "status", "addresses")
	if err != nil || !found || len(addrs) == 0 {
		return "", false
	}
	first, ok := addrs[0].(map[string]any)
	if !ok {
		return "", false
	}
	v, ok := first["value"].(string)
	return v, ok && v != ""
}

// validateGatewayAddress accepts an IP address or a plain hostname and
// nothing that could change the meaning of the URL built from it
// (userinfo, path, query, fragment, port) or disguise an IP address as a
// name (all-numeric or hex last labels, which URL parsers may read as an
// IPv4 address).
func validateGatewayAddress(addr string) error {
	if strings.ContainsAny(addr, "/?#@") {
		return fmt.Errorf("address %q contains URL delimiters", addr)
	}
	if a, err := netip.ParseAddr(addr); err == nil {
		if a.Zone() != "" {
			return fmt.Errorf("address %q has a zone", addr)
		}
		return nil
	}
	if len(addr) == 0 || len(addr) > 253 {
		return fmt.Errorf("hostname %q has an invalid length", addr)
	}
	if addr[0] == '-' || addr[0] == '.' || addr[len(addr)-1] == '-' || addr[len(addr)-1] == '.' {
		return fmt.Errorf("hostname %q starts or ends with a hyphen or a dot", addr)
	}
	for i := 0; i < len(addr); i++ {
		c := addr[i]
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '-' && c != '.' {
			return fmt.Errorf("hostname %q contains %q", addr, c)
		}
	}
	labels := strings.Split(addr, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 {
			return fmt.Errorf("hostname %q has an empty or over-long label", addr)
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return fmt.Errorf("hostname %q has a label starting or ending with -", addr)
		}
	}
	last := strings.ToLower(labels[len(labels)-1])
	if isNumeric(last) || (strings.HasPrefix(last, "0x") && isHex(last[2:])) {
		return fmt.Errorf("hostname %q looks like a disguised IP address", addr)
	}
	return nil
}

func isNumeric(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// gatewayURL builds scheme://addr, bracketing IPv6 addresses.
func gatewayURL(scheme, addr string) string {
	host := addr
	if a, err := netip.ParseAddr(addr); err == nil && a.Is6() {
		host = "[" + a.String() + "]"
	}
	return (&url.URL{Scheme: scheme, Host: host}).String()
}

// hostPort returns host:port of a URL, with the scheme's default port
// when it has none.
func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	if u.Scheme == "https" {
		return net.JoinHostPort(u.Hostname(), "443")
	}
	return net.JoinHostPort(u.Hostname(), "80")
}
