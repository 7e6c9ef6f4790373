package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var secrets = schema.GroupResource{Resource: "secrets"}

func TestTransientAPIError(t *testing.T) {
	refused := &url.Error{Op: "Get", URL: "https://10.0.0.1/api", Err: syscall.ECONNREFUSED}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", fmt.Errorf("reading key: %w", refused), true},
		{"500", apierrors.NewInternalError(errors.New("etcd")), true},
		{"503", apierrors.NewServiceUnavailable("starting"), true},
		{"429", apierrors.NewTooManyRequests("slow down", 1), true},
		{"timeout", apierrors.NewTimeoutError("slow", 1), true},
		{"403", fmt.Errorf("reading key: %w", apierrors.NewForbidden(secrets, "k", errors.New("rbac"))), false},
		{"404", apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "ns"), false},
		{"bad key", errors.New("late-binding key: malformed PEM"), false},
	} {
		if got := transientAPIError(tc.err); got != tc.want {
			t.Errorf("%s: transient = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestRetryTransient(t *testing.T) {
	refused := &url.Error{Op: "Get", URL: "https://10.0.0.1/api", Err: syscall.ECONNREFUSED}
	calls := 0
	err := retryTransient(context.Background(), func() error {
		if calls++; calls < 3 {
			return refused
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Errorf("after two refusals: err = %v, calls = %d; want nil, 3", err, calls)
	}

	calls = 0
	forbidden := apierrors.NewForbidden(secrets, "k", errors.New("rbac"))
	err = retryTransient(context.Background(), func() error { calls++; return forbidden })
	if !apierrors.IsForbidden(err) || calls != 1 {
		t.Errorf("forbidden: err = %v, calls = %d; want it at once", err, calls)
	}

	ctx, cancel := context.WithCancel(context.Background())
	calls = 0
	err = retryTransient(ctx, func() error {
		if calls++; calls == 2 {
			cancel()
		}
		return refused
	})
	if !errors.Is(err, syscall.ECONNREFUSED) || calls != 2 {
		t.Errorf("cancelled: err = %v, calls = %d; want the last refusal after 2", err, calls)
	}
}
