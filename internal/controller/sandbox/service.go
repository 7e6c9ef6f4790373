package sandbox

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/labels"
	"sigs.k8s.io/agent-sandbox/internal/mergepatch"
	"sigs.k8s.io/agent-sandbox/internal/ownerref"
)

// reconcileService keeps the headless Service named after the Sandbox as
// spec.service asks, and returns the Service the Sandbox tracks (nil when
// none). An unset spec.service keeps an existing owned Service for
// backward compatibility but never creates one.
func (r *Reconciler) reconcileService(ctx context.Context, sb *sandboxv1beta1.Sandbox) (*corev1.Service, error) {
	want := sb.Spec.Service
	svc := &corev1.Service{}
	err := r.Get(ctx, types.NamespacedName{Namespace: sb.Namespace, Name: sb.Name}, svc)
	if apierrors.IsNotFound(err) {
		if want == nil || !*want {
			return nil, nil
		}
		svc = buildService(sb)
		err = r.createChild(ctx, sb, kindService, svc)
		if err == nil {
			return svc, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			r.Recorder.Eventf(sb, nil, corev1.EventTypeWarning, "FailedCreateService", "Create", "Error creating Service %q: %v", sb.Name, err)
			return nil, fmt.Errorf("creating service %q: %w", sb.Name, err)
		}
		// The cache has not seen it yet: the ownership rules below decide
		// on what is there (ours is kept, a foreign one reported).
		svc = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: sb.Namespace, Name: sb.Name}}
		if err = r.readExisting(ctx, sb, kindService, svc); err != nil {
			return nil, fmt.Errorf("getting existing service %q: %w", sb.Name, err)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("getting service %q: %w", sb.Name, err)
	}

	hash := labels.NameHash(sb.Name)
	switch c := metav1.GetControllerOf(svc); {
	case c != nil && c.UID == sb.UID:
		if want != nil && !*want {
			if err := r.deleteChild(ctx, sb, kindService, svc); err != nil && !apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("deleting service %q: %w", sb.Name, err)
			}
			return nil, nil
		}
		return svc, r.repairService(ctx, sb, svc, hash, want != nil)
	case c != nil:
		if want != nil && !*want {
			return nil, nil
		}
		return nil, foreignOwnerError("service", sb.Name, svc, sb)
	default:
		// Unowned: adopt only when authorised, headless and asked for.
		if want == nil || !*want {
			return nil, nil
		}
		if !adoptable(svc, sb) || (svc.Spec.ClusterIP != corev1.ClusterIPNone && svc.Spec.ClusterIP != "") {
			return nil, fmt.Errorf("cannot adopt unowned service %q: it needs the %q or %q label and clusterIP None",
				sb.Name, labels.Adoptable, labels.SandboxNameHash)
		}
		up := svc.DeepCopy()
		if up.Labels == nil {
			up.Labels = map[string]string{}
		}
		up.Labels[labels.SandboxNameHash] = hash
		up.Spec.Selector = map[string]string{labels.SandboxNameHash: hash}
		up.Spec.Ports = desiredServicePorts(sb)
		up.OwnerReferences = append(up.OwnerReferences, ownerref.Sandbox(sb))
		if err := r.Update(ctx, up, client.FieldOwner(ControllerName)); err != nil {
			return nil, fmt.Errorf("adopting service %q: %w", sb.Name, err)
		}
		return up, nil
	}
}

// repairService fixes drift of the tracking label, the selector and (when
// the Service is asked for) the ports with one merge patch of just the
// fields that differ.
func (r *Reconciler) repairService(ctx context.Context, sb *sandboxv1beta1.Sandbox, svc *corev1.Service, hash string, managePorts bool) error {
	p := serviceRepairPatch(sb, svc, hash, managePorts)
	if p.Empty() {
		return nil
	}
	patch, err := p.Client()
	if err != nil {
		return fmt.Errorf("encoding service patch: %w", err)
	}
	if err := r.Patch(ctx, svc, patch); err != nil {
		return fmt.Errorf("repairing service %q: %w", svc.Name, err)
	}
	return nil
}

// serviceRepairPatch is repairService's merge patch (empty when nothing
// drifted). It carries no resourceVersion: the repair is idempotent, so a
// Service changed since it was read is patched all the same.
func serviceRepairPatch(sb *sandboxv1beta1.Sandbox, svc *corev1.Service, hash string, managePorts bool) mergepatch.Patch {
	var p mergepatch.Patch
	if svc.Labels[labels.SandboxNameHash] != hash {
		p.Meta.Labels = map[string]*string{labels.SandboxNameHash: mergepatch.Set(hash)}
	}
	spec := map[string]any{}
	if len(svc.Spec.Selector) != 1 || svc.Spec.Selector[labels.SandboxNameHash] != hash {
		// The selector is a map, so a foreign key is only removed by null.
		sel := map[string]any{labels.SandboxNameHash: hash}
		for k := range svc.Spec.Selector {
			if k != labels.SandboxNameHash {
				sel[k] = nil
			}
		}
		spec["selector"] = sel
	}
	if managePorts {
		if want := desiredServicePorts(sb); !servicePortsMatch(svc.Spec.Ports, want) {
			spec["ports"] = want
		}
	}
	if len(spec) > 0 {
		p.Fields = map[string]any{"spec": spec}
	}
	return p
}

// buildService renders the headless Service of a Sandbox.
func buildService(sb *sandboxv1beta1.Sandbox) *corev1.Service {
	hash := labels.NameHash(sb.Name)
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:            sb.Name,
			Namespace:       sb.Namespace,
			Labels:          map[string]string{labels.SandboxNameHash: hash},
			OwnerReferences: []metav1.OwnerReference{ownerref.Sandbox(sb)},
		},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  map[string]string{labels.SandboxNameHash: hash},
			Ports:     desiredServicePorts(sb),
		},
	}
}

// desiredServicePorts lists one port per distinct (containerPort, protocol)
// of the regular containers and native sidecars, named after the first
// container port name seen, or p-<port>-<protocol> when unnamed or taken.
func desiredServicePorts(sb *sandboxv1beta1.Sandbox) []corev1.ServicePort {
	spec := &sb.Spec.PodTemplate.Spec
	var containers []corev1.Container
	containers = append(containers, spec.Containers...)
	for _, c := range spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			containers = append(containers, c)
		}
	}
	type key struct {
		port  int32
		proto corev1.Protocol
	}
	var order []key
	names := map[key]string{}
	for _, c := range containers {
		for _, p := range c.Ports {
			if p.ContainerPort == 0 {
				continue
			}
			proto := p.Protocol
			if proto == "" {
				proto = corev1.ProtocolTCP
			}
			k := key{p.ContainerPort, proto}
			if _, seen := names[k]; !seen {
				order = append(order, k)
				names[k] = ""
			}
			if names[k] == "" && p.Name != "" {
				names[k] = p.Name
			}
		}
	}
	if len(order) == 0 {
		return nil
	}
	sort.Slice(order, func(i, j int) bool {
		if order[i].port != order[j].port {
			return order[i].port < order[j].port
		}
		return order[i].proto < order[j].proto
	})
	taken := map[string]bool{}
	ports := make([]corev1.ServicePort, 0, len(order))
	// Explicit names first, so a generated name never steals one.
	final := map[key]string{}
	for _, k := range order {
		if n := names[k]; n != "" && !taken[n] {
			final[k] = n
			taken[n] = true
		}
	}
	for _, k := range order {
		if final[k] != "" {
			continue
		}
		base := "p-" + strconv.Itoa(int(k.port)) + "-" + strings.ToLower(string(k.proto))
		n := base
		for i := 2; taken[n]; i++ {
			n = base + "-" + strconv.Itoa(i)
		}
		final[k] = n
		taken[n] = true
	}
	for _, k := range order {
		ports = append(ports, corev1.ServicePort{
			Name:       final[k],
			Port:       k.port,
			Protocol:   k.proto,
			TargetPort: intstr.FromInt32(k.port),
		})
	}
	return ports
}

// servicePortsMatch compares the controlled fields of service ports.
func servicePortsMatch(have, want []corev1.ServicePort) bool {
	if len(have) != len(want) {
		return false
	}
	for i := range want {
		h, w := have[i], want[i]
		if h.Name != w.Name || h.Port != w.Port || h.Protocol != w.Protocol || !equality.Semantic.DeepEqual(h.TargetPort, w.TargetPort) {
			return false
		}
	}
	return true
}
