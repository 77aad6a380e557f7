package volumemanager

import (
	"context"
	"os"

	"github.com/hostlet/hostlet/provider/volumes"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	mount "k8s.io/mount-utils"
	netutils "k8s.io/utils/net"
)

// nfs is the kubelet's NFS plugin (kubernetes.io/nfs), for inline nfs
// volumes and NFS PVs: the export mounted by the host's mount helper
// (mount.nfs, nfs-common's) at the pod's volume directory, with the PV's
// mount options and "ro" for a read-only source, one mount per pod as the
// kubelet's; unmounted (lazily, as a dead server cannot hold up a
// teardown) with the pod's volumes.
type nfs struct{}

func (nfs) Name() string { return "kubernetes.io/nfs" }

func (nfs) CanSupport(s *Spec) bool { return nfsSource(s) != nil }

// nfsSource is the volume's NFS source and whether it is read-only: the
// inline source's, or the PV's read-only as the pod's claim says.
func nfsSource(s *Spec) *v1.NFSVolumeSource {
	if pv := s.PV(); pv != nil {
		return pv.Spec.NFS
	}
	return s.Volume.NFS
}

func nfsReadOnly(s *Spec) bool {
	if s.Claim != nil {
		return s.Claim.ReadOnly
	}
	return s.Volume.NFS.ReadOnly
}

// nfsMounter mounts as the kubelet's mounter does (its errors are the
// kubelet's: the command, its arguments and output); a variable for tests.
var nfsMounter mount.Interface = mount.New("")

// SetUp mounts the export unless the directory is a mount already (set
// up before, also by a hostlet before a restart). A failed mount leaves no
// directory behind, as the kubelet's.
func (p nfs) SetUp(_ context.Context, m *Manager, pod *v1.Pod, s *Spec, _ ContentFunc) error {
	dir, _ := p.Path(m, pod, s)
	notMnt, err := mount.IsNotMountPoint(nfsMounter, dir)
	if err != nil && !os.IsNotExist(err) {
		return p.fail(s, err)
	}
	if err == nil && !notMnt {
		return nil
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return p.fail(s, err)
	}
	src := nfsSource(s)
	var opts []string
	if nfsReadOnly(s) {
		opts = append(opts, "ro")
	}
	var userOpts []string
	if pv := s.PV(); pv != nil {
		userOpts = volumes.MountOptions(pv)
	}
	server := src.Server
	if netutils.IsIPv6String(server) {
		server = "[" + server + "]"
	}
	if err := nfsMounter.MountSensitiveWithoutSystemd(server+":"+src.Path, dir, "nfs", joinMountOptions(userOpts, opts), nil); err != nil {
		if notMnt, mntErr := mount.IsNotMountPoint(nfsMounter, dir); mntErr == nil && !notMnt {
			if uerr := nfsMounter.Unmount(dir); uerr != nil {
				log.WithError(uerr).WithField("path", dir).Warn("unmounting a failed NFS mount")
				return p.fail(s, err)
			}
		}
		_ = os.Remove(dir)
		return p.fail(s, err)
	}
	return nil
}

// fail is a claim's error with the PV's name; an inline volume's is
// wrapped by SetUpPod.
func (nfs) fail(s *Spec, err error) error {
	if pv := s.PV(); pv != nil {
		return claimFailure("MountVolume.SetUp failed", pv, err)
	}
	return err
}

func (p nfs) Path(m *Manager, pod *v1.Pod, s *Spec) (string, bool) {
	if pv := s.PV(); pv != nil {
		return m.layout.PodVolumeDir(pod.UID, p.Name(), pv.Name), nfsReadOnly(s)
	}
	return m.VolumeDir(pod, s.Volume.Name), nfsReadOnly(s)
}

func (nfs) LocalEphemeral(*v1.Volume) bool { return false }
func (nfs) HasStats() bool                 { return false }
func (nfs) statFS()                        {}

// joinMountOptions is the kubelet's JoinMountOptions: the user's options
// and the system's, without duplicates, sorted.
func joinMountOptions(user, system []string) []string {
	all := sets.New[string]()
	for _, o := range append(append([]string(nil), user...), system...) {
		if o != "" {
			all.Insert(o)
		}
	}
	return sets.List(all)
}
