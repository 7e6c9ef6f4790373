// Package scheme builds the runtime.Scheme every binary, SDK and test of
// agent-sandbox uses, so that all of them know the same types: the core
// Kubernetes types and both agent-sandbox groups at their storage version
// (v1beta1). Callers that need more ask for it by option (the conversion
// webhook's served versions, or any AddToScheme such as the CRD type's)
// rather than building their own. The CRD type is deliberately not an
// option here: this package is imported by the Go SDK, whose users should
// not pull in k8s.io/apiextensions-apiserver.
package scheme

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	extv1alpha1 "sigs.k8s.io/agent-sandbox/api/extensions/v1alpha1"
	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1alpha1 "sigs.k8s.io/agent-sandbox/api/v1alpha1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// Option adds types to the base scheme.
type Option func(*runtime.Scheme) error

// base is what every client of the API reads and writes. Registering a
// type costs nothing until a cache or client is asked for it, so the
// router and the SDK take the whole base even though each reads only part.
var base = []Option{clientgoscheme.AddToScheme, sandboxv1beta1.AddToScheme, extv1beta1.AddToScheme}

// ServedVersions adds the older served versions (v1alpha1 of both
// groups), which only the conversion webhook decodes.
var ServedVersions Option = func(s *runtime.Scheme) error {
	if err := sandboxv1alpha1.AddToScheme(s); err != nil {
		return err
	}
	return extv1alpha1.AddToScheme(s)
}

// New returns a fresh scheme with the base types and those of opts.
func New(opts ...Option) (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range append(append([]Option(nil), base...), opts...) {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("building scheme: %w", err)
		}
	}
	return s, nil
}

// Must is New for package-level schemes; registering these fixed types
// fails only on a programming error (a type registered twice with two
// names), so it panics.
func Must(opts ...Option) *runtime.Scheme {
	s, err := New(opts...)
	if err != nil {
		panic(err)
	}
	return s
}
