// Package platform installs agent-sandbox itself into the local cluster:
// the controller (with extensions) and the router from the locally built
// images, then a default python-runtime-template and python-sandbox-pool on
// gVisor, and waits until a sandbox can be claimed. The manifests are the
// release manifests rendered by `make generate` and embedded here, so an
// installed agent-sandbox binary needs no source tree.
package platform

import (
	"context"
	"embed"
	"fmt"
	"os"
	"path/filepath"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/images/catalog"
	"sigs.k8s.io/agent-sandbox/internal/localcluster"
	"sigs.k8s.io/agent-sandbox/internal/manager"
)

//go:embed manifests/*.yaml
var manifests embed.FS

// Namespace is where the controller and router run.
const Namespace = "agent-sandbox-system"

// DefaultPool is the warm pool `up` creates in the default namespace.
const DefaultPool = "python-sandbox-pool"

// Images are the image tarballs (in <cache>/images) the platform runs.
var Images = []string{"controller", "router", "sandboxd", "python-runtime"}

// OptionalImages are imported too when their tarballs exist: the images of
// examples/jupyterlab and examples/chrome (`go run ./hack/mkimages
// jupyterlab chrome`).
var OptionalImages = catalog.Examples

// ImageTarballs returns the tarball paths of the platform images, or an
// error naming the missing one and how to build it, followed by those of
// the OptionalImages that are built.
func ImageTarballs(cacheDir string) ([]string, error) {
	var out []string
	for _, name := range Images {
		p := filepath.Join(cacheDir, "images", name+".tar")
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("image %s is not built (%s missing): run `make images` first", name, p)
		}
		out = append(out, p)
	}
	for _, name := range OptionalImages {
		p := filepath.Join(cacheDir, "images", name+".tar")
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// Hooks are the install steps, run by `up` once the node is Ready.
func Hooks() []localcluster.Hook {
	return []localcluster.Hook{
		// With deep hibernation on (hibernation.go).
		{Name: "install agent-sandbox controller and router", Run: applyPlatform},
		{Name: "wait for controller and router", Run: waitDeployments("agent-sandbox-controller", "sandbox-router")},
		{Name: "create " + DefaultPool, Run: applyEmbedded("default-pool.yaml")},
		{Name: "wait for warm sandboxes", Run: waitPool(metav1.NamespaceDefault, DefaultPool)},
	}
}

func applyEmbedded(name string) func(context.Context, *localcluster.Cluster, *rest.Config) error {
	return func(ctx context.Context, _ *localcluster.Cluster, cfg *rest.Config) error {
		data, err := manifests.ReadFile("manifests/" + name)
		if err != nil {
			return fmt.Errorf("embedded manifest %s: %w", name, err)
		}
		return localcluster.ApplyYAML(ctx, cfg, data)
	}
}

const waitTimeout = 3 * time.Minute

func newClient(cfg *rest.Config) (client.Client, error) {
	scheme, err := manager.NewScheme()
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: scheme})
}

func waitDeployments(names ...string) func(context.Context, *localcluster.Cluster, *rest.Config) error {
	return func(ctx context.Context, _ *localcluster.Cluster, cfg *rest.Config) error {
		c, err := newClient(cfg)
		if err != nil {
			return err
		}
		return poll(ctx, func() (bool, string) {
			for _, n := range names {
				d := &appsv1.Deployment{}
				if err := c.Get(ctx, types.NamespacedName{Namespace: Namespace, Name: n}, d); err != nil {
					return false, fmt.Sprintf("deployment %s: %v", n, err)
				}
				if d.Status.ObservedGeneration < d.Generation || d.Status.AvailableReplicas < 1 ||
					d.Status.UpdatedReplicas < d.Status.Replicas {
					return false, fmt.Sprintf("deployment %s/%s is not available (%d/%d ready); see `kubectl -n %s describe pods`",
						Namespace, n, d.Status.AvailableReplicas, d.Status.Replicas, Namespace)
				}
			}
			return true, ""
		})
	}
}

func waitPool(ns, name string) func(context.Context, *localcluster.Cluster, *rest.Config) error {
	return func(ctx context.Context, _ *localcluster.Cluster, cfg *rest.Config) error {
		c, err := newClient(cfg)
		if err != nil {
			return err
		}
		return poll(ctx, func() (bool, string) {
			p := &extv1beta1.SandboxWarmPool{}
			if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, p); err != nil {
				return false, fmt.Sprintf("warm pool %s: %v", name, err)
			}
			want := p.DesiredReplicas()
			return p.Status.ReadyReplicas >= want, fmt.Sprintf("warm pool %s has %d/%d ready sandboxes; see `kubectl get sandboxes,pods`",
				name, p.Status.ReadyReplicas, want)
		})
	}
}

// poll checks cond until it holds, giving up after waitTimeout with the
// last reason it reported.
func poll(ctx context.Context, cond func() (bool, string)) error {
	ctx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	var why string
	for {
		var ok bool
		if ok, why = cond(); ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("timed out after %s: %s", waitTimeout, why)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
