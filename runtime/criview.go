package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	apievents "github.com/containerd/containerd/api/events"
	"github.com/containerd/typeurl/v2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	log "github.com/sirupsen/logrus"
)

// What the CRI view of the node (provider/cri) reads of the runtime's
// state, beyond what the pods' workers use: the sandbox records as they
// are (not only the whole ones), their containers' pods, their mounts, and
// the images with CRI's image IDs.

// SandboxRecord is a pod's sandbox as its record on disk has it, whole or
// not.
type SandboxRecord struct {
	Sandbox
	// Ready: the sandbox is whole (Runtime.Sandbox would return it).
	Ready bool
	// CreatedAt is when the sandbox was last made whole: its record is
	// written once, at the end of its making, and only then.
	CreatedAt time.Time
}

// SandboxRecords lists the pods' sandbox records under the root dir. A pod
// whose sandbox was released (it ended) or never made has none.
func (r *Runtime) SandboxRecords() ([]SandboxRecord, error) {
	dirs, err := os.ReadDir(filepath.Join(r.rootDir, "pods"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var out []SandboxRecord
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		dir := r.podDir(d.Name())
		path := filepath.Join(dir, "sandbox.json")
		b, err := os.ReadFile(path)
		if err != nil {
			continue // no sandbox, or removed meanwhile
		}
		rec := SandboxRecord{Sandbox: Sandbox{Dir: dir}}
		if json.Unmarshal(b, &rec.Sandbox) != nil || rec.UID == "" {
			continue
		}
		if st, err := os.Stat(path); err == nil {
			rec.CreatedAt = st.ModTime()
		}
		rec.Ready = rec.notWhole() == ""
		out = append(out, rec)
	}
	return out, nil
}

// PodRef is a pod as its containers' labels name it.
type PodRef struct {
	UID, Namespace, Name string
	// FirstCreated is when its first container still there was created.
	FirstCreated time.Time
}

// ContainerPods are the pods that have containers, by UID, as the
// containers' labels name them: the pods of a released sandbox have no
// record left, and their containers stay until the pod is deleted.
func (r *Runtime) ContainerPods(ctx context.Context) (map[string]PodRef, error) {
	cs, err := r.client.ContainerService().List(ctx, fmt.Sprintf("labels.%q", LabelPodUID))
	if err != nil {
		return nil, err
	}
	out := map[string]PodRef{}
	for _, c := range cs {
		uid := c.Labels[LabelPodUID]
		ref, ok := out[uid]
		if !ok || c.CreatedAt.Before(ref.FirstCreated) {
			ref.FirstCreated = c.CreatedAt
		}
		ref.UID, ref.Namespace, ref.Name = uid, c.Labels[LabelPodNamespace], c.Labels[LabelPodName]
		out[uid] = ref
	}
	return out, nil
}

// ContainerMounts are a container's bind mounts as the kubelet gives CRI
// them: its volumes, then /etc/hosts and the termination message file.
// The ones containerd's CRI adds itself (/etc/resolv.conf, /etc/hostname,
// /dev/shm) are left out, as CRI's ContainerStatus leaves them out.
func (r *Runtime) ContainerMounts(ctx context.Context, id string) ([]Mount, error) {
	c, err := r.client.ContainerService().Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if c.Spec == nil {
		return nil, nil
	}
	var spec specs.Spec
	if err := json.Unmarshal(c.Spec.GetValue(), &spec); err != nil {
		return nil, fmt.Errorf("spec of container %s: %w", id, err)
	}
	return criMounts(spec.Mounts, c.Labels[labelTermLog]), nil
}

// criMounts picks and orders a spec's mounts as ContainerMounts says;
// termLog is the host file of the termination message, if any.
func criMounts(mounts []specs.Mount, termLog string) []Mount {
	var volumes, last []Mount
	for _, m := range mounts {
		if m.Type != "bind" {
			continue
		}
		switch m.Destination {
		case "/etc/resolv.conf", "/etc/hostname", "/dev/shm":
			continue
		}
		out := Mount{HostPath: m.Source, ContainerPath: m.Destination}
		for _, o := range m.Options {
			switch o {
			case "ro":
				out.ReadOnly = true
			case "rro":
				out.ReadOnly, out.RecursiveReadOnly = true, true
			case "rslave":
				out.Propagation = PropagationHostToContainer
			case "rshared":
				out.Propagation = PropagationBidirectional
			}
		}
		if m.Destination == "/etc/hosts" || (termLog != "" && m.Source == termLog) {
			last = append(last, out)
		} else {
			volumes = append(volumes, out)
		}
	}
	return append(volumes, last...)
}

// CRIImage is a stored image with what CRI lists besides: its ID is the
// digest of its config, as containerd's CRI names images (and as the
// kubelet gives a container's image in CreateContainer), and the user its
// config runs as.
type CRIImage struct {
	StoredImage
	ConfigDigest string
	// UID is the config's user when numeric, else Username is.
	UID      *int64
	Username string
}

// imageConfigs caches the config digest and user by target digest: both
// are content-addressed, never stale. Bounded: cleared when full.
var imageConfigs struct {
	sync.Mutex
	m map[string]imageConfig
}

type imageConfig struct {
	digest, user string
}

// CRIImages lists the namespace's images as ListImages does, each with its
// config digest and user. An image whose config cannot be read (its
// content gone) has its target digest as its ID.
func (r *Runtime) CRIImages(ctx context.Context) ([]CRIImage, error) {
	stored, err := r.ListImages(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]CRIImage, 0, len(stored))
	for _, s := range stored {
		img := CRIImage{StoredImage: s, ConfigDigest: s.ID}
		if cfg, ok := r.imageConfig(ctx, s); ok {
			img.ConfigDigest = cfg.digest
			img.UID, img.Username = imageUser(cfg.user)
		}
		out = append(out, img)
	}
	return out, nil
}

func (r *Runtime) imageConfig(ctx context.Context, s StoredImage) (imageConfig, bool) {
	imageConfigs.Lock()
	cfg, ok := imageConfigs.m[s.ID]
	imageConfigs.Unlock()
	if ok || len(s.Names) == 0 {
		return cfg, ok
	}
	img, err := r.client.GetImage(ctx, s.Names[0])
	if err != nil {
		return cfg, false
	}
	desc, err := img.Config(ctx)
	if err != nil {
		return cfg, false
	}
	cfg.digest = desc.Digest.String()
	if spec, err := img.Spec(ctx); err == nil {
		cfg.user = spec.Config.User
	}
	imageConfigs.Lock()
	if imageConfigs.m == nil || len(imageConfigs.m) >= describedMax {
		imageConfigs.m = map[string]imageConfig{}
	}
	imageConfigs.m[s.ID] = cfg
	imageConfigs.Unlock()
	return cfg, true
}

// imageUser splits an image config's user ("uid[:gid]" or "name[:group]")
// as CRI's Image has it: a numeric uid, or a name.
func imageUser(user string) (*int64, string) {
	if user == "" {
		return nil, ""
	}
	name, _, _ := strings.Cut(user, ":")
	if uid, err := strconv.ParseInt(name, 10, 64); err == nil {
		return &uid, ""
	}
	return nil, name
}

// FinalStatus records a stopped container's exit on it, as the exit
// watcher does (finalize: the exit code, OOMKilled), and returns its
// status: the CRI view's RemoveContainer hands it to the pod's worker
// before the container goes, since the watcher's own report reads the
// container again and finds nothing once it is removed.
func (r *Runtime) FinalStatus(ctx context.Context, id string) (ContainerStatus, error) {
	r.finalize(ctx, id)
	return r.ContainerStatus(ctx, id)
}

// RemoveContainerKeepingLogs is RemoveContainer as containerd's CRI
// removes a container: its log files (and their /var/log/containers link)
// stay, since on a kubelet node the log is the kubelet's to clean up (its
// container GC), and crictl rm removes it itself unless --keep-logs.
func (r *Runtime) RemoveContainerKeepingLogs(ctx context.Context, id string) error {
	return r.removeContainer(ctx, id, true)
}

// PullCRIImage pulls an image as PullImage does (the node's registry
// hosts, the peer mirror, lazy pulls) and returns its ID as containerd's
// CRI answers a pull: the digest of its config, which the kubelet then
// gives CreateContainer as the image.
func (r *Runtime) PullCRIImage(ctx context.Context, ref string, creds Credentials) (string, error) {
	img, _, err := r.PullImage(ctx, ref, creds)
	if err != nil {
		return "", err
	}
	desc, err := img.image.Config(ctx)
	if err != nil {
		return "", fmt.Errorf("config of image %s: %w", img.Ref, err)
	}
	return desc.Digest.String(), nil
}

// ContainerEventType is what happened to a container, as CRI's container
// events name it.
type ContainerEventType int

const (
	ContainerCreated ContainerEventType = iota
	ContainerStarted
	ContainerStopped
	ContainerDeleted
)

// ContainerEvent is one event of a pod's container, or of its sandbox.
type ContainerEvent struct {
	// ID is the container's; empty for the sandbox's event.
	ID, PodUID string
	Type       ContainerEventType
	// At is when containerd published it (the runtime made the sandbox
	// event).
	At time.Time
}

// sandboxWatchers are the CRI view's event streams, told of the sandboxes'
// events: a sandbox is no containerd container, its events are the
// runtime's own.
type sandboxWatchers struct {
	mu   sync.Mutex
	next int
	m    map[int]chan ContainerEvent
}

// sandboxQueue is how many sandbox events a watcher may be behind; one
// further behind loses the oldest (and is told so in the log), rather
// than hold up the sandbox's making.
const sandboxQueue = 256

func (w *sandboxWatchers) add() (int, <-chan ContainerEvent) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[int]chan ContainerEvent{}
	}
	w.next++
	ch := make(chan ContainerEvent, sandboxQueue)
	w.m[w.next] = ch
	return w.next, ch
}

func (w *sandboxWatchers) remove(id int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m, id)
}

// sandboxEvent tells the watchers that a pod's sandbox was made whole
// (created, started) or released (stopped).
func (r *Runtime) sandboxEvent(uid string, t ContainerEventType) {
	e := ContainerEvent{PodUID: uid, Type: t, At: time.Now()}
	w := &r.sandboxWatchers
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ch := range w.m {
		select {
		case ch <- e:
		default:
			log.WithField("uid", uid).Warn("a CRI event stream is behind: a sandbox event is lost")
		}
	}
}

// WatchContainerEvents calls fn with every event of the pods' containers
// as containerd publishes them (no polling): created and deleted (the
// container's record), started and stopped (its own process's task, not
// an exec's); and with their sandboxes' (made whole: created and started;
// released: stopped) as the runtime makes and releases them. A deleted
// container's pod is known from the containers seen since the watch
// began, listed at its start. It returns when ctx ends
// (nil) or containerd's stream breaks: the caller's stream ends with it,
// as a CRI client (evented PLEG) expects, and it relists.
func (r *Runtime) WatchContainerEvents(ctx context.Context, fn func(ContainerEvent)) error {
	watcher, sandboxes := r.sandboxWatchers.add()
	defer r.sandboxWatchers.remove(watcher)
	ns := `namespace==` + r.ns + `,topic==`
	events, errs := r.client.EventService().Subscribe(ctx,
		ns+`"/containers/create"`, ns+`"/containers/delete"`, ns+`"/tasks/start"`, ns+`"/tasks/exit"`)
	// Listed after subscribing: a container made in between is in both.
	cs, err := r.client.ContainerService().List(ctx, fmt.Sprintf("labels.%q", LabelPodUID))
	if err != nil {
		return err
	}
	pods := make(map[string]string, len(cs))
	for _, c := range cs {
		pods[c.ID] = c.Labels[LabelPodUID]
	}
	podOf := func(id string) string {
		if uid, ok := pods[id]; ok {
			return uid
		}
		c, err := r.client.ContainerService().Get(ctx, id)
		if err != nil {
			return ""
		}
		pods[id] = c.Labels[LabelPodUID]
		return pods[id]
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errs:
			if ctx.Err() != nil {
				return nil
			}
			return err
		case e := <-sandboxes:
			fn(e)
		case env := <-events:
			ev, err := typeurl.UnmarshalAny(env.Event)
			if err != nil {
				continue
			}
			out := ContainerEvent{At: env.Timestamp}
			switch e := ev.(type) {
			case *apievents.ContainerCreate:
				out.ID, out.Type = e.ID, ContainerCreated
				out.PodUID = podOf(e.ID)
			case *apievents.ContainerDelete:
				out.ID, out.Type, out.PodUID = e.ID, ContainerDeleted, pods[e.ID]
				delete(pods, e.ID)
			case *apievents.TaskStart:
				out.ID, out.Type = e.ContainerID, ContainerStarted
				out.PodUID = podOf(e.ContainerID)
			case *apievents.TaskExit:
				if e.ID != e.ContainerID {
					continue // an exec'd process
				}
				out.ID, out.Type = e.ContainerID, ContainerStopped
				out.PodUID = podOf(e.ContainerID)
			default:
				continue
			}
			if out.PodUID != "" {
				fn(out)
			}
		}
	}
}

// ReopenContainerLog has a running container's log writer open its log
// path anew, as containerd's CRI does on the kubelet's ReopenContainerLog:
// whoever renamed the live file (a rotation not hostlet's own) gets new
// records in a new file at the path, and none in the renamed one after
// this returns. hostlet's own rotation reopens under the same lock.
func (r *Runtime) ReopenContainerLog(id string) error {
	r.sinksMu.Lock()
	sink := r.sinks[id]
	r.sinksMu.Unlock()
	if sink == nil {
		return fmt.Errorf("container %s: no log writer (not running)", id)
	}
	return sink.reopen()
}

func (s *logSink) reopen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("the log writer is closed (the container exited)")
	}
	f, err := os.OpenFile(s.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return err
	}
	_ = s.f.Close()
	s.f = f
	return nil
}

// CRIContainerInfo is what containerd's CRI tells of a container in its
// verbose status (ContainerInfo): its task's pid (0 once it has none), its
// snapshot, its runtime and the runtime's options, its OCI spec.
type CRIContainerInfo struct {
	Pid                                   uint32
	SnapshotKey, Snapshotter, RuntimeType string
	// RuntimeOptions are the runtime's options decoded (runc's), nil
	// without any.
	RuntimeOptions any
	Spec           *specs.Spec
}

// ContainerInfo reads a container's CRIContainerInfo from containerd.
func (r *Runtime) ContainerInfo(ctx context.Context, id string) (CRIContainerInfo, error) {
	c, err := r.client.ContainerService().Get(ctx, id)
	if err != nil {
		return CRIContainerInfo{}, err
	}
	out := CRIContainerInfo{SnapshotKey: c.SnapshotKey, Snapshotter: c.Snapshotter, RuntimeType: c.Runtime.Name}
	if o := c.Runtime.Options; o != nil {
		if v, err := typeurl.UnmarshalAny(o); err == nil {
			out.RuntimeOptions = v
		}
	}
	if c.Spec != nil {
		var spec specs.Spec
		if err := json.Unmarshal(c.Spec.GetValue(), &spec); err != nil {
			return CRIContainerInfo{}, fmt.Errorf("spec of container %s: %w", id, err)
		}
		out.Spec = &spec
	}
	if cc, err := r.client.LoadContainer(ctx, id); err == nil {
		if task, err := cc.Task(ctx, nil); err == nil {
			out.Pid = task.Pid()
		}
	}
	return out, nil
}
