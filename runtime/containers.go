package runtime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/defaults"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	"github.com/containerd/typeurl/v2"
	"github.com/hostlet/hostlet/crash"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	log "github.com/sirupsen/logrus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Labels on containerd containers: enough to rebuild every pod's state after
// hostlet restarts, without a database of our own.
const (
	LabelPodUID        = "io.kubernetes.pod.uid"
	LabelPodName       = "io.kubernetes.pod.name"
	LabelPodNamespace  = "io.kubernetes.pod.namespace"
	LabelContainerName = "io.kubernetes.container.name"
	labelAttempt       = "hostlet.attempt"
	labelLogPath       = "hostlet.log-path"
	labelTermLog       = "hostlet.termination-log"
	labelImageName     = "hostlet.image"
	labelImageID       = "hostlet.image-id"
	labelStartedAt     = "hostlet.started-at"
	labelFinishedAt    = "hostlet.finished-at"
	labelExitCode      = "hostlet.exit-code"
	labelReason        = "hostlet.reason"
	// labelBackoff is "<applied>/<next>/<boot ID>": the crash-loop delay
	// applied after this instance exited and the one the next exit will
	// get, and the boot they were recorded in (backoff.go).
	labelBackoff = "hostlet.backoff"
	// labelShimGroup is the shim group the container was created in
	// (shimgroups.go), read at its start without loading the spec; none on
	// containers of older hostlets.
	labelShimGroup = "hostlet.shim-group"
	// labelHandler is the runtime handler the container runs with (its
	// pod's); none on containers of older hostlets: the default one.
	labelHandler = "hostlet.runtime-handler"
	// labelUser is "<uid>:<gid>:<group>,<group>...", the process's
	// identity as its spec has it (containerd resolved the image's user
	// and groups), read back for the container status's user.linux; none
	// on containers of older hostlets: read from the spec.
	labelUser = "hostlet.user"
)

// State of a container as the runtime sees it.
type State string

const (
	StateCreated State = "created"
	StateRunning State = "running"
	StateExited  State = "exited"
)

// ContainerStatus is everything the pod status needs from the runtime.
type ContainerStatus struct {
	ID, Name, PodUID   string
	Attempt            int
	State              State
	CreatedAt          time.Time
	StartedAt          time.Time
	FinishedAt         time.Time
	ExitCode           int32
	Reason             string // "OOMKilled" when the kernel killed it
	ImageName, ImageID string
	LogPath            string
	TerminationLogPath string
	// BackoffApplied and BackoffNext restore crash-loop back-off after a
	// restart of hostlet.
	BackoffApplied, BackoffNext time.Duration
	// User is the process's identity, nil if unknown.
	User *User
}

// User is the identity of a container's process as CRI reports it: its uid,
// gid and supplementary groups (the gid among them).
type User struct {
	UID, GID           uint32
	SupplementalGroups []uint32
}

// Mount binds a host path into a container.
type Mount struct {
	HostPath, ContainerPath string
	ReadOnly                bool
	Propagation             Propagation
	// IDMapped: the host path shows the pod's IDs already (an image
	// volume mounted with the pod's mapping), so in a pod with a user
	// namespace it is not idmapped again.
	IDMapped bool
	// RecursiveReadOnly makes the mounts below it read-only too (runc's
	// "rro"); only with ReadOnly, and a handler able to.
	RecursiveReadOnly bool
}

// Propagation is a bind mount's mount propagation, CRI's MountPropagation:
// whether mounts made later below the host path reach the container, and
// the container's back to the host.
type Propagation int

const (
	// PropagationPrivate (rprivate): neither way; the zero value.
	PropagationPrivate Propagation = iota
	// PropagationHostToContainer (rslave): the host's later mounts reach
	// the container; the host path must be on a shared or slave mount.
	PropagationHostToContainer
	// PropagationBidirectional (rshared): both ways; the host path must be
	// on a shared mount.
	PropagationBidirectional
)

// ContainerConfig is a container ready to be created: everything resolved.
type ContainerConfig struct {
	Sandbox    *Sandbox
	Name       string
	Attempt    int
	Image      *Image
	ImageName  string // as written in the pod spec
	Command    []string
	Args       []string
	Env        []string
	WorkingDir string
	Mounts     []Mount
	// TerminationMessagePath inside the container, backed by a host file.
	TerminationMessagePath string
	Hostname               string
	Security               Security
	Resources              Resources
	// Stdin keeps the container's stdin open for attach sessions;
	// StdinOnce closes it when the first one ends. TTY gives the process a
	// terminal.
	Stdin, StdinOnce, TTY bool
	// PIDNamespace, when set, is the namespace (a path) the container joins
	// instead of the pod's: an ephemeral container's target's.
	PIDNamespace string
	// Devices from device plugins.
	Devices Devices
}

func newID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ErrNoCommand is the CreateContainerError of an image with nothing to run.
var ErrNoCommand = errors.New("no command specified")

// CreateContainer creates (but does not start) a container in the sandbox.
func (r *Runtime) CreateContainer(ctx context.Context, cfg ContainerConfig) (string, error) {
	id := newID()
	s := cfg.Sandbox
	args := ProcessArgs(cfg.Command, cfg.Args, cfg.Image.Config)
	if len(args) == 0 {
		return "", ErrNoCommand
	}
	// The sandbox's handler, never another: a handler gone from
	// containerd's config fails the container rather than run it on the
	// default runtime.
	handler, err := r.RuntimeHandler(ctx, s.Handler)
	if err != nil {
		return "", fmt.Errorf("runtime handler of the pod: %w", err)
	}
	if err := checkRecursiveReadOnly(cfg.Mounts, handler); err != nil {
		return "", err
	}
	logPath := r.containerLogPath(s.Namespace, s.Name, s.UID, cfg.Name, cfg.Attempt)
	if err := os.MkdirAll(filepath.Dir(logPath), 0o750); err != nil {
		return "", err
	}
	// A restarted container with the same attempt (after a crash of hostlet
	// between create and record) must not append to the old attempt's log.
	removeLogFiles(logPath)
	var termLog string
	if cfg.TerminationMessagePath != "" {
		// Named as the kubelet names it (makeMounts): 8 hex digits of its
		// own for each instance, here the container id's first.
		termLog = filepath.Join(s.Dir, "containers", cfg.Name, id[:8])
		if err := os.MkdirAll(filepath.Dir(termLog), 0o750); err != nil {
			return "", err
		}
		if err := os.WriteFile(termLog, nil, 0o666); err != nil {
			return "", err
		}
		// World-writable so non-root containers can write their message.
		_ = os.Chmod(termLog, 0o666)
	}
	snapshotter, err := r.imageSnapshotter(ctx, cfg.Image.image)
	if err != nil {
		return "", fmt.Errorf("unpacking image %s: %w", cfg.Image.Ref, err)
	}
	labels := map[string]string{
		LabelPodUID:        s.UID,
		LabelPodName:       s.Name,
		LabelPodNamespace:  s.Namespace,
		LabelContainerName: cfg.Name,
		labelAttempt:       strconv.Itoa(cfg.Attempt),
		labelLogPath:       logPath,
		labelTermLog:       termLog,
		labelImageName:     cfg.ImageName,
		labelImageID:       cfg.Image.ID,
		labelHandler:       handler.Name,
	}
	maps.Copy(labels, stdioLabels(cfg))
	group := r.shims.pick(handler.Name)
	labels[labelShimGroup] = group
	cfg.Security.withoutHostDevices = handler.PrivilegedWithoutHostDevices
	cfg.Security.allDevicesAllowed = handler.PrivilegedWithoutHostDevicesAllDevicesAllowed
	specOpts := append(specFor(cfg, args, termLog, r.cgroups.V2()), r.deviceOpts(cfg.Devices)...)
	specOpts = append(specOpts, oci.WithAnnotations(map[string]string{shimGroupAnnotation: group}))
	ctx, done, err := r.creationLease(ctx, id)
	if err != nil {
		return "", err
	}
	defer done()
	_, err = r.client.NewContainer(ctx, id,
		containerd.WithImage(cfg.Image.image),
		containerd.WithSnapshotter(snapshotter), // "": containerd's default
		containerd.WithNewSnapshot(id, cfg.Image.image, snapshotOpts(s.IDMap)...),
		withNewSpec(id, specOpts),
		containerd.WithContainerLabels(labels),
		withUserLabel,
		handler.newContainerOpts(s.CgroupParent))
	if err != nil {
		if runtimeLost(err) {
			// Made or not, the caller never hears of this ID again: once
			// containerd is back, what it made of it goes.
			r.discardContainer(ctx, id, snapshotter)
		}
		return "", err
	}
	return id, nil
}

// creationLeasePrefix and creationLeaseTTL name and bound the lease a
// container's creation runs under (creationLease).
const (
	creationLeasePrefix = "hostlet-create-"
	creationLeaseTTL    = 5 * time.Minute
	labelLeaseOwner     = "hostlet.root-dir"
)

// creationLease is the lease a container's creation runs under, in place
// of the one containerd's client makes for it: that one is anonymous and
// lasts a day, so a hostlet killed after the rootfs snapshot was prepared
// and before the container was recorded would leave the snapshot held for
// 24 hours, with nothing naming it. This one is named after the container
// and owned by this hostlet's root dir, so RemoveCrashLeftovers finds and
// ends it (which frees the snapshot), and it lapses in minutes anyway.
// done ends it once the container, which then holds the snapshot itself,
// is made or not.
func (r *Runtime) creationLease(ctx context.Context, id string) (context.Context, func(), error) {
	ls := r.client.LeasesService()
	l, err := ls.Create(ctx, leases.WithID(creationLeasePrefix+id),
		leases.WithExpiration(creationLeaseTTL), leases.WithLabel(labelLeaseOwner, r.rootDir))
	if err != nil {
		return ctx, nil, fmt.Errorf("lease for creating container %s: %w", id, err)
	}
	return leases.WithLease(ctx, l.ID), func() {
		if err := ls.Delete(context.WithoutCancel(ctx), l); err != nil && !errdefs.IsNotFound(err) {
			log.WithError(err).WithField("container", id).Debug("ending a container creation's lease (it lapses by itself)")
		}
	}, nil
}

// discardContainer waits until containerd answers again and removes the
// container id and its snapshot, if a call containerd's going away
// interrupted made them.
func (r *Runtime) discardContainer(ctx context.Context, id, snapshotter string) {
	ctx, cancel := context.WithTimeout(ctx, discardTaskWait)
	defer cancel()
	if !r.containerdBack(ctx, id, "a container a creation it interrupted made may be left") {
		return
	}
	if c, err := r.client.LoadContainer(ctx, id); err == nil {
		if err := c.Delete(ctx, containerd.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
			log.WithError(err).WithField("container", id).Warn("removing a container containerd's going away left")
		}
		return
	}
	if snapshotter == "" {
		snapshotter = defaults.DefaultSnapshotter
	}
	if err := r.client.SnapshotService(snapshotter).Remove(ctx, id); err != nil && !errdefs.IsNotFound(err) {
		log.WithError(err).WithField("container", id).Warn("removing a snapshot containerd's going away left")
	}
}

// withNewSpec is containerd's WithNewSpec with CRI's wording for a spec
// that cannot be made (a missing seccomp profile, an unknown user).
func withNewSpec(id string, opts []oci.SpecOpts) containerd.NewContainerOpts {
	return func(ctx context.Context, client *containerd.Client, c *containers.Container) error {
		if err := containerd.WithNewSpec(opts...)(ctx, client, c); err != nil {
			return fmt.Errorf("failed to generate container %q spec: failed to generate spec: %w", id, err)
		}
		return nil
	}
}

// withUserLabel records the spec's process user on the container
// (labelUser), so that statuses need not decode the spec.
func withUserLabel(_ context.Context, _ *containerd.Client, c *containers.Container) error {
	u, err := specUser(c)
	if err != nil || u == nil {
		return err
	}
	if c.Labels == nil {
		c.Labels = map[string]string{}
	}
	c.Labels[labelUser] = formatUser(*u)
	return nil
}

func specUser(c *containers.Container) (*User, error) {
	if c.Spec == nil {
		return nil, nil
	}
	var s specs.Spec
	if err := typeurl.UnmarshalTo(c.Spec, &s); err != nil {
		return nil, err
	}
	if s.Process == nil {
		return nil, nil
	}
	u := s.Process.User
	return &User{UID: u.UID, GID: u.GID, SupplementalGroups: u.AdditionalGids}, nil
}

func formatUser(u User) string {
	groups := make([]string, len(u.SupplementalGroups))
	for i, g := range u.SupplementalGroups {
		groups[i] = strconv.FormatUint(uint64(g), 10)
	}
	return fmt.Sprintf("%d:%d:%s", u.UID, u.GID, strings.Join(groups, ","))
}

func parseUser(s string) *User {
	parts := strings.SplitN(s, ":", 3)
	if len(parts) != 3 {
		return nil
	}
	uid, err1 := strconv.ParseUint(parts[0], 10, 32)
	gid, err2 := strconv.ParseUint(parts[1], 10, 32)
	if err1 != nil || err2 != nil {
		return nil
	}
	u := &User{UID: uint32(uid), GID: uint32(gid)}
	if parts[2] != "" {
		for _, g := range strings.Split(parts[2], ",") {
			n, err := strconv.ParseUint(g, 10, 32)
			if err != nil {
				return nil
			}
			u.SupplementalGroups = append(u.SupplementalGroups, uint32(n))
		}
	}
	return u
}

// ProcessArgs applies the Kubernetes command/args rules to the image's
// Entrypoint and Cmd.
func ProcessArgs(command, args []string, img ocispec.ImageConfig) []string {
	switch {
	case len(command) > 0:
		return append(append([]string{}, command...), args...)
	case len(args) > 0:
		return append(append([]string{}, img.Entrypoint...), args...)
	default:
		return append(append([]string{}, img.Entrypoint...), img.Cmd...)
	}
}

// StartContainer starts the container's process with its output going to
// FIFOs that hostlet reads into the log and attached sessions; the shim
// keeps them, so hostlet attaches again after a restart.
func (r *Runtime) StartContainer(ctx context.Context, id string) error {
	err := r.startContainer(ctx, id)
	if err != nil && runtimeLost(err) {
		// containerd went away in the middle (killed, restarted): not the
		// process's failure, so no StartError, which would count as an
		// instance that ran and restart the container (restart count 1).
		// Whether the shim made the task, or even started it, is known
		// only once containerd is back: what it made of this attempt is
		// ended then, and the caller, containerd answering again, removes
		// the container and tries again.
		r.discardTask(ctx, id)
		var se *StartError
		if errors.As(err, &se) {
			err = se.Err
		}
		return fmt.Errorf("containerd unavailable while starting the container: %w", err)
	}
	var se *StartError
	if errors.As(err, &se) {
		r.recordStartError(ctx, id)
	}
	return err
}

// recordStartError records on a container whose process never started that
// it exited so (exit 128, StartError, now), as CRI reports it: without a task
// it would read as created and never started, which a restarted hostlet
// takes for a start it interrupted (RemoveCrashLeftovers), losing the
// crash-loop back-off recorded on it and its place in the restart count.
func (r *Runtime) recordStartError(ctx context.Context, id string) {
	ctx = context.WithoutCancel(ctx)
	c, err := r.client.LoadContainer(ctx, id)
	if err == nil {
		_, err = c.SetLabels(ctx, map[string]string{
			labelExitCode:   "128",
			labelReason:     "StartError",
			labelFinishedAt: time.Now().UTC().Format(time.RFC3339Nano),
		})
	}
	if err != nil {
		log.WithError(err).WithField("container", id).Warn("recording a container's start error")
	}
}

func (r *Runtime) startContainer(ctx context.Context, id string) error {
	c, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return err
	}
	labels, err := c.Labels(ctx)
	if err != nil {
		return err
	}
	sink, err := newLogSink(labels[labelLogPath])
	if err != nil {
		return err
	}
	if err := r.joinShimGroup(ctx, c, labels[labelShimGroup], labels[labelHandler]); err != nil {
		sink.close()
		return err
	}
	stdio := newStdio(id, labels, sink)
	if task, err := r.newTask(ctx, c, stdio, sink); err != nil {
		if task != nil {
			// Created, not started; its output is followed already.
			_ = r.deleteTask(context.WithoutCancel(ctx), id, task, containerd.WithProcessKill)
		} else {
			stdio.close()
			sink.close()
		}
		return err
	}
	r.linkLog(labels, id)
	// The process runs: from here on nothing may fail the start, or the
	// caller would start a second copy. The start time is retried, then
	// left to the status (a missing one reads as the creation time).
	startedAt := map[string]string{labelStartedAt: time.Now().UTC().Format(time.RFC3339Nano)}
	for i := 0; ; i++ {
		_, err = c.SetLabels(context.WithoutCancel(ctx), startedAt)
		if err == nil || i == 2 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		log.WithError(err).WithField("container", id).Warn("recording container start time")
	}
	return nil
}

// newTask creates and starts the task of a container whose creation
// joinShimGroup began, through the gate. Deferred, so that even a panic in
// containerd's client frees the gate's place and ends the creation in the
// shim group (others may be waiting on either). A task that was created
// but did not start is returned with the error, for the caller to delete
// once out of the gate (deleting through it from here could wait forever).
func (r *Runtime) newTask(ctx context.Context, c containerd.Container, st *stdio, sink *logSink) (task containerd.Task, err error) {
	id := c.ID()
	counted := false
	defer func() {
		if !counted {
			r.shims.created(id, false)
		}
	}()
	if err := r.gate.enter(ctx); err != nil {
		return nil, err
	}
	defer r.gate.leave()
	task, err = c.NewTask(ctx, st.fifoCreator(r.fifoDir(id)))
	r.shims.created(id, err == nil)
	counted = true
	if err != nil {
		return nil, startError(err)
	}
	r.followLogs(id, task.IO(), sink, st)
	if err := task.Start(ctx); err != nil {
		return task, startError(err)
	}
	return task, nil
}

// runtimeLost says whether err is containerd's connection failing (the
// daemon gone or restarting), not containerd's answer. Besides the
// Unavailable code, gRPC's own words for a connection cut in the middle of
// a call: they reach us under other codes (Internal for a stream closed
// without trailers; Unknown once a client library re-wraps the text), and
// such a call may have done its work in containerd without us hearing.
func runtimeLost(err error) bool {
	if err == nil {
		return false
	}
	if errdefs.IsUnavailable(err) || status.Code(err) == codes.Unavailable {
		return true
	}
	msg := err.Error()
	for _, cut := range connectionCut {
		if strings.Contains(msg, cut) {
			return true
		}
	}
	return false
}

// connectionCut are gRPC's messages for a connection lost mid-call.
var connectionCut = []string{
	"error reading from server: EOF",
	"transport is closing",
	"server closed the stream without sending trailers",
	"connection reset by peer",
}

// containerdBack waits (IsServing waits for the connection to be ready)
// until containerd answers again or ctx ends; if not back, it logs what
// may be left of container id.
func (r *Runtime) containerdBack(ctx context.Context, id, left string) bool {
	if ok, err := r.client.IsServing(ctx); err != nil || !ok {
		log.WithError(err).WithField("container", id).Warn("containerd not back: " + left)
		return false
	}
	return true
}

// discardTaskWait bounds how long a start interrupted by containerd's going
// away waits for it to come back.
const discardTaskWait = 2 * time.Minute

// discardTask waits until containerd answers again and deletes, killing its
// process, whatever task of container id the shim made meanwhile.
func (r *Runtime) discardTask(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(ctx, discardTaskWait)
	defer cancel()
	if !r.containerdBack(ctx, id, "a task of a start it interrupted may be left") {
		return
	}
	c, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return
	}
	task, err := c.Task(ctx, nil)
	if err != nil {
		return
	}
	if err := r.deleteTask(ctx, id, task, containerd.WithProcessKill); err != nil {
		log.WithError(err).WithField("container", id).Warn("deleting the task of a start containerd's going away interrupted")
	}
}

// StartError is a failure of the container's process to start (bad command,
// missing binary): the kubelet reports it as a terminated StartError.
type StartError struct{ Err error }

func (e *StartError) Error() string { return e.Err.Error() }
func (e *StartError) Unwrap() error { return e.Err }

func startError(err error) error { return &StartError{Err: err} }

// StopContainer sends sig, waits up to grace, then SIGKILLs. It returns once
// the process is gone and its exit is recorded.
func (r *Runtime) StopContainer(ctx context.Context, id string, sig syscall.Signal, grace time.Duration) error {
	c, err := r.client.LoadContainer(ctx, id)
	if errdefs.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	task, err := c.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	waitCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	exited, err := task.Wait(waitCtx)
	if errdefs.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	if grace > 0 && sig != syscall.SIGKILL {
		if err := task.Kill(ctx, sig); err != nil && !errdefs.IsNotFound(err) {
			log.WithError(err).WithField("container", id).Warn("sending stop signal")
		}
		t := time.NewTimer(grace)
		select {
		case <-exited:
			t.Stop()
			r.finalize(ctx, id)
			return nil
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	if err := task.Kill(ctx, syscall.SIGKILL); err != nil && !errdefs.IsNotFound(err) {
		return err
	}
	select {
	case <-exited:
	case <-time.After(time.Minute):
		return fmt.Errorf("container %s did not exit after SIGKILL", id)
	}
	r.finalize(ctx, id)
	return nil
}

// RemoveContainer deletes the container, its task and its snapshot.
func (r *Runtime) RemoveContainer(ctx context.Context, id string) error {
	return r.removeContainer(ctx, id, false)
}

// removeContainer is RemoveContainer; keepLogs leaves the container's log
// files and their /var/log/containers link (the CRI view's removal).
func (r *Runtime) removeContainer(ctx context.Context, id string, keepLogs bool) error {
	waitTaskDelete(ctx, id)
	c, err := r.client.LoadContainer(ctx, id)
	if errdefs.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	labels, _ := c.Labels(ctx)
	var cgroupsPath string
	if spec, err := c.Spec(ctx); err == nil && spec.Linux != nil {
		cgroupsPath = spec.Linux.CgroupsPath
	}
	if task, err := c.Task(ctx, nil); err == nil {
		if err := r.deleteTask(ctx, id, task, containerd.WithProcessKill); err != nil {
			return err
		}
	} else if errdefs.IsNotFound(err) {
		r.shims.removed(id, labels[labelShimGroup])
	}
	if err := r.cgroups.RemoveContainerCgroup(cgroupsPath); err != nil {
		log.WithError(err).WithField("container", id).Warn("removing the cgroup an interrupted task creation left")
	}
	// The symlink first, as the kubelet: a crash after the delete would
	// leave it dangling until the pod is cleaned up.
	if !keepLogs {
		r.unlinkLog(labels, id)
	}
	if err := c.Delete(ctx, containerd.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
		return err
	}
	_ = os.RemoveAll(r.fifoDir(id))
	finalizeMu.Delete(id)
	if p := labels[labelTermLog]; p != "" {
		_ = os.Remove(p)
	}
	if !keepLogs {
		removeLogFiles(labels[labelLogPath])
	}
	return nil
}

// ListContainers returns the containers of one pod, or of all pods when
// podUID is empty.
func (r *Runtime) ListContainers(ctx context.Context, podUID string) ([]ContainerStatus, error) {
	filter := fmt.Sprintf("labels.%q", LabelPodUID)
	if podUID != "" {
		filter = fmt.Sprintf("labels.%q==%s", LabelPodUID, podUID)
	}
	cs, err := r.client.Containers(ctx, filter)
	if err != nil {
		return nil, err
	}
	out := make([]ContainerStatus, 0, len(cs))
	for _, c := range cs {
		st, err := r.status(ctx, c)
		if errdefs.IsNotFound(err) {
			continue
		} else if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

// ContainerStatus returns one container's status.
func (r *Runtime) ContainerStatus(ctx context.Context, id string) (ContainerStatus, error) {
	c, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return ContainerStatus{}, err
	}
	return r.status(ctx, c)
}

func (r *Runtime) status(ctx context.Context, c containerd.Container) (ContainerStatus, error) {
	info, err := c.Info(ctx, containerd.WithoutRefreshedMetadata)
	if err != nil {
		return ContainerStatus{}, err
	}
	st := statusFromInfo(info, r.bootID)
	if st.State == StateExited {
		return st, nil
	}
	task, err := c.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		if !st.StartedAt.IsZero() {
			// Started, but the task vanished without a recorded exit (its shim
			// died with containerd's state): it is gone, as CRI reports it.
			st.State, st.ExitCode, st.Reason, st.FinishedAt = StateExited, 255, "Unknown", time.Now()
		}
		return st, nil
	} else if err != nil {
		return st, err
	}
	ts, err := task.Status(ctx)
	if err != nil {
		if errdefs.IsNotFound(err) {
			// The task was just finalized: its exit is recorded on the
			// container now; read it again rather than report "created".
			fresh, err := r.client.LoadContainer(ctx, c.ID())
			if err != nil {
				return st, err
			}
			return r.status(ctx, fresh)
		}
		return st, err
	}
	switch ts.Status {
	case containerd.Running, containerd.Paused, containerd.Pausing:
		st.State = StateRunning
	case containerd.Stopped:
		st.State = StateExited
		st.ExitCode = int32(ts.ExitStatus)
		st.FinishedAt = ts.ExitTime
	}
	if st.State != StateCreated && st.StartedAt.IsZero() {
		st.StartedAt = info.CreatedAt
	}
	return st, nil
}

// statusFromInfo reads a container's record; boot is the host's boot ID,
// which the recorded crash-loop back-off must have to count.
func statusFromInfo(info containers.Container, boot string) ContainerStatus {
	l := info.Labels
	st := ContainerStatus{
		ID:                 info.ID,
		Name:               l[LabelContainerName],
		PodUID:             l[LabelPodUID],
		State:              StateCreated,
		CreatedAt:          info.CreatedAt,
		ImageName:          l[labelImageName],
		ImageID:            l[labelImageID],
		LogPath:            l[labelLogPath],
		TerminationLogPath: l[labelTermLog],
		Reason:             l[labelReason],
	}
	if v, ok := l[labelUser]; ok {
		st.User = parseUser(v)
	} else {
		st.User, _ = specUser(&info)
	}
	st.Attempt, _ = strconv.Atoi(l[labelAttempt])
	st.BackoffApplied, st.BackoffNext = parseBackoff(l[labelBackoff], boot)
	st.StartedAt, _ = time.Parse(time.RFC3339Nano, l[labelStartedAt])
	if code, ok := l[labelExitCode]; ok {
		c, _ := strconv.Atoi(code)
		st.State, st.ExitCode = StateExited, int32(c)
		st.FinishedAt, _ = time.Parse(time.RFC3339Nano, l[labelFinishedAt])
	}
	return st
}

// finalizeMu serialises the finalization of one container (the exit
// watcher and StopContainer may both do it); different containers are
// finalized in parallel.
var finalizeMu sync.Map // id -> *sync.Mutex

// taskDeletes holds, per container, a channel closed once the deletion of
// its stopped task that finalize started has ended.
var taskDeletes sync.Map // id -> chan struct{}

// finalize records a stopped task's exit on the container, so the record
// outlives the shim, and starts deleting the task. Safe to call repeatedly.
// Deleting the task (runc delete, the shim's exit, the rootfs unmount) is
// what takes long under load, and nothing needs to wait for it once the
// exit is on record: in a burst of stops, waiting made every pod's
// termination seconds late. RemoveContainer waits for it.
func (r *Runtime) finalize(ctx context.Context, id string) {
	m, _ := finalizeMu.LoadOrStore(id, &sync.Mutex{})
	mu := m.(*sync.Mutex)
	mu.Lock()
	defer mu.Unlock()
	if _, deleting := taskDeletes.Load(id); deleting {
		return
	}
	ctx = context.WithoutCancel(ctx)
	c, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return
	}
	task, err := c.Task(ctx, nil)
	if err != nil {
		return
	}
	ts, err := task.Status(ctx)
	if err != nil || ts.Status != containerd.Stopped {
		return
	}
	labels := map[string]string{
		labelExitCode:   strconv.Itoa(int(ts.ExitStatus)),
		labelFinishedAt: ts.ExitTime.UTC().Format(time.RFC3339Nano),
	}
	if r.takeOOM(id) {
		labels[labelReason] = "OOMKilled"
	}
	if _, err := c.SetLabels(ctx, labels); err != nil {
		log.WithError(err).WithField("container", id).Warn("recording container exit")
		return
	}
	done := make(chan struct{})
	taskDeletes.Store(id, done)
	go func() {
		defer close(done)
		defer taskDeletes.Delete(id)
		defer crash.Recover(log.WithField("container", id), nil)
		if err := r.deleteTask(ctx, id, task); err != nil {
			log.WithError(err).WithField("container", id).Warn("deleting exited task")
		}
	}()
}

// deleteTask deletes a task through the gate and, once it is gone, takes
// it out of its shim group.
func (r *Runtime) deleteTask(ctx context.Context, id string, task containerd.Task, opts ...containerd.ProcessDeleteOpts) error {
	// Before the gate: it may wait for creations that need a place in it.
	r.shims.deleting(id)
	err := func() error {
		if err := r.gate.enter(ctx); err != nil {
			return err
		}
		defer r.gate.leave() // even if the client panics
		_, err := task.Delete(ctx, opts...)
		return err
	}()
	if err != nil && !errdefs.IsNotFound(err) {
		r.shims.deleteFailed(id)
		return err
	}
	r.shims.gone(id)
	return nil
}

// joinShimGroup begins the creation of the container's task in its shim
// group (the caller ends it with shims.created), first moving the container
// to an open group if its own was closed meanwhile (its shim exiting) or is
// of an earlier hostlet run: one of its own handler's, as a shim runs the
// containers of one handler only.
func (r *Runtime) joinShimGroup(ctx context.Context, c containerd.Container, group, handler string) error {
	id := c.ID()
	if group == "" || r.shims.join(id, group) {
		return nil
	}
	spec, err := c.Spec(ctx)
	if err != nil {
		return err
	}
	for {
		group = r.shims.pick(handler)
		if r.shims.join(id, group) {
			break
		}
	}
	if spec.Annotations == nil {
		spec.Annotations = map[string]string{}
	}
	spec.Annotations[shimGroupAnnotation] = group
	// Only the spec: the label is read once, by this start.
	if err := r.storeSpec(ctx, id, spec); err != nil {
		r.shims.created(id, false)
		return err
	}
	return nil
}

// waitTaskDelete waits for a task deletion finalize started, if any.
func waitTaskDelete(ctx context.Context, id string) {
	if ch, ok := taskDeletes.Load(id); ok {
		select {
		case <-ch.(chan struct{}):
		case <-ctx.Done():
		}
	}
}

// SetBackoff records a container's crash-loop back-off on it.
func (r *Runtime) SetBackoff(ctx context.Context, id string, applied, next time.Duration) error {
	c, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return err
	}
	_, err = c.SetLabels(ctx, map[string]string{labelBackoff: backoffLabel(applied, next, r.bootID)})
	return err
}

// ImageStopSignal returns the STOPSIGNAL of a container's image, if any.
func (r *Runtime) ImageStopSignal(ctx context.Context, id string) string {
	c, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return ""
	}
	img, err := c.Image(ctx)
	if err != nil {
		return ""
	}
	d, err := r.describe(ctx, img)
	if err != nil {
		return ""
	}
	return d.Config.StopSignal
}

// fifosDir holds the FIFOs of the tasks this hostlet made, a directory per
// container (fifoDir).
func (r *Runtime) fifosDir() string         { return filepath.Join(r.rootDir, "fifo") }
func (r *Runtime) fifoDir(id string) string { return filepath.Join(r.fifosDir(), id) }

// followLogs copies a task's output into its log and attached sessions
// until both streams end, then releases the FIFOs.
func (r *Runtime) followLogs(id string, io cio.IO, sink *logSink, stdio *stdio) {
	r.sinksMu.Lock()
	r.sinks[id] = sink
	r.sinksMu.Unlock()
	stdio.register()
	release := func() {
		stdio.close()
		sink.close()
		_ = io.Close()
		r.sinksMu.Lock()
		delete(r.sinks, id)
		r.sinksMu.Unlock()
	}
	if f, ok := io.(*fifoIO); ok {
		f.whenEnded(release)
		return
	}
	go func() {
		defer crash.Recover(log.WithField("container", id), nil)
		io.Wait()
		release()
	}()
}

// following says whether this hostlet copies the container's output: a
// container it started is followed before it runs (newTask), so one listed
// as running and not followed outlived the last hostlet.
func (r *Runtime) following(id string) bool {
	r.sinksMu.Lock()
	defer r.sinksMu.Unlock()
	_, ok := r.sinks[id]
	return ok
}

// LogsDone is closed once everything the container wrote is in its log
// file (immediately when hostlet does not follow its output).
func (r *Runtime) LogsDone(id string) <-chan struct{} {
	r.sinksMu.Lock()
	defer r.sinksMu.Unlock()
	if s, ok := r.sinks[id]; ok {
		return s.done
	}
	done := make(chan struct{})
	close(done)
	return done
}

// ResumeLogs attaches again to the output of containers that kept running
// while hostlet was down, appending to the same log files. Containers this
// hostlet started meanwhile (pods admitted at once) are followed already.
func (r *Runtime) ResumeLogs(ctx context.Context) {
	defer r.resumeOnce.Do(func() { close(r.resumed) })
	cs, err := r.ListContainers(ctx, "")
	if err != nil {
		log.WithError(err).Warn("listing containers to resume their logs")
		return
	}
	fifos := realDir(r.fifosDir())
	for _, st := range cs {
		if st.State != StateRunning || st.LogPath == "" || r.following(st.ID) {
			continue
		}
		c, err := r.client.LoadContainer(ctx, st.ID)
		if err != nil {
			continue
		}
		labels, err := c.Labels(ctx)
		if err != nil {
			continue
		}
		// The log is opened, and the stdio made, only once the task's
		// FIFOs are known to be this hostlet's: another hostlet's
		// container, its log included, is left alone.
		var (
			sink *logSink
			sio  *stdio
		)
		task, err := c.Task(ctx, fifoAttach(fifos, func() (*stdio, error) {
			var err error
			if sink, err = newLogSink(st.LogPath); err != nil {
				return nil, err
			}
			// The shim holds the stdin FIFO open, so the container's stdin
			// outlived hostlet and attach sessions can write into it again.
			sio = newStdio(st.ID, labels, sink)
			return sio, nil
		}))
		if err != nil {
			if sio != nil {
				sio.close()
				sink.close()
			}
			if !errors.Is(err, errForeignFIFOs) {
				log.WithError(err).WithField("container", st.ID).Warn("attaching to a running container's output")
			}
			continue
		}
		r.followLogs(st.ID, task.IO(), sink, sio)
	}
}
