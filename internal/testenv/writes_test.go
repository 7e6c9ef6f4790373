package testenv

import "testing"

func TestResourceOf(t *testing.T) {
	cases := map[string]string{
		"/api/v1/namespaces/default/pods":                                           "pods",
		"/api/v1/namespaces/default/pods/p1":                                        "pods",
		"/api/v1/namespaces/default/pods/p1/status":                                 "pods/status",
		"/api/v1/namespaces/default/pods/p1/binding":                                "pods/binding",
		"/apis/agents.x-k8s.io/v1beta1/namespaces/ns/sandboxes/s1/status":           "sandboxes/status",
		"/apis/events.k8s.io/v1/namespaces/ns/events":                               "events",
		"/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/ns/sandboxclaims/c1":   "sandboxclaims",
		"/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/x":              "leases",
		"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/sandboxes.a.b/foo": "foo",
	}
	for in, want := range cases {
		if got := resourceOf(in); got != want {
			t.Errorf("resourceOf(%q) = %q, want %q", in, got, want)
		}
	}
}
