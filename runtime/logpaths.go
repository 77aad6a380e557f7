package runtime

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
	log "github.com/sirupsen/logrus"
)

// Container logs sit where the kubelet puts them, so the log collectors
// that mount a node's /var/log/pods and /var/log/containers (fluent-bit,
// promtail) read ours: <podLogsDir>/<namespace>_<name>_<uid>/<container>/
// <restartCount>.log with its rotated files beside it, and, while the
// container exists, the kubelet's legacy symlink to that file,
// <containerLogsDir>/<pod>_<namespace>_<container>-<containerID>.log.
const (
	// DefaultPodLogsDir is the kubelet's podLogsDir.
	DefaultPodLogsDir = "/var/log/pods"
	// DefaultContainerLogsDir is where the kubelet puts its symlinks
	// (hardcoded there).
	DefaultContainerLogsDir = "/var/log/containers"
	// maxLogNameLen is ext4's limit on a file name: longer symlink names
	// are cut, as the kubelet cuts them.
	maxLogNameLen = 255
)

// LogDir is a pod's log directory. A pod whose logs a hostlet of before
// --pod-logs-dir started under its root dir keeps them there.
func (r *Runtime) LogDir(namespace, name, uid string) string {
	base := namespace + "_" + name + "_" + uid
	dir := filepath.Join(r.podLogsDir, base)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		legacy := filepath.Join(r.rootDir, "logs", base)
		if _, err := os.Stat(legacy); err == nil {
			return legacy
		}
	}
	return dir
}

// containerLogPath is the log file of one run of a container.
func (r *Runtime) containerLogPath(namespace, name, uid, container string, restartCount int) string {
	return filepath.Join(r.LogDir(namespace, name, uid), container, strconv.Itoa(restartCount)+".log")
}

// logSymlink names a container's symlink as the kubelet's legacyLogSymlink.
func (r *Runtime) logSymlink(namespace, name, container, id string) string {
	const suffix = ".log"
	n := fmt.Sprintf("%s_%s_%s-%s", name, namespace, container, id)
	if len(n) > maxLogNameLen-len(suffix) {
		n = n[:maxLogNameLen-len(suffix)]
	}
	return filepath.Join(r.containerLogsDir, n+suffix)
}

// linkLog makes a started container's symlink to its log file, replacing
// one left by a start that did not finish.
func (r *Runtime) linkLog(labels map[string]string, id string) {
	target := labels[labelLogPath]
	if target == "" {
		return
	}
	link := r.logSymlink(labels[LabelPodNamespace], labels[LabelPodName], labels[LabelContainerName], id)
	_ = os.Remove(link)
	if err := os.Symlink(target, link); err != nil {
		// As the kubelet: the container runs whether or not collectors find it.
		log.WithError(err).WithFields(log.Fields{"container": id, "path": link}).Warn("creating the container log symlink")
	}
}

// unlinkLog removes a container's symlink.
func (r *Runtime) unlinkLog(labels map[string]string, id string) {
	if labels[labelLogPath] == "" {
		return
	}
	link := r.logSymlink(labels[LabelPodNamespace], labels[LabelPodName], labels[LabelContainerName], id)
	if err := os.Remove(link); err != nil && !errors.Is(err, fs.ErrNotExist) {
		log.WithError(err).WithFields(log.Fields{"container": id, "path": link}).Warn("removing the container log symlink")
	}
}

// RemoveLogs deletes a pod's logs once nothing serves them any more: the
// symlinks into its directory first (a crash in between leaves the
// directory, which the orphan sweep finds), then the directory.
func (r *Runtime) RemoveLogs(namespace, name, uid string) {
	dirs := []string{filepath.Join(r.podLogsDir, namespace+"_"+name+"_"+uid), filepath.Join(r.rootDir, "logs", namespace+"_"+name+"_"+uid)}
	links, _ := filepath.Glob(filepath.Join(r.containerLogsDir, globEscape(name+"_"+namespace+"_")+"*.log"))
	for _, l := range links {
		target, err := os.Readlink(l)
		if err != nil {
			continue
		}
		for _, d := range dirs {
			if strings.HasPrefix(target, d+string(filepath.Separator)) {
				_ = os.Remove(l)
			}
		}
	}
	for _, d := range dirs {
		_ = os.RemoveAll(d)
	}
}

// RemoveDeadLogLinks removes the symlinks into this node's pod logs whose
// log file is gone, unless their container still runs, as the kubelet's
// container GC removes dead symlinks: one left by a crash between the
// removal of a pod's logs and of its links. It says how many it removed.
func (r *Runtime) RemoveDeadLogLinks(ctx context.Context) int {
	n := 0
	for _, l := range r.deadLogLinks() {
		if id := logLinkContainerID(l); id != "" {
			st, err := r.ContainerStatus(ctx, id)
			if err == nil && st.State == StateRunning {
				continue
			}
			if err != nil && !errdefs.IsNotFound(err) {
				continue // as the kubelet: not known to be gone
			}
		}
		if err := os.Remove(l); err == nil {
			n++
		} else if !errors.Is(err, fs.ErrNotExist) {
			log.WithError(err).WithField("path", l).Warn("removing a dead container log symlink")
		}
	}
	return n
}

// deadLogLinks are the symlinks of containerLogsDir that point into this
// node's pod log directories (another node on the host has its own) at a
// file that is not there.
func (r *Runtime) deadLogLinks() []string {
	links, _ := filepath.Glob(filepath.Join(r.containerLogsDir, "*.log"))
	var out []string
	for _, l := range links {
		target, err := os.Readlink(l)
		if err != nil {
			continue // not a symlink
		}
		ours := false
		for _, d := range []string{r.podLogsDir, filepath.Join(r.rootDir, "logs")} {
			ours = ours || strings.HasPrefix(target, d+string(filepath.Separator))
		}
		if _, err := os.Stat(l); ours && errors.Is(err, fs.ErrNotExist) {
			out = append(out, l)
		}
	}
	return out
}

// logLinkContainerID reads the container ID of a symlink named as
// logSymlink names it; "" when cut short (a name at the length limit).
func logLinkContainerID(link string) string {
	name := strings.TrimSuffix(filepath.Base(link), ".log")
	id := name[strings.LastIndexByte(name, '-')+1:]
	if len(id) != 64 {
		return ""
	}
	return id
}
