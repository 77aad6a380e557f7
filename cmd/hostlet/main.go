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
	"syscall"
	"time"

	"github.com/hostlet/hostlet/lifecycle"
	"github.com/hostlet/hostlet/provider"
	"github.com/hostlet/hostlet/provider/join"
	"github.com/hostlet/hostlet/runtime"
	log "github.com/sirupsen/logrus"
	vklog "github.com/virtual-kubelet/virtual-kubelet/log"
	vknode "github.com/virtual-kubelet/virtual-kubelet/node"
	"github.com/virtual-kubelet/virtual-kubelet/node/nodeutil"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "pause" {
		runtime.RunPause() // PID 1 of a pod sharing its process namespace
		return
	}
	if len(os.Args) > 1 && (os.Args[1] == "join" || os.Args[1] == "leave") {
		runSubcommand(os.Args[1], os.Args[2:])
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
	if o.testPanicHooks {
		provider.EnableTestPanicHooks()
	}
	vklog.L = vkLogger{log.WithField("component", "virtual-kubelet")}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, &o); err != nil && !errors.Is(err, context.Canceled) {
		log.WithError(err).Fatal("hostlet failed")
	}
}

func run(ctx context.Context, o *options) error {
	name := o.hostnameOverride
	if name == "" {
		h, err := os.Hostname()
		if err != nil {
			return err
		}
		name = h
	}
	nodeIP := o.nodeIP
	if nodeIP == "" {
		ip, err := provider.DefaultNodeIP()
		if err != nil {
			return err
		}
		nodeIP = ip
	}
	if ip := net.ParseIP(nodeIP); ip == nil {
		return fmt.Errorf("invalid --node-ip %q", nodeIP)
	} else if ip.IsLoopback() {
		log.Warn("node IP is a loopback address: only this host can reach pods' host ports and the kubelet API")
	}
	taints, err := parseTaints(o.taints)
	if err != nil {
		return err
	}
	if err := validateNodeLabels(o.nodeLabels); err != nil {
		return err
	}
	thresholds, err := provider.ParseThresholds(o.evictionHard)
	if err != nil {
		return fmt.Errorf("--eviction-hard: %w", err)
	}
	reserved, err := parseResources(o.systemReserved, o.kubeReserved)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.rootDir, 0o750); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}

	// A kubeconfig join wrote has its client certificate rotated (selfnodeclient CSRs).
	restCfg, err := join.RotatingClientConfig(ctx, o.kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	// The kubelet's API client limits (--kube-api-qps/--kube-api-burst);
	// events get a client of their own, as the kubelet's do, so a burst of
	// events never delays a status write.
	restCfg.QPS, restCfg.Burst = o.kubeAPIQPS, o.kubeAPIBurst
	restCfg.UserAgent = "hostlet/" + provider.KubeletVersion
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	eventClient, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	// Lease renewals time out within a renewal interval, as the kubelet's
	// heartbeat client does, so a stuck connection cannot stall them.
	heartbeatCfg := *restCfg
	heartbeatCfg.Timeout = min(o.statusUpdateFreq, provider.NodeLeaseDuration*time.Second)
	heartbeatClient, err := kubernetes.NewForConfig(&heartbeatCfg)
	if err != nil {
		return err
	}

	rt, err := runtime.New(runtime.Config{
		Endpoint: o.runtimeEndpoint, Namespace: o.containerdNS, RootDir: o.rootDir,
		Executable: self, NodeIP: nodeIP,
		CNIConfDir: o.cniConfDir, CNIBinDirs: o.cniBinDirs, CNICacheDir: o.cniCacheDir,
		RegistryConfigDir: o.registryConfigDir,
	})
	if err != nil {
		return err
	}
	defer rt.Close()

	// Pods of this node only; Services cluster-wide (a node may read them)
	// for service environment variables. Secrets and ConfigMaps are fetched
	// per pod, never listed: the Node authorizer forbids that.
	podInformers := informers.NewSharedInformerFactoryWithOptions(client, 0, nodeutil.PodInformerFilter(name))
	podInformer := podInformers.Core().V1().Pods()
	svcInformers := informers.NewSharedInformerFactory(client, 0)
	svcInformer := svcInformers.Core().V1().Services()
	// virtual-kubelet insists on these informers but, with its own env
	// resolution off, never reads them; they are never started.
	unused := informers.NewSharedInformerFactory(client, 0).Core().V1()

	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&corev1client.EventSinkImpl{Interface: eventClient.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	events := broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "kubelet", Host: name})

	// This node's object only, for admission against the labels and taints
	// the cluster gave it.
	nodeInformers := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.FieldSelector = "metadata.name=" + name }))
	nodeInformer := nodeInformers.Core().V1().Nodes()
	node, err := provider.NewNode(ctx, provider.NodeConfig{
		Name: name, InternalIPs: []string{nodeIP}, ExternalIP: o.externalIP,
		Labels: o.nodeLabels, Taints: taints, MaxPods: o.maxPods, Reserved: reserved,
		EvictionHard: thresholds, RootDir: o.rootDir, Port: o.port, Version: provider.KubeletVersion,
		Events: events, Lister: nodeInformer.Lister(), Informer: nodeInformer.Informer(),
		Client: heartbeatClient,
	}, rt)
	if err != nil {
		return err
	}

	backoff := lifecycle.DefaultBackoff
	backoff.Max = o.maxRestartPeriod
	prov := provider.New(ctx, provider.Config{
		NodeName: name, NodeIPs: []string{nodeIP}, RootDir: o.rootDir,
		ClusterDNS: o.clusterDNS, ClusterDomain: o.clusterDomain, ResolvConf: o.resolvConf,
		Backoff: backoff,
	}, client, rt, events, svcInformer.Lister(), node)
	go prov.Run(ctx)
	go node.Run(ctx, o.statusUpdateFreq)
	go provider.NewShutdownManager(provider.ShutdownConfig{
		GracePeriod: o.shutdownGrace, CriticalGracePeriod: o.shutdownCritical,
	}, node, prov, events).Run(ctx)

	pc, err := vknode.NewPodController(vknode.PodControllerConfig{
		PodClient: prov.PodClient(client.CoreV1()),
		// virtual-kubelet's own events ("Create pod in provider") are not
		// the kubelet's; hostlet records the kubelet's events itself.
		EventRecorder:             discard{},
		Provider:                  prov,
		PodInformer:               podInformer,
		SecretInformer:            unused.Secrets(),
		ConfigMapInformer:         unused.ConfigMaps(),
		ServiceInformer:           svcInformer,
		SkipDownwardAPIResolution: true,
		// virtual-kubelet's queues otherwise share a 10 QPS bucket per queue:
		// a burst of pods waits on it although creating a pod in hostlet
		// writes nothing. Only failures back off, per pod; API writes are
		// bounded by the client's --kube-api-qps. Status writes stay
		// coalesced per pod (one queue item, the latest status).
		SyncPodsFromKubernetesRateLimiter:    perPodBackoff(),
		DeletePodsFromKubernetesRateLimiter:  perPodBackoff(),
		SyncPodStatusFromProviderRateLimiter: perPodBackoff(),
	})
	if err != nil {
		return err
	}
	// virtual-kubelet writes the status on every change hostlet reports and
	// otherwise every report period; the Lease is the kubelet's own
	// controller (see provider.NewNodeLease), not virtual-kubelet's.
	nc, err := vknode.NewNodeController(node, node.Object(), client.CoreV1().Nodes(),
		vknode.WithNodePingInterval(o.statusReportFreq))
	if err != nil {
		return err
	}

	if err := prov.WatchPods(podInformer.Informer()); err != nil {
		return err
	}
	go prov.SweepOrphans(ctx, podInformer.Lister(), podInformer.Informer().HasSynced)
	podInformers.Start(ctx.Done())
	nodeInformers.Start(ctx.Done())
	svcInformers.Start(ctx.Done())
	svcInformers.WaitForCacheSync(ctx.Done())

	if err := prov.Serve(ctx, provider.ServerConfig{
		Addr:     net.JoinHostPort(o.address, strconv.Itoa(int(o.port))),
		CertFile: o.tlsCert, KeyFile: o.tlsKey, ClientCAFile: o.clientCA,
		StreamIdleTimeout: 4 * time.Hour, StreamCreationTime: 30 * time.Second,
	}, client, podInformer.Lister()); err != nil {
		return err
	}

	errs := make(chan error, 2)
	go func() { errs <- nc.Run(ctx) }()
	select {
	case <-nc.Ready():
	case err := <-errs:
		return fmt.Errorf("node controller: %w", err)
	}
	log.WithFields(log.Fields{"node": name, "ip": nodeIP, "root": filepath.Clean(o.rootDir)}).Info("node registered")
	go provider.NewNodeLease(ctx, heartbeatClient, name).Run(ctx)
	go func() { errs <- pc.Run(ctx, 8) }()
	select {
	case <-ctx.Done():
		return nil
	case err := <-errs:
		return err
	}
}

func perPodBackoff() workqueue.TypedRateLimiter[any] {
	return workqueue.NewTypedItemExponentialFailureRateLimiter[any](5*time.Millisecond, 1000*time.Second)
}

// discard is an EventRecorder that records nothing.
type discard struct{}

func (discard) Event(kruntime.Object, string, string, string)                                      {}
func (discard) Eventf(kruntime.Object, string, string, string, ...any)                             {}
func (discard) AnnotatedEventf(kruntime.Object, map[string]string, string, string, string, ...any) {}
