package v1alpha1

import (
	"strings"
	"testing"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/conversion"
	"sigs.k8s.io/randfill"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// filler fills objects at random, keeping enum fields the conversion checks
// inside the values the apiserver's schema accepts.
func filler(seed int64) *randfill.Filler {
	policies := []extv1beta1.VolumeClaimTemplatesPolicy{"", extv1beta1.VolumeClaimTemplatesPolicyAllowed,
		extv1beta1.VolumeClaimTemplatesPolicyDisallowed, extv1beta1.VolumeClaimTemplatesPolicyOverrides}
	names := []string{"", "default", "none", "pool", "shadow-pool-tmpl", "shadow-pool-", "claim", "pool-abcde", "a-b-c"}
	return randfill.NewWithSeed(seed).NilChance(0.3).NumElements(0, 2).MaxDepth(6).Funcs(
		func(s *extv1beta1.SandboxTemplateSpec, c randfill.Continue) {
			c.FillNoCustom(s)
			s.VolumeClaimTemplatesPolicy = policies[c.Intn(len(policies))]
		},
		// Claim names, pool refs and bound sandbox names drawn from a small
		// set so the KEP-208 rules (shadow pools, generated suffixes, the
		// claim-named cold Sandbox) meet each other often.
		func(c *extv1beta1.SandboxClaim, f randfill.Continue) {
			f.FillNoCustom(c)
			c.Name = names[f.Intn(len(names))]
			c.Spec.WarmPoolRef.Name = names[f.Intn(len(names))]
			c.Status.SandboxStatus.Name = names[f.Intn(len(names))]
		},
		func(c *SandboxClaim, f randfill.Continue) {
			f.FillNoCustom(c)
			c.Name = names[f.Intn(len(names))]
			c.Spec.WarmPool = names[f.Intn(len(names))]
			c.Spec.SandboxTemplateRef.Name = names[f.Intn(len(names))]
			c.Status.SandboxStatus.Name = names[f.Intn(len(names))]
		},
	)
}

type spoke interface {
	conversion.Convertible
}

// hubRoundTrip fuzzes hub -> spoke -> hub and wants the identity.
func hubRoundTrip[H conversion.Hub](t *testing.T, newHub func() H, newSpoke func() spoke) {
	t.Helper()
	for i := range 500 {
		in := newHub()
		filler(int64(i)).Fill(in)
		clearTypeMeta(in)
		s := newSpoke()
		if err := s.ConvertFrom(in.DeepCopyObject().(conversion.Hub)); err != nil {
			t.Fatalf("seed %d: ConvertFrom: %v", i, err)
		}
		out := newHub()
		if err := s.ConvertTo(out); err != nil {
			t.Fatalf("seed %d: ConvertTo: %v", i, err)
		}
		if !apiequality.Semantic.DeepEqual(in, out) {
			t.Fatalf("seed %d: round trip changed the object:\nin:  %+v\nout: %+v", i, in, out)
		}
	}
}

func clearTypeMeta(o any) {
	switch v := o.(type) {
	case *extv1beta1.SandboxTemplate:
		v.TypeMeta = metav1.TypeMeta{}
	case *extv1beta1.SandboxWarmPool:
		v.TypeMeta = metav1.TypeMeta{}
	case *extv1beta1.SandboxClaim:
		v.TypeMeta = metav1.TypeMeta{}
	case *SandboxTemplate:
		v.TypeMeta = metav1.TypeMeta{}
	case *SandboxWarmPool:
		v.TypeMeta = metav1.TypeMeta{}
	case *SandboxClaim:
		v.TypeMeta = metav1.TypeMeta{}
	}
}

func TestSandboxTemplateHubRoundTripFuzz(t *testing.T) {
	hubRoundTrip(t, func() *extv1beta1.SandboxTemplate { return &extv1beta1.SandboxTemplate{} }, func() spoke { return &SandboxTemplate{} })
}

func TestSandboxWarmPoolHubRoundTripFuzz(t *testing.T) {
	hubRoundTrip(t, func() *extv1beta1.SandboxWarmPool { return &extv1beta1.SandboxWarmPool{} }, func() spoke { return &SandboxWarmPool{} })
}

func TestSandboxClaimHubRoundTripFuzz(t *testing.T) {
	hubRoundTrip(t, func() *extv1beta1.SandboxClaim { return &extv1beta1.SandboxClaim{} }, func() spoke { return &SandboxClaim{} })
}

// TestSandboxClaimSpokeRoundTripFuzz: v1alpha1 -> v1beta1 -> v1alpha1 is
// the identity for claims too; that is what the state annotation is for
// ("warmpool: none" and "default" both become a shadow pool).
func TestSandboxClaimSpokeRoundTripFuzz(t *testing.T) {
	for i := range 500 {
		in := &SandboxClaim{}
		filler(int64(i)).Fill(in)
		in.TypeMeta = metav1.TypeMeta{}
		hub := &extv1beta1.SandboxClaim{}
		if err := in.DeepCopy().ConvertTo(hub); err != nil {
			t.Fatalf("seed %d: ConvertTo: %v", i, err)
		}
		out := &SandboxClaim{}
		if err := out.ConvertFrom(hub); err != nil {
			t.Fatalf("seed %d: ConvertFrom: %v", i, err)
		}
		if !apiequality.Semantic.DeepEqual(in, out) {
			t.Fatalf("seed %d: round trip changed the claim:\nin:  %+v\nhub: %+v\nout: %+v", i, in.Spec, hub, out.Spec)
		}
	}
}

func TestSandboxTemplateVolumeClaimTemplatesPolicy(t *testing.T) {
	hub := &extv1beta1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Name: "t"}}
	hub.Spec.VolumeClaimTemplatesPolicy = extv1beta1.VolumeClaimTemplatesPolicyOverrides
	down := &SandboxTemplate{}
	if err := down.ConvertFrom(hub); err != nil {
		t.Fatal(err)
	}
	if got := down.Annotations[VolumeClaimTemplatesPolicyAnnotation]; got != "Overrides" {
		t.Fatalf("policy annotation = %q, want Overrides", got)
	}
	up := &extv1beta1.SandboxTemplate{}
	if err := down.ConvertTo(up); err != nil {
		t.Fatal(err)
	}
	if up.Spec.VolumeClaimTemplatesPolicy != extv1beta1.VolumeClaimTemplatesPolicyOverrides || len(up.Annotations) != 0 {
		t.Fatalf("back: policy %q annotations %v, want Overrides and no annotation", up.Spec.VolumeClaimTemplatesPolicy, up.Annotations)
	}

	t.Run("stale annotation cleared when the hub has no policy", func(t *testing.T) {
		hub := &extv1beta1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Name: "t",
			Annotations: map[string]string{VolumeClaimTemplatesPolicyAnnotation: "Allowed"}}}
		down := &SandboxTemplate{}
		if err := down.ConvertFrom(hub); err != nil {
			t.Fatal(err)
		}
		if _, ok := down.Annotations[VolumeClaimTemplatesPolicyAnnotation]; ok {
			t.Fatalf("stale annotation kept: %v", down.Annotations)
		}
	})
	t.Run("invalid annotation is a conversion error", func(t *testing.T) {
		in := &SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Name: "t",
			Annotations: map[string]string{VolumeClaimTemplatesPolicyAnnotation: "Sometimes"}}}
		err := in.ConvertTo(&extv1beta1.SandboxTemplate{})
		if err == nil || !strings.Contains(err.Error(), "Sometimes") {
			t.Fatalf("err = %v, want an error naming the bad value", err)
		}
	})
}

func TestSandboxWarmPoolConversion(t *testing.T) {
	for _, tc := range []struct {
		name     string
		replicas *int32
		strategy *extv1beta1.SandboxWarmPoolUpdateStrategy
		want     int32
	}{
		{"unset replicas is 1", nil, nil, 1},
		{"zero", ptr.To(int32(0)), nil, 0},
		{"with update strategy", ptr.To(int32(3)), &extv1beta1.SandboxWarmPoolUpdateStrategy{Type: extv1beta1.RecreateUpdateStrategyType}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hub := &extv1beta1.SandboxWarmPool{ObjectMeta: metav1.ObjectMeta{Name: "p"}}
			hub.Spec.Replicas = tc.replicas
			hub.Spec.UpdateStrategy = tc.strategy
			hub.Spec.SandboxTemplateRef.Name = "tmpl"
			hub.Status = extv1beta1.SandboxWarmPoolStatus{Replicas: 2, ReadyReplicas: 1, Selector: "a=b", ObservedGeneration: 7}
			down := &SandboxWarmPool{}
			if err := down.ConvertFrom(hub); err != nil {
				t.Fatal(err)
			}
			if down.Spec.Replicas != tc.want || down.Spec.SandboxTemplateRef.Name != "tmpl" {
				t.Fatalf("spec = %+v, want replicas %d from tmpl", down.Spec, tc.want)
			}
			if !apiequality.Semantic.DeepEqual(down.Spec.UpdateStrategy, tc.strategy) {
				t.Fatalf("updateStrategy = %+v, want %+v", down.Spec.UpdateStrategy, tc.strategy)
			}
			if down.Status != (SandboxWarmPoolStatus{Replicas: 2, ReadyReplicas: 1, Selector: "a=b"}) {
				t.Fatalf("status = %+v", down.Status)
			}
			// A v1alpha1 writer without the hub state gets no observedGeneration.
			plain := down.DeepCopy()
			plain.Annotations = nil
			up := &extv1beta1.SandboxWarmPool{}
			if err := plain.ConvertTo(up); err != nil {
				t.Fatal(err)
			}
			if up.Status.ObservedGeneration != 0 || up.Spec.Replicas == nil || *up.Spec.Replicas != tc.want {
				t.Fatalf("back without state: %+v %+v", up.Spec, up.Status)
			}
		})
	}
}

func claimV1alpha1(name, template, warmpool, bound string) *SandboxClaim {
	c := &SandboxClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
	c.Spec.SandboxTemplateRef.Name = template
	c.Spec.WarmPool = warmpool
	c.Status.SandboxStatus.Name = bound
	return c
}

// TestSandboxClaimToV1beta1 covers the KEP-208 rules for warmPoolRef.
func TestSandboxClaimToV1beta1(t *testing.T) {
	for _, tc := range []struct {
		name      string
		claim     *SandboxClaim
		wantPool  string
		wantState bool
	}{
		{"specific pool", claimV1alpha1("c", "tmpl", "fast-pool", ""), "fast-pool", true},
		{"specific pool named after nothing else", claimV1alpha1("c", "fast-pool", "fast-pool", ""), "fast-pool", false},
		{"warm adopted: generated suffix stripped", claimV1alpha1("c", "tmpl", "default", "python-pool-x7k2p"), "python-pool", true},
		{"default, nothing bound: shadow pool", claimV1alpha1("c", "tmpl", "default", ""), "shadow-pool-tmpl", false},
		{"none, nothing bound: shadow pool", claimV1alpha1("c", "tmpl", "none", ""), "shadow-pool-tmpl", true},
		{"none, cold sandbox named after the claim: shadow pool", claimV1alpha1("c", "tmpl", "none", "c"), "shadow-pool-tmpl", true},
		{"empty policy: shadow pool", claimV1alpha1("c", "tmpl", "", ""), "shadow-pool-tmpl", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hub := &extv1beta1.SandboxClaim{}
			if err := tc.claim.ConvertTo(hub); err != nil {
				t.Fatal(err)
			}
			if hub.Spec.WarmPoolRef.Name != tc.wantPool {
				t.Fatalf("warmPoolRef = %q, want %q", hub.Spec.WarmPoolRef.Name, tc.wantPool)
			}
			if _, ok := hub.Annotations[SandboxClaimStateAnnotation]; ok != tc.wantState {
				t.Fatalf("state annotation present = %v, want %v (%v)", ok, tc.wantState, hub.Annotations)
			}
			back := &SandboxClaim{}
			if err := back.ConvertFrom(hub); err != nil {
				t.Fatal(err)
			}
			if back.Spec.SandboxTemplateRef.Name != tc.claim.Spec.SandboxTemplateRef.Name || back.Spec.WarmPool != tc.claim.Spec.WarmPool {
				t.Fatalf("read back as template %q warmpool %q, want %q %q", back.Spec.SandboxTemplateRef.Name, back.Spec.WarmPool,
					tc.claim.Spec.SandboxTemplateRef.Name, tc.claim.Spec.WarmPool)
			}
			if len(back.Annotations) != 0 {
				t.Fatalf("v1alpha1 claim annotations = %v, want none", back.Annotations)
			}
		})
	}
}

func claimV1beta1(pool, bound string, annotations map[string]string) *extv1beta1.SandboxClaim {
	c := &extv1beta1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", Annotations: annotations}}
	c.Spec.WarmPoolRef.Name = pool
	c.Status.SandboxStatus.Name = bound
	return c
}

const noneState = `{"spec":{"sandboxTemplateRef":{"name":"tmpl"},"warmpool":"none"}}`

// TestSandboxClaimToV1alpha1 covers the way down, with and without state.
func TestSandboxClaimToV1alpha1(t *testing.T) {
	for _, tc := range []struct {
		name               string
		hub                *extv1beta1.SandboxClaim
		wantTmpl, wantPool string
	}{
		{"shadow pool: template and default", claimV1beta1("shadow-pool-tmpl", "", nil), "tmpl", "default"},
		{"other pool: best effort", claimV1beta1("fast-pool", "", nil), "fast-pool", "fast-pool"},
		{"state restored when the ref is the shadow pool", claimV1beta1("shadow-pool-tmpl", "", map[string]string{SandboxClaimStateAnnotation: noneState}), "tmpl", "none"},
		{"state restored when the ref is the bound sandbox's pool", claimV1beta1("python-pool", "python-pool-x7k2p",
			map[string]string{SandboxClaimStateAnnotation: `{"spec":{"sandboxTemplateRef":{"name":"tmpl"},"warmpool":"default"}}`}), "tmpl", "default"},
		{"reference whole-object state", claimV1beta1("fast-pool", "", map[string]string{SandboxClaimStateAnnotation: `{"apiVersion":"extensions.agents.x-k8s.io/v1alpha1","kind":"SandboxClaim","metadata":{"name":"c","namespace":"ns"},"spec":{"sandboxTemplateRef":{"name":"tmpl"},"warmpool":"fast-pool"},"status":{}}`}), "tmpl", "fast-pool"},
		{"moved to another pool: policy follows, template kept", claimV1beta1("other-pool", "", map[string]string{SandboxClaimStateAnnotation: noneState}), "tmpl", "other-pool"},
		{"moved to another shadow pool: template falls back to the original", claimV1beta1("shadow-pool-new", "", map[string]string{SandboxClaimStateAnnotation: noneState}), "tmpl", "default"},
		{"garbage state ignored", claimV1beta1("shadow-pool-tmpl", "", map[string]string{SandboxClaimStateAnnotation: "{"}), "tmpl", "default"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := &SandboxClaim{}
			if err := out.ConvertFrom(tc.hub); err != nil {
				t.Fatal(err)
			}
			if out.Spec.SandboxTemplateRef.Name != tc.wantTmpl || out.Spec.WarmPool != tc.wantPool {
				t.Fatalf("template %q warmpool %q, want %q %q", out.Spec.SandboxTemplateRef.Name, out.Spec.WarmPool, tc.wantTmpl, tc.wantPool)
			}
			if _, ok := out.Annotations[SandboxClaimStateAnnotation]; ok {
				t.Fatalf("state annotation leaked to v1alpha1: %v", out.Annotations)
			}
		})
	}
}

// TestSandboxClaimVolumeClaimTemplatesKept: v1alpha1 has no claim VCTs; a
// v1alpha1 read-modify-write keeps them through the hub state annotation,
// and a v1alpha1 writer that changes the policy gets the pool it implies.
func TestSandboxClaimVolumeClaimTemplatesKept(t *testing.T) {
	hub := claimV1beta1("fast-pool", "", nil)
	hub.Spec.VolumeClaimTemplates = []sandboxv1beta1.PersistentVolumeClaimTemplate{{EmbeddedObjectMetadata: sandboxv1beta1.EmbeddedObjectMetadata{Name: "workspace"}}}
	down := &SandboxClaim{}
	if err := down.ConvertFrom(hub); err != nil {
		t.Fatal(err)
	}
	up := &extv1beta1.SandboxClaim{}
	if err := down.ConvertTo(up); err != nil {
		t.Fatal(err)
	}
	if len(up.Spec.VolumeClaimTemplates) != 1 || up.Spec.VolumeClaimTemplates[0].Name != "workspace" {
		t.Fatalf("volumeClaimTemplates = %+v, want workspace kept", up.Spec.VolumeClaimTemplates)
	}

	// "default" stored as a plain pool name: the hub state says the ref was
	// "default", and a writer that switches to none gets the shadow pool.
	hub = claimV1beta1("default", "", nil)
	down = &SandboxClaim{}
	if err := down.ConvertFrom(hub); err != nil {
		t.Fatal(err)
	}
	down.Spec.SandboxTemplateRef.Name, down.Spec.WarmPool = "tmpl", "none"
	up = &extv1beta1.SandboxClaim{}
	if err := down.ConvertTo(up); err != nil {
		t.Fatal(err)
	}
	if up.Spec.WarmPoolRef.Name != "shadow-pool-tmpl" {
		t.Fatalf("warmPoolRef = %q, want shadow-pool-tmpl after the v1alpha1 edit", up.Spec.WarmPoolRef.Name)
	}
}

// TestSandboxClaimStaleStateRoundTripFuzz: a claim written as v1alpha1
// (so its hub carries v1alpha1 state) whose warmPoolRef a v1beta1 writer
// then changed keeps its spec through v1beta1 -> v1alpha1 -> v1beta1 (the
// state annotation itself may be rewritten to match the new ref).
func TestSandboxClaimStaleStateRoundTripFuzz(t *testing.T) {
	names := []string{"default", "none", "pool", "shadow-pool-tmpl", "shadow-pool-other", "pool-abcde"}
	for i := range 500 {
		f := filler(int64(i))
		alpha := &SandboxClaim{}
		f.Fill(alpha)
		hub := &extv1beta1.SandboxClaim{}
		if err := alpha.ConvertTo(hub); err != nil {
			t.Fatalf("seed %d: %v", i, err)
		}
		hub.TypeMeta = metav1.TypeMeta{}
		hub.Spec.WarmPoolRef.Name = names[i%len(names)]
		in := hub.DeepCopy()
		s := &SandboxClaim{}
		if err := s.ConvertFrom(hub); err != nil {
			t.Fatalf("seed %d: ConvertFrom: %v", i, err)
		}
		out := &extv1beta1.SandboxClaim{}
		if err := s.ConvertTo(out); err != nil {
			t.Fatalf("seed %d: ConvertTo: %v", i, err)
		}
		if out.Spec.WarmPoolRef != in.Spec.WarmPoolRef || !apiequality.Semantic.DeepEqual(in.Spec, out.Spec) {
			t.Fatalf("seed %d: warmPoolRef %q -> %q\nin:  %+v\nout: %+v", i, in.Spec.WarmPoolRef.Name, out.Spec.WarmPoolRef.Name, in, out)
		}
	}
}
