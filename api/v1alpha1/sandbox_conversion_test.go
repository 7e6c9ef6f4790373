package v1alpha1

import (
	"testing"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/randfill"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// filler fills objects at random, keeping enum fields inside the values the
// apiserver accepts (a random operatingMode is rejected by the schema long
// before any conversion sees it).
func filler(seed int64) *randfill.Filler {
	modes := []sandboxv1beta1.OperatingMode{"", sandboxv1beta1.OperatingModeRunning, sandboxv1beta1.OperatingModeSuspended}
	return randfill.NewWithSeed(seed).NilChance(0.3).NumElements(0, 2).MaxDepth(6).Funcs(
		func(s *sandboxv1beta1.SandboxSpec, c randfill.Continue) {
			c.FillNoCustom(s)
			s.OperatingMode = modes[c.Intn(len(modes))]
		},
	)
}

// TestSandboxHubRoundTripFuzz: v1beta1 -> v1alpha1 -> v1beta1 is the
// identity for any Sandbox, including the v1beta1-only status.nodeName.
func TestSandboxHubRoundTripFuzz(t *testing.T) {
	for i := range 500 {
		f := filler(int64(i))
		in := &sandboxv1beta1.Sandbox{}
		f.Fill(in)
		in.TypeMeta = metav1.TypeMeta{}
		spoke := &Sandbox{}
		if err := spoke.ConvertFrom(in.DeepCopy()); err != nil {
			t.Fatalf("seed %d: ConvertFrom: %v", i, err)
		}
		out := &sandboxv1beta1.Sandbox{}
		if err := spoke.ConvertTo(out); err != nil {
			t.Fatalf("seed %d: ConvertTo: %v", i, err)
		}
		if !apiequality.Semantic.DeepEqual(in, out) {
			t.Fatalf("seed %d: round trip changed the Sandbox:\nin:  %+v\nout: %+v", i, in, out)
		}
	}
}

// TestSandboxSpokeRoundTripFuzz: a v1alpha1 Sandbox with replicas 0 or 1
// (the only values the schema accepts) survives v1alpha1 -> v1beta1 ->
// v1alpha1, except status.replicas, which is always derived from the mode.
func TestSandboxSpokeRoundTripFuzz(t *testing.T) {
	for i := range 500 {
		f := randfill.NewWithSeed(int64(i)).NilChance(0.3).NumElements(0, 2).MaxDepth(6)
		in := &Sandbox{}
		f.Fill(in)
		in.TypeMeta = metav1.TypeMeta{}
		in.Spec.Replicas = ptr.To(int32(i % 2))
		in.Status.Replicas = int32(i % 2)
		hub := &sandboxv1beta1.Sandbox{}
		if err := in.DeepCopy().ConvertTo(hub); err != nil {
			t.Fatalf("seed %d: ConvertTo: %v", i, err)
		}
		out := &Sandbox{}
		if err := out.ConvertFrom(hub); err != nil {
			t.Fatalf("seed %d: ConvertFrom: %v", i, err)
		}
		if !apiequality.Semantic.DeepEqual(in, out) {
			t.Fatalf("seed %d: round trip changed the Sandbox:\nin:  %+v\nout: %+v", i, in, out)
		}
	}
}

func TestSandboxReplicasToOperatingMode(t *testing.T) {
	for _, tc := range []struct {
		name     string
		replicas *int32
		want     sandboxv1beta1.OperatingMode
	}{
		{"nil runs", nil, sandboxv1beta1.OperatingModeRunning},
		{"1 runs", ptr.To(int32(1)), sandboxv1beta1.OperatingModeRunning},
		{"0 suspends", ptr.To(int32(0)), sandboxv1beta1.OperatingModeSuspended},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := &Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Spec: SandboxSpec{Replicas: tc.replicas}}
			in.Status.Replicas = 1
			hub := &sandboxv1beta1.Sandbox{}
			if err := in.ConvertTo(hub); err != nil {
				t.Fatal(err)
			}
			if hub.Spec.OperatingMode != tc.want {
				t.Fatalf("operatingMode = %q, want %q", hub.Spec.OperatingMode, tc.want)
			}
			if hub.Status.NodeName != "" {
				t.Fatalf("status.nodeName = %q, want empty coming from v1alpha1", hub.Status.NodeName)
			}
			if len(hub.Annotations) != 0 {
				t.Fatalf("annotations = %v, want none (nothing lost)", hub.Annotations)
			}
		})
	}
}

func TestSandboxOperatingModeToReplicas(t *testing.T) {
	for _, tc := range []struct {
		mode sandboxv1beta1.OperatingMode
		want int32
	}{
		{sandboxv1beta1.OperatingModeRunning, 1},
		{sandboxv1beta1.OperatingModeSuspended, 0},
		{"", 1},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			hub := &sandboxv1beta1.Sandbox{Spec: sandboxv1beta1.SandboxSpec{OperatingMode: tc.mode}}
			hub.Status.NodeName = "node-1"
			out := &Sandbox{}
			if err := out.ConvertFrom(hub); err != nil {
				t.Fatal(err)
			}
			if out.Spec.Replicas == nil || *out.Spec.Replicas != tc.want {
				t.Fatalf("spec.replicas = %v, want %d", out.Spec.Replicas, tc.want)
			}
			if out.Status.Replicas != tc.want {
				t.Fatalf("status.replicas = %d, want %d (best effort from the mode)", out.Status.Replicas, tc.want)
			}
			if _, ok := out.Annotations[SandboxHubStateAnnotation]; !ok {
				t.Fatalf("nodeName not kept in %s: %v", SandboxHubStateAnnotation, out.Annotations)
			}
		})
	}
}

// TestSandboxReferenceState: a hub carrying the reference implementation's
// whole-object state annotation converts to v1alpha1 with the annotation
// stripped; a garbage value does not make the object unreadable.
func TestSandboxReferenceState(t *testing.T) {
	for _, tc := range []struct{ name, state string }{
		{"whole object", `{"apiVersion":"agents.x-k8s.io/v1alpha1","kind":"Sandbox","metadata":{"name":"s"},"spec":{"replicas":1,"podTemplate":{"spec":{"containers":[]}}},"status":{"replicas":0}}`},
		{"garbage", `{not json`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hub := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "s", Annotations: map[string]string{SandboxStateAnnotation: tc.state, "keep": "me"}}}
			hub.Spec.OperatingMode = sandboxv1beta1.OperatingModeRunning
			out := &Sandbox{}
			if err := out.ConvertFrom(hub); err != nil {
				t.Fatalf("ConvertFrom: %v", err)
			}
			if _, ok := out.Annotations[SandboxStateAnnotation]; ok || out.Annotations["keep"] != "me" {
				t.Fatalf("annotations = %v, want state stripped and others kept", out.Annotations)
			}
			if *out.Spec.Replicas != 1 || out.Status.Replicas != 1 {
				t.Fatalf("replicas spec=%d status=%d, want 1/1 (status follows the mode, not stale state)", *out.Spec.Replicas, out.Status.Replicas)
			}
		})
	}
}

// TestSandboxBadHubState: a v1alpha1 write carrying an unparsable hub state
// annotation is refused with a clear error instead of silently dropping it.
func TestSandboxBadHubState(t *testing.T) {
	in := &Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "s", Annotations: map[string]string{SandboxHubStateAnnotation: "nope"}}}
	if err := in.ConvertTo(&sandboxv1beta1.Sandbox{}); err == nil {
		t.Fatal("ConvertTo accepted an invalid state annotation")
	}
}
