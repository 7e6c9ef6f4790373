package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sigs.k8s.io/agent-sandbox/internal/latebind"
	"sigs.k8s.io/agent-sandbox/internal/manager"
)

// serviceAccountNamespace is where a Pod finds its own namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// lateBindingSigner returns the key that signs env deliveries: the key
// file when given, else (with --manage-late-binding-key) the one kept in
// the controller's Secret, else nil (late binding off).
func lateBindingSigner(ctx context.Context, cfg *rest.Config, f *flags) (*latebind.Signer, error) {
	switch {
	case f.lateBindingKeyFile != "":
		signer, err := latebind.LoadSigner(f.lateBindingKeyFile)
		if err != nil {
			return nil, err
		}
		ctrl.Log.Info("late binding enabled with the key file", "file", f.lateBindingKeyFile, "env", latebind.KeyEnv, "value", signer.PublicKey())
		return signer, nil
	case !f.manageLateBindingKey:
		ctrl.Log.Info("late binding disabled: claims with env cold-start")
		return nil, nil
	}
	scheme, err := manager.NewScheme()
	if err != nil {
		return nil, err
	}
	// A direct client: the manager's cache is not running yet, and the
	// controller never lists or watches Secrets.
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("late-binding key client: %w", err)
	}
	ns := controllerNamespace(f)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var (
		signer  *latebind.Signer
		created bool
	)
	err = retryTransient(ctx, func() error {
		var err error
		signer, created, err = latebind.EnsureKeySecret(ctx, c, ns, latebind.DefaultKeySecret)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%w (grant get on Secret %s/%s and create on Secrets, or set --manage-late-binding-key=false to silence this)", err, ns, latebind.DefaultKeySecret)
	}
	ctrl.Log.Info("late binding enabled with the managed key", "secret", ns+"/"+latebind.DefaultKeySecret, "created", created,
		"env", latebind.KeyEnv, "value", signer.PublicKey())
	return signer, nil
}

// controllerNamespace is the namespace the controller runs in: its service
// account's, else --webhook-namespace (the namespace of its other Secret).
func controllerNamespace(f *flags) string {
	if b, err := os.ReadFile(serviceAccountNamespace); err == nil {
		if ns := strings.TrimSpace(string(b)); ns != "" {
			return ns
		}
	}
	return f.webhook.Namespace
}

// retryTransient runs fn until it succeeds, fails for good or ctx ends. A
// failure is transient when the API server did not answer or answered
// 429 or 5xx: a blip at startup must not switch late binding off for the
// life of the process, while a missing permission (403) or namespace (404)
// is reported at once.
func retryTransient(ctx context.Context, fn func() error) error {
	interval := 250 * time.Millisecond
	for {
		err := fn()
		if err == nil || !transientAPIError(err) {
			return err
		}
		ctrl.Log.WithName("startup").Info("late-binding key: API server unavailable, retrying", "error", err.Error(), "in", interval.String())
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		interval = min(2*interval, 5*time.Second)
	}
}

// transientAPIError reports whether err is worth a retry: the request
// never got an answer from the API server (a transport error), or got a
// 429 or 5xx. Anything else, a bad key in the Secret say, is for good.
func transientAPIError(err error) bool {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		code := status.Status().Code
		return code == http.StatusTooManyRequests || code >= 500
	}
	var urlErr *url.Error
	var netErr net.Error
	return errors.As(err, &urlErr) || errors.As(err, &netErr)
}
