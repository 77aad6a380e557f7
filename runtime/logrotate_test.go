package runtime

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func logNames(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// contentOf reads a live, rotated or compressed log's records.
func contentOf(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if line == "" {
			continue
		}
		rec, ok := parseLogLine([]byte(line))
		if !ok {
			t.Fatalf("%s: bad record %q", path, line)
		}
		out = append(out, string(rec.content))
	}
	return out
}

// Rotation names files as the kubelet does, compresses all but the newest
// rotated file, and keeps maxFiles files in all.
func TestRotateLogNamesCompressionRetention(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "0.log")
	sink, err := newLogSink(path)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.close()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 23, 15, 4, 5, 0, time.UTC))
	for i := range 6 {
		_, _ = fmt.Fprintf(sink.out, "line %d\n", i)
		if err := rotateLog(path, 3, clk.Now(), sink.rotate); err != nil {
			t.Fatalf("rotation %d: %v", i, err)
		}
		clk.Step(time.Minute)
	}
	_, _ = fmt.Fprintf(sink.out, "line live\n")
	want := []string{"0.log", "0.log.20261123-150805.gz", "0.log.20261123-150905"}
	if got := logNames(t, dir); !slices.Equal(got, want) {
		t.Fatalf("files %q, want %q", got, want)
	}
	for name, lines := range map[string][]string{
		"0.log":                    {"line live"},
		"0.log.20261123-150905":    {"line 5"},
		"0.log.20261123-150805.gz": {"line 4"},
	} {
		if got := contentOf(t, filepath.Join(dir, name)); !slices.Equal(got, lines) {
			t.Errorf("%s holds %q, want %q", name, got, lines)
		}
	}
}

// Leftovers of an interrupted compression are removed; a second rotation
// within the same second waits instead of overwriting the first.
func TestRotateLogLeftoversAndSameSecond(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "2.log")
	for name, body := range map[string]string{
		"2.log":                     "live\n",
		"2.log.20261123-100000":     "done but not removed\n",
		"2.log.20261123-100000.gz":  "",
		"2.log.20261123-110000.tmp": "half",
		"20.log.20261123-110000":    "another container's\n",
		"2.log.20261123-120000":     "newest\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Date(2026, 11, 23, 13, 0, 0, 0, time.UTC)
	reopens := 0
	reopen := func(rotated string) error {
		reopens++
		return os.Rename(path, rotated)
	}
	if err := rotateLog(path, 5, now, reopen); err != nil {
		t.Fatal(err)
	}
	want := []string{"2.log.20261123-100000.gz", "2.log.20261123-120000.gz", "2.log.20261123-130000", "20.log.20261123-110000"}
	if got := logNames(t, dir); !slices.Equal(got, want) {
		t.Fatalf("files %q, want %q", got, want)
	}
	if err := os.WriteFile(path, []byte("x\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := rotateLog(path, 5, now, reopen); err != errRotatedExists || reopens != 1 {
		t.Fatalf("second rotation in the same second: %v, %d reopens", err, reopens)
	}
}

// A rotation whose reopen fails (the container exited meanwhile, its log
// closed) leaves the files as they were: the newest rotated one is not
// compressed without a newer one taking its place.
func TestRotateLogReopenFails(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "3.log")
	for name, body := range map[string]string{"3.log": "live\n", "3.log.20261123-100000": "newest\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	closed := errors.New("log closed")
	err := rotateLog(path, 3, time.Date(2026, 11, 23, 11, 0, 0, 0, time.UTC), func(string) error { return closed })
	if !errors.Is(err, closed) {
		t.Fatalf("rotation: %v, want the reopen's error", err)
	}
	if got, want := logNames(t, dir), []string{"3.log", "3.log.20261123-100000"}; !slices.Equal(got, want) {
		t.Fatalf("files %q, want %q", got, want)
	}
}

// Records written while logs rotate all land, once each, in order.
func TestRotateNoLineLostOrDuplicated(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "0.log")
	sink, err := newLogSink(path)
	if err != nil {
		t.Fatal(err)
	}
	const n = 3000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range n {
			_, _ = fmt.Fprintf(sink.out, "%d\n", i)
		}
	}()
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	for range 20 {
		if err := rotateLog(path, 100, clk.Now(), sink.rotate); err != nil {
			t.Fatal(err)
		}
		clk.Step(time.Second)
	}
	wg.Wait()
	sink.close()
	var got []string
	for _, name := range logNames(t, dir) {
		if name != "0.log" {
			got = append(got, contentOf(t, filepath.Join(dir, name))...)
		}
	}
	got = append(got, contentOf(t, path)...)
	if len(got) != n {
		t.Fatalf("%d records, want %d", len(got), n)
	}
	for i, l := range got {
		if l != fmt.Sprint(i) {
			t.Fatalf("record %d is %q", i, l)
		}
	}
}

// The monitor rotates a running container's log once it passes MaxSize,
// at each interval of the clock.
func TestRotateLogsMonitor(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "0.log")
	sink, err := newLogSink(path)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.close()
	r := &Runtime{sinks: map[string]*logSink{"c1": sink}}
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.RotateLogs(ctx, LogRotation{MaxSize: 100, MaxFiles: 2, Workers: 2, Interval: 10 * time.Second, Clock: clk})
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	_, _ = sink.out.Write([]byte("short\n"))
	clk.Step(10 * time.Second)
	time.Sleep(50 * time.Millisecond)
	if got := logNames(t, dir); len(got) != 1 {
		t.Fatalf("a small log rotated: %q", got)
	}
	_, _ = sink.out.Write(bytes.Repeat([]byte("0123456789\n"), 10))
	for i := 0; ; i++ {
		clk.Step(10 * time.Second)
		time.Sleep(10 * time.Millisecond)
		if got := logNames(t, dir); len(got) == 2 {
			break
		}
		if i == 1000 {
			t.Fatalf("not rotated: %q", logNames(t, dir))
		}
	}
}

func writeRecords(t *testing.T, path string, recs ...string) {
	t.Helper()
	var b strings.Builder
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, r := range recs {
		tag, content, _ := strings.Cut(r, ":")
		fmt.Fprintf(&b, "%s stdout %s %s\n", t0.Add(time.Duration(i)*time.Second).Format(time.RFC3339Nano), tag, content)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o640); err != nil {
		t.Fatal(err)
	}
}

// --tail counts a line as its partial records and the full one ending it,
// found from the end of the file.
func TestReadLogTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	writeRecords(t, path, "F:a", "P:b1", "P:b2", "F:b3", "F:c", "P:d")
	// The partial record after the last full one is not a line yet for
	// the count, and is shown after it.
	for tail, want := range map[int]string{
		0: "", 1: "c\nd", 2: "b1b2b3\nc\nd", 3: "a\nb1b2b3\nc\nd", 10: "a\nb1b2b3\nc\nd", -1: "a\nb1b2b3\nc\nd",
	} {
		var b bytes.Buffer
		if err := ReadLog(context.Background(), path, LogOptions{Tail: tail}, &b, nil); err != nil {
			t.Fatal(err)
		}
		if b.String() != want {
			t.Errorf("tail %d: %q, want %q", tail, b.String(), want)
		}
	}
}

// The backward scan works across blocks, with lines longer than a block.
func TestTailStartAcrossBlocks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	var recs []string
	for i := range 40 {
		recs = append(recs, fmt.Sprintf("F:%d-%s", i, strings.Repeat("x", 9000)))
	}
	writeRecords(t, path, recs...)
	var b bytes.Buffer
	if err := ReadLog(context.Background(), path, LogOptions{Tail: 25}, &b, nil); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 25 || !strings.HasPrefix(lines[0], "15-") {
		t.Fatalf("%d lines from %.5q", len(lines), lines[0])
	}
}

// The termination message from the log is its last lines, at most the
// last bytes of them, read from the end only.
func TestLogTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	var recs []string
	for i := range 200 {
		recs = append(recs, fmt.Sprintf("F:line %03d", i))
	}
	writeRecords(t, path, recs...)
	got, err := LogTail(path, 80, 2048)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got, "line 120\n") || !strings.HasSuffix(got, "line 199\n") {
		t.Fatalf("80 lines: %q", got)
	}
	got, _ = LogTail(path, 80, 20)
	if got != "7\nline 198\nline 199\n" {
		t.Fatalf("20 bytes: %q", got)
	}
	// One long line of partial records: the bytes bound the read.
	recs = nil
	for i := range 100 {
		recs = append(recs, fmt.Sprintf("P:%02d%s", i, strings.Repeat("y", 98)))
	}
	writeRecords(t, path, append(recs, "F:end")...)
	got, _ = LogTail(path, 80, 2048)
	if len(got) != 2048 || !strings.HasSuffix(got, "yend\n") {
		t.Fatalf("long line: %d bytes ending %q", len(got), got[len(got)-8:])
	}
}

// A follow goes on in the new file after a rotation, without losing or
// repeating a line, and ends once the container is gone.
func TestReadLogFollowAcrossRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "0.log")
	sink, err := newLogSink(path)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var out bytes.Buffer
	w := writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return out.Write(p)
	})
	gone := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- ReadLog(context.Background(), path, LogOptions{Tail: -1, Follow: true}, w, func() bool {
			select {
			case <-gone:
				return false
			default:
				return true
			}
		})
	}()
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var want strings.Builder
	// The follow starts with the file as it is: wait until it runs.
	fmt.Fprintf(sink.out, "start\n")
	fmt.Fprintf(&want, "start\n")
	for {
		mu.Lock()
		n := out.Len()
		mu.Unlock()
		if n > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	for i := range 300 {
		fmt.Fprintf(sink.out, "%d\n", i)
		fmt.Fprintf(&want, "%d\n", i)
		if i%50 == 25 {
			if err := rotateLog(path, 5, clk.Now(), sink.rotate); err != nil {
				t.Fatal(err)
			}
			clk.Step(time.Second)
			time.Sleep(20 * time.Millisecond)
		}
	}
	sink.close()
	close(gone)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if out.String() != want.String() {
		t.Fatalf("followed %d bytes, want %d:\n%s", out.Len(), want.Len(), out.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func TestRemoveLogFiles(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"1.log", "1.log.20260101-000000.gz", "1.log.20260101-000001", "11.log", "0.log"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	removeLogFiles(filepath.Join(dir, "1.log"))
	if got := logNames(t, dir); !slices.Equal(got, []string{"0.log", "11.log"}) {
		t.Fatalf("left %q", got)
	}
}

type countingReaderAt struct {
	r    io.ReaderAt
	read int64
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.read += int64(n)
	return n, err
}

// A line that never ends (partial records only) bounds the read by bytes,
// not by lines.
func TestTailStartBoundedByContent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	var recs []string
	for i := range 5000 {
		recs = append(recs, fmt.Sprintf("P:%04d%s", i, strings.Repeat("z", 200)))
	}
	writeRecords(t, path, recs...)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	c := &countingReaderAt{r: f}
	start, err := tailStart(c, fi.Size(), 80, 2048)
	if err != nil {
		t.Fatal(err)
	}
	if c.read > 128*1024 || fi.Size()-start > 4096 {
		t.Fatalf("read %d bytes of %d to start %d from the end", c.read, fi.Size(), fi.Size()-start)
	}
	got, _ := LogTail(path, 80, 2048)
	if len(got) != 2048 || !strings.HasSuffix(got, "4999"+strings.Repeat("z", 200)) {
		t.Fatalf("tail %d bytes ending %q", len(got), got[len(got)-10:])
	}
}
