package localcluster

import "testing"

func TestParseMountinfo(t *testing.T) {
	m, ok := parseMountinfo(`622 29 0:4 net:[4026532] /run/agent\040sandbox/netns/cni-1 rw shared:5 - nsfs nsfs rw`) //nolint:dupword // mountinfo: fstype, then source, both nsfs
	if !ok || m.mountPoint != "/run/agent sandbox/netns/cni-1" || m.fstype != "nsfs" {
		t.Errorf("parseMountinfo = %+v, %v", m, ok)
	}
	if _, ok := parseMountinfo("garbage"); ok {
		t.Error("garbage parsed")
	}
}
