package v1beta1

// Hub marks v1beta1 as the conversion hub: the deprecated v1alpha1 Sandbox
// converts to and from it (api/v1alpha1), and it is the storage version.
func (*Sandbox) Hub() {}
