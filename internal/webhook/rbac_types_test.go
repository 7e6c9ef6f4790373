package webhook

import rbacv1 "k8s.io/api/rbac/v1"

// Aliases keep the RBAC decoding in the test readable.
type (
	rbacRole               = rbacv1.Role
	rbacRoleBinding        = rbacv1.RoleBinding
	rbacClusterRole        = rbacv1.ClusterRole
	rbacClusterRoleBinding = rbacv1.ClusterRoleBinding
)
