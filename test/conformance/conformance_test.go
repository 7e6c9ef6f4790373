// Package conformance runs one scripted scenario through the Go, Python and
// TypeScript SDKs against one integration stack (real apiserver,
// controllers, router, sandboxd) and asserts that the three give the same
// results and leave the same SandboxClaim on the apiserver, so the SDKs stay
// aligned. `make test-conformance` runs it after the Python and TypeScript
// suites have installed their dependencies.
package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"sigs.k8s.io/agent-sandbox/clients/go/sandbox"
	"sigs.k8s.io/agent-sandbox/internal/devstack"
	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// step is one scenario step's outcome in the shared vocabulary: a result
// (JSON) or an error kind (invalid_argument, not_found, error:<type>).
type step struct {
	Step   string          `json:"step"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// want is what every SDK must report, step by step.
var want = []step{
	{Step: "run echo", Result: raw(`{"stdout":"hello\n","stderr":"","exit_code":0}`)},
	{Step: "run failing", Result: raw(`{"stdout":"","stderr":"err\n","exit_code":3}`)},
	{Step: "write", Result: raw(`"ok"`)},
	{Step: "read", Result: raw(`"line1\nline2\n"`)},
	{Step: "list", Result: raw(`[{"name":"conformance.txt","type":"file","size":12}]`)},
	{Step: "exists", Result: raw(`true`)},
	{Step: "exists missing", Result: raw(`false`)},
	{Step: "read missing", Error: "not_found"},
	{Step: "write escaping", Error: "invalid_argument"},
	{Step: "status", Result: raw(`"SandboxReady"`)},
	{Step: "terminate", Result: raw(`"ok"`)},
	{Step: "terminate again", Result: raw(`"ok"`)},
	{Step: "get terminated", Error: "not_found"},
}

func raw(s string) json.RawMessage { return json.RawMessage(s) }

var stack *devstack.Stack

func TestMain(m *testing.M) {
	testenv.ExitIfShort("the devstack and the three SDKs", "make test-conformance")
	ctrllog.SetLogger(logr.Discard())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	var err error
	stack, err = devstack.Start(ctx, devstack.Options{WarmPoolReplicas: 2})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance: starting the integration stack:", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := stack.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "conformance: stopping the stack:", err)
	}
	os.Exit(code)
}

// claimRecorder keeps the first version of every SandboxClaim created in
// the namespace, as the apiserver stored it.
type claimRecorder struct {
	mu     sync.Mutex
	claims map[string]*unstructured.Unstructured
}

func recordClaims(t *testing.T) *claimRecorder {
	t.Helper()
	dyn, err := dynamic.NewForConfig(stack.Config)
	if err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxclaims"}
	w, err := dyn.Resource(gvr).Namespace(stack.Namespace).Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	r := &claimRecorder{claims: map[string]*unstructured.Unstructured{}}
	go func() {
		for ev := range w.ResultChan() {
			if u, ok := ev.Object.(*unstructured.Unstructured); ok && ev.Type == watch.Added {
				r.mu.Lock()
				r.claims[u.GetName()] = u
				r.mu.Unlock()
			}
		}
	}()
	return r
}

// byCreator returns the claims whose created-by label is value.
func (r *claimRecorder) byCreator(value string) []*unstructured.Unstructured {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*unstructured.Unstructured
	for _, u := range r.claims {
		if u.GetLabels()["agents.x-k8s.io/created-by"] == value {
			out = append(out, u)
		}
	}
	return out
}

// goScenario is the scenario through the Go SDK, in process.
func goScenario(t *testing.T) []step {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cl, err := sandbox.NewClient(ctx, sandbox.Options{RestConfig: stack.Config, APIURL: stack.RouterURL, Namespace: stack.Namespace, Quiet: true})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := cl.CreateSandbox(ctx, stack.WarmPool, stack.Namespace)
	if err != nil {
		t.Fatalf("Go SDK CreateSandbox: %v", err)
	}
	claim := sb.ClaimName()
	var steps []step
	do := func(name string, fn func() (any, error)) {
		v, err := fn()
		if err != nil {
			steps = append(steps, step{Step: name, Error: goErrorKind(err)})
			return
		}
		b, _ := json.Marshal(v)
		steps = append(steps, step{Step: name, Result: b})
	}
	run := func(cmd string) func() (any, error) {
		return func() (any, error) {
			r, err := sb.Run(ctx, cmd)
			if err != nil {
				return nil, err
			}
			return map[string]any{"stdout": r.Stdout, "stderr": r.Stderr, "exit_code": r.ExitCode}, nil
		}
	}
	do("run echo", run("echo hello"))
	do("run failing", run("sh -c 'echo err >&2; exit 3'"))
	do("write", func() (any, error) { return "ok", sb.Files().Write(ctx, "conformance.txt", []byte("line1\nline2\n")) })
	do("read", func() (any, error) {
		b, err := sb.Files().Read(ctx, "conformance.txt")
		return string(b), err
	})
	do("list", func() (any, error) {
		entries, err := sb.Files().List(ctx, ".")
		out := []map[string]any{}
		for _, e := range entries {
			if e.Name == "conformance.txt" {
				out = append(out, map[string]any{"name": e.Name, "type": e.Type, "size": e.Size})
			}
		}
		return out, err
	})
	do("exists", func() (any, error) { return sb.Files().Exists(ctx, "conformance.txt") })
	do("exists missing", func() (any, error) { return sb.Files().Exists(ctx, "missing.txt") })
	do("read missing", func() (any, error) {
		b, err := sb.Files().Read(ctx, "missing.txt")
		return string(b), err
	})
	do("write escaping", func() (any, error) { return "ok", sb.Files().Write(ctx, "../escape.txt", []byte("x")) })
	do("status", func() (any, error) {
		if sb.IsReady() {
			return "SandboxReady", nil
		}
		return "SandboxNotReady", nil
	})
	do("terminate", func() (any, error) { return "ok", sb.Close(ctx) })
	do("terminate again", func() (any, error) { return "ok", sb.Close(ctx) })
	do("get terminated", func() (any, error) {
		s, err := cl.GetSandbox(ctx, claim, stack.Namespace)
		if err != nil {
			return nil, err
		}
		return s.SandboxName(), nil
	})
	return steps
}

func goErrorKind(err error) string {
	switch {
	case errors.Is(err, sandbox.ErrInvalidPath):
		return "invalid_argument"
	case errors.Is(err, sandbox.ErrNotFound):
		return "not_found"
	default:
		return "error:" + err.Error()
	}
}

// external runs a scenario script and parses its last output line.
func external(t *testing.T, name string, cmd *exec.Cmd) []step {
	t.Helper()
	cmd.Env = append(os.Environ(), "ROUTER_URL="+stack.RouterURL, "KUBECONFIG="+stack.Kubeconfig,
		"NAMESPACE="+stack.Namespace, "WARMPOOL="+stack.WarmPool)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s scenario: %v\n%s%s", name, err, out, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var steps []step
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &steps); err != nil {
		t.Fatalf("%s scenario printed no result line: %v\n%s", name, err, out)
	}
	return steps
}

// pythonInterpreter returns a virtualenv's python with this checkout's SDK.
func pythonInterpreter(t *testing.T) string {
	t.Helper()
	venv := filepath.Join(testenv.RepoRoot(), "clients", "python", ".venv")
	py := filepath.Join(venv, "bin", "python")
	if _, err := os.Stat(py); err != nil {
		if out, err := exec.Command("python3", "-m", "venv", venv).CombinedOutput(); err != nil {
			t.Fatalf("creating %s: %v\n%s", venv, err, out)
		}
	}
	if out, err := exec.Command(py, "-m", "pip", "install", "-q", "--disable-pip-version-check",
		filepath.Join(testenv.RepoRoot(), "clients", "python")).CombinedOutput(); err != nil {
		t.Fatalf("installing the Python SDK: %v\n%s", err, out)
	}
	return py
}

// buildTypeScriptSDK installs the TypeScript SDK's dependencies and builds dist/.
func buildTypeScriptSDK(t *testing.T) {
	t.Helper()
	dir := filepath.Join(testenv.RepoRoot(), "clients", "typescript")
	for _, args := range [][]string{{"ci", "--no-audit", "--no-fund", "--loglevel=error"}, {"run", "-s", "build"}} {
		cmd := exec.Command("npm", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

func TestSDKsAgree(t *testing.T) {
	rec := recordClaims(t)
	py := pythonInterpreter(t)
	buildTypeScriptSDK(t)
	here, _ := os.Getwd()

	results := map[string][]step{
		"go-client":         goScenario(t),
		"python-client":     external(t, "Python", exec.Command(py, filepath.Join(here, "scenario.py"))),
		"typescript-client": external(t, "TypeScript", exec.Command("node", filepath.Join(here, "scenario.mjs"))),
	}
	for sdk, got := range results {
		if len(got) != len(want) {
			t.Errorf("%s: %d steps, want %d: %+v", sdk, len(got), len(want), got)
			continue
		}
		for i := range want {
			if !sameStep(got[i], want[i]) {
				t.Errorf("%s, step %q: got result %s error %q; want result %s error %q",
					sdk, want[i].Step, got[i].Result, got[i].Error, want[i].Result, want[i].Error)
			}
		}
	}

	// The claims on the apiserver: one per SDK, same spec, same labels and
	// annotation keys apart from the client's own created-by value.
	var ref map[string]any
	var refLabels, refAnnotations []string
	for _, sdk := range []string{"go-client", "python-client", "typescript-client"} {
		claims := rec.byCreator(sdk)
		if len(claims) != 1 {
			t.Errorf("%s created %d claims, want 1", sdk, len(claims))
			continue
		}
		c := claims[0]
		if !strings.HasPrefix(c.GetName(), "sandbox-claim-") {
			t.Errorf("%s claim name %q lacks the sandbox-claim- prefix", sdk, c.GetName())
		}
		spec, _, _ := unstructured.NestedMap(c.Object, "spec")
		// The Go SDK builds the claim from the typed API, whose struct-valued
		// additionalPodMetadata serialises as {} (as the reference Go SDK's
		// does); an empty object means the same as an absent one.
		pruneEmpty(spec)
		labels, annotations := keys(c.GetLabels()), keys(c.GetAnnotations())
		if ref == nil {
			ref, refLabels, refAnnotations = spec, labels, annotations
			continue
		}
		if !reflect.DeepEqual(spec, ref) {
			t.Errorf("%s claim spec %v differs from the Go SDK's %v", sdk, spec, ref)
		}
		if !reflect.DeepEqual(labels, refLabels) || !reflect.DeepEqual(annotations, refAnnotations) {
			t.Errorf("%s claim labels %v / annotations %v differ from the Go SDK's %v / %v", sdk, labels, annotations, refLabels, refAnnotations)
		}
	}
}

func sameStep(got, want step) bool {
	if got.Step != want.Step || got.Error != want.Error {
		return false
	}
	if want.Result == nil {
		return got.Result == nil
	}
	var g, w any
	if json.Unmarshal(got.Result, &g) != nil || json.Unmarshal(want.Result, &w) != nil {
		return false
	}
	return reflect.DeepEqual(g, w)
}

// pruneEmpty removes empty objects from m, recursively.
func pruneEmpty(m map[string]any) {
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok {
			pruneEmpty(sub)
			if len(sub) == 0 {
				delete(m, k)
			}
		}
	}
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
