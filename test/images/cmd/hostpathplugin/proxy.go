package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"strings"
	"sync"
)

// runProxy is upstream's -proxy-endpoint mode, what e2e.test's CSI mock
// deployment (testing-manifests/storage-csi/mock/csi-mock-proxy.yaml)
// runs: no driver at all, but two listeners, the CSI socket (endpoint) and
// a TCP port (proxyEndpoint, "tcp://:9000"). e2e.test port-forwards to
// the TCP port through the node's kubelet API, keeps up to 10 connections
// open and serves the mock CSI driver itself on each one it accepts. Each
// connection a CSI client (the node, the sidecars) opens on the socket is
// paired with the next one accepted on the TCP port, and bytes are copied
// both ways until either side closes, which closes both. So the TCP
// connections wait in the listen backlog, and the unix ones wait for a TCP
// one, as with socat's UNIX-LISTEN,fork TCP-LISTEN.
//
// It returns once ctx is done (both listeners closed, the socket removed)
// or a listener fails.
func runProxy(ctx context.Context, endpoint, proxyEndpoint string) error {
	unixL, err := listen(endpoint)
	if err != nil {
		return err
	}
	defer unixL.Close()
	tcpL, err := listen(proxyEndpoint)
	if err != nil {
		return err
	}
	defer tcpL.Close()
	log.Printf("proxy: pairing connections of %s with those of %s", unixL.Addr(), tcpL.Addr())
	return proxyLoop(ctx, unixL, tcpL)
}

// proxyLoop pairs each connection accepted on a with the next accepted on
// b until ctx is done (which closes both listeners) or an Accept fails.
func proxyLoop(ctx context.Context, a, b net.Listener) error {
	stop := context.AfterFunc(ctx, func() { a.Close(); b.Close() })
	defer stop()
	for {
		ca, err := a.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accept on %s: %w", a.Addr(), err)
		}
		cb, err := b.Accept()
		if err != nil {
			ca.Close()
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accept on %s: %w", b.Addr(), err)
		}
		go pipe(ca, cb)
	}
}

// pipe copies between a and b both ways; when one side ends (EOF or an
// error) both connections are closed, so the other side sees it too (a
// gRPC client whose server went away reconnects, and gets a fresh pair).
func pipe(a, b net.Conn) {
	var once sync.Once
	closeBoth := func() { a.Close(); b.Close() }
	go func() {
		io.Copy(a, b)
		once.Do(closeBoth)
	}()
	io.Copy(b, a)
	once.Do(closeBoth)
}

// listen opens "unix:///path", "/path" (a stale socket file replaced) or
// "tcp://host:port".
func listen(endpoint string) (net.Listener, error) {
	if addr, ok := strings.CutPrefix(endpoint, "tcp://"); ok {
		return net.Listen("tcp", addr)
	}
	path := strings.TrimPrefix(endpoint, "unix://")
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	return net.Listen("unix", path)
}
