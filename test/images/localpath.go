package images

import (
	"context"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// LocalPathProvisionerRef is the local-path-provisioner image
// BuildLocalPathProvisioner makes.
const LocalPathProvisionerRef = "hostlet.local/local-path-provisioner:v0.0.30"

// BuildLocalPathProvisioner builds Rancher's local-path-provisioner image
// into outDir: the busybox base and the static binary (test/cluster/build.sh
// local-path-provisioner) at /usr/bin/local-path-provisioner, where the
// upstream image has it (its manifest runs it by name, from PATH). Reused
// while its inputs are unchanged.
func BuildLocalPathProvisioner(ctx context.Context, outDir, bin string) (Image, error) {
	return busyboxWithBinary(ctx, outDir, LocalPathProvisionerRef, bin, "usr/bin/local-path-provisioner", ocispec.ImageConfig{
		Env: []string{"PATH=" + defaultPath},
		Cmd: []string{"local-path-provisioner"},
	})
}
