package podspec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hostlet/hostlet/lifecycle"
	"github.com/hostlet/hostlet/provider/volumes"
	"github.com/hostlet/hostlet/provider/volumes/csi"
	"github.com/hostlet/hostlet/runtime"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A pod's PersistentVolumeClaims (and generic ephemeral volumes, whose
// claims the ephemeral volume controller makes) are resolved to their
// PersistentVolumes once, as the kubelet's desired state of world populator
// processes a pod once: the result is kept, by pod and volume, until the
// pod's volumes are torn down, so refreshing a running pod's volumes and
// starting its containers read no claim again.

// podClaim is one of a pod's claims, resolved, and whether its volume is
// set up (mounted, for a local PV).
type podClaim struct {
	*volumes.Claim
	mounted bool
}

// claim is the pod's resolved claim of volume name, or nil.
func (r *Runtime) claim(uid types.UID, name string) *podClaim {
	r.claimsMu.Lock()
	defer r.claimsMu.Unlock()
	return r.claims[uid][name]
}

// forgetClaims drops a pod's claims once its volumes are gone: a
// ReadWriteOncePod volume is free for another pod then.
func (r *Runtime) forgetClaims(uid types.UID) {
	r.claimsMu.Lock()
	defer r.claimsMu.Unlock()
	delete(r.claims, uid)
}

// mountedElsewhere: a pod other than uid has the PV set up on this node.
// Called with claimsMu held.
func (r *Runtime) mountedElsewhere(pv string, uid types.UID) bool {
	for other, cs := range r.claims {
		if other == uid {
			continue
		}
		for _, c := range cs {
			if c.mounted && c.PV.Name == pv {
				return true
			}
		}
	}
	return false
}

// resolveClaims resolves the claims of the pod not resolved yet. While
// one is missing, unbound or otherwise unusable the pod waits with the
// kubelet's FailedMount event, retried with the sandbox's back-off.
func (r *Runtime) resolveClaims(ctx context.Context, pod *v1.Pod) error {
	var failed []string
	var errs []error
	for i := range pod.Spec.Volumes {
		vol := &pod.Spec.Volumes[i]
		if _, _, ok := volumes.ClaimName(pod, vol); !ok || r.claim(pod.UID, vol.Name) != nil {
			continue
		}
		var c *volumes.Claim
		err := errors.New("no API client to read PersistentVolumeClaims with")
		if r.cfg.PersistentVolumes != nil {
			c, err = volumes.Resolve(ctx, r.cfg.PersistentVolumes, pod, vol)
		}
		if err != nil {
			failed, errs = append(failed, vol.Name), append(errs, err)
			continue
		}
		r.claimsMu.Lock()
		if r.claims == nil {
			r.claims = map[types.UID]map[string]*podClaim{}
		}
		if r.claims[pod.UID] == nil {
			r.claims[pod.UID] = map[string]*podClaim{}
		}
		r.claims[pod.UID][vol.Name] = &podClaim{Claim: c}
		r.claimsMu.Unlock()
	}
	if len(errs) > 0 {
		return &lifecycle.Failure{Reason: "FailedMount",
			Message: "Unable to attach or mount volumes: " + volumes.UnprocessedError(failed, errs).Error()}
	}
	return nil
}

// setupClaim sets up the PV of a pod's resolved claim as the kubelet's
// operation generator and volume plugins do, in their order and with their
// messages (which name the PV): its node affinity must match the node, a
// ReadWriteOncePod volume may be in use by no other pod here; a hostPath
// PV gets the hostPath volume's type checks (and its safe creation for the
// *OrCreate types), a local PV must be a directory that exists and is
// bind-mounted into the pod's volume directory, with the PV's mount
// options. The PV's path is the host path the cluster's admin gave, used
// as the kubelet uses it.
func (r *Runtime) setupClaim(ctx context.Context, pod *v1.Pod, vol *v1.Volume) error {
	r.claimsMu.Lock()
	defer r.claimsMu.Unlock()
	c := r.claims[pod.UID][vol.Name]
	if c == nil {
		return fmt.Errorf("the claim of volume %q is not resolved", vol.Name)
	}
	pv := c.PV
	fail := func(prefix string, err error) error {
		return &lifecycle.Failure{Reason: "FailedMount", Message: fmt.Sprintf("%s for volume %q : %v", prefix, pv.Name, err)}
	}
	if volumes.PVPluginName(pv) == "" {
		return fail("MountVolume.SetUp failed", errors.New("volume type not supported by hostlet"))
	}
	if c.Block() {
		return r.mapClaim(ctx, pod, vol.Name, c, fail)
	}
	if err := volumes.CheckNodeAffinity(pv, r.cfg.Node.Labels()); err != nil {
		return fail("MountVolume.NodeAffinity check failed", err)
	}
	if pv.Spec.Local != nil {
		if err := localPathType(pv.Spec.Local.Path); err != nil {
			return fail("MountVolume.NewMounter initialization failed", err)
		}
	}
	opts := volumes.MountOptions(pv)
	if pv.Spec.HostPath != nil && len(opts) > 0 {
		return fail("MountVolume.MountOptionSupport check failed", errors.New("mount options are not supported for this volume type"))
	}
	if volumes.ReadWriteOncePod(pv) && r.mountedElsewhere(pv.Name, pod.UID) {
		return fail("MountVolume.SetUp failed", errors.New("volume uses the ReadWriteOncePod access mode and is already in use by another pod"))
	}
	if pv.Spec.CSI != nil {
		// The driver's calls are not made under the lock every pod's
		// volumes take.
		c.mounted = true
		r.claimsMu.Unlock()
		err := r.setUpCSI(ctx, pod, vol, c.PVC.Name, pv, c.ReadOnly)
		r.claimsMu.Lock()
		if err != nil && r.claims[pod.UID][vol.Name] == c {
			c.mounted = false
		}
		return err
	}
	if pv.Spec.HostPath != nil {
		if err := r.setupHostPath(pv.Spec.HostPath); err != nil {
			return fail("MountVolume.SetUp failed", err)
		}
		c.mounted = true
		return nil
	}
	flags, err := bindFlags(opts, c.ReadOnly)
	if err != nil {
		return fail("MountVolume.SetUp failed", err)
	}
	// The volume's owner is set only by its first pod on the node, as the
	// kubelet's local volume does: another pod's may not be changed under it.
	first := !r.mountedElsewhere(pv.Name, pod.UID)
	dir := r.claimPath(pod, c)
	made, err := bindOnce(pv.Spec.Local.Path, dir, flags)
	if err != nil {
		return fail("MountVolume.SetUp failed", err)
	}
	if made && flags&unix.MS_RDONLY == 0 && first {
		if err := applyFSGroup(dir, podFSGroup(pod), false); err != nil {
			return fail("MountVolume.SetUp failed", err)
		}
	}
	c.mounted = true
	return nil
}

// mapClaim maps a block PV (volumeMode: Block) for the pod as the
// kubelet's GenerateMapVolumeFunc does, with its messages: only the local
// volume and CSI plugins among hostlet's map devices (the hostPath plugin
// is no block plugin for the kubelet either), the node affinity must
// match, a ReadWriteOncePod volume is one pod's, and a local PV's path must
// be a block device; a CSI PV's driver maps it (csi.Manager.SetUpBlock).
// Called with claimsMu held.
func (r *Runtime) mapClaim(ctx context.Context, pod *v1.Pod, volName string, c *podClaim, fail func(string, error) error) error {
	pv := c.PV
	switch {
	case pv.Spec.HostPath != nil:
		return &lifecycle.Failure{Reason: "FailedMount", Message: fmt.Sprintf(
			"MapVolume.FindMapperPluginBySpec failed to find BlockVolumeMapper plugin. Volume plugin is nil. for volume %q", pv.Name)}
	}
	mapFail := func(prefix string, err error) error {
		f := fail(prefix, err).(*lifecycle.Failure)
		f.Reason = "FailedMapVolume"
		return f
	}
	if err := volumes.CheckNodeAffinity(pv, r.cfg.Node.Labels()); err != nil {
		// The kubelet's event for this one is FailedMount.
		return fail("MapVolume.NodeAffinity check failed", err)
	}
	if volumes.ReadWriteOncePod(pv) && r.mountedElsewhere(pv.Name, pod.UID) {
		return mapFail("MapVolume.MapPodDevice failed", errors.New("volume uses the ReadWriteOncePod access mode and is already in use by another pod"))
	}
	if pv.Spec.CSI != nil {
		// The driver's calls are not made under the lock every pod's
		// volumes take.
		c.mounted = true
		r.claimsMu.Unlock()
		err := r.mapCSI(ctx, pod, volName, c)
		r.claimsMu.Lock()
		if err != nil && r.claims[pod.UID][volName] == c {
			c.mounted = false
		}
		return err
	}
	dev, err := volumes.BlockDevice(pv.Spec.Local.Path)
	if err != nil {
		return mapFail("MapVolume.EvalHostSymlinks failed", err)
	}
	plugin := volumes.PVPluginName(pv)
	if _, err := r.layout().MapBlock(plugin, pv.Name, dev, pod.UID); err != nil {
		return mapFail("MapVolume.MapBlockVolume failed", err)
	}
	c.mounted = true
	return nil
}

// claimDevice is the host path (the pod's symlink to the device) and the
// cgroup access of a container's volumeDevice, as the kubelet's
// makeBlockVolumes gives it to the runtime: "mrw", or "r" for a claim the
// pod's volume source says is read-only.
func (r *Runtime) claimDevice(pod *v1.Pod, d v1.VolumeDevice) (runtime.DeviceNode, error) {
	if !filepath.IsAbs(d.DevicePath) {
		return runtime.DeviceNode{}, fmt.Errorf("error DevicePath `%s` must be an absolute path", d.DevicePath)
	}
	r.claimsMu.Lock()
	defer r.claimsMu.Unlock()
	c := r.claims[pod.UID][d.Name]
	if c == nil || !c.mounted || !c.Block() {
		return runtime.DeviceNode{}, fmt.Errorf("cannot find volume %q to pass into container", d.Name)
	}
	perms := "mrw"
	if c.ReadOnly {
		perms = "r"
	}
	link := filepath.Join(r.layout().PodDeviceMapPath(pod.UID, volumes.PVPluginName(c.PV)), c.PV.Name)
	return runtime.DeviceNode{HostPath: link, ContainerPath: d.DevicePath, Permissions: perms}, nil
}

// claimPath is where the containers mount a claim's PV from: a hostPath
// PV's path itself; a local PV's bind mount in the pod's volume directory,
// named by the PV as the kubelet names it.
func (r *Runtime) claimPath(pod *v1.Pod, c *podClaim) string {
	if c.PV.Spec.HostPath != nil {
		return c.PV.Spec.HostPath.Path
	}
	if c.PV.Spec.CSI != nil {
		return csi.TargetPath(r.layout(), pod.UID, c.PV.Name)
	}
	return r.layout().PodVolumeDir(pod.UID, volumes.PVPluginName(c.PV), c.PV.Name)
}

// claimMount is the host path and read-only-ness of a container's mount of
// a claim's volume, which PrepareSandbox set up.
func (r *Runtime) claimMount(pod *v1.Pod, vol *v1.Volume) (string, bool, error) {
	r.claimsMu.Lock()
	defer r.claimsMu.Unlock()
	c := r.claims[pod.UID][vol.Name]
	if c == nil || !c.mounted {
		return "", false, fmt.Errorf("volume %q is not set up", vol.Name)
	}
	ro := c.ReadOnly
	for _, o := range volumes.MountOptions(c.PV) {
		ro = ro || o == "ro"
	}
	return r.claimPath(pod, c), ro, nil
}

// localPathType is the kubelet's check of a local PV's path (its
// getGlobalLocalPath): a directory that exists. A block device, which the
// kubelet formats and mounts for a Filesystem PV, is not supported.
func localPathType(path string) error {
	fi, err := os.Stat(path)
	if os.IsNotExist(err) {
		return fmt.Errorf("path %q does not exist", path)
	}
	if err != nil {
		return err
	}
	switch {
	case fi.IsDir():
		return nil
	case fi.Mode()&os.ModeDevice != 0 && fi.Mode()&os.ModeCharDevice == 0:
		return fmt.Errorf("local volume %q is a block device, which hostlet does not support", path)
	}
	return errors.New("only directory and block device are supported")
}

// mountFlags are the mount options a local PV's bind mount can carry.
var mountFlags = map[string]uintptr{
	"ro": unix.MS_RDONLY, "nosuid": unix.MS_NOSUID, "nodev": unix.MS_NODEV, "noexec": unix.MS_NOEXEC,
	"noatime": unix.MS_NOATIME, "nodiratime": unix.MS_NODIRATIME, "relatime": unix.MS_RELATIME,
	"strictatime": unix.MS_STRICTATIME, "sync": unix.MS_SYNCHRONOUS, "dirsync": unix.MS_DIRSYNC,
	"rw": 0, "suid": 0, "dev": 0, "exec": 0, "async": 0, "defaults": 0, "bind": 0,
}

// bindFlags are the flags of a local PV's bind mount: read-only when the
// pod's volume source says so, and the PV's mount options, which are flags
// for a bind mount (anything else is refused, not dropped).
func bindFlags(opts []string, readOnly bool) (uintptr, error) {
	var flags uintptr
	if readOnly {
		flags |= unix.MS_RDONLY
	}
	for _, o := range opts {
		f, ok := mountFlags[o]
		if !ok {
			return 0, fmt.Errorf("mount option %q is not supported by hostlet for a local volume", o)
		}
		flags |= f
	}
	return flags, nil
}

// bindOnce bind-mounts src on dir with flags unless dir is a mount point
// already (set up before, also by a hostlet before a restart); made says
// it mounted now.
func bindOnce(src, dir string, flags uintptr) (made bool, err error) {
	if ok, err := mountinfo.Mounted(dir); err == nil && ok {
		return false, nil
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return false, err
	}
	if err := unix.Mount(src, dir, "", unix.MS_BIND, ""); err != nil {
		return false, &os.PathError{Op: "bind mount", Path: src, Err: err}
	}
	if flags != 0 {
		// A bind mount takes its flags from a remount of it.
		if err := unix.Mount("", dir, "", unix.MS_BIND|unix.MS_REMOUNT|flags, ""); err != nil {
			unmountAll(dir)
			return false, &os.PathError{Op: "remount", Path: dir, Err: err}
		}
	}
	return true, nil
}
