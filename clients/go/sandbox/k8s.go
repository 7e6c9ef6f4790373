package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	sbscheme "sigs.k8s.io/agent-sandbox/internal/scheme"
)

// Claim metadata written by the SDK.
const (
	createdByLabel            = "agents.x-k8s.io/created-by"
	createdByValue            = "go-client"
	clientRequestedAnnotation = "agents.x-k8s.io/client-first-requested-at"
	traceContextAnnotation    = "opentelemetry.io/trace-context"
	claimGenerateName         = "sandbox-claim-"
	// claimUIDLabel holds the UID of the claim that owns a Sandbox.
	claimUIDLabel = "agents.x-k8s.io/claim-uid"
)

// K8sHelper holds the Kubernetes clients the SDK uses. Share one between
// handles to share connections and caches.
//
// AgentsClient and ExtensionsClient are controller-runtime clients (with
// watch support) whose scheme knows the agents.x-k8s.io and
// extensions.agents.x-k8s.io types of this module; the published SDK uses
// generated clientsets there, which this module does not have.
type K8sHelper struct {
	AgentsClient     client.WithWatch
	ExtensionsClient client.WithWatch
	DynamicClient    dynamic.Interface
	CoreClient       kubernetes.Interface
	DiscoveryClient  discovery.DiscoveryInterface
	RestConfig       *rest.Config
	Log              logr.Logger

	sh sharedState
}

// Client-side rate limit of the SDK's Kubernetes clients when the rest
// config leaves it unset (QPS 0). client-go's own default, 5 requests/s
// with a burst of 10, throttles an agent that opens sandboxes back to back:
// each Open costs about four requests (create, watch of the claim, list and
// watch of its Sandbox) and each Close one more.
const (
	DefaultClientQPS   = 50
	DefaultClientBurst = 100
)

// NewK8sHelper builds the clients from restConfig. A config without a rate
// limit (QPS 0, no RateLimiter) gets DefaultClientQPS and
// DefaultClientBurst; restConfig itself is not modified.
func NewK8sHelper(restConfig *rest.Config, log logr.Logger) (*K8sHelper, error) {
	if restConfig == nil {
		return nil, errors.New("sandbox: NewK8sHelper needs a rest config")
	}
	if restConfig.QPS == 0 && restConfig.RateLimiter == nil {
		restConfig = rest.CopyConfig(restConfig)
		restConfig.QPS = DefaultClientQPS
		if restConfig.Burst < DefaultClientBurst {
			restConfig.Burst = DefaultClientBurst
		}
	}
	scheme, err := sbscheme.New()
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	c, err := client.NewWithWatch(restConfig, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("sandbox: creating Kubernetes client: %w", err)
	}
	core, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return nil, fmt.Errorf("sandbox: creating Kubernetes clientset: %w", err)
	}
	dyn, err := dynamic.NewForConfig(restConfig)
	if err != nil {
		return nil, fmt.Errorf("sandbox: creating dynamic client: %w", err)
	}
	return &K8sHelper{
		AgentsClient: c, ExtensionsClient: c, DynamicClient: dyn,
		CoreClient: core, DiscoveryClient: core.Discovery(),
		RestConfig: restConfig, Log: log,
	}, nil
}

// loadRestConfig: in-cluster first, then the default kubeconfig rules
// (KUBECONFIG, ~/.kube/config).
func loadRestConfig() (*rest.Config, error) {
	if cfg, err := rest.InClusterConfig(); err == nil {
		return cfg, nil
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("sandbox: loading Kubernetes config (in-cluster, then kubeconfig): %w", err)
	}
	return cfg, nil
}

// prepare applies the defaults to opts, validates them and sets their
// K8sHelper (built from the rest config when none is given).
func prepare(opts Options) (Options, error) {
	o := opts.withDefaults()
	if err := o.validate(); err != nil {
		return Options{}, err
	}
	h, err := helperFor(&o)
	if err != nil {
		return Options{}, err
	}
	o.K8sHelper = h
	return o, nil
}

// helperFor returns the options' helper or builds one.
func helperFor(o *Options) (*K8sHelper, error) {
	if o.K8sHelper != nil {
		return o.K8sHelper, nil
	}
	cfg := o.RestConfig
	if cfg == nil {
		var err error
		if cfg, err = loadRestConfig(); err != nil {
			return nil, err
		}
	}
	return NewK8sHelper(cfg, o.Logger)
}

// buildClaim returns the SandboxClaim Open creates. annotations are
// preset annotations (kept as given, e.g. a caller-supplied request time).
func buildClaim(ctx context.Context, namespace, warmPool string, annotations map[string]string, now time.Time) *extv1beta1.SandboxClaim {
	ann := map[string]string{}
	for k, v := range annotations {
		ann[k] = v
	}
	if _, ok := ann[clientRequestedAnnotation]; !ok {
		ann[clientRequestedAnnotation] = now.UTC().Format(time.RFC3339Nano)
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		carrier := propagation.MapCarrier{}
		propagation.TraceContext{}.Inject(ctx, carrier)
		if b, err := json.Marshal(map[string]string(carrier)); err == nil && len(carrier) > 0 {
			ann[traceContextAnnotation] = string(b)
		}
	}
	return &extv1beta1.SandboxClaim{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: claimGenerateName,
			Namespace:    namespace,
			Labels:       map[string]string{createdByLabel: createdByValue},
			Annotations:  ann,
		},
		Spec: extv1beta1.SandboxClaimSpec{WarmPoolRef: extv1beta1.WarmPoolRef{Name: warmPool}},
	}
}

// relistBackoff is the delay before the n-th (0-based) re-list after a
// watch failed: 100 ms doubling to 5 s.
func relistBackoff(n int) time.Duration {
	d := 100 * time.Millisecond
	for range n {
		d *= 2
		if d >= 5*time.Second {
			return 5 * time.Second
		}
	}
	return d
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// timeoutErr turns a context error into ErrTimeout (deadline) or the
// cancellation itself, with what was being waited for.
func timeoutErr(ctx context.Context, what string, extra string) error {
	err := ctx.Err()
	if err == nil {
		err = context.DeadlineExceeded
	}
	if errors.Is(err, context.DeadlineExceeded) {
		if extra != "" {
			return fmt.Errorf("sandbox: %s: %w (%s)", what, ErrTimeout, extra)
		}
		return fmt.Errorf("sandbox: %s: %w", what, ErrTimeout)
	}
	return fmt.Errorf("sandbox: %s: %w", what, err)
}

// watchUntil is the shared list-then-watch loop: get returns the current
// object (or a NotFound error) and its resourceVersion; watchFrom watches
// from a resourceVersion; done inspects an object and says whether the wait
// is over. Watch errors and closed watches re-list with backoff; a deleted
// object ends the wait with ErrSandboxDeleted. what names the wait in
// errors; status describes the last object seen for timeout errors.
func watchUntil[T client.Object](
	ctx context.Context,
	what string,
	get func(ctx context.Context) (T, error),
	watchFrom func(ctx context.Context, rv string) (watch.Interface, error),
	done func(T) (bool, error),
	status func(T) string,
) (T, error) {
	var zero, last T
	seen := false
	describe := func() string {
		if !seen || status == nil {
			return ""
		}
		return status(last)
	}
	for attempt := 0; ; attempt++ {
		obj, err := get(ctx)
		switch {
		case err == nil:
			last, seen = obj, true
			ok, derr := done(obj)
			if derr != nil {
				return zero, derr
			}
			if ok {
				return obj, nil
			}
		case apierrors.IsNotFound(err):
			return zero, fmt.Errorf("sandbox: %s: %w", what, ErrSandboxDeleted)
		case ctx.Err() != nil:
			return zero, timeoutErr(ctx, what, describe())
		default:
			if err := sleepCtx(ctx, relistBackoff(attempt)); err != nil {
				return zero, timeoutErr(ctx, what, describe())
			}
			continue
		}
		w, err := watchFrom(ctx, obj.GetResourceVersion())
		if err != nil {
			if ctx.Err() != nil {
				return zero, timeoutErr(ctx, what, describe())
			}
			if err := sleepCtx(ctx, relistBackoff(attempt)); err != nil {
				return zero, timeoutErr(ctx, what, describe())
			}
			continue
		}
		res, finished, err := drainWatch(ctx, w, &last, &seen, done)
		w.Stop()
		if finished {
			if err != nil {
				if errors.Is(err, ErrSandboxDeleted) {
					return zero, fmt.Errorf("sandbox: %s: %w", what, err)
				}
				return zero, err
			}
			return res, nil
		}
		if ctx.Err() != nil {
			return zero, timeoutErr(ctx, what, describe())
		}
		// The watch ended or failed (expired resourceVersion, apiserver
		// restart): re-list, after a pause if it keeps happening.
		if attempt > 0 {
			if err := sleepCtx(ctx, relistBackoff(attempt-1)); err != nil {
				return zero, timeoutErr(ctx, what, describe())
			}
		}
	}
}

// drainWatch consumes events until done, deletion, an error event, the
// end of the watch, or ctx. finished reports whether the wait is over.
func drainWatch[T client.Object](ctx context.Context, w watch.Interface, last *T, seen *bool, done func(T) (bool, error)) (res T, finished bool, err error) {
	for {
		select {
		case <-ctx.Done():
			return res, false, nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return res, false, nil
			}
			switch ev.Type {
			case watch.Error:
				return res, false, nil
			case watch.Deleted:
				if _, isT := ev.Object.(T); isT {
					return res, true, ErrSandboxDeleted
				}
			case watch.Added, watch.Modified:
				obj, isT := ev.Object.(T)
				if !isT {
					continue // not what we watch (e.g. a bookmark or status)
				}
				*last, *seen = obj, true
				ok, derr := done(obj)
				if derr != nil {
					return res, true, derr
				}
				if ok {
					return obj, true, nil
				}
			}
		}
	}
}

// resolveSandboxName waits until the claim names its Sandbox. created,
// when not nil, is the claim as its create call returned it: the watch
// starts from its resourceVersion instead of reading the claim again.
func (h *K8sHelper) resolveSandboxName(ctx context.Context, namespace, claim string, created *extv1beta1.SandboxClaim) (string, error) {
	key := types.NamespacedName{Namespace: namespace, Name: claim}
	c := h.ExtensionsClient
	got, err := watchUntil(ctx, "waiting for claim "+key.String()+" to be bound",
		func(ctx context.Context) (*extv1beta1.SandboxClaim, error) {
			if created != nil && created.ResourceVersion != "" {
				first := created
				created = nil // a re-list after a failed watch reads the claim
				return first, nil
			}
			var obj extv1beta1.SandboxClaim
			if err := c.Get(ctx, key, &obj); err != nil {
				return nil, err
			}
			return &obj, nil
		},
		func(ctx context.Context, rv string) (watch.Interface, error) {
			return c.Watch(ctx, &extv1beta1.SandboxClaimList{}, client.InNamespace(namespace),
				&client.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", claim),
					Raw: &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: false}})
		},
		func(obj *extv1beta1.SandboxClaim) (bool, error) {
			return obj.Name == claim && obj.Status.SandboxStatus.Name != "", nil
		},
		func(obj *extv1beta1.SandboxClaim) string {
			return "conditions: " + conditionsString(obj.Status.Conditions)
		},
	)
	if err != nil {
		return "", err
	}
	return got.Status.SandboxStatus.Name, nil
}

// waitSandboxReady waits until the named Sandbox is Ready and returns it.
// It lists by name first (a warm sandbox is usually Ready already), then
// watches from the list's resourceVersion.
func (h *K8sHelper) waitSandboxReady(ctx context.Context, namespace, name string) (*sandboxv1beta1.Sandbox, error) {
	c := h.AgentsClient
	sel := fields.OneTermEqualSelector("metadata.name", name)
	return watchUntil(ctx, "waiting for sandbox "+namespace+"/"+name+" to be Ready",
		func(ctx context.Context) (*sandboxv1beta1.Sandbox, error) {
			var list sandboxv1beta1.SandboxList
			if err := c.List(ctx, &list, client.InNamespace(namespace), client.MatchingFieldsSelector{Selector: sel}); err != nil {
				return nil, err
			}
			if len(list.Items) == 0 {
				return nil, apierrors.NewNotFound(sandboxv1beta1.GroupVersion.WithResource("sandboxes").GroupResource(), name)
			}
			obj := list.Items[0]
			// Watch from the list's version, not the object's, so nothing
			// between them is missed.
			obj.ResourceVersion = list.ResourceVersion
			return &obj, nil
		},
		func(ctx context.Context, rv string) (watch.Interface, error) {
			return c.Watch(ctx, &sandboxv1beta1.SandboxList{}, client.InNamespace(namespace),
				&client.ListOptions{FieldSelector: sel, Raw: &metav1.ListOptions{ResourceVersion: rv}})
		},
		func(obj *sandboxv1beta1.Sandbox) (bool, error) {
			return obj.Name == name && meta.IsStatusConditionTrue(obj.Status.Conditions, sandboxv1beta1.SandboxConditionReady), nil
		},
		func(obj *sandboxv1beta1.Sandbox) string {
			return "last conditions: " + conditionsString(obj.Status.Conditions)
		},
	)
}

// waitClaimedSandboxReady waits until the Sandbox the claim named is
// Ready. It takes the Sandbox from pw when the pre-watch already holds it
// Ready (the usual case for a warm claim: no request at all), and otherwise
// waits by name (waitSandboxReady) while still listening to pw, whichever
// answers first.
func (h *K8sHelper) waitClaimedSandboxReady(ctx context.Context, namespace, name string, pw *sandboxPrewatch) (*sandboxv1beta1.Sandbox, error) {
	sb, changed := pw.ready(name)
	if sb != nil {
		return sb, nil
	}
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		sb  *sandboxv1beta1.Sandbox
		err error
	}
	res := make(chan result, 1)
	go func() {
		sb, err := h.waitSandboxReady(fctx, namespace, name)
		res <- result{sb, err}
	}()
	for {
		select {
		case r := <-res:
			return r.sb, r.err
		case <-changed:
			if sb, changed = pw.ready(name); sb != nil {
				return sb, nil
			}
		}
	}
}

// sandboxPrewatch follows, from right after a claim is created, the
// Sandboxes labelled with the claim's UID (agents.x-k8s.io/claim-uid, set
// by the adoption patch of a warm Sandbox and on a cold one). The adoption
// lands before the claim's status names the Sandbox, so by the time the
// claim is bound the SDK usually holds its Sandbox, Ready, and skips the
// list by name: one apiserver round trip less on the way to the first
// command. It only ever answers for the Sandbox the claim's status named
// and controlled by the claim; the claim status stays the authority, and
// if the pre-watch cannot run (or a controller does not set the label) the
// wait by name does the job alone.
type sandboxPrewatch struct {
	uid     types.UID
	mu      sync.Mutex
	seen    map[string]*sandboxv1beta1.Sandbox
	changed chan struct{} // closed and replaced at every change
	stopped bool
}

// startSandboxPrewatch lists and watches until ctx ends. A nil result (no
// UID) is a valid, empty pre-watch.
func (h *K8sHelper) startSandboxPrewatch(ctx context.Context, namespace string, claimUID types.UID) *sandboxPrewatch {
	if claimUID == "" {
		return nil
	}
	pw := &sandboxPrewatch{uid: claimUID, seen: map[string]*sandboxv1beta1.Sandbox{}, changed: make(chan struct{})}
	go pw.run(ctx, h.AgentsClient, namespace)
	return pw
}

func (pw *sandboxPrewatch) run(ctx context.Context, c client.WithWatch, namespace string) {
	defer pw.update(func() { pw.stopped = true })
	sel := client.MatchingLabels{claimUIDLabel: string(pw.uid)}
	var list sandboxv1beta1.SandboxList
	// resourceVersion 0: whatever the apiserver's cache holds, at once. A
	// consistent list would wait for the Sandbox cache to catch up with
	// the claim's own write, which can take long when no Sandbox changed
	// lately; the watch from the list's version delivers whatever is
	// newer anyway.
	if err := c.List(ctx, &list, client.InNamespace(namespace), sel,
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: "0"}}); err != nil {
		return
	}
	pw.update(func() {
		for i := range list.Items {
			pw.seen[list.Items[i].Name] = &list.Items[i]
		}
	})
	w, err := c.Watch(ctx, &sandboxv1beta1.SandboxList{}, client.InNamespace(namespace), sel,
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	if err != nil {
		return
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type == watch.Error {
				return
			}
			sb, isSB := ev.Object.(*sandboxv1beta1.Sandbox)
			if !isSB {
				continue
			}
			pw.update(func() {
				if ev.Type == watch.Deleted {
					delete(pw.seen, sb.Name)
				} else {
					pw.seen[sb.Name] = sb
				}
			})
		}
	}
}

// update applies f and wakes the waiters.
func (pw *sandboxPrewatch) update(f func()) {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	f()
	close(pw.changed)
	pw.changed = make(chan struct{})
}

// ready returns the named Sandbox if the pre-watch holds it Ready,
// undeleted and controlled by the claim; otherwise a channel closed at the
// next change (nil, never closed, once the pre-watch has stopped).
func (pw *sandboxPrewatch) ready(name string) (*sandboxv1beta1.Sandbox, <-chan struct{}) {
	if pw == nil {
		return nil, nil
	}
	pw.mu.Lock()
	defer pw.mu.Unlock()
	sb := pw.seen[name]
	if sb != nil && sb.DeletionTimestamp == nil && meta.IsStatusConditionTrue(sb.Status.Conditions, sandboxv1beta1.SandboxConditionReady) {
		if ref := metav1.GetControllerOfNoCopy(sb); ref != nil && ref.UID == pw.uid && ref.Kind == "SandboxClaim" {
			return sb.DeepCopy(), nil
		}
	}
	if pw.stopped {
		return nil, nil
	}
	return nil, pw.changed
}

// conditionsString renders conditions as "Type=Status (Reason: Message), ...".
func conditionsString(conds []metav1.Condition) string {
	if len(conds) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(conds))
	for _, c := range conds {
		s := fmt.Sprintf("%s=%s", c.Type, c.Status)
		if c.Reason != "" || c.Message != "" {
			s += fmt.Sprintf(" (%s: %s)", c.Reason, c.Message)
		}
		parts = append(parts, s)
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// sandboxState is what the SDK keeps of a Ready Sandbox.
type sandboxState struct {
	podName     string
	podIP       string
	annotations map[string]string
}

func stateOf(sb *sandboxv1beta1.Sandbox) sandboxState {
	st := sandboxState{podName: sb.Name, podIP: pickPodIP(sb.Status.PodIPs), annotations: map[string]string{}}
	if p := sb.Annotations[PodNameAnnotation]; p != "" {
		st.podName = p
	}
	for k, v := range sb.Annotations {
		st.annotations[k] = v
	}
	return st
}

// pickPodIP returns the first IPv4 address, else the first valid IPv6
// address (canonical form), else "". IPv4-mapped IPv6 counts as IPv4.
func pickPodIP(ips []string) string {
	var v6 string
	for _, s := range ips {
		a, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil || a.Zone() != "" {
			continue
		}
		a = a.Unmap()
		if a.Is4() {
			return a.String()
		}
		if v6 == "" {
			v6 = a.String()
		}
	}
	return v6
}

// deleteClaim deletes a claim; a missing claim counts as deleted.
func (h *K8sHelper) deleteClaim(ctx context.Context, namespace, name string) error {
	claim := &extv1beta1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := h.ExtensionsClient.Delete(ctx, claim); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("sandbox: deleting claim %s/%s: %w", namespace, name, err)
	}
	return nil
}
