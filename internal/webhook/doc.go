// Package webhook serves the v1alpha1 <-> v1beta1 conversion webhook of the
// four CRDs from the controller binary and, unless told otherwise, manages
// its TLS material: a self-signed CA and a serving certificate for the
// webhook Service, kept in one Secret of the controller's namespace, renewed
// before expiry, and the CA patched into the CRDs' conversion caBundle.
//
// Every replica serves conversions (the apiserver may pick any endpoint),
// so certificate management is not leader-elected: replicas converge on the
// Secret through optimistic locking, and the CA bundle keeps the previous CA
// until it expires so a replica still serving an older certificate is
// trusted while it catches up.
package webhook
