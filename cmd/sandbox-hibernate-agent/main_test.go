package main

import (
	"strings"
	"testing"
)

// The flags the chart's DaemonSet passes parse (--version stops after
// parsing, before any mount or apiserver is needed); bad volume roots are
// refused with a message naming the flag, and a volume root that is not
// mounted stops the agent at start instead of quietly sending every volume
// snapshot to the node store.
func TestVolumeRootFlag(t *testing.T) {
	ok := []string{"--node-name=n", "--volume-root=/var/lib/kubelet/pods:/host/var/lib/kubelet/pods", "--volume-root=/opt/local-path", "--version"}
	if err := run(ok); err != nil {
		t.Fatalf("run(%v) = %v", ok, err)
	}
	for _, bad := range []string{"--volume-root=relative", "--volume-root=/a:/b:/c", "--volume-root=/a/../b", "--volume-root="} {
		if err := run([]string{bad, "--version"}); err == nil || !strings.Contains(err.Error(), "volume-root") {
			t.Errorf("run(%s) = %v, want an error naming the flag", bad, err)
		}
	}
	missing := t.TempDir() + "/not-mounted"
	err := run([]string{"--node-name=n", "--volume-root=/var/lib/kubelet/pods:" + missing})
	if err == nil || !strings.Contains(err.Error(), "is it mounted?") {
		t.Fatalf("run with an unmounted volume root = %v", err)
	}
}
