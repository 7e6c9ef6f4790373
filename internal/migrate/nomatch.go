package migrate

import "k8s.io/apimachinery/pkg/api/meta"

// isNoMatch reports an API kind the server does not serve (CRD missing).
func isNoMatch(err error) bool { return meta.IsNoMatchError(err) }
