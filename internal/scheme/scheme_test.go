package scheme

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"

	extv1alpha1 "sigs.k8s.io/agent-sandbox/api/extensions/v1alpha1"
	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1alpha1 "sigs.k8s.io/agent-sandbox/api/v1alpha1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

func TestNewRegistersWhatItsOptionsAskFor(t *testing.T) {
	cases := []struct {
		name    string
		opts    []Option
		want    []runtime.Object
		notWant []runtime.Object
	}{
		{"base", nil,
			[]runtime.Object{&corev1.Pod{}, &sandboxv1beta1.Sandbox{}, &extv1beta1.SandboxClaim{}, &extv1beta1.SandboxWarmPool{}, &extv1beta1.SandboxTemplate{}},
			[]runtime.Object{&sandboxv1alpha1.Sandbox{}, &extv1alpha1.SandboxClaim{}, &apiextensionsv1.CustomResourceDefinition{}}},
		{"served versions", []Option{ServedVersions},
			[]runtime.Object{&sandboxv1beta1.Sandbox{}, &sandboxv1alpha1.Sandbox{}, &extv1alpha1.SandboxClaim{}},
			[]runtime.Object{&apiextensionsv1.CustomResourceDefinition{}}},
		{"CRDs", []Option{apiextensionsv1.AddToScheme},
			[]runtime.Object{&sandboxv1beta1.Sandbox{}, &apiextensionsv1.CustomResourceDefinition{}},
			[]runtime.Object{&sandboxv1alpha1.Sandbox{}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := New(c.opts...)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range c.want {
				if _, _, err := s.ObjectKinds(o); err != nil {
					t.Errorf("%T not registered: %v", o, err)
				}
			}
			for _, o := range c.notWant {
				if _, _, err := s.ObjectKinds(o); err == nil {
					t.Errorf("%T registered without being asked for", o)
				}
			}
		})
	}
}

// Each call builds its own scheme: one caller's additions never leak into
// another's.
func TestNewIsFresh(t *testing.T) {
	a := Must(apiextensionsv1.AddToScheme)
	b := Must()
	if a == b {
		t.Fatal("New returned a shared scheme")
	}
	if _, _, err := b.ObjectKinds(&apiextensionsv1.CustomResourceDefinition{}); err == nil {
		t.Fatal("CRDs leaked into a scheme that did not ask for them")
	}
}
