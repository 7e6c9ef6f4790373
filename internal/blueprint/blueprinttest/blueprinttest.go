// Package blueprinttest holds the templates and expected renderings shared
// by the golden tests of every Sandbox renderer (internal/blueprint and its
// callers: the claim's cold path, the warm pool, the CLI), so that each
// caller's test pins the same facts: what the secure defaults turn each
// template's pod spec into. It has no dependency on the renderers, so a
// renderer cannot shape its own expectations.
package blueprinttest

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

// Namespace of every fixture.
const Namespace = "ns"

// Hashes of the fixture templates as the renderers compute them today
// (labels.NameHash of the JSON of the blueprint, and of the pod template).
// Literal on purpose: a change in the encoding would mark every warm pool
// member stale, and must fail a test rather than roll pools silently.
const (
	MinimalBlueprintHash   = "067cd6f8"
	MinimalPodTemplateHash = "708e1111"
	RichBlueprintHash      = "70cfc8a6"
	RichPodTemplateHash    = "85bbf17a"
	WindowsBlueprintHash   = "bb2db8ed"
	WindowsPodTemplateHash = "115b3eee"
)

// VCT is a volume claim template of the given size.
func VCT(name, size string) sandboxv1beta1.PersistentVolumeClaimTemplate {
	return sandboxv1beta1.PersistentVolumeClaimTemplate{
		EmbeddedObjectMetadata: sandboxv1beta1.EmbeddedObjectMetadata{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
		},
	}
}

// Minimal is a template with one bare container and every policy left at
// its default: Managed secure default NetworkPolicy, claim env and volume
// claim templates refused.
func Minimal() *extv1beta1.SandboxTemplate {
	return &extv1beta1.SandboxTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "py", Namespace: Namespace, UID: "tmpl-py"},
		Spec: extv1beta1.SandboxTemplateSpec{SandboxBlueprint: sandboxv1beta1.SandboxBlueprint{
			PodTemplate: sandboxv1beta1.PodTemplate{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "main", Image: "img:1"}},
			}},
		}},
	}
}

// hardened is the security context the secure defaults give a container
// whose template sets none.
func hardened() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		AllowPrivilegeEscalation: ptr.To(false),
	}
}

func runtimeDefault() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
}

// MinimalSpec is Minimal's blueprint with the secure defaults applied:
// no service account token, public resolvers (the secure default policy
// blocks cluster DNS), RuntimeDefault seccomp, no capabilities, no
// privilege escalation. Pod template metadata is left to the caller.
func MinimalSpec() sandboxv1beta1.SandboxSpec {
	return sandboxv1beta1.SandboxSpec{SandboxBlueprint: sandboxv1beta1.SandboxBlueprint{
		PodTemplate: sandboxv1beta1.PodTemplate{Spec: corev1.PodSpec{
			Containers:                   []corev1.Container{{Name: "main", Image: "img:1", SecurityContext: hardened()}},
			AutomountServiceAccountToken: ptr.To(false),
			SecurityContext:              runtimeDefault(),
			DNSPolicy:                    corev1.DNSNone,
			DNSConfig:                    &corev1.PodDNSConfig{Nameservers: []string{"8.8.8.8", "1.1.1.1"}},
		}},
	}}
}

// Rich is a template that sets most of what the renderers look at: pod
// metadata, a custom NetworkPolicy (so DNS is left alone), claim env and
// volume claim templates allowed, an explicit token, the service, an init
// container adding a capability, a privileged container, one adding
// SYS_ADMIN and a main container with env.
func Rich() *extv1beta1.SandboxTemplate {
	return &extv1beta1.SandboxTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "rich", Namespace: Namespace, UID: "tmpl-rich"},
		Spec: extv1beta1.SandboxTemplateSpec{
			SandboxBlueprint: sandboxv1beta1.SandboxBlueprint{
				PodTemplate: sandboxv1beta1.PodTemplate{
					ObjectMeta: sandboxv1beta1.PodMetadata{
						Labels:      map[string]string{"team": "a"},
						Annotations: map[string]string{"note": "n"},
					},
					Spec: corev1.PodSpec{
						AutomountServiceAccountToken: ptr.To(true),
						InitContainers: []corev1.Container{{Name: "init", Image: "img:init",
							SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}}}}},
						Containers: []corev1.Container{
							{Name: "main", Image: "img:2", Env: []corev1.EnvVar{{Name: "A", Value: "1"}}},
							{Name: "side", Image: "img:3", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}},
							{Name: "fuse", Image: "img:4", SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}}},
						},
					},
				},
				VolumeClaimTemplates: []sandboxv1beta1.PersistentVolumeClaimTemplate{VCT("workspace", "1Gi")},
				Service:              ptr.To(true),
			},
			NetworkPolicy:              &extv1beta1.NetworkPolicySpec{},
			EnvVarsInjectionPolicy:     extv1beta1.EnvVarsInjectionPolicyAllowed,
			VolumeClaimTemplatesPolicy: extv1beta1.VolumeClaimTemplatesPolicyAllowed,
		},
	}
}

// RichSpec is Rich's blueprint with the secure defaults applied, pod
// template metadata left to the caller: the token stays, DNS is untouched,
// capabilities the template adds are kept next to drop ALL, the privileged
// container is left alone and the SYS_ADMIN one gets no
// allowPrivilegeEscalation (the apiserver would refuse it).
func RichSpec() sandboxv1beta1.SandboxSpec {
	return sandboxv1beta1.SandboxSpec{SandboxBlueprint: sandboxv1beta1.SandboxBlueprint{
		PodTemplate: sandboxv1beta1.PodTemplate{Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(true),
			SecurityContext:              runtimeDefault(),
			InitContainers: []corev1.Container{{Name: "init", Image: "img:init", SecurityContext: &corev1.SecurityContext{
				Capabilities:             &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}, Drop: []corev1.Capability{"ALL"}},
				AllowPrivilegeEscalation: ptr.To(false),
			}}},
			Containers: []corev1.Container{
				{Name: "main", Image: "img:2", Env: []corev1.EnvVar{{Name: "A", Value: "1"}}, SecurityContext: hardened()},
				{Name: "side", Image: "img:3", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}},
				{Name: "fuse", Image: "img:4", SecurityContext: &corev1.SecurityContext{
					Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}, Drop: []corev1.Capability{"ALL"}},
				}},
			},
		}},
		VolumeClaimTemplates: []sandboxv1beta1.PersistentVolumeClaimTemplate{VCT("workspace", "1Gi")},
		Service:              ptr.To(true),
	}}
}

// Windows is an Unmanaged template for Windows pods whose pod template
// says it must not be evicted.
func Windows() *extv1beta1.SandboxTemplate {
	return &extv1beta1.SandboxTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "win", Namespace: Namespace, UID: "tmpl-win"},
		Spec: extv1beta1.SandboxTemplateSpec{
			SandboxBlueprint: sandboxv1beta1.SandboxBlueprint{
				PodTemplate: sandboxv1beta1.PodTemplate{
					ObjectMeta: sandboxv1beta1.PodMetadata{Annotations: map[string]string{labels.SafeToEvict: "false"}},
					Spec: corev1.PodSpec{
						OS:         &corev1.PodOS{Name: corev1.Windows},
						Containers: []corev1.Container{{Name: "main", Image: "img:w"}},
					},
				},
			},
			NetworkPolicyManagement: extv1beta1.NetworkPolicyManagementUnmanaged,
		},
	}
}

// WindowsSpec is Windows's blueprint with the secure defaults applied: only
// the token is turned off (the Linux security fields are forbidden for
// Windows pods, and an Unmanaged template keeps its DNS). Pod template
// metadata is left to the caller.
func WindowsSpec() sandboxv1beta1.SandboxSpec {
	return sandboxv1beta1.SandboxSpec{SandboxBlueprint: sandboxv1beta1.SandboxBlueprint{
		PodTemplate: sandboxv1beta1.PodTemplate{Spec: corev1.PodSpec{
			OS:                           &corev1.PodOS{Name: corev1.Windows},
			Containers:                   []corev1.Container{{Name: "main", Image: "img:w"}},
			AutomountServiceAccountToken: ptr.To(false),
		}},
	}}
}

// Templates are the fixtures by name.
func Templates() map[string]func() *extv1beta1.SandboxTemplate {
	return map[string]func() *extv1beta1.SandboxTemplate{"minimal": Minimal, "rich": Rich, "windows": Windows}
}

// PlainClaim asks for nothing beyond the template.
func PlainClaim() *extv1beta1.SandboxClaim {
	return &extv1beta1.SandboxClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "c1", Namespace: Namespace, UID: "claim-uid-1"},
		Spec:       extv1beta1.SandboxClaimSpec{WarmPoolRef: extv1beta1.WarmPoolRef{Name: "pool"}},
	}
}

// RichClaim carries a created-by label, a trace context, pod metadata (one
// label repeating the template's value, which is no override), a volume
// claim template and env.
func RichClaim() *extv1beta1.SandboxClaim {
	return &extv1beta1.SandboxClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: "c2", Namespace: Namespace, UID: "claim-uid-2",
			Labels:      map[string]string{labels.CreatedBy: labels.CreatedByPythonClient},
			Annotations: map[string]string{labels.TraceContext: "00-trace-span-01"},
		},
		Spec: extv1beta1.SandboxClaimSpec{
			WarmPoolRef: extv1beta1.WarmPoolRef{Name: "pool"},
			AdditionalPodMetadata: sandboxv1beta1.PodMetadata{
				Labels:      map[string]string{"extra": "1", "team": "a"},
				Annotations: map[string]string{"x": "y"},
			},
			VolumeClaimTemplates: []sandboxv1beta1.PersistentVolumeClaimTemplate{VCT("data", "2Gi")},
			Env:                  []extv1beta1.EnvVar{{Name: "B", Value: "2"}},
		},
	}
}

// Pool is the warm pool of the fixtures.
func Pool() *extv1beta1.SandboxWarmPool {
	return &extv1beta1.SandboxWarmPool{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: Namespace, UID: "pool-uid"}}
}

// OwnerRef is the controller reference a claim or pool puts on its
// Sandboxes.
func OwnerRef(kind, name string, uid string) []metav1.OwnerReference {
	return []metav1.OwnerReference{{
		APIVersion: extv1beta1.GroupVersion.String(), Kind: kind, Name: name, UID: types.UID(uid),
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}}
}

// Diff is "" when want and got are deeply equal (reflect.DeepEqual: nil
// and empty maps differ, as they are what the renderers produce), else
// the lines of their JSON that differ.
func Diff(want, got any) string {
	if reflect.DeepEqual(want, got) {
		return ""
	}
	w, err1 := json.MarshalIndent(want, "", "  ")
	g, err2 := json.MarshalIndent(got, "", "  ")
	if err1 != nil || err2 != nil {
		return fmt.Sprintf("differ (cannot encode: %v, %v):\nwant %#v\ngot  %#v", err1, err2, want, got)
	}
	if string(w) == string(g) {
		return fmt.Sprintf("differ only in nil against empty (same JSON):\nwant %#v\ngot  %#v", want, got)
	}
	return lineDiff(strings.Split(string(w), "\n"), strings.Split(string(g), "\n"))
}

// lineDiff lists the lines removed (-, in want only) and added (+, in got
// only) by a longest-common-subsequence alignment.
func lineDiff(a, b []string) string {
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out strings.Builder
	out.WriteString("(-want +got)\n")
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			i, j = i+1, j+1
		case i < len(a) && (j == len(b) || lcs[i+1][j] >= lcs[i][j+1]):
			fmt.Fprintf(&out, "- %s\n", a[i])
			i++
		default:
			fmt.Fprintf(&out, "+ %s\n", b[j])
			j++
		}
	}
	return out.String()
}
