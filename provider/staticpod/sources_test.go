package staticpod

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

func names(pods []*v1.Pod) string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return strings.Join(out, ",")
}

func podManifest(name string) string { return strings.Replace(manifest, "name: web", "name: "+name, 1) }

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A directory is listed as the kubelet lists it: dot files and
// subdirectories skipped, a bad file skipped, the rest in name order.
func TestFileSourceList(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "b.yaml"), podManifest("b"))
	write(t, filepath.Join(dir, "a.yaml"), podManifest("a"))
	write(t, filepath.Join(dir, ".hidden.yaml"), podManifest("hidden"))
	write(t, filepath.Join(dir, "bad.yaml"), "kind: Pod\n")
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := newFileSource(dir, "n", time.Minute, clocktesting.NewFakeClock(time.Now()))
	l := log.WithField("test", t.Name())
	if got := names(s.list(l)); got != "a-n,b-n" {
		t.Errorf("listed %s", got)
	}
	// One file as the path.
	one := newFileSource(filepath.Join(dir, "a.yaml"), "n", time.Minute, clocktesting.NewFakeClock(time.Now()))
	if got := names(one.list(l)); got != "a-n" {
		t.Errorf("file listed %s", got)
	}
	// A path that does not exist is an empty set.
	none := newFileSource(filepath.Join(dir, "missing"), "n", time.Minute, clocktesting.NewFakeClock(time.Now()))
	if got := none.list(l); len(got) != 0 {
		t.Errorf("missing path listed %s", names(got))
	}
}

// Watch events change one file's pod: a created or written file is read,
// a removed one dropped, and a file that does not parse (half written)
// keeps its pod until the next listing.
func TestFileSourceEvents(t *testing.T) {
	dir := t.TempDir()
	s := newFileSource(dir, "n", time.Minute, clocktesting.NewFakeClock(time.Now()))
	l := log.WithField("test", t.Name())
	s.list(l)
	a := filepath.Join(dir, "a.yaml")
	write(t, a, podManifest("a"))
	if !s.event(l, fsnotify.Event{Name: a, Op: fsnotify.Create}) || names(s.pods()) != "a-n" {
		t.Fatalf("create: %s", names(s.pods()))
	}
	uid := s.pods()[0].UID
	if s.event(l, fsnotify.Event{Name: a, Op: fsnotify.Chmod}) {
		t.Error("an unchanged file changed the set")
	}
	write(t, a, "kind: Po")
	if s.event(l, fsnotify.Event{Name: a, Op: fsnotify.Write}) || s.pods()[0].UID != uid {
		t.Error("a half-written file replaced the pod")
	}
	write(t, a, strings.Replace(podManifest("a"), "busybox", "busybox:2", 1))
	if !s.event(l, fsnotify.Event{Name: a, Op: fsnotify.Write}) || s.pods()[0].UID == uid {
		t.Error("an edit did not replace the pod")
	}
	if s.event(l, fsnotify.Event{Name: filepath.Join(dir, ".a.yaml.swp"), Op: fsnotify.Create}) {
		t.Error("a dot file was read")
	}
	if err := os.Remove(a); err != nil {
		t.Fatal(err)
	}
	if !s.event(l, fsnotify.Event{Name: a, Op: fsnotify.Remove}) || len(s.pods()) != 0 {
		t.Errorf("remove: %s", names(s.pods()))
	}
}

// run sends the set at start and after each change it is told of by
// fsnotify (the fake clock never ticks: no listing helps).
func TestFileSourceRunWatches(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), podManifest("a"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan update)
	go newFileSource(dir, "n", time.Hour, clocktesting.NewFakeClock(time.Now())).run(ctx, out)
	if u := <-out; names(u.pods) != "a-n" || u.source != FileSource {
		t.Fatalf("first set %s", names(u.pods))
	}
	// Written as tools write: a dot file renamed into place.
	write(t, filepath.Join(dir, ".b.tmp"), podManifest("b"))
	if err := os.Rename(filepath.Join(dir, ".b.tmp"), filepath.Join(dir, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	for u := range out {
		if names(u.pods) == "a-n,b-n" {
			break
		}
	}
	if err := os.Remove(filepath.Join(dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	for u := range out {
		if names(u.pods) == "b-n" {
			break
		}
	}
}

// The URL source sends what the URL serves, with the configured headers,
// only when it changes; a failed fetch keeps the pods, an empty answer
// means none.
func TestURLSource(t *testing.T) {
	body, status := podManifest("a"), http.StatusOK
	var header string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		header = r.Header.Get("X-Token")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	s := &urlSource{url: srv.URL, header: http.Header{"X-Token": {"t"}}, nodeName: "n", client: srv.Client()}
	ctx := context.Background()
	pods, changed, err := s.fetch(ctx)
	if err != nil || !changed || names(pods) != "a-n" || header != "t" || pods[0].Annotations[ConfigSourceAnnotation] != HTTPSource {
		t.Fatalf("fetch: %s %t %v header %q", names(pods), changed, err, header)
	}
	if _, changed, err := s.fetch(ctx); changed || err != nil {
		t.Errorf("unchanged answer: changed %t %v", changed, err)
	}
	status = http.StatusInternalServerError
	if _, changed, err := s.fetch(ctx); changed || err == nil {
		t.Errorf("failed fetch: changed %t %v", changed, err)
	}
	status, body = http.StatusOK, ""
	if pods, changed, err := s.fetch(ctx); !changed || len(pods) != 0 || err == nil {
		t.Errorf("empty answer: %s %t %v", names(pods), changed, err)
	}
}

// A manifest directory created after start is read at once (its parent is
// watched for it), and one removed empties the set.
func TestFileSourceRunPathAppears(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "manifests")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan update)
	go newFileSource(dir, "n", time.Hour, clocktesting.NewFakeClock(time.Now())).run(ctx, out)
	if u := <-out; len(u.pods) != 0 {
		t.Fatalf("first set %s", names(u.pods))
	}
	tmp := dir + ".tmp"
	if err := os.Mkdir(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(tmp, "a.yaml"), podManifest("a"))
	if err := os.Rename(tmp, dir); err != nil {
		t.Fatal(err)
	}
	for u := range out {
		if names(u.pods) == "a-n" {
			break
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	for u := range out {
		if len(u.pods) == 0 {
			break
		}
	}
}
