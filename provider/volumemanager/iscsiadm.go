package volumemanager

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	log "github.com/sirupsen/logrus"
	utilexec "k8s.io/utils/exec"
)

// The host side of the iSCSI plugin, as the kubelet's ISCSIUtil: open-iscsi's
// iscsiadm for discovery, CHAP, logins and logouts, and sysfs for the SCSI
// hosts of a target's sessions, its LUNs' disks and their multipath maps.

const (
	// A multipath volume is used once 2 of its paths are up, after 2
	// rounds of logins; with fewer, the rounds go on to 5, then one path
	// does.
	minMultipathCount = 2
	minAttachAttempts = 2
	maxAttachAttempts = 5
	// Seconds to wait for a multipath map of 2 or more paths, and for a
	// LUN's disk to appear.
	multipathDeviceTimeout = 10
	deviceDiscoveryTimeout = 30

	// iscsiadm's exit codes: a session logged in already (ISCSI_ERR_SESS_EXISTS),
	// none found (ISCSI_ERR_SESS_NOT_FOUND), no record to act on
	// (ISCSI_ERR_NO_OBJS_FOUND).
	iscsiErrSessExists   = 15
	iscsiErrSessNotFound = 2
	iscsiErrNoObjsFound  = 21
)

// The CHAP keys a secret's data gives, for discovery and for the session.
var (
	chapDiscoveryKeys = []string{"discovery.sendtargets.auth.username", "discovery.sendtargets.auth.password",
		"discovery.sendtargets.auth.username_in", "discovery.sendtargets.auth.password_in"}
	chapSessionKeys = []string{"node.session.auth.username", "node.session.auth.password",
		"node.session.auth.username_in", "node.session.auth.password_in"}
	ifaceTransportRe = regexp.MustCompile(`iface.transport_name = (.*)\n`)
	ifaceDirRe       = regexp.MustCompile(`.+/iface-([^/]+)/.+`)
)

// iscsiHost runs iscsiadm and reads sysfs and /dev; its fields are for
// tests (a fake iscsiadm, a sysfs and /dev in a temp dir, no waiting).
type iscsiHost struct {
	run   func(name string, args ...string) (string, error)
	sys   string // sysfs
	dev   string // prefix of /dev paths
	sleep func(time.Duration)
}

var hostISCSI = &iscsiHost{
	run: func(name string, args ...string) (string, error) {
		out, err := utilexec.New().Command(name, args...).CombinedOutput()
		return string(out), err
	},
	sys: "/sys", sleep: time.Sleep,
}

// iscsiadm runs iscsiadm, logging the command (never a CHAP secret's:
// those go through secret) at debug level.
func (h *iscsiHost) iscsiadm(args ...string) (string, error) {
	t0 := time.Now()
	out, err := h.run("iscsiadm", args...)
	log.WithFields(log.Fields{"args": args, "took": time.Since(t0).Round(time.Millisecond), "output": strings.TrimSpace(out)}).WithError(err).Debug("iscsi: iscsiadm")
	return out, err
}

// attach logs the disk's portals in (discovery, CHAP, login, the LUN
// scanned) and returns its device: the multipath map of its paths when
// there is one, else the first path's disk, as the kubelet's AttachDisk.
func (h *iscsiHost) attach(d *iscsiDisk) (string, error) {
	out, err := h.iscsiadm("-m", "iface", "-I", d.InitIface, "-o", "show")
	if err != nil {
		return "", fmt.Errorf("iscsi: could not read iface %s: %v: %s", d.InitIface, err, out)
	}
	transport := transportName(out)
	if d.InitiatorName != "" {
		if err := h.cloneIface(d); err != nil {
			return "", err
		}
	}
	lun, err := strconv.Atoi(d.Lun)
	if err != nil {
		return "", fmt.Errorf("AttachDisk: lun is not a number: %s\nError: %v", d.Lun, err)
	}
	hosts, err := h.portalHosts(d.Iqn)
	if err != nil {
		return "", err
	}
	paths := map[string]string{}
	var lastErr error
	for i := 1; i <= maxAttachAttempts; i++ {
		for _, tp := range d.Portals {
			if _, ok := paths[tp]; ok {
				continue
			}
			host, ok := hosts[tp]
			if !ok {
				if err := h.login(d, tp); err != nil {
					lastErr = err
					continue
				}
				if hosts, err = h.portalHosts(d.Iqn); err != nil {
					return "", err
				}
				if host, ok = hosts[tp]; !ok {
					log.WithFields(log.Fields{"portal": tp, "iqn": d.Iqn}).Warn("iscsi: no SCSI host for the portal after logging in")
					continue
				}
			}
			// node.session.scan is manual: only this LUN is scanned, so the
			// node sees no LUN of the target it was not given.
			if err := h.scanLun(host, lun); err != nil {
				return "", err
			}
			if transport == "" {
				return "", fmt.Errorf("could not parse iface file for %s", d.Iface)
			}
			path := h.devicePath(transport, tp, d)
			if !h.waitForPath(&path, transport) {
				lastErr = fmt.Errorf("Timed out waiting for device at path %s after %ds", path, deviceDiscoveryTimeout)
				continue
			}
			paths[tp] = path
		}
		if len(paths) == 0 {
			// The kubelet deletes the iface it may have cloned, and tries
			// again in a while.
			_, _ = h.iscsiadm("-m", "iface", "-I", d.Iface, "-o", "delete")
			return "", fmt.Errorf("failed to get any path for iscsi disk, last err seen:\n%v", lastErr)
		}
		if len(paths) == len(d.Portals) || (len(paths) >= minMultipathCount && i >= minAttachAttempts) {
			break
		}
	}
	if lastErr != nil {
		log.WithError(lastErr).WithField("iqn", d.Iqn).Warn("iscsi: not every portal is logged in")
	}
	var list []string
	for _, tp := range d.Portals {
		if p, ok := paths[tp]; ok {
			list = append(list, p)
		}
	}
	tries := 1
	if len(d.Portals) > 1 {
		tries = multipathDeviceTimeout
	}
	if dm := h.waitForMultipath(list, tries); dm != "" {
		return dm, nil
	}
	return list[0], nil
}

// login discovers the portal's targets (CHAP if asked) and logs in to the
// disk's target, its node record set to a manual scan and startup (a
// rebooted node logs in to nothing by itself).
func (h *iscsiHost) login(d *iscsiDisk, tp string) error {
	_, _ = h.iscsiadm("-m", "discoverydb", "-t", "sendtargets", "-p", tp, "-I", d.Iface, "-o", "new")
	if d.chapDiscovery {
		if out, err := h.iscsiadm("-m", "discoverydb", "-t", "sendtargets", "-p", tp, "-I", d.Iface, "-o", "update", "-n", "discovery.sendtargets.auth.authmethod", "-v", "CHAP"); err != nil {
			return fmt.Errorf("iscsi: failed to update discoverydb to portal %s error: iscsi: failed to update discoverydb with CHAP, output: %v", tp, out)
		}
		for _, k := range chapDiscoveryKeys {
			if v := d.secret[k]; v != "" {
				if out, err := h.run("iscsiadm", "-m", "discoverydb", "-t", "sendtargets", "-p", tp, "-I", d.Iface, "-o", "update", "-n", k, "-v", v); err != nil {
					return fmt.Errorf("iscsi: failed to update discoverydb to portal %s error: iscsi: failed to update discoverydb key %q error: %v", tp, k, out)
				}
			}
		}
	}
	if out, err := h.iscsiadm("-m", "discoverydb", "-t", "sendtargets", "-p", tp, "-I", d.Iface, "--discover"); err != nil {
		_, _ = h.iscsiadm("-m", "discoverydb", "-t", "sendtargets", "-p", tp, "-I", d.Iface, "-o", "delete")
		return fmt.Errorf("iscsi: failed to sendtargets to portal %s output: %s, err %v", tp, out, err)
	}
	if out, err := h.iscsiadm("-m", "node", "-p", tp, "-T", d.Iqn, "-I", d.Iface, "-o", "update", "-n", "node.session.scan", "-v", "manual"); err != nil {
		log.WithField("output", out).Warn("iscsi: failed to update node with node.session.scan=manual, possible exposure to issue 90982")
	}
	if d.chapSession {
		if out, err := h.iscsiadm("-m", "node", "-p", tp, "-T", d.Iqn, "-I", d.Iface, "-o", "update", "-n", "node.session.auth.authmethod", "-v", "CHAP"); err != nil {
			return fmt.Errorf("iscsi: failed to update iscsi node to portal %s error: iscsi: failed to update node with CHAP, output: %v", tp, out)
		}
		for _, k := range chapSessionKeys {
			if v := d.secret[k]; v != "" {
				if out, err := h.run("iscsiadm", "-m", "node", "-p", tp, "-T", d.Iqn, "-I", d.Iface, "-o", "update", "-n", k, "-v", v); err != nil {
					return fmt.Errorf("iscsi: failed to update iscsi node to portal %s error: iscsi: failed to update node session key %q error: %v", tp, k, out)
				}
			}
		}
	}
	if out, err := h.iscsiadm("-m", "node", "-p", tp, "-T", d.Iqn, "-I", d.Iface, "--login"); err != nil {
		_, _ = h.iscsiadm("-m", "node", "-p", tp, "-I", d.Iface, "-T", d.Iqn, "-o", "delete")
		return fmt.Errorf("iscsi: failed to attach disk: Error: %s (%v)", out, err)
	}
	if _, err := h.iscsiadm("-m", "node", "-p", tp, "-T", d.Iqn, "-o", "update", "-n", "node.startup", "-v", "manual"); err != nil {
		log.WithError(err).Warn("iscsi: failed to set the iSCSI login mode to manual")
	}
	log.WithFields(log.Fields{"portal": tp, "iqn": d.Iqn, "iface": d.Iface}).Info("iscsi: logged in")
	return nil
}

// cloneIface makes the iface named for the volume (for its
// initiatorName) as a copy of the one it names, with that initiator name.
func (h *iscsiHost) cloneIface(d *iscsiDisk) error {
	if d.InitIface == d.Iface {
		return fmt.Errorf("iscsi: cannot clone iface with same name: %s", d.InitIface)
	}
	out, err := h.iscsiadm("-m", "iface", "-I", d.InitIface, "-o", "show")
	if err != nil {
		return fmt.Errorf("iscsi: failed to show iface records: %s (%v)", out, err)
	}
	params, err := parseIfaceShow(out)
	if err != nil {
		return fmt.Errorf("iscsi: failed to parse iface records: %s (%v)", out, err)
	}
	params["iface.initiatorname"] = d.InitiatorName
	if out, err := h.iscsiadm("-m", "iface", "-I", d.Iface, "-o", "new"); err != nil && exitStatus(err) != iscsiErrSessExists {
		return fmt.Errorf("iscsi: failed to create new iface: %s (%v)", out, err)
	}
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if _, err := h.iscsiadm("-m", "iface", "-I", d.Iface, "-o", "update", "-n", k, "-v", params[k]); err != nil {
			_, _ = h.iscsiadm("-m", "iface", "-I", d.Iface, "-o", "delete")
			return fmt.Errorf("iscsi: failed to update iface records: %s (%v). iface(%s) will be used", out, err, d.InitIface)
		}
	}
	return nil
}

// logout logs the disk's target out of every portal and deletes their node
// records, and the iface made for the volume's initiator name, as the
// kubelet's detachISCSIDisk: found says the iface is known (the kubelet's
// paths name it).
func (h *iscsiHost) logout(d *iscsiDisk, found bool) error {
	for _, portal := range d.Portals {
		logoutArgs := []string{"-m", "node", "-p", portal, "-T", d.Iqn, "--logout"}
		deleteArgs := []string{"-m", "node", "-p", portal, "-T", d.Iqn, "-o", "delete"}
		if found {
			logoutArgs = append(logoutArgs, "-I", d.Iface)
			deleteArgs = append(deleteArgs, "-I", d.Iface)
		}
		log.WithFields(log.Fields{"portal": portal, "iqn": d.Iqn, "iface": d.Iface}).Info("iscsi: logging out")
		if out, err := h.iscsiadm(logoutArgs...); ignoreExit(err) != nil {
			return fmt.Errorf("iscsi: failed to log out: %s (%v)", strings.TrimSpace(out), err)
		}
		if out, err := h.iscsiadm(deleteArgs...); ignoreExit(err) != nil {
			return fmt.Errorf("iscsi: failed to delete node record: %s (%v)", strings.TrimSpace(out), err)
		}
	}
	if d.InitiatorName != "" && found && len(d.Portals) > 0 && d.Iface == d.Portals[0]+":"+d.VolName {
		if out, err := h.iscsiadm("-m", "iface", "-I", d.Iface, "-o", "delete"); ignoreExit(err) != nil {
			return fmt.Errorf("iscsi: failed to delete iface: %s (%v)", strings.TrimSpace(out), err)
		}
	}
	return nil
}

// ignoreExit is err unless it is iscsiadm saying there was nothing to log
// out or delete.
func ignoreExit(err error) error {
	if s := exitStatus(err); s == iscsiErrNoObjsFound || s == iscsiErrSessNotFound {
		return nil
	}
	return err
}

func exitStatus(err error) int {
	var e utilexec.ExitError
	if errors.As(err, &e) {
		return e.ExitStatus()
	}
	return -1
}

// transportName is an iface's transport ("tcp" also when it says none).
func transportName(ifaceShow string) string {
	m := ifaceTransportRe.FindStringSubmatch(ifaceShow)
	if m == nil {
		return ""
	}
	if m[1] == "<empty>" {
		return "tcp"
	}
	return m[1]
}

// parseIfaceShow is an iface's settings, to copy into a clone: those set,
// without its immutable name.
func parseIfaceShow(out string) (map[string]string, error) {
	params := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "iface.") || strings.Contains(line, "<empty>") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 || f[1] != "=" {
			return nil, fmt.Errorf("error: invalid iface setting: %v", f)
		}
		if f[0] != "iface.iscsi_ifacename" {
			params[f[0]] = f[2]
		}
	}
	return params, nil
}

// devicePath is where udev links the LUN's disk of a portal: by its
// portal for tcp, a glob over the PCI address for offload transports.
func (h *iscsiHost) devicePath(transport, portal string, d *iscsiDisk) string {
	addr := strings.NewReplacer("[", "", "]", "").Replace(portal)
	if transport == "tcp" {
		return h.dev + strings.Join([]string{"/dev/disk/by-path/ip", addr, "iscsi", d.Iqn, "lun", d.Lun}, "-")
	}
	return h.dev + strings.Join([]string{"/dev/disk/by-path/pci", "*", "ip", addr, "iscsi", d.Iqn, "lun", d.Lun}, "-")
}

// waitForPath waits up to deviceDiscoveryTimeout seconds for the path (a
// glob for offload transports, set to the first match).
func (h *iscsiHost) waitForPath(path *string, transport string) bool {
	for i := 0; i < deviceDiscoveryTimeout; i++ {
		if transport == "tcp" {
			if _, err := os.Stat(*path); err == nil {
				return true
			} else if !os.IsNotExist(err) {
				return false
			}
		} else if m, _ := filepath.Glob(*path); len(m) > 0 {
			*path = m[0]
			return true
		}
		if i < deviceDiscoveryTimeout-1 {
			h.sleep(time.Second)
		}
	}
	return false
}

// waitForMultipath is the device-mapper map over any of the paths' disks,
// looked for tries times a second apart; "" when there is none.
func (h *iscsiHost) waitForMultipath(paths []string, tries int) string {
	for i := 0; i < tries; i++ {
		for _, p := range paths {
			if dm := h.multipathFor(p); dm != "" {
				return dm
			}
		}
		if i < tries-1 {
			h.sleep(time.Second)
		}
	}
	return ""
}

// multipathFor is the dm device whose slaves hold the path's disk.
func (h *iscsiHost) multipathFor(path string) string {
	if strings.HasPrefix(path, h.dev+"/dev/dm-") {
		return path
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return ""
	}
	disk := filepath.Base(real)
	dirs, _ := os.ReadDir(filepath.Join(h.sys, "block"))
	for _, e := range dirs {
		if strings.HasPrefix(e.Name(), "dm-") {
			if _, err := os.Lstat(filepath.Join(h.sys, "block", e.Name(), "slaves", disk)); err == nil {
				return h.dev + "/dev/" + e.Name()
			}
		}
	}
	return ""
}

// session is one iSCSI session of sysfs: its SCSI host number and path.
type session struct {
	host int
	dir  string
}

// sessions are the target's sessions (under /sys/class/iscsi_host).
func (h *iscsiHost) sessions(iqn string) ([]session, error) {
	base := filepath.Join(h.sys, "class", "iscsi_host")
	hosts, err := os.ReadDir(base)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []session
	for _, hd := range hosts {
		n, err := strconv.Atoi(strings.TrimPrefix(hd.Name(), "host"))
		if err != nil || !strings.HasPrefix(hd.Name(), "host") {
			continue
		}
		dev := filepath.Join(base, hd.Name(), "device")
		entries, err := os.ReadDir(dev)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if !strings.HasPrefix(e.Name(), "session") {
				continue
			}
			dir := filepath.Join(dev, e.Name())
			name, err := os.ReadFile(filepath.Join(dir, "iscsi_session", e.Name(), "targetname"))
			if err != nil || strings.TrimSpace(string(name)) != iqn {
				continue
			}
			out = append(out, session{host: n, dir: dir})
		}
	}
	return out, nil
}

// portalHosts maps the portals (current and persistent) of the target's
// connections to their SCSI hosts.
func (h *iscsiHost) portalHosts(iqn string) (map[string]int, error) {
	ss, err := h.sessions(iqn)
	if err != nil {
		return nil, err
	}
	m := map[string]int{}
	for _, s := range ss {
		entries, err := os.ReadDir(s.dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if !strings.HasPrefix(e.Name(), "connection") {
				continue
			}
			c := filepath.Join(s.dir, e.Name(), "iscsi_connection", e.Name())
			read := func(f string) string { b, _ := os.ReadFile(filepath.Join(c, f)); return strings.TrimSpace(string(b)) }
			addr, port, paddr, pport := read("address"), read("port"), read("persistent_address"), read("persistent_port")
			if addr == "" || port == "" {
				continue
			}
			m[net.JoinHostPort(addr, port)] = s.host
			if paddr != "" && pport != "" {
				m[net.JoinHostPort(paddr, pport)] = s.host
			}
		}
	}
	return m, nil
}

// scanLun has the SCSI host scan the one LUN (channel and target are 0
// for iSCSI).
func (h *iscsiHost) scanLun(host, lun int) error {
	f, err := os.OpenFile(filepath.Join(h.sys, "class", "scsi_host", fmt.Sprintf("host%d", host), "scan"), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = fmt.Fprintf(f, "0 0 %d", lun)
	return err
}

// lunDisks are the disks ("sdb") of the target's LUN, one per session.
func (h *iscsiHost) lunDisks(iqn string, lun int) []string {
	ss, _ := h.sessions(iqn)
	var disks []string
	for _, s := range ss {
		dir := filepath.Join(s.dir, fmt.Sprintf("target%d:0:0", s.host), fmt.Sprintf("%d:0:0:%d", s.host, lun), "block")
		if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
			disks = append(disks, entries[0].Name())
		}
	}
	return disks
}

// deleteDevices removes the LUN's disks from the node (their multipath
// maps flushed first), as the kubelet before a logout: failures are logged,
// a logout may still clean up.
func (h *iscsiHost) deleteDevices(d *iscsiDisk) {
	lun, err := strconv.Atoi(d.Lun)
	if err != nil {
		return
	}
	disks := h.lunDisks(d.Iqn, lun)
	flushed := map[string]bool{}
	for _, disk := range disks {
		if dm := h.multipathFor(h.dev + "/dev/" + disk); dm != "" && !flushed[dm] {
			flushed[dm] = true
			if out, err := h.run("multipath", "-f", strings.TrimPrefix(dm, h.dev)); err != nil {
				log.WithError(err).WithField("output", out).Warn("iscsi: failed to flush a multipath map")
			}
		}
	}
	for _, disk := range disks {
		if err := os.WriteFile(filepath.Join(h.sys, "block", disk, "device", "delete"), []byte("1"), 0); err != nil && !os.IsNotExist(err) {
			log.WithError(err).WithField("disk", disk).Warn("iscsi: failed to delete a block device")
		}
	}
}
