package runtime

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/hostlet/hostlet/crash"
	log "github.com/sirupsen/logrus"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
)

// Rotated logs are named as the kubelet's container log manager names them:
// "<n>.log.<time>" for the newest rotated file, "<n>.log.<time>.gz" for the
// older ones, so tools that read a kubelet node's logs read ours.
const (
	rotatedTimeFormat = "20060102-150405"
	compressSuffix    = ".gz"
	tmpSuffix         = ".tmp"
)

// LogRotation is the kubelet's container log rotation policy.
type LogRotation struct {
	// MaxSize rotates a running container's log once it reaches it; a
	// negative size turns rotation off.
	MaxSize int64
	// MaxFiles counts the live log and its rotated files.
	MaxFiles int
	// Workers rotate that many logs at a time.
	Workers int
	// Interval between two checks of every running container's log.
	Interval time.Duration
	Clock    clock.WithTicker
}

// RotateLogs checks the logs of running containers every interval and
// rotates those past MaxSize until ctx ends. Only logs hostlet writes
// itself are rotated: the writer switches to the new file under the same
// lock as every record, so no line is lost or written twice.
func (r *Runtime) RotateLogs(ctx context.Context, p LogRotation) {
	if p.MaxSize < 0 {
		return
	}
	if p.Clock == nil {
		p.Clock = clock.RealClock{}
	}
	p.Workers = max(p.Workers, 1)
	log.WithFields(log.Fields{"maxSize": p.MaxSize, "maxFiles": p.MaxFiles, "workers": p.Workers, "interval": p.Interval}).Info("container log rotation")
	// The queue holds each container once however many checks found it.
	q := workqueue.NewTyped[string]()
	go func() {
		<-ctx.Done()
		q.ShutDown()
	}()
	for range p.Workers {
		go func() {
			for {
				id, quit := q.Get()
				if quit {
					return
				}
				r.rotateOne(id, p)
				q.Done(id)
			}
		}()
	}
	t := p.Clock.NewTicker(p.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		r.sinksMu.Lock()
		for id := range r.sinks {
			q.Add(id)
		}
		r.sinksMu.Unlock()
	}
}

func (r *Runtime) rotateOne(id string, p LogRotation) {
	defer crash.Recover(log.WithField("container", id), nil)
	r.sinksMu.Lock()
	sink := r.sinks[id]
	r.sinksMu.Unlock()
	if sink == nil {
		return
	}
	fi, err := os.Stat(sink.path)
	if err != nil || fi.Size() < p.MaxSize {
		return
	}
	if err := rotateLog(sink.path, p.MaxFiles, p.Clock.Now(), sink.rotate); err != nil {
		log.WithError(err).WithFields(log.Fields{"container": id, "path": sink.path}).Warn("rotating container log")
	}
}

// errRotatedExists defers a rotation whose name is taken (a second
// rotation within the same second): renaming would overwrite it.
var errRotatedExists = errors.New("rotated log of this second exists")

// rotateLog rotates the live log at path as the kubelet does: leftovers of
// an interrupted compression removed, the oldest rotated files removed so
// that maxFiles remain after this rotation, the live file renamed by
// reopen (which starts a new one), then the rotated ones before it
// compressed. The kubelet compresses before the rename; after it, a
// container that exits meanwhile (reopen fails) keeps its newest rotated
// file as is, not only compressed ones.
func rotateLog(path string, maxFiles int, now time.Time, reopen func(rotated string) error) error {
	rotated := path + "." + now.Format(rotatedTimeFormat)
	if _, err := os.Lstat(rotated); err == nil {
		return errRotatedExists
	}
	logs, err := rotatedLogs(path, true)
	if err != nil {
		return err
	}
	// Keep maxFiles-2: the file rotated now and the new live file follow.
	keep := max(maxFiles-2, 0)
	for len(logs) > keep {
		if err := os.Remove(logs[0]); err != nil && !os.IsNotExist(err) {
			return err
		}
		logs = logs[1:]
	}
	if err := reopen(rotated); err != nil {
		return err
	}
	for _, l := range logs {
		if !strings.HasSuffix(l, compressSuffix) {
			if err := compressLog(l); err != nil {
				return fmt.Errorf("compressing %s: %w", l, err)
			}
		}
	}
	return nil
}

// rotatedLogs lists the rotated files of a live log, oldest first (the
// names sort by time). With clean it removes what an interrupted
// compression left: the temporary file, or the uncompressed original of a
// finished one.
func rotatedLogs(path string, clean bool) ([]string, error) {
	all, err := filepath.Glob(globEscape(path) + ".*")
	if err != nil {
		return nil, err
	}
	has := make(map[string]bool, len(all))
	for _, l := range all {
		has[l] = true
	}
	var out []string
	for _, l := range all {
		if strings.HasSuffix(l, tmpSuffix) || has[l+compressSuffix] {
			if clean {
				_ = os.Remove(l)
			}
			continue
		}
		out = append(out, l)
	}
	sort.Strings(out)
	return out, nil
}

func globEscape(p string) string {
	r := strings.NewReplacer(`*`, `\*`, `?`, `\?`, `[`, `\[`, `\`, `\\`)
	return r.Replace(p)
}

// compressLog gzips a rotated log into "<l>.gz" through a temporary file,
// so a crash leaves either the original or the finished archive.
func compressLog(l string) (err error) {
	in, err := os.Open(l)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	tmp := l + tmpSuffix
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fi.Mode().Perm())
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = out.Close()
			_ = os.Remove(tmp)
		}
	}()
	zw := gzip.NewWriter(out)
	if _, err = io.Copy(zw, in); err != nil {
		return err
	}
	if err = zw.Close(); err != nil {
		return err
	}
	if err = out.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, l+compressSuffix); err != nil {
		return err
	}
	return os.Remove(l)
}

// removeLogFiles removes a container's live log and its rotated files, as
// the kubelet does when it removes the container.
func removeLogFiles(path string) {
	if path == "" {
		return
	}
	_ = os.Remove(path)
	all, _ := filepath.Glob(globEscape(path) + ".*")
	for _, l := range all {
		_ = os.Remove(l)
	}
}
