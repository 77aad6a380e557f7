// Command testapp is the workload image used by hostlet's e2e tests. One
// static binary covers the behaviours the tests need; flags choose which and
// combine freely.
//
// Servers (each runs only when its address is set):
//
//	--http=ADDR          HTTP server, e.g. --http=:8080
//	                       GET /           answers the hostname
//	                       GET /echo?msg=X answers X
//	                       /healthz        200 "ok" while healthy, 500 "unhealthy" otherwise
//	                       /healthz/fail   (any method) switches to unhealthy
//	                       /healthz/ok     (any method) switches to healthy
//	                       GET /exit?code=N answers, then exits with N
//	                     every request is logged to stdout as "TIME http: METHOD PATH"
//	--tcp=ADDR           raw TCP listener: writes "ok\n" to each connection and closes it
//	--grpc=ADDR          grpc.health.v1 Health service; status follows the healthy switch
//	--grpc-service=NAME  extra service name served by the gRPC health service besides ""
//	                     (repeatable); other names answer NOT_FOUND
//
// Health:
//
//	--healthy=false          start unhealthy
//	--healthy-after=DURATION healthy only once DURATION has passed since start
//	                         (and while the switch says healthy)
//
// Start-up actions, run in this order before anything else:
//
//	--write=PATH=CONTENT  write CONTENT to PATH, creating parent dirs (repeatable)
//	--print-env           print the environment, sorted, one KEY=VALUE a line
//	--log=TEXT            print TEXT as a line (repeatable)
//
// Lifetime:
//
//	--sleep=DURATION   exit after DURATION (even with servers running)
//	--exit-code=N      exit code when the process finishes on its own (default 0)
//
// Without --sleep, testapp runs until killed if any server is set or --signals
// / --ignore-term is given, and exits at once with --exit-code otherwise. With
// no arguments at all it behaves as --http=:8080 --tcp=:8081 --grpc=:8082, so
// the image does something useful when run bare.
//
// Signals:
//
//	--signals               log every received signal as "TIME signal: SIGTERM"
//	--term-delay=DURATION   wait this long after a terminating signal before exiting
//	--term-exit-code=N      exit code after a terminating signal (default 0)
//	--ignore-term           never exit on SIGTERM (it is still logged with --signals),
//	                        so the kill at the end of a grace period can be observed
//
// Terminating signals (SIGTERM, SIGINT, SIGQUIT, SIGHUP, SIGUSR1, SIGUSR2) are
// always handled, with or without --signals: running as PID 1 in a container a
// signal without a handler would otherwise be dropped by the kernel or end the
// Go runtime with exit code 2.
//
// TIME is RFC 3339 with nanoseconds, in UTC.
package main

import (
	"fmt"
	"os"
	"sort"
	"time"
)

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "testapp:", err)
		os.Exit(2)
	}
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "testapp:", err)
		os.Exit(1)
	}
}

// run performs the start-up actions, starts the servers and then waits for
// whatever ends the process; it returns only on start-up errors.
func run(cfg *config) error {
	start := time.Now()
	// Trap first so a signal sent as soon as the first line shows is seen.
	trapSignals(cfg)
	for _, w := range cfg.writes {
		if err := writeFile(w.path, w.content); err != nil {
			return err
		}
	}
	if cfg.printEnv {
		env := os.Environ()
		sort.Strings(env)
		for _, kv := range env {
			printLine(kv)
		}
	}
	for _, l := range cfg.logs {
		printLine(l)
	}

	h := newHealth(cfg.healthy, start, cfg.healthyAfter)

	if cfg.httpAddr != "" {
		if err := serveHTTP(cfg.httpAddr, h); err != nil {
			return err
		}
	}
	if cfg.tcpAddr != "" {
		if err := serveTCP(cfg.tcpAddr); err != nil {
			return err
		}
	}
	if cfg.grpcAddr != "" {
		if err := serveGRPC(cfg.grpcAddr, h, cfg.grpcServices); err != nil {
			return err
		}
	}

	switch {
	case cfg.sleep > 0:
		time.Sleep(cfg.sleep - time.Since(start))
		exit(cfg.exitCode)
	case cfg.longRunning():
		select {}
	default:
		exit(cfg.exitCode)
	}
	return nil
}
