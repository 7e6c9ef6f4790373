package claim

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

func pvc(name, size string) sandboxv1beta1.PersistentVolumeClaimTemplate {
	return sandboxv1beta1.PersistentVolumeClaimTemplate{
		EmbeddedObjectMetadata: sandboxv1beta1.EmbeddedObjectMetadata{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{Resources: corev1.VolumeResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}}},
	}
}

func sizes(v vctList) string {
	var parts []string
	for _, x := range v {
		q := x.Spec.Resources.Requests[corev1.ResourceStorage]
		parts = append(parts, x.Name+"="+q.String())
	}
	return strings.Join(parts, ",")
}

func TestMergeVCTs(t *testing.T) {
	cases := []struct {
		name    string
		policy  extv1beta1.VolumeClaimTemplatesPolicy
		tmpl    vctList
		claim   vctList
		want    string
		wantErr string
	}{
		{name: "no claim VCTs: template's, policy not checked", policy: "", tmpl: vctList{pvc("workspace", "1Gi")}, want: "workspace=1Gi"},
		{name: "overrides replaces by name and appends", policy: extv1beta1.VolumeClaimTemplatesPolicyOverrides,
			tmpl: vctList{pvc("workspace", "1Gi"), pvc("cache", "1Gi")}, claim: vctList{pvc("workspace", "3Gi"), pvc("data", "2Gi")},
			want: "workspace=3Gi,cache=1Gi,data=2Gi"},
		{name: "allowed appends", policy: extv1beta1.VolumeClaimTemplatesPolicyAllowed,
			tmpl: vctList{pvc("workspace", "1Gi")}, claim: vctList{pvc("data", "2Gi")}, want: "workspace=1Gi,data=2Gi"},
		{name: "allowed refuses an override", policy: extv1beta1.VolumeClaimTemplatesPolicyAllowed,
			tmpl: vctList{pvc("workspace", "1Gi")}, claim: vctList{pvc("workspace", "3Gi")},
			wantErr: `overriding volume claim templates is forbidden by the template: cannot override template volume "workspace"`},
		{name: "disallowed", policy: extv1beta1.VolumeClaimTemplatesPolicyDisallowed, claim: vctList{pvc("x", "1Gi")},
			wantErr: "volume claim templates are disallowed by the template"},
		{name: "empty policy is disallowed", policy: "", claim: vctList{pvc("x", "1Gi")},
			wantErr: "volume claim templates are disallowed by the template"},
		{name: "claim entry without a name", policy: extv1beta1.VolumeClaimTemplatesPolicyOverrides, claim: vctList{pvc("", "1Gi")},
			wantErr: "invalid volume claim templates: claim entry 0 has no name"},
		{name: "duplicate claim names", policy: extv1beta1.VolumeClaimTemplatesPolicyOverrides, claim: vctList{pvc("a", "1Gi"), pvc("a", "2Gi")},
			wantErr: `invalid volume claim templates: claim has duplicate name "a"`},
		{name: "duplicate template names", policy: extv1beta1.VolumeClaimTemplatesPolicyOverrides, tmpl: vctList{pvc("a", "1Gi"), pvc("a", "1Gi")},
			wantErr: `invalid volume claim templates: template has duplicate name "a"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tmpl := &extv1beta1.SandboxTemplate{}
			tmpl.Spec.VolumeClaimTemplatesPolicy = c.policy
			tmpl.Spec.VolumeClaimTemplates = c.tmpl
			got, err := mergeVCTs(tmpl, c.claim)
			if c.wantErr != "" {
				ce, ok := asClaimError(err)
				if !ok || ce.reason != extv1beta1.ClaimReasonVolumeClaimTemplatesError || ce.message != c.wantErr {
					t.Fatalf("err = %v, want VolumeClaimTemplatesError %q", err, c.wantErr)
				}
				return
			}
			if err != nil || sizes(got) != c.want {
				t.Fatalf("got %s, %v; want %s", sizes(got), err, c.want)
			}
			if len(c.tmpl) > 0 && len(got) > 0 {
				got[0].Name = "mutated"
				if c.tmpl[0].Name == "mutated" {
					t.Fatal("merge aliases the template's list")
				}
			}
		})
	}
}
