package podspec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
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

// UsernsRange is the host IDs the node gives pods' user namespaces: from
// First, Length of them, PerPod (userNamespaces.idsPerPod) to each pod.
type UsernsRange struct {
	First, Length, PerPod uint32
}

// kubeletUser is the user whose subordinate IDs, where it has some, are
// the node's range, as the kubelet's.
const kubeletUser = "kubelet"

// UserNamespaceRange is the node's range for pods' user namespaces as the
// kubelet's user namespace manager makes it at start: idsPerPod IDs per
// pod (0: the kubelet's 65536); the subordinate IDs of a "kubelet" user
// (getsubids, the same for users and groups), else everything from one
// block up to 2^32 (block 0 being the host's own users); checked with the
// kubelet's messages (aligned, whole blocks, enough for maxPods).
// lookupUser and getsubids are os/user's and the getsubids tool's (tests
// stand in; nil: the real ones).
func UserNamespaceRange(idsPerPod int64, maxPods int, lookupUser func(string) error, getsubids func(args ...string) (string, error)) (UsernsRange, error) {
	l := uint64(usernsLength)
	if idsPerPod > 0 {
		l = uint64(idsPerPod)
	}
	fail := func(format string, args ...any) (UsernsRange, error) {
		return UsernsRange{}, fmt.Errorf("create user namespace manager: "+format, args...)
	}
	if l%usernsLength != 0 || l >= 1<<32 {
		return fail("kubelet user namespace length %v is not a multiple of %d", l, usernsLength)
	}
	first, length, err := kubeletMappings(uint32(l), lookupUser, getsubids)
	if err != nil {
		return fail("kubelet mappings: %v", err)
	}
	switch {
	case uint64(first)%l != 0:
		return fail("kubelet user assigned ID %v is not a multiple of %v", first, l)
	case uint64(first) < l:
		return fail("kubelet user assigned ID %v must be greater or equal to %v", first, l)
	case uint64(length)%l != 0:
		return fail("kubelet user assigned IDs length %v is not a multiple of %v", length, l)
	case uint64(length)/l < uint64(maxPods):
		return fail("kubelet user assigned IDs are not enough to support %v pods", maxPods)
	}
	return UsernsRange{First: first, Length: length, PerPod: uint32(l)}, nil
}

// kubeletMappings is the kubelet's getKubeletMappings: no "kubelet" user,
// or no getsubids tool, is the default range; a user getsubids says
// nothing for (or differently for groups) is an error: the kubelet takes
// it for a remote source of IDs that is down.
func kubeletMappings(perPod uint32, lookupUser func(string) error, getsubids func(args ...string) (string, error)) (uint32, uint32, error) {
	defFirst, defLen := perPod, uint32((1<<32)-uint64(perPod))
	if lookupUser == nil {
		lookupUser = func(name string) error { _, err := user.Lookup(name); return err }
	}
	if err := lookupUser(kubeletUser); err != nil {
		var unknown user.UnknownUserError
		if errors.As(err, &unknown) {
			return defFirst, defLen, nil
		}
		return 0, 0, err
	}
	if getsubids == nil {
		path, err := exec.LookPath("getsubids")
		if err != nil {
			if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
				log.WithError(err).Info("user namespaces: getsubids not found, using default mappings")
				return defFirst, defLen, nil
			}
			return 0, 0, err
		}
		getsubids = func(args ...string) (string, error) {
			out, err := exec.Command(path, args...).Output()
			return string(out), err
		}
	}
	uids, err := getsubids(kubeletUser)
	if err != nil {
		return 0, 0, fmt.Errorf("error retrieving additional uids for user %q: %w", kubeletUser, err)
	}
	gids, err := getsubids("-g", kubeletUser)
	if err != nil {
		return 0, 0, fmt.Errorf("error retrieving additional gids for user %q", kubeletUser)
	}
	if uids != gids {
		return 0, 0, fmt.Errorf("mismatched subuids and subgids for user %q", kubeletUser)
	}
	return parseGetsubids(uids)
}

// parseGetsubids reads getsubids' one line, "0: kubelet <first> <count>".
func parseGetsubids(out string) (uint32, uint32, error) {
	lines := strings.Split(strings.Trim(out, "\n"), "\n")
	if len(lines) != 1 {
		return 0, 0, fmt.Errorf("error parsing line %q: it must contain only one line", out)
	}
	parts := strings.Fields(lines[0])
	if len(parts) != 4 {
		return 0, 0, fmt.Errorf("invalid line %q", out)
	}
	first, err := strconv.ParseUint(parts[2], 10, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("error parsing line %q: %w", out, err)
	}
	n, err := strconv.ParseUint(parts[3], 10, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("error parsing line %q: %w", out, err)
	}
	return uint32(first), uint32(n), nil
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

// newUsernsAllocatorOf cuts the default range in blocks of length IDs.
func newUsernsAllocatorOf(podsDir string, length uint32) *usernsAllocator {
	return newUsernsAllocatorIn(podsDir, UsernsRange{First: length, Length: uint32((1 << 32) - uint64(length)), PerPod: length})
}

// newUsernsAllocatorIn cuts r (checked by UserNamespaceRange) in blocks.
func newUsernsAllocatorIn(podsDir string, r UsernsRange) *usernsAllocator {
	first := r.First / r.PerPod
	a := &usernsAllocator{podsDir: podsDir, length: r.PerPod, first: first, blocks: r.Length / r.PerPod,
		byPod: map[types.UID]uint32{}, byBlck: map[uint32]types.UID{}, next: first}
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
