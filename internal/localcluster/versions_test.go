package localcluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The build scripts read versions from the hack/*/go.mod files; the Go code
// looks for binaries by the constants. They must agree.
func TestVersionsMatchBuildModules(t *testing.T) {
	for _, tc := range []struct {
		gomod, module, want string
	}{
		{"../../hack/kube/go.mod", "k8s.io/kubernetes", KubernetesVersion},
		{"../../hack/containerd/go.mod", "github.com/containerd/containerd/v2", ContainerdVersion},
		{"../../hack/gvisor/go.mod", "gvisor.dev/gvisor", GVisorVersion},
		{"../../hack/registry/go.mod", "github.com/distribution/distribution/v3", RegistryVersion},
		{"../../hack/coredns/go.mod", "github.com/coredns/coredns", CoreDNSVersion},
		{"../../hack/kuberouter/go.mod", "github.com/cloudnativelabs/kube-router/v2", KubeRouterVersion},
		{"../../hack/localpath/go.mod", "github.com/rancher/local-path-provisioner", LocalPathVersion},
	} {
		data, err := os.ReadFile(filepath.FromSlash(tc.gomod))
		if err != nil {
			t.Fatal(err)
		}
		found := ""
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
			if len(f) >= 2 && f[0] == tc.module {
				found = f[1]
				break
			}
		}
		if found != tc.want {
			t.Errorf("%s requires %s %q, the Go constant says %q", tc.gomod, tc.module, found, tc.want)
		}
	}
}
