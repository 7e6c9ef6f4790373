package platform

import (
	"context"
	"fmt"

	"k8s.io/client-go/rest"
)

// ManifestName is the embedded manifest `up` installs; it is the same file
// as dist/sandbox-with-extensions.yaml from `make release-manifests`.
const ManifestName = "sandbox-with-extensions.yaml"

// Manifest returns an embedded manifest by name (ManifestName or
// "default-pool.yaml").
func Manifest(name string) ([]byte, error) {
	data, err := manifests.ReadFile("manifests/" + name)
	if err != nil {
		return nil, fmt.Errorf("embedded manifest %s: %w", name, err)
	}
	return data, nil
}

// Install applies the embedded platform manifest and waits until the
// controller and router Deployments are Available, as `up` does.
func Install(ctx context.Context, cfg *rest.Config) error {
	if err := applyPlatform(ctx, nil, cfg); err != nil {
		return err
	}
	return waitDeployments("agent-sandbox-controller", "sandbox-router")(ctx, nil, cfg)
}

// WaitAvailable waits until the controller and router Deployments in
// Namespace are Available, however they were installed.
func WaitAvailable(ctx context.Context, cfg *rest.Config) error {
	return waitDeployments("agent-sandbox-controller", "sandbox-router")(ctx, nil, cfg)
}
