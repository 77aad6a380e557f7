package runtime

import (
	"bufio"
	"bytes"
	"context"
	"errors"
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
	mu       sync.Mutex
	f        *os.File
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
	s := &logSink{f: f, done: make(chan struct{})}
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
	s.mu.Unlock()
	close(s.done)
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

// ReadLog writes a CRI log file to w as `kubectl logs` shows it. With Follow
// it keeps streaming new output until running reports the container gone
// and the file is drained, or ctx ends.
func ReadLog(ctx context.Context, path string, opts LogOptions, w io.Writer, running func() bool) error {
	err := readLog(ctx, path, opts, w, running)
	if errors.Is(err, errLimit) {
		return nil
	}
	return err
}

func readLog(ctx context.Context, path string, opts LogOptions, w io.Writer, running func() bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
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

	// The first pass honours --tail: keep the last N full lines.
	var records []logRecord
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] == '\n' {
			if rec, ok := parseLogLine(line[:len(line)-1]); ok {
				if opts.Tail >= 0 {
					records = append(records, rec)
				} else if err := emit(rec); err != nil {
					return err
				}
			}
		} else {
			pending = line
		}
		if err != nil {
			break
		}
	}
	if opts.Tail >= 0 {
		records = lastLines(records, opts.Tail)
		for _, rec := range records {
			if err := emit(rec); err != nil {
				return err
			}
		}
	}
	if !opts.Follow {
		return nil
	}
	watcher, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer watcher.Close()
	if err := watcher.Add(path); err != nil {
		return err
	}
	// The container's exit is checked at most once a second, only while a
	// follow is open.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
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
				break
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-watcher.Events:
		case <-tick.C:
			if !running() {
				// Drain what was written before the exit, then stop.
				if _, err := br.Peek(1); err != nil {
					return nil
				}
			}
		}
	}
}

// lastLines keeps the records of the last n lines, counting a line as its
// partial records plus the full one that ends it.
func lastLines(recs []logRecord, n int) []logRecord {
	if n == 0 {
		return nil
	}
	count := 0
	for i := len(recs) - 1; i >= 0; i-- {
		if !recs[i].partial {
			count++
			if count > n {
				return recs[i+1:]
			}
		}
	}
	return recs
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
