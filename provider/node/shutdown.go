package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/hostlet/hostlet/lifecycle"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
)

const (
	logindService   = "org.freedesktop.login1"
	logindObject    = dbus.ObjectPath("/org/freedesktop/login1")
	logindInterface = "org.freedesktop.login1.Manager"

	nodeShutdownReason  = "Terminated"
	nodeShutdownMessage = "Pod was terminated in response to imminent node shutdown."
	// dbusReconnectPeriod is how long the kubelet waits before watching
	// logind again after the bus connection ended.
	dbusReconnectPeriod = time.Second

	// DefaultLogindConfDir is where hostlet writes its logind drop-in.
	DefaultLogindConfDir = "/etc/systemd/logind.conf.d"
	// logindDropIn is the drop-in's name, the kubelet's.
	logindDropIn = "99-kubelet.conf"
	// logindMarker is the drop-in's first line: `hostlet leave` removes a
	// drop-in of that name only when it has it.
	logindMarker = "# hostlet logind override"
)

// ShutdownConfig is the kubelet's graceful node shutdown configuration.
type ShutdownConfig struct {
	// GracePeriod is the whole delay asked of logind (--shutdown-grace-period);
	// 0 turns the feature off.
	GracePeriod time.Duration
	// CriticalGracePeriod is the part of it kept for critical pods
	// (--shutdown-grace-period-critical-pods).
	CriticalGracePeriod time.Duration
	// ByPodPriority is shutdownGracePeriodByPodPriority: a period per
	// priority band, which replaces the two above when given (with
	// GracefulNodeShutdownBasedOnPodPriority).
	ByPodPriority []ShutdownPriority
	// LogindConfDir receives the InhibitDelayMaxSec override when logind's
	// limit is shorter than GracePeriod.
	LogindConfDir string
}

// ShutdownPriority is one band of shutdownGracePeriodByPodPriority: the
// pods from Priority up to the next band's get GracePeriod.
type ShutdownPriority struct {
	Priority    int32
	GracePeriod time.Duration
}

// PodStopper is what the shutdown manager needs from the provider.
type PodStopper interface {
	ActivePods() []*v1.Pod
	StopPod(uid types.UID, req lifecycle.StopRequest) lifecycle.Stopping
}

// StatusWaiter tells when a pod's newest status is in the API
// (podsync.Statuses, the one writer of pod statuses).
type StatusWaiter interface {
	WaitWritten(ctx context.Context, uid types.UID) error
}

// ShutdownManager delays the host's shutdown with a logind inhibitor lock
// and uses the delay to stop pods by priority, the lowest band first, each
// band within its own period, as the kubelet's node shutdown manager does.
type ShutdownManager struct {
	cfg      ShutdownConfig
	node     *Node
	pods     PodStopper
	statuses StatusWaiter
	events   record.EventRecorder
	clock    clock.Clock

	mu   sync.Mutex
	conn *dbus.Conn
	lock int // inhibitor lock fd, -1 when none
}

func NewShutdownManager(cfg ShutdownConfig, node *Node, pods PodStopper, statuses StatusWaiter, events record.EventRecorder) *ShutdownManager {
	if cfg.LogindConfDir == "" {
		cfg.LogindConfDir = DefaultLogindConfDir
	}
	return &ShutdownManager{cfg: cfg, node: node, pods: pods, statuses: statuses, events: events, clock: clock.RealClock{}, lock: -1}
}

// shutdownGroup is one priority band of pods and the time it gets.
type shutdownGroup struct {
	priority int32
	grace    time.Duration
	pods     []*v1.Pod
}

// groups are the priority bands, lowest first, as the kubelet's
// newPodManager makes them: shutdownGracePeriodByPodPriority, else the
// two periods migrated (priority 0 gets the total less the critical
// part, system-critical the critical part); nil when off.
func (m *ShutdownManager) groups() []shutdownGroup {
	var out []shutdownGroup
	if len(m.cfg.ByPodPriority) > 0 {
		for _, b := range m.cfg.ByPodPriority {
			out = append(out, shutdownGroup{priority: b.Priority, grace: b.GracePeriod})
		}
	} else {
		total, critical := m.cfg.GracePeriod, m.cfg.CriticalGracePeriod
		if total <= 0 || critical < 0 || critical > total {
			return nil
		}
		out = []shutdownGroup{{priority: 0, grace: total - critical}, {priority: systemCriticalPriority, grace: critical}}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].priority < out[j].priority })
	return out
}

// period is the delay asked of logind: all the bands' periods.
func (m *ShutdownManager) period() time.Duration {
	var sum time.Duration
	for _, g := range m.groups() {
		sum += g.grace
	}
	return sum
}

// groupByPriority puts each pod in the highest band at or below its
// priority (below the lowest band: the lowest; above the highest: the
// highest), as the kubelet's groupByPriority.
func groupByPriority(groups []shutdownGroup, pods []*v1.Pod) []shutdownGroup {
	for _, p := range pods {
		prio := shutdownPriority(p)
		i := sort.Search(len(groups), func(i int) bool { return groups[i].priority >= prio })
		switch {
		case i == len(groups):
			i = len(groups) - 1
		case i > 0 && groups[i].priority > prio:
			i--
		}
		groups[i].pods = append(groups[i].pods, p)
	}
	return groups
}

// Run watches logind for shutdowns until ctx ends. Without logind (no
// system bus, no login1 service) the feature is off, logged once, as with
// the kubelet, which does not retry a failed start either.
func (m *ShutdownManager) Run(ctx context.Context) {
	groups := m.groups()
	if m.period() <= 0 {
		return
	}
	bands := make([]string, len(groups))
	for i, g := range groups {
		bands[i] = fmt.Sprintf("%d:%v", g.priority, g.grace)
	}
	log.WithFields(log.Fields{"shutdownGracePeriodRequested": m.period(), "shutdownGracePeriodByPodPriority": bands}).
		Info("creating node shutdown manager")
	events, err := m.start(ctx)
	if err != nil {
		log.WithError(err).Warn("graceful node shutdown is off: cannot watch logind")
		return
	}
	for {
		if events != nil {
			m.watch(ctx, events)
			m.close()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(dbusReconnectPeriod):
		}
		log.Info("restarting watch for node shutdown events")
		if events, err = m.start(ctx); err != nil {
			log.WithError(err).Error("unable to watch the node for shutdown events")
			events = nil
		}
	}
}

// start connects to the system bus (DBUS_SYSTEM_BUS_ADDRESS), makes sure
// logind lets inhibitors delay long enough, takes the lock and subscribes
// to PrepareForShutdown.
func (m *ShutdownManager) start(ctx context.Context) (<-chan *dbus.Signal, error) {
	conn, err := dbus.ConnectSystemBus(dbus.WithContext(ctx))
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.conn = conn
	m.mu.Unlock()
	current, err := m.inhibitDelay()
	if err != nil {
		m.close()
		return nil, err
	}
	if current < m.period() {
		if err := m.raiseInhibitDelay(ctx); err != nil {
			m.close()
			return nil, err
		}
	}
	if err := m.acquire(); err != nil {
		m.close()
		return nil, err
	}
	if err := conn.AddMatchSignal(dbus.WithMatchInterface(logindInterface), dbus.WithMatchMember("PrepareForShutdown"),
		dbus.WithMatchObjectPath(logindObject)); err != nil {
		m.close()
		return nil, fmt.Errorf("failed to monitor shutdown: %w", err)
	}
	ch := make(chan *dbus.Signal, 4)
	conn.Signal(ch)
	return ch, nil
}

// inhibitDelay is logind's InhibitDelayMaxUSec.
func (m *ShutdownManager) inhibitDelay() (time.Duration, error) {
	v, err := m.conn.Object(logindService, logindObject).GetProperty(logindInterface + ".InhibitDelayMaxUSec")
	if err != nil {
		return 0, fmt.Errorf("failed reading InhibitDelayMaxUSec property from logind: %w", err)
	}
	us, ok := v.Value().(uint64)
	if !ok {
		return 0, fmt.Errorf("InhibitDelayMaxUSec from logind is not a uint64 as expected")
	}
	return time.Duration(us) * time.Microsecond, nil
}

// raiseInhibitDelay writes a logind drop-in with InhibitDelayMaxSec equal to
// the grace period, has systemd send logind SIGHUP, and waits (backing off
// from 100 ms, 5 tries) for logind to report the new value.
func (m *ShutdownManager) raiseInhibitDelay(ctx context.Context) error {
	if err := m.writeLogindOverride(); err != nil {
		return err
	}
	if err := reloadLogind(m.conn); err != nil {
		return err
	}
	wait := 100 * time.Millisecond
	var current time.Duration
	for attempt := 1; attempt <= 5; attempt++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait *= 2
		var err error
		if current, err = m.inhibitDelay(); err != nil {
			return err
		}
		if current >= m.period() {
			return nil
		}
	}
	return fmt.Errorf("timed out waiting for logind InhibitDelayMaxSec to update to %v (ShutdownGracePeriod), current value is %v", m.period(), current)
}

// writeLogindOverride writes the drop-in, marked as hostlet's.
func (m *ShutdownManager) writeLogindOverride() error {
	if err := os.MkdirAll(m.cfg.LogindConfDir, 0o755); err != nil {
		return err
	}
	conf := fmt.Sprintf("%s\n[Login]\nInhibitDelayMaxSec=%.0f\n", logindMarker, m.period().Seconds())
	return os.WriteFile(filepath.Join(m.cfg.LogindConfDir, logindDropIn), []byte(conf), 0o644)
}

// reloadLogind has systemd send logind SIGHUP, on which it reads its
// configuration again.
func reloadLogind(conn *dbus.Conn) error {
	call := conn.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1").
		Call("org.freedesktop.systemd1.Manager.KillUnit", 0, "systemd-logind.service", "all", int32(syscall.SIGHUP))
	if call.Err != nil {
		return fmt.Errorf("unable to reload logind conf: %w", call.Err)
	}
	return nil
}

// ReloadLogind has logind read its configuration again, over the system
// bus (DBUS_SYSTEM_BUS_ADDRESS).
func ReloadLogind(ctx context.Context) error {
	conn, err := dbus.ConnectSystemBus(dbus.WithContext(ctx))
	if err != nil {
		return err
	}
	defer conn.Close()
	return reloadLogind(conn)
}

// RemoveLogindOverride removes the InhibitDelayMaxSec drop-in hostlet
// wrote to dir (`hostlet leave`), only if it is hostlet's: a file of that
// name without hostlet's first line was written by someone else and is
// left. reload has logind read its configuration again once the drop-in
// is gone, as hostlet had it do when writing it. It says whether there
// was one to remove.
func RemoveLogindOverride(dir string, reload func() error) (bool, error) {
	p := filepath.Join(dir, logindDropIn)
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if first, _, _ := strings.Cut(string(b), "\n"); first != logindMarker {
		log.WithField("path", p).Info("logind drop-in not written by hostlet: left in place")
		return false, nil
	}
	if err := os.Remove(p); err != nil {
		return false, err
	}
	return true, reload()
}

// acquire takes a new delay lock, then lets go of any previous one.
func (m *ShutdownManager) acquire() error {
	call := m.conn.Object(logindService, logindObject).Call(logindInterface+".Inhibit", 0,
		"shutdown", "hostlet", "hostlet needs time to handle node shutdown", "delay")
	if call.Err != nil {
		return fmt.Errorf("failed creating systemd inhibitor: %w", call.Err)
	}
	var fd dbus.UnixFD
	if err := call.Store(&fd); err != nil {
		return fmt.Errorf("failed storing inhibit lock file descriptor: %w", err)
	}
	m.release()
	m.mu.Lock()
	m.lock = int(fd)
	m.mu.Unlock()
	log.WithField("fd", int(fd)).Info("took logind delay inhibitor lock for shutdown")
	return nil
}

// release closes the inhibitor lock fd: logind then goes on shutting down.
func (m *ShutdownManager) release() {
	m.mu.Lock()
	fd := m.lock
	m.lock = -1
	m.mu.Unlock()
	if fd >= 0 {
		if err := syscall.Close(fd); err != nil {
			log.WithError(err).Warn("unable to close logind inhibitor lock")
		}
	}
}

func (m *ShutdownManager) close() {
	m.mu.Lock()
	conn := m.conn
	m.conn = nil
	m.mu.Unlock()
	if conn != nil {
		conn.Close()
	}
}

// watch handles PrepareForShutdown signals until the bus connection ends.
func (m *ShutdownManager) watch(ctx context.Context, signals <-chan *dbus.Signal) {
	for {
		var sig *dbus.Signal
		var ok bool
		select {
		case <-ctx.Done():
			m.release()
			return
		case sig, ok = <-signals:
		}
		if !ok {
			log.Error("ended watching the node for shutdown events")
			return
		}
		if sig == nil || sig.Name != logindInterface+".PrepareForShutdown" || len(sig.Body) == 0 {
			continue
		}
		active, isBool := sig.Body[0].(bool)
		if !isBool {
			log.Error("failed obtaining shutdown event, PrepareForShutdown event was not bool type as expected")
			continue
		}
		log.WithField("shuttingDown", active).Info("shutdown manager detected new shutdown event")
		if active {
			m.events.Event(m.node.Ref(), v1.EventTypeNormal, "NodeShutdown", "Shutdown manager detected shutdown event")
		} else {
			m.events.Event(m.node.Ref(), v1.EventTypeNormal, "NodeShutdown", "Shutdown manager detected shutdown cancellation")
		}
		m.node.SetShuttingDown(ctx, active)
		if !active {
			if err := m.acquire(); err != nil {
				log.WithError(err).Error("re-taking the inhibitor lock after a cancelled shutdown")
			}
			continue
		}
		m.stopPods()
		m.release()
		log.Info("shutdown manager completed processing shutdown event, node will shutdown shortly")
	}
}

// killReserve is the part of a group's period kept after its pods' last
// SIGKILL, for the kill to finish, the sandbox to be torn down and each
// pod's final status to reach the API before the next group starts or the
// lock is released: once it is, systemd stops hostlet, and a kill still
// under way then leaves the pod Running in the API and its container for
// systemd to wait on. The kubelet gives a pod the whole period and races
// its own timer; a quarter of the period, at most 10 s, is what a pod
// asking for more than the rest gives up. (On the host test's emulated
// one-CPU VM, with four pods stopping, the SIGKILL took 3.8 s to end the
// container and the CNI DEL of bridge and portmap, iptables included, 2 to
// 10 s more: 5 s was not enough three runs in three.)
func killReserve(period time.Duration) time.Duration {
	return min(period/4, 10*time.Second)
}

// stopPods stops the active pods group by group, each pod within its
// group's period less the reserve (or its own shorter
// terminationGracePeriodSeconds), and waits until every pod of the group
// is stopped and its final status written, or the group's period is over,
// before the next group starts.
func (m *ShutdownManager) stopPods() {
	for _, g := range groupByPriority(m.groups(), m.pods.ActivePods()) {
		// A band without pods is not waited for.
		if len(g.pods) == 0 {
			continue
		}
		m.stopGroup(g, g.pods)
	}
}

// stopGroup stops one group's pods and waits for them within its period.
func (m *ShutdownManager) stopGroup(g shutdownGroup, pods []*v1.Pod) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	timer := m.clock.NewTimer(g.grace)
	defer timer.Stop()
	killBy := g.grace - killReserve(g.grace)
	var wg sync.WaitGroup
	var mu sync.Mutex
	pending := map[string]bool{}
	for _, p := range pods {
		grace := killBy
		if tgp := p.Spec.TerminationGracePeriodSeconds; tgp != nil && time.Duration(*tgp)*time.Second <= grace {
			grace = time.Duration(*tgp) * time.Second
		}
		name := cache.MetaObjectToName(p).String()
		log.WithFields(log.Fields{"pod": name, "gracePeriod": grace}).Info("shutdown manager killing pod")
		stopping := m.pods.StopPod(p.UID, lifecycle.StopRequest{
			Grace: grace, Reason: nodeShutdownReason, Message: nodeShutdownMessage,
			Conditions: []v1.PodCondition{{
				Type: v1.DisruptionTarget, Status: v1.ConditionTrue,
				Reason: v1.PodReasonTerminationByKubelet, Message: nodeShutdownMessage,
			}},
		})
		pending[name] = true
		wg.Add(1)
		go func(uid types.UID) {
			defer wg.Done()
			// The pod's end (containers and sandbox stopped, final status
			// published), as the kubelet's killPodNow waits for; not its
			// release (volumes, cgroup), which a slow host cannot fit in
			// the period and which the next boot finishes.
			select {
			case <-stopping.Ended:
			case <-ctx.Done():
				return
			}
			if err := m.statuses.WaitWritten(ctx, uid); err != nil {
				return
			}
			log.WithField("pod", name).Info("shutdown manager finished killing pod")
			mu.Lock()
			delete(pending, name)
			mu.Unlock()
		}(p.UID)
	}
	all := make(chan struct{})
	go func() { wg.Wait(); close(all) }()
	fields := log.Fields{"gracePeriod": g.grace, "priority": g.priority}
	select {
	case <-all:
		log.WithFields(fields).Info("done waiting for all pods in group to terminate")
	case <-timer.C():
		cancel()
		<-all
		mu.Lock()
		left := make([]string, 0, len(pending))
		for name := range pending {
			left = append(left, name)
		}
		mu.Unlock()
		sort.Strings(left)
		log.WithFields(fields).WithField("pods", left).Warn("shutdown manager pod killing time out: these pods were not stopped with their status written")
	}
}

// shutdownPriority is the priority a pod is banded by: its resolved one,
// as the kubelet's; one without (a static pod's, which no admission
// resolves) counts by its system class's value, so a critical static pod
// still stops last, where the kubelet would count it as 0.
func shutdownPriority(p *v1.Pod) int32 {
	if p.Spec.Priority != nil {
		return *p.Spec.Priority
	}
	switch p.Spec.PriorityClassName {
	case "system-node-critical":
		return systemCriticalPriority + 1000
	case "system-cluster-critical":
		return systemCriticalPriority
	}
	return 0
}
