// Command coredns is CoreDNS with the plugins a cluster's Corefile uses
// (kubeadm's, less forward and loop: tests never resolve outside names;
// template answers them NXDOMAIN instead, as an upstream resolver would).
// Its own main imports all ~60 plugins and their cloud SDKs, which made the
// cold build several times longer for nothing the tests use.
package main

import (
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
	_ "github.com/coredns/coredns/plugin/template"

	"github.com/coredns/coredns/coremain"
)

func main() {
	coremain.Run()
}
