package remote

import (
	"context"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/blueprint"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

// Name prefixes of objects created without an explicit name. Claims use
// the Go SDK's, so claims look alike whichever client made them.
const (
	ClaimGenerateName   = "sandbox-claim-"
	SandboxGenerateName = "sandbox-"
)

// Spec describes a sandbox to create.
type Spec struct {
	Namespace string
	// Name is the claim's (or, from a template, the Sandbox's) name;
	// empty generates one.
	Name string
	// Pool claims from this SandboxWarmPool. Exactly one of Pool and
	// Template is set.
	Pool string
	// Template creates a Sandbox straight from this SandboxTemplate,
	// without a claim or a pool (always a cold start).
	Template string
	// Labels go on the claim (or Sandbox).
	Labels map[string]string
	// PodLabels and PodAnnotations are added to the Pod's metadata.
	PodLabels, PodAnnotations map[string]string
	// Env is injected into the first container.
	Env []corev1.EnvVar
	// ShutdownAfter, when positive, makes the sandbox expire (and be
	// deleted) this long after creation.
	ShutdownAfter time.Duration
	// Now is the creation time (time.Now when zero); tests fix it.
	Now time.Time
}

// Create makes the claim or Sandbox of spec and returns the resulting
// target (not yet bound or Ready: see WaitClaimReady and
// WaitSandboxReady).
func Create(ctx context.Context, c client.Client, spec Spec) (*Target, error) {
	now := spec.Now
	if now.IsZero() {
		now = time.Now()
	}
	switch {
	case spec.Pool != "" && spec.Template != "":
		return nil, fmt.Errorf("choose one of a warm pool and a template, not both")
	case spec.Pool != "":
		claim := buildClaim(spec, now)
		if err := c.Create(ctx, claim); err != nil {
			return nil, fmt.Errorf("creating SandboxClaim on warm pool %s/%s: %w", spec.Namespace, spec.Pool, err)
		}
		return &Target{Namespace: spec.Namespace, Claim: claim}, nil
	case spec.Template != "":
		var tmpl extv1beta1.SandboxTemplate
		if err := c.Get(ctx, types.NamespacedName{Namespace: spec.Namespace, Name: spec.Template}, &tmpl); err != nil {
			return nil, fmt.Errorf("getting SandboxTemplate %s/%s: %w", spec.Namespace, spec.Template, err)
		}
		sb := SandboxFromTemplate(&tmpl, spec, now)
		if err := c.Create(ctx, sb); err != nil {
			return nil, fmt.Errorf("creating Sandbox from template %s/%s: %w", spec.Namespace, spec.Template, err)
		}
		return &Target{Namespace: spec.Namespace, Sandbox: sb}, nil
	}
	return nil, fmt.Errorf("a warm pool or a template is required")
}

// buildClaim renders the SandboxClaim of spec, marked like the Go SDK's
// claims (created-by go-client, client-first-requested-at).
func buildClaim(spec Spec, now time.Time) *extv1beta1.SandboxClaim {
	claim := &extv1beta1.SandboxClaim{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   spec.Namespace,
			Name:        spec.Name,
			Labels:      map[string]string{labels.CreatedBy: labels.CreatedByGoClient},
			Annotations: map[string]string{labels.ClientFirstRequestedAt: now.UTC().Format(time.RFC3339Nano)},
		},
		Spec: extv1beta1.SandboxClaimSpec{
			WarmPoolRef: extv1beta1.WarmPoolRef{Name: spec.Pool},
			AdditionalPodMetadata: sandboxv1beta1.PodMetadata{
				Labels: maps.Clone(spec.PodLabels), Annotations: maps.Clone(spec.PodAnnotations),
			},
		},
	}
	if spec.Name == "" {
		claim.GenerateName = ClaimGenerateName
	}
	maps.Copy(claim.Labels, spec.Labels)
	for _, e := range spec.Env {
		claim.Spec.Env = append(claim.Spec.Env, extv1beta1.EnvVar{Name: e.Name, Value: e.Value})
	}
	if spec.ShutdownAfter > 0 {
		t := metav1.NewTime(now.Add(spec.ShutdownAfter).Truncate(time.Second))
		claim.Spec.Lifecycle = &extv1beta1.Lifecycle{ShutdownTime: &t, ShutdownPolicy: extv1beta1.ClaimShutdownPolicyDelete}
	}
	return claim
}

// SandboxFromTemplate renders a Sandbox made directly from tmpl: the
// blueprint renderer's direct rendering (internal/blueprint: the cold
// path's template labels and annotation, secure defaults, NetworkPolicy
// selector, minus the claim), marked like the Go SDK's objects, with the
// name, env and expiry of spec.
func SandboxFromTemplate(tmpl *extv1beta1.SandboxTemplate, spec Spec, now time.Time) *sandboxv1beta1.Sandbox {
	lbls := map[string]string{labels.CreatedBy: labels.CreatedByGoClient}
	maps.Copy(lbls, spec.Labels)
	sb := blueprint.ForDirect(tmpl, blueprint.Direct{
		Labels:         lbls,
		Annotations:    map[string]string{labels.ClientFirstRequestedAt: now.UTC().Format(time.RFC3339Nano)},
		PodLabels:      spec.PodLabels,
		PodAnnotations: spec.PodAnnotations,
	})
	sb.Namespace, sb.Name = spec.Namespace, spec.Name
	if spec.Name == "" {
		sb.GenerateName = SandboxGenerateName
	}
	if len(spec.Env) > 0 && len(sb.Spec.PodTemplate.Spec.Containers) > 0 {
		c := &sb.Spec.PodTemplate.Spec.Containers[0]
		for _, e := range spec.Env {
			c.Env = setEnv(c.Env, e)
		}
	}
	if spec.ShutdownAfter > 0 {
		t := metav1.NewTime(now.Add(spec.ShutdownAfter).Truncate(time.Second))
		del := sandboxv1beta1.ShutdownPolicyDelete
		sb.Spec.ShutdownTime, sb.Spec.ShutdownPolicy = &t, &del
	}
	return sb
}

func setEnv(env []corev1.EnvVar, e corev1.EnvVar) []corev1.EnvVar {
	for i := range env {
		if env[i].Name == e.Name {
			env[i] = e
			return env
		}
	}
	return append(env, e)
}

// SetOperatingMode patches the Sandbox's spec.operatingMode.
func SetOperatingMode(ctx context.Context, c client.Client, namespace, name string, mode sandboxv1beta1.OperatingMode) error {
	sb := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	patch := fmt.Appendf(nil, `{"spec":{"operatingMode":%q}}`, mode)
	if err := c.Patch(ctx, sb, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("setting operatingMode=%s on Sandbox %s/%s: %w", mode, namespace, name, err)
	}
	return nil
}

// Delete deletes the target: its claim (which takes the Sandbox and Pod
// with it) or, without a claim, the Sandbox. Missing objects are not an
// error.
func Delete(ctx context.Context, c client.Client, t *Target) error {
	bg := client.PropagationPolicy(metav1.DeletePropagationBackground)
	if t.Claim != nil {
		if err := client.IgnoreNotFound(c.Delete(ctx, t.Claim, bg)); err != nil {
			return fmt.Errorf("deleting SandboxClaim %s/%s: %w", t.Namespace, t.Claim.Name, err)
		}
		return nil
	}
	if err := client.IgnoreNotFound(c.Delete(ctx, t.Sandbox, bg)); err != nil {
		return fmt.Errorf("deleting Sandbox %s/%s: %w", t.Namespace, t.Sandbox.Name, err)
	}
	return nil
}
