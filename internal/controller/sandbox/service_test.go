package sandbox

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/labels"
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

// The repair patch is the wire format the write-budget tests count: only
// what drifted, a foreign selector key removed with null, no
// resourceVersion precondition (a repair is idempotent, so a newer Service
// is patched all the same).
func TestServiceRepairPatchBytes(t *testing.T) {
	const hash = "h1"
	sb := makeSandbox("ns", "s").obj()
	sb.Spec.PodTemplate.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
	inSync := func() *corev1.Service {
		svc := buildService(sb)
		svc.Labels[labels.SandboxNameHash] = hash
		svc.Spec.Selector = map[string]string{labels.SandboxNameHash: hash}
		svc.Spec.Ports = desiredServicePorts(sb)
		return svc
	}
	const (
		wantLabel    = `"metadata":{"labels":{"agents.x-k8s.io/sandbox-name-hash":"h1"}}`
		wantSelector = `"selector":{"agents.x-k8s.io/sandbox-name-hash":"h1","app":null}`
		wantPorts    = `"ports":[{"name":"http","protocol":"TCP","port":8080,"targetPort":8080}]`
	)
	cases := []struct {
		name        string
		drift       func(*corev1.Service)
		managePorts bool
		want        string // "" means no patch at all
	}{
		{"in sync", func(*corev1.Service) {}, true, ""},
		{"label", func(s *corev1.Service) { s.Labels[labels.SandboxNameHash] = "other" }, true, `{` + wantLabel + `}`},
		{"label missing", func(s *corev1.Service) { s.Labels = nil }, false, `{` + wantLabel + `}`},
		{"foreign selector key", func(s *corev1.Service) { s.Spec.Selector["app"] = "x" }, true, `{"spec":{` + wantSelector + `}}`},
		{"ports managed", func(s *corev1.Service) { s.Spec.Ports = nil }, true, `{"spec":{` + wantPorts + `}}`},
		{"ports not managed", func(s *corev1.Service) { s.Spec.Ports = nil }, false, ""},
		{"everything", func(s *corev1.Service) {
			s.Labels = map[string]string{"keep": "me"}
			s.Spec.Selector = map[string]string{labels.SandboxNameHash: "other", "app": "x"}
			s.Spec.Ports[0].Port = 1
		}, true, `{` + wantLabel + `,"spec":{` + wantPorts + `,` + wantSelector + `}}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			svc := inSync()
			c.drift(svc)
			got := serviceRepairBytes(t, sb, svc, hash, c.managePorts)
			if got != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}

// serviceRepairBytes renders serviceRepairPatch; "" when there is no patch.
func serviceRepairBytes(t *testing.T, sb *sandboxv1beta1.Sandbox, svc *corev1.Service, hash string, managePorts bool) string {
	t.Helper()
	p := serviceRepairPatch(sb, svc, hash, managePorts)
	if p.Empty() {
		return ""
	}
	data, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
