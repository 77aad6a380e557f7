// Command csi-hostdir runs the test CSI driver (test/images/csihostdir) as
// a process: for a node plugin pod or a host process next to hostlet.
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/hostlet/hostlet/test/images/csihostdir"
)

func main() {
	var cfg csihostdir.Config
	flag.StringVar(&cfg.Name, "drivername", "csi-hostdir.hostlet.test", "the driver's name")
	flag.StringVar(&cfg.NodeID, "nodeid", "", "the node ID NodeGetInfo answers")
	flag.StringVar(&cfg.StateDir, "statedir", "/var/lib/csi-hostdir", "where volumes and the call log are kept")
	flag.StringVar(&cfg.Endpoint, "endpoint", "", "the CSI socket")
	flag.StringVar(&cfg.RegistryDir, "registry-dir", "", "the node's plugins_registry (empty: do not register)")
	flag.BoolVar(&cfg.Stage, "stage", true, "offer STAGE_UNSTAGE_VOLUME")
	flag.Int64Var(&cfg.MaxVolumes, "max-volumes", 0, "max_volumes_per_node")
	flag.BoolVar(&cfg.Controller, "controller", false, "serve the controller service too (CreateVolume, ControllerPublishVolume)")
	flag.Parse()
	if cfg.NodeID == "" || cfg.Endpoint == "" {
		log.Fatal("--nodeid and --endpoint are required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	d, err := csihostdir.Start(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		for s := range d.Registered() {
			log.Printf("registration: registered=%v error=%q", s.Registered, s.Error)
		}
	}()
	<-ctx.Done()
}
