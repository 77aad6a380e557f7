// Command livenessprobe is a STAND-IN for upstream's
// registry.k8s.io/sig-storage/livenessprobe, whose module the Go proxy does
// not serve. It does what upstream documents: serve /healthz (on
// --health-port, or --http-endpoint) answering 200 when the driver's CSI
// Probe (over --csi-address) says it is ready and 500 otherwise, so the
// driver container's livenessProbe checks the driver. The conformance run
// (test/conformance -csi-hostpath) puts it into an image of the upstream
// name.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/http"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	csiAddress := flag.String("csi-address", "/run/csi/socket", "the driver's CSI socket")
	port := flag.String("health-port", "9808", "the port /healthz is served on (all addresses)")
	endpoint := flag.String("http-endpoint", "", "host:port to serve /healthz on, instead of --health-port")
	timeout := flag.Duration("probe-timeout", time.Second, "the timeout of each Probe")
	for _, name := range []string{"v", "metrics-address", "metrics-path", "log-format"} {
		flag.String(name, "", "accepted for upstream's livenessprobe, ignored")
	}
	flag.Parse()
	conn, err := grpc.NewClient("unix://"+*csiAddress, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	id := csipb.NewIdentityClient(conn)
	http.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), *timeout)
		defer cancel()
		resp, err := id.Probe(ctx, &csipb.ProbeRequest{})
		switch {
		case err != nil:
			http.Error(w, fmt.Sprintf("probe: %v", err), http.StatusInternalServerError)
		case resp.GetReady() != nil && !resp.GetReady().GetValue():
			http.Error(w, "driver responded but is not ready", http.StatusInternalServerError)
		default:
			fmt.Fprintln(w, "ok")
		}
	})
	addr := *endpoint
	if addr == "" {
		addr = ":" + *port
	}
	log.Printf("livenessprobe stand-in: /healthz on %s probes %s", addr, *csiAddress)
	log.Fatal(http.ListenAndServe(addr, nil))
}
