package runtime

import (
	"context"
	"fmt"
	"time"
)

// ImageFsDir is the directory containerd keeps unpacked images in (the
// overlayfs snapshotter's root), the kubelet's "imagefs", for disk pressure.
func (r *Runtime) ImageFsDir(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := r.client.IntrospectionService().Plugins(ctx, `type==io.containerd.snapshotter.v1,id==overlayfs`)
	if err != nil {
		return "", err
	}
	for _, p := range resp.Plugins {
		if root := p.Exports["root"]; root != "" {
			return root, nil
		}
	}
	return "", fmt.Errorf("containerd reports no overlayfs snapshotter root")
}
