package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DeprecatedVersion is the API version --serve-v1alpha1 turns on and off.
const DeprecatedVersion = "v1alpha1"

// VersionSwitch keeps one version of the CRDs served or not.
//
// Why it exists: the apiserver keeps a watch cache for every served version
// of a CRD and converts every change of every object into each of them, so
// while v1alpha1 is served each write of a Sandbox, claim, template or pool
// costs one call of the conversion webhook even when no client reads
// v1alpha1 (kubernetes/kubernetes#129979). A cluster whose clients all
// speak v1beta1 can stop serving v1alpha1 and save those calls; stored
// objects are v1beta1 and stay readable, and serving it again later loses
// nothing.
type VersionSwitch struct {
	Client   client.Client
	CRDNames []string
	Version  string
	Served   bool
	// CheckInterval re-applies the setting, so a CRD re-applied from its
	// manifest (which serves v1alpha1) is switched again.
	CheckInterval time.Duration
}

// NeedLeaderElection is true: one writer per cluster, so replicas of a
// rollout with different settings do not take turns flipping the CRDs.
func (s *VersionSwitch) NeedLeaderElection() bool { return true }

// Start applies the setting now and every CheckInterval until ctx ends. A
// failed attempt is logged and retried at the next tick.
func (s *VersionSwitch) Start(ctx context.Context) error {
	log := ctrl.Log.WithName("served-versions")
	interval := s.CheckInterval
	if interval <= 0 {
		interval = DefaultCheckInterval
	}
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if err := s.Ensure(ctx); err != nil {
			log.Error(err, "setting whether the CRDs serve "+s.Version, "served", s.Served)
		}
	}, interval)
	return nil
}

// Ensure sets the version's served flag on every CRD that has it. Missing
// CRDs (a core-only install) are skipped. It refuses to stop serving a
// storage version, which would leave no way to read the stored objects.
func (s *VersionSwitch) Ensure(ctx context.Context) error {
	names := s.CRDNames
	if names == nil {
		names = CRDNames
	}
	return forEachCRD(ctx, s.Client, names, func(crd *apiextensionsv1.CustomResourceDefinition) error {
		return s.apply(ctx, crd)
	})
}

func (s *VersionSwitch) apply(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) error {
	for i, v := range crd.Spec.Versions {
		if v.Name != s.Version {
			continue
		}
		if v.Served == s.Served {
			return nil
		}
		if v.Storage && !s.Served {
			return fmt.Errorf("CRD %s: %s is the storage version and must stay served", crd.Name, s.Version)
		}
		// A JSON patch of this one field, guarded by the version's name at
		// that index, so a CRD changed since it was read is not corrupted
		// (the test fails and the next tick reads it again).
		path := fmt.Sprintf("/spec/versions/%d", i)
		patch, err := json.Marshal([]map[string]any{
			{"op": "test", "path": path + "/name", "value": s.Version},
			{"op": "replace", "path": path + "/served", "value": s.Served},
		})
		if err != nil {
			return fmt.Errorf("encoding CRD patch: %w", err)
		}
		if err := s.Client.Patch(ctx, crd, client.RawPatch(types.JSONPatchType, patch)); err != nil {
			return fmt.Errorf("setting %s served=%t on CRD %s: %w", s.Version, s.Served, crd.Name, err)
		}
		ctrl.Log.WithName("served-versions").Info("switched", "crd", crd.Name, "version", s.Version, "served", s.Served)
		return nil
	}
	return nil
}
