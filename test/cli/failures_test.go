package cli_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/devstack"
	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// within polls cond for at most d (a bound the behaviour promises, not a
// guard against hangs).
func within(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s not within %s", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMissingImageSurfaced: a sandbox whose image cannot be pulled says
// so everywhere a user looks: the progress of `create --wait`, `ls -o
// wide`, a Warning event on the Sandbox, and the error create --wait
// ends with; and the failed create deletes what it made.
func TestMissingImageSurfaced(t *testing.T) {
	st := devstackTarget(t)
	stack := sharedStack(t)
	ctx := context.Background()
	const name = "noimage"
	t.Cleanup(func() { cli(t, st, "", "rm", "--ignore-not-found", name) })

	var tmpl extv1beta1.SandboxTemplate
	if err := stack.Client.Get(ctx, types.NamespacedName{Namespace: st.namespace, Name: st.template}, &tmpl); err != nil {
		t.Fatal(err)
	}
	bad := &extv1beta1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: st.namespace, Name: "missing-image"}}
	tmpl.Spec.DeepCopyInto(&bad.Spec)
	image := devstack.UnpullableRegistry + "no/such-image:1"
	bad.Spec.PodTemplate.Spec.Containers[0].Image = image
	if err := stack.Client.Create(ctx, bad); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stack.Client.Delete(ctx, bad) })

	cctx, cancel := context.WithTimeout(ctx, cliTimeout)
	defer cancel()
	create := exec.CommandContext(cctx, binary, "create", "--template", "missing-image", "--name", name, "--wait", "--timeout", "25s")
	create.Env = cliEnv(st)
	var stdout, stderr testenv.SyncBuffer
	create.Stdout, create.Stderr = &stdout, &stderr
	if err := create.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- create.Wait() }()

	// The Pod appears; report what a kubelet reports for a missing image.
	var pod corev1.Pod
	eventually(t, "the sandbox's Pod", func() bool {
		return stack.Client.Get(ctx, types.NamespacedName{Namespace: st.namespace, Name: name}, &pod) == nil
	})
	now := metav1.Now()
	pod.Status = corev1.PodStatus{
		Phase: corev1.PodPending,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady", LastTransitionTime: now},
		},
		ContainerStatuses: []corev1.ContainerStatus{{
			Name: pod.Spec.Containers[0].Name, Image: image,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
				Reason:  "ErrImagePull",
				Message: `failed to pull and unpack image "` + image + `": not found`,
			}},
		}},
	}
	if err := stack.Client.Status().Update(ctx, &pod); err != nil {
		t.Fatal(err)
	}
	wantProblem := `container "` + pod.Spec.Containers[0].Name + `" cannot pull image "` + image + `" (ErrImagePull)`

	var wide string
	within(t, 10*time.Second, "the image problem in `ls -o wide`", func() bool {
		wide = cli(t, st, "", "ls", "-o", "wide").stdout
		return strings.Contains(wide, wantProblem)
	})
	if !strings.Contains(wide, "DependenciesNotReady") {
		t.Errorf("ls -o wide lost the Ready reason:\n%s", wide)
	}
	within(t, 10*time.Second, "the image problem in create's progress", func() bool {
		return strings.Contains(stderr.String(), "sandbox "+name+" is not starting: "+wantProblem)
	})
	within(t, 10*time.Second, "a Warning event on the Sandbox", func() bool {
		var evs eventsv1.EventList
		if err := stack.Client.List(ctx, &evs, client.InNamespace(st.namespace)); err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Regarding.Kind == "Sandbox" && e.Regarding.Name == name && e.Type == corev1.EventTypeWarning &&
				e.Reason == "ErrImagePull" && strings.Contains(e.Note, "not found") {
				return true
			}
		}
		return false
	})

	// describe shows the problem and the event while the sandbox exists.
	r := ok(t, st, "describe", name)
	for _, want := range []string{"Problem:", wantProblem, "Events:", "Warning", "ErrImagePull", "sandbox-controller", "not found"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("describe %s lacks %q:\n%s", name, want, r.stdout)
		}
	}

	if err := <-exited; err == nil {
		t.Fatalf("create --wait succeeded:\n%s", stderr.String())
	}
	r = result{stdout: stdout.String(), stderr: stderr.String(), code: create.ProcessState.ExitCode()}
	line := oneLineError(t, r, "agent-sandbox")
	t.Logf("create --wait ended with: %s", line)
	for _, want := range []string{"is not Ready after 25s", wantProblem, "deleted Sandbox default/" + name, "fix: check the image name", "--keep-on-failure"} {
		if !strings.Contains(line, want) {
			t.Errorf("create's error lacks %q: %q", want, line)
		}
	}
	if r.stdout != "" {
		t.Errorf("a failed create printed a name: %q", r.stdout)
	}
	eventually(t, "the failed sandbox deleted", func() bool {
		err := stack.Client.Get(ctx, types.NamespacedName{Namespace: st.namespace, Name: name}, &sandboxv1beta1.Sandbox{})
		return apierrors.IsNotFound(err)
	})
}

// TestFailedCreateLeavesNothing: a create that cannot work is refused
// before anything exists (a warm pool that is not there, -e on a template
// that refuses variables), and one the claim controller refuses (a pod
// label outside the allowed domains) is deleted again; no Failed claim
// stays behind.
func TestFailedCreateLeavesNothing(t *testing.T) {
	st := devstackTarget(t)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"create", "--pool", "no-such-pool", "-l", "test=leaks"},
			[]string{"SandboxWarmPool default/no-such-pool not found", "fix: warm pools in default: " + st.pool}},
		{[]string{"create", "--pool", "no-such-pool", "-l", "test=leaks", "--wait"},
			[]string{"SandboxWarmPool default/no-such-pool not found"}},
		{[]string{"create", "--pool", st.pool, "-l", "test=leaks", "-e", "A=b"},
			[]string{"does not allow environment variables", "fix: drop -e"}},
		{[]string{"create", "--pool", st.pool, "-l", "test=leaks", "--pod-label", "team=x", "--wait"},
			[]string{"InvalidMetadata", "deleted SandboxClaim default/"}},
	} {
		line := oneLineError(t, cli(t, st, "", tc.args...), "agent-sandbox")
		t.Logf("%v: %s", tc.args, line)
		for _, w := range tc.want {
			if !strings.Contains(line, w) {
				t.Errorf("%v: %q lacks %q", tc.args, line, w)
			}
		}
		eventually(t, "no claim left by "+strings.Join(tc.args, " "), func() bool {
			return cli(t, st, "", "ls", "-l", "test=leaks", "-o", "name").stdout == ""
		})
	}
}

// TestDefaultLifetime: sandboxes made by the CLI expire after an hour
// unless told otherwise (--shutdown-after, $AGENT_SANDBOX_SHUTDOWN_AFTER;
// 0 = never).
func TestDefaultLifetime(t *testing.T) {
	st := devstackTarget(t)
	stack := sharedStack(t)
	t.Cleanup(func() {
		cli(t, st, "", "rm", "--ignore-not-found", "life-default", "life-never", "life-env", "life-tmpl")
	})
	shutdown := func(name string) time.Duration {
		t.Helper()
		var c extv1beta1.SandboxClaim
		if err := stack.Client.Get(context.Background(), types.NamespacedName{Namespace: st.namespace, Name: name}, &c); err != nil {
			t.Fatal(err)
		}
		if c.Spec.Lifecycle == nil || c.Spec.Lifecycle.ShutdownTime == nil {
			return 0
		}
		if c.Spec.Lifecycle.ShutdownPolicy != extv1beta1.ClaimShutdownPolicyDelete {
			t.Errorf("%s: shutdown policy %q", name, c.Spec.Lifecycle.ShutdownPolicy)
		}
		return time.Until(c.Spec.Lifecycle.ShutdownTime.Time)
	}
	ok(t, st, "create", "--pool", st.pool, "--name", "life-default")
	if d := shutdown("life-default"); d < 58*time.Minute || d > time.Hour {
		t.Errorf("default lifetime: shuts down in %s, want about 1h", d)
	}
	ok(t, st, "create", "--pool", st.pool, "--name", "life-never", "--shutdown-after", "0")
	if d := shutdown("life-never"); d != 0 {
		t.Errorf("--shutdown-after 0: shuts down in %s, want never", d)
	}
	cmd := exec.Command(binary, "create", "--pool", st.pool, "--name", "life-env")
	cmd.Env = append(cliEnv(st), "AGENT_SANDBOX_SHUTDOWN_AFTER=2h")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("create with $AGENT_SANDBOX_SHUTDOWN_AFTER: %v\n%s", err, out)
	}
	if d := shutdown("life-env"); d < 118*time.Minute || d > 2*time.Hour {
		t.Errorf("$AGENT_SANDBOX_SHUTDOWN_AFTER=2h: shuts down in %s", d)
	}
	ok(t, st, "create", "--template", st.template, "--name", "life-tmpl")
	var sb sandboxv1beta1.Sandbox
	if err := stack.Client.Get(context.Background(), types.NamespacedName{Namespace: st.namespace, Name: "life-tmpl"}, &sb); err != nil {
		t.Fatal(err)
	}
	if sb.Spec.ShutdownTime == nil || time.Until(sb.Spec.ShutdownTime.Time) < 58*time.Minute {
		t.Errorf("template sandbox lifetime: %v", sb.Spec.ShutdownTime)
	}
}
