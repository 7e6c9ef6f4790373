package manager

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
)

// Leader election timings: controller-runtime's defaults, spelled out
// because the lock's client timeout is derived from the renew deadline.
const (
	leaseDuration = 15 * time.Second
	renewDeadline = 10 * time.Second
	retryPeriod   = 2 * time.Second
)

// inClusterNamespaceFile is where a Pod's service account namespace is
// mounted; a variable so tests can point elsewhere.
var inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// ValidateLeaderIdentity checks an identity given with
// --leader-election-identity. The identity is what makes a restarted
// container take its Lease back at once instead of waiting out the dead
// process's lease, so it must name one Pod and nothing else: two live
// processes with the same identity would both lead. The manifests pass
// "<pod name>_<pod UID>" from the downward API; the UID is what no other
// Pod, now or later, can share (a name can be reused once the Pod is gone).
func ValidateLeaderIdentity(id string) error {
	if id == "" {
		return nil
	}
	if strings.Contains(id, "$(") {
		// The kubelet leaves $(VAR) as is when VAR is not in the
		// container's env: every replica would get the same identity.
		return fmt.Errorf("leader election identity %q holds an unexpanded $(VAR) reference: define the variable in the container's env (the downward API's metadata.name and metadata.uid)", id)
	}
	return nil
}

// newLeaderLock builds the Lease lock controller-runtime would build, but
// held under the given identity instead of "<hostname>_<random UUID>". The
// random part is why a container restarted after losing its lease (for
// instance across an API server outage, when renewals fail) waits the old
// lease's full duration although the old holder was itself.
func newLeaderLock(cfg *rest.Config, scheme *runtime.Scheme, namespace, identity string) (resourcelock.Interface, error) {
	if err := ValidateLeaderIdentity(identity); err != nil {
		return nil, err
	}
	if namespace == "" {
		ns, err := inClusterNamespace()
		if err != nil {
			return nil, fmt.Errorf("leader election namespace: %w", err)
		}
		namespace = ns
	}
	cfg = rest.AddUserAgent(rest.CopyConfig(cfg), "leader-election")
	// A hung request must not outlast the renew deadline.
	cfg.Timeout = renewDeadline / 2
	core, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("leader election client: %w", err)
	}
	coordination, err := coordinationv1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("leader election client: %w", err)
	}
	// The "became leader" events controller-runtime records, on a
	// broadcaster that lives as long as the process.
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&corev1client.EventSinkImpl{Interface: core.Events(namespace)})
	recorder := broadcaster.NewRecorder(scheme, corev1.EventSource{Component: identity})
	return resourcelock.New(resourcelock.LeasesResourceLock, namespace, LeaderElectionID, core, coordination,
		resourcelock.ResourceLockConfig{Identity: identity, EventRecorder: recorder})
}

func inClusterNamespace() (string, error) {
	data, err := os.ReadFile(inClusterNamespaceFile)
	if errors.Is(err, os.ErrNotExist) {
		return "", errors.New("not running in a Pod: set --leader-election-namespace")
	}
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", inClusterNamespaceFile, err)
	}
	return strings.TrimSpace(string(data)), nil
}
