package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// TestBareSandbox: Sandboxes without a claim (created with --template,
// or applied directly as kubectl would) are reached by name: exec and cp
// both ways work, as `kubectl exec` does for their Pods.
func TestBareSandbox(t *testing.T) {
	st := devstackTarget(t)
	stack := sharedStack(t)
	t.Cleanup(func() { cli(t, st, "", "rm", "--ignore-not-found", "bare-tmpl", "bare-applied") })

	ok(t, st, "create", "--template", st.template, "--name", "bare-tmpl", "--wait")

	// A Sandbox applied directly, with the template's pod spec.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var tmpl extv1beta1.SandboxTemplate
	if err := stack.Client.Get(ctx, types.NamespacedName{Namespace: st.namespace, Name: st.template}, &tmpl); err != nil {
		t.Fatal(err)
	}
	applied := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: st.namespace, Name: "bare-applied"}}
	tmpl.Spec.SandboxBlueprint.DeepCopyInto(&applied.Spec.SandboxBlueprint)
	if err := stack.Client.Create(ctx, applied); err != nil {
		t.Fatal(err)
	}

	for _, name := range []string{"bare-tmpl", "bare-applied"} {
		// exec waits for the applied one to become Ready.
		r := ok(t, st, "exec", name, "--", "sh", "-c", "echo hello from $0", name)
		if r.stdout != "hello from "+name+"\n" {
			t.Errorf("exec in %s: %q", name, r.stdout)
		}
		src := filepath.Join(t.TempDir(), "in.txt")
		if err := os.WriteFile(src, []byte("payload "+name+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		ok(t, st, "cp", src, name+":in.txt")
		r = ok(t, st, "exec", name, "--", "cat", "in.txt")
		if r.stdout != "payload "+name+"\n" {
			t.Errorf("cp into %s: %q", name, r.stdout)
		}
		back := filepath.Join(t.TempDir(), "back.txt")
		ok(t, st, "cp", name+":in.txt", back)
		if b, err := os.ReadFile(back); err != nil || string(b) != "payload "+name+"\n" {
			t.Errorf("cp out of %s: %q, %v", name, b, err)
		}
	}

	// An idle warm-pool member is not the user's to work in.
	r := ok(t, st, "ls", "--warm", "-o", "name")
	var member string
	for _, n := range strings.Fields(r.stdout) {
		if strings.HasPrefix(n, st.pool+"-") {
			member = n
		}
	}
	if member == "" {
		t.Fatalf("no warm member listed:\n%s", r.stdout)
	}
	line := oneLineError(t, cli(t, st, "", "exec", member, "--", "true"), "agent-sandbox")
	if !strings.Contains(line, "unclaimed warm-pool member") || !strings.Contains(line, "create --pool "+st.pool) {
		t.Errorf("exec in a warm member: %q", line)
	}
}
