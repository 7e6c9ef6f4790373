// Package blueprint renders what a SandboxTemplate turns into, as pure
// functions of the template and a caller's inputs, so that every Sandbox
// made from a template is made the same way:
//
//   - the Sandbox of a claim's cold start (ForClaim), of a warm pool
//     member (ForPool) and of `agent-sandbox create --template` (ForDirect),
//     all starting from Spec: the template's blueprint with the secure pod
//     defaults (ApplySecureDefaults) and, for pool members, the
//     controller's late-binding key (latebind.InjectKey's rule);
//   - the labels and annotations every such Sandbox carries (the template
//     reference, its name hash as the NetworkPolicy pod selector, the
//     launch type);
//   - the template's rollout hashes (Hash, PodTemplateHash) and the
//     semantic comparison that decides whether a Sandbox is still what the
//     template renders (Matches);
//   - the spec of the template's shared NetworkPolicy (NetworkPolicySpec),
//     which the template controller converges.
//
// What is a caller's own stays with the caller: names and namespaces,
// owner references, a claim's env and its merge rules for pod metadata and
// volume claim templates, the CLI's env and expiry. Nothing here reads or
// writes the cluster.
package blueprint
