package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/cli/remote"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

type createOptions struct {
	pool, template, name string
	labels, env          []string
	podLabels, podAnns   []string
	shutdownAfter        time.Duration
	keepOnFailure        bool
	wait                 bool
	timeout              time.Duration
	output               string
	quiet                bool
}

func newCreateCommand(prog string, flags *clusterFlags) *cobra.Command {
	o := &createOptions{}
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a sandbox from a warm pool (a SandboxClaim) or from a template",
		Long: "Create a sandbox and print its name.\n\n" +
			"With --pool, a SandboxClaim takes a ready sandbox from that SandboxWarmPool (or\n" +
			"starts one from the pool's template when the pool is empty); the claim's name is\n" +
			"the sandbox's name for every other command. With --template, a Sandbox is created\n" +
			"straight from that SandboxTemplate, with no claim (always a cold start). With\n" +
			"neither, the namespace's only warm pool is used. A warm pool that does not exist,\n" +
			"or -e on a template that refuses variables, is refused before anything is created.\n\n" +
			"Every sandbox gets a lifetime: --shutdown-after, by default 1h (or\n" +
			"$" + shutdownAfterEnv + "); 0 keeps it until it is removed.\n\n" +
			"Without --wait the name is printed as soon as the object exists; with --wait the\n" +
			"command returns once the sandbox is Ready, showing progress (and what keeps the\n" +
			"sandbox from starting: a missing image, a crash, no node fits) on stderr. A sandbox\n" +
			"that fails or is not Ready within --timeout is deleted again (--keep-on-failure).",
		Example: "  " + prog + " create --pool python-sandbox-pool --wait\n" +
			"  NAME=$(" + prog + " create --wait) && " + prog + " exec $NAME -- python3 -c 'print(42)'\n" +
			"  " + prog + " create --template python-runtime-template --name scratch -l team=research",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runCreate(cmd, prog, flags, o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.pool, "pool", "", "SandboxWarmPool to claim from")
	f.StringVar(&o.template, "template", "", "SandboxTemplate to create a Sandbox from (no claim, no pool)")
	f.StringVar(&o.name, "name", "", "name of the claim (or Sandbox); generated when empty")
	f.StringArrayVarP(&o.labels, "label", "l", nil, "label KEY=VALUE for the claim (or Sandbox) (repeatable)")
	f.StringArrayVarP(&o.env, "env", "e", nil, "environment variable NAME=VALUE for the sandbox, if its template allows it (repeatable)")
	f.StringArrayVar(&o.podLabels, "pod-label", nil, "label KEY=VALUE for the sandbox's Pod (repeatable)")
	f.StringArrayVar(&o.podAnns, "pod-annotation", nil, "annotation KEY=VALUE for the sandbox's Pod (repeatable)")
	f.DurationVar(&o.shutdownAfter, "shutdown-after", defaultShutdownAfter(),
		"delete the sandbox this long after creation (0 = never); the default comes from $"+shutdownAfterEnv+" when set")
	f.BoolVarP(&o.wait, "wait", "w", false, "wait until the sandbox is Ready; if it does not become Ready, delete it")
	f.BoolVar(&o.keepOnFailure, "keep-on-failure", false, "with --wait, keep a sandbox that failed to become Ready (to inspect it)")
	f.DurationVar(&o.timeout, "timeout", 3*time.Minute, "how long --wait waits")
	f.StringVarP(&o.output, "output", "o", "name", "output: name, json or yaml")
	f.BoolVarP(&o.quiet, "quiet", "q", false, "no progress lines on stderr")
	_ = cmd.RegisterFlagCompletionFunc("pool", completePools(flags))
	_ = cmd.RegisterFlagCompletionFunc("template", completeTemplates(flags))
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"name", "json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func runCreate(cmd *cobra.Command, prog string, flags *clusterFlags, o *createOptions) error {
	switch o.output {
	case "name", "json", "yaml":
	default:
		return usagef("unknown output format %q: use name, json or yaml", o.output)
	}
	if o.pool != "" && o.template != "" {
		return usagef("--pool and --template exclude each other: a claim always takes its template from the pool")
	}
	if o.shutdownAfter < 0 || o.timeout <= 0 {
		return usagef("--shutdown-after must not be negative and --timeout must be positive")
	}
	spec := remote.Spec{Pool: o.pool, Template: o.template, Name: o.name, ShutdownAfter: o.shutdownAfter}
	var err error
	if spec.Labels, err = parseLabels("--label", o.labels); err != nil {
		return err
	}
	if spec.PodLabels, err = parseLabels("--pod-label", o.podLabels); err != nil {
		return err
	}
	if spec.PodAnnotations, err = parsePairs("--pod-annotation", o.podAnns); err != nil {
		return err
	}
	env, err := parsePairs("--env", o.env)
	if err != nil {
		return err
	}
	for _, kv := range o.env { // in order, the last value of a name wins
		k, _, _ := strings.Cut(kv, "=")
		if v, ok := env[k]; ok {
			spec.Env = append(spec.Env, corev1.EnvVar{Name: k, Value: v})
			delete(env, k)
		}
	}
	if o.name != "" {
		if errs := validation.IsDNS1123Subdomain(o.name); len(errs) > 0 {
			return usagef("invalid --name %q: %s", o.name, strings.Join(errs, "; "))
		}
	}

	ctx := cmd.Context()
	s, err := flags.connect(ctx)
	if err != nil {
		return err
	}
	spec.Namespace = s.namespace
	rep := newReporter(cmd.ErrOrStderr(), o.quiet)
	if spec.Pool == "" && spec.Template == "" {
		pool, err := onlyPool(ctx, s.kube(), s.namespace, prog)
		if err != nil {
			return err
		}
		spec.Pool = pool
		rep.step("using warm pool %s, the only one in namespace %s", pool, s.namespace)
	}
	if err := precheck(ctx, s.kube(), spec, prog); err != nil {
		return err
	}
	t, err := remote.Create(ctx, s.kube(), spec)
	if err != nil {
		return err
	}
	kind := "SandboxClaim"
	if t.Claim == nil {
		kind = "Sandbox"
	}
	rep.step("%s %s/%s created", kind, t.Namespace, t.Name())
	if o.wait {
		if err := waitCreated(ctx, rep, s, t, o.timeout, prog); err != nil {
			if o.keepOnFailure {
				return err
			}
			return rollback(err, s, t, kind, prog)
		}
	}
	return printCreated(cmd, t, o.output)
}

// shutdownAfterEnv overrides the default lifetime of created sandboxes.
const shutdownAfterEnv = "AGENT_SANDBOX_SHUTDOWN_AFTER"

// defaultLifetime is how long a sandbox made by the CLI lives unless told
// otherwise: a forgotten sandbox must not hold a node forever.
const defaultLifetime = time.Hour

// defaultShutdownAfter is $AGENT_SANDBOX_SHUTDOWN_AFTER when it parses as
// a duration (0 = never), else defaultLifetime.
func defaultShutdownAfter() time.Duration {
	if v := os.Getenv(shutdownAfterEnv); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d >= 0 {
			return d
		}
	}
	return defaultLifetime
}

// precheck refuses, before anything is created, what the controllers
// would refuse later: a warm pool that does not exist (without --wait the
// claim would just sit there, Failed), and environment variables for a
// template that does not allow them.
func precheck(ctx context.Context, c client.Client, spec remote.Spec, prog string) error {
	tmplName := spec.Template
	if spec.Pool != "" {
		var pool extv1beta1.SandboxWarmPool
		err := c.Get(ctx, types.NamespacedName{Namespace: spec.Namespace, Name: spec.Pool}, &pool)
		switch {
		case apierrors.IsNotFound(err):
			fix := fmt.Sprintf("list warm pools with `kubectl get sandboxwarmpools -n %s`", spec.Namespace)
			if names := poolNames(ctx, c, spec.Namespace); len(names) > 0 {
				fix = fmt.Sprintf("warm pools in %s: %s (e.g. `%s create --pool %s`)", spec.Namespace, strings.Join(names, ", "), prog, names[0])
			}
			return withFix(fmt.Errorf("SandboxWarmPool %s/%s not found", spec.Namespace, spec.Pool), fix)
		case err != nil:
			// Not allowed to read pools, or a hiccup: the claim
			// controller still checks.
			return nil //nolint:nilerr // best-effort pre-check; the controller decides
		}
		tmplName = pool.Spec.SandboxTemplateRef.Name
	}
	if len(spec.Env) == 0 || tmplName == "" {
		return nil
	}
	var tmpl extv1beta1.SandboxTemplate
	if err := c.Get(ctx, types.NamespacedName{Namespace: spec.Namespace, Name: tmplName}, &tmpl); err != nil {
		return nil //nolint:nilerr // best-effort pre-check: the controllers report a missing template
	}
	if spec.Pool != "" && (tmpl.Spec.EnvVarsInjectionPolicy == "" || tmpl.Spec.EnvVarsInjectionPolicy == extv1beta1.EnvVarsInjectionPolicyDisallowed) {
		return withFix(fmt.Errorf("SandboxTemplate %s/%s does not allow environment variables from claims (envVarsInjectionPolicy: Disallowed), so -e would be refused",
			spec.Namespace, tmplName), "drop -e, or set envVarsInjectionPolicy: Allowed on the template")
	}
	return nil
}

func poolNames(ctx context.Context, c client.Client, namespace string) []string {
	var pools extv1beta1.SandboxWarmPoolList
	if err := c.List(ctx, &pools, client.InNamespace(namespace)); err != nil {
		return nil
	}
	names := make([]string, 0, len(pools.Items))
	for _, p := range pools.Items {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	return names
}

// rollback deletes what a create whose wait failed made, so that a failed
// command leaves nothing behind, and says so in the error.
func rollback(cause error, s *session, t *remote.Target, kind, prog string) error {
	// The command's context may be what ended (Ctrl-C): delete anyway.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	msg, fix := describe(cause, prog)
	if err := remote.Delete(ctx, s.kube(), t); err != nil {
		return withFix(fmt.Errorf("%s; deleting %s %s/%s failed too: %w", msg, kind, t.Namespace, t.Name(), err),
			fmt.Sprintf("remove it with `%s rm %s`", prog, t.Name()))
	}
	// The fixes of waitError are about a sandbox that is still there.
	fix = strings.ReplaceAll(fix, fmt.Sprintf("check it with `%s ls -o wide`; remove it with `%s rm %s`", prog, prog, t.Name()), "")
	fix = strings.TrimPrefix(strings.TrimPrefix(strings.TrimSpace(strings.TrimPrefix(fix, ";")), "or "), "; ")
	fix = strings.ReplaceAll(fix, "; ; ", "; ")
	fix = strings.TrimSuffix(strings.TrimSpace(fix), ";")
	if fix != "" {
		fix += "; "
	}
	fix += "pass --keep-on-failure to keep a failed sandbox for inspection"
	return withFix(fmt.Errorf("%s; deleted %s %s/%s", msg, kind, t.Namespace, t.Name()), fix)
}

// waitCreated waits for a new claim or Sandbox to become Ready, reporting
// each milestone and every problem its Pod reports, and refreshes t.
func waitCreated(ctx context.Context, rep *reporter, s *session, t *remote.Target, timeout time.Duration, prog string) error {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var (
		sb  *sandboxv1beta1.Sandbox
		err error
	)
	watch := newProblemWatch(rep, t.Name())
	if t.Claim != nil {
		done := rep.wait("waiting for claim %s to be bound", t.Name())
		sb, err = remote.WaitClaimReadyProgress(wctx, s.kube(), t.Namespace, t.Claim.Name, func(name string) {
			done()
			rep.step("bound to Sandbox %s", name)
			done = rep.wait("waiting for Sandbox %s to become Ready", name)
		}, watch.observe)
		done()
	} else {
		done := rep.wait("waiting for Sandbox %s to become Ready", t.Name())
		sb, err = remote.WaitSandboxReadyProgress(wctx, s.kube(), t.Namespace, t.Sandbox.Name, watch.observe)
		done()
	}
	if err != nil {
		return watch.explain(waitError(ctx, wctx, err, t, timeout, prog))
	}
	rep.step("sandbox %s is Ready (%s launch)", t.Name(), launchType(sb))
	if fresh, rerr := remote.Resolve(ctx, s.kube(), t.Namespace, t.Name()); rerr == nil {
		*t = *fresh
	} else {
		t.Sandbox = sb
	}
	return nil
}

// problemWatch follows a Sandbox being waited for: it reports each new
// problem its Pod has (a missing image, a crash, no node fits) as a
// progress step, and remembers the last Ready message so that a failed
// wait can say where the sandbox got stuck.
type problemWatch struct {
	rep           *reporter
	name          string
	problem, last string
}

func newProblemWatch(rep *reporter, name string) *problemWatch {
	return &problemWatch{rep: rep, name: name}
}

func (w *problemWatch) observe(sb *sandboxv1beta1.Sandbox) {
	if msg := remote.ReadyMessage(sb); msg != "" {
		w.last = msg
	}
	if p := remote.Problem(sb); p != "" && p != w.problem {
		w.problem = p
		w.rep.step("sandbox %s is not starting: %s", w.name, p)
	}
}

// explain adds the last Ready message to a failed wait's error.
func (w *problemWatch) explain(err error) error {
	if err == nil || w.last == "" || strings.Contains(err.Error(), w.last) {
		return err
	}
	var fe *fixError
	if errors.As(err, &fe) {
		fix := fe.fix
		if w.problem != "" {
			fix = problemFix(w.problem, fix)
		}
		return withFix(fmt.Errorf("%w (last status: %s)", fe.err, w.last), fix)
	}
	return fmt.Errorf("%w (last status: %s)", err, w.last)
}

// problemFix suggests what to do about a Pod problem, falling back to fix.
func problemFix(problem, fix string) string {
	switch {
	case strings.Contains(problem, "cannot pull image"):
		return "check the image name and that the node can pull it (registry, credentials); " + fix
	case strings.Contains(problem, "Unschedulable"):
		return "no node can run the sandbox's Pod: lower its resource requests or add capacity; " + fix
	case strings.Contains(problem, "CrashLoopBackOff"), strings.Contains(problem, "terminated with exit code"):
		return "the sandbox's container exits; read its output with `logs`; " + fix
	}
	return fix
}

// waitError explains a failed wait for a sandbox that exists: it is not
// rolled back, so say how to look at it or remove it.
func waitError(ctx, wctx context.Context, err error, t *remote.Target, timeout time.Duration, prog string) error {
	fix := fmt.Sprintf("check it with `%s ls -o wide`; remove it with `%s rm %s`", prog, prog, t.Name())
	switch {
	case ctx.Err() != nil:
		return withFix(fmt.Errorf("interrupted while waiting for sandbox %s/%s, which was created and keeps starting", t.Namespace, t.Name()), fix)
	case wctx.Err() != nil:
		return withFix(fmt.Errorf("sandbox %s/%s is not Ready after %s", t.Namespace, t.Name(), timeout), fix+"; or wait longer with --timeout")
	}
	var failed *remote.FailedError
	if errors.As(err, &failed) {
		return err // describe() knows the fixes of failure reasons
	}
	return withFix(fmt.Errorf("waiting for sandbox %s/%s: %w", t.Namespace, t.Name(), err), fix)
}

func launchType(sb *sandboxv1beta1.Sandbox) string {
	if sb != nil && sb.Labels[labels.LaunchType] != "" {
		return sb.Labels[labels.LaunchType]
	}
	return "unknown"
}

func printCreated(cmd *cobra.Command, t *remote.Target, output string) error {
	out := cmd.OutOrStdout()
	if output == "name" {
		_, err := fmt.Fprintln(out, t.Name())
		return err
	}
	v := newView(t.Claim, t.Sandbox)
	var (
		b   []byte
		err error
	)
	if output == "json" {
		b, err = json.MarshalIndent(v, "", "  ")
		b = append(b, '\n')
	} else {
		b, err = yaml.Marshal(v)
	}
	if err != nil {
		return fmt.Errorf("encoding: %w", err)
	}
	_, err = out.Write(b)
	return err
}

// onlyPool returns the namespace's SandboxWarmPool when there is exactly
// one.
func onlyPool(ctx context.Context, c client.Client, namespace, prog string) (string, error) {
	var pools extv1beta1.SandboxWarmPoolList
	if err := c.List(ctx, &pools, client.InNamespace(namespace)); err != nil {
		return "", fmt.Errorf("listing warm pools in %s: %w", namespace, err)
	}
	switch len(pools.Items) {
	case 1:
		return pools.Items[0].Name, nil
	case 0:
		return "", withFix(fmt.Errorf("no SandboxWarmPool in namespace %s to claim from", namespace),
			"pass --template, another namespace with -n, or create a warm pool")
	}
	names := make([]string, 0, len(pools.Items))
	for _, p := range pools.Items {
		names = append(names, p.Name)
	}
	return "", usagef("namespace %s has several warm pools (%s): choose one with --pool (e.g. `%s create --pool %s`)",
		namespace, strings.Join(names, ", "), prog, names[0])
}

// parsePairs parses KEY=VALUE arguments of flag.
func parsePairs(flag string, args []string) (map[string]string, error) {
	if len(args) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(args))
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			return nil, usagef("%s %q: want KEY=VALUE", flag, a)
		}
		m[k] = v
	}
	return m, nil
}

// parseLabels parses and validates KEY=VALUE labels.
func parseLabels(flag string, args []string) (map[string]string, error) {
	m, err := parsePairs(flag, args)
	if err != nil {
		return nil, err
	}
	for k, v := range m {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return nil, usagef("%s key %q: %s", flag, k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return nil, usagef("%s value %q: %s", flag, v, strings.Join(errs, "; "))
		}
	}
	return m, nil
}
