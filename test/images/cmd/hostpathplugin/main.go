// Command hostpathplugin is a STAND-IN for upstream's
// registry.k8s.io/sig-storage/hostpathplugin (csi-driver-host-path), whose
// module the Go proxy does not serve: it runs hostlet's own test driver
// (test/images/csihostdir, node and controller services, block volumes)
// under the upstream plugin's flags, so e2e.test's embedded csi-hostpath
// deployment (test/e2e/testing-manifests/storage-csi/hostpath) runs
// unchanged. The conformance run (test/conformance -csi-hostpath) puts it
// into an image of the upstream name.
//
// With -proxy-endpoint it is upstream's proxy instead (proxy.go): the CSI
// mock specs' deployment, whose driver e2e.test serves itself.
//
// Snapshots and clones it makes as copies (csihostdir/snapshot.go). What
// it does not do that upstream does: volume modification
// (--enable-controller-modify-volume is accepted and ignored) and the
// lifecycle checks of --check-volume-lifecycle; the testsuites that need
// them fail or are skipped by the run.
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/hostlet/hostlet/test/images/csihostdir"
)

func main() {
	var cfg csihostdir.Config
	var endpoint, proxyEndpoint string
	flag.StringVar(&cfg.Name, "drivername", "hostpath.csi.k8s.io", "the driver's name")
	flag.StringVar(&cfg.NodeID, "nodeid", "", "the node ID NodeGetInfo answers")
	flag.StringVar(&endpoint, "endpoint", "unix:///csi/csi.sock", "the CSI endpoint")
	flag.StringVar(&cfg.StateDir, "statedir", "/csi-data-dir", "where volumes and the call log are kept")
	flag.StringVar(&proxyEndpoint, "proxy-endpoint", "", "instead of a driver, pair each connection to -endpoint with one accepted here (tcp://:9000): the CSI mock deployment's")
	flag.Int64Var(&cfg.MaxVolumes, "maxvolumespernode", 0, "max_volumes_per_node of NodeGetInfo")
	flag.Int64Var(&cfg.MaxVolumes, "attach-limit", 0, "max_volumes_per_node of NodeGetInfo (upstream's other name for it; the CSI mock specs pass this one)")
	verbosity := flag.Int("v", 0, "at 5 or more every CSI call is logged as upstream's \"gRPCCall: {json}\" line, which e2e.test's CSI mock specs read from the container's log")
	// Upstream's flags the e2e deployments pass, accepted so they run
	// unchanged; none changes what this stand-in does. The booleans are
	// booleans, as upstream's: the CSI mock specs append "--enable-attach
	// --attach-limit 2", which a string flag would swallow.
	for _, name := range []string{"accepted-mutable-parameter-names", "capacity", "max-volume-size"} {
		flag.String(name, "", "accepted for upstream's hostpathplugin, ignored")
	}
	for _, name := range []string{"node-expand-required", "enable-controller-modify-volume", "check-volume-lifecycle",
		"ephemeral", "enable-topology", "enable-volume-expansion", "enable-attach"} {
		flag.Bool(name, false, "accepted for upstream's hostpathplugin, ignored")
	}
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if proxyEndpoint != "" {
		if err := runProxy(ctx, endpoint, proxyEndpoint); err != nil {
			log.Fatal(err)
		}
		return
	}
	if cfg.NodeID == "" {
		log.Fatal("--nodeid is required")
	}
	cfg.Endpoint = strings.TrimPrefix(endpoint, "unix://")
	cfg.Stage, cfg.Controller = true, true
	if *verbosity >= 5 {
		cfg.Interceptor = logCalls
	}
	if _, err := csihostdir.Start(ctx, cfg); err != nil {
		log.Fatal(err)
	}
	log.Printf("hostpathplugin stand-in (hostlet's csihostdir): driver %s, node %s, endpoint %s, max volumes %d", cfg.Name, cfg.NodeID, cfg.Endpoint, cfg.MaxVolumes)
	<-ctx.Done()
}
