package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"path/filepath"
	"testing"
)

// TestProxyPairsConnections: a TCP connection opened first (as e2e.test
// pre-opens its port-forwarded ones) is paired with the next unix one;
// bytes go both ways; closing the TCP side closes the unix side; the next
// unix connection gets the next TCP one.
func TestProxyPairsConnections(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	sock := filepath.Join(t.TempDir(), "csi.sock")
	unixL, err := listen("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	tcpL, err := listen("tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- proxyLoop(ctx, unixL, tcpL) }()

	for i, msg := range []string{"first", "second"} {
		// The TCP side connects before there is a unix client.
		server, err := net.Dial("tcp", tcpL.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := server.Write([]byte("hello " + msg + "\n")); err != nil {
			t.Fatal(err)
		}
		client, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		got, err := bufio.NewReader(client).ReadString('\n')
		if err != nil || got != "hello "+msg+"\n" {
			t.Fatalf("pair %d: client read %q, %v", i, got, err)
		}
		if _, err := client.Write([]byte("back\n")); err != nil {
			t.Fatal(err)
		}
		back, err := bufio.NewReader(server).ReadString('\n')
		if err != nil || back != "back\n" {
			t.Fatalf("pair %d: server read %q, %v", i, back, err)
		}
		// The server side goes away: the client sees EOF.
		server.Close()
		if rest, err := io.ReadAll(client); err != nil || len(rest) != 0 {
			t.Fatalf("pair %d: after the server closed, client read %q, %v; want EOF", i, rest, err)
		}
		client.Close()
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("proxyLoop after cancel: %v", err)
	}
	if _, err := net.Dial("unix", sock); err == nil {
		t.Fatal("the socket still accepts after cancel")
	}
}
