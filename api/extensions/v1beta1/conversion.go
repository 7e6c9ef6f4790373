package v1beta1

// Hub marks v1beta1 as the conversion hub of the extensions kinds: the
// deprecated v1alpha1 kinds convert to and from it (api/extensions/v1alpha1),
// and it is their storage version.
func (*SandboxTemplate) Hub() {}

// Hub marks v1beta1 as the conversion hub of SandboxWarmPool.
func (*SandboxWarmPool) Hub() {}

// Hub marks v1beta1 as the conversion hub of SandboxClaim.
func (*SandboxClaim) Hub() {}
