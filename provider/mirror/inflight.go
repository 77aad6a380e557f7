package mirror

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/opencontainers/go-digest"
	log "github.com/sirupsen/logrus"
)

// Content a pull is fetching is shared while it arrives: the fetcher tees
// the bytes of a blob it fetches (from the registry or a peer) into a
// flight, and the mirror's handler streams a flight to peers as it grows.
// So nodes pulling one image at once fetch each blob from the registry
// about once: the others stream it from the node fetching it.
//
// A flight's bytes are not checked until they are all there: the flight
// hashes them as they come and holds back its last byte until the digest
// matched, so a peer never gets the whole of a blob that is not the one it
// asked for (it checks the digest again itself, as for any peer's content).

// errAborted is a flight that ended before its content was whole and
// checked.
var errAborted = errors.New("the fetch of the blob was abandoned")

// flights are a node's blobs in flight, by digest.
type flights struct {
	dir string

	mu sync.Mutex
	m  map[digest.Digest]*flight
	// changed is closed (and replaced) whenever a flight starts or a pull
	// ends: what a handler waiting for a blob to come waits on.
	changed chan struct{}
	// pulls counts the node's pulls in progress by repository name.
	pulls map[string]int
}

func newFlights(dir string) *flights {
	return &flights{dir: dir, m: map[digest.Digest]*flight{}, changed: make(chan struct{}), pulls: map[string]int{}}
}

// broadcast wakes the waiters; f.mu held.
func (fs *flights) broadcast() {
	close(fs.changed)
	fs.changed = make(chan struct{})
}

// pulling marks a pull of the repository name under way until done.
func (fs *flights) pulling(name string) (done func()) {
	fs.mu.Lock()
	fs.pulls[name]++
	fs.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			fs.mu.Lock()
			if fs.pulls[name]--; fs.pulls[name] <= 0 {
				delete(fs.pulls, name)
			}
			fs.broadcast()
			fs.mu.Unlock()
		})
	}
}

// lookup is the flight of dgst, acquired (release it), or nil; whether a
// pull of name is under way; and the channel closed at the next change.
func (fs *flights) lookup(dgst digest.Digest, name string) (*flight, bool, <-chan struct{}) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fl := fs.m[dgst]
	if fl != nil && !fl.acquire() {
		fl = nil
	}
	return fl, fs.pulls[name] > 0, fs.changed
}

// start makes the flight of a blob a fetch is about to receive; nil when
// one is in flight already (another pull of the node fetches it: its
// flight serves) or no file could be made for it (the pull goes on
// unshared). The caller writes to it, then ends it with finish.
func (fs *flights) start(dgst digest.Digest, size int64) *flight {
	if size <= 0 || dgst.Validate() != nil {
		return nil
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.m[dgst] != nil {
		return nil
	}
	if err := os.MkdirAll(fs.dir, 0o700); err != nil {
		log.WithError(err).Warn("registry mirror: no directory for blobs in flight")
		return nil
	}
	file, err := os.CreateTemp(fs.dir, "inflight-")
	if err != nil {
		log.WithError(err).Warn("registry mirror: no file for a blob in flight")
		return nil
	}
	// Unlinked at once: the open descriptors are all that hold it, so a
	// crash leaves nothing behind and the space goes with the last reader.
	_ = os.Remove(file.Name())
	fl := &flight{fs: fs, dgst: dgst, size: size, file: file, refs: 1, more: make(chan struct{}), hash: dgst.Algorithm().Digester()}
	fs.m[dgst] = fl
	fs.broadcast()
	return fl
}

// flight is one blob being fetched: a file growing as its bytes arrive.
type flight struct {
	fs   *flights
	dgst digest.Digest
	size int64
	file *os.File
	hash digest.Digester // only the writer's

	mu      sync.Mutex
	written int64
	done    bool  // whole and its digest checked
	err     error // abandoned
	refs    int   // the writer and the readers; the file is closed at 0
	more    chan struct{}
}

// acquire takes a reader's reference; false once the file is closed.
func (fl *flight) acquire() bool {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if fl.refs == 0 {
		return false
	}
	fl.refs++
	return true
}

func (fl *flight) release() {
	fl.mu.Lock()
	fl.refs--
	last := fl.refs == 0
	fl.mu.Unlock()
	if last {
		fl.file.Close()
	}
}

// signal wakes the readers; fl.mu held.
func (fl *flight) signal() {
	close(fl.more)
	fl.more = make(chan struct{})
}

// write appends the next bytes the fetch received; an error ends the
// flight (never the fetch: the pull's own copy does not depend on it).
func (fl *flight) write(p []byte) {
	fl.mu.Lock()
	stopped := fl.done || fl.err != nil
	off := fl.written
	fl.mu.Unlock()
	if stopped || len(p) == 0 {
		return
	}
	if off+int64(len(p)) > fl.size {
		fl.abort(fmt.Errorf("more than the blob's %d bytes", fl.size))
		return
	}
	if _, err := fl.file.WriteAt(p, off); err != nil {
		fl.abort(err)
		return
	}
	_, _ = fl.hash.Hash().Write(p)
	fl.mu.Lock()
	fl.written += int64(len(p))
	if fl.written == fl.size {
		if got := fl.hash.Digest(); got == fl.dgst {
			fl.done = true
		} else {
			fl.err = fmt.Errorf("the blob's bytes have digest %s, not %s", got, fl.dgst)
		}
	}
	fl.signal()
	fl.mu.Unlock()
}

// abort ends the flight unfinished: its readers fail.
func (fl *flight) abort(err error) {
	fl.mu.Lock()
	if !fl.done && fl.err == nil {
		fl.err = fmt.Errorf("%w: %v", errAborted, err)
		fl.signal()
	}
	fl.mu.Unlock()
}

// finish ends the writer's part: a flight not whole by then is abandoned;
// it leaves flights (new requests find the blob in the store, committed
// before this is called), and readers still streaming it keep the file.
func (fl *flight) finish() {
	fl.abort(errors.New("the fetch ended"))
	fl.fs.mu.Lock()
	if fl.fs.m[fl.dgst] == fl {
		delete(fl.fs.m, fl.dgst)
	}
	fl.fs.mu.Unlock()
	fl.release()
}

// reader streams the flight from its start: it blocks for bytes not yet
// there and fails if the flight is abandoned; the last byte only comes
// once the digest matched. Its own reference is released by Close.
type flightReader struct {
	fl  *flight
	ctx context.Context
	off int64
}

// newReader is a reader of an acquired flight, which it releases on Close.
func (fl *flight) newReader(ctx context.Context) *flightReader {
	return &flightReader{fl: fl, ctx: ctx}
}

// ready waits for the first byte (or the end): false if the flight was
// abandoned before any.
func (r *flightReader) ready() bool {
	avail, err := r.wait()
	return avail > 0 && err == nil
}

// wait blocks until more than r.off is readable; the end readable, or the
// flight's error.
func (r *flightReader) wait() (int64, error) {
	fl := r.fl
	for {
		fl.mu.Lock()
		avail := fl.written
		if !fl.done && avail == fl.size {
			avail-- // the last byte waits for the digest
		}
		err, more := fl.err, fl.more
		fl.mu.Unlock()
		if avail > r.off {
			return avail, nil
		}
		if err != nil {
			return avail, err
		}
		if r.off >= fl.size {
			return avail, io.EOF
		}
		select {
		case <-more:
		case <-r.ctx.Done():
			return avail, r.ctx.Err()
		}
	}
}

func (r *flightReader) Read(p []byte) (int, error) {
	if r.off >= r.fl.size {
		return 0, io.EOF
	}
	avail, err := r.wait()
	if avail <= r.off {
		return 0, err
	}
	if n := avail - r.off; int64(len(p)) > n {
		p = p[:n]
	}
	n, err := r.fl.file.ReadAt(p, r.off)
	r.off += int64(n)
	if err == io.EOF {
		err = nil
	}
	return n, err
}

func (r *flightReader) Close() error {
	r.fl.release()
	return nil
}
