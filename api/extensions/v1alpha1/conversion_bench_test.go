package v1alpha1

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
)

// BenchmarkSandboxClaimConversion measures one v1beta1 -> v1alpha1 ->
// v1beta1 claim round trip (what a v1alpha1 read-modify-write costs the
// webhook, per object).
func BenchmarkSandboxClaimConversion(b *testing.B) {
	hub := &extv1beta1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns",
		Annotations: map[string]string{SandboxClaimStateAnnotation: `{"spec":{"sandboxTemplateRef":{"name":"tmpl"},"warmpool":"none"}}`}}}
	hub.Spec.WarmPoolRef.Name = "shadow-pool-tmpl"
	hub.Spec.Env = []extv1beta1.EnvVar{{Name: "A", Value: "1"}}
	hub.Status.SandboxStatus.Name = "c"
	hub.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "DependenciesReady"}}
	b.ReportAllocs()
	for b.Loop() {
		s := &SandboxClaim{}
		if err := s.ConvertFrom(hub); err != nil {
			b.Fatal(err)
		}
		if err := s.ConvertTo(&extv1beta1.SandboxClaim{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSandboxTemplateConversion: a template with a realistic pod spec.
func BenchmarkSandboxTemplateConversion(b *testing.B) {
	hub := &extv1beta1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Name: "t", Namespace: "ns"}}
	hub.Spec.PodTemplate.Spec = corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "python:3", Command: []string{"sandboxd"},
		Env: []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "B", Value: "2"}}, Ports: []corev1.ContainerPort{{ContainerPort: 8888}}}}}
	hub.Spec.VolumeClaimTemplatesPolicy = extv1beta1.VolumeClaimTemplatesPolicyAllowed
	b.ReportAllocs()
	for b.Loop() {
		s := &SandboxTemplate{}
		if err := s.ConvertFrom(hub); err != nil {
			b.Fatal(err)
		}
		if err := s.ConvertTo(&extv1beta1.SandboxTemplate{}); err != nil {
			b.Fatal(err)
		}
	}
}
