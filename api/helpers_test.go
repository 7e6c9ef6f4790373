package api_test

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func metaCondition(typ, status, reason string) metav1.Condition {
	return metav1.Condition{
		Type:               typ,
		Status:             metav1.ConditionStatus(status),
		Reason:             reason,
		Message:            "set by test",
		LastTransitionTime: metav1.Now(),
	}
}
