package sandbox

import (
	"maps"
	"slices"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

// extensionLabels are the labels a Pod inherits from its Sandbox because an
// extensions controller owns the Sandbox. Key present with value "" means
// "must be absent".
func extensionLabels(sb *sandboxv1beta1.Sandbox) map[string]string {
	out := map[string]string{labels.WarmPoolSandbox: "", labels.SandboxTemplateRefHash: ""}
	gk, ok := extensionOwner(sb)
	if !ok {
		return out
	}
	if v := sb.Labels[labels.WarmPoolSandbox]; v != "" && gk.Kind == "SandboxWarmPool" {
		out[labels.WarmPoolSandbox] = v
	}
	if v := sb.Labels[labels.SandboxTemplateRefHash]; v != "" {
		out[labels.SandboxTemplateRefHash] = v
	}
	return out
}

// podAnnotations returns the user annotations a Pod of sb carries: the pod
// template's, plus the cluster autoscaler's safe-to-evict "true" while a
// SandboxWarmPool controls sb and marked sb itself with it. The pool puts
// that mark on the Sandbox instead of its pod template so that adoption can
// drop it with a metadata patch (no generation bump, so no status write);
// listing it in the tracking annotation makes the next metadata pass remove
// it from the Pod once the pool lets go. A template value always wins.
func podAnnotations(sb *sandboxv1beta1.Sandbox) map[string]string {
	a := labels.UserKeys(sb.Spec.PodTemplate.ObjectMeta.Annotations)
	if _, set := a[labels.SafeToEvict]; set || sb.Annotations[labels.SafeToEvict] != "true" {
		return a
	}
	if gk, ok := extensionOwner(sb); ok && gk.Kind == "SandboxWarmPool" {
		a[labels.SafeToEvict] = "true"
	}
	return a
}

// newPodMetadata returns the labels and annotations of a Pod created for sb.
func newPodMetadata(sb *sandboxv1beta1.Sandbox) (map[string]string, map[string]string) {
	tmplLabels := labels.UserKeys(sb.Spec.PodTemplate.ObjectMeta.Labels)
	tmplAnns := podAnnotations(sb)
	l := maps.Clone(tmplLabels)
	if l == nil {
		l = map[string]string{}
	}
	// Set last so no template value can override the Service selector.
	l[labels.SandboxNameHash] = labels.NameHash(sb.Name)
	for k, v := range extensionLabels(sb) {
		if v != "" {
			l[k] = v
		}
	}
	if v, ok := sb.Labels[labels.CreatedBy]; ok {
		l[labels.CreatedBy] = labels.NormalizeCreatedBy(v)
	}
	a := maps.Clone(tmplAnns)
	if a == nil {
		a = map[string]string{}
	}
	if len(tmplLabels) > 0 {
		a[labels.PropagatedLabels] = labels.JoinKeys(slices.Collect(maps.Keys(tmplLabels)))
	}
	if len(tmplAnns) > 0 {
		a[labels.PropagatedAnnotations] = labels.JoinKeys(slices.Collect(maps.Keys(tmplAnns)))
	}
	return l, a
}

// podMetadataPatch computes what must change on an existing Pod's labels
// and annotations. It is level-based: the tracking annotations say which
// keys this controller put there before, so keys removed from the template
// are removed from the Pod while keys added by others (webhooks) stay.
// A nil value in the returned maps means "delete the key".
func podMetadataPatch(sb *sandboxv1beta1.Sandbox, podLabels, podAnns map[string]string) (map[string]*string, map[string]*string) {
	lp := map[string]*string{}
	ap := map[string]*string{}
	set := func(p map[string]*string, cur map[string]string, k, v string) {
		if old, ok := cur[k]; !ok || old != v {
			p[k] = &v
		}
	}
	del := func(p map[string]*string, cur map[string]string, k string) {
		if _, ok := cur[k]; ok {
			p[k] = nil
		}
	}
	tmplLabels := labels.UserKeys(sb.Spec.PodTemplate.ObjectMeta.Labels)
	tmplAnns := podAnnotations(sb)

	for k, v := range tmplLabels {
		set(lp, podLabels, k, v)
	}
	for _, k := range labels.SplitKeys(podAnns[labels.PropagatedLabels]) {
		if k == labels.SandboxNameHash {
			continue
		}
		if _, keep := tmplLabels[k]; labels.IsSystemKey(k) || !keep {
			del(lp, podLabels, k)
		}
	}
	set(lp, podLabels, labels.SandboxNameHash, labels.NameHash(sb.Name))
	for k, v := range extensionLabels(sb) {
		if v == "" {
			del(lp, podLabels, k)
		} else {
			set(lp, podLabels, k, v)
		}
	}
	if v, ok := sb.Labels[labels.CreatedBy]; ok {
		set(lp, podLabels, labels.CreatedBy, labels.NormalizeCreatedBy(v))
	} else {
		del(lp, podLabels, labels.CreatedBy)
	}

	for k, v := range tmplAnns {
		set(ap, podAnns, k, v)
	}
	for _, k := range labels.SplitKeys(podAnns[labels.PropagatedAnnotations]) {
		if k == labels.PropagatedLabels || k == labels.PropagatedAnnotations {
			continue
		}
		if _, keep := tmplAnns[k]; labels.IsSystemKey(k) || !keep {
			del(ap, podAnns, k)
		}
	}
	// A missing tracking annotation and an empty one mean the same, so a
	// Pod created without them is not patched just to add empty strings.
	track := func(key string, keys map[string]string) {
		want := labels.JoinKeys(slices.Collect(maps.Keys(keys)))
		if cur := podAnns[key]; cur != want {
			set(ap, podAnns, key, want)
		}
	}
	track(labels.PropagatedLabels, tmplLabels)
	track(labels.PropagatedAnnotations, tmplAnns)
	return lp, ap
}
