package hibernate

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckpointError(t *testing.T) {
	exit := errors.New("exit status 128")
	// The shape of what runsc printed in CI on a full tmpfs: the serialised
	// object's dump first, the cause at the far end of the line.
	dump := "checkpoint failed: error serializing object &wire.Map{Keys:[]wire.Object{" + strings.Repeat("(*wire.String)(0x76fcdfd28d0), ", 60) + "}}: write pages.img: no space left on device\ngoroutine 1 [running]:\nmain.main()"
	for _, tc := range []struct {
		name, stderr string
		free         int64
		want         []string
		notWant      []string
	}{
		{name: "ENOSPC at the end of a long report", stderr: dump, free: 16 << 20,
			want: []string{"no space left on the snapshot's filesystem", "runsc checkpoint c1: exit status 128", "error serializing object", "no space left on device"}, notWant: []string{"goroutine"}},
		{name: "full filesystem, cause not printed", stderr: "checkpoint failed: error serializing object &wire.Map{}", free: 4096,
			want: []string{"no space left on the snapshot's filesystem (4 KiB free after the attempt)"}},
		{name: "free space unknown", stderr: "checkpoint failed: container not running", free: -1,
			want: []string{"runsc checkpoint c1: exit status 128: checkpoint failed: container not running"}, notWant: []string{"no space"}},
		{name: "other failure with room left", stderr: "checkpoint failed: permission denied", free: 1 << 30,
			want: []string{"permission denied"}, notWant: []string{"no space"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkpointError("c1", exit, tc.stderr, tc.free)
			msg := err.Error()
			if !errors.Is(err, exit) {
				t.Errorf("the exit error is not wrapped: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q lacks %q", msg, w)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(msg, w) {
					t.Errorf("message %q has %q", msg, w)
				}
			}
			if len(msg) > 800 {
				t.Errorf("message is %d bytes, more than an event note can carry with the controller's suffix", len(msg))
			}
		})
	}
}

func TestFirstLine(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"  short\nstack", "short"},
		{"abcdefgh", "abcdefgh"},
		{"abcdefghijkl", "abcd ... ijkl"},
	} {
		if got := firstLine(tc.in, 8); got != tc.want {
			t.Errorf("firstLine(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
