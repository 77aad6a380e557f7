package runtime

import (
	"context"
	"fmt"
	"time"
)

// ImageFsDir is the directory containerd keeps unpacked images in, the
// kubelet's "imagefs", for disk pressure: the root of the snapshotter
// images are pulled into (--image-snapshotter), as containerd's CRI
// reports that of the snapshotter it is configured with, when containerd
// exports it (a proxy snapshotter's root is exported only when its
// proxy_plugins section says, as stargz.ProxyPluginConfig does); else the
// overlayfs snapshotter's root.
func (r *Runtime) ImageFsDir(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if r.snapshotter != "" {
		if root, err := r.snapshotterRoot(ctx, r.snapshotter); err != nil || root != "" {
			return root, err
		}
	}
	root, err := r.snapshotterRoot(ctx, "overlayfs")
	if err == nil && root == "" {
		err = fmt.Errorf("containerd reports no overlayfs snapshotter root")
	}
	return root, err
}

// snapshotterRoot is the root containerd exports for the snapshotter id,
// "" for none.
func (r *Runtime) snapshotterRoot(ctx context.Context, id string) (string, error) {
	resp, err := r.client.IntrospectionService().Plugins(ctx, `type==io.containerd.snapshotter.v1,id==`+id)
	if err != nil {
		return "", err
	}
	for _, p := range resp.Plugins {
		if root := p.Exports["root"]; root != "" {
			return root, nil
		}
	}
	return "", nil
}
