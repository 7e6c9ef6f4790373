package platform

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"sigs.k8s.io/agent-sandbox/internal/localcluster"
)

// Deep hibernation is on in the local cluster: its node runs gVisor with
// the hibernation shim and the node agent (a host process, see
// internal/localcluster/hibernate.go), so the controller gets
// --deep-hibernation and the admission policy that guards the checkpoint
// and restore annotations is installed before the controller starts.
// Other clusters opt in through the chart (deepHibernation.enabled).

// HibernationManifest is the embedded copy of
// k8s/admission/hibernation-{policy,binding}.yaml (make generate).
const HibernationManifest = "hibernation.yaml"

// LocalControllerFlags are added to the controller's arguments in the
// local cluster. The checkpoint timeout is shorter than the default: on one
// node a 1 GiB checkpoint takes about 5 s, and a dead agent should not hold
// a suspend for a minute.
var LocalControllerFlags = []string{"--deep-hibernation", "--checkpoint-timeout=30s"}

const controllerDeployment = "agent-sandbox-controller"

// applyPlatform installs the admission policy, then the platform manifest
// with the controller's deep-hibernation flags.
func applyPlatform(ctx context.Context, c *localcluster.Cluster, cfg *rest.Config) error {
	policy, err := manifests.ReadFile("manifests/" + HibernationManifest)
	if err != nil {
		return fmt.Errorf("embedded manifest %s: %w", HibernationManifest, err)
	}
	if err := localcluster.ApplyYAML(ctx, cfg, policy); err != nil {
		return fmt.Errorf("applying the hibernation admission policy: %w", err)
	}
	var stamps map[string]string
	if c != nil {
		if stamps, err = imageStamps(c.Config().CacheDir); err != nil {
			return err
		}
	}
	data, err := localPlatformManifest(stamps)
	if err != nil {
		return err
	}
	return localcluster.ApplyYAML(ctx, cfg, data)
}

// LocalPlatformManifest is the release manifest with LocalControllerFlags
// added to the controller Deployment's container.
func LocalPlatformManifest() ([]byte, error) { return localPlatformManifest(nil) }

// localPlatformManifest is LocalPlatformManifest with each Deployment named
// in stamps given that image stamp (imagestamp.go).
func localPlatformManifest(stamps map[string]string) ([]byte, error) {
	data, err := Manifest(ManifestName)
	if err != nil {
		return nil, err
	}
	return localize(data, LocalControllerFlags, stamps)
}

// withControllerFlags re-encodes a multi-document manifest with flags
// appended to the controller container's args (flags already present, by
// name, are left as they are).
func withControllerFlags(data []byte, flags []string) ([]byte, error) {
	return localize(data, flags, nil)
}

// localize is withControllerFlags that also stamps the pod template of each
// Deployment named in stamps with its image stamp.
func localize(data []byte, flags []string, stamps map[string]string) ([]byte, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out bytes.Buffer
	found := false
	for {
		obj := map[string]any{}
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("decoding the platform manifest: %w", err)
		}
		if len(obj) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: obj}
		if u.GetKind() == "Deployment" && u.GetName() == controllerDeployment {
			if err := addContainerArgs(u, flags); err != nil {
				return nil, err
			}
			found = true
		}
		if stamp, ok := stamps[u.GetName()]; ok && u.GetKind() == "Deployment" {
			if err := unstructured.SetNestedField(u.Object, stamp, "spec", "template", "metadata", "annotations", ImageStampAnnotation); err != nil {
				return nil, fmt.Errorf("deployment %s: %w", u.GetName(), err)
			}
		}
		b, err := yaml.Marshal(u.Object)
		if err != nil {
			return nil, fmt.Errorf("encoding %s %s: %w", u.GetKind(), u.GetName(), err)
		}
		out.WriteString("---\n")
		out.Write(b)
	}
	if !found {
		return nil, fmt.Errorf("the platform manifest has no Deployment %s", controllerDeployment)
	}
	return out.Bytes(), nil
}

func addContainerArgs(u *unstructured.Unstructured, flags []string) error {
	containers, _, err := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
	if err != nil {
		return fmt.Errorf("deployment %s: containers: %w", u.GetName(), err)
	}
	if len(containers) != 1 {
		return fmt.Errorf("deployment %s: want one container, have %d", u.GetName(), len(containers))
	}
	c, ok := containers[0].(map[string]any)
	if !ok {
		return fmt.Errorf("deployment %s: container is not an object", u.GetName())
	}
	args, _, err := unstructured.NestedStringSlice(c, "args")
	if err != nil {
		return fmt.Errorf("deployment %s: args: %w", u.GetName(), err)
	}
	name := func(f string) string { n, _, _ := strings.Cut(f, "="); return n }
	for _, f := range flags {
		if !slices.ContainsFunc(args, func(a string) bool { return name(a) == name(f) }) {
			args = append(args, f)
		}
	}
	if err := unstructured.SetNestedStringSlice(c, args, "args"); err != nil {
		return fmt.Errorf("deployment %s: %w", u.GetName(), err)
	}
	containers[0] = c
	return unstructured.SetNestedSlice(u.Object, containers, "spec", "template", "spec", "containers")
}
