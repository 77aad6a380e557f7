package harness

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// snapshotCRDs are the VolumeSnapshot CRDs of external-snapshotter's
// client module (the group snapshot ones are for a feature gate left off).
var snapshotCRDs = []string{
	"snapshot.storage.k8s.io_volumesnapshotclasses.yaml",
	"snapshot.storage.k8s.io_volumesnapshotcontents.yaml",
	"snapshot.storage.k8s.io_volumesnapshots.yaml",
}

// StartSnapshotController installs the VolumeSnapshot CRDs and runs
// upstream's snapshot-controller (test/cluster/build.sh
// snapshot-controller) next to the control plane with the admin
// kubeconfig, one replica without leader election, as a cluster with
// snapshots runs it; Stop stops it with the cluster. It waits for the
// CRDs to be established, so snapshot objects can be made at once.
func (c *Cluster) StartSnapshotController(ctx context.Context) error {
	bin, err := BuildComponent(ctx, c.logf, "snapshot-controller")
	if err != nil {
		return err
	}
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	list := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/kubernetes-csi/external-snapshotter/client/v8")
	list.Dir = filepath.Join(root, "test", "cluster", "csi-snapshotter")
	dir, err := list.Output()
	if err != nil {
		return fmt.Errorf("go list -m external-snapshotter/client/v8 (test/cluster/csi-snapshotter): %w", err)
	}
	args := []string{"apply"}
	for _, f := range snapshotCRDs {
		args = append(args, "-f", filepath.Join(strings.TrimSpace(string(dir)), "config", "crd", f))
	}
	if _, err := c.Kubectl(ctx, args...); err != nil {
		return err
	}
	if _, err := c.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/volumesnapshotclasses.snapshot.storage.k8s.io", "crd/volumesnapshotcontents.snapshot.storage.k8s.io",
		"crd/volumesnapshots.snapshot.storage.k8s.io"); err != nil {
		return err
	}
	_, err = c.launch("snapshot-controller", bin, "--kubeconfig="+c.adminKubeconfig, "--leader-election=false", "--v=3")
	return err
}
