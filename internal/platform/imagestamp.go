package platform

import (
	"fmt"
	"path/filepath"

	"sigs.k8s.io/agent-sandbox/internal/localcluster"
)

// ImageStampAnnotation marks the pod template of a local platform
// Deployment with the content hash of the image tarball its container
// runs. The local images keep their tag (:dev) across rebuilds and the node
// never pulls, so without the stamp an `up` after `make images` re-imports
// the new image but leaves the Pods of the old one running; with it, a
// rebuilt image changes the pod template and the Deployment rolls.
const ImageStampAnnotation = "agents.x-k8s.io/local-image-sha256"

// stampedDeployments maps the platform Deployments to the image (tarball
// name, as in Images) they run.
var stampedDeployments = map[string]string{
	controllerDeployment: "controller",
	"sandbox-router":     "router",
}

// imageStamps returns each stamped Deployment's stamp: the first 16 hex
// digits of the SHA-256 of its image tarball in cacheDir/images.
func imageStamps(cacheDir string) (map[string]string, error) {
	stamps := make(map[string]string, len(stampedDeployments))
	for deploy, image := range stampedDeployments {
		path := filepath.Join(cacheDir, "images", image+".tar")
		sum, err := localcluster.FileSHA256(path)
		if err != nil {
			return nil, fmt.Errorf("stamping deployment %s with its image: %w", deploy, err)
		}
		stamps[deploy] = sum[:16]
	}
	return stamps, nil
}
