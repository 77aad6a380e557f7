package volumes

import (
	"testing"

	"github.com/moby/sys/mountinfo"
)

// The root dir is left on a shared mount, made shared where it is a mount
// point of its own, and bound onto itself otherwise; the mount it is on is
// the longest mount point above it, the last one stacked there.
func TestSharedAction(t *testing.T) {
	root := "/var/lib/kubelet"
	for _, c := range []struct {
		name   string
		mounts []*mountinfo.Info
		want   sharedStep
	}{
		{"on a shared /", []*mountinfo.Info{{Mountpoint: "/", Optional: "shared:1"}}, alreadyShared},
		{"on a private /", []*mountinfo.Info{{Mountpoint: "/"}}, bindShared},
		{"on a slave /", []*mountinfo.Info{{Mountpoint: "/", Optional: "master:1"}}, bindShared},
		{"a private mount point under a shared /", []*mountinfo.Info{{Mountpoint: "/", Optional: "shared:1"}, {Mountpoint: root}}, makeShared},
		{"shared and slave", []*mountinfo.Info{{Mountpoint: "/"}, {Mountpoint: "/var", Optional: "shared:3 master:1"}}, alreadyShared},
		{"bound shared over a private mount point", []*mountinfo.Info{{Mountpoint: "/"}, {Mountpoint: root}, {Mountpoint: root, Optional: "shared:4"}}, alreadyShared},
		{"no mounts", nil, bindShared},
	} {
		if got := sharedAction(root, c.mounts); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
