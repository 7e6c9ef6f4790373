package cpuclass

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func mkdirs(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func TestChainFollowsTheKubeletsLayout(t *testing.T) {
	mnt := t.TempDir()
	c := PodCgroups{Mount: mnt, Root: "/agent-sandbox"}
	root := filepath.Join(mnt, "agent-sandbox")
	mkdirs(t,
		filepath.Join(root, "kubepods/burstable/pod-b/ctr1"),
		filepath.Join(root, "kubepods/besteffort/pod-e/ctr2"),
		filepath.Join(root, "kubepods/pod-g/ctr3"),
	)
	for _, tc := range []struct {
		uid, ctr string
		want     []string
	}{
		{"-b", "ctr1", []string{"", "kubepods", "kubepods/burstable", "kubepods/burstable/pod-b", "kubepods/burstable/pod-b/ctr1"}},
		{"-e", "ctr2", []string{"", "kubepods", "kubepods/besteffort", "kubepods/besteffort/pod-e", "kubepods/besteffort/pod-e/ctr2"}},
		{"-g", "ctr3", []string{"", "kubepods", "kubepods/pod-g", "kubepods/pod-g/ctr3"}},
	} {
		got, err := c.Chain(types.UID(tc.uid), tc.ctr)
		if err != nil {
			t.Fatalf("Chain(%s, %s): %v", tc.uid, tc.ctr, err)
		}
		var want []string
		for _, w := range tc.want {
			want = append(want, filepath.Join(root, w))
		}
		if !slices.Equal(got, want) {
			t.Errorf("Chain(%s, %s) = %v, want %v", tc.uid, tc.ctr, got, want)
		}
	}
	if _, err := c.Chain("-missing", "ctr1"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("unknown pod: %v", err)
	}
	if _, err := c.Chain("-b", "ctr2"); err == nil {
		t.Error("a container of another pod was found under this one")
	}
	// Names from the API never climb out of the Pod's directory.
	for _, bad := range [][2]string{{"-b/../../besteffort/pod-e", "ctr2"}, {"-b", "../../besteffort/pod-e/ctr2"}, {"", "ctr1"}, {"-b", ""}} {
		if _, err := c.Chain(types.UID(bad[0]), bad[1]); err == nil {
			t.Errorf("Chain(%q, %q) accepted", bad[0], bad[1])
		}
	}
}

func TestContainerID(t *testing.T) {
	if got := ContainerID("containerd://abc"); got != "abc" {
		t.Errorf("ContainerID = %q", got)
	}
	if got := ContainerID("abc"); got != "abc" {
		t.Errorf("ContainerID = %q", got)
	}
}
