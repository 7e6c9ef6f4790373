package install

import (
	"context"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// The chart's deep-hibernation agent runs in a container, so it reaches a
// Pod's volume (to put the Sandbox's snapshot on it) only through the node
// directories the DaemonSet mounts: the kubelet's pods/ dir, with
// HostToContainer propagation so volumes mounted after the agent started
// are visible, and any extra hostPath-PV directories; each mount has a
// matching --volume-root flag mapping the node path to the mount, and the
// agent binary accepts the rendered flags. Nothing else of the node is
// mounted, and what the agent only reads is read-only.
func TestHelmHibernationAgentVolumeMounts(t *testing.T) {
	agent := buildAgent(t)
	for _, tc := range []struct {
		name        string
		args        []string
		kubeletPods string            // where the kubelet's pods/ dir is mounted
		roots       map[string]string // --volume-root HOST -> LOCAL
	}{
		{"defaults", nil, "/host/var/lib/kubelet/pods", map[string]string{"/var/lib/kubelet/pods": "/host/var/lib/kubelet/pods"}},
		{"custom kubelet root and a hostPath PV dir", []string{
			"--set", "hibernationAgent.kubeletRoot=/var/lib/agent-sandbox/kubelet",
			"--set", "hibernationAgent.extraVolumeRoots[0]=/var/lib/agent-sandbox/local-path",
			"--set", "hibernationAgent.extraVolumeRoots[1]=/opt/local-path-provisioner",
		}, "/host/var/lib/agent-sandbox/kubelet/pods", map[string]string{
			"/var/lib/agent-sandbox/kubelet/pods": "/host/var/lib/agent-sandbox/kubelet/pods",
			"/var/lib/agent-sandbox/local-path":   "/host/var/lib/agent-sandbox/local-path",
			"/opt/local-path-provisioner":         "/host/opt/local-path-provisioner",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			manifests := helmTemplate(t, append([]string{"--set", "controller.deepHibernation=true"}, tc.args...)...)
			ds := daemonSet(t, manifests)
			spec := ds.Spec.Template.Spec
			if len(spec.Containers) != 1 {
				t.Fatalf("%d containers", len(spec.Containers))
			}
			c := spec.Containers[0]
			hostPaths := map[string]corev1.HostPathVolumeSource{}
			for _, v := range spec.Volumes {
				if v.HostPath == nil {
					t.Errorf("volume %s is not a hostPath", v.Name)
					continue
				}
				hostPaths[v.Name] = *v.HostPath
			}
			// mounts: container path -> the mount and its node path.
			type mnt struct {
				corev1.VolumeMount
				node string
			}
			mounts := map[string]mnt{}
			for _, m := range c.VolumeMounts {
				hp, ok := hostPaths[m.Name]
				if !ok {
					t.Fatalf("mount %s has no hostPath volume", m.Name)
				}
				mounts[m.MountPath] = mnt{m, hp.Path}
			}

			roots := map[string]string{}
			for _, a := range c.Args {
				if v, ok := strings.CutPrefix(a, "--volume-root="); ok {
					host, local, _ := strings.Cut(v, ":")
					roots[host] = local
				}
			}
			if !maps.Equal(roots, tc.roots) {
				t.Errorf("--volume-root flags map %v, want %v", roots, tc.roots)
			}
			for host, local := range roots {
				m, ok := mounts[local]
				switch {
				case !ok:
					t.Errorf("--volume-root %s:%s: nothing is mounted at %s", host, local, local)
				case m.node != host:
					t.Errorf("--volume-root %s:%s: %s mounts the node's %s", host, local, local, m.node)
				case m.ReadOnly:
					t.Errorf("%s is read-only: the agent writes the snapshot onto the volume", local)
				}
			}
			// The kubelet mounts every new Pod's volumes below pods/ after
			// the agent started: they must propagate into it. hostPath PV
			// directories are plain directories, and the runtime refuses
			// propagation from a private mount (a node's / may be one).
			pods := mounts[tc.kubeletPods]
			if p := pods.MountPropagation; p == nil || *p != corev1.MountPropagationHostToContainer {
				t.Errorf("%s: mountPropagation %v, want HostToContainer (volumes mounted later must show up)", tc.kubeletPods, p)
			}
			for path, m := range mounts {
				if path != tc.kubeletPods && m.MountPropagation != nil && *m.MountPropagation != corev1.MountPropagationNone {
					t.Errorf("mount at %s has propagation %v; only the kubelet's pods/ dir needs it", path, *m.MountPropagation)
				}
			}

			// Everything mounted, and how: the agent's reach on the node.
			want := map[string]struct {
				node     string
				readOnly bool
			}{
				"/usr/local/bin/runsc":                                 {"/usr/local/bin/runsc", true},
				"/run/containerd/io.containerd.runtime.v2.task/k8s.io": {"/run/containerd/io.containerd.runtime.v2.task/k8s.io", true},
				"/run/containerd/runsc/k8s.io":                         {"/run/containerd/runsc/k8s.io", false}, // runsc updates its state
				"/var/lib/agent-sandbox/hibernate":                     {"/var/lib/agent-sandbox/hibernate", false},
			}
			for host, local := range tc.roots {
				want[local] = struct {
					node     string
					readOnly bool
				}{host, false}
			}
			for path, m := range mounts {
				w, ok := want[path]
				if !ok {
					t.Errorf("unexpected mount of the node's %s at %s", m.node, path)
					continue
				}
				if m.node != w.node || m.ReadOnly != w.readOnly {
					t.Errorf("mount at %s: node %s readOnly %v, want node %s readOnly %v", path, m.node, m.ReadOnly, w.node, w.readOnly)
				}
			}
			if len(mounts) != len(want) {
				t.Errorf("%d mounts, want %d", len(mounts), len(want))
			}
			if hp := hostPaths["kubelet-pods"]; hp.Type == nil || *hp.Type != corev1.HostPathDirectory {
				t.Errorf("kubelet pods dir hostPath type %v, want Directory (created by the kubelet)", hp.Type)
			}

			// The agent accepts every rendered flag (--version stops right
			// after parsing, before it needs the mounts or an apiserver).
			if out, err := runAgent(agent, append(slices.Clone(c.Args), "--version")...); err != nil {
				t.Errorf("the agent refuses the rendered flags %v: %v\n%s", c.Args, err, out)
			}
			// ...and the apiserver the rendered objects.
			dryRunApply(t, "helm-hibernation-"+strings.ReplaceAll(tc.name, " ", "-"), manifests)
		})
	}
	// A path the agent would refuse fails already at install, naming the value.
	for value, want := range map[string]string{
		"hibernationAgent.kubeletRoot=/var/lib/kubelet/": "/hibernationAgent/kubeletRoot",
		"hibernationAgent.extraVolumeRoots[0]=/":         "/hibernationAgent/extraVolumeRoots/0",
		"hibernationAgent.extraVolumeRoots[0]=/a:/b":     "/hibernationAgent/extraVolumeRoots/0",
	} {
		_, err := helm(t, "template", "agent-sandbox", repo("charts", "agent-sandbox"), "--set", "controller.deepHibernation=true", "--set", value)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("helm template --set %s: %v; want an error naming %s", value, err, want)
		}
	}
	// The check above can fail: the agent refuses a malformed volume root.
	if out, err := runAgent(agent, "--volume-root=/var/lib/kubelet/pods:relative", "--version"); err == nil {
		t.Errorf("the agent accepted a relative volume root mount:\n%s", out)
	}
}

func daemonSet(t *testing.T, manifests []byte) *appsv1.DaemonSet {
	t.Helper()
	u := get(t, decode(t, manifests), "DaemonSet/"+Namespace+"/sandbox-hibernate-agent")
	ds := &appsv1.DaemonSet{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, ds); err != nil {
		t.Fatal(err)
	}
	return ds
}

// buildAgent builds cmd/sandbox-hibernate-agent for this test.
func buildAgent(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sandbox-hibernate-agent")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := command(ctx, nil, "go", "build", "-o", bin, "./cmd/sandbox-hibernate-agent"); err != nil {
		t.Fatal(err)
	}
	return bin
}

func runAgent(bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	return string(out), err
}

// The privileged agent can live in a namespace of its own (one that admits
// privileged Pods) while the controller's stays PodSecurity restricted; the
// admission policy then trusts exactly the agent's ServiceAccount there and
// the controller's in namespace.name (not the release namespace the chart
// was rendered in).
func TestHelmHibernationAgentNamespace(t *testing.T) {
	for _, tc := range []struct {
		name              string
		args              []string
		controller, agent string
	}{
		{"release namespace", nil, Namespace, Namespace},
		{"namespace.name", []string{"--set", "namespace.name=ctl"}, "ctl", "ctl"},
		{"own namespace", []string{"--set", "namespace.name=ctl", "--set", "hibernationAgent.namespace=sbx-node"}, "ctl", "sbx-node"},
		// The policy file names agent-sandbox-system; rewriting it must
		// not move the agent into the controller's namespace.
		{"agent in agent-sandbox-system", []string{"--set", "namespace.name=ctl", "--set", "hibernationAgent.namespace=agent-sandbox-system"}, "ctl", "agent-sandbox-system"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := decode(t, helmTemplate(t, append([]string{"--set", "controller.deepHibernation=true"}, tc.args...)...))
			get(t, objs, "ServiceAccount/"+tc.agent+"/sandbox-hibernate-agent")
			get(t, objs, "DaemonSet/"+tc.agent+"/sandbox-hibernate-agent")
			get(t, objs, "Deployment/"+tc.controller+"/agent-sandbox-controller")
			crb := get(t, objs, "ClusterRoleBinding//agent-sandbox-hibernate-agent")
			subjects, _, _ := unstructured.NestedSlice(crb.Object, "subjects")
			if len(subjects) != 1 || subjects[0].(map[string]any)["namespace"] != tc.agent {
				t.Errorf("agent binding subjects %v, want the ServiceAccount in %s", subjects, tc.agent)
			}
			vars, _, _ := unstructured.NestedSlice(get(t, objs, "ValidatingAdmissionPolicy//agent-sandbox-hibernation").Object, "spec", "variables")
			var sas []string
			for _, v := range vars {
				e := v.(map[string]any)["expression"].(string)
				for _, f := range strings.Fields(e) {
					if sa, ok := strings.CutPrefix(strings.Trim(f, "'"), "system:serviceaccount:"); ok {
						sas = append(sas, sa)
					}
				}
			}
			slices.Sort(sas)
			want := []string{tc.controller + ":agent-sandbox-controller", tc.agent + ":sandbox-hibernate-agent"}
			slices.Sort(want)
			if !slices.Equal(sas, want) {
				t.Errorf("the policy trusts %v, want %v", sas, want)
			}
		})
	}
}
