package devstack

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// Names of the objects the stack creates. The router names match what the
// SDKs look for: the Go SDK tunnels to the EndpointSlices of
// RouterServiceName in the sandbox's namespace, the Python SDK to the
// Service in agent-sandbox-system.
const (
	TemplateName      = "python-runtime-template"
	WarmPoolName      = "python-sandbox-pool"
	RouterServiceName = "sandbox-router-svc"
	RouterPodName     = "sandbox-router"
	RouterPort        = 8080
	routerAppLabel    = "sandbox-router"
	managedByValue    = "agent-sandbox-devstack"
	// routerPodIP is the router Pod's reported IP. Nothing listens there;
	// it only has to be a valid, non-loopback address.
	routerPodIP = "10.244.255.254"
)

// template is the SandboxTemplate of the stack: the same shape as
// examples/python-runtime, minus the gVisor RuntimeClass (pods here are
// sandboxd processes, not containers).
func template(namespace string) *extv1beta1.SandboxTemplate {
	return &extv1beta1.SandboxTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: TemplateName, Namespace: namespace},
		Spec: extv1beta1.SandboxTemplateSpec{
			SandboxBlueprint: sandboxv1beta1.SandboxBlueprint{
				PodTemplate: sandboxv1beta1.PodTemplate{
					ObjectMeta: sandboxv1beta1.PodMetadata{Labels: map[string]string{"app": "python-runtime"}},
					Spec: corev1.PodSpec{
						TerminationGracePeriodSeconds: ptr.To[int64](2),
						Containers: []corev1.Container{{
							Name:            "runtime",
							Image:           "localhost/agent-sandbox/python-runtime:dev",
							ImagePullPolicy: corev1.PullIfNotPresent,
							Ports: []corev1.ContainerPort{
								{Name: "runtime", ContainerPort: 8888},
								{Name: "api", ContainerPort: 8080},
								{Name: "process", ContainerPort: 9090},
							},
						}},
					},
				},
			},
		},
	}
}

func warmPool(namespace string, replicas int32) *extv1beta1.SandboxWarmPool {
	return &extv1beta1.SandboxWarmPool{
		ObjectMeta: metav1.ObjectMeta{Name: WarmPoolName, Namespace: namespace},
		Spec: extv1beta1.SandboxWarmPoolSpec{
			Replicas:           ptr.To(replicas),
			SandboxTemplateRef: extv1beta1.SandboxTemplateRef{Name: TemplateName},
		},
	}
}

// publishRouter makes the in-process router look like a deployed one in
// namespace: a Running, Ready Pod, the sandbox-router-svc Service selecting
// it, and an EndpointSlice (envtest runs no EndpointSlice controller). The
// Pod's IP is a placeholder (EndpointSlices refuse loopback addresses);
// the API front maps port-forwards to its port 8080 onto the router's real
// listener.
func publishRouter(ctx context.Context, c client.Client, namespace string) (*corev1.Pod, error) {
	if namespace != "default" {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
		if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating namespace %s: %w", namespace, err)
		}
	}
	labels := map[string]string{"app": routerAppLabel, "app.kubernetes.io/managed-by": managedByValue}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: RouterPodName, Namespace: namespace, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName: testenv.FakeNodeName,
			Containers: []corev1.Container{{
				Name:  "router",
				Image: "localhost/agent-sandbox/sandbox-router:dev",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: RouterPort}},
			}},
		},
	}
	if err := c.Create(ctx, pod); err != nil {
		return nil, fmt.Errorf("creating router pod in %s: %w", namespace, err)
	}
	now := metav1.Now()
	pod.Status = corev1.PodStatus{
		Phase:     corev1.PodRunning,
		HostIP:    routerPodIP,
		PodIP:     routerPodIP,
		PodIPs:    []corev1.PodIP{{IP: routerPodIP}},
		StartTime: &now,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
		ContainerStatuses: []corev1.ContainerStatus{{
			Name: "router", Ready: true, Image: pod.Spec.Containers[0].Image,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		}},
	}
	if err := c.Status().Update(ctx, pod); err != nil {
		return nil, fmt.Errorf("reporting router pod status in %s: %w", namespace, err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: RouterServiceName, Namespace: namespace, Labels: labels},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": routerAppLabel},
			Ports: []corev1.ServicePort{{
				Name: "http", Port: RouterPort, TargetPort: intstr.FromInt32(RouterPort), Protocol: corev1.ProtocolTCP,
			}},
		},
	}
	if err := c.Create(ctx, svc); err != nil {
		return nil, fmt.Errorf("creating router service in %s: %w", namespace, err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      RouterServiceName + "-devstack",
			Namespace: namespace,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: RouterServiceName,
				discoveryv1.LabelManagedBy:   managedByValue,
			},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{routerPodIP},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true)},
			NodeName:   ptr.To(testenv.FakeNodeName),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: namespace, Name: pod.Name, UID: pod.UID},
		}},
		Ports: []discoveryv1.EndpointPort{{
			Name: ptr.To("http"), Port: ptr.To[int32](RouterPort), Protocol: ptr.To(corev1.ProtocolTCP),
		}},
	}
	if err := c.Create(ctx, slice); err != nil {
		return nil, fmt.Errorf("creating router endpoint slice in %s: %w", namespace, err)
	}
	return pod, nil
}
