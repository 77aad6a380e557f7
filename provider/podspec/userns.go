package podspec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/google/renameio/v2"
	"github.com/hostlet/hostlet/runtime"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// usernsLength is the kubelet's default number of IDs per pod
// (userNamespaces.idsPerPod), also the unit idsPerPod is a multiple of.
const usernsLength = 65536

// UserNamespaceLength is the IDs each pod with hostUsers: false gets,
// userNamespaces.idsPerPod (0: the kubelet's 65536), checked at start as
// the kubelet's user namespace manager checks it against the node's range
// (the host's IDs from idsPerPod up to 2^32, block 0 being the host's own):
// the range must be whole blocks, enough for maxPods.
func UserNamespaceLength(idsPerPod int64, maxPods int) (uint32, error) {
	l := uint64(usernsLength)
	if idsPerPod > 0 {
		l = uint64(idsPerPod)
	}
	if l%usernsLength != 0 || l >= 1<<32 {
		return 0, fmt.Errorf("create user namespace manager: kubelet user namespace length %v is not a multiple of %d", l, usernsLength)
	}
	ids := (1 << 32) - l
	if ids%l != 0 {
		return 0, fmt.Errorf("create user namespace manager: kubelet user assigned IDs length %v is not a multiple of %v", ids, l)
	}
	if ids/l < uint64(maxPods) {
		return 0, fmt.Errorf("create user namespace manager: kubelet user assigned IDs are not enough to support %v pods", maxPods)
	}
	return uint32(l), nil
}

// usernsFile holds a pod's mapping in its pod dir, as the kubelet keeps it.
const usernsFile = "userns"

// usernsMappings is the kubelet's file format.
type usernsMappings struct {
	UIDMappings []usernsIDMapping `json:"uidMappings"`
	GIDMappings []usernsIDMapping `json:"gidMappings"`
}

type usernsIDMapping struct {
	HostID      uint32 `json:"hostId"`
	ContainerID uint32 `json:"containerId"`
	Length      uint32 `json:"length"`
}

// usernsAllocator hands out non-overlapping blocks of idsPerPod host IDs
// (65536 by default) to pods with hostUsers: false, as the kubelet's user
// namespace manager does: the node's range is the IDs from one block up
// (block 0, the host's own users, is never given out), one block per pod, persisted in the pod dir so a restart
// of hostlet gives a running pod the same IDs, freed when the pod is cleaned
// up.
type usernsAllocator struct {
	podsDir string
	// length is the IDs of a block (idsPerPod).
	length uint32
	// first is the first block's index, blocks how many there are.
	first, blocks uint32

	mu     sync.Mutex
	byPod  map[types.UID]uint32 // pod -> block index
	byBlck map[uint32]types.UID
	next   uint32 // where the search for a free block starts
}

// newUsernsAllocator reads the allocations of the pods found under
// podsDir. A file it cannot use is logged and left alone: its pod cannot
// start until it is cleaned up, and its IDs are not given to another.
func newUsernsAllocator(podsDir string) *usernsAllocator {
	return newUsernsAllocatorOf(podsDir, usernsLength)
}

// newUsernsAllocatorOf cuts the range in blocks of length IDs (checked by
// UserNamespaceLength).
func newUsernsAllocatorOf(podsDir string, length uint32) *usernsAllocator {
	a := &usernsAllocator{podsDir: podsDir, length: length, first: 1, blocks: uint32((1<<32)/uint64(length) - 1),
		byPod: map[types.UID]uint32{}, byBlck: map[uint32]types.UID{}, next: 1}
	entries, err := os.ReadDir(podsDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		log.WithError(err).Warn("user namespaces: reading pod dirs")
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		uid := types.UID(e.Name())
		if _, err := a.load(uid); err != nil && !errors.Is(err, fs.ErrNotExist) {
			log.WithError(err).WithField("podUID", uid).Warn("user namespaces: ignoring a pod's mapping")
		}
	}
	return a
}

func (a *usernsAllocator) file(uid types.UID) string {
	return filepath.Join(a.podsDir, string(uid), usernsFile)
}

// Get returns the pod's mapping, allocating and persisting one first if it
// has none.
func (a *usernsAllocator) Get(uid types.UID) (runtime.IDMap, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if b, ok := a.byPod[uid]; ok {
		return a.idmap(b), nil
	}
	if m, err := a.load(uid); err == nil {
		return m, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return runtime.IDMap{}, fmt.Errorf("user namespace: %w", err)
	}
	b, ok := a.free()
	if !ok {
		return runtime.IDMap{}, fmt.Errorf("create user namespace: could not find an empty slot to allocate a user namespace")
	}
	m := a.idmap(b)
	if err := a.write(uid, m); err != nil {
		return runtime.IDMap{}, fmt.Errorf("create user namespace: %w", err)
	}
	a.byPod[uid], a.byBlck[b] = b, uid
	a.next = b + 1
	return m, nil
}

// Release frees the pod's block and removes its file.
func (a *usernsAllocator) Release(uid types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	_ = os.Remove(a.file(uid))
	if b, ok := a.byPod[uid]; ok {
		delete(a.byPod, uid)
		delete(a.byBlck, b)
	}
}

func (a *usernsAllocator) idmap(b uint32) runtime.IDMap {
	return runtime.IDMap{HostID: b * a.length, Size: a.length}
}

// free finds an unused block, round robin so a freed block is not reused
// at once.
func (a *usernsAllocator) free() (uint32, bool) {
	for i := uint32(0); i < a.blocks; i++ {
		b := a.first + (a.next-a.first+i)%a.blocks
		if _, used := a.byBlck[b]; !used {
			return b, true
		}
	}
	return 0, false
}

// load reads and records the pod's persisted mapping, checked as the
// kubelet checks it. Called with mu held (or before the allocator is shared).
func (a *usernsAllocator) load(uid types.UID) (runtime.IDMap, error) {
	data, err := os.ReadFile(a.file(uid))
	if err != nil {
		return runtime.IDMap{}, err
	}
	var m usernsMappings
	if err := json.Unmarshal(data, &m); err != nil {
		return runtime.IDMap{}, fmt.Errorf("invalid user namespace mappings file: %w", err)
	}
	if len(m.UIDMappings) != 1 || len(m.GIDMappings) != 1 || m.UIDMappings[0] != m.GIDMappings[0] {
		return runtime.IDMap{}, fmt.Errorf("invalid user namespace configuration: one identical UID and GID mapping expected")
	}
	u := m.UIDMappings[0]
	if u.ContainerID != 0 {
		return runtime.IDMap{}, fmt.Errorf("invalid user namespace configuration: UID 0 must be mapped")
	}
	if u.Length != a.length || u.HostID%a.length != 0 {
		return runtime.IDMap{}, fmt.Errorf("wrong user namespace range %d+%d", u.HostID, u.Length)
	}
	b := u.HostID / a.length
	if b < a.first || b-a.first >= a.blocks {
		return runtime.IDMap{}, fmt.Errorf("id %d is out of range", u.HostID)
	}
	if owner, used := a.byBlck[b]; used && owner != uid {
		return runtime.IDMap{}, fmt.Errorf("range picked for pod %q already taken", uid)
	}
	a.byPod[uid], a.byBlck[b] = b, uid
	return a.idmap(b), nil
}

// write persists the mapping atomically and durably (a crash must not lose
// an allocation a running pod uses).
func (a *usernsAllocator) write(uid types.UID, m runtime.IDMap) error {
	dir := filepath.Join(a.podsDir, string(uid))
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	id := usernsIDMapping{HostID: m.HostID, ContainerID: 0, Length: m.Size}
	data, err := json.Marshal(usernsMappings{UIDMappings: []usernsIDMapping{id}, GIDMappings: []usernsIDMapping{id}})
	if err != nil {
		return err
	}
	if err := renameio.WriteFile(a.file(uid), data, 0o640, renameio.WithTempDir(dir)); err != nil {
		return err
	}
	// renameio syncs the file, not the rename: the directory entry too.
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// podUserNS is the user namespace mapping of a pod with hostUsers: false,
// or nil for a pod that runs with the host's IDs. A host that cannot give a
// pod its own user namespace fails the sandbox with the kubelet's message:
// the pod never runs as the host's root instead.
func (r *Runtime) podUserNS(ctx context.Context, pod *v1.Pod, handler *runtime.RuntimeHandler) (*runtime.IDMap, error) {
	if pod.Spec.HostUsers == nil || *pod.Spec.HostUsers {
		return nil, nil
	}
	if err := r.rt.UserNamespacesSupported(ctx); err != nil {
		return nil, fmt.Errorf("can't set `spec.hostUsers: false`, %w", err)
	}
	// The handler's own runtime must map IDs too (the kubelet's
	// HandlerSupportsUserNamespaces, with its words).
	if !handler.UserNamespaces {
		if handler.Name != runtime.DefaultHandler {
			return nil, fmt.Errorf("can't set `spec.hostUsers: false`, RuntimeClass handler %q does not support user namespaces", handler.Name)
		}
		return nil, errors.New("can't set `spec.hostUsers: false`, runtime does not support user namespaces")
	}
	m, err := r.userns.Get(pod.UID)
	if err != nil {
		return nil, err
	}
	return &m, nil
}
