package podspec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"github.com/hostlet/hostlet/expansion"
	"github.com/hostlet/hostlet/lifecycle"
	"github.com/hostlet/hostlet/probes"
	"github.com/hostlet/hostlet/provider/credentialprovider"
	"github.com/hostlet/hostlet/provider/pullrecords"
	"github.com/hostlet/hostlet/runtime"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Limits of termination messages, as the kubelet's.
const (
	maxTerminationMessage     = 4096
	maxTerminationLogBytes    = 2048
	maxTerminationLogLines    = 80
	defaultTerminationLogPath = "/dev/termination-log"
)

var _ lifecycle.Runtime = (*Runtime)(nil)

func (r *Runtime) PrepareSandbox(ctx context.Context, pod *v1.Pod) ([]string, error) {
	sb, err := r.rt.Sandbox(string(pod.UID))
	if errors.Is(err, runtime.ErrSandboxNotReady) {
		// One there but not whole (hostlet killed in its making, a
		// namespace lost): made again below, as the kubelet's
		// computePodActions does with a sandbox that is not ready, with its
		// event. The worker has stopped what still ran in it.
		lifecycle.PodLogger(pod).WithError(err).Warn("pod sandbox not ready; it will be made again")
		r.event(pod, "", v1.EventTypeNormal, "SandboxChanged", "Pod sandbox changed, it will be killed and re-created.")
	}
	if err != nil {
		// The handler first: a pod whose RuntimeClass cannot run here gets
		// nothing made, and never the default runtime instead.
		handler, err := r.runtimeHandler(ctx, pod)
		if err != nil {
			return nil, err
		}
		if err := r.prepareClaims(ctx, pod); err != nil {
			return nil, err
		}
		// While the network is not ready only host-network pods start, as
		// with the kubelet, whose pod worker retries such a pod soon.
		if netErr := r.cfg.Node.NetworkErrors(); netErr != nil && !pod.Spec.HostNetwork {
			return nil, &lifecycle.Failure{Reason: lifecycle.NetworkNotReady, Message: "network is not ready: " + netErr.Error()}
		}
		// Volumes first, as the kubelet mounts them before it creates the
		// sandbox: a pod whose volumes fail holds no network and no IP.
		// (Volumes never read the pod IP: the downward API offers it to
		// environment variables only.)
		if err := r.setupVolumes(ctx, pod, nil); err != nil {
			return nil, err
		}
		if err := r.checkHostname(pod); err != nil {
			return nil, err
		}
		hostname, fqdn := r.podHostname(pod)
		if hostname, err = kernelHostname(hostname, fqdn, pod.Spec.SetHostnameAsFQDN); err != nil {
			return nil, err
		}
		cfg := runtime.SandboxConfig{
			UID: string(pod.UID), Namespace: pod.Namespace, Name: pod.Name,
			HostNetwork: pod.Spec.HostNetwork, HostIPC: pod.Spec.HostIPC, HostPID: pod.Spec.HostPID,
			ShareProcessNamespace: pod.Spec.ShareProcessNamespace != nil && *pod.Spec.ShareProcessNamespace,
			Hostname:              hostname, FQDN: fqdn,
			ResolvConf:   r.resolvConf(pod),
			PortMappings: portMappings(pod),
			Handler:      handler.Name,
		}
		for _, a := range pod.Spec.HostAliases {
			cfg.HostAliases = append(cfg.HostAliases, runtime.HostAlias{IP: a.IP, Hostnames: a.Hostnames})
		}
		if cfg.UserNS, err = r.podUserNS(ctx, pod, handler); err != nil {
			return nil, err
		}
		if cfg.CgroupParent, err = r.ensurePodCgroup(pod); err != nil {
			return nil, fmt.Errorf("failed to ensure that the pod: %s cgroups exist and are correctly applied: %w", pod.UID, err)
		}
		if sb, err = r.rt.EnsureSandbox(ctx, cfg); err != nil {
			return nil, err
		}
		return sb.IPs, nil
	}
	r.reprepareClaims(ctx, pod)
	// A sandbox there already: the pod was adopted after a restart of
	// hostlet, whose containers' and image volumes' lazily pulled images
	// need their credentials held again.
	r.holdLazyCredentials(ctx, pod)
	if err := r.setupVolumes(ctx, pod, sb.IPs); err != nil {
		return nil, err
	}
	return sb.IPs, nil
}

func (r *Runtime) SandboxReady(pod *v1.Pod) bool {
	_, err := r.rt.Sandbox(string(pod.UID))
	return err == nil
}

func (r *Runtime) TeardownSandbox(ctx context.Context, pod *v1.Pod) error {
	return r.rt.RemoveSandbox(ctx, string(pod.UID))
}

func (r *Runtime) StartContainer(ctx context.Context, pod *v1.Pod, c *v1.Container, attempt int) (lifecycle.ContainerInfo, error) {
	// The images of its image volumes first, as the kubelet pulls them
	// before it starts the pod's containers. A failure's "Error: ..." event
	// is the worker's, once per try (lifecycle's ensureRunning).
	volImages, err := r.pullImageVolumes(ctx, pod, c)
	if err != nil {
		return lifecycle.ContainerInfo{}, err
	}
	img, err := r.ensureImage(ctx, pod, c)
	if err != nil {
		return lifecycle.ContainerInfo{}, err
	}
	sb, err := r.rt.Sandbox(string(pod.UID))
	if err != nil {
		return lifecycle.ContainerInfo{}, &lifecycle.Failure{Reason: "CreateContainerError", Message: err.Error()}
	}
	env, err := r.containerEnv(ctx, pod, c, sb.IPs, r.objects(pod.Namespace))
	if err != nil {
		return lifecycle.ContainerInfo{}, err
	}
	// Where CRI mounts image volumes: at container creation, after the
	// container's image and configuration.
	imageVols, err := r.mountImageVolumes(ctx, pod, volImages, sb.IDMap)
	if err != nil {
		return lifecycle.ContainerInfo{}, err
	}
	mounts, err := r.containerMounts(ctx, pod, c, env, imageVols)
	if err != nil {
		if f := (*lifecycle.Failure)(nil); errors.As(err, &f) {
			return lifecycle.ContainerInfo{}, f
		}
		return lifecycle.ContainerInfo{}, configError(err)
	}
	devEnv, devMounts, devs, err := r.containerDevices(ctx, pod, c)
	if err != nil {
		return lifecycle.ContainerInfo{}, configError(err)
	}
	env = append(devEnv, env...)
	mounts = append(devMounts, mounts...)
	sec, err := r.containerSecurity(pod, c, img.Config.User)
	if err != nil {
		return lifecycle.ContainerInfo{}, configError(err)
	}
	expand := func(s []string) []string {
		lookup := expansion.EnvLookup(env)
		out := make([]string, len(s))
		for i, v := range s {
			out[i] = expansion.Expand(v, lookup)
		}
		return out
	}
	pidNS, err := r.targetPIDNamespace(ctx, pod, c.Name)
	if err != nil {
		// The worker records the Failed event.
		return lifecycle.ContainerInfo{}, err
	}
	termPath := c.TerminationMessagePath
	if termPath == "" {
		termPath = defaultTerminationLogPath
	}
	hostname, _ := r.podHostname(pod)
	id, err := r.rt.CreateContainer(ctx, runtime.ContainerConfig{
		Sandbox: sb, Name: c.Name, Attempt: attempt, Image: img, ImageName: c.Image,
		Command: expand(c.Command), Args: expand(c.Args), Env: env, WorkingDir: c.WorkingDir,
		Mounts: mounts, TerminationMessagePath: termPath, Hostname: hostname,
		Security: sec, Resources: r.containerResources(pod, c),
		Stdin: c.Stdin, StdinOnce: c.StdinOnce, TTY: c.TTY, PIDNamespace: pidNS,
		Devices: devs,
	})
	if err != nil {
		return lifecycle.ContainerInfo{}, &lifecycle.Failure{Reason: "CreateContainerError", Message: err.Error()}
	}
	r.event(pod, c.Name, v1.EventTypeNormal, "Created", "Container created")
	if err := r.rt.StartContainer(ctx, id); err != nil {
		var se *runtime.StartError
		if !errors.As(err, &se) {
			// No instance to show: the worker retries on the crash-loop
			// back-off, and each retry makes a container of its own, so
			// this one goes (or every retry would leave one behind).
			if rerr := r.rt.RemoveContainer(context.WithoutCancel(ctx), id); rerr != nil {
				lifecycle.PodLogger(pod).WithError(rerr).WithField("container", c.Name).Warn("removing a container that did not start")
			}
			return lifecycle.ContainerInfo{}, &lifecycle.Failure{Reason: "RunContainerError", Message: err.Error()}
		}
		// The process never ran: the kubelet reports StartError, exit 128.
		now := time.Now()
		info := lifecycle.ContainerInfo{ID: id, Name: c.Name, Attempt: attempt, Exited: true,
			StartedAt: time.Unix(0, 0), FinishedAt: now, ExitCode: 128, Reason: "StartError",
			Message: err.Error(), Image: c.Image, ImageID: img.ID}
		return info, &lifecycle.Failure{Reason: "StartError", Message: err.Error(), Info: &info}
	}
	r.event(pod, c.Name, v1.EventTypeNormal, "Started", "Container started")
	info, err := r.Container(ctx, id)
	if err != nil {
		// The process runs: failing to read its status now (containerd
		// going away right after the start) must not read as a failed
		// start, which would make a second copy beside it. What is known
		// stands in until the exit event or the next sync reads it.
		lifecycle.PodLogger(pod).WithError(err).WithField("container", c.Name).Warn("reading a started container's status")
		return lifecycle.ContainerInfo{ID: id, Name: c.Name, Attempt: attempt, Running: true,
			StartedAt: time.Now(), Image: c.Image, ImageID: img.ID}, nil
	}
	return info, nil
}

// ensureImage applies the container's pull policy, with the kubelet's
// events.
func (r *Runtime) ensureImage(ctx context.Context, pod *v1.Pod, c *v1.Container) (*runtime.Image, error) {
	return r.ensurePulled(ctx, pod, c.Name, c.Image, c.ImagePullPolicy)
}

// ensurePulled makes image present as policy says, with the kubelet's
// events, about the container named (or the pod, for an image volume).
func (r *Runtime) ensurePulled(ctx context.Context, pod *v1.Pod, container, image string, policy v1.PullPolicy) (*runtime.Image, error) {
	if _, err := runtime.NormalizeImage(image); err != nil {
		msg := fmt.Sprintf("Failed to apply default image tag %q: couldn't parse image name %q: invalid reference format", image, image)
		r.event(pod, container, v1.EventTypeWarning, "InspectFailed", msg)
		return nil, &lifecycle.Failure{Reason: "InvalidImageName", Message: msg}
	}
	// The pod's credentials are looked up once, and only when needed.
	creds := sync.OnceValue(func() []credentialprovider.AuthConfig { return r.pullCredentials(ctx, pod, image) })
	records := r.cfg.PullRecords
	if policy != v1.PullAlways {
		img, err := r.rt.GetImage(ctx, image)
		if err != nil && !errdefs.IsNotFound(err) {
			return nil, &lifecycle.Failure{Reason: "ErrImagePull", Message: err.Error()}
		}
		if err == nil && records == nil {
			r.rt.HoldLazyCredentials(ctx, image, firstCredential(creds))
			r.event(pod, container, v1.EventTypeNormal, "Pulled", fmt.Sprintf("Container image %q already present on machine", image))
			return img, nil
		}
		if err == nil && !records.MustAttemptPull(image, ImageRef(img), func() ([]pullrecords.Secret, *pullrecords.ServiceAccount) {
			return podCredentials(creds())
		}) {
			r.rt.HoldLazyCredentials(ctx, image, firstCredential(creds))
			r.event(pod, container, v1.EventTypeNormal, "Pulled", fmt.Sprintf("Container image %q already present on machine and can be accessed by the pod", image))
			return img, nil
		}
		if policy == v1.PullNever {
			// Absent, or present but not the pod's to use: the kubelet
			// says the same of both, so as not to reveal a private image.
			msg := fmt.Sprintf("Container image %q is not present with pull policy of Never", image)
			r.event(pod, container, v1.EventTypeWarning, "ErrImageNeverPull", msg)
			return nil, &lifecycle.Failure{Reason: "ErrImageNeverPull", Message: msg}
		}
	}
	if records != nil {
		if err := records.RecordIntent(image); err != nil {
			return nil, &lifecycle.Failure{Reason: "ErrImagePull", Message: fmt.Sprintf("Failed to record image pull intent for container image %q: %v", image, err)}
		}
	}
	r.event(pod, container, v1.EventTypeNormal, "Pulling", fmt.Sprintf("Pulling image %q", image))
	img, took, waited, used, err := r.pull(ctx, pod, image, creds())
	if err != nil {
		if records != nil {
			records.RecordFailed(image)
		}
		r.event(pod, container, v1.EventTypeWarning, "Failed", fmt.Sprintf("Failed to pull image %q: %v", image, err))
		return nil, &lifecycle.Failure{Reason: "ErrImagePull", Message: err.Error()}
	}
	if records != nil {
		records.RecordPulled(image, ImageRef(img), pulledWith(used))
	}
	r.event(pod, container, v1.EventTypeNormal, "Pulled", fmt.Sprintf("Successfully pulled image %q in %v (%v including waiting). Image size: %d bytes.", image, took.Round(time.Millisecond), (took+waited).Round(time.Millisecond), img.Size))
	return img, nil
}

// firstCredential is, for an image present (a lazily pulled one's files
// still to fetch), the credential a pull would try first: which of the
// pod's would work is known only by pulling.
func firstCredential(creds func() []credentialprovider.AuthConfig) runtime.Credentials {
	return func(string) (string, string, error) {
		if c := creds(); len(c) > 0 {
			return c[0].Username, c[0].Password, nil
		}
		return "", "", nil
	}
}

// holdLazyCredentials holds the credentials of the pod's images, its
// containers' and its image volumes' (a lazily pulled volume's files are
// fetched as they are read), as HoldLazyCredentials says; an image not
// present or not lazily pulled costs nothing more than a lookup.
func (r *Runtime) holdLazyCredentials(ctx context.Context, pod *v1.Pod) {
	var refs []string
	for _, c := range append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		refs = append(refs, c.Image)
	}
	for _, v := range pod.Spec.Volumes {
		if v.Image != nil && v.Image.Reference != "" {
			refs = append(refs, v.Image.Reference)
		}
	}
	for _, ref := range refs {
		r.rt.HoldLazyCredentials(ctx, ref, firstCredential(sync.OnceValue(func() []credentialprovider.AuthConfig {
			return r.pullCredentials(ctx, pod, ref)
		})))
	}
}

// ImageRef keys an image's pull record: its repository's digest
// ("registry/repo@sha256:..."), the imageID hostlet reports. The kubelet
// keys by the image's ID (its config digest), so that a preloaded image
// whose content some pod pulled under another name stops being preloaded
// and must be pulled under its own name (impossible for an image that was
// only ever imported); keyed by repository, a preloaded name stays
// preloaded, and a private repository's content is verified under its
// name all the same.
func ImageRef(img *runtime.Image) string { return img.ID }

func (r *Runtime) StopContainer(ctx context.Context, pod *v1.Pod, c *v1.Container, id string, grace time.Duration) error {
	sig := syscall.SIGTERM
	if c != nil && c.Lifecycle != nil && c.Lifecycle.StopSignal != nil {
		if s, ok := signalByName(string(*c.Lifecycle.StopSignal)); ok {
			sig = s
		}
	} else if s, ok := signalByName(r.rt.ImageStopSignal(ctx, id)); ok {
		sig = s
	}
	return r.rt.StopContainer(ctx, id, sig, grace)
}

// Exec runs a probe or hook command, collecting its combined output.
func (r *Runtime) Exec(ctx context.Context, id string, cmd []string, timeout time.Duration) ([]byte, int, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	var out syncBuffer
	code, err := r.rt.Exec(ctx, id, cmd, runtime.ExecIO{Stdout: &out, Stderr: &out})
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return out.Bytes(), -1, probes.ErrExecTimeout
	}
	return out.Bytes(), code, err
}

// syncBuffer collects stdout and stderr, written concurrently, up to 10 KiB.
type syncBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := 10*1024 - len(b.buf); room > 0 {
		if len(p) > room {
			b.buf = append(b.buf, p[:room]...)
		} else {
			b.buf = append(b.buf, p...)
		}
	}
	return len(p), nil
}

func (b *syncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]byte(nil), b.buf...)
}

func (r *Runtime) RecordBackoff(ctx context.Context, id string, applied, next time.Duration) error {
	return r.rt.SetBackoff(ctx, id, applied, next)
}

func (r *Runtime) RemoveContainer(ctx context.Context, id string) error {
	return r.rt.RemoveContainer(ctx, id)
}

func (r *Runtime) Containers(ctx context.Context, pod *v1.Pod) ([]lifecycle.ContainerInfo, error) {
	sts, err := r.rt.ListContainers(ctx, string(pod.UID))
	if err != nil {
		return nil, err
	}
	out := make([]lifecycle.ContainerInfo, 0, len(sts))
	for _, st := range sts {
		out = append(out, r.ContainerInfo(pod, st))
	}
	return out, nil
}

func (r *Runtime) Container(ctx context.Context, id string) (lifecycle.ContainerInfo, error) {
	st, err := r.rt.ContainerStatus(ctx, id)
	if err != nil {
		return lifecycle.ContainerInfo{}, err
	}
	return r.ContainerInfo(r.cfg.Pod(types.UID(st.PodUID)), st), nil
}

// ContainerInfo converts a runtime status, reading the termination message
// of an exited container as the kubelet does. pod may be nil.
func (r *Runtime) ContainerInfo(pod *v1.Pod, st runtime.ContainerStatus) lifecycle.ContainerInfo {
	info := lifecycle.ContainerInfo{
		ID: st.ID, Name: st.Name, Attempt: st.Attempt,
		Running: st.State == runtime.StateRunning, Exited: st.State == runtime.StateExited,
		StartedAt: st.StartedAt, FinishedAt: st.FinishedAt, ExitCode: st.ExitCode, Reason: st.Reason,
		Image: st.ImageName, ImageID: st.ImageID,
		BackoffApplied: st.BackoffApplied, BackoffNext: st.BackoffNext,
		User: containerUser(st.User),
	}
	if !info.Exited {
		return info
	}
	if st.TerminationLogPath != "" {
		if b, err := readLimited(st.TerminationLogPath, maxTerminationMessage); err == nil {
			info.Message = string(b)
		}
	}
	var c *v1.Container
	if pod != nil {
		c = findContainer(pod, st.Name)
	}
	if info.Message == "" && info.ExitCode != 0 && c != nil && c.TerminationMessagePolicy == v1.TerminationMessageFallbackToLogsOnError {
		// The exit can be reported before the last output reached the log.
		select {
		case <-r.rt.LogsDone(st.ID):
		case <-time.After(2 * time.Second):
		}
		info.Message = logTail(st.LogPath)
	}
	return info
}

// containerUser is the kubelet's status.user: the runtime's uid, gid and
// supplementary groups of the process.
func containerUser(u *runtime.User) *v1.ContainerUser {
	if u == nil {
		return nil
	}
	groups := make([]int64, len(u.SupplementalGroups))
	for i, g := range u.SupplementalGroups {
		groups[i] = int64(g)
	}
	if len(groups) == 0 {
		groups = nil
	}
	return &v1.ContainerUser{Linux: &v1.LinuxContainerUser{UID: int64(u.UID), GID: int64(u.GID), SupplementalGroups: groups}}
}

func readLimited(path string, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, n))
}

// logTail is the last 80 lines, at most 2 KiB, of a container's log, read
// from its end.
func logTail(path string) string {
	s, err := runtime.LogTail(path, maxTerminationLogLines, maxTerminationLogBytes)
	if err != nil {
		return ""
	}
	return s
}

func signalByName(name string) (unix.Signal, bool) {
	if name == "" {
		return 0, false
	}
	if n, err := strconv.Atoi(name); err == nil {
		return unix.Signal(n), true
	}
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	s := unix.SignalNum(name)
	return s, s != 0
}
