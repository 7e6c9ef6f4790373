package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of the deprecated Sandbox API.
	GroupVersion = schema.GroupVersion{Group: "agents.x-k8s.io", Version: "v1alpha1"}
	// SchemeGroupVersion is an alias kept for client-go style callers.
	SchemeGroupVersion = GroupVersion
	// SchemeBuilder registers the types of this package with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion} //nolint:staticcheck // exported API surface: callers (as with the reference's kubebuilder-layout packages) use it as a *scheme.Builder, e.g. Register
	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
