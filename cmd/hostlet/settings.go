package main

import (
	"fmt"
	"net"
	"os"
	"time"

	"github.com/hostlet/hostlet/provider/eviction"
	"github.com/hostlet/hostlet/provider/gc"
	"github.com/hostlet/hostlet/provider/health"
	"github.com/hostlet/hostlet/provider/node"
	"github.com/hostlet/hostlet/provider/podspec"
	"github.com/hostlet/hostlet/provider/server"
	"github.com/hostlet/hostlet/provider/staticpod"
	"github.com/hostlet/hostlet/runtime"
	log "github.com/sirupsen/logrus"
	"k8s.io/component-helpers/node/util/sysctl"
)

// settings are what the flags say, checked before anything starts.
type settings struct {
	name, nodeIP string
	node         node.Config
	eviction     eviction.Config
	rotation     runtime.LogRotation
	imagePolicy  gc.ImagePolicy
	// watchdog is the unit's watchdog interval, 0 without one.
	watchdog time.Duration
	static   staticpod.Config
	// tls is what the kubelet API's TLS accepts.
	tls server.TLS
	// auth is how the kubelet API authenticates and authorizes.
	auth server.AuthMode
	// userns is the node's range for pods' user namespaces.
	userns podspec.UsernsRange
}

func (o *options) settings() (s settings, err error) {
	if s.name, s.nodeIP, err = o.identity(); err != nil {
		return s, err
	}
	if s.node, err = o.nodeConfig(s.name, s.nodeIP); err != nil {
		return s, err
	}
	if s.eviction, err = o.evictionConfig(s.node); err != nil {
		return s, err
	}
	if s.rotation, err = o.logRotation(); err != nil {
		return s, err
	}
	if s.imagePolicy, err = o.imageGC(); err != nil {
		return s, err
	}
	// A unit's watchdog hostlet cannot keep stops it at once, as the
	// kubelet.
	if s.watchdog, err = health.WatchdogInterval(); err != nil {
		return s, err
	}
	if s.static, err = o.staticPodConfig(s.name); err != nil {
		return s, err
	}
	if o.protectKernelDefaults {
		if err := node.CheckKernelDefaults(sysctl.New()); err != nil {
			return s, fmt.Errorf("protectKernelDefaults: %w", err)
		}
	}
	if _, err := podspec.OOMKillGroup(!cgroupV1(), o.kubeletConfig.SingleProcessOOMKill); err != nil {
		return s, err
	}
	if s.userns, err = podspec.UserNamespaceRange(o.idsPerPod(), o.maxPods, nil, nil); err != nil {
		return s, err
	}
	if !o.enableServer && o.registryMirror {
		// hostlet's own: the mirror's only door is the kubelet API.
		return s, fmt.Errorf("--registry-mirror serves the other nodes on the kubelet API, which enableServer: false does not serve")
	}
	s.auth = server.AuthMode{Anonymous: o.anonymousAuth, NoTokenReview: !o.tokenWebhook}
	if s.auth.AlwaysAllow, err = server.ParseAuthorizationMode(o.authorizationMode); err != nil {
		return s, err
	}
	var warnings []string
	if s.tls, warnings, err = server.ParseTLS(o.tlsMinVersion, o.tlsCipherSuites); err != nil {
		return s, err
	}
	for _, w := range warnings {
		log.Warn(w)
	}
	return s, nil
}

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
