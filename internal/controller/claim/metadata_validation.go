package claim

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

// DefaultAllowedLabelDomain is the only label domain claims may use when
// the operator configures none.
const DefaultAllowedLabelDomain = "sandbox.users.io"

// AllowedLabelDomainsFile is where the controller reads extra allowed label
// domains (ConfigMap agent-sandbox-config, mounted read-only).
const AllowedLabelDomainsFile = "/etc/sandbox-config/allowed-label-domains"

// blockedAnnotationDomains are annotation domains that drive Kubernetes or
// this project's own behaviour; a claim must not set them on its Pod.
var blockedAnnotationDomains = []string{"kubernetes.io", "k8s.io", "agents.x-k8s.io"}

// ParseAllowedLabelDomains splits a comma- or newline-separated list,
// trimming and lower-casing entries and dropping empty ones.
func ParseAllowedLabelDomains(s string) []string {
	var out []string
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '\n' || r == '\r' }) {
		if d := strings.ToLower(strings.TrimSpace(f)); d != "" {
			out = append(out, d)
		}
	}
	return out
}

// ReadAllowedLabelDomains reads the allowed label domains file. A missing
// file means "none configured"; any other read error is returned (the
// controller refuses to start rather than silently fall back).
func ReadAllowedLabelDomains(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading allowed label domains from %s: %w", path, err)
	}
	return ParseAllowedLabelDomains(string(b)), nil
}

// underDomain reports whether domain equals parent or is a subdomain of it.
func underDomain(domain, parent string) bool {
	return domain == parent || strings.HasSuffix(domain, "."+parent)
}

func keyDomain(key string) (string, bool) {
	i := strings.IndexByte(key, '/')
	if i < 0 {
		return "", false
	}
	return strings.ToLower(key[:i]), true
}

// validateAdditionalPodMetadata checks a claim's pod metadata against the
// rules that keep one tenant from impersonating system components:
//
//   - keys must be qualified names and label values valid label values;
//   - app=sandbox-router is refused: the secure NetworkPolicy admits
//     traffic from pods with that label, so a sandbox carrying it could
//     reach every other sandbox;
//   - system keys (agents.x-k8s.io/...) are refused outright;
//   - labels need a domain prefix from the operator's allowlist;
//   - annotations under kubernetes.io, k8s.io and agents.x-k8s.io are
//     refused (they steer the kubelet, autoscalers and this controller),
//     except cluster-autoscaler.kubernetes.io/safe-to-evict.
func validateAdditionalPodMetadata(md sandboxv1beta1.PodMetadata, allowed []string) error {
	if len(allowed) == 0 {
		allowed = []string{DefaultAllowedLabelDomain}
	}
	for _, k := range sortedKeys(md.Labels) {
		if err := validateLabel(k, md.Labels[k], allowed); err != nil {
			// The published controller's wording, which clients show
			// verbatim (e.g. "failed to validate label \"app\": restricted
			// system label value: ...").
			return fmt.Errorf("failed to validate label %q: %w", k, err)
		}
	}
	return validateAnnotations(md.Annotations)
}

func validateLabel(k, v string, allowed []string) error {
	if errs := validation.IsQualifiedName(k); len(errs) > 0 {
		return fmt.Errorf("label key %q is invalid: %s", k, strings.Join(errs, "; "))
	}
	if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
		return fmt.Errorf("label %q has an invalid value: %s", k, strings.Join(errs, "; "))
	}
	if k == "app" && strings.EqualFold(v, "sandbox-router") {
		return fmt.Errorf("restricted system label value: %q=%q is not allowed in AdditionalPodMetadata", k, v)
	}
	if labels.IsSystemKey(k) {
		return fmt.Errorf("label %q is a restricted system label", k)
	}
	d, ok := keyDomain(k)
	if !ok {
		return fmt.Errorf("label %q must have a domain prefix from the allowed domains (%s)", k, strings.Join(allowed, ", "))
	}
	permitted := false
	for _, a := range allowed {
		if underDomain(d, strings.ToLower(a)) {
			permitted = true
			break
		}
	}
	if !permitted {
		return fmt.Errorf("label domain %q is not in the allowlist (configure the allowed-label-domains key of the agent-sandbox-config ConfigMap in the controller namespace; default: %s)", d, DefaultAllowedLabelDomain)
	}
	return nil
}

func validateAnnotations(anns map[string]string) error {
	for _, k := range sortedKeys(anns) {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("annotation key %q is invalid: %s", k, strings.Join(errs, "; "))
		}
		if k == labels.SafeToEvict {
			continue
		}
		if labels.IsSystemKey(k) {
			return fmt.Errorf("annotation %q is a restricted system annotation", k)
		}
		d, ok := keyDomain(k)
		if !ok {
			continue
		}
		for _, b := range blockedAnnotationDomains {
			if underDomain(d, b) {
				return fmt.Errorf("annotation %q uses the restricted domain %q", k, b)
			}
		}
	}
	return nil
}

// mergeNoOverride adds extra to base (copying base) and refuses to change a
// value base already has: a claim may add metadata to its template's, never
// override it.
func mergeNoOverride(kind string, base, extra map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(base)+len(extra))
	for k, v := range base {
		out[k] = v
	}
	for _, k := range sortedKeys(extra) {
		v := extra[k]
		if cur, ok := base[k]; ok && cur != v {
			return nil, fmt.Errorf("metadata override conflict: %s %q is defined in template with value %q, but claim requests %q", kind, k, cur, v)
		}
		out[k] = v
	}
	return out, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
