package router

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// KubeControl patches Sandboxes through the apiserver with JSON merge
// patches. The patch carries metadata.uid so it can only land on the
// incarnation the router resolved; a resourceVersion adds optimistic locking.
type KubeControl struct {
	client dynamic.NamespaceableResourceInterface
}

// NewKubeControl builds a KubeControl from a rest config.
func NewKubeControl(cfg *rest.Config) (*KubeControl, error) {
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating dynamic client: %w", err)
	}
	return &KubeControl{client: dc.Resource(sandboxv1beta1.GroupVersion.WithResource("sandboxes"))}, nil
}

// SetOperatingMode implements SandboxControl.
func (k *KubeControl) SetOperatingMode(ctx context.Context, key SandboxKey, uid, mode, rv string, activity time.Time) error {
	md := map[string]any{"uid": uid}
	if rv != "" {
		md["resourceVersion"] = rv
	}
	if !activity.IsZero() {
		md["annotations"] = map[string]string{LastActivityAnnotation: activity.UTC().Format(time.RFC3339Nano)}
	}
	return k.patch(ctx, key, map[string]any{"metadata": md, "spec": map[string]any{"operatingMode": mode}})
}

// MarkActivity implements SandboxControl.
func (k *KubeControl) MarkActivity(ctx context.Context, key SandboxKey, uid string, at time.Time) error {
	return k.patch(ctx, key, map[string]any{"metadata": map[string]any{
		"uid":         uid,
		"annotations": map[string]string{LastActivityAnnotation: at.UTC().Format(time.RFC3339Nano)},
	}})
}

func (k *KubeControl) patch(ctx context.Context, key SandboxKey, body map[string]any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("encoding patch: %w", err)
	}
	if _, err := k.client.Namespace(key.Namespace).Patch(ctx, key.Name, types.MergePatchType, data, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patching sandbox %s: %w", key, err)
	}
	return nil
}
