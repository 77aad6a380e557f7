package runtime

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/hostlet/hostlet/crash"
)

// CRI log format: "<RFC3339Nano time> <stream> <P|F> <content>\n", the files
// `kubectl logs` reads on every kubelet node. Long lines are split into
// partial (P) records of at most maxLogLine bytes.
const maxLogLine = 16 * 1024

// logSink writes one container's stdout and stderr into its CRI log file.
// containerd's shim writes the streams into FIFOs that hostlet reads, as
// containerd's CRI plugin does; after a restart hostlet attaches again.
type logSink struct {
	path     string
	mu       sync.Mutex
	f        *os.File
	closed   bool
	out, err *streamWriter
	done     chan struct{}
}

func newLogSink(path string) (*logSink, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return nil, err
	}
	s := &logSink{path: path, f: f, done: make(chan struct{})}
	s.out = &streamWriter{sink: s, stream: "stdout"}
	s.err = &streamWriter{sink: s, stream: "stderr"}
	return s, nil
}

// close writes what is left of unterminated lines (as partial records:
// output that did not end its line, like CRI) and closes the file.
func (s *logSink) close() {
	s.out.flush()
	s.err.flush()
	s.mu.Lock()
	_ = s.f.Close()
	s.closed = true
	s.mu.Unlock()
	close(s.done)
}

// rotate renames the live file to rotated and goes on in a new one. It
// holds the lock every record is written under, so each record lands whole
// in exactly one of the two files.
func (s *logSink) rotate(rotated string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	if err := os.Rename(s.path, rotated); err != nil {
		return err
	}
	f, err := os.OpenFile(s.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		// Keep writing where readers look.
		_ = os.Rename(rotated, s.path)
		return err
	}
	_ = s.f.Close()
	s.f = f
	return nil
}

func (s *logSink) write(stream, tag string, content []byte) {
	var b bytes.Buffer
	b.Grow(len(content) + 48)
	b.WriteString(time.Now().UTC().Format(time.RFC3339Nano))
	b.WriteByte(' ')
	b.WriteString(stream)
	b.WriteByte(' ')
	b.WriteString(tag)
	b.WriteByte(' ')
	b.Write(content)
	b.WriteByte('\n')
	s.mu.Lock()
	_, _ = s.f.Write(b.Bytes())
	s.mu.Unlock()
}

// streamWriter cuts one stream into CRI records.
type streamWriter struct {
	sink   *logSink
	stream string
	buf    []byte
}

func (w *streamWriter) Write(p []byte) (n int, err error) {
	// Called from containerd's copy goroutines: a panic here costs the
	// chunk, not the agent, and the copy goes on (a short write would end it).
	defer crash.Recover(nil, func(string) { n, err = len(p), nil })
	w.buf = append(w.buf, p...)
	for {
		if i := bytes.IndexByte(w.buf, '\n'); i >= 0 && i <= maxLogLine {
			// A terminal ends its lines with "\r\n": the record holds the
			// line without it, as CRI's log writer keeps it.
			w.sink.write(w.stream, "F", bytes.TrimSuffix(w.buf[:i], []byte{'\r'}))
			w.buf = w.buf[i+1:]
			continue
		}
		if len(w.buf) >= maxLogLine {
			w.sink.write(w.stream, "P", w.buf[:maxLogLine])
			w.buf = w.buf[maxLogLine:]
			continue
		}
		break
	}
	// Keep the pending bytes in a buffer of their own, not in p's array.
	w.buf = append([]byte(nil), w.buf...)
	return len(p), nil
}

func (w *streamWriter) flush() {
	if len(w.buf) > 0 {
		w.sink.write(w.stream, "P", w.buf)
		w.buf = nil
	}
}

// LogOptions are the kubelet's container log options.
type LogOptions struct {
	// Tail is the number of last lines to show; negative means all.
	Tail       int
	Since      time.Time
	Timestamps bool
	// LimitBytes stops output after that many bytes; 0 means no limit.
	LimitBytes int64
	Follow     bool
}

type logRecord struct {
	ts      time.Time
	raw     string // timestamp as written
	stream  string
	partial bool
	content []byte
}

func parseLogLine(line []byte) (logRecord, bool) {
	// time stream tag content
	var fields [3][]byte
	rest := line
	for i := 0; i < 3; i++ {
		sp := bytes.IndexByte(rest, ' ')
		if sp < 0 {
			return logRecord{}, false
		}
		fields[i], rest = rest[:sp], rest[sp+1:]
	}
	ts, err := time.Parse(time.RFC3339Nano, string(fields[0]))
	if err != nil {
		return logRecord{}, false
	}
	return logRecord{ts: ts, raw: string(fields[0]), stream: string(fields[1]), partial: string(fields[2]) == "P", content: rest}, true
}

// ReadLog writes a CRI log file to w as `kubectl logs` shows it: the live
// file only, as the kubelet reads it (rotated files are not read). With
// Follow it keeps streaming new output, into the new file after a rotation,
// until running reports the container gone and the file is drained, or ctx
// ends.
func ReadLog(ctx context.Context, path string, opts LogOptions, w io.Writer, running func() bool) error {
	err := readLog(ctx, path, opts, w, running)
	if errors.Is(err, errLimit) {
		return nil
	}
	return err
}

// LogTail returns the end of a container's log as the kubelet reads it for
// FallbackToLogsOnError: the last lines lines, of which the last maxBytes
// bytes. It reads only as much of the file as that needs.
func LogTail(path string, lines, maxBytes int) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	start, err := tailStart(f, fi.Size(), lines, int64(maxBytes))
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	br := bufio.NewReader(io.NewSectionReader(f, start, fi.Size()-start))
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] == '\n' {
			if rec, ok := parseLogLine(line[:len(line)-1]); ok {
				b.Write(rec.content)
				if !rec.partial {
					b.WriteByte('\n')
				}
			}
		}
		if err != nil {
			break
		}
	}
	out := b.Bytes()
	if len(out) > maxBytes {
		out = out[len(out)-maxBytes:]
	}
	return string(out), nil
}

// tailStart finds where the records of the last n lines begin (a line is
// its partial records and the full one ending it), reading the file
// backwards in blocks. With maxContent > 0 it also stops once the records
// from there hold that much content. An unterminated last record is left
// to the reader, which completes it while following.
func tailStart(f io.ReaderAt, size int64, n int, maxContent int64) (int64, error) {
	const block = 64 * 1024
	pos := size
	var buf []byte // the file's bytes [pos, pos+len(buf)) not yet counted
	ended := false // whether buf ends at the end of a complete record
	count := 0
	var content int64
	for {
		if !ended {
			if i := bytes.LastIndexByte(buf, '\n'); i >= 0 {
				buf, ended = buf[:i+1], true
				if n == 0 {
					return pos + int64(len(buf)), nil
				}
			}
		}
		for ended && len(buf) > 0 {
			j := bytes.LastIndexByte(buf[:len(buf)-1], '\n')
			if j < 0 && pos > 0 {
				break // the record starts in an earlier block
			}
			end := pos + int64(len(buf))
			rec, ok := parseLogLine(buf[j+1 : len(buf)-1])
			if ok {
				if !rec.partial {
					if count == n {
						return end, nil
					}
					count++
				}
				content += int64(len(rec.content))
				if maxContent > 0 && content >= maxContent {
					return end - int64(len(buf)-j-1), nil
				}
			}
			buf = buf[:j+1]
		}
		if pos == 0 {
			return 0, nil
		}
		read := min(int64(block), pos)
		pos -= read
		chunk := make([]byte, read, int(read)+len(buf))
		if _, err := f.ReadAt(chunk, pos); err != nil && err != io.EOF {
			return 0, err
		}
		buf = append(chunk, buf...)
	}
}

func readLog(ctx context.Context, path string, opts LogOptions, w io.Writer, running func() bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	if opts.Tail >= 0 {
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		start, err := tailStart(f, fi.Size(), opts.Tail, 0)
		if err != nil {
			return err
		}
		if _, err := f.Seek(start, io.SeekStart); err != nil {
			return err
		}
	}
	out := newLimitWriter(w, opts.LimitBytes)
	br := bufio.NewReaderSize(f, 64*1024)
	var pending []byte // an unterminated last line, completed by a later read

	emit := func(rec logRecord) error {
		if !opts.Since.IsZero() && rec.ts.Before(opts.Since) {
			return nil
		}
		var b []byte
		if opts.Timestamps {
			b = append(b, rec.raw...)
			b = append(b, ' ')
		}
		b = append(b, rec.content...)
		if !rec.partial {
			b = append(b, '\n')
		}
		_, err := out.Write(b)
		return err
	}
	// drain emits every complete record up to the end of the file.
	drain := func() error {
		for {
			line, err := br.ReadBytes('\n')
			pending = append(pending, line...)
			if len(pending) > 0 && pending[len(pending)-1] == '\n' {
				if rec, ok := parseLogLine(pending[:len(pending)-1]); ok {
					if err := emit(rec); err != nil {
						return err
					}
				}
				pending = nil
			}
			if err != nil {
				return nil
			}
		}
	}
	if err := drain(); err != nil || !opts.Follow {
		return err
	}
	// The directory is watched, not the file: a rotation renames the file
	// away and creates a new one under its name.
	watcher, err := fsnotify.NewWatcher()
	if err != nil {
		// As the kubelet's "failed to create fsnotify watcher": EMFILE
		// here is inotify's instance limit, not the open files'.
		return fmt.Errorf("following %s: inotify: %w", path, err)
	}
	defer watcher.Close()
	if err := watcher.Add(filepath.Dir(path)); err != nil {
		return err
	}
	// reopened switches to a new file under path once the old one is
	// drained (the writer never adds to a file it rotated away).
	reopened := func() (bool, error) {
		cur, err1 := f.Stat()
		now, err2 := os.Stat(path)
		if err1 != nil || err2 != nil || os.SameFile(cur, now) {
			return false, nil
		}
		if err := drain(); err != nil {
			return false, err
		}
		nf, err := os.Open(path)
		if err != nil {
			return false, nil
		}
		_ = f.Close()
		f, pending = nf, nil
		br.Reset(f)
		return true, drain()
	}
	// The container's exit (and a rotation whose event was lost) is
	// checked at most once a second, only while a follow is open.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-watcher.Events:
			if ev.Name == filepath.Clean(path) && ev.Op.Has(fsnotify.Create) {
				if _, err := reopened(); err != nil {
					return err
				}
			}
		case <-watcher.Errors:
			// An overflow: the tick finds a rotation it hid.
		case <-tick.C:
			if !running() {
				// Drain what was written before the exit, then stop.
				if err := drain(); err != nil {
					return err
				}
				if again, err := reopened(); err != nil || !again {
					return err
				}
				continue
			}
			if _, err := reopened(); err != nil {
				return err
			}
		}
		if err := drain(); err != nil {
			return err
		}
	}
}

var errLimit = errors.New("log limit reached")

// limitWriter implements --limit-bytes; limit 0 means no limit.
type limitWriter struct {
	w       io.Writer
	left    int64
	limited bool
}

func newLimitWriter(w io.Writer, limit int64) *limitWriter {
	return &limitWriter{w: w, left: limit, limited: limit > 0}
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if !l.limited {
		return l.w.Write(p)
	}
	if l.left <= 0 {
		return 0, errLimit
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.w.Write(p)
	l.left -= int64(n)
	return n, err
}
