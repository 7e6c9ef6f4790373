package sandbox

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestDesiredServicePorts(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	type p struct {
		name  string
		port  int32
		proto corev1.Protocol
	}
	cases := []struct {
		name       string
		containers []corev1.Container
		inits      []corev1.Container
		want       []p
	}{
		{"none", []corev1.Container{{Name: "a"}}, nil, nil},
		{"named and unnamed, sorted", []corev1.Container{{Name: "a", Ports: []corev1.ContainerPort{
			{ContainerPort: 9090}, {Name: "http", ContainerPort: 8080}, {ContainerPort: 53, Protocol: corev1.ProtocolUDP}, {ContainerPort: 0},
		}}}, nil, []p{{"p-53-udp", 53, "UDP"}, {"http", 8080, "TCP"}, {"p-9090-tcp", 9090, "TCP"}}},
		{"dedup across containers, first name wins", []corev1.Container{
			{Name: "a", Ports: []corev1.ContainerPort{{ContainerPort: 80}}},
			{Name: "b", Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: 80}, {Name: "alt", ContainerPort: 80}}},
		}, nil, []p{{"web", 80, "TCP"}}},
		{"same port two protocols", []corev1.Container{{Name: "a", Ports: []corev1.ContainerPort{
			{Name: "dns", ContainerPort: 53}, {Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
		}}}, nil, []p{{"dns", 53, "TCP"}, {"p-53-udp", 53, "UDP"}}},
		{"generated name collides with explicit", []corev1.Container{{Name: "a", Ports: []corev1.ContainerPort{
			{Name: "p-80-tcp", ContainerPort: 81}, {ContainerPort: 80},
		}}}, nil, []p{{"p-80-tcp-2", 80, "TCP"}, {"p-80-tcp", 81, "TCP"}}},
		{"native sidecar counts, plain init does not", []corev1.Container{{Name: "a"}},
			[]corev1.Container{{Name: "side", RestartPolicy: &always, Ports: []corev1.ContainerPort{{ContainerPort: 15000}}},
				{Name: "init", Ports: []corev1.ContainerPort{{ContainerPort: 1}}}},
			[]p{{"p-15000-tcp", 15000, "TCP"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sb := makeSandbox("ns", "s").obj()
			sb.Spec.PodTemplate.Spec.Containers = tc.containers
			sb.Spec.PodTemplate.Spec.InitContainers = tc.inits
			var got []p
			for _, sp := range desiredServicePorts(sb) {
				if sp.TargetPort.IntVal != sp.Port {
					t.Errorf("targetPort %v != port %d", sp.TargetPort, sp.Port)
				}
				got = append(got, p{sp.Name, sp.Port, sp.Protocol})
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ports = %v, want %v", got, tc.want)
			}
		})
	}
}
