package cli_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/devstack"
)

// TestExecErrors: each reason a command cannot start gets its own message
// and fix, instead of "check the command exists" for all of them; and a
// missing working directory is reported as such every time (it used to
// come back as "server closed the stream without sending trailers" in a
// fraction of runs, through the router).
func TestExecErrors(t *testing.T) {
	st := devstackTarget(t)
	stack := sharedStack(t)
	ctx := context.Background()
	ok(t, st, "create", "--pool", st.pool, "--name", "execerr", "--wait")
	t.Cleanup(func() { cli(t, st, "", "rm", "--ignore-not-found", "execerr", "nosandboxd") })

	for i := range 20 {
		line := oneLineError(t, cli(t, st, "", "exec", "execerr", "-w", "nope", "--", "pwd"), "agent-sandbox")
		if !strings.Contains(line, `working directory "nope" does not exist in sandbox execerr`) ||
			!strings.Contains(line, "fix: create it first (`agent-sandbox exec execerr -- mkdir -p nope`)") {
			t.Fatalf("run %d: missing -w directory: %q", i, line)
		}
	}

	// An image without sandboxd: the Pod is Running and Ready, but nothing
	// answers at its address (the stack's kubelet leaves unpullable images
	// alone, so the test reports the Pod's status itself).
	var tmpl extv1beta1.SandboxTemplate
	if err := stack.Client.Get(ctx, types.NamespacedName{Namespace: st.namespace, Name: st.template}, &tmpl); err != nil {
		t.Fatal(err)
	}
	plain := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: st.namespace, Name: "nosandboxd"}}
	tmpl.Spec.SandboxBlueprint.DeepCopyInto(&plain.Spec.SandboxBlueprint)
	plain.Spec.PodTemplate.Spec.Containers[0].Image = devstack.UnpullableRegistry + "debian:plain"
	if err := stack.Client.Create(ctx, plain); err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	eventually(t, "the Pod of nosandboxd", func() bool {
		return stack.Client.Get(ctx, types.NamespacedName{Namespace: st.namespace, Name: "nosandboxd"}, &pod) == nil
	})
	now := metav1.Now()
	const silentIP = "127.254.253.252" // nothing listens there
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: silentIP, PodIPs: []corev1.PodIP{{IP: silentIP}},
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}}
	if err := stack.Client.Status().Update(ctx, &pod); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		args []string
		want []string
		not  string
	}{
		{[]string{"exec", "execerr", "--", "no-such-binary-xyz"},
			[]string{`command "no-such-binary-xyz" not found in sandbox execerr`, "fix: check that no-such-binary-xyz is installed"}, ""},
		{[]string{"exec", "execerr", "--router-url", "http://127.0.0.1:1", "--", "true"},
			[]string{"cannot reach the sandbox-router at --router-url http://127.0.0.1:1: connection refused", "fix: check --router-url"}, "command exists"},
		{[]string{"exec", "execerr", "--router-namespace", "no-router-here", "--", "true"},
			[]string{"no sandbox-router to port-forward to in --router-namespace no-router-here", "fix: pass the namespace the sandbox-router runs in"}, "command exists"},
		{[]string{"exec", "nosandboxd", "--", "true"},
			[]string{"sandbox nosandboxd does not answer", "502 Bad Gateway", "fix: the sandbox's image must run sandboxd"}, "command exists"},
		{[]string{"cp", "nosandboxd:x", t.TempDir()},
			[]string{"sandbox nosandboxd does not answer", "fix: the sandbox's image must run sandboxd"}, ""},
	} {
		line := oneLineError(t, cli(t, st, "", tc.args...), "agent-sandbox")
		t.Logf("%v: %s", tc.args, line)
		for _, w := range tc.want {
			if !strings.Contains(line, w) {
				t.Errorf("%v: %q lacks %q", tc.args, line, w)
			}
		}
		if tc.not != "" && strings.Contains(line, tc.not) {
			t.Errorf("%v: misleading hint in %q", tc.args, line)
		}
	}
}
