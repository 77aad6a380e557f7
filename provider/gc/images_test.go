package gc

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/runtime"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
)

// fakeImages is an image store on a filesystem of capacity bytes whose
// images take their sizes of it; other data takes used.
type fakeImages struct {
	images   map[string]*runtime.StoredImage
	capacity int64
	used     int64
	removed  []string
	listErr  error
}

func newFakeImages(capacity, used int64, imgs ...runtime.StoredImage) *fakeImages {
	f := &fakeImages{images: map[string]*runtime.StoredImage{}, capacity: capacity, used: used}
	for i := range imgs {
		f.images[imgs[i].ID] = &imgs[i]
	}
	return f
}

func (f *fakeImages) ListImages(context.Context) ([]runtime.StoredImage, error) {
	if f.listErr != nil {
		return nil, f.listErr
	}
	var out []runtime.StoredImage
	for _, img := range f.images {
		out = append(out, *img)
	}
	return out, nil
}

func (f *fakeImages) RemoveImage(_ context.Context, id string) error {
	delete(f.images, id)
	f.removed = append(f.removed, id)
	return nil
}

func (f *fakeImages) ImageFsUsage(context.Context) (int64, int64, error) {
	used := f.used
	for _, img := range f.images {
		used += img.Size
	}
	return f.capacity, f.capacity - used, nil
}

var node = &v1.ObjectReference{Kind: "Node", Name: "n"}

func events(r *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-r.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// Over the high threshold, unused images go least recently used first
// until usage is down to the low threshold; used and pinned ones stay.
func TestImageGCThresholdsLRU(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	f := newFakeImages(1000, 500,
		runtime.StoredImage{ID: "used", Size: 100, InUse: true},
		runtime.StoredImage{ID: "pinned", Size: 100, Pinned: true},
		runtime.StoredImage{ID: "old", Size: 50},
		runtime.StoredImage{ID: "recent", Size: 50},
		runtime.StoredImage{ID: "never", Size: 50},
	)
	rec := record.NewFakeRecorder(10)
	g := NewImageGC(f, ImagePolicy{HighThresholdPercent: 90, LowThresholdPercent: 80, MinAge: time.Minute}, clk, rec, node)
	// "old" was in use at the first look, "recent" at the second.
	f.images["old"].InUse = true
	if err := g.GarbageCollect(context.Background()); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Minute)
	f.images["old"].InUse = false
	f.images["recent"].InUse = true
	if err := g.GarbageCollect(context.Background()); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Minute)
	f.images["recent"].InUse = false
	// 85% used, under the high threshold: nothing goes.
	if err := g.GarbageCollect(context.Background()); err != nil || len(f.removed) != 0 {
		t.Fatalf("under the threshold: removed %q, %v", f.removed, err)
	}
	// 90%: down to 80% needs 100 bytes: the never used image, then the
	// one used longest ago.
	f.used = 550
	if err := g.GarbageCollect(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := []string{"never", "old"}; !slices.Equal(f.removed, want) {
		t.Fatalf("removed %q, want %q", f.removed, want)
	}
	if ev := events(rec); len(ev) != 0 {
		t.Errorf("events %q", ev)
	}
}

// Freeing less than needed is the kubelet's FreeDiskSpaceFailed, with
// nothing in use or pinned removed.
func TestImageGCFreeDiskSpaceFailed(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	f := newFakeImages(1000, 800,
		runtime.StoredImage{ID: "used", Size: 50, InUse: true},
		runtime.StoredImage{ID: "pinned", Size: 50, Pinned: true},
		runtime.StoredImage{ID: "unused", Size: 20},
	)
	rec := record.NewFakeRecorder(10)
	g := NewImageGC(f, ImagePolicy{HighThresholdPercent: 1, LowThresholdPercent: 0}, clk, rec, node)
	clk.Step(time.Second)
	err := g.GarbageCollect(context.Background())
	if err == nil || !slices.Equal(f.removed, []string{"unused"}) {
		t.Fatalf("removed %q, err %v", f.removed, err)
	}
	ev := events(rec)
	if len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning FreeDiskSpaceFailed Insufficient free disk space on the node's image filesystem (92% of 1000 B used). Failed to free sufficient space by deleting unused images (freed 20 bytes).") {
		t.Fatalf("events %q", ev)
	}
}

// An image known for less than the minimum age stays; one unused for
// longer than the maximum age goes whatever the space, once hostlet has
// run that long.
func TestImageGCAges(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	f := newFakeImages(1000, 0,
		runtime.StoredImage{ID: "a", Size: 10},
		runtime.StoredImage{ID: "b", Size: 10, InUse: true},
	)
	g := NewImageGC(f, ImagePolicy{HighThresholdPercent: 1, LowThresholdPercent: 0, MinAge: 2 * time.Minute, MaxAge: time.Hour}, clk, record.NewFakeRecorder(10), node)
	_ = g.GarbageCollect(context.Background())
	if len(f.removed) != 0 {
		t.Fatalf("removed %q before the minimum age", f.removed)
	}
	// Past the minimum age, space: "a" goes.
	clk.Step(3 * time.Minute)
	_ = g.GarbageCollect(context.Background())
	if !slices.Equal(f.removed, []string{"a"}) {
		t.Fatalf("removed %q", f.removed)
	}
	if n := testutil.ToFloat64(g.collected.WithLabelValues("space")); n != 1 {
		t.Errorf("image_garbage_collected_total{reason=space} = %v, want 1", n)
	}

	// Maximum age, with space to spare.
	f = newFakeImages(1000, 0,
		runtime.StoredImage{ID: "stale", Size: 10, InUse: true},
		runtime.StoredImage{ID: "fresh", Size: 10, InUse: true},
	)
	g = NewImageGC(f, ImagePolicy{HighThresholdPercent: 90, LowThresholdPercent: 80, MaxAge: time.Hour}, clk, record.NewFakeRecorder(10), node)
	_ = g.GarbageCollect(context.Background())
	f.images["stale"].InUse = false
	clk.Step(30 * time.Minute)
	_ = g.GarbageCollect(context.Background())
	f.images["fresh"].InUse = false
	clk.Step(31 * time.Minute)
	_ = g.GarbageCollect(context.Background())
	if !slices.Equal(f.removed, []string{"stale"}) {
		t.Fatalf("removed %q, want the image unused for over an hour", f.removed)
	}
	if age, space := testutil.ToFloat64(g.collected.WithLabelValues("age")), testutil.ToFloat64(g.collected.WithLabelValues("space")); age != 1 || space != 0 {
		t.Errorf("image_garbage_collected_total: age %v, space %v; want 1 and 0", age, space)
	}
}

// ImageGCFailed is recorded from the second failure in a row.
func TestImageGCFailedEvent(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	f := newFakeImages(1000, 0)
	f.listErr = errors.New("containerd down")
	rec := record.NewFakeRecorder(10)
	g := NewImageGC(f, ImagePolicy{HighThresholdPercent: 85, LowThresholdPercent: 80}, clk, rec, node)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go g.Run(ctx, 5*time.Minute)
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	if ev := events(rec); len(ev) != 0 {
		t.Fatalf("first failure: events %q", ev)
	}
	clk.Step(5 * time.Minute)
	if e := <-rec.Events; e != "Warning ImageGCFailed containerd down" {
		t.Fatalf("event %q", e)
	}
}

func TestImagePolicyValidate(t *testing.T) {
	for _, tc := range []struct {
		p  ImagePolicy
		ok bool
	}{
		{ImagePolicy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: 2 * time.Minute}, true},
		{ImagePolicy{HighThresholdPercent: 1, LowThresholdPercent: 0}, true},
		{ImagePolicy{HighThresholdPercent: 80, LowThresholdPercent: 80}, false},
		{ImagePolicy{HighThresholdPercent: 101, LowThresholdPercent: 80}, false},
		{ImagePolicy{HighThresholdPercent: 85, LowThresholdPercent: -1}, false},
		{ImagePolicy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: time.Hour, MaxAge: time.Hour}, false},
		{ImagePolicy{HighThresholdPercent: 85, LowThresholdPercent: 80, MaxAge: -time.Hour}, false},
	} {
		if err := tc.p.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: %v", tc.p, err)
		}
	}
	if !(ImagePolicy{HighThresholdPercent: 100}).Disabled() {
		t.Error("a high threshold of 100 without a maximum age is not off")
	}
}

// The reclaim under disk pressure removes every unused, unpinned image
// past the minimum age, whatever the thresholds.
func TestDeleteUnusedImages(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	f := newFakeImages(1000, 0,
		runtime.StoredImage{ID: "used", Size: 10, InUse: true},
		runtime.StoredImage{ID: "pinned", Size: 10, Pinned: true},
		runtime.StoredImage{ID: "a", Size: 10},
		runtime.StoredImage{ID: "b", Size: 10},
	)
	g := NewImageGC(f, ImagePolicy{HighThresholdPercent: 90, LowThresholdPercent: 80, MinAge: time.Minute}, clk, record.NewFakeRecorder(10), node)
	if err := g.DeleteUnusedImages(context.Background()); err != nil || len(f.removed) != 0 {
		t.Fatalf("removed %q before the minimum age, %v", f.removed, err)
	}
	clk.Step(time.Minute)
	f.images["c"] = &runtime.StoredImage{ID: "c", Size: 10}
	// The post-GC hooks (the pull records' pruning) get every image left,
	// those in use too, and when the round began.
	var left []string
	var began time.Time
	g.OnCollected(func(remaining []string, at time.Time) { left, began = remaining, at })
	if err := g.DeleteUnusedImages(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := []string{"a", "b"}; !slices.Equal(f.removed, want) {
		t.Fatalf("removed %q, want %q", f.removed, want)
	}
	slices.Sort(left)
	if want := []string{"c", "pinned", "used"}; !slices.Equal(left, want) || !began.Equal(clk.Now()) {
		t.Errorf("hook got %q at %v, want %q at %v", left, began, want, clk.Now())
	}
}
