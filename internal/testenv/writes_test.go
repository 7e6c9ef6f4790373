package testenv

import "testing"

func TestParsePath(t *testing.T) {
	cases := map[string][2]string{
		"/api/v1/namespaces/default/pods":                                           {"pods", ""},
		"/api/v1/namespaces/default/pods/p1":                                        {"pods", "p1"},
		"/api/v1/namespaces/default/pods/p1/status":                                 {"pods/status", "p1"},
		"/api/v1/namespaces/default/pods/p1/binding":                                {"pods/binding", "p1"},
		"/api/v1/namespaces":                                                        {"namespaces", ""},
		"/apis/agents.x-k8s.io/v1beta1/namespaces/ns/sandboxes/s1/status":           {"sandboxes/status", "s1"},
		"/apis/events.k8s.io/v1/namespaces/ns/events":                               {"events", ""},
		"/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/ns/sandboxclaims/c1":   {"sandboxclaims", "c1"},
		"/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/x":              {"leases", "x"},
		"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/sandboxes.a.b/foo": {"customresourcedefinitions/foo", "sandboxes.a.b"},
	}
	for in, want := range cases {
		if res, name := parsePath(in); res != want[0] || name != want[1] {
			t.Errorf("parsePath(%q) = %q, %q, want %q, %q", in, res, name, want[0], want[1])
		}
	}
}

func TestSummary(t *testing.T) {
	ws := []Write{{Verb: "patch", Resource: "pods"}, {Verb: "create", Resource: "sandboxes"}, {Verb: "patch", Resource: "pods"}}
	if got, want := Summary(ws), "create sandboxes=1, patch pods=2"; got != want {
		t.Errorf("Summary = %q, want %q", got, want)
	}
}

func TestNamespaceOf(t *testing.T) {
	for in, want := range map[string]string{
		"/api/v1/namespaces/default/pods":                                 "default",
		"/api/v1/namespaces/default/pods/p1/status":                       "default",
		"/apis/agents.x-k8s.io/v1beta1/namespaces/ns/sandboxes/s1/status": "ns",
		"/api/v1/namespaces/foo":                                          "", // the Namespace object itself
		"/api/v1/namespaces":                                              "",
		"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/x":       "",
	} {
		if got := namespaceOf(in); got != want {
			t.Errorf("namespaceOf(%q) = %q, want %q", in, got, want)
		}
	}
}
