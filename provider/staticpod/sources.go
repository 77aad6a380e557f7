package staticpod

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
)

// update is a source's whole set of pods (the kubelet's SET).
type update struct {
	source string
	pods   []*v1.Pod
}

// FileSource reads the static pods of a file or directory, as the
// kubelet's file source: the path is listed at start and every period, and
// watched in between (fsnotify) so that an edit takes effect at once. In a
// directory, files whose name starts with a dot are skipped and nothing is
// recursed into; a file that cannot be read or parsed is skipped with its
// reason logged. A watch event for a file that does not parse keeps the
// pod it had (an editor's half-written save does not stop the pod); the
// next listing, as the kubelet's, drops it.
type fileSource struct {
	path     string
	nodeName string
	period   time.Duration
	clock    clock.WithTicker
	// byFile is the pod each file last gave.
	byFile map[string]*v1.Pod
	// failed remembers the files whose error was logged, so that each is
	// logged once until it changes.
	failed map[string]string
}

func newFileSource(path, nodeName string, period time.Duration, clk clock.WithTicker) *fileSource {
	return &fileSource{path: filepath.Clean(path), nodeName: nodeName, period: period, clock: clk,
		byFile: map[string]*v1.Pod{}, failed: map[string]string{}}
}

// run sends the source's pods to out until ctx ends.
func (s *fileSource) run(ctx context.Context, out chan<- update) {
	l := log.WithFields(log.Fields{"source": FileSource, "path": s.path})
	var w *fsnotify.Watcher
	var events <-chan fsnotify.Event
	var errs <-chan error
	// parent: the path does not exist and its directory is watched for it
	// to appear.
	parent := false
	// watch (re)establishes the watch: on the directory itself, or on a
	// file's directory, so that a file replaced by a rename (as editors and
	// configuration tools write) is still seen; on the directory a missing
	// path would be in, so that its creation is seen at once.
	watch := func() {
		if w != nil {
			return
		}
		dir := s.path
		st, err := os.Stat(s.path)
		switch {
		case err != nil:
			dir, parent = filepath.Dir(s.path), true
		case !st.IsDir():
			dir, parent = filepath.Dir(s.path), false
		default:
			parent = false
		}
		nw, err := fsnotify.NewWatcher()
		if err != nil {
			l.WithError(err).Warn("unable to watch the static pod path; it is listed every period only")
			return
		}
		if err := nw.Add(dir); err != nil {
			nw.Close()
			if !os.IsNotExist(err) {
				l.WithError(err).Warn("unable to watch the static pod path; it is listed every period only")
			}
			return
		}
		w, events, errs = nw, nw.Events, nw.Errors
	}
	unwatch := func() {
		if w != nil {
			w.Close()
		}
		w, events, errs = nil, nil, nil
	}
	defer unwatch()
	t := s.clock.NewTicker(s.period)
	defer t.Stop()
	watch()
	s.send(ctx, out, s.list(l))
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			watch()
			s.send(ctx, out, s.list(l))
		case ev, ok := <-events:
			if !ok {
				unwatch()
				continue
			}
			name := filepath.Clean(ev.Name)
			if parent || (name == s.path && ev.Has(fsnotify.Remove|fsnotify.Rename)) {
				// The path appeared (or, watched, went away): watch it
				// (or its directory) anew and read it.
				if parent && name != s.path {
					continue
				}
				unwatch()
				watch()
				s.send(ctx, out, s.list(l))
				continue
			}
			if s.event(l, ev) {
				s.send(ctx, out, s.pods())
			}
		case err, ok := <-errs:
			if ok {
				l.WithError(err).Warn("watching the static pod path; watching again")
			}
			unwatch()
			watch()
			s.send(ctx, out, s.list(l))
		}
	}
}

func (s *fileSource) send(ctx context.Context, out chan<- update, pods []*v1.Pod) {
	select {
	case out <- update{source: FileSource, pods: pods}:
	case <-ctx.Done():
	}
}

// pods is the source's set, in file name order.
func (s *fileSource) pods() []*v1.Pod {
	files := make([]string, 0, len(s.byFile))
	for f := range s.byFile {
		files = append(files, f)
	}
	sort.Strings(files)
	out := make([]*v1.Pod, 0, len(files))
	for _, f := range files {
		out = append(out, s.byFile[f])
	}
	return out
}

// list reads the whole path again (the kubelet's listConfig).
func (s *fileSource) list(l *log.Entry) []*v1.Pod {
	s.byFile = map[string]*v1.Pod{}
	st, err := os.Stat(s.path)
	switch {
	case os.IsNotExist(err):
		s.logOnce(l, s.path, "static pod path does not exist; ignoring it until it does")
		return nil
	case err != nil:
		s.logOnce(l, s.path, fmt.Sprintf("unable to read the static pod path: %v", err))
		return nil
	case st.IsDir():
		delete(s.failed, s.path)
		names, err := os.ReadDir(s.path)
		if err != nil {
			s.logOnce(l, s.path, fmt.Sprintf("unable to read the static pod directory: %v", err))
			return nil
		}
		for _, e := range names {
			if strings.HasPrefix(e.Name(), ".") {
				continue
			}
			s.readFile(l, filepath.Join(s.path, e.Name()))
		}
	case st.Mode().IsRegular():
		delete(s.failed, s.path)
		s.readFile(l, s.path)
	default:
		s.logOnce(l, s.path, "static pod path is not a directory or file")
	}
	return s.pods()
}

// event takes a watch event; true if the set may have changed.
func (s *fileSource) event(l *log.Entry, ev fsnotify.Event) bool {
	name := filepath.Clean(ev.Name)
	if name == s.path && ev.Has(fsnotify.Remove|fsnotify.Rename) {
		// The watched directory itself went away: list (and watch) again.
		s.list(l)
		return true
	}
	if strings.HasPrefix(filepath.Base(name), ".") || (name != s.path && filepath.Dir(name) != s.path) {
		return false
	}
	if name != s.path {
		if st, err := os.Stat(s.path); err == nil && !st.IsDir() {
			return false // another file beside the watched file
		}
	}
	switch {
	case ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename):
		if _, ok := s.byFile[name]; !ok {
			return false
		}
		delete(s.byFile, name)
		delete(s.failed, name)
		return true
	case ev.Has(fsnotify.Create) || ev.Has(fsnotify.Write) || ev.Has(fsnotify.Chmod):
		prev := s.byFile[name]
		s.readFile(l, name)
		if s.byFile[name] == nil && prev != nil {
			// Kept: a half-written file does not stop the pod.
			s.byFile[name] = prev
		}
		return s.byFile[name] != prev
	}
	return false
}

// readFile reads one manifest into byFile, or logs why it cannot.
func (s *fileSource) readFile(l *log.Entry, path string) {
	st, err := os.Stat(path)
	if err != nil {
		if !os.IsNotExist(err) {
			s.logOnce(l, path, fmt.Sprintf("could not get metadata: %v", err))
		}
		return
	}
	if st.IsDir() {
		s.logOnce(l, path, "provided manifest path is a directory, not recursing into it")
		return
	}
	if !st.Mode().IsRegular() {
		s.logOnce(l, path, "manifest path is not a directory or file")
		return
	}
	data, err := readAtMost(path)
	if err != nil {
		s.logOnce(l, path, fmt.Sprintf("could not read manifest file: %v", err))
		return
	}
	pods, err := Decode(data, path, true, s.nodeName)
	if err != nil {
		s.logOnce(l, path, fmt.Sprintf("could not process manifest file: %v", err))
		return
	}
	delete(s.failed, path)
	if prev := s.byFile[path]; prev != nil && prev.UID == pods[0].UID {
		return // unchanged: the same object, so no change is seen
	}
	s.byFile[path] = pods[0]
}

func (s *fileSource) logOnce(l *log.Entry, path, msg string) {
	if s.failed[path] == msg {
		return
	}
	s.failed[path] = msg
	l.WithField("file", path).Warn(msg)
}

func readAtMost(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigLength+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxConfigLength {
		return nil, fmt.Errorf("file is larger than %d bytes", maxConfigLength)
	}
	return data, nil
}

// urlSource polls a URL for the static pods it serves (a pod or a
// PodList), as the kubelet's HTTP source: a failed fetch keeps the pods
// (the kubelet sends nothing then), an empty answer means none.
type urlSource struct {
	url      string
	header   http.Header
	nodeName string
	period   time.Duration
	clock    clock.WithTicker
	client   *http.Client
	data     []byte
	failures int
}

func (s *urlSource) run(ctx context.Context, out chan<- update) {
	t := s.clock.NewTicker(s.period)
	defer t.Stop()
	for {
		pods, changed, err := s.fetch(ctx)
		l := log.WithFields(log.Fields{"source": HTTPSource, "url": s.url})
		switch {
		case err != nil:
			// As the kubelet: the first few failures are logged, then quietly.
			if s.failures < 3 {
				l.WithError(err).Warn("failed to read pods from URL")
			} else {
				l.WithError(err).Debug("failed to read pods from URL")
			}
			s.failures++
		case s.failures > 0:
			l.Info("successfully read pods from URL")
			s.failures = 0
		}
		if changed {
			select {
			case out <- update{source: HTTPSource, pods: pods}:
			case <-ctx.Done():
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// fetch reads the URL; changed says a new set is to be sent.
func (s *urlSource) fetch(ctx context.Context) ([]*v1.Pod, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, false, err
	}
	req.Header = s.header.Clone()
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, false, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxConfigLength+1))
	if err != nil {
		return nil, false, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, false, fmt.Errorf("%v: %v", s.url, resp.Status)
	}
	if len(data) == 0 {
		s.data = nil
		return []*v1.Pod{}, true, fmt.Errorf("zero-length data received from %v", s.url)
	}
	if bytes.Equal(data, s.data) {
		return nil, false, nil
	}
	pods, err := Decode(data, s.url, false, s.nodeName)
	if err != nil {
		return nil, false, fmt.Errorf("%v: received data that couldn't be parsed as pods: %w", s.url, err)
	}
	s.data = data
	return pods, true, nil
}
