package claim

import (
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

func sbWith(conds ...metav1.Condition) *sandboxv1beta1.Sandbox {
	sb := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "sb", Generation: 7}}
	sb.Status.Conditions = conds
	sb.Status.PodIPs = []string{"10.1.2.3"}
	return sb
}

func cond(typ string, s metav1.ConditionStatus, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg, ObservedGeneration: 7,
		LastTransitionTime: metav1.NewTime(time.Unix(500, 0))}
}

func TestApplyStatus(t *testing.T) {
	ready := cond("Ready", metav1.ConditionTrue, "DependenciesReady", "Pod is Ready")
	finished := cond("Finished", metav1.ConditionTrue, "PodSucceeded", "Pod completed successfully")
	cases := []struct {
		name       string
		prior      extv1beta1.SandboxStatus
		sb         *sandboxv1beta1.Sandbox
		err        error
		status     metav1.ConditionStatus
		reason     string
		message    string
		wantName   string
		wantFinish bool
	}{
		{name: "ready sandbox forwarded verbatim", sb: sbWith(ready), status: "True", reason: "DependenciesReady", message: "Pod is Ready", wantName: "sb"},
		{name: "sandbox without Ready", sb: sbWith(), status: "False", reason: "SandboxNotReady", message: "Sandbox is not ready", wantName: "sb"},
		{name: "expired sandbox", sb: sbWith(cond("Ready", "False", "SandboxExpired", "Sandbox has expired")), status: "False", reason: "SandboxExpired",
			message: "Underlying Sandbox resource has expired independently of the Claim.", wantName: "sb"},
		{name: "finished mirrored", sb: sbWith(cond("Ready", "False", "PodSucceeded", "Pod completed successfully"), finished),
			status: "False", reason: "PodSucceeded", message: "Pod completed successfully", wantName: "sb", wantFinish: true},
		{name: "gone without error clears the binding", prior: extv1beta1.SandboxStatus{Name: "old"}, status: "False", reason: "SandboxMissing", message: "Sandbox does not exist"},
		{name: "transient error keeps the binding", prior: extv1beta1.SandboxStatus{Name: "old"}, err: errors.New("etcd timeout"),
			status: "False", reason: "ReconcilerError", message: "Error seen: etcd timeout", wantName: "old"},
		{name: "pool missing keeps the binding", prior: extv1beta1.SandboxStatus{Name: "old"}, err: errWarmPoolNotFound("p"),
			status: "False", reason: "WarmPoolNotFound", message: `SandboxWarmPool "p" not found`, wantName: "old"},
		{name: "invalid metadata", err: errInvalidMetadata(errors.New(`label "team" must have a domain prefix`)),
			status: "False", reason: "InvalidMetadata", message: `invalid additionalPodMetadata: label "team" must have a domain prefix`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			claim := testClaim()
			claim.Status.SandboxStatus = c.prior
			if c.name == "finished mirrored" {
				claim.Status.Conditions = nil
			}
			applyStatus(claim, c.sb, c.err)
			r := meta.FindStatusCondition(claim.Status.Conditions, "Ready")
			if r == nil || r.Status != c.status || r.Reason != c.reason || r.Message != c.message || r.ObservedGeneration != 3 {
				t.Fatalf("Ready = %+v", r)
			}
			if claim.Status.SandboxStatus.Name != c.wantName {
				t.Errorf("sandbox name = %q, want %q", claim.Status.SandboxStatus.Name, c.wantName)
			}
			f := meta.FindStatusCondition(claim.Status.Conditions, "Finished")
			if (f != nil) != c.wantFinish {
				t.Errorf("Finished = %+v", f)
			}
			if f != nil && !f.LastTransitionTime.Equal(&finished.LastTransitionTime) {
				t.Error("Finished must keep the Sandbox's transition time (the TTL counts from it)")
			}
			for i := 1; i < len(claim.Status.Conditions); i++ {
				if claim.Status.Conditions[i-1].Type > claim.Status.Conditions[i].Type {
					t.Error("conditions not sorted by type")
				}
			}
		})
	}
}

func TestApplyStatusRemovesFinishedWhenSandboxHasNone(t *testing.T) {
	claim := testClaim()
	claim.Status.Conditions = []metav1.Condition{cond("Finished", "True", "PodSucceeded", "")}
	applyStatus(claim, sbWith(cond("Ready", "True", "DependenciesReady", "")), nil)
	if meta.FindStatusCondition(claim.Status.Conditions, "Finished") != nil {
		t.Fatal("Finished kept although the Sandbox has none")
	}
	if ips := claim.Status.SandboxStatus.PodIPs; len(ips) != 1 || ips[0] != "10.1.2.3" {
		t.Fatalf("podIPs = %v", ips)
	}
}

func TestExpiryTime(t *testing.T) {
	at := func(s int64) *metav1.Time { t := metav1.NewTime(time.Unix(s, 0)); return &t }
	ttl := func(n int32) *int32 { return &n }
	finishedAt := func(s int64) []metav1.Condition {
		return []metav1.Condition{{Type: "Finished", Status: "True", LastTransitionTime: *at(s)}}
	}
	cases := []struct {
		name  string
		lc    *extv1beta1.Lifecycle
		conds []metav1.Condition
		want  int64 // 0 = none
	}{
		{"no lifecycle", nil, finishedAt(100), 0},
		{"shutdown time only", &extv1beta1.Lifecycle{ShutdownTime: at(500)}, nil, 500},
		{"ttl without finished", &extv1beta1.Lifecycle{TTLSecondsAfterFinished: ttl(10)}, nil, 0},
		{"ttl after finished", &extv1beta1.Lifecycle{TTLSecondsAfterFinished: ttl(10)}, finishedAt(100), 110},
		{"ttl earlier than shutdown", &extv1beta1.Lifecycle{ShutdownTime: at(500), TTLSecondsAfterFinished: ttl(10)}, finishedAt(100), 110},
		{"shutdown earlier than ttl", &extv1beta1.Lifecycle{ShutdownTime: at(105), TTLSecondsAfterFinished: ttl(10)}, finishedAt(100), 105},
		{"delete policy without ttl keeps a finished claim", &extv1beta1.Lifecycle{ShutdownPolicy: extv1beta1.ClaimShutdownPolicyDelete}, finishedAt(100), 0},
		{"ttl zero", &extv1beta1.Lifecycle{TTLSecondsAfterFinished: ttl(0)}, finishedAt(100), 100},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			claim := testClaim()
			claim.Spec.Lifecycle = c.lc
			claim.Status.Conditions = c.conds
			got, ok := expiryTime(claim)
			if c.want == 0 {
				if ok {
					t.Fatalf("expires at %v, want never", got)
				}
				return
			}
			if !ok || got.Unix() != c.want {
				t.Fatalf("expires at %v (%v), want %d", got, ok, c.want)
			}
		})
	}
}

func TestSandboxStatusRelevantChange(t *testing.T) {
	base := sbWith(cond("Ready", "True", "DependenciesReady", "Pod is Ready"), cond("PodScheduled", "True", "PodScheduled", ""))
	now := metav1.Now()
	cases := []struct {
		name string
		edit func(*sandboxv1beta1.Sandbox)
		want bool
	}{
		{"no change", func(*sandboxv1beta1.Sandbox) {}, false},
		{"irrelevant condition", func(sb *sandboxv1beta1.Sandbox) { sb.Status.Conditions[1].Message = "x" }, false},
		{"labels only", func(sb *sandboxv1beta1.Sandbox) { sb.Labels = map[string]string{"a": "b"} }, false},
		{"deletion starts", func(sb *sandboxv1beta1.Sandbox) { sb.DeletionTimestamp = &now }, true},
		{"pod IPs", func(sb *sandboxv1beta1.Sandbox) { sb.Status.PodIPs = []string{"10.9.9.9"} }, true},
		{"Ready reason only", func(sb *sandboxv1beta1.Sandbox) { sb.Status.Conditions[0].Reason = "SandboxExpired" }, true},
		{"Finished appears", func(sb *sandboxv1beta1.Sandbox) {
			sb.Status.Conditions = append(sb.Status.Conditions, cond("Finished", "True", "PodSucceeded", ""))
		}, true},
		{"controller changes (our adoption lands)", func(sb *sandboxv1beta1.Sandbox) {
			sb.OwnerReferences = []metav1.OwnerReference{{Kind: "SandboxClaim", Name: "c", UID: "u", Controller: ptrTrue()}}
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := base.DeepCopy()
			c.edit(n)
			if got := relevantChange(base, n); got != c.want {
				t.Fatalf("relevantChange = %v, want %v", got, c.want)
			}
		})
	}
}

func ptrTrue() *bool { b := true; return &b }

// The status patch is the wire format the write-budget tests count: the
// claim's resourceVersion as precondition and the whole status, with
// emptied conditions and sandbox sent as null so that they are cleared.
func TestStatusPatchBytes(t *testing.T) {
	cleared := &extv1beta1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "41"}}
	set := cleared.DeepCopy()
	set.Status.Conditions = []metav1.Condition{cond("Ready", metav1.ConditionTrue, "SandboxReady", "ok")}
	set.Status.SandboxStatus = extv1beta1.SandboxStatus{Name: "sb", PodIPs: []string{"10.1.2.3"}}
	cases := []struct {
		name  string
		claim *extv1beta1.SandboxClaim
		want  string
	}{
		{"cleared", cleared, `{"metadata":{"resourceVersion":"41"},"status":{"conditions":null,"sandbox":null}}`},
		{"set", set, `{"metadata":{"resourceVersion":"41"},"status":{"conditions":[{"type":"Ready","status":"True","observedGeneration":7,` +
			`"lastTransitionTime":"1970-01-01T00:08:20Z","reason":"SandboxReady","message":"ok"}],"sandbox":{"name":"sb","podIPs":["10.1.2.3"]}}}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := statusPatch(c.claim).Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}
