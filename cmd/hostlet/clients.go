package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"time"

	"github.com/hostlet/hostlet/provider/join"
	"github.com/hostlet/hostlet/provider/node"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/tracing"
)

// clients are the node's API clients, as the kubelet has them: events get
// a client of their own, so a burst of events never delays a status write,
// and the heartbeat's times out within a renewal interval, so a stuck
// connection cannot stall the Lease.
type clients struct {
	api, events, heartbeat kubernetes.Interface
	// tls is the API client's TLS: the node's client certificate (rotated
	// with --rotate-certificates), which the registry mirror presents to
	// the other nodes too.
	tls *tls.Config
}

func newClients(ctx context.Context, o *options) (clients, error) {
	// With --rotate-certificates, a kubeconfig join wrote has its client
	// certificate rotated (selfnodeclient CSRs); any other is used as it is.
	var restCfg *rest.Config
	var err error
	if o.rotateCerts {
		restCfg, err = join.RotatingClientConfig(ctx, o.kubeconfig)
	} else {
		restCfg, err = clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	}
	if err != nil {
		return clients{}, fmt.Errorf("kubeconfig: %w", err)
	}
	// The kubelet's API client limits (--kube-api-qps/--kube-api-burst).
	restCfg.QPS, restCfg.Burst = float32(o.kubeAPIQPS), o.kubeAPIBurst
	restCfg.UserAgent = "hostlet/" + node.KubeletVersion
	// The kubelet's contentType (--kube-api-content-type): protobuf.
	setContentType(restCfg, o.contentType)
	// Traced as the kubelet's API client (startTracing ran before): each
	// request a span, a child of the caller's (a pod's sync), its trace
	// context passed on to the API server.
	if o.tracer != nil {
		restCfg.Wrap(tracing.WrapperFor(o.tracer))
	}
	var c clients
	if c.tls, err = clientTLS(restCfg); err != nil {
		return clients{}, err
	}
	if c.api, err = kubernetes.NewForConfig(restCfg); err != nil {
		return clients{}, err
	}
	// The kubelet's event client: its own limits (--event-qps,
	// --event-burst; 0 is client-go's defaults, 5 and 10, as the
	// kubelet's).
	eventCfg := *restCfg
	eventCfg.QPS, eventCfg.Burst = float32(o.eventQPS), int(o.eventBurst)
	if c.events, err = kubernetes.NewForConfig(&eventCfg); err != nil {
		return clients{}, err
	}
	// As the kubelet's heartbeat client: within a status update and
	// within the Lease's duration.
	heartbeatCfg := *restCfg
	heartbeatCfg.Timeout = min(o.statusUpdateFreq, time.Duration(o.kubeletConfig.NodeLeaseDurationSeconds)*time.Second)
	if c.heartbeat, err = kubernetes.NewForConfig(&heartbeatCfg); err != nil {
		return clients{}, err
	}
	return c, nil
}

// newEventRecorder records events as the kubelet of node name; stop flushes
// and ends the recording.
func newEventRecorder(client kubernetes.Interface, name string) (events record.EventRecorder, stop func()) {
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&corev1client.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "kubelet", Host: name}), broadcaster.Shutdown
}

// clientTLS is the TLS a client config makes, whether client-go builds it
// or a rotating transport (join.RotatingClientConfig) carries it.
func clientTLS(cfg *rest.Config) (*tls.Config, error) {
	if t, ok := cfg.Transport.(*http.Transport); ok && t.TLSClientConfig != nil {
		return t.TLSClientConfig.Clone(), nil
	}
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil || tlsCfg == nil {
		return &tls.Config{}, err
	}
	return tlsCfg, nil
}
