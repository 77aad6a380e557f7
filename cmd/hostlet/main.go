// Command hostlet joins this host to a Kubernetes cluster as a node and runs
// the node's pods with containerd.
package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/hostlet/hostlet/provider/volumemanager"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/hostlet/hostlet/provider"
	"github.com/hostlet/hostlet/provider/diskusage"
	"github.com/hostlet/hostlet/provider/health"
	"github.com/hostlet/hostlet/provider/node"
	"github.com/hostlet/hostlet/provider/podspec"
	"github.com/hostlet/hostlet/provider/podsync"
	"github.com/hostlet/hostlet/provider/testpanic"
	"github.com/hostlet/hostlet/runtime"
	log "github.com/sirupsen/logrus"
	vklog "github.com/virtual-kubelet/virtual-kubelet/log"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "pause" {
		runtime.RunPause() // PID 1 of a pod sharing its process namespace
		return
	}
	if len(os.Args) == 2 && (os.Args[1] == "version" || os.Args[1] == "--version") {
		printVersion(os.Stdout)
		return
	}
	if len(os.Args) > 1 && (os.Args[1] == "join" || os.Args[1] == "leave") {
		runSubcommand(os.Args[1], os.Args[2:])
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "stargz-snapshotter" {
		runStargzSnapshotter(os.Args[2:])
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "approve-serving" {
		runApproveServing(os.Args[2:])
		return
	}
	var o options
	if err := o.parse(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	setLogFormat(o.loggingFormat)
	if o.verbosity >= 3 {
		log.SetLevel(log.DebugLevel)
	}
	for _, w := range o.warnings {
		log.Warn(w)
	}
	if o.testPanicHooks {
		testpanic.Enable()
	}
	vklog.L = vkLogger{log.WithField("component", "virtual-kubelet")}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, &o); err != nil && !errors.Is(err, context.Canceled) {
		log.WithError(err).Fatal("hostlet failed")
	}
}

// run builds hostlet's parts, each from what it needs and in an order
// that needs no late binding, and starts them (in the order the comments
// give where it matters) until ctx ends.
func run(ctx context.Context, o *options) error {
	s, err := o.settings()
	if err != nil {
		return err
	}
	// Before the clients: the API client's requests are traced too.
	stopTracing, err := o.startTracing(ctx, s.name)
	if err != nil {
		return err
	}
	defer stopTracing()
	if err := prepareRootDir(o.rootDir); err != nil {
		return err
	}
	// Before any pod runs, as the kubelet: its OOM score and file limit.
	o.applyProcess()
	c, err := newClients(ctx, o)
	if err != nil {
		return err
	}
	live := newLiveness()
	peers, startPeers, err := newMirror(o, c.api, c.tls, s.name)
	if err != nil {
		return err
	}
	rt, err := newRuntime(o, s.nodeIP, live.pleg.Set, peers)
	if err != nil {
		return err
	}
	defer rt.Close()
	// podCIDR until the Node has its own, as the kubelet's.
	if cidrs := startPodCIDRs(o.podCIDR); cidrs != nil {
		rt.Network().SetPodCIDRs(cidrs)
	}
	// Before any pod is synced: what a kill of the previous hostlet left
	// half made, nothing of this one's can be yet. containerd down: left
	// for the pods' deletions and the sweep.
	leftoversCtx, cancelLeftovers := context.WithTimeout(ctx, 10*time.Second)
	if err := rt.RemoveCrashLeftovers(leftoversCtx); err != nil {
		log.WithError(err).Warn("removing what a previous hostlet left half made")
	}
	cancelLeftovers()
	go live.runtime.Probe(ctx, clock.RealClock{}, health.RuntimePeriod, health.RuntimePeriod, rt.Healthy)
	// The runtime handlers' first read checks user namespace support by
	// starting a process in one (35 ms): begun now, beside the start, for
	// the node's first status round. run returns only once it is done, so
	// a failed start leaves no check half done (its process, its mounts).
	handlersRead := make(chan struct{})
	go func() {
		defer close(handlersRead)
		_, _ = rt.RuntimeHandlers(ctx)
	}()
	defer func() { <-handlersRead }()
	// /configz says the driver in use, as the kubelet's says the one the
	// CRI reported.
	o.kubeletConfig.CgroupDriver = rt.Cgroups().Driver()
	inf := newInformers(c.api, s.name)
	events, stopEvents := newEventRecorder(c.events, s.name)
	defer stopEvents()

	// The node's two sources of pods: the API's (podsync) and its own
	// static pods, both writing statuses through podsync.
	pods := podsync.New(podsync.Config{Client: c.api, Informer: inf.pods.Informer(), InHand: live.syncLoop.Begin})
	static := newStaticPods(s.static, c.api, inf.pods.Informer(), inf.node.Informer(), pods.Statuses())
	active := nodePods{inf.pods, static}.active
	dm, err := newDevices(o.rootDir, active)
	if err != nil {
		return err
	}
	// The CSI plugin's volumes in use go into the node's status, which it
	// asks to be updated when they change.
	statusRequests := node.NewStatusRequests()
	csiVolumes := newCSI(o.rootDir, s.name, o.controllerAttachDetach, c.api, statusRequests.Request, events, inf.node.Informer())
	nd, err := newNode(ctx, s.node, events, inf, c.heartbeat, dm, rt, csiVolumes, statusRequests)
	if err != nil {
		return err
	}
	systemReserved, kubeReserved, err := o.reservations()
	if err != nil {
		return err
	}
	ncm, err := o.newNodeContainers(s.name, systemReserved, kubeReserved, events, rt.Cgroups())
	if err != nil {
		return fmt.Errorf("failed to start ContainerManager: %w", err)
	}
	if err := enforceNodeAllocatable(ncm, nd.Capacity()); err != nil {
		return fmt.Errorf("failed to start ContainerManager: %w", err)
	}
	go ncm.Run(ctx)
	capacity := nd.Capacity()
	swap, err := o.swap(rt.Cgroups().V2(), capacity.Memory().Value())
	if err != nil {
		return err
	}
	if err := startDevices(ctx, o.rootDir, dm, nd, active); err != nil {
		return err
	}
	claims, err := startPlugins(ctx, o.rootDir, c.api, csiVolumes)
	if err != nil {
		return err
	}

	// The provider runs pods through the pod spec translation, which reads
	// their newest objects in the provider's registry: made first.
	podEvents := provider.NewRecorder(events)
	reg := provider.NewRegistry()
	activeAllocated := func() ([]*v1.Pod, bool) { return allocatedPods(active, reg.ActivePodsAndUIDs) }
	creds, credMetrics, err := credentialProviders(o, c.api)
	if err != nil {
		return fmt.Errorf("failed to register CRI auth plugins: %w", err)
	}
	podCerts := newPodCerts(o, c.api, s.name, podEvents, reg)
	pulls, err := newGatedPullRecords(ctx, o, rt)
	if err != nil {
		return err
	}
	// qosReserved's memory limits on the QoS cgroups, set with their CPU
	// shares.
	qos := o.qosReserve(capacity, systemReserved, kubeReserved, rt.Cgroups())
	spec := newPodspec(ctx, o, s.nodeIP, podspecParts{qos: qos, client: c.api, inf: inf, events: podEvents, node: nd, rt: rt, pods: reg,
		devices: dm, claims: claims, csi: csiVolumes, swap: swap, creds: creds, pulls: pulls, podCerts: podCerts, active: activeAllocated,
		userns: s.userns})
	prov := newProvider(ctx, o, s.nodeIP, c.api, pods, inf, rt, spec, podEvents, nd, reg)
	shutdown := node.NewShutdownManager(o.shutdownConfig(), nd, prov, pods.Statuses(), events)

	go spec.Run(ctx)
	if podCerts != nil {
		go podCerts.Run(ctx)
	}
	go prov.Run(ctx)
	// Static pods are fed through the same provider path as the API's;
	// they start now, whether or not the API server answers.
	go static.Run(ctx, prov)
	go rt.RotateLogs(ctx, s.rotation)
	go rt.Cgroups().RefreshQOS(ctx, runtime.QOSRefreshInterval, func() (int64, bool) {
		pods, ok := activeAllocated()
		if ok && qos != nil {
			// With the CPU shares, as the kubelet's UpdateCgroups.
			if err := qos.Update(pods); err != nil {
				log.WithError(err).Warn("updating the QoS cgroups' memory limits")
			}
		}
		return podspec.BurstableMilliCPU(pods), ok
	})
	imageGC, containerGC := newGarbageCollectors(ctx, o, s.imagePolicy, rt, events, nd.Ref(), pulls)
	go imageGC.Run(ctx, o.imageGCPeriod)
	go containerGC.Run(ctx, o.containerGC)
	usage := diskusage.New(rt, o.volumeStatsPeriod, clock.RealClock{})
	go usage.Run(ctx)
	evictions := newEvictions(s.eviction, nd, prov, rt, volumemanager.NewDirs(o.rootDir), usage, imageGC, containerGC, events)
	// The node's pressure conditions are the eviction manager's, from its
	// own observations each round.
	nd.SetPressure(evictions)
	go evictions.Run(ctx, o.evictionInterval)
	go nd.Run(ctx, o.statusUpdateFreq)
	o.startIPTablesChains(ctx)
	// A pulled or removed image shows in status.images at once.
	go rt.WatchImages(ctx, nd.UpdateStatus)
	go func() {
		if err := rt.Network().Watch(ctx, nd.UpdateStatus); err != nil {
			log.WithError(err).Error("CNI config dir no longer watched: changes show at the next status check only")
		}
	}()
	// A restarted stargz snapshotter gets the credentials of the images
	// in use again (--image-snapshotter).
	go func() {
		if err := rt.WatchSnapshotter(ctx); err != nil {
			log.WithError(err).Error("stargz snapshotter's credentials socket not watched")
		}
	}()
	go shutdown.Run(ctx)

	// The first sweep once podsync was handed every pod (it starts once
	// the node is registered): a pod removed from the API before then
	// reaches no RemovePod, and the sweep cleans it up at once.
	// The static pods too: until they are handed over, their containers
	// would look like leftovers.
	go prov.SweepOrphans(ctx, inf.pods.Lister(), func() bool { return pods.HasSynced() && static.HasSynced() })
	inf.start(ctx)
	startPeers(ctx)
	startCRI(ctx, o.criSocket, criCFSQuota(o), prov, rt)

	cert, err := o.servingCert(ctx, s.name, c.api, inf.node.Lister())
	if err != nil {
		return err
	}
	if err := serve(ctx, o, s.name, cert, serverParts{client: c.api, prov: prov, volumes: spec.Volumes(), inf: inf, rt: rt, events: podEvents, node: nd,
		usage: usage, csi: csiVolumes, mirror: peers, metrics: append(append(append(prov.Metrics(), imageGC.Metrics()...), credMetrics...), mirrorMetrics(peers)...), checks: live.checks, tls: s.tls, auth: s.auth,
		systemContainers: ncm.SystemContainers()}); err != nil {
		return err
	}
	if o.healthzPort > 0 {
		live.checks.Serve(ctx, net.JoinHostPort(o.healthzAddress, strconv.Itoa(int(o.healthzPort))))
	}

	registered, err := register(ctx, o, c.api, nd)
	if err != nil || registered == nil {
		return err
	}
	errs := make(chan error, 2)
	go func() { errs <- <-registered }()
	msg := "node registered"
	if !o.registerNode {
		msg = "node found in the API server (registerNode: false)"
	}
	log.WithFields(log.Fields{"node": s.name, "ip": s.nodeIP, "root": filepath.Clean(o.rootDir)}).Info(msg)
	go node.NewLease(ctx, c.heartbeat, s.name, o.kubeletConfig.NodeLeaseDurationSeconds).Run(ctx)
	go func() {
		if inf.servicesSynced(ctx) {
			errs <- pods.Run(ctx, prov, podWorkers)
		}
	}()
	// Registered and serving: systemd may start what comes after the
	// unit (Type=notify), and the watchdog is pinged while healthy.
	sd := health.Systemd{}
	notify(sd, daemon.SdNotifyReady)
	if s.watchdog > 0 {
		log.WithField("interval", s.watchdog).Info("pinging systemd's watchdog while healthy")
		go health.Watchdog(ctx, clock.RealClock{}, sd, s.watchdog, live.checks.Healthy)
	}
	select {
	case <-ctx.Done():
		notify(sd, daemon.SdNotifyStopping)
		return nil
	case err := <-errs:
		return err
	}
}

// register runs the node controller until the Node is registered, and
// returns where that controller's end is told (nil if ctx ended first).
// As the kubelet's registerWithAPIServer, while the API server does not
// answer it tries again, 100 ms doubling to 7 s apart, rather than exit:
// static pods run meanwhile. Each try has a controller of its own, made
// from the node as it is then: what it registers.
func register(ctx context.Context, o *options, client kubernetes.Interface, nd *node.Node) (<-chan error, error) {
	delay := 100 * time.Millisecond
	for {
		nc, err := newNodeController(o, client, nd)
		if err != nil {
			return nil, err
		}
		done := make(chan error, 1)
		go func() { done <- nc.Run(ctx) }()
		select {
		case <-nc.Ready():
			return done, nil
		case err := <-done:
			if ctx.Err() != nil {
				return nil, nil
			}
			log.WithError(err).WithField("retry in", delay).Warn("node not registered with the API server")
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(delay):
		}
		delay = min(2*delay, 7*time.Second)
	}
}

// notify tells the service manager, if there is one, of a state.
func notify(n health.Notifier, state string) {
	if ok, err := n.Notify(state); err != nil {
		log.WithError(err).WithField("state", state).Warn("failed to notify systemd")
	} else if ok {
		log.WithField("state", state).Debug("notified systemd")
	}
}

// podWorkers is how many goroutines hand pod events to the workers, and as
// many write statuses (virtual-kubelet's pod controller ran 8 of each).
const podWorkers = 8
