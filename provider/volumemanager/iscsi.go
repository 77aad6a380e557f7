package volumemanager

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/google/renameio/v2"
	"github.com/hostlet/hostlet/provider/volumes"
	"github.com/moby/sys/mountinfo"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mount "k8s.io/mount-utils"
	utilexec "k8s.io/utils/exec"
)

// iscsi is the kubelet's iSCSI plugin (kubernetes.io/iscsi), for inline
// iscsi volumes and iSCSI PVs, in the kubelet's steps and paths: the
// target's portals logged in to with open-iscsi's iscsiadm (discovery and
// session CHAP from the volume's secret, an iface of its own for an
// initiatorName, every portal of a multipath volume, its dm map used),
// the LUN's disk formatted on first use and mounted once per node at
//
//	<root>/plugins/kubernetes.io/iscsi/iface-<iface>/<portal>-<iqn>-lun-<lun>
//
// (iscsi.json there, under the mount, says how to log out), then bound
// into each pod's volume directory; a block PV's disk mapped from
// plugins/kubernetes.io/iscsi/volumeDevices/iface-<iface>/<portal>-<iqn>-lun-<lun>.
// A LUN no pod uses any more is unmounted and its disks deleted, and the
// target logged out once no LUN of it is left (tearDownDevices).
type iscsi struct{}

const iscsiPluginName = "kubernetes.io/iscsi"

func (iscsi) Name() string { return iscsiPluginName }

func (iscsi) CanSupport(s *Spec) bool {
	if pv := s.PV(); pv != nil {
		return pv.Spec.ISCSI != nil
	}
	return s.Volume.ISCSI != nil
}

// iscsiDisk is a volume's target as the kubelet's iscsiDisk; its exported
// fields are the kubelet's iscsi.json.
type iscsiDisk struct {
	VolName       string
	Portals       []string
	Iqn           string
	Lun           string
	InitIface     string
	Iface         string
	InitiatorName string

	fsType                     string
	readOnly                   bool
	chapDiscovery, chapSession bool
	secretRef                  *v1.SecretReference
	secret                     map[string]string
}

// iscsiSpec is the volume's disk as the kubelet's createISCSIDisk makes
// it: the target portal first, then the others, each with the default
// port; an initiator name's iface named for the portal and volume.
func iscsiSpec(s *Spec, podNamespace string) *iscsiDisk {
	var src v1.ISCSIPersistentVolumeSource
	readOnly := false
	if pv := s.PV(); pv != nil {
		src, readOnly = *pv.Spec.ISCSI, s.Claim.ReadOnly
		if src.SecretRef != nil && src.SecretRef.Namespace == "" {
			src.SecretRef = &v1.SecretReference{Name: src.SecretRef.Name, Namespace: podNamespace}
		}
	} else {
		in := s.Volume.ISCSI
		src = v1.ISCSIPersistentVolumeSource{TargetPortal: in.TargetPortal, IQN: in.IQN, Lun: in.Lun,
			ISCSIInterface: in.ISCSIInterface, FSType: in.FSType, Portals: in.Portals,
			DiscoveryCHAPAuth: in.DiscoveryCHAPAuth, SessionCHAPAuth: in.SessionCHAPAuth, InitiatorName: in.InitiatorName}
		if in.SecretRef != nil {
			src.SecretRef = &v1.SecretReference{Name: in.SecretRef.Name, Namespace: podNamespace}
		}
		readOnly = in.ReadOnly
	}
	d := &iscsiDisk{VolName: s.Name(), Iqn: src.IQN, Lun: strconv.Itoa(int(src.Lun)), fsType: src.FSType, readOnly: readOnly,
		chapDiscovery: src.DiscoveryCHAPAuth, chapSession: src.SessionCHAPAuth, secretRef: src.SecretRef}
	d.Portals = append(d.Portals, portalWithPort(src.TargetPortal))
	for _, p := range src.Portals {
		d.Portals = append(d.Portals, portalWithPort(p))
	}
	d.Iface = src.ISCSIInterface
	if d.Iface == "" {
		d.Iface = "default"
	}
	d.InitIface = d.Iface
	if src.InitiatorName != nil && *src.InitiatorName != "" {
		d.InitiatorName = *src.InitiatorName
		d.Iface = d.Portals[0] + ":" + d.VolName
	}
	return d
}

// portalWithPort is the portal with iSCSI's port when it names none.
func portalWithPort(p string) string {
	if !strings.Contains(p, ":") {
		return p + ":3260"
	}
	return p
}

// checkPaths refuses a disk whose iface, portal or target would not be one
// directory name under the plugin's (the API lets an IQN's ":" part hold a
// "/", and checks portals and ifaces for nothing): the global paths are
// made from them, and an inline volume's come from the pod.
func (d *iscsiDisk) checkPaths() error {
	for _, elem := range []string{"iface-" + d.Iface, d.name()} {
		if strings.Contains(elem, "/") || elem == "." || elem == ".." {
			return fmt.Errorf("iscsi: iface %q, portal %q and target %q must not make a path: %q", d.Iface, d.Portals[0], d.Iqn, elem)
		}
	}
	return nil
}

// name is the disk's directory name under the plugin's: its first portal,
// target and LUN.
func (d *iscsiDisk) name() string { return d.Portals[0] + "-" + d.Iqn + "-lun-" + d.Lun }

func (m *Manager) iscsiGlobalPath(d *iscsiDisk) string {
	return filepath.Join(m.layout.PluginDir(iscsiPluginName), "iface-"+d.Iface, d.name())
}

func (m *Manager) iscsiGlobalMapPath(d *iscsiDisk) string {
	return filepath.Join(m.layout.PluginDir(iscsiPluginName), "volumeDevices", "iface-"+d.Iface, d.name())
}

// readSecret fills the disk's CHAP secret, read from the API as the
// kubelet reads it, when it asks for CHAP.
func (m *Manager) readSecret(ctx context.Context, d *iscsiDisk) error {
	if !(d.chapDiscovery || d.chapSession) || d.secretRef == nil || d.secretRef.Name == "" || d.secretRef.Namespace == "" {
		return nil
	}
	if m.cfg.Secrets == nil {
		return fmt.Errorf("cannot get kube client")
	}
	sec, err := m.cfg.Secrets.Secrets(d.secretRef.Namespace).Get(ctx, d.secretRef.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("couldn't get secret %v/%v error: %w", d.secretRef.Namespace, d.secretRef.Name, err)
	}
	d.secret = map[string]string{}
	for k, v := range sec.Data {
		d.secret[k] = string(v)
	}
	return nil
}

// iscsiMounter mounts and formats as the kubelet's (a variable for tests).
var iscsiMounter mount.Interface = mount.New("")

// SetUp logs in, mounts the LUN at its global path (formatted if it has no
// filesystem) and binds that into the pod's volume directory, the
// kubelet's WaitForAttach, MountDevice and SetUp, with their messages.
// Under the target's lock: the LUN's teardown takes it too.
func (p iscsi) SetUp(ctx context.Context, m *Manager, pod *v1.Pod, s *Spec, _ ContentFunc) error {
	dir, _ := p.Path(m, pod, s)
	if notMnt, err := mount.IsNotMountPoint(iscsiMounter, dir); err == nil && !notMnt {
		return nil
	}
	d := iscsiSpec(s, pod.Namespace)
	if err := d.checkPaths(); err != nil {
		return p.fail(s, "MountVolume.NewMounter initialization failed", err)
	}
	m.targets.LockKey(d.Iqn)
	defer func() { _ = m.targets.UnlockKey(d.Iqn) }()
	if err := m.readSecret(ctx, d); err != nil {
		return p.fail(s, "MountVolume.NewMounter initialization failed", err)
	}
	global := m.iscsiGlobalPath(d)
	if notMnt, err := mount.IsNotMountPoint(iscsiMounter, global); err != nil || notMnt {
		dev, err := hostISCSI.attach(d)
		if err != nil {
			return p.fail(s, "MountVolume.WaitForAttach failed", err)
		}
		if err := persistISCSI(d, global); err != nil {
			return p.fail(s, "MountVolume.WaitForAttach failed", err)
		}
		var opts []string
		if d.readOnly {
			opts = append(opts, "ro")
		}
		if pv := s.PV(); pv != nil {
			opts = joinMountOptions(volumes.MountOptions(pv), opts)
		}
		fm := mount.NewSafeFormatAndMount(iscsiMounter, utilexec.New())
		if err := fm.FormatAndMount(dev, global, d.fsType, opts); err != nil {
			return p.fail(s, "MountVolume.MountDevice failed", err)
		}
		log.WithFields(log.Fields{"device": dev, "path": global, "iqn": d.Iqn, "lun": d.Lun}).Info("iscsi: LUN mounted")
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return p.fail(s, "MountVolume.SetUp failed", err)
	}
	opts := []string{"bind"}
	if d.readOnly {
		opts = append(opts, "ro")
	}
	if pv := s.PV(); pv != nil {
		opts = joinMountOptions(volumes.MountOptions(pv), opts)
	}
	if err := iscsiMounter.MountSensitiveWithoutSystemd(global, dir, "", opts, nil); err != nil {
		if notMnt, mntErr := mount.IsNotMountPoint(iscsiMounter, dir); mntErr == nil && !notMnt {
			_ = iscsiMounter.Unmount(dir)
		}
		_ = os.Remove(dir)
		return p.fail(s, "MountVolume.SetUp failed", err)
	}
	if !d.readOnly {
		if err := applyFSGroupPolicy(dir, pod, false); err != nil {
			log.WithError(err).WithField("path", dir).Warn("iscsi: fsGroup not applied")
		}
	}
	return nil
}

// persistISCSI writes the disk's iscsi.json into dir, unless dir is a
// mount already (the file is under it, from before).
func persistISCSI(d *iscsiDisk, dir string) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	if ok, err := mountinfo.Mounted(dir); err == nil && ok {
		return nil
	}
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	return renameio.WriteFile(filepath.Join(dir, "iscsi.json"), b, 0o600)
}

func loadISCSI(dir string) (*iscsiDisk, error) {
	b, err := os.ReadFile(filepath.Join(dir, "iscsi.json"))
	if err != nil {
		return nil, err
	}
	d := &iscsiDisk{}
	return d, json.Unmarshal(b, d)
}

// fail is the kubelet's message of the step that failed: for a claim with
// the PV's name, for an inline volume with its name.
func (iscsi) fail(s *Spec, prefix string, err error) error {
	if pv := s.PV(); pv != nil {
		return claimFailure(prefix, pv, err)
	}
	return inlineFailure("FailedMount", prefix, s.Volume.Name, err)
}

func (p iscsi) Path(m *Manager, pod *v1.Pod, s *Spec) (string, bool) {
	d := iscsiSpec(s, pod.Namespace)
	return m.layout.PodVolumeDir(pod.UID, p.Name(), s.Name()), d.readOnly
}

// MapDevice logs in and maps the LUN's disk (multipath map) for the pod,
// the kubelet's WaitForAttach and MapBlockVolume for a block PV.
func (p iscsi) MapDevice(ctx context.Context, m *Manager, pod *v1.Pod, s *Spec) error {
	pv := s.PV()
	d := iscsiSpec(s, pod.Namespace)
	if err := d.checkPaths(); err != nil {
		return mapFailure("MapVolume.NewBlockVolumeMapper initialization failed", pv, err)
	}
	m.targets.LockKey(d.Iqn)
	defer func() { _ = m.targets.UnlockKey(d.Iqn) }()
	global := m.iscsiGlobalMapPath(d)
	link := filepath.Join(m.layout.PodDeviceMapPath(pod.UID, p.Name()), pv.Name)
	// Mapped already (volumes are set up again on every resync): the
	// pod's bind mount of the disk and its link are there.
	if fi, err := os.Lstat(filepath.Join(global, string(pod.UID))); err == nil && fi.Mode()&os.ModeDevice != 0 {
		if _, err := os.Readlink(link); err == nil {
			return nil
		}
	}
	if err := m.readSecret(ctx, d); err != nil {
		return mapFailure("MapVolume.NewBlockVolumeMapper initialization failed", pv, err)
	}
	dev, err := hostISCSI.attach(d)
	if err != nil {
		return mapFailure("MapVolume.WaitForAttach failed", pv, err)
	}
	if err := persistISCSI(d, global); err != nil {
		return mapFailure("MapVolume.WaitForAttach failed", pv, err)
	}
	real, err := volumes.BlockDevice(dev)
	if err != nil {
		return mapFailure("MapVolume.EvalHostSymlinks failed", pv, err)
	}
	if _, err := volumes.MapDevice(global, link, real, pod.UID); err != nil {
		return mapFailure("MapVolume.MapBlockVolume failed", pv, err)
	}
	return nil
}

func (iscsi) LocalEphemeral(*v1.Volume) bool { return false }

// HasStats is false: the stats summary has an iSCSI volume's filesystem
// (statFS), not a walk of it.
func (iscsi) HasStats() bool { return false }
func (iscsi) statFS()        {}

// tearDownDevices unmounts the LUNs no pod's volume is bound to any more
// and unmaps the block LUNs no pod maps, then logs out of each target
// none of whose LUNs is left, as the kubelet's UnmountDevice and
// TearDownDevice once the last pod's volume is gone. Found on disk, so a
// restarted hostlet finishes what an earlier one left. Each under its
// target's lock, as a pod's set up of the LUN.
func (iscsi) tearDownDevices(m *Manager) error {
	root := m.layout.PluginDir(iscsiPluginName)
	var errs []error
	fs, _ := filepath.Glob(filepath.Join(root, "iface-*", "*-lun-*"))
	for _, global := range fs {
		if err := m.iscsiUnmountDevice(global); err != nil {
			errs = append(errs, err)
		}
	}
	block, _ := filepath.Glob(filepath.Join(root, "volumeDevices", "iface-*", "*-lun-*"))
	for _, global := range block {
		if err := m.iscsiUnmapDevice(global); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("iscsi: %v", errs)
	}
	return nil
}

// lockTarget takes the lock of the target a global path names.
func (m *Manager) lockTarget(global string) (unlock func(), ok bool) {
	_, iqn, err := portalAndIqn(filepath.Base(global))
	if err != nil {
		return nil, false
	}
	m.targets.LockKey(iqn)
	return func() { _ = m.targets.UnlockKey(iqn) }, true
}

// iscsiUnmountDevice is the kubelet's UnmountDevice of a filesystem LUN:
// nothing while a pod's volume is bound to it; else unmounted, its disks
// deleted and the target logged out unless another LUN of it is here.
func (m *Manager) iscsiUnmountDevice(global string) error {
	unlock, ok := m.lockTarget(global)
	if !ok {
		return nil
	}
	defer unlock()
	if notMnt, err := mount.IsNotMountPoint(iscsiMounter, global); err == nil && !notMnt {
		refs, err := iscsiMounter.GetMountRefs(global)
		if err != nil {
			return err
		}
		if len(refs) > 0 {
			return nil
		}
		if err := iscsiMounter.Unmount(global); err != nil {
			return fmt.Errorf("iscsi detach disk: failed to unmount: %s: %w", global, err)
		}
		log.WithField("path", global).Info("iscsi: LUN unmounted: no pod uses it")
	}
	return m.detach(global, func(d *iscsiDisk) { hostISCSI.deleteDevices(d) })
}

// iscsiUnmapDevice is the kubelet's TearDownDevice of a block LUN once no
// pod maps it (no pod's bind mount in its global map path).
func (m *Manager) iscsiUnmapDevice(global string) error {
	unlock, ok := m.lockTarget(global)
	if !ok {
		return nil
	}
	defer unlock()
	entries, err := os.ReadDir(global)
	if err != nil {
		return nil
	}
	for _, e := range entries {
		if e.Name() != "iscsi.json" {
			return nil
		}
	}
	return m.detach(global, nil)
}

// detach logs the target of the unmounted LUN at global out, unless
// another LUN of the same portal and target is here, and removes global.
func (m *Manager) detach(global string, deleteDevices func(*iscsiDisk)) error {
	d, err := loadISCSI(global)
	found := true
	if err != nil {
		// As the kubelet: without iscsi.json the paths say the portal,
		// target and iface.
		portal, iqn, perr := portalAndIqn(filepath.Base(global))
		if perr != nil {
			return perr
		}
		d = &iscsiDisk{Portals: []string{portal}, Iqn: iqn, Lun: lunOf(global)}
		d.Iface, found = ifaceOf(global)
	}
	if deleteDevices != nil {
		deleteDevices(d)
	}
	if len(d.Portals) == 0 {
		return fmt.Errorf("iscsi detach disk: failed to detach iscsi disk. Couldn't get connected portals from configurations")
	}
	if !m.iscsiSessionBusy(d.Portals[0], d.Iqn) {
		if err := hostISCSI.logout(d, found); err != nil {
			return fmt.Errorf("failed to finish detachISCSIDisk, err: %v", err)
		}
	}
	return os.RemoveAll(global)
}

// iscsiSessionBusy: more than one LUN directory (this one included) of
// the portal and target, filesystem or block, is on the node.
func (m *Manager) iscsiSessionBusy(portal, iqn string) bool {
	root := m.layout.PluginDir(iscsiPluginName)
	n := 0
	for _, pattern := range []string{filepath.Join(root, "iface-*", "*"), filepath.Join(root, "volumeDevices", "iface-*", "*")} {
		dirs, _ := filepath.Glob(pattern)
		for _, dir := range dirs {
			if strings.HasPrefix(filepath.Base(dir), portal+"-"+iqn) {
				n++
			}
		}
	}
	return n > 1
}

// portalAndIqn are the portal and target of a LUN directory's name
// ("127.0.0.1:3260-iqn.2003-01.io.k8s:e2e-lun-0").
func portalAndIqn(name string) (string, string, error) {
	i := strings.Index(name, "-")
	if i < 0 {
		return "", "", fmt.Errorf("iscsi detach disk: no portal in %s", name)
	}
	j := strings.Index(name, "iqn.")
	if j < 0 {
		j = strings.Index(name, "eui.")
	}
	k := strings.LastIndex(name, "-lun-")
	if j < 0 || k < j {
		return "", "", fmt.Errorf("iscsi detach disk: no iqn in %s", name)
	}
	return name[:i], name[j:k], nil
}

func lunOf(global string) string {
	name := filepath.Base(global)
	return name[strings.LastIndex(name, "-lun-")+len("-lun-"):]
}

func ifaceOf(global string) (string, bool) {
	if m := ifaceDirRe.FindStringSubmatch(global); len(m) > 1 {
		return m[1], true
	}
	return "", false
}
