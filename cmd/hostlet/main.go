// Command hostlet joins this host to a Kubernetes cluster as a node and runs
// the node's pods with containerd.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/hostlet/hostlet/lifecycle"
	"github.com/hostlet/hostlet/probes"
	"github.com/hostlet/hostlet/provider"
	"github.com/hostlet/hostlet/provider/devices"
	"github.com/hostlet/hostlet/provider/diskusage"
	"github.com/hostlet/hostlet/provider/dra"
	"github.com/hostlet/hostlet/provider/eviction"
	"github.com/hostlet/hostlet/provider/gc"
	"github.com/hostlet/hostlet/provider/health"
	"github.com/hostlet/hostlet/provider/node"
	"github.com/hostlet/hostlet/provider/pluginwatcher"
	"github.com/hostlet/hostlet/provider/podcerts"
	"github.com/hostlet/hostlet/provider/podspec"
	"github.com/hostlet/hostlet/provider/podsync"
	"github.com/hostlet/hostlet/provider/pullrecords"
	"github.com/hostlet/hostlet/provider/server"
	"github.com/hostlet/hostlet/provider/staticpod"
	"github.com/hostlet/hostlet/provider/testpanic"
	"github.com/hostlet/hostlet/provider/volumes"
	"github.com/hostlet/hostlet/provider/volumes/csi"
	"github.com/hostlet/hostlet/runtime"
	"github.com/prometheus/client_golang/prometheus"
	log "github.com/sirupsen/logrus"
	vklog "github.com/virtual-kubelet/virtual-kubelet/log"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
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
	if len(os.Args) > 1 && os.Args[1] == "approve-serving" {
		runApproveServing(os.Args[2:])
		return
	}
	var o options
	if err := o.parse(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
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

// run wires hostlet's parts together and runs them until ctx ends.
func run(ctx context.Context, o *options) error {
	name, nodeIP, err := o.identity()
	if err != nil {
		return err
	}
	stopTracing, err := o.startTracing(ctx, name)
	if err != nil {
		return err
	}
	defer stopTracing()
	nodeCfg, err := o.nodeConfig(name, nodeIP)
	if err != nil {
		return err
	}
	evictionCfg, err := o.evictionConfig(nodeCfg)
	if err != nil {
		return err
	}
	rotation, err := o.logRotation()
	if err != nil {
		return err
	}
	imagePolicy, err := o.imageGC()
	if err != nil {
		return err
	}
	// A unit's watchdog hostlet cannot keep stops it at once, as the
	// kubelet.
	watchdog, err := health.WatchdogInterval()
	if err != nil {
		return err
	}
	staticCfg, err := o.staticPodConfig(name)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.rootDir, 0o750); err != nil {
		return err
	}
	if err := volumes.NewLayout(o.rootDir).MakeShared(); err != nil {
		return fmt.Errorf("error configuring root directory: %w", err)
	}
	c, err := newClients(ctx, o)
	if err != nil {
		return err
	}
	// The node's liveness (/healthz, the watchdog), in the kubelet's terms:
	// pod events handed to the workers (its sync loop), containerd's
	// event stream (its PLEG), containerd answering (its runtime check).
	checks := health.New(clock.RealClock{})
	syncLoop := checks.Progress("syncloop", "pod sync", health.SyncLoopThreshold)
	pleg := checks.Stream("pleg", "containerd's event stream", health.PLEGThreshold)
	runtimeUp := checks.Heartbeat("runtime", "containerd", health.RuntimeThreshold)
	rt, err := newRuntime(o, nodeIP, pleg.Set)
	if err != nil {
		return err
	}
	defer rt.Close()
	go runtimeUp.Probe(ctx, clock.RealClock{}, health.RuntimePeriod, health.RuntimePeriod, rt.Healthy)
	// /configz says the driver in use, as the kubelet's says the one the
	// CRI reported.
	o.kubeletConfig.CgroupDriver = rt.Cgroups().Driver()
	inf := newInformers(c.api, name)
	// The node's active pods include its static pods, which the static pod
	// manager (made below, read by the device manager already) knows.
	var staticRef atomic.Pointer[staticpod.Manager]
	inf.staticPods = func() []*v1.Pod {
		if m := staticRef.Load(); m != nil {
			return m.ActivePods()
		}
		return nil
	}
	events, stopEvents := newEventRecorder(c.events, name)
	defer stopEvents()

	dm, err := devices.New(devices.Config{Dir: filepath.Join(o.rootDir, "device-plugins"), ActivePods: inf.activePods})
	if err != nil {
		return err
	}
	nodeCfg.Events, nodeCfg.Lister, nodeCfg.Informer, nodeCfg.Client = events, inf.node.Lister(), inf.node.Informer(), c.heartbeat
	nodeCfg.Devices = dm
	nodeCfg.Images = rt
	// The CSI plugin's volumes in use go into the node's status, which it
	// is told of when they change.
	var statusOf atomic.Pointer[node.Node]
	csiVolumes := csi.New(csi.Config{RootDir: o.rootDir, NodeName: name, Client: c.api,
		Changed: func() {
			if nd := statusOf.Load(); nd != nil {
				nd.UpdateStatus()
			}
		}})
	nodeCfg.Volumes = csiVolumes
	nd, err := node.New(ctx, nodeCfg, rt)
	statusOf.Store(nd)
	if err != nil {
		return err
	}
	if err := setupCgroups(rt.Cgroups(), nd.Capacity(), nodeCfg.Reserved); err != nil {
		return fmt.Errorf("QoS cgroups: %w", err)
	}
	capacity := nd.Capacity()
	swap, err := o.swap(rt.Cgroups().V2(), capacity.Memory().Value())
	if err != nil {
		return err
	}
	if err := startDevices(ctx, o.rootDir, dm, nd, inf); err != nil {
		return err
	}
	layout := volumes.NewLayout(o.rootDir)
	claims := dra.New(dra.Config{Client: c.api, Checkpoint: filepath.Join(o.rootDir, dra.CheckpointName)})
	csiVolumes.Start(ctx)
	// DRA and CSI drivers register through the same directory.
	plugins := pluginwatcher.New(layout.PluginsRegistryDir(), map[string]pluginwatcher.Handler{
		registerapi.DRAPlugin: claims, registerapi.CSIPlugin: csiVolumes})
	if err := plugins.Start(ctx); err != nil {
		return err
	}
	podEvents := provider.NewRecorder(events)
	creds, credMetrics, err := credentialProviders(o, c.api)
	if err != nil {
		return fmt.Errorf("failed to register CRI auth plugins: %w", err)
	}
	// The translation reads a pod's newest object from the provider's
	// registry, whose workers run pods through the translation.
	var prov *provider.Provider
	activeAllocated := func() ([]*v1.Pod, bool) { return allocatedPods(inf.activePods, prov.ActivePods, prov.Pod) }
	// The kubelet's trust bundle manager exists only with its gate on;
	// without, projected clusterTrustBundle sources fail as with it off.
	var trustBundles podspec.TrustBundles
	if o.gates.Enabled("ClusterTrustBundleProjection") {
		trustBundles = podspec.NewLazyTrustBundles(ctx, c.api, 2*o.maxPods)
	}
	// The kubelet's pod certificate manager, likewise behind its gate.
	var podCerts *podcerts.Manager
	var podCertsIface podspec.PodCertificates
	if o.gates.Enabled("PodCertificateRequest") {
		podCerts = podcerts.New(podcerts.Config{Client: c.api, NodeName: name, Events: podEvents,
			Pods: podsOf{pod: func(uid types.UID) *v1.Pod { return prov.Pod(uid) }, active: func() []*v1.Pod { return prov.ActivePods() }}})
		podCertsIface = podCerts
	}
	// The kubelet's image pull records, behind their gate.
	var pulls *pullrecords.Manager
	var pullsIface podspec.PullRecords
	if o.gates.Enabled("KubeletEnsureSecretPulledImages") {
		if pulls, err = newPullRecords(ctx, o, rt); err != nil {
			return err
		}
		pullsIface = pulls
	}
	spec := podspec.New(podspec.Config{
		RootDir: o.rootDir, HostIPs: []string{nodeIP},
		ClusterDNS: o.clusterDNS, ClusterDomain: o.clusterDomain, ResolvConf: o.resolvConf,
		Objects: podspec.NewObjectCache(ctx, c.api, clock.RealClock{}), Services: inf.services.Lister(), Events: podEvents, Node: nd, Runtime: rt,
		Pod:     func(uid types.UID) *v1.Pod { return prov.Pod(uid) },
		Devices: dm, Claims: claims, ActivePods: activeAllocated, Swap: swap,
		PersistentVolumes: c.api.CoreV1(), CSI: csiVolumes,
		RuntimeClasses: inf.runtimeClasses.Lister(), RuntimeClassesSynced: inf.runtimeClasses.Informer().HasSynced,
		CredentialProviders: creds, PullRecords: pullsIface,
		TrustBundles: trustBundles, Gates: o.gates, PodCertificates: podCertsIface,
		TracerProvider: o.tracer,
	})
	backoff := lifecycle.DefaultBackoff
	backoff.Max = o.maxRestartPeriod
	pods := podsync.New(podsync.Config{Client: c.api, Informer: inf.pods.Informer(), InHand: syncLoop.Begin})
	prov = provider.New(ctx, provider.Config{
		NodeIPs: []string{nodeIP}, RootDir: o.rootDir, PodLogsDir: o.podLogsDir, Backoff: backoff,
		Client: c.api, Statuses: pods.Statuses(), Pods: inf.pods.Lister(), PodsSynced: inf.pods.Informer().HasSynced,
		Containers: rt, Host: spec, Events: podEvents, Node: nd,
		TracerProvider: o.tracer,
	})
	shutdown := node.NewShutdownManager(node.ShutdownConfig{
		GracePeriod: o.shutdownGrace, CriticalGracePeriod: o.shutdownCritical,
	}, nd, prov, pods.Statuses(), events)
	// Static pods are the node's own second source of pods, fed through
	// the same provider path as the API's; they start now, whether or not
	// the API server answers.
	static := newStaticPods(staticCfg, c.api, inf.pods.Informer(), inf.node.Informer(), pods.Statuses())
	staticRef.Store(static)
	go spec.Run(ctx)
	if podCerts != nil {
		go podCerts.Run(ctx)
	}
	go prov.Run(ctx)
	go static.Run(ctx, prov)
	go rt.RotateLogs(ctx, rotation)
	go rt.Cgroups().RefreshQOS(ctx, runtime.QOSRefreshInterval, func() (int64, bool) {
		pods, ok := activeAllocated()
		return podspec.BurstableMilliCPU(pods), ok
	})
	imageGC := gc.NewImageGC(rt, imagePolicy, clock.RealClock{}, events, nd.Ref())
	containerGC := gc.NewContainerGC(rt, o.containerGCPolicy(), clock.RealClock{}, events, nd.Ref())
	if pulls != nil {
		imageGC.OnCollected(func(_ []string, began time.Time) { prunePullRecords(ctx, rt, pulls, began) })
	}
	go imageGC.Run(ctx, o.imageGCPeriod)
	go containerGC.Run(ctx, o.containerGC)
	usage := diskusage.New(rt, o.volumeStatsPeriod, clock.RealClock{})
	go usage.Run(ctx)
	evictions := eviction.New(evictionCfg, nd, prov, evictionStats{rt, layout, usage}, containerGC.GarbageCollect, imageGC.DeleteUnusedImages,
		events, nd.Ref(), clock.RealClock{})
	// The node's pressure conditions are the eviction manager's, from its
	// own observations each round.
	nd.SetPressure(evictions)
	go evictions.Run(ctx, o.evictionInterval)
	go nd.Run(ctx, o.statusUpdateFreq)
	// A pulled or removed image shows in status.images at once.
	go rt.WatchImages(ctx, nd.UpdateStatus)
	go func() {
		if err := rt.Network().Watch(ctx, nd.UpdateStatus); err != nil {
			log.WithError(err).Error("CNI config dir no longer watched: changes show at the next status check only")
		}
	}()
	go shutdown.Run(ctx)

	nc, err := newNodeController(o, c.api, nd)
	if err != nil {
		return err
	}
	// The first sweep once podsync was handed every pod (it starts once
	// the node is registered): a pod removed from the API before then
	// reaches no RemovePod, and the sweep cleans it up at once.
	// The static pods too: until they are handed over, their containers
	// would look like leftovers.
	go prov.SweepOrphans(ctx, inf.pods.Lister(), func() bool { return pods.HasSynced() && static.HasSynced() })
	inf.start(ctx)

	cert, err := o.servingCert(ctx, name, c.api, inf.node.Lister())
	if err != nil {
		return err
	}
	if err := server.Serve(ctx, server.Config{
		Addr: net.JoinHostPort(o.address, strconv.Itoa(int(o.port))),
		Cert: cert, ClientCAFile: o.clientCA,
		AuthCache:         server.AuthCache{TokenTTL: o.authnCacheTTL, AllowedTTL: o.authzAllowedTTL, DeniedTTL: o.authzDeniedTTL},
		StreamIdleTimeout: o.streamIdleTimeout, StreamCreationTime: 30 * time.Second,
		NodeName: name, Client: c.api, Pods: prov, APIPods: inf.pods.Lister(), Runtime: rt, Events: podEvents,
		Node: nd, Stats: rt, Usage: usage, Volumes: layout, CSI: csiVolumes, Cgroups: rt, Metrics: append(append(prov.Metrics(), imageGC.Metrics()...), credMetrics...),
		ProbeMetrics: []prometheus.Collector{probes.ProbeTotal},
		Profiling:    o.profiling,
		Configz:      o.kubeletConfig,
		Health:       checks,
		SystemLogs:   o.systemLogHandler, SystemLogQuery: o.systemLogQuery && o.gates.Enabled("NodeLogQuery"),
	}); err != nil {
		return err
	}
	if o.healthzPort > 0 {
		checks.Serve(ctx, net.JoinHostPort(o.healthzAddress, strconv.Itoa(int(o.healthzPort))))
	}

	errs := make(chan error, 2)
	go func() { errs <- nc.Run(ctx) }()
	select {
	case <-nc.Ready():
	case err := <-errs:
		return fmt.Errorf("node controller: %w", err)
	}
	log.WithFields(log.Fields{"node": name, "ip": nodeIP, "root": filepath.Clean(o.rootDir)}).Info("node registered")
	go node.NewLease(ctx, c.heartbeat, name).Run(ctx)
	go func() { errs <- pods.Run(ctx, prov, podWorkers) }()
	// Registered and serving: systemd may start what comes after the
	// unit (Type=notify), and the watchdog is pinged while healthy.
	sd := health.Systemd{}
	notify(sd, daemon.SdNotifyReady)
	if watchdog > 0 {
		log.WithField("interval", watchdog).Info("pinging systemd's watchdog while healthy")
		go health.Watchdog(ctx, clock.RealClock{}, sd, watchdog, checks.Healthy)
	}
	select {
	case <-ctx.Done():
		notify(sd, daemon.SdNotifyStopping)
		return nil
	case err := <-errs:
		return err
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

// identity is the node's name and IP: the flags', else the host name and
// the address of the default route's interface, as the kubelet picks them.
func (o *options) identity() (name, nodeIP string, err error) {
	name = o.hostnameOverride
	if name == "" {
		if name, err = os.Hostname(); err != nil {
			return "", "", err
		}
	}
	nodeIP = o.nodeIP
	if nodeIP == "" {
		if nodeIP, err = node.DefaultIP(); err != nil {
			return "", "", err
		}
	}
	if ip := net.ParseIP(nodeIP); ip == nil {
		return "", "", fmt.Errorf("invalid --node-ip %q", nodeIP)
	} else if ip.IsLoopback() {
		log.Warn("node IP is a loopback address: only this host can reach pods' host ports and the kubelet API")
	}
	return name, nodeIP, nil
}

// nodeConfig is the node as the flags describe it.
func (o *options) nodeConfig(name, nodeIP string) (node.Config, error) {
	taints, err := parseTaints(o.taints)
	if err != nil {
		return node.Config{}, err
	}
	if err := validateNodeLabels(o.nodeLabels); err != nil {
		return node.Config{}, err
	}
	thresholds, err := node.ParseThresholds(o.evictionHard)
	if err != nil {
		return node.Config{}, fmt.Errorf("--eviction-hard: %w", err)
	}
	if o.cgroupsPerQOS {
		// The pods' cgroup exists: its memory is watched too.
		thresholds = thresholds.WithAllocatable()
	}
	reserved, err := parseResources(o.systemReserved, o.kubeReserved)
	if err != nil {
		return node.Config{}, err
	}
	return node.Config{
		Name: name, InternalIPs: []string{nodeIP}, ExternalIP: o.externalIP,
		Labels: o.nodeLabels, Taints: taints, MaxPods: o.maxPods, Reserved: reserved,
		EvictionHard: thresholds, RootDir: o.rootDir, Port: o.port, Version: node.KubeletVersion,
		MaxImages: o.maxImages,
	}, nil
}

func newRuntime(o *options, nodeIP string, eventStream func(error)) (*runtime.Runtime, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cgroups, err := o.cgroupConfig()
	if err != nil {
		return nil, err
	}
	return runtime.New(runtime.Config{
		Cgroups:  cgroups,
		Endpoint: o.runtimeEndpoint, Namespace: o.containerdNS, RootDir: o.rootDir,
		Executable: self, NodeIP: nodeIP,
		CNIConfDir: o.cniConfDir, CNIBinDirs: o.cniBinDirs, CNICacheDir: o.cniCacheDir,
		CNIDefaultBridge:  o.cniDefaultBridge,
		RegistryConfigDir: o.registryConfigDir,
		CDISpecDirs:       o.cdiSpecDirs,
		PodLogsDir:        o.podLogsDir,
		ContainerLogsDir:  o.containerLogsDir,
		EventStream:       eventStream,
		TracerProvider:    o.tracer,
	})
}

// allocatedPods are the node's active pods as the QoS cgroups count them:
// the provider's at their allocated resources (an in-place resize counts
// once admitted, not when asked for), and those of the API it has no
// worker for yet (just after a restart) at their spec. ok is false until
// the API's pods are known.
func allocatedPods(api func() ([]*v1.Pod, bool), workers func() []*v1.Pod, worker func(types.UID) *v1.Pod) ([]*v1.Pod, bool) {
	pods, ok := api()
	if !ok {
		return nil, false
	}
	out := workers()
	for _, p := range pods {
		if worker(p.UID) == nil {
			out = append(out, p)
		}
	}
	return out, true
}

// podsOf adapts the provider's registry, made after the manager that
// reads it, to podcerts.Pods.
type podsOf struct {
	pod    func(types.UID) *v1.Pod
	active func() []*v1.Pod
}

func (p podsOf) Pod(uid types.UID) *v1.Pod { return p.pod(uid) }
func (p podsOf) ActivePods() []*v1.Pod     { return p.active() }
